"""nanobot-ai 0.3.0's whole request, rebuilt: the current message, the turn's steps, the agent
runner's clean-up and the OpenAI-compatible provider's, and the release's own token estimate.

One LLM call of 0.3.0 is ``[system, *history, current, *steps]``: ``history`` is
``get_history`` taken at the start of the turn, before its user message was stored; ``current``
is that user message as the loop built it (a same-role history tail absorbs it); ``steps`` are
the messages the runner appended in earlier rounds of the same turn.  Before every call the
runner's context governor cleans a copy (placeholder and malformed-call stripping, orphan tool
results dropped, missing ones backfilled, the tool-result budget, in-flight compaction and a
history snip when the whole request would pass ``context_window - max_tokens - 1024``), and the
provider cleans it again for the wire (``_meta`` keys and other keys dropped, empty text marked,
tool-call arguments re-serialised, assistant text beside tool calls dropped, same-role messages
merged).  The texts the clean-ups insert are the release's, read from the kit its probe
(:mod:`sessionkit.nanobot.probes.probe_030`) returned; nothing here carries nanobot's text.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePath
from typing import Any

from sessionkit.nanobot import request_rules, tokens
from sessionkit.nanobot.history import RUNTIME_CONTEXT_KEY, find_legal_message_start
from sessionkit.nanobot.history import public_message as public_user_message
from sessionkit.nanobot.request_rules import (
    alternate,
    backfill,
    drop_orphan_results,
    empty_cleaned,
    image_mime,
    merge_contents,
    newest_fitting,
    request_parts,
    safe_filename,
    strip_malformed_calls,
    strip_placeholders,
    text_of_blocks,
    truncated,
    wire_keys,
    without_surrogates,
)
from sessionkit.nanobot.request_rules import fill as _fill

__all__ = [
    "LoopSettings",
    "Unreproducible",
    "consolidation_messages",
    "current_message",
    "estimate_request",
    "loop_messages",
    "system_prompt",
    "turn_steps",
    "wire_messages",
]

Message = dict[str, Any]
Count = Callable[[str], int]

_META = "_meta"
_RUNTIME_META = "runtime_context"  # the key of the current message's ``_meta``
_SAVE_ONLY_KEYS = ("timestamp", "latency_ms")
_MESSAGE_FRAMING = 4


class Unreproducible(ValueError):
    """The release made this part of the request from something not on disk (a random id,
    a repaired argument string, runtime-context blocks whose boundaries were not stored)."""


# -- the system prompt and the current message -------------------------------------------------


def _session_prompt(kit: Mapping[str, Any], session_key: str) -> str:
    """The kit's prompt with this session's recent-history part (as of the probe)."""
    recent = (kit.get("recent_history") or {}).get(session_key)
    return kit["system_text"] + kit["joiner"] + recent if recent else kit["system_text"]


def system_prompt(kit: Mapping[str, Any], session_key: str, metadata: Mapping[str, Any]) -> str:
    """The system prompt of a turn of session ``session_key`` whose metadata (as the turn
    started) is ``metadata``: the kit's prompt, then this session's recent-history part (as of
    the probe), then the archived summary when ``_last_summary`` is set."""
    text = _session_prompt(kit, session_key)
    joiner = kit["joiner"]
    summary = metadata.get("_last_summary")
    if isinstance(summary, Mapping) and kit.get("summary"):
        moment = datetime.fromisoformat(summary["last_active"]).isoformat()
        text += joiner + _fill(kit["summary"], text=f"{summary['text']}", last_active=moment)
    return text


def consolidation_messages(
    kit: Mapping[str, Any], session_key: str, metadata: Mapping[str, Any], history: list[Message]
) -> list[Message]:
    """The synthetic request whose whole-request estimate 0.3.0's consolidator compares with
    ``context_window - max_tokens - 1024`` before and after every turn: the session's system
    prompt (its recent history; the ``_last_summary`` text bare, without the turn's wrapper),
    the whole unconsolidated history (``get_history(max_messages=<its length>)``) and the kit's
    stand-in current message, merged into a trailing user message as a turn's current message
    is.  Its channel is the session key's prefix; its prompt is the agent workspace's (a
    project scope does not apply)."""
    text = _session_prompt(kit, session_key)
    joiner = kit["joiner"]
    summary = metadata.get("_last_summary")
    bare = summary.get("text") if isinstance(summary, Mapping) else summary
    if bare and isinstance(summary, Mapping | str):
        text += joiner + _fill(kit["consolidation"]["summary"], text=f"{bare}")
    current = {"role": "user", "content": kit["consolidation"]["current"]}
    return _initial(text, history, current)


def _read_file(path: str) -> bytes | None:
    file = Path(path)
    return file.read_bytes() if file.is_file() else None


def _user_content(text: Any, media: Any, read: Callable[[str], bytes | None]) -> Any:
    """Text alone, or image blocks (as data URLs, their path under ``_meta``) then the text."""
    if not media:
        return text
    images = []
    for path in media:
        data = read(path)
        if data is None:
            continue
        mime = image_mime(data, path)
        if not mime or not mime.startswith("image/"):
            continue
        url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
        block = {
            "type": "image_url",
            "image_url": {"url": url},
            _META: {"path": str(PurePath(path))},
        }
        images.append(block)
    return images + [{"type": "text", "text": text}] if images else text


def _runtime_blocks(marker: Mapping[str, Any]) -> list[str]:
    """The runtime-context blocks a stored marker joined into its suffix."""
    suffix = marker["suffix"]
    sources = marker.get("sources") or []
    if len(sources) <= 1:
        return [suffix]
    pieces = suffix.split("\n\n")
    if len(pieces) != len(sources):
        raise Unreproducible(
            "the message's runtime context joins several blocks with blank lines inside them; "
            "where one ends is not stored"
        )
    return pieces


def _with_runtime_context(content: Any, marker: Mapping[str, Any] | None) -> tuple[Any, Any]:
    """The content with the stored runtime context appended as the loop appended it, and the
    marker the loop put under ``_meta`` (None without runtime context)."""
    if not marker:
        return content, None
    blocks = _runtime_blocks(marker)
    sources = list(marker.get("sources") or [])
    if isinstance(content, list):
        added = [{"type": "text", "text": block} for block in blocks]
        return [*content, *added], {"version": 1, "sources": sources, "blocks": added}
    text = "" if content is None else str(content)
    suffix = "\n\n".join(blocks)
    merged = f"{text}\n\n{suffix}" if text else suffix
    return merged, {"version": 1, "sources": sources, "suffix": suffix}


def current_message(
    kit: Mapping[str, Any],
    user: Mapping[str, Any],
    *,
    read_media: Callable[[str], bytes | None] = _read_file,
) -> Message:
    """The stored user message of a turn -> the ``current`` message 0.3.0's loop built for it.

    0.3.0 stores the user text with its runtime context appended (and a ``_runtime_context``
    marker); the loop sent the same text, the runtime context appended again, and the marker
    under ``_meta.runtime_context``.  Image attachments (``media``) were sent as data URLs read
    from their files, which ``read_media`` reads now (a file gone is left out, as the release
    leaves out a file it cannot read).  Automation records (``_automation_turn``) may store a
    text other than the one sent (a cron job's ``persist_content``): the stored text is used.
    """
    stored = dict(user)
    marker = stored.get(RUNTIME_CONTEXT_KEY)
    text = public_user_message(stored).get("content", "")
    template = kit["current"]
    if isinstance(text, str):
        text = _fill(template["content"], text=text)
    content = _user_content(text, stored.get("media"), read_media)
    versioned = isinstance(marker, Mapping) and marker.get("version") == 1
    content, meta = _with_runtime_context(content, marker if versioned else None)
    current: Message = {**{k: v for k, v in template.items() if k != _META}, "content": content}
    if meta is not None:
        current[_META] = {_RUNTIME_META: meta}
    return current


# -- the turn's steps ----------------------------------------------------------------------------


def in_memory(message: Mapping[str, Any]) -> Message:
    return {k: v for k, v in message.items() if k not in _SAVE_ONLY_KEYS}


def turn_steps(turn: list[Message]) -> list[list[Message]]:
    """The stored messages of one turn after its user message -> what the runner had appended
    before each of its calls: step 0 = [], step k = everything before the turn's k-th assistant
    message (each assistant message is one call's answer).

    The messages are the stored ones without the keys saving added (``timestamp``,
    ``latency_ms``).  Where saving changed a message the call saw, the stored form is all there
    is: a ``read_file`` result longer than ``max_tool_result_chars`` was sent whole and stored
    truncated; image blocks of tool results and injected messages were stored as text
    placeholders; tool results with an undeclared or repeated id were not stored.  A turn
    answered by a command (``_command``) made no call; a subagent follow-up record
    (``injected_event: subagent_result``) starts another run, so the steps stop there.  Calls
    leaving no assistant message (empty answers retried, the final no-tools retries) are not
    seen.
    """
    if turn and turn[0].get("_command"):
        return []
    steps: list[list[Message]] = [[]]
    answered = False
    for index, message in enumerate(turn):
        if not _is_assistant(message):
            continue
        if message.get("injected_event") == "subagent_result":
            break
        if answered:
            steps.append([in_memory(m) for m in turn[:index]])
        answered = True
    return steps


# -- the runner's clean-up -----------------------------------------------------------------------


@dataclass(frozen=True)
class LoopSettings:
    """What 0.3.0's context governor needs besides the messages: the kit's ``loop`` texts and
    constants, the tool definitions, the session key (it names the folder of persisted tool
    results), the budget settings and ``count`` (cl100k tokens; it must raise on special-token
    text as tiktoken's ``encode`` does, so the estimate takes the release's byte fallback)."""

    loop: Mapping[str, Any]
    tools: Sequence[Mapping[str, Any]]
    count: Count
    session_key: str | None
    context_window_tokens: int
    max_tokens: int
    context_block_limit: int | None
    max_tool_result_chars: int

    @classmethod
    def from_kit(
        cls, kit: Mapping[str, Any], *, session_key: str | None, count: Count, **overrides: Any
    ) -> LoopSettings:
        """Settings from a kit (its config's budget), ``overrides`` by field name."""
        loop = kit["loop"]
        values: dict[str, Any] = {
            "loop": loop,
            "tools": kit["tools"],
            "count": count,
            "session_key": session_key,
            "context_window_tokens": loop["context_window_tokens"],
            "max_tokens": loop["max_tokens"],
            "context_block_limit": loop["context_block_limit"],
            "max_tool_result_chars": loop["max_tool_result_chars"],
        }
        values.update(overrides)
        return cls(**values)

    @property
    def budget(self) -> int:
        """The input budget the governor compacts and snips to (0: no budget)."""
        if not self.context_window_tokens:
            return 0
        buffer = self.loop["safety_buffer"]
        budget = self.context_block_limit or (self.context_window_tokens - self.max_tokens - buffer)
        return budget if budget > 0 else 0


def _initial(system: str, history: list[Message], current: Message) -> list[Message]:
    messages: list[Message] = [{"role": "system", "content": system}, *history]
    if messages[-1].get("role") == current["role"]:
        last = dict(messages[-1])
        content = current.get("content")
        last["content"] = merge_contents(last.get("content"), content, drop_empty_right=True)
        meta = (current.get(_META) or {}).get(_RUNTIME_META)
        if meta is not None:
            last[_META] = {**(last.get(_META) or {}), _RUNTIME_META: meta}
        messages[-1] = last
    else:
        messages.append(current)
    return messages


def _is_assistant(message: Mapping[str, Any]) -> bool:
    return message.get("role") == "assistant"


def _tool_result(settings: LoopSettings, call_id: str, name: str, result: Any) -> Any:
    """A tool result as the governor sends it: never empty, and past the size limit replaced
    by a reference to the file it was saved to (``read_file`` excepted), else truncated."""
    loop = settings.loop
    if isinstance(result, list):
        joined = text_of_blocks(result)
        blank = not result or (joined is not None and not joined.strip())
    else:
        blank = result is None or (isinstance(result, str) and not result.strip())
    if blank:
        result = _fill(loop["empty_tool_result"], name=name)
    if name in frozenset(loop["offload_exempt_tools"]):
        return result
    content = _offloaded(settings, call_id, result)
    limit = settings.max_tool_result_chars
    if isinstance(content, str) and len(content) > limit:
        return truncated(content, limit, loop["truncated_suffix"])
    return content


def _offloaded(settings: LoopSettings, call_id: str, content: Any) -> Any:
    limit = settings.max_tool_result_chars
    if limit <= 0:
        return content
    if isinstance(content, str):
        payload, suffix = content, "txt"
    elif isinstance(content, list):
        joined = text_of_blocks(content)
        if joined is None:
            return content
        payload, suffix = joined, "json"
    else:
        return content
    if len(payload) <= limit:
        return content
    loop = settings.loop
    bucket = safe_filename(settings.session_key or "default")
    path = PurePath(loop["tool_results_root"], bucket, f"{safe_filename(call_id)}.{suffix}")
    preview_chars = loop["preview_chars"]
    cut = len(payload) > preview_chars
    template = loop["tool_result_reference_cut" if cut else "tool_result_reference"]
    return _fill(template, path=str(path), size=str(len(payload)), preview=payload[:preview_chars])


def _apply_tool_result_budget(settings: LoopSettings, messages: list[Message]) -> list[Message]:
    out = messages
    for index, message in enumerate(messages):
        if message.get("role") != "tool":
            continue
        content = message.get("content")
        call_id = str(message.get("tool_call_id") or f"tool_{index}")
        sent = _tool_result(settings, call_id, str(message.get("name") or "tool"), content)
        if sent != content:
            if out is messages:
                out = list(messages)
            out[index] = {**message, "content": sent}
    return out


def estimate_request(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], count: Count
) -> int:
    """0.3.0's whole-request estimate (``estimate_prompt_tokens_chain`` with a provider that
    has no counter of its own, as the OpenAI-compatible one): cl100k tokens of the messages'
    texts joined by newlines, plus the tools' JSON (after a newline when any message text
    came first), plus 4 per message; UTF-8 bytes instead of tokens when ``count`` raises.

    The release computes it on the list the loop hands its provider (``loop_messages``): the
    governor compares it with the budget, and it stands in for usage a provider did not report.
    """
    return request_rules.estimate_request(messages, tools, count, skip_non_string_text=False)


def _upper_bound(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> int:
    """At least :func:`estimate_request` (a token is at least one byte): the bytes it would
    count without a tokenizer, one more for the newline before the tools.  Raises
    ``UnicodeEncodeError`` on a lone surrogate (the estimate itself may then raise too)."""
    parts = request_parts(messages, skip_non_string_text=False)
    rendered = json.dumps(list(tools), ensure_ascii=False) if tools else ""
    size = len("\n".join(parts).encode("utf-8")) + len(rendered.encode("utf-8")) + 1
    return size + len(messages) * _MESSAGE_FRAMING


def _within(settings: LoopSettings, messages: list[Message], budget: int) -> tuple[bool, int]:
    """Whether the whole request fits ``budget``, and its estimate (-1 when the byte bound
    settled it without counting)."""
    try:
        if _upper_bound(messages, settings.tools) <= budget:
            return True, -1
    except UnicodeEncodeError:
        pass
    estimate = estimate_request(messages, settings.tools, settings.count)
    return estimate <= budget, estimate


def _message_tokens(message: Mapping[str, Any], count: Count) -> int:
    """0.3.0's per-message estimate: content (other blocks as JSON), name, tool call id, tool
    calls, reasoning, joined by newlines (:func:`tokens.message_payload`); tokens + 4, or UTF-8
    bytes + 4 when counting fails."""
    payload = tokens.message_payload(dict(message))
    if not payload:
        return _MESSAGE_FRAMING
    try:
        return max(_MESSAGE_FRAMING, count(payload) + _MESSAGE_FRAMING)
    except Exception:
        return max(_MESSAGE_FRAMING, len(payload.encode("utf-8")) + _MESSAGE_FRAMING)


def _compacted_text(settings: LoopSettings, message: Mapping[str, Any]) -> str:
    return _fill(settings.loop["tool_result_compacted"], name=f"{message.get('name', 'tool')}")


def _compact_in_flight(
    settings: LoopSettings, messages: list[Message], start: int, compacted: set[str]
) -> list[Message]:
    """Replace large results of this turn's tool calls by a compaction notice while the whole
    request passes the budget; ``compacted`` (the ids compacted so far) grows in place."""
    budget = settings.budget
    if budget <= 0:
        return messages
    out = messages
    for index, message in enumerate(messages):
        call_id = message.get("tool_call_id")
        if message.get("role") == "tool" and call_id and str(call_id) in compacted:
            notice = _compacted_text(settings, message)
            if message.get("content") != notice:
                out = out if out is not messages else list(messages)
                out[index] = {**message, "content": notice}
    fits, estimate = _within(settings, out, budget)
    if fits:
        return out
    loop = settings.loop
    compactable = frozenset(loop["compactable_tools"])
    candidates = [
        (index, str(message["tool_call_id"]))
        for index, message in enumerate(out)
        if index >= start
        and message.get("role") == "tool"
        and message.get("name") in compactable
        and message.get("tool_call_id")
        and str(message["tool_call_id"]) not in compacted
        and isinstance(message.get("content"), str)
        and len(message["content"]) >= loop["compact_min_chars"]
    ]
    target = int(budget * loop["compact_target_ratio"])
    for k, (index, call_id) in enumerate(candidates):
        if k == len(candidates) - 1 and estimate <= budget:
            break
        if call_id in compacted:
            continue
        out = out if out is not messages else list(messages)
        compacted.add(call_id)
        out[index] = {**out[index], "content": _compacted_text(settings, out[index])}
        estimate = estimate_request(out, settings.tools, settings.count)
        if estimate <= target:
            break
    return out


def _user_tail(messages: list[Message], *, last: bool = False) -> list[Message]:
    indexes = range(len(messages) - 1, -1, -1) if last else range(len(messages))
    for index in indexes:
        if messages[index].get("role") == "user":
            return messages[index:]
    return []


def _snip_history(settings: LoopSettings, messages: list[Message]) -> list[Message]:
    """Keep the system messages and the newest others that fit the budget, from a user
    message on and without orphan tool results."""
    budget = settings.budget
    if not messages or not settings.context_window_tokens or budget <= 0:
        return messages
    if _within(settings, messages, budget)[0]:
        return messages
    system = [m for m in messages if m.get("role") == "system"]
    others = [m for m in messages if m.get("role") != "system"]
    if not others:
        return messages
    count = settings.count
    fixed = max(
        sum(_message_tokens(m, count) for m in system),
        estimate_request(system, settings.tools, count),
    )
    room = max(0, budget - fixed)
    kept = newest_fitting(others, room, lambda m: _message_tokens(m, count))
    fallback = kept or others[-1:]
    kept = _user_tail(kept) or _user_tail(others, last=True) or fallback
    return system + kept[find_legal_message_start(kept) :]


def governed(
    settings: LoopSettings, messages: list[Message], start: int, compacted: set[str]
) -> list[Message]:
    """The copy 0.3.0's context governor makes of the runner's messages for one call."""
    filler = settings.loop["backfill"]
    out = strip_placeholders(messages, settings.loop["placeholder_assistant"])
    out = strip_malformed_calls(out)
    out = backfill(drop_orphan_results(out, strict=True), filler, str_names=False)
    out = _apply_tool_result_budget(settings, out)
    out = _compact_in_flight(settings, out, start, compacted)
    out = _snip_history(settings, out)
    return backfill(drop_orphan_results(out, strict=True), filler, str_names=False)


def loop_messages(
    system: str,
    history: list[Message],
    current: Message,
    steps: list[Message],
    settings: LoopSettings,
) -> list[Message]:
    """What 0.3.0's agent loop handed its provider for the call after ``steps``.

    The runner keeps, across the calls of a turn, the ids of the tool results it compacted to
    fit the budget; the earlier calls of the turn (one before each assistant message in
    ``steps``) are replayed to know them.
    """
    initial = _initial(system, history, current)
    start = len(initial)
    compacted: set[str] = set()
    earlier = [index for index, message in enumerate(steps) if _is_assistant(message) and index]
    for stop in [0, *earlier] if steps else []:
        governed(settings, initial + steps[:stop], start, compacted)
    return governed(settings, initial + list(steps), start, compacted)


# -- the provider's clean-up ---------------------------------------------------------------------


def _no_call_id() -> str:
    raise Unreproducible("a tool call has no id; 0.3.0 sends a random one (pass new_id=...)")


def _arguments_object(arguments: Any, repair: Callable[[str], Any] | None) -> Any:
    if arguments is None or not isinstance(arguments, dict | str):
        return {}
    if isinstance(arguments, dict):
        return arguments
    stripped = arguments.strip()
    if not stripped:
        return {}
    try:
        parsed = json.loads(stripped)
    except Exception:
        if repair is None:
            raise Unreproducible(
                "a tool call's arguments are not valid JSON; 0.3.0 repaired them with "
                "json_repair (pass repair=json_repair.loads)"
            ) from None
        try:
            parsed = repair(stripped)
        except Exception:
            return {}
    return parsed if isinstance(parsed, dict) else {}


def wire_messages(
    loop_messages: list[Message],
    wire: Mapping[str, Any],
    *,
    repair: Callable[[str], Any] | None = None,
    new_id: Callable[[], str] | None = None,
) -> list[Message]:
    """The ``messages`` of the Chat Completions body 0.3.0's OpenAI-compatible provider sends
    for ``loop_messages`` (``wire``: the kit's ``wire`` texts).

    This is the plain provider (no provider-specific quirks: DeepSeek's string-only content,
    Mistral's 9-character ids, reasoning stripped or backfilled for thinking models, cache
    markers for Claude models behind a caching gateway, the Responses API).  A tool call
    without an id is sent with a random one (``new_id`` supplies it); arguments that are not
    valid JSON were repaired by ``json_repair`` (``repair`` does it).  Both raise
    :class:`Unreproducible` when not given.
    """
    empty = wire["empty_content"]
    messages = without_surrogates([empty_cleaned(m, empty) for m in loop_messages])
    keyed = wire_keys(
        messages,
        missing_id=new_id or _no_call_id,
        arguments=lambda raw: json.dumps(_arguments_object(raw, repair), ensure_ascii=False),
        null_text_beside_calls=True,
    )
    return alternate(keyed, wire["synthetic_user"], merge_user_blocks=False)
