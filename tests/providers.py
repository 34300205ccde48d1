"""Local stand-ins for LLM providers: one HTTP server on 127.0.0.1 speaking their documented APIs.

Routes (shapes as the providers document them):

* ``POST /v1/chat/completions``      OpenAI chat completions, JSON or SSE stream; usage with
                                     ``prompt_tokens_details.cached_tokens``; a terminal usage chunk
                                     only when ``stream_options.include_usage`` is set.
* ``POST /v1/messages``              Anthropic Messages, JSON or SSE stream (``message_start`` with the
                                     input usage, content blocks, ``message_delta`` with the output usage
                                     and, with ``delta_input``, the input again); usage with cache reads
                                     and writes; with ``answer_tools``, a call to the request's first tool
                                     until its conversation holds a ``tool_result``, then the answer
* ``POST /v1/messages/count_tokens`` Anthropic           -> ``{"input_tokens": N}``
* ``POST /v1beta/models/{m}:countTokens`` Gemini          -> ``{"totalTokens": N}``
* ``POST /v1[beta]/models/{m}:generateContent``  Gemini GenerateContent (the REST shape ``google-genai``
                                     reads: ``candidates``, ``usageMetadata`` with ``promptTokenCount``,
                                     ``cachedContentTokenCount``, ``toolUsePromptTokenCount``); with
                                     ``answer_tools``, a ``functionCall`` of the request's first declared
                                     function until its contents hold a ``functionResponse``
* ``POST /v1[beta]/models/{m}:streamGenerateContent?alt=sse``  the same as server-sent events, each
                                     chunk with the usage so far
* ``POST /model/{modelId}/converse`` Amazon Bedrock Converse (the JSON botocore parses: ``output.message``,
                                     ``usage`` with ``inputTokens``, ``cacheReadInputTokens``,
                                     ``cacheWriteInputTokens``); SigV4 headers accepted as they come;
                                     with ``answer_tools``, a ``toolUse`` until a ``toolResult`` comes back
* ``POST /model/{modelId}/converse-stream``  the same as an AWS event stream (binary frames with
                                     CRCs: messageStart, contentBlockDelta, contentBlockStop, messageStop,
                                     metadata with the usage)
* ``POST /v1/responses/input_tokens`` OpenAI responses    -> ``{"object": "response.input_tokens", "input_tokens": N}``
* ``POST /v1/responses``             OpenAI Responses API, JSON or SSE stream (``response.created`` ...
                                     ``response.completed``, whose response carries the usage block
                                     with ``input_tokens_details.cached_tokens``)

Each route has a `Route` with the status to answer, an artificial delay, an optional gate
(`FakeProvider.hold`: the route answers only once the test releases it) and the token
number to report; error answers carry `CANARY` in their body, so tests can prove that a
provider's error text never leaks into snapshots, warnings or logs.
Every request is kept in `requests` (path, headers, parsed JSON body).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

import pytest

CANARY = "CANARY-7f3a-provider-error-body"

CHAT, ANTHROPIC, GEMINI, OPENAI_COUNT = "chat", "anthropic", "gemini", "openai_count"
RESPONSES = "responses"
MESSAGES = "anthropic_messages"
GENERATE = "gemini_generate"
CONVERSE = "bedrock_converse"


@dataclass
class Route:
    status: int = 200
    delay: float = 0.0  # seconds before answering
    gate: Optional[threading.Event] = None  # set: answer; unset: hold the request (FakeProvider.hold)
    tokens: int = 0  # count routes: the count to report; chat: prompt_tokens
    cached_tokens: int = 0  # chat: prompt_tokens_details.cached_tokens; messages: cache_read_input_tokens
    cache_write_tokens: int = 0  # messages: cache_creation_input_tokens
    completion_tokens: int = 7
    reply: str = "Hello from the local server."
    body: Optional[bytes] = None  # a raw 200 body, to test malformed answers
    # Request fields the route refuses, as older Azure api-versions refused stream_options:
    # `reject_status` with an error naming the field.
    rejects: tuple[str, ...] = ()
    reject_status: int = 400
    answer_tools: bool = False  # messages, gemini: call the first tool offered until its result comes back
    tool_use_tokens: int = 0  # gemini: usageMetadata.toolUsePromptTokenCount
    delta_input: bool = False  # messages streams: message_delta repeats the input usage (the current API)


@dataclass
class Recorded:
    route: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeProvider:
    url: str = ""
    routes: dict[str, Route] = field(
        default_factory=lambda: {
            CHAT: Route(tokens=1234, cached_tokens=1024),
            ANTHROPIC: Route(tokens=4321),
            GEMINI: Route(tokens=2718),
            OPENAI_COUNT: Route(tokens=3141),
            MESSAGES: Route(tokens=321, cached_tokens=2048, cache_write_tokens=512),
            RESPONSES: Route(tokens=2345, cached_tokens=2048),
            GENERATE: Route(tokens=1618, cached_tokens=1024, tool_use_tokens=12),
            CONVERSE: Route(tokens=271, cached_tokens=1024, cache_write_tokens=256),
        }
    )
    requests: list[Recorded] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __getitem__(self, route: str) -> Route:
        return self.routes[route]

    def hits(self, route: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.route == route]

    def wait_for_hits(self, route: str, n: int, timeout: float = 5.0) -> list[Recorded]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.hits(route)) < n:
            time.sleep(0.01)
        return self.hits(route)

    def hold(self, route: str) -> threading.Event:
        """Hold every request to ``route`` until the returned event is set (the fixture sets it at the end)."""
        gate = self.routes[route].gate = threading.Event()
        return gate

    def release_all(self) -> None:
        for route in self.routes.values():
            if route.gate is not None:
                route.gate.set()

    def record(self, entry: Recorded) -> None:
        with self._lock:
            self.requests.append(entry)


def _route_of(path: str) -> Optional[str]:
    path = path.split("?", 1)[0]
    if path.endswith("/chat/completions"):
        return CHAT
    if path.endswith("/v1/messages/count_tokens"):
        return ANTHROPIC
    if path.endswith("/v1/messages"):
        return MESSAGES
    if path.startswith("/v1beta/models/") and path.endswith(":countTokens"):
        return GEMINI
    if path.startswith(("/v1beta/models/", "/v1/models/")) and path.endswith((":generateContent", ":streamGenerateContent")):
        return GENERATE
    if path.startswith("/model/") and path.endswith(("/converse", "/converse-stream")):
        return CONVERSE
    if path.endswith("/v1/responses/input_tokens"):
        return OPENAI_COUNT
    if path.endswith("/v1/responses"):
        return RESPONSES
    return None


def _handler(provider: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # close after each answer: streams end with the connection

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw
            route_name = _route_of(self.path)
            provider.record(Recorded(route_name or "unknown", self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            if route_name is None:
                return self._json(404, {"error": {"message": f"no route {CANARY}"}})
            route = provider.routes[route_name]
            if route.gate is not None:
                route.gate.wait(120)  # bounded: a test that never releases still ends its server
            if route.delay:
                time.sleep(route.delay)
            try:
                if route.status != 200:
                    error = {"type": "invalid_request_error", "message": f"bad request: {CANARY}"}
                    if route_name == MESSAGES:  # Anthropic's error shape
                        return self._json(route.status, {"type": "error", "error": error})
                    return self._json(route.status, {"error": error})
                refused = [f for f in route.rejects if isinstance(body, dict) and f in body]
                if refused:
                    message = f"Unrecognized request argument supplied: {refused[0]} {CANARY}"
                    return self._json(route.reject_status, {"error": {"code": "BadRequest", "message": message}})
                if route.body is not None:
                    return self._send(200, route.body, "application/json")
                if route_name == CHAT:
                    return self._chat(route, body or {})
                if route_name == MESSAGES:
                    return self._messages(route, body or {})
                if route_name == RESPONSES:
                    return self._responses(route, body or {})
                if route_name == GENERATE:
                    return self._generate(route, body or {}, self.path)
                if route_name == CONVERSE:
                    return self._converse(route, body or {}, self.path)
                if route_name == ANTHROPIC:
                    return self._json(200, {"input_tokens": route.tokens})
                if route_name == GEMINI:
                    return self._json(
                        200,
                        {"totalTokens": route.tokens, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": route.tokens}]},
                    )
                return self._json(200, {"object": "response.input_tokens", "input_tokens": route.tokens})
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (a time box): fine
                pass

        # ---------------------------------------------------------------- answers

        def _send(self, status: int, payload: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj).encode(), "application/json")

        def _usage(self, route: Route) -> dict[str, Any]:
            return {
                "prompt_tokens": route.tokens,
                "completion_tokens": route.completion_tokens,
                "total_tokens": route.tokens + route.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": route.cached_tokens, "audio_tokens": 0},
                "completion_tokens_details": {
                    "reasoning_tokens": 0,
                    "audio_tokens": 0,
                    "accepted_prediction_tokens": 0,
                    "rejected_prediction_tokens": 0,
                },
            }

        def _generate(self, route: Route, request: dict[str, Any], path: str) -> None:
            model = path.split("/models/", 1)[1].split(":", 1)[0]
            usage = {
                "promptTokenCount": route.tokens,
                "cachedContentTokenCount": route.cached_tokens,
                "toolUsePromptTokenCount": route.tool_use_tokens,
                "candidatesTokenCount": route.completion_tokens,
                "totalTokenCount": route.tokens + route.tool_use_tokens + route.completion_tokens,
            }
            declared = [d for t in request.get("tools") or () for d in t.get("functionDeclarations") or ()]
            answered = "functionResponse" in json.dumps(request.get("contents"))
            if route.answer_tools and declared and not answered:
                parts: list[dict[str, Any]] = [{"functionCall": {"name": declared[0]["name"], "args": {"q": "x"}}}]
            else:
                parts = [{"text": route.reply}]
            answer = {
                "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": usage,
                "modelVersion": model,
            }
            if ":streamGenerateContent" not in path:
                return self._json(200, answer)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            words = route.reply.split(" ") if "text" in parts[0] else [None]
            for i, word in enumerate(words):
                last = i == len(words) - 1
                chunk_parts = [{"text": word + ("" if last else " ")}] if word is not None else parts
                candidate: dict[str, Any] = {"content": {"role": "model", "parts": chunk_parts}, "index": 0}
                if last:
                    candidate["finishReason"] = "STOP"
                so_far = {**usage, "candidatesTokenCount": i + 1 if not last else route.completion_tokens}
                chunk = {"candidates": [candidate], "usageMetadata": so_far, "modelVersion": model}
                self.wfile.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
                self.wfile.flush()

        def _converse(self, route: Route, request: dict[str, Any], path: str) -> None:
            usage = {
                "inputTokens": route.tokens,
                "outputTokens": route.completion_tokens,
                "totalTokens": route.tokens + route.cached_tokens + route.cache_write_tokens + route.completion_tokens,
                "cacheReadInputTokens": route.cached_tokens,
                "cacheWriteInputTokens": route.cache_write_tokens,
            }
            specs = [t["toolSpec"] for t in (request.get("toolConfig") or {}).get("tools") or () if "toolSpec" in t]
            answered = "toolResult" in json.dumps(request.get("messages"))
            if route.answer_tools and specs and not answered:
                block: dict[str, Any] = {
                    "toolUse": {"toolUseId": "tooluse_local1", "name": specs[0]["name"], "input": {"q": "x"}}
                }
                stop = "tool_use"
            else:
                block, stop = {"text": route.reply}, "end_turn"
            if not path.endswith("/converse-stream"):
                answer = {"output": {"message": {"role": "assistant", "content": [block]}}, "stopReason": stop}
                return self._json(200, {**answer, "usage": usage, "metrics": {"latencyMs": 5}})
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.amazon.eventstream")
            self.end_headers()
            events: list[tuple[str, dict[str, Any]]] = [("messageStart", {"role": "assistant"})]
            if "text" in block:
                events += [
                    ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": w + " "}}) for w in route.reply.split(" ")
                ]
            else:
                tool_use = block["toolUse"]
                start = {"toolUse": {"toolUseId": tool_use["toolUseId"], "name": tool_use["name"]}}
                events.append(("contentBlockStart", {"contentBlockIndex": 0, "start": start}))
                delta = {"toolUse": {"input": json.dumps(tool_use["input"])}}
                events.append(("contentBlockDelta", {"contentBlockIndex": 0, "delta": delta}))
            events += [
                ("contentBlockStop", {"contentBlockIndex": 0}),
                ("messageStop", {"stopReason": stop}),
                ("metadata", {"usage": usage, "metrics": {"latencyMs": 5}}),
            ]
            for name, payload in events:
                self.wfile.write(event_stream_frame(name, payload))
                self.wfile.flush()

        def _messages(self, route: Route, request: dict[str, Any]) -> None:
            usage = {
                "input_tokens": route.tokens,
                "cache_creation_input_tokens": route.cache_write_tokens,
                "cache_read_input_tokens": route.cached_tokens,
                "output_tokens": route.completion_tokens,
            }
            tools = [t for t in request.get("tools") or () if isinstance(t, dict) and "name" in t]
            answered = "tool_result" in json.dumps(request.get("messages"))
            if route.answer_tools and tools and not answered:
                block: dict[str, Any] = {"type": "tool_use", "id": "toolu_local1", "name": tools[0]["name"], "input": {"q": "x"}}
                stop = "tool_use"
            else:
                block, stop = {"type": "text", "text": route.reply}, "end_turn"
            message = {
                "id": "msg_local123",
                "type": "message",
                "role": "assistant",
                "model": request.get("model", "claude"),
                "content": [block],
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": usage,
            }
            if not request.get("stream"):
                return self._json(200, message)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.end_headers()

            def event(kind: str, **fields: Any) -> None:
                self.wfile.write(f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode())
                self.wfile.flush()

            started = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
            event("message_start", message=started)
            if block["type"] == "text":
                event("content_block_start", index=0, content_block={"type": "text", "text": ""})
                event("ping")
                for word in route.reply.split(" "):
                    event("content_block_delta", index=0, delta={"type": "text_delta", "text": word + " "})
            else:
                event("content_block_start", index=0, content_block={**block, "input": {}})
                partial = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                event("content_block_delta", index=0, delta=partial)
            event("content_block_stop", index=0)
            final = dict(usage) if route.delta_input else {"output_tokens": route.completion_tokens}
            event("message_delta", delta={"stop_reason": stop, "stop_sequence": None}, usage=final)
            event("message_stop")

        def _responses(self, route: Route, request: dict[str, Any]) -> None:
            text = route.reply
            message = {
                "type": "message",
                "id": "msg_local123",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
            usage = {
                "input_tokens": route.tokens,
                "input_tokens_details": {"cached_tokens": route.cached_tokens},
                "output_tokens": route.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": route.tokens + route.completion_tokens,
            }

            def response(status: str, output: list[Any], usage: Optional[dict[str, Any]]) -> dict[str, Any]:
                return {
                    "id": "resp_local123",
                    "object": "response",
                    "created_at": int(time.time()),
                    "status": status,
                    "error": None,
                    "incomplete_details": None,
                    "instructions": request.get("instructions"),
                    "max_output_tokens": None,
                    "model": f"{request.get('model', 'gpt-4o')}-2024-08-06",
                    "output": output,
                    "parallel_tool_calls": True,
                    "previous_response_id": None,
                    "reasoning": {"effort": None, "summary": None},
                    "store": True,
                    "temperature": 1.0,
                    "text": {"format": {"type": "text"}},
                    "tool_choice": "auto",
                    "tools": [],
                    "top_p": 1.0,
                    "truncation": "disabled",
                    "usage": usage,
                    "user": None,
                    "metadata": {},
                }

            if not request.get("stream"):
                return self._json(200, response("completed", [message], usage))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.end_headers()
            seq = iter(range(1_000))

            def event(kind: str, **fields: Any) -> None:
                payload = {"type": kind, "sequence_number": next(seq), **fields}
                self.wfile.write(f"event: {kind}\ndata: {json.dumps(payload)}\n\n".encode())
                self.wfile.flush()

            empty = {**message, "status": "in_progress", "content": []}
            part = {"type": "output_text", "text": "", "annotations": []}
            event("response.created", response=response("in_progress", [], None))
            event("response.in_progress", response=response("in_progress", [], None))
            event("response.output_item.added", output_index=0, item=empty)
            event("response.content_part.added", item_id="msg_local123", output_index=0, content_index=0, part=part)
            for word in text.split(" "):
                event("response.output_text.delta", item_id="msg_local123", output_index=0, content_index=0, delta=word + " ")
            event("response.output_text.done", item_id="msg_local123", output_index=0, content_index=0, text=text)
            event(
                "response.content_part.done", item_id="msg_local123", output_index=0, content_index=0, part={**part, "text": text}
            )
            event("response.output_item.done", output_index=0, item=message)
            event("response.completed", response=response("completed", [message], usage))

        def _chat(self, route: Route, request: dict[str, Any]) -> None:
            model = f"{request.get('model', 'gpt-4o')}-2024-08-06"
            common = {"id": "chatcmpl-local123", "created": int(time.time()), "model": model, "system_fingerprint": "fp_local"}
            if not request.get("stream"):
                return self._json(
                    200,
                    {
                        **common,
                        "object": "chat.completion",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": route.reply, "refusal": None, "annotations": []},
                                "logprobs": None,
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": self._usage(route),
                        "service_tier": "default",
                    },
                )
            include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()

            def event(choices: list[Any], **extra: Any) -> None:
                chunk = {**common, "object": "chat.completion.chunk", "service_tier": "default", "choices": choices, **extra}
                if include_usage and "usage" not in extra:
                    chunk["usage"] = None  # OpenAI sends an explicit null on every chunk but the last
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()

            event(
                [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": "", "refusal": None},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ]
            )
            for word in route.reply.split(" "):
                event([{"index": 0, "delta": {"content": word + " "}, "logprobs": None, "finish_reason": None}])
            event([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}])
            if include_usage:
                event([], usage=self._usage(route))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler


def event_stream_frame(event: str, payload: dict[str, Any]) -> bytes:
    """One frame of the AWS event stream encoding: a prelude with its CRC, string headers, the JSON payload, a CRC."""
    headers = b""
    for name, value in ((":event-type", event), (":content-type", "application/json"), (":message-type", "event")):
        raw = value.encode()
        headers += bytes([len(name)]) + name.encode() + b"\x07" + len(raw).to_bytes(2, "big") + raw
    body = json.dumps(payload).encode()
    prelude = (12 + len(headers) + len(body) + 4).to_bytes(4, "big") + len(headers).to_bytes(4, "big")
    prelude += zlib.crc32(prelude).to_bytes(4, "big")
    message = prelude + headers + body
    return message + zlib.crc32(message).to_bytes(4, "big")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


@contextlib.contextmanager
def running_provider() -> Iterator[FakeProvider]:
    """A local provider on 127.0.0.1 at an ephemeral port, for any scope; ``provider.url`` is its base URL."""
    fake = FakeProvider()
    server = _Server(("127.0.0.1", 0), _handler(fake))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.release_all()
        server.shutdown()
        server.server_close()
        thread.join(timeout=2)


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    """A local provider on 127.0.0.1 at an ephemeral port; ``provider.url`` is its base URL."""
    with running_provider() as fake:
        yield fake
