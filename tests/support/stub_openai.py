"""An OpenAI-compatible chat-completions stub on 127.0.0.1 that records every request (its
HTTP plumbing is :class:`sessionkit.testing.local_server.LocalServer`).

``StubServer(turns, default=...)`` listens on a free port of 127.0.0.1 in a daemon thread;
``url`` is the base URL to configure (``http://127.0.0.1:<port>/v1``).  ``turns`` are the
user turns in the order they will run, each its user text and the replies its agent calls
take.  ``POST /v1/chat/completions`` records the JSON body (``calls``, in arrival order) and
answers, with the current turn being the one whose reply comes next:

- a request whose last message is a tool result is an agent call: it takes the next reply;
- so is a request whose last message is a user message holding the current turn's text,
  while no reply of that turn has been taken yet (the turn's first call, possibly after a
  summary);
- any other request gets ``default``.  These are nanobot 0.3.5's governor summary calls:
  they end with nanobot's archive instruction as a user message.  Before a turn's first
  call it holds no text of the turn; later in the turn one of the turn's replies is already
  taken (before step 1 the instruction is merged into the current user message on the
  wire).  No text of nanobot's is needed to tell them.

A reply is text and/or tool calls (name + JSON arguments) with known usage numbers.  With
``"stream": true`` the answer is server-sent events as the OpenAI API sends them (a role
chunk, content, tool calls, the finish reason, then — when ``stream_options.include_usage``
is set — a chunk with empty ``choices`` and the usage, then ``[DONE]``); otherwise one
``chat.completion`` object.  ``GET /v1/models`` lists ``model``.  A request past the script
is answered 500 and recorded with ``kind="unscripted"``, so a test sees it instead of hanging.

A prompt cache (``cache=``, a :class:`support.provider_caches.PromptCache`) replaces each
answered call's scripted prompt, cached and cache-write tokens by what the cache counts and
finds for the body, at the stub's clock: real time plus ``sum(gaps[:i + 1])`` seconds for the
calls of turn i (the turn whose reply comes next), the offsets ``gateway_035.py`` adds to the
release's clock before publishing each turn.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from email.message import Message
from itertools import accumulate
from typing import Any, Protocol

from sessionkit.testing.local_server import (
    LocalServer,
    Response,
    chat_completion,
    json_response,
    sse_response,
)

__all__ = ["Call", "Reply", "ScriptedTurn", "StubServer", "ToolCall", "Usage", "completion"]


@dataclass(frozen=True)
class Usage:
    """The usage numbers the stub reports for one call (``cache_write_tokens``: None, not
    reported; else in ``prompt_tokens_details`` as OpenRouter reports a Claude model's writes)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    cache_write_tokens: int | None = None

    def wire(self) -> dict[str, Any]:
        """The OpenAI ``usage`` object."""
        details: dict[str, int] = {"cached_tokens": self.cached_tokens}
        if self.cache_write_tokens is not None:
            details["cache_write_tokens"] = self.cache_write_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": details,
        }


class Cache(Protocol):
    """A provider's prompt cache as the stub applies it (``support.provider_caches``)."""

    def __call__(self, body: Mapping[str, Any], now: float) -> tuple[int, int, int | None]:
        """(prompt, cached, cache-write tokens) of a request body arriving at ``now``."""
        ...


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a scripted reply."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Reply:
    """One scripted answer: text and/or tool calls, with its usage."""

    usage: Usage
    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reply:
        """A reply from ``{"text"?, "tool_calls"?: [{"name", "arguments"}], "usage": {...}}``."""
        calls = tuple(ToolCall(c["name"], dict(c["arguments"])) for c in data.get("tool_calls", ()))
        return cls(Usage(**data["usage"]), data.get("text"), calls)

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


@dataclass(frozen=True)
class ScriptedTurn:
    """One user turn: its text and the replies of its agent calls, in order."""

    text: str
    replies: tuple[Reply, ...]


@dataclass(frozen=True)
class Call:
    """One recorded request: its body, which rule answered it and the reply sent."""

    index: int
    received_ns: int
    body: dict[str, Any]
    kind: str  # "scripted", "default" or "unscripted"
    reply: Reply | None
    tool_call_ids: tuple[str, ...] = field(default=())


def _last_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def completion(call: Call, model: str) -> dict[str, Any]:
    """The ``chat.completion`` object answering ``call`` with its reply (not None)."""
    reply = call.reply
    assert reply is not None
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": cid,
                "type": "function",
                "function": {"name": tc.name, "arguments": json.dumps(dict(tc.arguments))},
            }
            for cid, tc in zip(call.tool_call_ids, reply.tool_calls, strict=True)
        ]
    created = call.received_ns // 1_000_000_000
    return chat_completion(call.index, model, created, message, reply.usage.wire())


class StubServer(LocalServer):
    """The stub: ``with StubServer(...) as stub: ... stub.calls``."""

    not_found = Response(404, b"not found", "text/plain")

    def __init__(
        self,
        turns: Sequence[ScriptedTurn],
        *,
        default: Reply,
        model: str = "stub-model",
        gaps: Sequence[float] | None = None,
        cache: Cache | None = None,
    ) -> None:
        super().__init__()
        self._script = [(i, reply) for i, turn in enumerate(turns) for reply in turn.replies]
        self._offsets = list(accumulate(gaps or [0.0] * len(turns)))
        self._cache = cache
        self._texts = [turn.text.strip() for turn in turns]
        self._default = default
        self.model = model
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._next = 0

    def models(self) -> Response:
        """``GET /v1/models``: the one model."""
        listing = {
            "object": "list",
            "data": [{"id": self.model, "object": "model", "owned_by": "stub"}],
        }
        return json_response(listing)

    def chat(self, raw: bytes, headers: Message) -> Response:
        """The scripted answer (see the module docstring), streamed when asked."""
        body = json.loads(raw)
        call = self._answer(body)
        if call.reply is None:
            error = {"error": {"message": "stub script exhausted", "type": "stub"}}
            return json_response(error, 500)
        if not body.get("stream"):
            return json_response(completion(call, self.model))
        include = bool((body.get("stream_options") or {}).get("include_usage"))
        return sse_response(self._chunks(call, include))

    def _is_agent_call(self, body: Mapping[str, Any]) -> bool:
        """Whether a request takes the next scripted reply (see the module docstring)."""
        last = (body.get("messages") or [{}])[-1]
        if last.get("role") == "tool":
            return True
        if last.get("role") != "user" or self._next >= len(self._script):
            return False
        turn = self._script[self._next][0]
        first = self._next == 0 or self._script[self._next - 1][0] != turn
        return first and self._texts[turn] in _last_text(last)

    def _offset(self, turn: int) -> float:
        """Seconds the clock of turn ``turn`` runs ahead of real time."""
        return self._offsets[turn] if self._offsets else 0.0

    def _answer(self, body: dict[str, Any]) -> Call:
        with self._lock:
            index = len(self.calls)
            turn = self._script[min(self._next, len(self._script) - 1)][0] if self._script else 0
            if not self._is_agent_call(body):
                kind, reply = "default", self._default
            elif self._next < len(self._script):
                kind, reply = "scripted", self._script[self._next][1]
                self._next += 1
            else:
                kind, reply = "unscripted", None
            if reply is not None and self._cache is not None:
                prompt, read, write = self._cache(body, time.time() + self._offset(turn))
                used = dataclasses.replace(
                    reply.usage, prompt_tokens=prompt, cached_tokens=read, cache_write_tokens=write
                )
                reply = dataclasses.replace(reply, usage=used)
            ids = tuple(f"call_{index}_{i}" for i in range(len(reply.tool_calls) if reply else 0))
            received = time.time_ns() + int(self._offset(turn) * 1_000_000_000)
            call = Call(index, received, body, kind, reply, ids)
            self.calls.append(call)
            return call

    def _chunks(self, call: Call, include_usage: bool) -> Iterator[dict[str, Any]]:
        reply = call.reply
        assert reply is not None
        head = {
            "id": f"chatcmpl-{call.index}",
            "object": "chat.completion.chunk",
            "created": call.received_ns // 1_000_000_000,
            "model": self.model,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        yield chunk({"role": "assistant", "content": ""})
        if reply.text:
            middle = len(reply.text) // 2
            for part in (reply.text[:middle], reply.text[middle:]):
                if part:
                    yield chunk({"content": part})
        for i, (cid, tc) in enumerate(zip(call.tool_call_ids, reply.tool_calls, strict=True)):
            arguments = json.dumps(dict(tc.arguments))
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": cid,
                            "type": "function",
                            "function": {"name": tc.name, "arguments": ""},
                        }
                    ]
                }
            )
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": arguments}}]})
        yield chunk({}, reply.finish_reason)
        if include_usage:
            yield {**head, "choices": [], "usage": reply.usage.wire()}
