"""nanobot-ai 0.2.2's whole request, rebuilt from what it saved: the current message, the
steps of a turn, the agent loop's per-call clean-up, the OpenAI-compatible provider's
clean-up and the loop's whole-request token estimate.

Every text the release inserts (runtime context, clean-up markers) comes from the release's
kit (:mod:`sessionkit.nanobot.probes.probe_022`); these functions only apply its rules.
Pure Python: the standard library and :mod:`sessionkit.nanobot` only.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from sessionkit.nanobot import tokens
from sessionkit.nanobot.history import find_legal_message_start
from sessionkit.nanobot.request_rules import (
    alternate,
    backfill,
    drop_orphan_results,
    empty_cleaned,
    fill,
    image_mime,
    merge_contents,
    newest_fitting,
    request_parts,
    safe_filename,
    text_of_blocks,
    truncated,
    wire_keys,
)

__all__ = [
    "changed_at_save",
    "current_message",
    "estimate_request",
    "loop_messages",
    "release_clock",
    "system_prompt",
    "turn_steps",
    "wire_messages",
]

Message = dict[str, Any]
Kit = Mapping[str, Any]
Count = Callable[[str], int]

SAVE_ONLY_KEYS = ("timestamp", "latency_ms")
# The loop's microcompact: older results of these tools, past the 10 newest, shrink to a
# one-line marker when they hold at least 500 characters.
COMPACTABLE_TOOLS = frozenset(
    {
        "read_file",
        "exec",
        "grep",
        "find_files",
        "web_search",
        "web_fetch",
        "list_dir",
        "list_exec_sessions",
    }
)
COMPACT_KEEP = 10
COMPACT_MIN_CHARS = 500
_OFFLOAD_EXEMPT_TOOLS = frozenset({"read_file"})
_PREVIEW_CHARS = 1200
_RESULTS_DIR = Path(".nanobot") / "tool-results"
SNIP_SAFETY = 1024
FALLBACK_MAX_OUTPUT = 4096


def fill_deep(value: Any, values: Mapping[str, str]) -> Any:
    """A copy of ``value`` with every sentinel in its strings replaced, in one pass."""
    if isinstance(value, str):
        return fill(value, **values)
    if isinstance(value, list):
        return [fill_deep(item, values) for item in value]
    if isinstance(value, dict):
        return {key: fill_deep(item, values) for key, item in value.items()}
    return value


def release_clock(stamp: str, zone: str | None, local_zone: str | None) -> str:
    """The clock line 0.2.2 writes (``current_time_str``) at the moment ``stamp`` names.

    ``stamp`` is a stored time stamp (naive local time of the nanobot process, whose zone is
    ``local_zone``; UTC when unknown); ``zone`` is the configured ``agents.defaults.timezone``
    (an unknown name shows local time under that name, as the release does).
    """
    local = ZoneInfo(local_zone) if local_zone else UTC
    moment = datetime.fromisoformat(stamp)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=local)
    try:
        target = ZoneInfo(zone) if zone else None
    except Exception:
        target = None
    shown = moment.astimezone(target or local)
    offset = shown.strftime("%z")
    offset = f"{offset[:3]}:{offset[3:]}" if len(offset) == 5 else offset
    name = zone or shown.tzname() or "UTC"
    return f"{shown.strftime('%Y-%m-%d %H:%M (%A)')} ({name}, UTC{offset})"


def system_prompt(kit: Kit, last_summary: Mapping[str, Any] | None = None) -> str:
    """The system prompt, with the archived-summary part when the session's metadata holds a
    ``_last_summary`` (``{"text", "last_active"}``; 0.2.2 adds it to every later turn's prompt,
    ``last_active`` re-read as a datetime and written back in ISO form)."""
    if not isinstance(last_summary, Mapping):
        return kit["system_text"]
    active = datetime.fromisoformat(last_summary["last_active"]).isoformat()
    part = fill_deep(kit["summary"], {"text": str(last_summary["text"]), "last_active": active})
    return kit["system_text"] + kit["joiner"] + part


def _image_urls(media: Any) -> list[tuple[str, str]]:
    """(data URL, path) of each stored media path that is an image file on disk now."""
    found: list[tuple[str, str]] = []
    for path in media if isinstance(media, list) else []:
        file = Path(path)
        if not file.is_file():
            continue
        raw = file.read_bytes()
        mime = image_mime(raw, path)
        if mime and mime.startswith("image/"):
            found.append((f"data:{mime};base64,{base64.b64encode(raw).decode()}", str(file)))
    return found


def current_message(kit: Kit, user: Mapping[str, Any]) -> Message:
    """The stored user message of a turn -> the current message the loop built for it.

    0.2.2 stores the user's text alone (the runtime context is never saved) and builds the
    current message as the text, a blank line and the runtime context: the clock (inferred:
    read a moment before the stored time stamp was taken, formatted by :func:`release_clock`),
    the channel, chat and sender (``kit["runtime"]``; the sender is not stored).  Stored
    media paths that are image files on disk *now* become leading image blocks (with the
    release's ``_meta`` path key) and the text moves into text blocks.
    """
    text = user.get("content")
    if not isinstance(text, str):
        raise ValueError("0.2.2 stores the current user message's content as text")
    stamp = user.get("timestamp")
    if not isinstance(stamp, str):
        raise ValueError("the stored user message has no time stamp to read the clock from")
    runtime = kit["runtime"]
    values = {
        "text": text,
        "time": release_clock(stamp, kit["settings"]["timezone"], runtime["timezone"]),
        "chat_id": str(runtime["chat_id"]),
        "sender_id": str(runtime["sender_id"]),
    }
    images = _image_urls(user.get("media"))
    if not images:
        return fill_deep(kit["current"], values)
    template = kit["current_media"]
    image, *rest = template["content"]
    blocks = [fill_deep(image, {"image_url": url, "image_path": path}) for url, path in images]
    return {**fill_deep(template, values), "content": blocks + fill_deep(rest, values)}


def turn_steps(turn: Sequence[Mapping[str, Any]]) -> list[list[Message]]:
    """The stored messages after a turn's user message -> what the loop had appended before
    each of its calls: step 0 nothing, step k the assistant tool calls and tool results of
    rounds 0..k-1.

    Saving added ``timestamp`` (and ``latency_ms`` on the turn's last assistant message);
    both are removed here.  What saving cut cannot come back: a tool result the loop kept
    whole in memory (``read_file``'s, which is never offloaded, and block lists holding
    images) was saved with each text cut to ``max_tool_result_chars`` (:func:`changed_at_save`
    tells them), and its image blocks as text placeholders.  Messages
    the loop appended mid-turn as user messages (follow-ups injected while it ran, length
    recovery prompts) are stored like user turns and end the turn here.
    """
    steps: list[list[Message]] = [[]]
    appended: list[Message] = []
    for message in turn:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            if appended:
                steps.append(list(appended))
        elif role != "tool" or not appended:
            break
        appended.append({k: v for k, v in message.items() if k not in SAVE_ONLY_KEYS})
    if appended:
        steps.append(list(appended))
    return steps


def changed_at_save(message: Mapping[str, Any], kit: Kit) -> bool:
    """Whether saving cut a text of this stored tool result (only results the loop kept whole
    in memory can be cut: ``read_file``'s and block lists; others were bounded before)."""
    if message.get("role") != "tool":
        return False
    limit = kit["settings"]["max_tool_result_chars"]
    suffix = kit["markers"]["truncated_suffix"]
    content = message.get("content")
    texts: list[Any]  # the texts to check: a block's "text" may be anything
    if isinstance(content, str) and message.get("name") in _OFFLOAD_EXEMPT_TOOLS:
        texts = [content]
    elif isinstance(content, list):
        texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    else:
        return False
    cut = limit + len(suffix)
    return limit > 0 and any(
        isinstance(t, str) and len(t) == cut and t.endswith(suffix) for t in texts
    )


def _microcompact(messages: list[Message], kit: Kit) -> list[Message]:
    indices = [
        i
        for i, m in enumerate(messages)
        if m.get("role") == "tool" and m.get("name") in COMPACTABLE_TOOLS
    ]
    out = list(messages)
    for index in indices[: max(0, len(indices) - COMPACT_KEEP)]:
        content = out[index].get("content")
        if isinstance(content, str) and len(content) >= COMPACT_MIN_CHARS:
            name = out[index].get("name", "tool")
            marker = fill_deep(kit["markers"]["compacted_result"], {"name": name})
            out[index] = {**out[index], "content": marker}
    return out


def _tool_result(content: Any, call_id: str, name: str, where: Mapping[str, Any]) -> Any:
    """A tool result as the loop bounds it before each call (empty-result marker, offload
    of long results to a file under the workspace named by reference, truncation)."""
    kit = where["kit"]
    text = text_of_blocks(content) if isinstance(content, list) else None
    if content is None or (isinstance(content, str) and not content.strip()) or content == []:
        return fill_deep(kit["markers"]["empty_tool_result"], {"name": name})
    if text is not None and not text.strip():
        return fill_deep(kit["markers"]["empty_tool_result"], {"name": name})
    if name in _OFFLOAD_EXEMPT_TOOLS:
        return content
    limit = kit["settings"]["max_tool_result_chars"]
    payload = content if isinstance(content, str) else text
    if limit > 0 and payload is not None and len(payload) > limit:
        bucket = safe_filename(where["session_key"] or "default")
        suffix = "txt" if isinstance(content, str) else "json"
        path = Path(kit["settings"]["workspace"]) / _RESULTS_DIR / bucket
        path = path / f"{safe_filename(call_id)}.{suffix}"
        more = len(payload) > _PREVIEW_CHARS
        template = kit["markers"]["tool_reference_more" if more else "tool_reference"]
        values = {"path": str(path), "size": str(len(payload))}
        content = fill_deep(template, {**values, "preview": payload[:_PREVIEW_CHARS]})
    if isinstance(content, str) and len(content) > limit:
        return truncated(content, limit, kit["markers"]["truncated_suffix"])
    return content


def bound_results(messages: list[Message], where: Mapping[str, Any]) -> list[Message]:
    out = list(messages)
    for index, message in enumerate(messages):
        if message.get("role") != "tool":
            continue
        call_id = str(message.get("tool_call_id") or f"tool_{index}")
        name = str(message.get("name") or "tool")
        bounded = _tool_result(message.get("content"), call_id, name, where)
        if bounded != message.get("content"):
            out[index] = {**message, "content": bounded}
    return out


def _message_tokens(message: Mapping[str, Any], count: Count) -> int:
    """0.2.2's per-message estimate (``estimate_message_tokens``) with ``count``."""
    payload = tokens.message_payload(dict(message))
    if not payload:
        return tokens.FRAMING_TOKENS
    if tokens.has_special_tokens(payload):
        return tokens.fallback_payload_tokens(payload)
    return max(tokens.FRAMING_TOKENS, count(payload) + tokens.FRAMING_TOKENS)


def _snip(messages: list[Message], where: Mapping[str, Any]) -> list[Message]:
    """Keep the newest messages that fit the loop's budget (system prompt and tools first)."""
    settings = where["kit"]["settings"]
    window = settings["context_window_tokens"]
    if not messages or not window:
        return messages
    output = settings["max_tokens"]
    output = output if isinstance(output, int) else FALLBACK_MAX_OUTPUT
    budget = settings["context_block_limit"] or (window - output - SNIP_SAFETY)
    tools, count = where["tools"], where["count"]
    if budget <= 0 or estimate_request(messages, tools, count) <= budget:
        return messages
    system = [m for m in messages if m.get("role") == "system"]
    rest = [m for m in messages if m.get("role") != "system"]
    if not rest:
        return messages
    fixed = max(
        sum(_message_tokens(m, count) for m in system), estimate_request(system, tools, count)
    )
    room = max(0, budget - fixed)
    kept = newest_fitting(rest, room, lambda m: _message_tokens(m, count))
    first_user = next((i for i, m in enumerate(kept) if m.get("role") == "user"), None)
    if first_user is not None:
        kept = kept[first_user:]
    else:
        last_user = next(
            (i for i in range(len(rest) - 1, -1, -1) if rest[i].get("role") == "user"), None
        )
        kept = rest[last_user:] if last_user is not None else kept
    kept = kept[find_legal_message_start(kept) :]
    if not kept:
        kept = rest[-min(len(rest), 4) :]
        kept = kept[find_legal_message_start(kept) :]
    return system + kept


def loop_messages(
    system: str,
    history: Sequence[Mapping[str, Any]],
    current: Mapping[str, Any],
    steps: Sequence[Mapping[str, Any]],
    *,
    kit: Kit,
    session_key: str | None = None,
    count: Count | None = None,
) -> list[Message]:
    """What the agent loop handed its provider for one call.

    ``[system, *history, current, *steps]``, the current message merged into a last history
    message of the same role, then the loop's clean-up before every call: orphan tool
    results dropped, missing ones backfilled, old long results of file/shell/web tools
    compacted, every tool result bounded (offloaded results are named by the file path under
    ``kit["settings"]["workspace"]`` and the bucket of ``session_key``), and, when the whole
    request's estimate exceeds the context budget, only the newest messages that fit kept
    (``count`` is a cl100k_base count; sessionkit's own by default); then orphans and
    backfills once more.
    """
    messages: list[Message] = [{"role": "system", "content": system}, *map(dict, history)]
    if messages[-1].get("role") == current.get("role"):
        messages[-1] = {
            **messages[-1],
            "content": merge_contents(
                messages[-1].get("content"), current.get("content"), drop_empty_right=False
            ),
        }
    else:
        messages.append(copy.deepcopy(dict(current)))
    messages += [copy.deepcopy(dict(m)) for m in steps]
    where = {
        "kit": kit,
        "session_key": session_key,
        "tools": list(kit["tools"]),
        "count": count or _cl100k_count,
    }
    filler = kit["markers"]["backfilled_result"]
    messages = backfill(drop_orphan_results(messages, strict=False), filler, str_names=False)
    messages = _snip(bound_results(_microcompact(messages, kit), where), where)
    return backfill(drop_orphan_results(messages, strict=False), filler, str_names=False)


def _cl100k_count(text: str) -> int:
    return len(tokens.encoding().encode_ordinary(text))


def _no_call_id() -> str:
    raise ValueError("a tool call without an id: 0.2.2 sends a random one")


def _replay_arguments(arguments: Any) -> str:
    """Tool-call arguments as the provider replays them: a JSON object, ``{}`` otherwise."""
    parsed: Any = {}
    if isinstance(arguments, dict):
        parsed = arguments
    elif isinstance(arguments, str) and arguments.strip():
        try:
            parsed = json.loads(arguments.strip())
        except ValueError:
            raise ValueError(
                "tool-call arguments that are not JSON: 0.2.2 repairs them with json_repair"
            ) from None
    return json.dumps(parsed if isinstance(parsed, dict) else {}, ensure_ascii=False)


def wire_messages(loop: Sequence[Mapping[str, Any]], *, kit: Kit) -> list[Message]:
    """The ``messages`` of the HTTP body an OpenAI-compatible provider sends for ``loop``.

    The generic provider (no provider-specific spec): empty texts become the release's
    empty marker (``None`` for assistant text beside tool calls), ``_meta`` keys and keys
    outside the chat-completions message go, tool-call arguments are replayed as JSON
    objects, duplicate call ids within one message are renamed, assistant text beside tool
    calls is sent as null, then same-role neighbours are merged.  Raises ``ValueError``
    where the release would send what cannot be known (a random id for a call without one,
    arguments repaired by ``json_repair``).
    """
    markers = kit["markers"]
    cleaned = [empty_cleaned(m, markers["empty_content"]) for m in loop]
    keyed = wire_keys(
        cleaned, missing_id=_no_call_id, arguments=_replay_arguments, null_text_beside_calls=True
    )
    return alternate(keyed, markers["synthetic_user"], merge_user_blocks=False)


def estimate_request(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, count: Count
) -> int:
    """0.2.2's whole-request estimate (``estimate_prompt_tokens``; no provider counts itself):
    the texts, tool calls, reasoning, names and call ids of every message joined by newlines,
    the tool definitions as JSON after one more newline, and 4 per message.  0 where the
    release's encoder refuses (special-token text) or a text block's text is not a string,
    as the release returns 0 then (and so never trims the request)."""
    parts = request_parts(messages, skip_non_string_text=False)
    if not all(isinstance(part, str) for part in parts):
        return 0
    text = "\n".join(parts)
    rendered = (
        ("\n" if parts else "") + json.dumps(list(tools), ensure_ascii=False) if tools else ""
    )
    if tokens.has_special_tokens(text) or tokens.has_special_tokens(rendered):
        return 0
    return (count(text) if parts else 0) + (count(rendered) if tools else 0) + 4 * len(messages)
