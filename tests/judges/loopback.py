"""A scripted loopback HTTP server speaking the Anthropic Messages and OpenAI Chat
Completions wire formats, so the judges run through their real SDKs without a network.

Each request consumes the next step of `script` (then `default` forever). A step says
what to do: answer with a text and usage, return an HTTP status, send a garbled body,
or stall longer than the client's timeout. Every request is recorded for assertions.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Step:
    """One scripted reply.

    kind: "ok" (answer `text`, or `answer(body)` when set), "status" (HTTP `status` with
    an error body and `headers`), "malformed" (200 with a body that is not JSON),
    "slow" (sleep `delay` seconds, then answer like "ok").
    rendezvous: hold the reply until that many requests are in flight at once (at most
    `hold` seconds), so a test can prove that calls overlap without timing assertions.
    """

    kind: str = "ok"
    text: str = '{"score": 7}'
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    input_tokens: int = 100
    output_tokens: int = 8
    model: str | None = None
    answer: Callable[[dict[str, Any]], str] | None = None
    rendezvous: int = 0
    hold: float = 10.0


def ok(text: str = '{"score": 7}', **kw: Any) -> Step:
    return Step("ok", text=text, **kw)


def status(code: int, **kw: Any) -> Step:
    return Step("status", status=code, **kw)


def malformed() -> Step:
    return Step("malformed")


def slow(delay: float, text: str = '{"score": 7}') -> Step:
    return Step("slow", delay=delay, text=text)


def rendezvous(n: int, **kw: Any) -> Step:
    """Answer like "ok", but only once `n` requests are in flight together."""
    return Step("ok", rendezvous=n, **kw)


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    def header(self, name: str) -> str | None:
        return {k.lower(): v for k, v in self.headers.items()}.get(name.lower())


def user_text(body: dict[str, Any]) -> str:
    """The user message of a recorded Messages or Chat Completions request."""
    for message in body.get("messages", []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return "".join(part.get("text", "") for part in content or [])
    return ""


def system_text(body: dict[str, Any]) -> str:
    if "system" in body:
        system = body["system"]
        return system if isinstance(system, str) else "".join(p.get("text", "") for p in system)
    for message in body.get("messages", []):
        if message.get("role") == "system":
            return str(message.get("content"))
    return ""


class LoopbackServer:
    """`with LoopbackServer(script=[...]) as server:` -> server.anthropic_url / openai_url."""

    def __init__(
        self,
        script: list[Step] | None = None,
        default: Step | None = None,
        anthropic_model: str = "claude-sonnet-4-5-20250929",
        openai_model: str = "gpt-4o-mini-2024-07-18",
    ) -> None:
        self.script = list(script or [])
        self.default = default or ok()
        self.anthropic_model = anthropic_model
        self.openai_model = openai_model
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests handled at the same time
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def n_requests(self) -> int:
        with self._lock:
            return len(self.requests)

    def _next_step(self, recorded: Recorded) -> Step:
        with self._lock:
            self.requests.append(recorded)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._changed.notify_all()
            return self.script.pop(0) if self.script else self.default

    def _await_in_flight(self, n: int, timeout: float) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self.in_flight >= n, timeout=timeout)

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1
            self._changed.notify_all()

    # -- wire formats ----------------------------------------------------------------------
    def _ok_body(self, path: str, step: Step, body: dict[str, Any]) -> dict[str, Any]:
        text = step.answer(body) if step.answer else step.text
        if path.endswith("/messages"):
            return {
                "id": "msg_loopback",
                "type": "message",
                "role": "assistant",
                "model": step.model or self.anthropic_model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": step.input_tokens, "output_tokens": step.output_tokens},
            }
        return {
            "id": "chatcmpl-loopback",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": step.model or self.openai_model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": step.input_tokens,
                "completion_tokens": step.output_tokens,
                "total_tokens": step.input_tokens + step.output_tokens,
            },
        }

    @staticmethod
    def _error_body(path: str, code: int) -> dict[str, Any]:
        if path.endswith("/messages"):
            kind = "rate_limit_error" if code == 429 else "api_error"
            return {"type": "error", "error": {"type": kind, "message": f"scripted {code}"}}
        return {"error": {"message": f"scripted {code}", "type": "server_error", "code": None}}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # silence stderr
                return

            def _send(self, code: int, payload: bytes, headers: dict[str, str]) -> None:
                try:
                    self.send_response(code)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                recorded = Recorded(self.path, dict(self.headers.items()), body)
                step = server._next_step(recorded)
                try:
                    self._reply(step, body)
                finally:
                    server._done()

            def _reply(self, step: Step, body: dict[str, Any]) -> None:
                if step.rendezvous:
                    server._await_in_flight(step.rendezvous, step.hold)
                if step.kind == "status":
                    payload = json.dumps(server._error_body(self.path, step.status)).encode()
                    self._send(step.status, payload, step.headers)
                elif step.kind == "malformed":
                    self._send(200, b'{"id": "broken", "content": [', step.headers)
                else:
                    if step.kind == "slow":
                        time.sleep(step.delay)
                    payload = json.dumps(server._ok_body(self.path, step, body)).encode()
                    self._send(200, payload, step.headers)

        return Handler
