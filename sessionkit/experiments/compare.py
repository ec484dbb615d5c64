"""An answer beside what the session did at that call: the stored answer, whether both take
the same action, how alike their texts are, and how often a call's samples agree."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from difflib import SequenceMatcher
from typing import Any

from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session

__all__ = ["Stored", "action_of", "agreement", "same_action", "stored_answers", "text_similarity"]

Stored = tuple[str, list[dict[str, str]]]
"""A stored answer: its text ("" when none) and tool calls (``{"name", "arguments"}``)."""


def _tool_calls(message: Mapping[str, Any]) -> list[dict[str, str]]:
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        function = function if isinstance(function, Mapping) else {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append({"name": str(function.get("name")), "arguments": arguments})
    return calls


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return content if isinstance(content, str) else ""


def stored_answers(
    session: Session, calls: Collection[tuple[int, int]] | None = None
) -> dict[tuple[int, int], Stored]:
    """Each agent call's answer as the session stored it, by (turn, step): the step-th
    assistant message after the turn's user message, before the next one (``calls``: only
    those (turn, step) pairs; None: all)."""
    is_turn = get_policy(session.policy).is_user_turn
    found: dict[tuple[int, int], Stored] = {}
    turn, step = -1, 0
    for message in session.messages:
        if is_turn(message):
            turn, step = turn + 1, 0
        elif turn >= 0 and message.get("role") == "assistant":
            if calls is None or (turn, step) in calls:
                found[(turn, step)] = (_text(message.get("content")), _tool_calls(message))
            step += 1
    return found


def _number(text: str) -> float | int:
    """A JSON number with a fraction, as an int when it is whole (``1.0`` equals ``1``)."""
    value = float(text)
    return int(value) if value.is_integer() else value


def _arguments(text: str) -> Any:
    """Tool-call arguments as JSON data (the text itself when it is no JSON)."""
    try:
        return json.loads(text, parse_float=_number)
    except ValueError:
        return text


def action_of(tool_calls: Sequence[Mapping[str, str]]) -> str:
    """An answer's action as one comparable text: its tool names and JSON arguments in order
    (key order and spacing aside), or ``"text"`` for an answer calling no tool."""
    if not tool_calls:
        return "text"
    data = [[c["name"], _arguments(c["arguments"])] for c in tool_calls]
    return json.dumps(data, sort_keys=True, ensure_ascii=False)


def same_action(a: Sequence[Mapping[str, str]], b: Sequence[Mapping[str, str]]) -> bool:
    """Whether two answers call the same tools with JSON-equal arguments in the same order,
    or both call none."""
    return action_of(a) == action_of(b)


def text_similarity(a: str, b: str) -> float:
    """difflib's ratio of two texts (2 * matched characters / both lengths; autojunk off, so
    deterministic for long texts too); 1.0 for two empty texts."""
    return SequenceMatcher(None, a, b, autojunk=False).ratio()


def agreement(actions: Sequence[str | None]) -> float:
    """The share of the answered samples (actions; None: no answer) taking the most common
    action; NaN when none answered."""
    answered = [a for a in actions if a is not None]
    if not answered:
        return float("nan")
    return Counter(answered).most_common(1)[0][1] / len(answered)
