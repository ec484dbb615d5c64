"""What nanobot 0.3.0's and 0.3.5's per-call clean-up makes of each stored message, as the
per-message forms of :mod:`sessionkit.nanobot.call_forms` (0.2.2's model is
:mod:`call_forms_022`).

Both releases clean the whole list before every call: placeholder replies and nameless tool
calls stripped, orphan and repeated tool results dropped, unanswered calls backfilled, every
tool result bounded (empty marker, offload to a file reference, truncation); neither compacts
results by count (weight 0).  Each of those rules reads one tool block at most (an assistant
message and the results after it), so each stored message's form is what the release's own
clean-up makes of its block alone.  What this model cannot say alone (a call id answered
outside its own block, user messages the clean-up would merge, a request over 0.3.0's own
context budget, where it compacts in-flight results and snips the history) the caller
rebuilds exactly.  Pure Python; the rules are the releases' (``clean``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sessionkit.nanobot.call_forms import CallForms, Form
from sessionkit.nanobot.history import Message, tool_call_ids, tool_result_id

__all__ = ["call_forms"]

_TAG = "\u0000sessionkit-source"
"""The key that carries each message's position through the release's clean-up."""

Clean = Callable[[list[Message]], list[Message]]


def _segments(messages: Sequence[Message]) -> list[range]:
    """Each tool block (an assistant message with tool calls and the results after it) and
    every other message alone."""
    out: list[range] = []
    i = 0
    while i < len(messages):
        end = i + 1
        if messages[i].get("role") == "assistant" and messages[i].get("tool_calls"):
            while end < len(messages) and messages[end].get("role") == "tool":
                end += 1
        out.append(range(i, end))
        i = end
    return out


def _regular(messages: Sequence[Message], segments: list[range]) -> bool:
    """Whether every result's call id is declared and answered within one block only."""
    answered_at: dict[str, list[int]] = {}
    for i, message in enumerate(messages):
        if message.get("role") == "tool" and (answer := tool_result_id(message)) is not None:
            answered_at.setdefault(answer, []).append(i)
    declared: dict[str, int] = {}
    for block in segments:
        head = messages[block.start]
        if head.get("role") != "assistant":
            continue
        for call_id in tool_call_ids(head):
            if declared.setdefault(call_id, block.start) != block.start:
                return False
            if any(at not in block for at in answered_at.get(call_id, [])):
                return False
    return True


def _forms(
    clean: Clean,
    messages: Sequence[Message],
    block: range,
    own: Callable[[Message], Message | None],
) -> dict[int, Form]:
    """The cleaned form of each message of ``block`` (``own``: its form before the clean-up;
    a backfilled result belongs with the message before it)."""
    tagged = [{**m, _TAG: i} for i in block if (m := own(messages[i])) is not None]
    out: dict[int, Form] = {i: [] for i in block}
    at: Any = None  # the index of the last tagged message (a result backfilled after it has none)
    for message in clean(tagged):
        at = message.get(_TAG, at)
        out[at].append({k: v for k, v in message.items() if k != _TAG})
    return out


def _merges_users(forms: Sequence[Form | None], originals: Sequence[Form]) -> bool:
    """Whether two user messages meet once the clean-up dropped what stood between them."""
    last = None
    for form, original in zip(forms, originals, strict=True):
        for message in original if form is None else form:
            role = message.get("role")
            if role == "user" and last == "user":
                return True
            last = role
    return False


def call_forms(
    messages: Sequence[Message],
    entry: Callable[[Message], Message | None],
    step: Callable[[Message], Message | None],
    clean: Clean,
    *,
    budget: int | None,
    merges_users: bool,
) -> CallForms:
    """The forms of ``messages`` under a 0.3.x clean-up (``entry`` / ``step``: the release's
    history rewrite of one stored message and the form a turn's step holds, None where left
    out; ``clean``: the release's clean-up of a list without its budget-driven steps;
    ``merges_users``: whether it merges adjacent user messages, as 0.3.5 does)."""
    segments = _segments(messages)
    changed: dict[int, tuple[int, Form | None, Form | None, Form | None, Form | None]] = {}
    history: list[Form | None] = [None] * len(messages)
    steps: list[Form | None] = [None] * len(messages)
    for block in segments:
        for own, out in ((entry, history), (step, steps)):
            for i, form in _forms(clean, messages, block, own).items():
                source = own(messages[i])
                out[i] = None if form == ([] if source is None else [source]) else form
    for i in range(len(messages)):
        if history[i] is not None or steps[i] is not None:
            changed[i] = (0, history[i], None, steps[i], None)
    regular = _regular(messages, segments)
    if merges_users:
        for own, forms in ((entry, history), (step, steps)):
            sources = [[] if (e := own(m)) is None else [e] for m in messages]
            regular = regular and not _merges_users(forms, sources)
    return CallForms(changed, 0, budget, regular)
