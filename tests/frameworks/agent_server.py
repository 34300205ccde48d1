"""A scripted OpenAI-compatible model on 127.0.0.1 for agent frameworks: a tool call, then a final answer.

``POST /{tag}/v1/chat/completions`` and ``POST /{tag}/v1/responses`` (non-streamed,
the final answer; the tag names the scenario:
``smolagents/observed-stream``, ``smolagents/plain-fail400``, ...). A request whose conversation does not yet hold the tool's
result gets a call to its first tool (arguments carry the ARGS canary); one that
holds it gets the final answer: a ``final_answer`` tool call when the request offers
that tool (smolagents), plain text otherwise; DSPy's ChatAdapter gets the
``[[ ## field ## ]]`` sections its prompt asks for (ReAct: lookup, then finish). JSON or SSE stream (tool-call deltas,
the terminal usage chunk only when ``stream_options.include_usage`` is set), as
OpenAI sends them. A tag containing ``fail400``/``fail500`` answers that status
with the ERROR canary in the body.

The official clients' own wire formats answer the same way, a tool call then the answer, JSON or
streamed: ``POST /{tag}/v1/messages`` (Anthropic Messages, SSE events), ``POST
/{tag}/v1beta/models/{m}:generateContent`` and ``:streamGenerateContent?alt=sse`` (Gemini, the
``/v1/`` forms too), ``POST /{tag}/model/{id}/converse`` and ``/converse-stream`` (Bedrock Converse,
the AWS event stream's binary frames; SigV4 headers accepted as they come).

``prompt_tokens`` depends on the request's size, so each request has its own
number; every answer's usage is kept in `served` for the totals check.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

from providers import event_stream_frame

CANARIES = {
    "system": "CANARY-FW-SYSTEM-51c7",
    "user": "CANARY-FW-USER-0e8d",
    "schema": "CANARY-FW-SCHEMA-a93f",
    "arguments": "CANARY-FW-ARGS-77b2",
    "result": "CANARY-FW-RESULT-3d1e",
    "error": "CANARY-FW-ERROR-c640",
}
FINAL_ANSWER = "The answer is forty-two."


@dataclass
class Served:
    tag: str
    stream: bool
    prompt_tokens: int
    completion_tokens: int
    body: dict[str, Any]


@dataclass
class AgentServer:
    url: str = ""
    served: list[Served] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def prompt_tokens(self, tag: str) -> list[int]:
        """What this server reported, request by request, for one scenario tag (successful answers only)."""
        with self.lock:
            return [s.prompt_tokens for s in self.served if s.tag == tag and s.prompt_tokens]

    def requests(self, tag: str) -> list[Served]:
        with self.lock:
            return [s for s in self.served if s.tag == tag]


def _native_format(path: str) -> Optional[str]:
    """Which official client's wire format a path is: anthropic, gemini, bedrock; None for OpenAI's."""
    if path.endswith("/v1/messages"):
        return "anthropic"
    if "/models/" in path and path.endswith((":generateContent", ":streamGenerateContent")):
        return "gemini"
    if "/model/" in path and path.endswith(("/converse", "/converse-stream")):
        return "bedrock"
    return None


def _native_tool_names(fmt: str, body: dict[str, Any]) -> list[str]:
    if fmt == "anthropic":
        return [t["name"] for t in body.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("name"), str)]
    if fmt == "gemini":
        return [d["name"] for t in body.get("tools") or [] for d in t.get("functionDeclarations") or [] if "name" in d]
    specs = [t.get("toolSpec") for t in (body.get("toolConfig") or {}).get("tools") or []]
    return [spec["name"] for spec in specs if isinstance(spec, dict) and "name" in spec]


def _tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


_DSPY_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]")


def _dspy_reply(body: dict[str, Any], has_result: bool) -> Optional[str]:
    """DSPy's ChatAdapter asks for ``[[ ## field ## ]]`` sections in its last user turn: fill them in, in order."""
    messages = body.get("messages") or []
    last = messages[-1].get("content") if messages and isinstance(messages[-1], dict) else None
    if not isinstance(last, str) or "[[ ## completed ## ]]" not in last:
        return None
    tail = last[last.rfind("Respond with the corresponding output fields") :]
    values = {
        "next_thought": "I should look it up." if not has_result else "I have what I need.",
        "next_tool_name": "lookup" if not has_result else "finish",
        "next_tool_args": json.dumps({"query": f"look up {CANARIES['arguments']}"} if not has_result else {}),
        "reasoning": "The archive entry says so.",
        "answer": FINAL_ANSWER,
    }
    sections = [f"[[ ## {f} ## ]]\n{values.get(f, FINAL_ANSWER)}" for f in _DSPY_FIELD.findall(tail) if f != "completed"]
    return "\n\n".join([*dict.fromkeys(sections), "[[ ## completed ## ]]"])


def _reply(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message for this turn: {"content": str} or {"tool_call": (name, arguments)}."""
    names = _tool_names(body)
    has_result = CANARIES["result"] in json.dumps(body.get("messages"))
    dspy = _dspy_reply(body, has_result)
    if dspy is not None:
        return {"content": dspy}
    if not has_result:
        tool = next((n for n in names if n != "final_answer"), None)
        if tool is not None:
            return {"tool_call": (tool, json.dumps({"query": f"look up {CANARIES['arguments']}"}))}
    if "final_answer" in names:
        return {"tool_call": ("final_answer", json.dumps({"answer": FINAL_ANSWER}))}
    if (body.get("response_format") or {}).get("type") == "json_schema":  # structured output: the schema's one field
        return {"content": json.dumps({"answer": FINAL_ANSWER})}
    return {"content": FINAL_ANSWER}


def _handler(server: AgentServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one answer per connection: a stream ends with it

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def date_time_string(self, timestamp: Any = None) -> str:
            return "Sun, 06 Dec 2026 00:00:00 GMT"  # one Date header: an error message quoting it reads the same twice

        def do_GET(self) -> None:  # noqa: N802 - some clients probe /models
            self._json(200, {"object": "list", "data": [{"id": "gpt-4o", "object": "model", "owned_by": "local"}]})

        def do_POST(self) -> None:  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.loads(raw or b"{}")
            path = self.path.split("?", 1)[0]
            native = _native_format(path)
            if native is not None:
                return self._native(native, path, raw, body)
            tag = path.split("/v1/", 1)[0].strip("/")
            stream = bool(body.get("stream"))
            if self.path.split("?", 1)[0].endswith("/responses"):
                return self._responses(tag, raw, body)
            if not self.path.split("?", 1)[0].endswith("/chat/completions"):
                self._record(tag, stream, 0, body)
                return self._json(404, {"error": {"message": f"no route {CANARIES['error']}"}})
            for status in (400, 500):
                if f"fail{status}" in tag:
                    self._record(tag, stream, 0, body)
                    error = {"type": "invalid_request_error", "message": f"rejected: {CANARIES['error']}", "code": None}
                    return self._json(status, {"error": error})
            prompt_tokens = 800 + len(raw) // 7
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 11,
                "total_tokens": prompt_tokens + 11,
                "prompt_tokens_details": {"cached_tokens": 0},
            }
            self._record(tag, stream, prompt_tokens, body)
            reply = _reply(body)
            if stream:
                return self._stream(body, reply, usage)
            message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
            finish = "stop"
            if "tool_call" in reply:
                name, arguments = reply["tool_call"]
                message["tool_calls"] = [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]
                finish = "tool_calls"
            self._json(
                200,
                {
                    "id": "chatcmpl-agent",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": "gpt-4o-2024-08-06",
                    "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                    "usage": usage,
                },
            )

        def _responses(self, tag: str, raw: bytes, body: dict[str, Any]) -> None:
            """The Responses API, non-streamed: the final answer as one output_text message."""
            input_tokens = 700 + len(raw) // 7
            self._record(tag, False, input_tokens, body)
            message = {
                "type": "message",
                "id": "msg_agent",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": FINAL_ANSWER, "annotations": []}],
            }
            self._json(
                200,
                {
                    "id": "resp_agent",
                    "object": "response",
                    "created_at": int(time.time()),
                    "status": "completed",
                    "error": None,
                    "incomplete_details": None,
                    "instructions": body.get("instructions"),
                    "model": "gpt-4o-2024-08-06",
                    "output": [message],
                    "parallel_tool_calls": True,
                    "tool_choice": "auto",
                    "tools": [],
                    "usage": {
                        "input_tokens": input_tokens,
                        "input_tokens_details": {"cached_tokens": 0},
                        "output_tokens": 11,
                        "output_tokens_details": {"reasoning_tokens": 0},
                        "total_tokens": input_tokens + 11,
                    },
                },
            )

        def _native(self, fmt: str, path: str, raw: bytes, body: dict[str, Any]) -> None:
            """An official client's own wire format: Anthropic Messages, Gemini, Bedrock Converse."""
            marker = {"anthropic": "/v1/messages", "gemini": "/models/", "bedrock": "/model/"}[fmt]
            tag = path.split(marker, 1)[0].removesuffix("/v1beta").removesuffix("/v1").strip("/")
            stream = bool(body.get("stream")) or path.endswith((":streamGenerateContent", "/converse-stream"))
            for status in (400, 500):
                if f"fail{status}" in tag:
                    self._record(tag, stream, 0, body)
                    return self._native_error(fmt, status)
            prompt_tokens = 800 + len(raw) // 7
            self._record(tag, stream, prompt_tokens, body)
            names = _native_tool_names(fmt, body)
            call = names[0] if names and CANARIES["result"] not in json.dumps(body) else None
            arguments = {"query": f"look up {CANARIES['arguments']}"}
            if fmt == "anthropic":
                return self._anthropic(body, stream, prompt_tokens, call, arguments)
            if fmt == "gemini":
                return self._gemini(stream, prompt_tokens, call, arguments)
            return self._bedrock(stream, prompt_tokens, call, arguments)

        def _native_error(self, fmt: str, status: int) -> None:
            message = f"rejected: {CANARIES['error']}"
            if fmt == "anthropic":
                kind = "invalid_request_error" if status == 400 else "api_error"
                return self._json(status, {"type": "error", "error": {"type": kind, "message": message}})
            if fmt == "gemini":
                return self._json(status, {"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}})
            data = json.dumps({"message": message}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("x-amzn-ErrorType", "ValidationException" if status == 400 else "InternalServerException")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _anthropic(self, body: dict[str, Any], stream: bool, tokens: int, call: Optional[str], arguments: dict) -> None:
            usage = {"input_tokens": tokens, "output_tokens": 11, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
            if call is not None:
                block: dict[str, Any] = {"type": "tool_use", "id": "toolu_agent1", "name": call, "input": arguments}
                stop = "tool_use"
            else:
                block, stop = {"type": "text", "text": FINAL_ANSWER}, "end_turn"
            message = {
                "id": "msg_agent",
                "type": "message",
                "role": "assistant",
                "model": body.get("model", "claude"),
                "content": [block],
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": usage,
            }
            if not stream:
                return self._json(200, message)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.end_headers()

            def event(kind: str, **fields: Any) -> None:
                self.wfile.write(f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode())

            event(
                "message_start", message={**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
            )
            if call is not None:
                event("content_block_start", index=0, content_block={**block, "input": {}})
                delta = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
                event("content_block_delta", index=0, delta=delta)
            else:
                event("content_block_start", index=0, content_block={"type": "text", "text": ""})
                for i, word in enumerate(FINAL_ANSWER.split(" ")):
                    event("content_block_delta", index=0, delta={"type": "text_delta", "text": word if i == 0 else " " + word})
            event("content_block_stop", index=0)
            event("message_delta", delta={"stop_reason": stop, "stop_sequence": None}, usage={"output_tokens": 11})
            event("message_stop")
            self.wfile.flush()

        def _gemini(self, stream: bool, tokens: int, call: Optional[str], arguments: dict) -> None:
            usage = {"promptTokenCount": tokens, "candidatesTokenCount": 11, "totalTokenCount": tokens + 11}
            part = {"functionCall": {"name": call, "args": arguments}} if call is not None else {"text": FINAL_ANSWER}
            answer = {
                "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": usage,
                "modelVersion": "gemini-2.5-flash",
            }
            if not stream:
                return self._json(200, answer)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            if call is None:  # the text in two chunks, the usage on each
                half = FINAL_ANSWER.split(" ", 2)
                first = {
                    **answer,
                    "candidates": [{"content": {"role": "model", "parts": [{"text": " ".join(half[:2])}]}, "index": 0}],
                }
                self.wfile.write(f"data: {json.dumps(first)}\r\n\r\n".encode())
                rest = {"text": " " + half[2]}
                answer = {**answer, "candidates": [{**answer["candidates"][0], "content": {"role": "model", "parts": [rest]}}]}
            self.wfile.write(f"data: {json.dumps(answer)}\r\n\r\n".encode())
            self.wfile.flush()

        def _bedrock(self, stream: bool, tokens: int, call: Optional[str], arguments: dict) -> None:
            usage = {"inputTokens": tokens, "outputTokens": 11, "totalTokens": tokens + 11}
            if call is not None:
                block: dict[str, Any] = {"toolUse": {"toolUseId": "tooluse_agent1", "name": call, "input": arguments}}
                stop = "tool_use"
            else:
                block, stop = {"text": FINAL_ANSWER}, "end_turn"
            if not stream:
                answer = {"output": {"message": {"role": "assistant", "content": [block]}}, "stopReason": stop}
                return self._json(200, {**answer, "usage": usage, "metrics": {"latencyMs": 5}})
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.amazon.eventstream")
            self.end_headers()
            events: list[tuple[str, dict[str, Any]]] = [("messageStart", {"role": "assistant"})]
            if call is not None:
                start = {"toolUse": {"toolUseId": "tooluse_agent1", "name": call}}
                events.append(("contentBlockStart", {"contentBlockIndex": 0, "start": start}))
                events.append(
                    ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {"input": json.dumps(arguments)}}})
                )
            else:
                for i, word in enumerate(FINAL_ANSWER.split(" ")):
                    text = word if i == 0 else " " + word
                    events.append(("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": text}}))
            events += [
                ("contentBlockStop", {"contentBlockIndex": 0}),
                ("messageStop", {"stopReason": stop}),
                ("metadata", {"usage": usage, "metrics": {"latencyMs": 5}}),
            ]
            for name, payload in events:
                self.wfile.write(event_stream_frame(name, payload))
            self.wfile.flush()

        def _record(self, tag: str, stream: bool, prompt_tokens: int, body: dict[str, Any]) -> None:
            with server.lock:
                server.served.append(Served(tag, stream, prompt_tokens, 11 if prompt_tokens else 0, body))

        def _json(self, status: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, body: dict[str, Any], reply: dict[str, Any], usage: dict[str, Any]) -> None:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.end_headers()
            common = {"id": "chatcmpl-agent", "object": "chat.completion.chunk", "created": int(time.time()), "model": "gpt-4o"}

            def event(delta: dict[str, Any], finish: Any = None) -> None:
                chunk = {**common, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
                if include_usage:
                    chunk["usage"] = None
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())

            event({"role": "assistant", "content": ""})
            if "tool_call" in reply:
                name, arguments = reply["tool_call"]
                call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": name, "arguments": ""}}
                event({"tool_calls": [call]})
                half = len(arguments) // 2
                for part in (arguments[:half], arguments[half:]):
                    event({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
                event({}, "tool_calls")
            else:
                for i, word in enumerate(reply["content"].split(" ")):
                    event({"content": word if i == 0 else " " + word})
                event({}, "stop")
            if include_usage:
                self.wfile.write(f"data: {json.dumps({**common, 'choices': [], 'usage': usage})}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


def start() -> tuple[AgentServer, _Server, threading.Thread]:
    agent = AgentServer()
    httpd = _Server(("127.0.0.1", 0), _handler(agent))
    agent.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return agent, httpd, thread
