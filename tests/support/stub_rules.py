"""An OpenAI-compatible chat-completions stub on 127.0.0.1 whose answers follow a rule of the
request, and that misbehaves on cue (stdlib only; :mod:`support.stub_openai`'s server with
another handler).

``RuleServer(rule)`` listens on a free port of 127.0.0.1 in a daemon thread; ``url`` is the
base URL (``http://127.0.0.1:<port>/v1``).  ``POST /v1/chat/completions`` records the JSON
body and the ``Authorization`` header (``received``, in arrival order) and answers with
``rule(body, seen)`` (an attribute tests may swap), ``seen`` being how many times this
exact body came before: a :class:`~support.stub_openai.Reply` (one ``chat.completion``
object), or a :class:`Misbehave` (a status, headers and raw bytes, after a delay).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from support.stub_openai import Call, Reply, StubServer, Usage

__all__ = ["Misbehave", "Received", "RuleServer"]


@dataclass(frozen=True)
class Misbehave:
    """An answer that is no good: ``status``, ``headers`` and ``payload``, sent after
    ``delay_s`` seconds."""

    status: int = 500
    payload: bytes = b'{"error": {"message": "stub failure"}}'
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Received:
    """One request as the stub received it."""

    body: dict[str, Any]
    authorization: str | None


Rule = Callable[[dict[str, Any], int], Reply | Misbehave]


class RuleServer(StubServer):
    """The stub: ``with RuleServer(rule) as stub: ... stub.received``."""

    def __init__(self, rule: Rule, *, model: str = "stub-model") -> None:
        super().__init__([], default=Reply(Usage(0, 0)), model=model)
        self.rule = rule
        self.received: list[Received] = []
        self._seen: dict[bytes, int] = {}
        self._count = threading.Lock()

    def reset(self) -> None:
        """Forget every request received (for the next test)."""
        with self._count:
            self.received.clear()
            self._seen.clear()

    def _ruled(self, raw: bytes, authorization: str | None) -> tuple[int, Reply | Misbehave]:
        body = json.loads(raw)
        with self._count:
            self.received.append(Received(body, authorization))
            index, seen = len(self.received) - 1, self._seen.get(raw, 0)
            self._seen[raw] = seen + 1
        return index, self.rule(body, seen)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: object) -> None:
                return

            def _send(self, status: int, payload: bytes, headers: Mapping[str, str]) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client gave up waiting (a timeout test)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, b"{}", {})
                    return
                index, answer = stub._ruled(raw, self.headers.get("Authorization"))
                if isinstance(answer, Misbehave):
                    time.sleep(answer.delay_s)
                    self._send(answer.status, answer.payload, answer.headers)
                    return
                ids = tuple(f"call_{index}_{i}" for i in range(len(answer.tool_calls)))
                call = Call(index, time.time_ns(), json.loads(raw), "ruled", answer, ids)
                self._send(200, json.dumps(stub._completion(call)).encode(), {})

        return Handler
