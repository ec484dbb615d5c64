"""The request clean-up steps several nanobot releases perform identically.

The release request modules (:mod:`~sessionkit.nanobot.request_022`, ``request_030``,
``request_035``) and the per-message estimate (:mod:`~sessionkit.nanobot.tokens`) share these
instead of each keeping a copy.  Each function says which releases use it; where their rules
part, a keyword argument (a flag, or the release's own function) carries the difference.  Pure
Python: the standard library only.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

__all__ = [
    "TEXT_TYPES",
    "WIRE_KEYS",
    "alternate",
    "as_blocks",
    "backfill",
    "call_parts",
    "content_parts",
    "drop_orphan_results",
    "empty_cleaned",
    "fill",
    "estimate_request",
    "image_mime",
    "merge_contents",
    "named_parts",
    "newest_fitting",
    "request_parts",
    "safe_filename",
    "short_id",
    "strip_malformed_calls",
    "strip_placeholders",
    "text_of_blocks",
    "truncated",
    "unique_id",
    "wire_keys",
    "without_surrogates",
]

Message = dict[str, Any]

TEXT_TYPES = ("text", "input_text", "output_text")
"""Block types whose empty text the providers drop (0.2.2, 0.3.0, 0.3.5)."""
WIRE_KEYS = frozenset(
    {"role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content", "extra_content"}
)
"""The message keys the OpenAI-compatible providers send (0.2.2, 0.3.0, 0.3.5)."""
_SENTINEL = re.compile("\u0000SK:(\\w+)\u0000")
_UNSAFE_FILENAME = re.compile(r'[<>:"/\\|?*]')
_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def fill(template: str, /, **values: str) -> str:
    """``template`` with each kit sentinel replaced by its value, in one pass (0.2.2, 0.3.0,
    0.3.5); a sentinel without a value stays."""
    return _SENTINEL.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def image_mime(data: bytes, path: str) -> str | None:
    """The type an attached file is sent as: its magic bytes, else its name's guess (0.2.2,
    0.3.0, 0.3.5)."""
    for magic, mime in _IMAGE_MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return mimetypes.guess_type(path)[0]


def strip_placeholders(messages: list[Message], placeholders: Iterable[str]) -> list[Message]:
    """Without the assistant messages whose whole text (stripped) is one of the release's
    error placeholders and that call no tool (0.3.0, 0.3.5)."""
    texts = frozenset(placeholders)
    kept = []
    for message in messages:
        content = message.get("content", "")
        text = content if isinstance(content, str) else ""
        if (
            message.get("role") == "assistant"
            and text.strip() in texts
            and not message.get("tool_calls")
        ):
            continue
        kept.append(message)
    return kept


def _named_call(call: Any) -> bool:
    if not isinstance(call, dict):
        return False
    function = call.get("function")
    name = function.get("name") if isinstance(function, dict) else call.get("name")
    return isinstance(name, str) and bool(name)


def strip_malformed_calls(messages: list[Message]) -> list[Message]:
    """Tool calls without a name removed from assistant messages, and an assistant message
    left with neither calls nor text removed (0.3.0, 0.3.5)."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if message.get("role") != "assistant" or not calls:
            out.append(message)
            continue
        kept = [call for call in calls if _named_call(call)]
        if len(kept) == len(calls):
            out.append(message)
            continue
        repaired = dict(message)
        if kept:
            repaired["tool_calls"] = kept
        else:
            repaired.pop("tool_calls", None)
            if not repaired.get("content"):
                continue
        out.append(repaired)
    return out


def _declared(message: Message) -> list[tuple[str, Any]]:
    """(id as a string, function) of each tool call of ``message`` that has an id."""
    return [
        (str(call["id"]), call.get("function"))
        for call in message.get("tool_calls") or []
        if isinstance(call, dict) and call.get("id")
    ]


def drop_orphan_results(messages: list[Message], *, strict: bool) -> list[Message]:
    """Without the tool results that answer no earlier tool call (0.2.2, 0.3.0, 0.3.5).

    ``strict`` (0.3.0, 0.3.5) drops as well a result naming no call and a second result for
    the same call; 0.2.2 (``strict=False``) keeps both.
    """
    declared: set[str] = set()
    answered: set[str] = set()
    out = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            declared.update(call_id for call_id, _ in _declared(message))
        if role == "tool":
            result_id = message.get("tool_call_id")
            result_id = str(result_id) if result_id else ""
            if not result_id:
                if strict:
                    continue
            elif result_id not in declared or (strict and result_id in answered):
                continue
            answered.add(result_id)
        out.append(message)
    return out


def backfill(messages: list[Message], text: str, *, str_names: bool) -> list[Message]:
    """A result ``text`` inserted after the results that follow each tool call no result
    answers (0.2.2, 0.3.0, 0.3.5); ``messages`` itself when every call is answered.

    The inserted result carries the call's function name; ``str_names`` (0.3.5) makes a name
    that is not a string its ``str``, 0.2.2 and 0.3.0 (``str_names=False``) keep it as it is.
    """
    declared: list[tuple[int, str, Any]] = []
    answered: set[str] = set()
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            for call_id, function in _declared(message):
                name = function.get("name", "") if isinstance(function, dict) else ""
                if str_names and not isinstance(name, str):
                    name = str(name)
                declared.append((index, call_id, name))
        elif message.get("role") == "tool" and message.get("tool_call_id"):
            answered.add(str(message["tool_call_id"]))
    missing = [entry for entry in declared if entry[1] not in answered]
    if not missing:
        return messages
    out = list(messages)
    for offset, (index, call_id, name) in enumerate(missing):
        at = index + 1 + offset
        while at < len(out) and out[at].get("role") == "tool":
            at += 1
        out.insert(at, {"role": "tool", "tool_call_id": call_id, "name": name, "content": text})
    return out


def text_of_blocks(content: list[Any]) -> str | None:
    """The blocks' texts joined by newlines, ``None`` unless every block is a text block with
    a string text (0.2.2, 0.3.0, 0.3.5: a tool result's text)."""
    texts = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "text":
            return None
        if not isinstance(block.get("text"), str):
            return None
        texts.append(block["text"])
    return "\n".join(texts)


def safe_filename(name: str) -> str:
    """A session key or call id as the file name an offloaded tool result is saved under
    (0.2.2, 0.3.0, 0.3.5)."""
    return _UNSAFE_FILENAME.sub("_", name).strip()


def truncated(text: str, limit: int, suffix: str) -> str:
    """``text`` cut to ``limit`` characters with ``suffix`` after the cut; no limit at 0 or
    below (0.2.2, 0.3.0)."""
    return text if limit <= 0 or len(text) <= limit else text[:limit] + suffix


def short_id(text: str) -> str:
    """A renamed duplicate tool-call id: ``text`` itself when it is 9 letters or digits, else
    the first 9 hex digits of its SHA-1 (0.2.2, 0.3.0, 0.3.5)."""
    if len(text) == 9 and text.isalnum():
        return text
    return hashlib.sha1(text.encode()).hexdigest()[:9]


def without_surrogates(value: Any) -> Any:
    """Every string leaf with surrogate pairs joined and lone surrogates replaced (0.3.0,
    0.3.5: the provider's last pass before the keys)."""
    if isinstance(value, str):
        if not any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
            return value
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if isinstance(value, list):
        return [without_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {key: without_surrogates(item) for key, item in value.items()}
    return value


def empty_cleaned(message: Mapping[str, Any], empty: str) -> Message:
    """One message as the provider's first pass leaves it (0.2.2, 0.3.0, 0.3.5): ``_meta`` keys gone
    (its own and its blocks'), empty text blocks dropped, empty text sent as ``empty`` (null
    beside tool calls), a dict content listed."""
    clean = {key: value for key, value in message.items() if key != "_meta"}
    content = clean.get("content")
    calls = clean.get("role") == "assistant" and clean.get("tool_calls")
    if isinstance(content, str) and not content:
        clean["content"] = None if calls else empty
    elif isinstance(content, list):
        items, changed = [], False
        for item in content:
            if isinstance(item, dict) and item.get("type") in TEXT_TYPES and not item.get("text"):
                changed = True
            elif isinstance(item, dict) and "_meta" in item:
                items.append({k: v for k, v in item.items() if k != "_meta"})
                changed = True
            else:
                items.append(item)
        if changed:
            clean["content"] = items if items else (None if calls else empty)
    elif isinstance(content, dict):
        clean["content"] = [content]
    return clean


def unique_id(raw: str, used: set[str], index: int) -> str:
    """The id the provider sends for call ``index`` of a message whose earlier calls took the
    ids in ``used``: ``raw``, else the first ``short_id(f"{raw}:{index}:{salt}")`` for salt
    1, 2, ... not taken (0.2.2, 0.3.0, 0.3.5)."""
    if raw not in used:
        return raw
    salt = 1
    while (candidate := short_id(f"{raw}:{index}:{salt}")) in used:
        salt += 1
    return candidate


def wire_keys(
    messages: list[Message],
    *,
    missing_id: Callable[[], str],
    arguments: Callable[[Any], str],
    null_text_beside_calls: bool,
) -> list[Message]:
    """The provider's key pass (0.2.2, 0.3.0, 0.3.5): the wire keys only, an assistant's
    missing content as null, tool-call ids unique within each message (the results that
    follow take the new id), each call's arguments as ``arguments`` replays them.

    ``missing_id`` gives the id of a call without one (or raises: the release sent a random
    one); ``null_text_beside_calls`` (0.2.2, 0.3.0) sends an assistant's text beside tool
    calls as null, where 0.3.5 (``False``) keeps it.
    """
    pending: dict[str, deque[str]] = {}
    out = []
    for message in messages:
        clean = {key: value for key, value in message.items() if key in WIRE_KEYS}
        if clean.get("role") == "assistant" and "content" not in clean:
            clean["content"] = None
        calls = clean.get("tool_calls")
        if isinstance(calls, list):
            used: set[str] = set()
            normalized = []
            for index, call in enumerate(calls):
                if not isinstance(call, dict):
                    normalized.append(call)
                    continue
                raw = call.get("id")
                named = isinstance(raw, str) and bool(raw)
                given = cast(str, raw)  # read only where ``named``: a non-empty str
                call = {**call, "id": unique_id(given if named else missing_id(), used, index)}
                used.add(call["id"])
                if named:
                    pending.setdefault(given, deque()).append(call["id"])
                function = call.get("function")
                if isinstance(function, dict):
                    replayed = arguments(function.get("arguments"))
                    call["function"] = {**function, "arguments": replayed}
                normalized.append(call)
            clean["tool_calls"] = normalized
            if null_text_beside_calls and clean.get("role") == "assistant":
                clean["content"] = None
        result_id = clean.get("tool_call_id")
        if result_id and isinstance(result_id, str) and pending.get(result_id):
            clean["tool_call_id"] = pending[result_id].popleft()
        out.append(clean)
    return out


def alternate(
    messages: list[Message], synthetic_user: str, *, merge_user_blocks: bool
) -> list[Message]:
    """The provider's last pass (0.2.2, 0.3.0, 0.3.5): consecutive user (or assistant)
    messages merged, trailing assistant messages dropped (the last one sent as a user message
    when nothing else would ask), and ``synthetic_user`` before a leading plain assistant.

    Two same-role texts join with a blank line; where one is not text the later message
    replaces the earlier, except that ``merge_user_blocks`` (0.3.5) joins two user contents as
    one block list.  An assistant with tool calls replaces a plain one before it; a plain one
    after one with tool calls is dropped.
    """
    merged: list[Message] = []
    for message in messages:
        role = message.get("role")
        if not (merged and role in ("user", "assistant") and merged[-1].get("role") == role):
            merged.append(dict(message))
            continue
        previous = merged[-1]
        if role == "assistant":
            if message.get("tool_calls"):
                merged[-1] = dict(message)
                continue
            if previous.get("tool_calls"):
                continue
        left, right = previous.get("content") or "", message.get("content") or ""
        if isinstance(left, str) and isinstance(right, str):
            previous["content"] = (left + "\n\n" + right).strip()
        elif merge_user_blocks and role == "user":
            combined = dict(message)
            combined["content"] = [dict(block) for block in as_blocks(left) + as_blocks(right)]
            merged[-1] = combined
        else:
            merged[-1] = dict(message)
    popped = None
    while merged and merged[-1].get("role") == "assistant":
        popped = merged.pop()
    if merged and popped is not None and not any(m.get("role") in ("user", "tool") for m in merged):
        merged.append({**popped, "role": "user"})
    for index, message in enumerate(merged):
        if message.get("role") != "system":
            if message.get("role") == "assistant" and not message.get("tool_calls"):
                merged.insert(index, {"role": "user", "content": synthetic_user})
            break
    return merged


def as_blocks(value: Any) -> list[Any]:
    """A content as a block list: a list's dicts kept (others as text blocks), ``None`` none,
    anything else one text block (0.2.2, 0.3.0, 0.3.5)."""
    if isinstance(value, list):
        return [
            item if isinstance(item, dict) else {"type": "text", "text": str(item)}
            for item in value
        ]
    if value is None:
        return []
    return [{"type": "text", "text": str(value)}]


def merge_contents(left: Any, right: Any, *, drop_empty_right: bool) -> Any:
    """Two same-role contents as one: texts joined by a blank line (``right`` alone after an
    empty ``left``), else both as blocks (0.2.2, 0.3.0, 0.3.5).

    ``drop_empty_right`` (0.3.0's context builder) gives ``left`` alone after it an empty
    ``right``; 0.2.2 and 0.3.5's loop (``False``) still add the blank line.
    """
    if isinstance(left, str) and isinstance(right, str):
        if not left:
            return right
        if drop_empty_right and not right:
            return left
        return f"{left}\n\n{right}"
    return as_blocks(left) + as_blocks(right)


def named_parts(message: Mapping[str, Any]) -> list[str]:
    """The message's ``name`` and ``tool_call_id`` where they are non-empty text: two of the
    texts every estimate joins (0.2.2, 0.3.0, 0.3.5; per message and whole request)."""
    parts = []
    for key in ("name", "tool_call_id"):
        value = message.get(key)
        if isinstance(value, str) and value:
            parts.append(value)
    return parts


def call_parts(message: Mapping[str, Any]) -> list[str]:
    """The message's tool calls as JSON and its reasoning text, where it has them: two more
    of the texts every estimate joins (0.2.2, 0.3.0, 0.3.5; per message and whole request)."""
    parts = []
    if message.get("tool_calls"):
        parts.append(json.dumps(message["tool_calls"], ensure_ascii=False))
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        parts.append(reasoning)
    return parts


def content_parts(content: Any, *, skip_non_string_text: bool, other_blocks: bool) -> list[Any]:
    """The texts a content adds to an estimate: a text itself, each text block's truthy text
    (0.2.2, 0.3.0, 0.3.5; per message and whole request).

    ``skip_non_string_text`` (0.3.5) leaves out a truthy text that is not a string, which the
    others keep (and then fail to join); ``other_blocks`` (the per-message estimate) adds any
    other block, and a content that is neither text nor a list, as JSON.
    """
    if isinstance(content, str):
        return [content]
    parts: list[Any] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text", "")
                if text and (isinstance(text, str) or not skip_non_string_text):
                    parts.append(text)
            elif other_blocks:
                parts.append(json.dumps(block, ensure_ascii=False))
    elif other_blocks and content is not None:
        parts.append(json.dumps(content, ensure_ascii=False))
    return parts


def request_parts(
    messages: Sequence[Mapping[str, Any]], *, skip_non_string_text: bool
) -> list[Any]:
    """The texts a whole-request estimate joins, message by message: the content's text
    (images and other blocks left out), tool calls, reasoning, name, tool call id (0.2.2,
    0.3.0, 0.3.5).

    A text block's truthy text that is not a string is kept (0.2.2 and 0.3.0 then fail on it);
    ``skip_non_string_text`` (0.3.5) leaves it out.
    """
    parts: list[Any] = []
    for message in messages:
        content = message.get("content")
        parts += content_parts(
            content, skip_non_string_text=skip_non_string_text, other_blocks=False
        )
        parts += call_parts(message)
        parts += named_parts(message)
    return parts


def estimate_request(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    count: Callable[[str], int],
    *,
    skip_non_string_text: bool,
) -> int:
    """The whole-request estimate of 0.3.0 and 0.3.5 (``estimate_prompt_tokens_chain``):
    ``count`` of the :func:`request_parts` joined by newlines, plus ``count`` of the tools'
    JSON (after a newline when any part came first), plus 4 per message; UTF-8 bytes instead
    of tokens when ``count`` raises.  ``skip_non_string_text`` as in :func:`request_parts`
    (0.3.0 raises ``TypeError`` joining such a text)."""
    parts = request_parts(messages, skip_non_string_text=skip_non_string_text)
    payload = "\n".join(parts)
    framing = 4 * len(messages)
    rendered = json.dumps(list(tools), ensure_ascii=False) if tools else ""
    try:
        tool_tokens = count(("\n" if parts else "") + rendered) if tools else 0
        return (count(payload) if payload else 0) + tool_tokens + framing
    except Exception:  # the releases fall back on any failure of their encoder
        tail = (("\n" if payload else "") + rendered) if tools else ""
        return len((payload + tail).encode("utf-8")) + framing


def newest_fitting(
    messages: Sequence[Message], room: int, cost: Callable[[Message], int]
) -> list[Message]:
    """The newest of ``messages`` whose ``cost`` adds up to at most ``room``, in order; the
    newest one always (0.2.2, 0.3.0: the history snip)."""
    kept: list[Message] = []
    used = 0
    for message in reversed(messages):
        price = cost(message)
        if kept and used + price > room:
            break
        kept.append(message)
        used += price
    kept.reverse()
    return kept
