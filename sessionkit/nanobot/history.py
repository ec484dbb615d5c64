"""The history rules every nanobot release shares, on plain message lists.

Count windows, legal tool-call starts, user-turn alignment, token budgets, trims, the
runtime-context and hidden-checkpoint markers and the attachment breadcrumbs.  The release
modules (``policy_022``, ``policy_030``, ``policy_035``) build on these and never import one
another.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = [
    "CONTINUATION_TEXT",
    "FORK_VOLATILE_METADATA_KEYS",
    "HIDDEN_HISTORY_KEY",
    "HIDING_KEYS",
    "NON_TEXT_FIELDS",
    "REPLAY_FIELDS",
    "RUNTIME_CONTEXT_KEY",
    "Message",
    "Trim",
    "align_to_user",
    "append_lines",
    "attachment_names",
    "cli_app_lines",
    "field_or",
    "find_legal_message_start",
    "fit_budget",
    "is_hidden_history",
    "is_user",
    "keep_range",
    "media_breadcrumbs",
    "offset_start",
    "public_message",
    "recent_message_start_index",
    "replayed_entry",
    "rewritten_entry",
    "sanitize_assistant_text",
    "tool_call_ids",
    "tool_result_id",
    "unchanged",
    "user_breadcrumbs",
]

Message = dict[str, Any]

FORK_VOLATILE_METADATA_KEYS = frozenset(
    {
        "goal_state",
        "pending_user_turn",
        "runtime_checkpoint",
        "thread_goal",
        "title",
        "title_user_edited",
    }
)
"""Metadata nanobot 0.2.2 and 0.3.0 drop from a fork: run state and the title stay with the
source."""

# Copied onto a replayed entry when the stored message has them.
REPLAY_FIELDS = ("tool_calls", "tool_call_id", "name", "reasoning_content", "thinking_blocks")
# An assistant message whose text is empty still replays when it carries one of these.
NON_TEXT_FIELDS = ("tool_calls", "reasoning_content", "thinking_blocks")
_MAX_ATTACHMENTS = 8

# Replay artefacts a model may have learnt to echo: a leading time stamp, a line that is only
# a local image breadcrumb, a line that is only a tool call written out as text.
_LEADING_STAMP = re.compile(r"\[Message Time: [^\]]+\]\n?")
_LOCAL_IMAGE_LINE = re.compile(r"\[image: [/~][^\]]+\]\s*")
_TOOL_ECHO_LINE = re.compile(r"\s*(?:generate_image|message)\([^)]*\)\s*")


def is_user(message: Message) -> bool:
    return message.get("role") == "user"


def tool_call_ids(message: Message) -> Iterator[str]:
    """Ids an assistant message declares in ``tool_calls`` (as strings, as nanobot compares)."""
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict) and call.get("id"):
            yield str(call["id"])


def tool_result_id(message: Message) -> str | None:
    """The call id a tool result answers, or None when it names none (never an orphan)."""
    answered = message.get("tool_call_id")
    return str(answered) if answered else None


def recent_message_start_index(
    messages: Sequence[Message], max_messages: int, *, extend_to_user: bool = False
) -> int:
    """Where the last ``max_messages`` messages start (nanobot's replay count window).

    ``max_messages <= 0`` selects nothing (returns ``len(messages)``).  With
    ``extend_to_user``, a window holding no user message reaches back to the latest earlier
    user message, and one further to a ``_channel_delivery`` message just before it.
    """
    n = len(messages)
    if max_messages <= 0:
        return n
    start = max(0, n - max_messages)
    if not extend_to_user or start == 0:
        return start
    if any(is_user(m) for m in messages[start:]):
        return start
    earlier = next((i for i in range(start - 1, -1, -1) if is_user(messages[i])), None)
    if earlier is None:
        return start
    if earlier > 0 and messages[earlier - 1].get("_channel_delivery"):
        return earlier - 1
    return earlier


def find_legal_message_start(messages: Sequence[Message]) -> int:
    """Index just after the last orphan tool result (0 when there is none).

    A tool result is an orphan when no assistant message since the start, or since the
    previous orphan, declared its call id: each orphan forgets the ids declared before it.
    """
    open_ids: set[str] = set()
    start = 0
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            open_ids.update(tool_call_ids(message))
        elif role == "tool":
            answered = tool_result_id(message)
            if answered is not None and answered not in open_ids:
                start = i + 1
                open_ids = set()
    return start


@lru_cache(maxsize=1024)
def sanitize_assistant_text(text: str) -> str:
    """Assistant text as replayed: no leading time stamp, no image or tool-echo lines (a
    line either pattern matches holds ``[image: ``, ``message(`` or ``generate_image(``:
    text without them keeps every line).  Remembered for the latest 1,024 texts: replaying
    a session for each release sanitizes its texts once."""
    stamp = _LEADING_STAMP.match(text)
    if stamp:
        text = text[stamp.end() :]
    lines = text.splitlines()
    if "[image: " in text or "message(" in text or "generate_image(" in text:
        lines = [
            line
            for line in lines
            if not (_LOCAL_IMAGE_LINE.fullmatch(line) or _TOOL_ECHO_LINE.fullmatch(line))
        ]
    return "\n".join(lines).strip()


def attachment_names(items: list[Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for item in items[:_MAX_ATTACHMENTS]:
        if isinstance(item, dict):
            name = str(item.get("name") or "").strip().lower()
            if name:
                yield name, item


def field_or(item: dict[str, Any], key: str, default: str) -> str:
    return str(item.get(key) or default).strip() or default


def append_lines(text: str, lines: list[str]) -> str:
    block = "\n".join(lines)
    return f"{text}\n{block}" if text else block


def user_breadcrumbs(message: Message, text: str) -> str:
    """A user turn's text with its media, CLI-app and MCP-preset attachments spelled out."""
    media = message.get("media")
    if isinstance(media, list) and media:
        # Appended even when no entry is a usable path (the text then gains a bare newline).
        paths = [p for p in media if isinstance(p, str) and p]
        text = append_lines(text, [f"[image: {p}]" for p in paths])
    apps = message.get("cli_apps")
    if isinstance(apps, list) and apps:
        lines = cli_app_lines(apps)
        if lines:
            text = append_lines(text, lines)
    presets = message.get("mcp_presets")
    if isinstance(presets, list) and presets:
        lines = [
            f"[MCP Preset Attachment: @{name}; tool_prefix=mcp_{name}_; "
            f"transport={field_or(item, 'transport', 'mcp')}]"
            for name, item in attachment_names(presets)
        ]
        if lines:
            text = append_lines(text, lines)
    return text


def replayed_entry(message: Message, content: Any) -> Message | None:
    """The dict ``message`` becomes in the history with its rewritten ``content``: role,
    content and the replayed fields; None for an assistant message left without text and with
    nothing else to send (no tool calls, reasoning or thinking blocks)."""
    empty = message.get("role") == "assistant" and isinstance(content, str) and not content.strip()
    if empty and not any(key in message for key in NON_TEXT_FIELDS):
        return None
    entry: Message = {"role": message["role"], "content": content}
    for key in REPLAY_FIELDS:  # a plain loop: a generator into update costs 3x (per entry)
        if key in message:
            entry[key] = message[key]
    return entry


def rewritten_entry(
    message: Message,
    include_timestamps: bool,
    breadcrumbs: Callable[[Message, str], str] = user_breadcrumbs,
) -> Message | None:
    """The entry 0.2.0 to 0.2.2 replay for ``message``: None for a command, assistant text
    sanitized, user text with its ``breadcrumbs`` (0.2.1 and 0.2.2: media, CLI apps, MCP
    presets) and, with ``include_timestamps``, its time stamp before it."""
    if message.get("_command"):
        return None
    role = message.get("role")
    content = message.get("content", "")
    if isinstance(content, str):
        if role == "assistant":
            content = sanitize_assistant_text(content)
        elif role == "user":
            content = breadcrumbs(message, content)
            stamp = message.get("timestamp")
            if include_timestamps and stamp:
                content = f"[Message Time: {stamp}]\n{content}"
    return replayed_entry(message, content)


def offset_start(last_consolidated: int, n_messages: int) -> int:
    """Where ``messages[last_consolidated:]`` starts, with Python's slice rules."""
    return slice(last_consolidated, None).indices(n_messages)[0]


def align_to_user(messages: Sequence[Message], start: int) -> int:
    """Move a window start to its first user message (or the delivery just before it)."""
    first = next((i for i in range(start, len(messages)) if is_user(messages[i])), None)
    if first is None:
        return start
    if first > start and messages[first - 1].get("_channel_delivery"):
        return first - 1
    return first


@dataclass(frozen=True)
class Trim:
    """What trimming a session to a recent legal suffix did.

    ``retained`` is the input list itself when nothing changed.  ``dropped`` keeps source
    order and may include newest messages (nanobot keeps the window after the latest user
    message when the tail has none).  ``already_consolidated`` counts dropped messages that
    lay below the old offset; ``last_consolidated`` is the new offset.  ``cleared`` means
    ``max_messages <= 0`` emptied the session (nanobot also forgets ``_last_summary``).
    """

    retained: list[Message]
    dropped: list[Message]
    already_consolidated: int
    last_consolidated: int
    cleared: bool = False

    @property
    def archived(self) -> list[Message]:
        """The dropped messages nanobot raw-archives (those not already consolidated)."""
        return self.dropped[self.already_consolidated :]


def unchanged(messages: list[Message], last_consolidated: int) -> Trim:
    return Trim(messages, [], 0, last_consolidated)


def keep_range(messages: list[Message], last_consolidated: int, start: int, stop: int) -> Trim:
    below = min(max(last_consolidated, 0), len(messages))
    kept_below = max(0, min(below, stop) - start)
    return Trim(
        retained=messages[start:stop],
        dropped=messages[:start] + messages[stop:],
        already_consolidated=below - kept_below,
        last_consolidated=kept_below,
    )


def fit_budget(
    entries: list[tuple[int, Message]], max_tokens: int, estimate: Callable[[Message], int]
) -> list[tuple[int, Message]]:
    """Keep the newest entries within ``max_tokens``, then restore a legal user start.

    The newest entry is always kept.  If the budget leaves no user message, the latest
    user message is recovered even though that exceeds the budget.
    """
    first = len(entries) - 1
    used = estimate(entries[first][1])
    while first > 0:
        cost = estimate(entries[first - 1][1])
        if used + cost > max_tokens:
            break
        used += cost
        first -= 1
    users = [k for k, (_, entry) in enumerate(entries) if is_user(entry)]
    first = next((k for k in users if k >= first), users[-1] if users else first)
    kept = entries[first:]
    return kept[find_legal_message_start([entry for _, entry in kept]) :]


CONTINUATION_TEXT = "Continue the active task from the working-memory checkpoint above."
"""The text of the hidden user message 0.3.5 inserts where a summary checkpoint starts."""
HIDDEN_HISTORY_KEY = "_hidden_history"
RUNTIME_CONTEXT_KEY = "_runtime_context"


def cli_app_lines(apps: list[Any]) -> list[str]:
    """One ``[CLI App Attachment: ...]`` breadcrumb per named CLI-app attachment."""
    return [
        f"[CLI App Attachment: @{name}; tool=run_cli_app; "
        f"entry_point={field_or(item, 'entry_point', 'unknown')}; "
        f"skill=skills/cli-app-{name}/SKILL.md]"
        for name, item in attachment_names(apps)
    ]


def _marked(message: Mapping[str, Any], key: str) -> bool:
    value = message.get(key)
    return value is True or isinstance(value, Mapping)


HIDING_KEYS = (HIDDEN_HISTORY_KEY, "_automation_turn", "_cron_turn")
"""The fields :func:`is_hidden_history` reads: a message holding none of them (or only
nulls) is not hidden."""


def is_hidden_history(message: Mapping[str, Any]) -> bool:
    """A stored message 0.3.5 does not show as a chat turn: a checkpoint continuation
    (``_hidden_history``) or an automation record (``_automation_turn``, or a cron turn's
    ``_cron_turn: true``)."""
    hidden, automation, cron = HIDING_KEYS
    return _marked(message, hidden) or _marked(message, automation) or message.get(cron) is True


def public_message(message: Mapping[str, Any]) -> Message:
    """A deep copy without its ``_runtime_context`` marker, the marked suffix removed.

    The suffix is removed only when the content still ends with it exactly (text after a
    blank line, or the trailing text blocks); otherwise only the marker goes.
    """
    cleaned = copy.deepcopy(dict(message))
    marker = cleaned.pop(RUNTIME_CONTEXT_KEY, None)
    if not isinstance(marker, Mapping) or marker.get("version") != 1:
        return cleaned
    content = cleaned.get("content")
    suffix = marker.get("suffix")
    if isinstance(content, str) and isinstance(suffix, str) and suffix:
        if content == suffix:
            cleaned["content"] = ""
        elif content.endswith("\n\n" + suffix):
            cleaned["content"] = content[: -len(suffix) - 2]
        return cleaned
    blocks = marker.get("blocks")
    if (
        isinstance(content, list)
        and isinstance(blocks, list)
        and blocks
        and content[-len(blocks) :] == blocks
    ):
        cleaned["content"] = content[: -len(blocks)]
    return cleaned


def media_breadcrumbs(role: Any, content: Any, media: Any) -> Any:
    """User text with one ``[image: path]`` line per usable media path (unchanged if none)."""
    if role != "user" or not isinstance(content, str) or not isinstance(media, list):
        return content
    lines = [f"[image: {path}]" for path in media if isinstance(path, str) and path]
    return append_lines(content, lines) if lines else content
