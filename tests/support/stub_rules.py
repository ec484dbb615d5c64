"""An OpenAI-compatible chat-completions stub on 127.0.0.1 whose answers follow a rule of the
request, and that misbehaves on cue (a :class:`sessionkit.testing.local_server.LocalServer`
answering as :mod:`support.stub_openai` does, by another rule).

``RuleServer(rule)`` listens on a free port of 127.0.0.1 in a daemon thread; ``url`` is the
base URL (``http://127.0.0.1:<port>/v1``).  ``POST /v1/chat/completions`` records the JSON
body and the ``Authorization`` header (``received``, in arrival order) and answers with
``rule(body, seen)`` (an attribute tests may swap), ``seen`` being how many times this
exact body came before: a :class:`~support.stub_openai.Reply` (one ``chat.completion``
object), or a :class:`Misbehave` (a status, headers and raw bytes, after a delay).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import Any

from sessionkit.testing.local_server import LocalServer, Response, json_response
from support.stub_openai import Call, Reply, completion

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


class RuleServer(LocalServer):
    """The stub: ``with RuleServer(rule) as stub: ... stub.received``."""

    not_found = Response(404, b"{}")

    def __init__(self, rule: Rule, *, model: str = "stub-model") -> None:
        super().__init__()
        self.model = model
        self.rule = rule
        self.received: list[Received] = []
        self._seen: dict[bytes, int] = {}
        self._count = threading.Lock()

    def reset(self) -> None:
        """Forget every request received (for the next test)."""
        with self._count:
            self.received.clear()
            self._seen.clear()

    def ruled(self, raw: bytes, headers: Message, key: str) -> tuple[int, Reply] | Response:
        """Record a request (``key``: the header carrying its credential; :meth:`noted` with
        it, under the same lock) and ask the rule: the request's index and the reply, or the
        misbehaviour's response after its delay."""
        body = json.loads(raw)
        with self._count:
            self.received.append(Received(body, headers.get(key)))
            self.noted(headers)
            index, seen = len(self.received) - 1, self._seen.get(raw, 0)
            self._seen[raw] = seen + 1
        answer = self.rule(body, seen)
        if isinstance(answer, Misbehave):
            time.sleep(answer.delay_s)
            return Response(answer.status, answer.payload, headers=answer.headers)
        return index, answer

    def noted(self, headers: Message) -> None:
        """What else a request's headers say, kept beside :attr:`received` (nothing here)."""

    def chat(self, raw: bytes, headers: Message) -> Response:
        """The rule's answer: a completion, or a misbehaviour after its delay."""
        ruled = self.ruled(raw, headers, "Authorization")
        if isinstance(ruled, Response):
            return ruled
        index, answer = ruled
        ids = tuple(f"call_{index}_{i}" for i in range(len(answer.tool_calls)))
        call = Call(index, time.time_ns(), json.loads(raw), "ruled", answer, ids)
        return json_response(completion(call, self.model))


def message_text(message: Mapping[str, Any]) -> str:
    """A request message's content as text (a list of blocks as its JSON), for rules to match."""
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content)


def stub_workspace(root: Path, data_dir: Path, url: str, *, model: str, api_key: str) -> Path:
    """The bundled sessions copied to ``root/workspace``, with a nanobot config beside it whose
    custom provider is the stub at ``url`` (``api_key``, default ``model``): experiments on
    the sample data ask the stub as they would ask a configured endpoint."""
    shutil.copytree(data_dir / "sessions", root / "workspace" / "sessions")
    config = {
        "agents": {"defaults": {"model": model}},
        "providers": {"custom": {"apiKey": api_key, "apiBase": url}},
    }
    (root / "config.json").write_text(json.dumps(config))
    return root / "workspace"
