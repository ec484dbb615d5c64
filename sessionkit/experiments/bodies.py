"""The HTTP body of each experiment call: the exact request sessionkit rebuilds for a row of a
requests frame (its release and setting), the model and parameters asked, and an edit of
its current message; in the OpenAI-compatible form, or as 0.3.5's Anthropic provider sends
it (:mod:`sessionkit.nanobot.anthropic_wire_035`)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from sessionkit.experiments.rebuild import Rebuilt
from sessionkit.nanobot.anthropic_wire_035 import messages_body
from sessionkit.nanobot.policies import get_policy

__all__ = ["IDENTITY", "Edit", "anthropic_body_of", "body_of", "calls_checked", "edited"]

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


_ANTHROPIC_RELEASE = "nanobot-0.3.5"
"""The release whose Anthropic provider's body sessionkit builds."""
_AGENT_PARAMS = ("max_tokens", "temperature", "reasoning_effort", "tool_choice")
"""The parameters 0.3.5's Anthropic provider turns into its body itself."""


def anthropic_body_of(
    request: Rebuilt,
    model: str,
    params: Mapping[str, Any],
    edit: Edit,
    count: Callable[[str], int],
) -> tuple[dict[str, Any], int]:
    """The Messages API body 0.3.5's Anthropic provider sends for the loop's messages
    (edited) with ``model`` and the agent's ``max_tokens``, ``temperature``,
    ``reasoning_effort`` and ``tool_choice`` (any other parameter added to the body as it
    is), and the release's estimate of the loop's messages and tools; raises ValueError
    where the body is not known (another release, a random tool id)."""
    if request.release != _ANTHROPIC_RELEASE:
        raise ValueError(
            f"Anthropic's Messages API body is known for {_ANTHROPIC_RELEASE} only, "
            f"not {request.release}"
        )
    loop = edited(request.loop, edit)
    given = {k: params[k] for k in _AGENT_PARAMS if k in params}
    body = messages_body(loop, request.tools, model, **given)
    body.update({k: v for k, v in params.items() if k not in _AGENT_PARAMS})
    estimate = get_policy(request.release).estimate_request(loop, request.tools, count)
    return body, estimate


def body_of(
    request: Rebuilt,
    model: str,
    params: Mapping[str, Any],
    edit: Edit,
    count: Callable[[str], int],
    wire: str = "openai",
) -> tuple[dict[str, Any], int]:
    """The body sent (keys in the order nanobot's OpenAI-compatible provider writes them:
    model, messages, parameters, tools, tool_choice; ``wire="anthropic"``:
    :func:`anthropic_body_of`'s) and the release's token estimate of its messages and tools
    (``count``: a cl100k_base count, such as
    :func:`~sessionkit.experiments.piece_counts.piece_counter`'s)."""
    if wire == "anthropic":
        return anthropic_body_of(request, model, params, edit, count)
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
