"""The transcript widget: a session's messages with their statuses, rendered in the browser.

Python decides everything shown (:func:`transcript_rows`, the statuses from
:func:`sessionkit.simulate.states.message_states`, their labels and colours from
:data:`sessionkit.schema.STATUSES`); the front-end (``widgets/transcript.js`` and
``transcript.css``, shipped as ``sessionkit/_widgets``) only draws the rows it is sent and
reports which user message was clicked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from sessionkit.nanobot.listing import flatten_content
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session
from sessionkit.schema import STATUSES
from sessionkit.store.text import shown

__all__ = ["MAX_TEXT_CHARS", "TranscriptWidget", "transcript_rows"]

MAX_TEXT_CHARS = 4000
_SUMMARY_CHARS = 120


def _front_end() -> Path:
    """Folder of the front-end files: ``sessionkit/_widgets`` in a wheel, else ``widgets/``."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "_widgets"
    return installed if installed.is_dir() else package.parent / "widgets"


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def _one_line(text: str) -> str:
    return _clip(" ".join(text.split()), _SUMMARY_CHARS)


def _call(call: Any) -> str:
    """A tool call as ``name(arguments)``."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return json.dumps(call, ensure_ascii=False)
    return f"{function.get('name', '?')}({function.get('arguments', '')})"


def transcript_rows(session: Session, tokens: list[int]) -> list[dict[str, Any]]:
    """One dict per message, as the transcript shows it.

    Keys: ``idx``, ``role``, ``user`` (the turn a user message opens under the session's
    release, or -1 for other messages, hidden checkpoints included), ``tokens``,
    ``text`` (clipped to :data:`MAX_TEXT_CHARS`), ``summary`` (one line, for collapsed tool
    rows; empty for other rows), ``calls`` (``name(arguments)`` per tool call).
    """
    rows = []
    users = 0
    is_turn = get_policy(session.policy).is_user_turn
    for i, message in enumerate(session.messages):
        turn = is_turn(message)
        role = shown(message.get("role", "?")) or "None"
        content = message.get("content")
        text = shown(content if isinstance(content, str) else flatten_content(content)) or ""
        calls = message.get("tool_calls")
        calls = [shown(_call(c)) or "" for c in calls] if isinstance(calls, list) else []
        summary = ""
        if role == "tool":
            summary = shown(f"{message.get('name') or 'tool'}: {_one_line(text)}") or ""
        elif calls:
            names = ", ".join(c.split("(", 1)[0] for c in calls)
            summary = f"{len(calls)} tool call{'s' if len(calls) > 1 else ''}: {names}"
        rows.append(
            {
                "idx": i,
                "role": role,
                "user": users if turn else -1,
                "tokens": tokens[i],
                "text": _clip(text, MAX_TEXT_CHARS),
                "summary": summary,
                "calls": [_clip(c, MAX_TEXT_CHARS) for c in calls],
            }
        )
        users += turn
    return rows


class TranscriptWidget(anywidget.AnyWidget):
    """Rows and statuses in; the clicked user message (``selected``) out."""

    _esm = _front_end() / "transcript.js"
    _css = _front_end() / "transcript.css"

    rows = traitlets.List(traitlets.Dict()).tag(sync=True)
    status: traitlets.List[Any] = traitlets.List().tag(sync=True)
    """Each message's status name; its elements not validated one by one (the explorer sets
    a thousand or more on every move, from the states frame)."""
    statuses = traitlets.List(
        traitlets.Dict(),
        [
            {"name": s.name, "label": s.label, "color": s.color, "text": s.text_color}
            for s in STATUSES
        ],
    ).tag(sync=True)
    """The status table (name, label, color, and the chip's text colour: black or white,
    whichever contrasts more), from which the front-end takes every status colour."""
    selected = traitlets.Int(-1).tag(sync=True)
    focus = traitlets.Int(-1).tag(sync=True)
    """Message index to scroll into view; the explorer sets it to the window's first message."""
