"""The base of the OpenAI-compatible stub servers on 127.0.0.1 (the bundled
:mod:`~sessionkit.testing.stub_server` and the test suite's): one place for the HTTP plumbing,
so that each stub holds only its rules for answering.

A :class:`LocalServer` listens on a free port of 127.0.0.1 in a daemon thread while a ``with``
block runs; ``url`` is its base URL (``http://127.0.0.1:<port>/v1``).  ``POST
.../chat/completions`` is answered by :meth:`LocalServer.chat` (the raw body and the request
headers in, a :class:`Response` out), ``POST .../v1/messages`` (Anthropic's Messages API) by
:meth:`LocalServer.messages` likewise; ``GET .../models`` by :meth:`LocalServer.models` when a
subclass lists models (else every GET is 501, as for any method a handler does not have); any
other path gets the server's ``not_found``.

>>> class Echo(LocalServer):
...     def chat(self, raw, headers):
...         return json_response(json.loads(raw))
>>> with Echo() as server:
...     httpx.post(f"{server.url}/chat/completions", json={"a": 1}).json()
{'a': 1}
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = ["LocalServer", "Response", "chat_completion", "json_response", "sse_response"]


@dataclass(frozen=True)
class Response:
    """One answer as sent: ``status``, ``payload`` bytes under ``content_type``, and further
    ``headers`` (sent between Content-Type and Content-Length)."""

    status: int
    payload: bytes
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)


def json_response(data: Any, status: int = 200, *, ensure_ascii: bool = True) -> Response:
    """``data`` as a JSON answer (``json.dumps``' default spacing)."""
    return Response(status, json.dumps(data, ensure_ascii=ensure_ascii).encode())


def sse_response(chunks: Iterable[Mapping[str, Any]]) -> Response:
    """A streamed answer as the OpenAI API sends it: each chunk a server-sent ``data:``
    event, then ``data: [DONE]`` (sent whole, with its length)."""
    events = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
    events.append("data: [DONE]\n\n")
    return Response(200, "".join(events).encode(), "text/event-stream")


def chat_completion(
    index: int, model: str, created: int, message: Mapping[str, Any], usage: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``chat.completion`` object (id ``chatcmpl-<index>``) of one answer ``message``,
    its finish reason ``tool_calls`` when the message calls tools, else ``stop``."""
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": f"chatcmpl-{index}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": dict(message), "finish_reason": finish}],
        "usage": dict(usage),
    }


class LocalServer:
    """A threaded HTTP/1.1 server on a free port of 127.0.0.1, serving while a ``with`` block
    runs; subclasses answer by overriding :meth:`chat` (and :meth:`models`)."""

    not_found = Response(404, b'{"error": {"message": "not found"}}')
    """The answer to a path that is neither ``.../chat/completions`` nor ``.../models``."""

    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The base URL to configure: ``http://127.0.0.1:<port>/v1``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=30)

    def chat(self, raw: bytes, headers: Message) -> Response:
        """The answer to a ``POST .../chat/completions`` with body ``raw``; runs on the
        request's own thread (a delay here delays only this answer)."""
        raise NotImplementedError

    def messages(self, raw: bytes, headers: Message) -> Response:
        """The answer to a ``POST .../v1/messages`` with body ``raw`` (by default, none: the
        server's ``not_found``)."""
        return self.not_found

    def models(self) -> Response | None:
        """The answer to ``GET .../models``, or None when this server answers no GET."""
        return None


def _handler(server: LocalServer) -> type[BaseHTTPRequestHandler]:
    """The request handler class routing to ``server``."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: object) -> None:
            return

        def _send(self, answer: Response) -> None:
            try:
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.content_type)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.payload)))
                self.end_headers()
                self.wfile.write(answer.payload)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client gave up waiting (a timeout test)

        def do_GET(self) -> None:
            listing = server.models()
            if listing is None:
                self.send_error(
                    HTTPStatus.NOT_IMPLEMENTED, f"Unsupported method ({self.command!r})"
                )
            else:
                self._send(
                    listing if self.path.rstrip("/").endswith("/models") else server.not_found
                )

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            path = self.path.rstrip("/")
            if path.endswith("/chat/completions"):
                self._send(server.chat(raw, self.headers))
            elif path.endswith("/v1/messages"):
                self._send(server.messages(raw, self.headers))
            else:
                self._send(server.not_found)

    return Handler
