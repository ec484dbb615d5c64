"""nanobot-ai 0.3.0's history policy, exactly (``"nanobot-0.3.0"``).

What changed from 0.2.2 (:class:`sessionkit.nanobot.policies.Policy`): the count window
defaults to 2000 messages (also for a non-positive ``max_messages``); ``get_history`` takes
``include_runtime_context`` instead of ``include_timestamps``, and ``False`` strips the
``_runtime_context`` suffix a user turn carries; CLI-app breadcrumbs are skipped on turns with
such a marker, and MCP-preset breadcrumbs are gone; the token fallback counts UTF-8 bytes;
``retain_recent_legal_suffix`` returns a :class:`RetentionResult`.  The file cap stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from sessionkit.nanobot import tokens
from sessionkit.nanobot.policies import (
    Policy,
    Trim,
    _append_lines,
    _attachment_names,
    _field_or,
    sanitize_assistant_text,
)
from sessionkit.nanobot.policy_035 import RUNTIME_CONTEXT_KEY, public_message

__all__ = [
    "NAME",
    "Policy030",
    "RetentionResult",
    "estimate_message_tokens",
    "fallback_message_tokens",
    "replay_max_messages_for_context",
    "replay_token_budget",
]

Message = dict[str, Any]

NAME = "nanobot-0.3.0"
FILE_MAX_MESSAGES = 2000
_MIN_REPLAY_MESSAGES = 120
_TOKENS_PER_REPLAYED_MESSAGE = 100
_REPLAY_FIELDS = ("tool_calls", "tool_call_id", "name", "reasoning_content", "thinking_blocks")
_NON_TEXT_FIELDS = ("tool_calls", "reasoning_content", "thinking_blocks")


def estimate_message_tokens(message: Message) -> int:
    """0.3.0's estimate: cl100k_base tokens + 4, or UTF-8 bytes + 4 when encoding fails.

    Encoding fails when the encoder cannot be built or the payload holds special-token text;
    a non-string text block raises ``TypeError`` first (the payload is 0.2.2's).
    """
    return tokens.byte_fallback_estimate(tokens.message_payload(message))


def fallback_message_tokens(message: Message) -> int:
    """0.3.0's estimate on a machine where tiktoken cannot load: UTF-8 bytes + 4."""
    return tokens.byte_fallback_tokens(tokens.message_payload(message))


def replay_max_messages_for_context(context_window: int | None) -> int:
    """The count window 0.3.0's agent loop passes: ``min(2000, max(120, ctx // 100))``."""
    if not context_window or context_window <= 0:
        return FILE_MAX_MESSAGES
    return min(
        FILE_MAX_MESSAGES, max(_MIN_REPLAY_MESSAGES, context_window // _TOKENS_PER_REPLAYED_MESSAGE)
    )


def replay_token_budget(context_window: int, max_output: int) -> int:
    """The ``max_tokens`` 0.3.0's agent loop passes (0, no budget, without a context window).

    ``ctx - max(1, max_output) - 1024``, or ``max(128, ctx // 2)`` when that is not positive.
    """
    if context_window <= 0:
        return 0
    budget = context_window - max(1, max_output) - 1024
    return budget if budget > 0 else max(128, context_window // 2)


@dataclass
class RetentionResult:
    """What 0.3.0's ``retain_recent_legal_suffix`` returns (same fields, same order)."""

    dropped: list[Message]
    already_consolidated_count: int


def _cli_app_breadcrumbs(message: Message, content: Any) -> Any:
    apps = message.get("cli_apps")
    if not (isinstance(apps, list) and apps and isinstance(content, str)):
        return content
    lines = [
        f"[CLI App Attachment: @{name}; tool=run_cli_app; "
        f"entry_point={_field_or(item, 'entry_point', 'unknown')}; "
        f"skill=skills/cli-app-{name}/SKILL.md]"
        for name, item in _attachment_names(apps)
    ]
    return _append_lines(content, lines) if lines else content


@dataclass(frozen=True)
class Policy030(Policy):
    """nanobot-ai 0.3.0's ``Session`` rules on plain ``(messages, last_consolidated)`` data.

    Trimming is 0.2.2's (inherited, returning a :class:`Trim`); :meth:`retention_value`
    turns a trim into the value 0.3.0 returns.  Methods never modify their arguments.
    """

    name: str = NAME
    default_max_messages: int = FILE_MAX_MESSAGES
    file_limit: int = FILE_MAX_MESSAGES
    naming: str = "nanobot-0.3"
    entry_setting: str = "include_runtime_context"

    def fork_copy(self, message: Message) -> Message:
        """0.3.0 forks keep each message's public form (runtime context stripped)."""
        return public_message(message)

    def estimate_message_tokens(self, message: Message) -> int:
        """0.3.0's per-message token estimate (byte fallback included)."""
        return estimate_message_tokens(message)

    def fallback_message_tokens(self, message: Message) -> int:
        """0.3.0's estimate where tiktoken cannot load."""
        return fallback_message_tokens(message)

    def replay_entry(  # type: ignore[override]
        self, message: Message, *, include_runtime_context: bool = True
    ) -> Message | None:
        """The dict one stored message becomes in the model's history, or None if skipped.

        The flag is keyword-only so a caller passing 0.2.2's ``include_timestamps`` fails.
        """
        if message.get("_command"):
            return None
        marked = isinstance(message.get(RUNTIME_CONTEXT_KEY), dict)
        if not include_runtime_context:
            message = public_message(message)
        role = message.get("role")
        content = message.get("content", "")
        if role == "assistant" and isinstance(content, str):
            content = sanitize_assistant_text(content)
        media = message.get("media")
        if role == "user" and isinstance(media, list) and media and isinstance(content, str):
            # Appended even when no entry is a usable path (the text then gains a newline).
            paths = [f"[image: {p}]" for p in media if isinstance(p, str) and p]
            content = _append_lines(content, paths)
        if include_runtime_context and not marked and role == "user":
            content = _cli_app_breadcrumbs(message, content)
        empty = role == "assistant" and isinstance(content, str) and not content.strip()
        if empty and not any(key in message for key in _NON_TEXT_FIELDS):
            return None
        entry: Message = {"role": message["role"], "content": content}
        entry.update((key, message[key]) for key in _REPLAY_FIELDS if key in message)
        return entry

    def replay(  # type: ignore[override]
        self,
        messages: Sequence[Message],
        last_consolidated: int,
        max_messages: int = FILE_MAX_MESSAGES,
        *,
        max_tokens: int = 0,
        extend_to_user: bool = False,
        include_runtime_context: bool = True,
    ) -> list[tuple[int, Message]]:
        """``get_history`` with each entry's source index: ``[(index, entry), ...]``."""
        return self.replay_from(
            messages,
            last_consolidated,
            max_messages,
            max_tokens=max_tokens,
            extend_to_user=extend_to_user,
            entry=partial(self.replay_entry, include_runtime_context=include_runtime_context),
        )

    def retention_value(self, trim: Trim) -> RetentionResult:
        """The value 0.3.0's ``retain_recent_legal_suffix`` returns for ``trim``."""
        return RetentionResult(list(trim.dropped), trim.already_consolidated)

    def clear(self, messages: list[Message], last_consolidated: int) -> Trim:
        """``clear()``: no messages, offset 0, ``_last_summary`` forgotten (``cleared``)."""
        return self.retain_recent_legal_suffix(messages, last_consolidated, 0)
