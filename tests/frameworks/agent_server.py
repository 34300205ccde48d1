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
    return {"content": FINAL_ANSWER}


def _handler(server: AgentServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one answer per connection: a stream ends with it

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - some clients probe /models
            self._json(200, {"object": "list", "data": [{"id": "gpt-4o", "object": "model", "owned_by": "local"}]})

        def do_POST(self) -> None:  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.loads(raw or b"{}")
            tag = self.path.split("?", 1)[0].split("/v1/", 1)[0].strip("/")
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
