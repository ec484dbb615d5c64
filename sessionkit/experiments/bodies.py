"""The HTTP body of each experiment call: the exact request sessionkit rebuilds for a row of a
requests frame (its release and setting), the model and parameters asked, and an edit of
its current message."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from sessionkit.experiments.rebuild import Rebuilt
from sessionkit.nanobot.policies import get_policy

__all__ = ["IDENTITY", "Edit", "body_of", "calls_checked", "edited"]

Message = dict[str, Any]
Edit = str | Callable[[list[Message]], list[Message]] | None
"""An edit of a request's messages: the new text of its last user message, a function from
the messages (a copy) to the messages sent, or None (as stored)."""

IDENTITY = ("session_key", "policy", "turn", "step")
"""The columns of a requests frame that name a call (its setting columns follow)."""


def _set_text(message: Message, text: str) -> Message:
    """``message`` with its text replaced by ``text`` (a block list: its first text block's)."""
    content = message.get("content")
    if isinstance(content, list):
        blocks = [dict(b) if isinstance(b, dict) else b for b in content]
        at = next((i for i, b in enumerate(blocks) if isinstance(b, dict) and "text" in b), None)
        if at is not None:
            blocks[at]["text"] = text
            return {**message, "content": blocks}
    return {**message, "content": text}


def edited(messages: list[Message], edit: Edit) -> list[Message]:
    """The messages sent under ``edit`` (a new list; an edit works on a deep copy, so the
    request's own messages are left alone)."""
    if edit is None:
        return list(messages)
    copied = copy.deepcopy(messages)
    if callable(edit):
        return edit(copied)
    last = max((i for i, m in enumerate(copied) if m.get("role") == "user"), default=None)
    if last is None:
        raise ValueError("the request holds no user message to edit")
    copied[last] = _set_text(copied[last], edit)
    return copied


def body_of(
    request: Rebuilt,
    model: str,
    params: Mapping[str, Any],
    edit: Edit,
    count: Callable[[str], int],
) -> tuple[dict[str, Any], int]:
    """The body sent (keys in the order nanobot's OpenAI-compatible provider writes them:
    model, messages, parameters, tools, tool_choice) and the release's token estimate of its
    messages and tools (``count``: a cl100k_base count, such as
    :func:`~sessionkit.experiments.piece_counts.piece_counter`'s)."""
    messages = edited(request.messages, edit)
    body: dict[str, Any] = {"model": model, "messages": messages, **params}
    if request.tools:
        body["tools"] = request.tools
        body.setdefault("tool_choice", "auto")
    estimate = get_policy(request.release).estimate_request(messages, request.tools, count)
    return body, estimate


def calls_checked(calls: pd.DataFrame, settings: tuple[str, ...]) -> None:
    """Refuse, naming what is missing, a frame that is no selection of a requests frame."""
    if not isinstance(calls, pd.DataFrame):
        raise TypeError(f"calls must be rows of a sk.requests frame, not {type(calls).__name__}")
    missing = [c for c in (*IDENTITY, *settings) if c not in calls.columns]
    if missing:
        raise ValueError(
            f"calls must be rows of a sk.requests frame; these columns are missing: {missing}"
        )
