"""What a release's per-call clean-up makes of each stored message, as per-message forms a
whole-store frame can add up with prefix sums instead of cleaning every request (the type a
release object's ``call_forms`` returns; 0.2.2's model is :mod:`call_forms_022`).

nanobot 0.2.2 cleans the whole list before every call (:func:`request_022.loop_messages`):
it backfills a result for each tool call left unanswered, bounds every tool result (empty
marker, offload to a file reference, truncation) and replaces the results of its file, shell
and web tools older than the newest ten by a one-line stand-in when they hold 500 characters
or more.  So each stored message has a plain form (bounded, with the results backfilled after
its tool block) and, for a long result of such a tool, a compacted one; which applies in a
request depends only on how many results of those tools follow it there.  What this model
cannot say alone (a session whose call ids repeat across blocks, a current message merged
into the history, a request over the release's own context budget) the caller rebuilds
exactly.  Pure Python; the rules are :mod:`sessionkit.nanobot.request_022`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sessionkit.nanobot import request_022
from sessionkit.nanobot.call_forms import CallForms, Form
from sessionkit.nanobot.history import Message, tool_call_ids, tool_result_id
from sessionkit.nanobot.kit import Kit

__all__ = ["call_forms"]


def _step_form(message: Message) -> Message:
    return {k: v for k, v in message.items() if k not in request_022.SAVE_ONLY_KEYS}


def _budget(kit: Mapping[str, Any]) -> int | None:
    """The budget over which 0.2.2's loop trims a request (``_snip``), None without one."""
    settings = kit["settings"]
    window = settings["context_window_tokens"]
    if not window:
        return None
    output = settings["max_tokens"]
    output = output if isinstance(output, int) else request_022.FALLBACK_MAX_OUTPUT
    budget = settings["context_block_limit"] or (window - output - request_022.SNIP_SAFETY)
    return budget if budget > 0 else None


def call_forms(
    kit: Kit,
    messages: Sequence[Message],
    entry: Callable[[Message], Message | None],
    session_key: str,
) -> CallForms:
    """The forms of ``messages`` under 0.2.2's clean-up (``entry``: its history rewrite of one
    stored message)."""
    raw = kit.raw
    where = {"kit": raw, "session_key": session_key}
    marker = raw["markers"]["backfilled_result"]
    compactable = request_022.COMPACTABLE_TOOLS
    changed: dict[int, tuple[int, Form | None, Form | None, Form | None, Form | None]] = {}
    regular = True
    answered_at: dict[str, list[int]] = {}
    for i, message in enumerate(messages):
        if message.get("role") == "tool" and (answer := tool_result_id(message)) is not None:
            answered_at.setdefault(answer, []).append(i)
    fillers: dict[int, list[Message]] = {}
    for i, message in enumerate(messages):
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        end = i + 1
        while end < len(messages) and messages[end].get("role") == "tool":
            end += 1
        names = {}
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and call.get("id"):
                function = call.get("function")
                names[str(call["id"])] = (
                    function.get("name", "") if isinstance(function, dict) else ""
                )
        for call_id in tool_call_ids(message):
            where_answered = answered_at.get(call_id, [])
            if any(not i < at < end for at in where_answered):
                regular = False
            if not where_answered:
                fillers.setdefault(end - 1, []).append(
                    {
                        "role": "tool",
                        "tool_call_id": call_id,
                        "name": names[call_id],
                        "content": marker,
                    }
                )
    for i, message in enumerate(messages):
        is_tool = message.get("role") == "tool"
        extra = fillers.get(i, [])
        if not is_tool and not extra:
            continue
        weight = int(is_tool and message.get("name") in compactable)
        weight += sum(f["name"] in compactable for f in extra)
        if any(len(f["content"]) >= request_022.COMPACT_MIN_CHARS for f in extra):
            regular = False
        forms: list[Form | None] = []
        for own in (entry(message), _step_form(message)):
            if own is None:
                forms += [list(extra), None]
                continue
            plain = [*request_022.bound_results([own], where), *extra]
            content = own.get("content")
            compacted = None
            long = isinstance(content, str) and len(content) >= request_022.COMPACT_MIN_CHARS
            if is_tool and own.get("name") in compactable and long:
                name = own.get("name", "tool")
                stand_in = request_022.fill_deep(raw["markers"]["compacted_result"], {"name": name})
                compacted = [{**own, "content": stand_in}, *extra]
            if is_tool and not own.get("tool_call_id") and plain[0] != own:
                regular = False  # bounded by a name made from its place in the request
            forms += [None if plain == [own] else plain, compacted]
        if weight or any(form is not None for form in forms):
            history, history_compacted, step, step_compacted = forms
            changed[i] = (weight, history, history_compacted, step, step_compacted)
    return CallForms(changed, request_022.COMPACT_KEEP, _budget(raw), regular)
