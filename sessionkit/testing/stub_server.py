"""A bundled OpenAI-compatible endpoint on 127.0.0.1 for trying experiments offline: its
answers follow a rule of the request, so an experiment's agreement moves with the history a
setting sends, with no model, key or network.

The rule (:class:`Recall`) plays an agent that remembers only what its request holds: it
finds the stored call the request answers (the messages before that call's stored answer
end the request), and answers as the session did when the request still holds the last
:data:`NEED` user and tool messages before it (all of them, when fewer came before), else
with the text "I do not remember that."; a request it cannot place gets "I do not know.".  Usage is counted from the request: a token per four characters of
its messages, and of the answer.

>>> with sk.testing.stub_server(corpus) as stub:
...     out = sk.experiment(calls, corpus, endpoint=stub.url, budget_calls=50)
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from typing import Any

from sessionkit.experiments.compare import Stored, stored_answers
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session
from sessionkit.testing.local_server import (
    LocalServer,
    Response,
    chat_completion,
    json_response,
)

__all__ = ["FORGOT", "NEED", "UNPLACED", "Recall", "StubServer", "stub_server"]

FORGOT = "I do not remember that."
"""The answer when the request holds too little of what came before the call."""

UNPLACED = "I do not know."
"""The answer to a request that answers no stored call."""


def _text(message: Mapping[str, Any]) -> str:
    """A message's text (the text blocks of a list content, joined)."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return content if isinstance(content, str) else ""


NEED = 10
"""How many of the user and tool messages before a call its request must hold for the stub
to answer as the session did (all of them, when fewer came before)."""

_KEY_CHARS = 60
"""How much of a message's text (stripped) identifies it: a release may add to a message
(runtime context, a timestamp) or shorten an old tool result, never change its start."""


def _said(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """The texts of the user and tool messages, latest first (assistant messages are left
    out: a release may send their text otherwise than stored)."""
    return [_text(m) for m in messages if m.get("role") in ("user", "tool")][::-1]


@dataclass(frozen=True)
class _Call:
    """A stored call: the start of each user and tool message before its answer (latest
    first), and the answer the session stored."""

    before: tuple[str, ...]
    answer: Stored

    def matched(self, sent: list[str]) -> int:
        """How many of the request's messages (latest first) are this call's, in order."""
        n = 0
        for key, text in zip(self.before, sent, strict=False):
            if key not in text or (not key and text.strip()):
                break
            n += 1
        return n


def _calls(session: Session) -> Iterator[_Call]:
    """Each stored call of ``session`` (the turns and steps
    :func:`~sessionkit.experiments.compare.stored_answers` numbers)."""
    is_turn = get_policy(session.policy).is_user_turn
    answers = stored_answers(session)
    keys: list[str] = []
    turn, step = -1, 0
    for message in session.messages:
        if is_turn(message):
            turn, step = turn + 1, 0
        elif turn >= 0 and message.get("role") == "assistant":
            yield _Call(tuple(reversed(keys)), answers[(turn, step)])
            step += 1
        if message.get("role") in ("user", "tool"):
            keys.append(_text(message).strip()[:_KEY_CHARS])


class Recall:
    """The stub's rule over ``sessions``: a request to its answer (text and tool calls).  The
    call a request answers is the stored one whose user and tool messages before the answer
    end the request in the longest run (the first such call on a tie); it is answered as
    stored when that run holds ``need`` of them, or all."""

    def __init__(self, sessions: Iterable[Session], need: int = NEED) -> None:
        self.calls = [call for session in sessions for call in _calls(session)]
        self.need = need

    def __call__(self, messages: list[Mapping[str, Any]]) -> Stored:
        sent = _said(messages)
        best, placed = 0, None
        for call in self.calls:
            n = call.matched(sent)
            if n > best:
                best, placed = n, call
        if placed is None:
            return UNPLACED, []
        held = best >= min(self.need, len(placed.before))
        return placed.answer if held else (FORGOT, [])


def _completion(index: int, model: str, messages: list[Any], answer: Stored) -> dict[str, Any]:
    """The ``chat.completion`` object of one answer, usage counted from the request."""
    text, tool_calls = answer
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{index}_{i}", "type": "function", "function": dict(call)}
            for i, call in enumerate(tool_calls)
        ]
    sent = len(json.dumps(messages, ensure_ascii=False)) // 4
    said = (len(text) + len(json.dumps(tool_calls))) // 4 + 1
    usage = {
        "prompt_tokens": sent,
        "completion_tokens": said,
        "total_tokens": sent + said,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    return chat_completion(index, model, 0, message, usage)


class StubServer(LocalServer):
    """The running stub: ``url`` (the base URL, ``http://127.0.0.1:<port>/v1``) and
    ``received`` (how many chat-completion requests it answered)."""

    def __init__(self, rule: Recall, model: str) -> None:
        super().__init__()
        self.rule, self.model, self.received = rule, model, 0
        self._count = threading.Lock()

    def chat(self, raw: bytes, headers: Message) -> Response:
        """The answer to one request's bytes: 400 unless it is a chat completions request."""
        try:
            body = json.loads(raw)
            messages = body["messages"]
            assert isinstance(messages, list)
        except (ValueError, KeyError, TypeError, AssertionError):
            return Response(400, b'{"error": {"message": "not a chat completions request"}}')
        with self._count:
            index = self.received
            self.received += 1
        completion = _completion(index, self.model, messages, self.rule(messages))
        return json_response(completion, ensure_ascii=False)


@contextmanager
def stub_server(
    source: Session | Iterable[Session], *, need: int = NEED, model: str = "stub-model"
) -> Iterator[StubServer]:
    """Run the bundled stub for the sessions of ``source`` (a Session, or a Corpus or other
    iterable of them) on a free port of 127.0.0.1 while the block runs; it answers by
    :class:`Recall` (``need``) and names itself ``model``.  Nothing leaves the machine."""
    sessions = [source] if isinstance(source, Session) else list(source)
    with StubServer(Recall(sessions, need), model) as server:
        yield server
