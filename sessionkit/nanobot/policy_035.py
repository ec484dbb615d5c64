"""nanobot-ai 0.3.5's history policy, exactly (``"nanobot-0.3.5"``).

What changed from 0.2.2 (:class:`sessionkit.nanobot.policies.Policy`): replay starts at
``last_archived``, where a summary checkpoint leaves a hidden continuation message; there is
no count limit unless the caller passes one; ``include_runtime_context=False`` strips the
``_runtime_context`` suffix a user turn carries; media breadcrumbs list only usable paths;
CLI-app breadcrumbs are skipped on turns with a runtime-context marker; MCP presets are gone;
the token fallback counts UTF-8 bytes.  There is no file cap.  0.3.5's agent loop calls
``get_history(extend_to_user=<is subagent>)`` with no count or token limit; its context
governor budgets the whole request instead and, under pressure, summarises and commits a
checkpoint (:meth:`Policy035.commit_summary_checkpoint`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from sessionkit.nanobot import tokens
from sessionkit.nanobot.policies import (
    FORK_VOLATILE_METADATA_KEYS,
    ReplayPolicy,
    _append_lines,
    _attachment_names,
    _field_or,
    sanitize_assistant_text,
)

__all__ = [
    "CONTINUATION_TEXT",
    "HIDDEN_HISTORY_KEY",
    "NAME",
    "RUNTIME_CONTEXT_KEY",
    "Policy035",
    "SessionState",
    "estimate_message_tokens",
    "fallback_message_tokens",
    "is_hidden_history",
    "media_breadcrumbs",
    "message_payload",
    "public_message",
]

Message = dict[str, Any]

NAME = "nanobot-0.3.5"
CONTINUATION_TEXT = "Continue the active task from the working-memory checkpoint above."
HIDDEN_HISTORY_KEY = "_hidden_history"
RUNTIME_CONTEXT_KEY = "_runtime_context"

_REPLAY_FIELDS = ("tool_calls", "tool_call_id", "name", "reasoning_content", "thinking_blocks")
_NON_TEXT_FIELDS = ("tool_calls", "reasoning_content", "thinking_blocks")


def message_payload(message: Message) -> str:
    """The text 0.3.5 tokenizes for one message: 0.2.2's payload, except that text blocks
    whose text is not a string are skipped."""
    return tokens.message_payload(message, skip_non_string_text=True)


def estimate_message_tokens(message: Message) -> int:
    """0.3.5's estimate: cl100k_base tokens + 4, or UTF-8 bytes + 4 when encoding fails.

    Encoding fails when the encoder cannot be built or the text holds special-token text.
    """
    return tokens.byte_fallback_estimate(message_payload(message))


def fallback_message_tokens(message: Message) -> int:
    """0.3.5's estimate on a machine where tiktoken cannot load: UTF-8 bytes + 4."""
    return tokens.byte_fallback_tokens(message_payload(message))


def _marked(message: Mapping[str, Any], key: str) -> bool:
    value = message.get(key)
    return value is True or isinstance(value, Mapping)


def is_hidden_history(message: Mapping[str, Any]) -> bool:
    """A stored message 0.3.5 does not show as a chat turn: a checkpoint continuation
    (``_hidden_history``) or an automation record (``_automation_turn``, or a cron turn's
    ``_cron_turn: true``)."""
    return (
        _marked(message, HIDDEN_HISTORY_KEY)
        or _marked(message, "_automation_turn")
        or message.get("_cron_turn") is True
    )


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
    return _append_lines(content, lines) if lines else content


def _cli_app_lines(apps: list[Any]) -> list[str]:
    return [
        f"[CLI App Attachment: @{name}; tool=run_cli_app; "
        f"entry_point={_field_or(item, 'entry_point', 'unknown')}; "
        f"skill=skills/cli-app-{name}/SKILL.md]"
        for name, item in _attachment_names(apps)
    ]


@dataclass(frozen=True)
class SessionState:
    """A session's messages, ``last_archived`` and metadata after a mutating 0.3.5 method."""

    messages: list[Message]
    last_archived: int
    metadata: dict[str, Any]


@dataclass(frozen=True)
class Policy035(ReplayPolicy):
    """nanobot-ai 0.3.5's ``Session`` rules on plain data (``name="nanobot-0.3.5"``).

    Methods take the stored ``messages`` and ``last_archived`` (0.3.5's name for
    ``last_consolidated``) and never modify them; mutating ones return a :class:`SessionState`.
    """

    name: str = NAME
    default_max_messages: int = 0
    naming: str = "nanobot-0.3"
    entry_setting: str = "include_runtime_context"
    fork_volatile_keys: frozenset[str] = FORK_VOLATILE_METADATA_KEYS | {
        "pending_user_followups",
        "session_handle",
        "webui_recovery",
    }

    def is_user_turn(self, message: Message) -> bool:
        """A user turn shown in the chat (not a hidden checkpoint or automation record)."""
        return message.get("role") == "user" and not is_hidden_history(message)

    def fork_copy(self, message: Message) -> Message:
        """0.3.5 forks keep each message's public form (runtime context stripped)."""
        return public_message(message)

    def metadata_record(
        self, key: str, created_at: str, updated_at: str, metadata: Any, offset: int
    ) -> dict[str, Any]:
        """0.3.5 writes the offset twice: ``last_archived``, and ``last_consolidated`` for
        older releases."""
        return {
            "_type": "metadata",
            "key": key,
            "created_at": created_at,
            "updated_at": updated_at,
            "metadata": metadata,
            "last_archived": offset,
            "last_consolidated": offset,
        }

    def estimate_message_tokens(self, message: Message) -> int:
        """0.3.5's per-message token estimate (byte fallback included)."""
        return estimate_message_tokens(message)

    def fallback_message_tokens(self, message: Message) -> int:
        """0.3.5's estimate where tiktoken cannot load."""
        return fallback_message_tokens(message)

    def replay_entry(
        self, message: Message, include_runtime_context: bool = True
    ) -> Message | None:
        """The dict one stored message becomes in the model's history, or None if skipped."""
        if message.get("_command"):
            return None
        marked = isinstance(message.get(RUNTIME_CONTEXT_KEY), dict)
        if not include_runtime_context:
            message = public_message(message)
        role = message.get("role")
        content = message.get("content", "")
        if role == "assistant" and isinstance(content, str):
            content = sanitize_assistant_text(content)
        content = media_breadcrumbs(role, content, message.get("media"))
        apps = message.get("cli_apps")
        if (
            include_runtime_context
            and not marked
            and role == "user"
            and isinstance(apps, list)
            and isinstance(content, str)
        ):
            lines = _cli_app_lines(apps)
            if lines:
                content = _append_lines(content, lines)
        empty = role == "assistant" and isinstance(content, str) and not content.strip()
        if empty and not any(key in message for key in _NON_TEXT_FIELDS):
            return None
        entry: Message = {"role": message["role"], "content": content}
        entry.update((key, message[key]) for key in _REPLAY_FIELDS if key in message)
        return entry

    def count_window(self, max_messages: int) -> int:
        """0.3.5 applies a count window only when asked for a positive one."""
        return max(max_messages, 0)

    def replay(
        self,
        messages: Sequence[Message],
        last_archived: int,
        max_messages: int = 0,
        *,
        max_tokens: int = 0,
        extend_to_user: bool = False,
        include_runtime_context: bool = True,
    ) -> list[tuple[int, Message]]:
        """``get_history`` with each entry's source index: ``[(index, entry), ...]``."""
        return self.replay_from(
            messages,
            last_archived,
            max_messages,
            max_tokens=max_tokens,
            extend_to_user=extend_to_user,
            entry=partial(self.replay_entry, include_runtime_context=include_runtime_context),
        )

    def commit_summary_checkpoint(
        self,
        messages: Sequence[Message],
        metadata: Mapping[str, Any],
        summary: Any,
        *,
        insert_at: int | None = None,
        last_active: datetime,
        now: datetime,
    ) -> SessionState:
        """Insert the hidden continuation message at ``insert_at`` (default: the end).

        ``last_archived`` becomes ``insert_at`` as given (``list.insert`` clamps, the offset
        does not); ``metadata["_last_summary"]`` becomes ``{text, last_active}`` in place.
        ``last_active`` is the caller's value or else the session's ``updated_at``.
        """
        boundary = len(messages) if insert_at is None else insert_at
        hidden = {
            "role": "user",
            "content": CONTINUATION_TEXT,
            HIDDEN_HISTORY_KEY: True,
            "timestamp": now.isoformat(),
        }
        new_messages = list(messages)
        new_messages.insert(boundary, hidden)
        last_summary = {"text": summary, "last_active": last_active.isoformat()}
        return SessionState(new_messages, boundary, {**metadata, "_last_summary": last_summary})

    def clear(self, metadata: Mapping[str, Any]) -> SessionState:
        """No messages, offset 0, no ``_last_summary`` (0.3.5 also drops its provider state)."""
        return SessionState(
            [], 0, {key: value for key, value in metadata.items() if key != "_last_summary"}
        )
