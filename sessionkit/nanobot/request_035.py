"""nanobot-ai 0.3.5's request for one LLM call, rebuilt from what it saved.

One agent call of 0.3.5 sends ``[system, *history, current, *steps]`` after two clean-ups:
the agent loop's (placeholder assistants and malformed tool calls removed, orphan tool
results dropped, missing ones backfilled, oversized tool results offloaded to a file and
referenced, adjacent user messages merged around their runtime context) and the
OpenAI-compatible provider's (``_meta`` keys and empty text blocks dropped, empty text sent as
``null`` or a stand-in, only the allowed keys kept, tool-call arguments re-serialised,
consecutive same-role messages merged, trailing assistant messages dropped).

The texts the clean-ups insert or recognise are nanobot's and come from the kit the release's
probe rendered (``kit["loop"]``, ``kit["wire"]``, ``kit["current"]``): this module holds the
rules only; it is pandas-free and reads nothing but a turn's attached images.  Where the
request depends on something the session file does not hold (an automation turn's prompt,
arguments only a JSON repair library could read, a random tool-call id), it raises
:class:`NotOnDisk` rather than guess.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path, PurePath
from typing import Any, cast

from sessionkit.nanobot import request_rules
from sessionkit.nanobot.history import CONTINUATION_TEXT, Message, is_hidden_history
from sessionkit.nanobot.request_rules import (
    alternate,
    as_blocks,
    backfill,
    drop_orphan_results,
    empty_cleaned,
    image_mime,
    merge_contents,
    safe_filename,
    strip_malformed_calls,
    strip_placeholders,
    text_of_blocks,
    wire_keys,
    without_surrogates,
)
from sessionkit.nanobot.request_rules import fill as _fill

__all__ = [
    "NotOnDisk",
    "current_message",
    "estimate_request",
    "image_block",
    "loop_messages",
    "system_prompt",
    "turn_steps",
    "wire_messages",
]

RUNTIME_CONTEXT_KEY = "_runtime_context"
"""Where a stored user message keeps its runtime-context marker."""
META_CONTEXT_KEY = "runtime_context"
"""Where an in-memory message keeps the same marker (under ``_meta``)."""


class NotOnDisk(ValueError):
    """What the release sent here depends on something its session file does not hold."""


# --- the system prompt -----------------------------------------------------------------------


def system_prompt(
    kit: Mapping[str, Any],
    last_summary: Any = None,
    *,
    updated_at: datetime | None = None,
) -> str:
    """The system prompt of a turn: the kit's, plus the archived-summary part when the
    session's metadata holds a usable ``_last_summary``.

    0.3.5 reads ``{"text", "last_active"}`` at every turn: no part without a non-empty text,
    none for the archive's "nothing to keep" answer (``kit["summary_skipped"]``); a
    ``last_active`` that is not ISO text becomes the session's ``updated_at``.  The governor's
    summary inside a turn passes the clock at that moment as ``last_active``.
    """
    if not isinstance(last_summary, Mapping):
        return kit["system_text"]
    text = last_summary.get("text")
    if not isinstance(text, str) or not text or text == kit["summary_skipped"]:
        return kit["system_text"]
    active = last_summary.get("last_active")
    try:
        datetime.fromisoformat(active)  # type: ignore[arg-type]  # any value: a TypeError is the answer
    except (TypeError, ValueError):
        if updated_at is None:
            raise NotOnDisk("the summary's last_active is not a time: pass updated_at") from None
        active = updated_at.isoformat()
    # ``active`` is text here: ISO text fromisoformat took, or ``updated_at``'s.
    part = _fill(kit["summary"], text=text, last_active=cast(str, active))
    return kit["system_text"] + kit["joiner"] + part


# --- the current message ---------------------------------------------------------------------


def image_block(path: str, data: bytes) -> Message | None:
    """The image block 0.3.5 builds from one attached file's bytes (``None``: not an image)."""
    mime = image_mime(data, path)
    if not mime or not mime.startswith("image/"):
        return None
    url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
    return {"type": "image_url", "image_url": {"url": url}, "_meta": {"path": str(PurePath(path))}}


def _context_texts(marker: Mapping[str, Any]) -> list[str]:
    """The runtime-context blocks a stored suffix marker joined, one text per source."""
    suffix, sources = marker.get("suffix"), marker.get("sources")
    if not isinstance(suffix, str) or not isinstance(sources, list) or not sources:
        raise NotOnDisk("the stored runtime-context marker holds no suffix to split")
    if len(sources) == 1:
        return [suffix]
    texts = suffix.split("\n\n")
    if len(texts) != len(sources):
        raise NotOnDisk(
            f"the stored runtime context joins {len(sources)} blocks whose own text holds blank "
            "lines: where one ends cannot be told"
        )
    return texts


def _with_images(
    content: str, marker: Mapping[str, Any] | None, images: Sequence[Message]
) -> tuple[list[Message], dict[str, Any] | None]:
    """The block content (images, text, context blocks) of a user turn with images."""
    if marker is None:
        return [*copy.deepcopy(list(images)), {"type": "text", "text": content}], None
    suffix = marker.get("suffix")
    texts = _context_texts(marker)
    if content == suffix:
        visible = ""
    elif isinstance(suffix, str) and content.endswith("\n\n" + suffix):
        visible = content[: -len(suffix) - 2]
    else:
        raise NotOnDisk("the stored text does not end with its runtime context")
    blocks = [{"type": "text", "text": text} for text in texts]
    content_blocks = [*copy.deepcopy(list(images)), {"type": "text", "text": visible}, *blocks]
    sources = list(marker["sources"])
    return content_blocks, {"version": 1, "sources": sources, "blocks": copy.deepcopy(blocks)}


def _images_now(paths: list[Any]) -> list[Message]:
    """The image blocks of the stored media paths, from the files as they are now."""
    blocks = []
    for path in paths:
        if not isinstance(path, str) or not path:
            continue
        try:
            data = Path(path).read_bytes() if Path(path).is_file() else None
        except OSError:
            data = None
        block = image_block(path, data) if data is not None else None
        if block is not None:
            blocks.append(block)
    return blocks


def current_message(
    kit: Mapping[str, Any], user: Message, *, images: Sequence[Message] | None = None
) -> Message:
    """The stored user message of a turn -> the ``current`` message the loop built for it.

    0.3.5 stores the user text with its runtime context already appended (the same blocks the
    loop appended to the current message) and the marker under ``_runtime_context``; the loop
    carried that marker under ``_meta``.  A turn with attached images sent them first, as data
    URLs of the files' bytes: ``images`` are those blocks (:func:`image_block`), by default
    read now from the stored ``media`` paths (files gone or no longer images are left out, as
    the release leaves them out).  Automation turns (cron, triggers) sent a rendered prompt,
    not the stored text: :class:`NotOnDisk`.
    """
    if is_hidden_history(user):
        raise NotOnDisk(
            "a hidden or automation message: the release sent a prompt it did not store"
        )
    content = user.get("content")
    if not isinstance(content, str):
        raise NotOnDisk("the stored user content is not text: the turn's input was not stored")
    stored = user.get(RUNTIME_CONTEXT_KEY)
    marker = copy.deepcopy(stored) if isinstance(stored, dict) else None
    media = user.get("media")
    has_media = isinstance(media, list) and any(isinstance(p, str) and p for p in media)
    if has_media and images is None:
        images = _images_now(cast(list[Any], media))  # ``has_media``: a list
    template = kit["current"]
    current: Message = {
        key: _fill(value, text=content) if key == "content" else copy.deepcopy(value)
        for key, value in template.items()
    }
    if has_media and images:
        current["content"], marker = _with_images(current["content"], marker, images)
    if marker is not None:
        current["_meta"] = {**current.get("_meta", {}), META_CONTEXT_KEY: marker}
    return current


# --- the steps of a turn ---------------------------------------------------------------------


def in_loop(message: Message) -> bool:
    """Whether a stored message of a turn was part of the loop's transcript."""
    if message.get("_command"):
        return False
    if is_hidden_history(message) and message.get("content") == CONTINUATION_TEXT:
        return False  # a summary checkpoint: inserted at save, never in the transcript
    return not (
        message.get("role") == "assistant"
        and (message.get("_channel_delivery") or message.get("injected_event") == "subagent_result")
    )


def as_held(message: Message) -> Message:
    """A stored message as the loop held it: no save time or latency, the runtime-context
    marker back under ``_meta``."""
    held: Message = {}
    for key, value in message.items():
        if key == "timestamp" or (key == "latency_ms" and message.get("role") == "assistant"):
            continue
        if key == RUNTIME_CONTEXT_KEY and message.get("role") == "user":
            continue
        held[key] = copy.deepcopy(value)
        if key == "content" and isinstance(message.get(RUNTIME_CONTEXT_KEY), dict):
            held["_meta"] = {META_CONTEXT_KEY: copy.deepcopy(message[RUNTIME_CONTEXT_KEY])}
    return held


def turn_steps(turn: list[Message]) -> list[list[Message]]:
    """The stored messages after a turn's user message -> what the loop had appended before
    each of its calls: ``[0]`` is empty, ``[k]`` everything before the k-th saved reply.

    Each call's reply is saved as one assistant message (tool calls, a final answer, a cut
    answer before its recovery prompt, or the error placeholder), so the calls are counted by
    those.  Left out, as the loop never held them: message-tool deliveries mirrored into the
    session, subagent follow-ups, command replies and summary checkpoints.  What saving
    changed and cannot be undone from disk: inline images in tool results became
    ``[image: path]`` text; a follow-up id was dropped; a provider-state mark on an assistant
    (Responses-style providers only) was dropped.  A turn whose calls all failed saved
    nothing: one call.  A turn answered by a command made none.  Each held message is a copy of
    the stored one, made once and shared by the steps that hold it (as the loop's list grew).
    """
    held: list[Message] = []
    steps: list[list[Message]] = []
    for message in turn:
        if not in_loop(message):
            continue
        if message.get("role") == "assistant":
            steps.append(list(held))
        held.append(as_held(message))
    if steps:
        return steps
    return [] if any(m.get("_command") for m in turn) else [[]]


# --- the agent loop's clean-up ---------------------------------------------------------------


class _ToolResults:
    """0.3.5's tool-result rule: empty results marked, oversized text offloaded to a file
    under the workspace and replaced by a reference to it."""

    def __init__(self, rules: Mapping[str, Any], session_key: str | None) -> None:
        self.rules = rules
        self.folder = f"{rules['tool_results_root']}/{safe_filename(session_key or 'default')}"

    def _offloaded(self, text: str, call_id: str) -> str:
        limit = self.rules["max_tool_result_chars"]
        if limit <= 0 or len(text) <= limit:
            return text
        path = f"{self.folder}/{safe_filename(call_id)}.txt"
        preview_chars = self.rules["preview_chars"]
        cut = len(text) > preview_chars
        template = self.rules["tool_result_reference_cut" if cut else "tool_result_reference"]
        reference = _fill(template, path=path, size=str(len(text)), preview=text[:preview_chars])
        if len(reference) > limit:
            reference = _fill(self.rules["tool_result_too_long"], path=path)
        return reference

    def _nonempty(self, name: str, content: Any) -> Any:
        marker = _fill(self.rules["empty_tool_result"], name=name)
        if content is None or (isinstance(content, str) and not content.strip()):
            return marker
        if isinstance(content, list):
            if not content:
                return marker
            text = text_of_blocks(content)
            if text is not None and not text.strip():
                return marker
        return content

    def normalized(self, call_id: str, name: str, content: Any) -> Any:
        result = self._nonempty(name, content)
        if name in self.rules["offload_exempt_tools"]:
            return result
        if isinstance(result, str):
            return self._offloaded(result, call_id)
        if not isinstance(result, list):
            return result
        for block in result:
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                return result
            if block["type"] == "text" and not isinstance(block.get("text"), str):
                return result
        return [
            {**block, "text": self._offloaded(block["text"], f"{call_id}_text_{index}")}
            if block["type"] == "text"
            else block
            for index, block in enumerate(result)
        ]


def _budget_tool_results(
    messages: list[Message], rules: Mapping[str, Any], session_key: str | None
) -> list[Message]:
    results = _ToolResults(rules, session_key)
    out = []
    for index, message in enumerate(messages):
        if message.get("role") == "tool":
            content = message.get("content")
            normalized = results.normalized(
                str(message.get("tool_call_id") or f"tool_{index}"),
                str(message.get("name") or "tool"),
                content,
            )
            if normalized != content:
                message = {**message, "content": normalized}
        out.append(message)
    return out


def _detached(content: Any, marker: Any) -> tuple[Any, list[str], list[Message]] | None:
    """A content with its runtime context taken off (``None`` when it does not end with it)."""
    if marker is None:
        return content, [], []
    if marker.get("version") != 1:
        return None
    sources = marker.get("sources")
    sources = [s for s in sources if isinstance(s, str) and s] if isinstance(sources, list) else []
    suffix = marker.get("suffix")
    if isinstance(content, str) and isinstance(suffix, str) and suffix:
        if content == suffix:
            return "", sources, [{"type": "text", "text": suffix}]
        if content.endswith("\n\n" + suffix):
            return content[: -len(suffix) - 2], sources, [{"type": "text", "text": suffix}]
        return None
    expected = marker.get("blocks")
    if isinstance(content, list) and isinstance(expected, list) and expected:
        if content[-len(expected) :] != expected:
            return None
        return content[: -len(expected)], sources, copy.deepcopy(expected)
    return None


def _reattached(content: Any, sources: list[str], blocks: list[Message]) -> tuple[Any, Message]:
    blocks = copy.deepcopy(blocks)
    if isinstance(content, str) and all(
        b.get("type") == "text" and isinstance(b.get("text"), str) for b in blocks
    ):
        suffix = "\n\n".join(b["text"] for b in blocks)
        merged = f"{content}\n\n{suffix}" if content else suffix
        return merged, {"version": 1, "sources": list(sources), "suffix": suffix}
    visible = as_blocks(content) if not isinstance(content, list) else list(content)
    return [*visible, *blocks], {"version": 1, "sources": list(sources), "blocks": blocks}


def _context_marker(message: Message) -> Any:
    meta = message.get("_meta")
    marker = meta.get(META_CONTEXT_KEY) if isinstance(meta, dict) else None
    return marker if isinstance(marker, dict) else None


def _mergeable(message: Message, continuation: str) -> bool:
    meta = message.get("_meta")
    boundary = isinstance(meta, dict) and meta.get("provider_state_boundary") is True
    return (
        message.get("role") == "user"
        and message.get("content") != continuation
        and not is_hidden_history(message)
        and not boundary
    )


def _merged_users(left: Message, right: Message) -> Message:
    merged = dict(left)
    left_marker, right_marker = _context_marker(left), _context_marker(right)
    detached_left = _detached(merged.get("content"), left_marker)
    detached_right = _detached(right.get("content"), right_marker)
    if detached_left is None or detached_right is None:
        merged["content"] = merge_contents(
            merged.get("content"), right.get("content"), drop_empty_right=False
        )
        return merged
    content = merge_contents(detached_left[0], detached_right[0], drop_empty_right=False)
    blocks = [*detached_left[2], *detached_right[2]]
    if blocks:
        content, marker = _reattached(content, [*detached_left[1], *detached_right[1]], blocks)
        left_meta, right_meta = left.get("_meta"), right.get("_meta")
        meta = dict(left_meta) if isinstance(left_meta, dict) else {}
        for key, value in (right_meta if isinstance(right_meta, dict) else {}).items():
            meta.setdefault(key, value)
        meta[META_CONTEXT_KEY] = marker
        merged["_meta"] = meta
    merged["content"] = content
    return merged


def _merge_adjacent_users(messages: list[Message], continuation: str) -> list[Message]:
    out: list[Message] = []
    for source in messages:
        message = copy.deepcopy(source)
        if out and _mergeable(message, continuation) and _mergeable(out[-1], continuation):
            out[-1] = _merged_users(out[-1], message)
            continue
        out.append(message)
    return out


def cleaned_for_model(
    messages: list[Message], rules: Mapping[str, Any], session_key: str | None
) -> list[Message]:
    """The loop's clean-up of one list (``prepare_messages_for_model``)."""
    messages = strip_placeholders(messages, rules["placeholder_assistant"])
    messages = strip_malformed_calls(messages)
    messages = drop_orphan_results(messages, strict=True)
    messages = backfill(messages, rules["backfill"], str_names=True)
    messages = _budget_tool_results(messages, rules, session_key)
    return _merge_adjacent_users(messages, rules["continuation"])


def loop_messages(
    system: str,
    history: list[Message],
    current: Message,
    steps: list[Message],
    *,
    kit: Mapping[str, Any],
    session_key: str | None,
) -> list[Message]:
    """What 0.3.5's agent loop handed its provider for one call of a turn: ``[system,
    *history, current, *steps]`` after the loop's clean-up.

    The first call sends the cleaned ``[system, *history, current]``; each later call re-sends
    the previous call's cleaned list plus what was appended since its reply (the reply, its
    tool results, injected messages), cleaned again.  Calls are told apart by the replies
    (assistant messages) in ``steps``.  ``session_key`` names the folder an oversized tool
    result is offloaded to (the reference text holds its path).
    """
    rules = kit["loop"]
    raw = [
        {"role": "system", "content": system},
        *copy.deepcopy(history),
        copy.deepcopy(current),
        *copy.deepcopy(steps),
    ]
    first = 2 + len(history)
    replies = [first + i for i, m in enumerate(steps) if i and m.get("role") == "assistant"]
    bounds = sorted({first, *replies, len(raw)})
    sent = cleaned_for_model(raw[: bounds[0]], rules, session_key)
    for start, stop in zip(bounds, bounds[1:], strict=False):
        sent = cleaned_for_model([*sent, *raw[start:stop]], rules, session_key)
    return sent


# --- the OpenAI-compatible provider's clean-up -----------------------------------------------


def _no_call_id() -> str:
    raise NotOnDisk("a tool call without an id: 0.3.5 sends a random one")


def _replay_arguments(arguments: Any) -> str:
    """Tool-call arguments as 0.3.5 replays them: a JSON object text."""
    if isinstance(arguments, dict):
        return json.dumps(arguments, ensure_ascii=False)
    if not isinstance(arguments, str) or not arguments.strip():
        return "{}"
    try:
        parsed = json.loads(arguments.strip())
    except (ValueError, RecursionError):
        raise NotOnDisk(
            "a tool call's arguments are not valid JSON: 0.3.5 repairs them with json_repair"
        ) from None
    return json.dumps(parsed, ensure_ascii=False) if isinstance(parsed, dict) else "{}"


def wire_messages(loop_messages: list[Message], *, kit: Mapping[str, Any]) -> list[Message]:
    """The ``messages`` of the HTTP body 0.3.5's OpenAI-compatible provider sent for the
    loop's list, for a provider without special rules (``custom`` and the like: no
    DeepSeek/Mistral/Gemini id or reasoning rules, no Anthropic cache markers, Chat
    Completions rather than the Responses API)."""
    texts = kit["wire"]
    cleaned = without_surrogates([empty_cleaned(m, texts["empty_content"]) for m in loop_messages])
    keyed = wire_keys(
        cleaned, missing_id=_no_call_id, arguments=_replay_arguments, null_text_beside_calls=False
    )
    return alternate(keyed, texts["synthetic_user"], merge_user_blocks=True)


# --- the release's estimate ------------------------------------------------------------------


def estimate_request(
    messages: list[Message], tools: list[Message], count: Callable[[str], int]
) -> int:
    """0.3.5's whole-request estimate (``estimate_prompt_tokens_chain``): the messages' text,
    tool calls, reasoning, names and tool-call ids joined by newlines, the tool definitions as
    JSON, 4 per message; UTF-8 bytes instead when the counter fails (as tiktoken does on
    special-token text, for the whole request).  Its governor measures the loop's list
    (:func:`loop_messages`), not the wire's; ``count`` is a cl100k_base count."""
    return request_rules.estimate_request(messages, tools, count, skip_non_string_text=True)
