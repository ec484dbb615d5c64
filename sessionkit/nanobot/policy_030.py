"""nanobot-ai 0.3.0's history policy, exactly (``"nanobot-0.3.0"``).

What changed from 0.2.2 (:mod:`sessionkit.nanobot.policy_022`): the count window
defaults to 2000 messages (also for a non-positive ``max_messages``); ``get_history`` takes
``include_runtime_context`` instead of ``include_timestamps``, and ``False`` strips the
``_runtime_context`` suffix a user turn carries; CLI-app breadcrumbs are skipped on turns with
such a marker, and MCP-preset breadcrumbs are gone; the token fallback counts UTF-8 bytes;
``retain_recent_legal_suffix`` returns a :class:`RetentionResult`.  The file cap stays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sessionkit.nanobot import call_forms_03x, request_030, tokens
from sessionkit.nanobot.call_forms import CallForms
from sessionkit.nanobot.entry_changes import EntryFacts, changed_03x
from sessionkit.nanobot.history import (
    RUNTIME_CONTEXT_KEY,
    Trim,
    append_lines,
    cli_app_lines,
    public_message,
    replayed_entry,
    sanitize_assistant_text,
)
from sessionkit.nanobot.kit import Kit
from sessionkit.nanobot.naming import Naming
from sessionkit.nanobot.release import CappedPolicy, LoopCall, replay_token_budget
from sessionkit.nanobot.settings import HistorySettings

__all__ = [
    "NAME",
    "Policy030",
    "RetentionResult",
    "estimate_message_tokens",
    "fallback_message_tokens",
    "replay_max_messages_for_context",
]

Message = dict[str, Any]

NAME = "nanobot-0.3.0"
FILE_MAX_MESSAGES = 2000
_MIN_REPLAY_MESSAGES = 120
_TOKENS_PER_REPLAYED_MESSAGE = 100


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


@dataclass
class RetentionResult:
    """What 0.3.0's ``retain_recent_legal_suffix`` returns (same fields, same order)."""

    dropped: list[Message]
    already_consolidated_count: int


def _cli_app_breadcrumbs(message: Message, content: Any) -> Any:
    apps = message.get("cli_apps")
    if not (isinstance(apps, list) and apps and isinstance(content, str)):
        return content
    lines = cli_app_lines(apps)
    return append_lines(content, lines) if lines else content


@dataclass(frozen=True, repr=False)
class Policy030(CappedPolicy):
    """nanobot-ai 0.3.0's ``Session`` rules on plain ``(messages, last_consolidated)`` data.

    Trimming is 0.2.2's (inherited, returning a :class:`Trim`); :meth:`retention_value`
    turns a trim into the value 0.3.0 returns.  Methods never modify their arguments.
    """

    name: str = NAME
    version: str = "0.3.0"
    probe: str = "probe_030.py"
    label: str = "nanobot 0.3.0"
    colour: str = "#dd8452"
    default_max_messages: int = FILE_MAX_MESSAGES
    file_limit: int = FILE_MAX_MESSAGES
    naming: Naming = "nanobot-0.3"
    entry_setting: str = "include_runtime_context"
    entry_default: bool = True
    defaults: HistorySettings = HistorySettings(
        max_messages=FILE_MAX_MESSAGES,
        max_tokens=0,
        include_timestamps=False,
        extend_to_user=False,
        include_runtime_context=True,
        file_cap=FILE_MAX_MESSAGES,
        last_consolidated="recorded",
    )
    ignored: frozenset[str] = frozenset({"include_timestamps"})

    def loop_call(self, context_window: int, max_output: int, max_messages: int) -> LoopCall:
        """0.3.0's loop derives the count window from the context window
        (:func:`replay_max_messages_for_context`), whatever ``max_messages`` is configured."""
        return LoopCall(
            replay_max_messages_for_context(context_window),
            replay_token_budget(context_window, max_output),
        )

    def system_prompt(self, kit: Kit, session: Any) -> str:
        """The kit's prompt with this session's recent-history and archived-summary parts."""
        metadata = session.metadata if isinstance(session.metadata, dict) else {}
        return request_030.system_prompt(kit.raw, session.key, metadata)

    def current_message(self, kit: Kit, user: Message, session_key: str) -> Message:
        """The stored user message as 0.3.0's loop sent it (runtime context in place)."""
        return request_030.current_message(kit.raw, user)

    def turn_steps(self, turn: list[Message]) -> list[list[Message]]:
        """What 0.3.0's runner appended before each call of a turn."""
        return request_030.turn_steps(turn)

    def loop_messages(
        self,
        kit: Kit,
        session_key: str,
        system: str,
        history: list[Message],
        current: Message,
        steps: list[Message],
        count: Callable[[str], int] | None = None,
    ) -> list[Message]:
        """0.3.0's runner clean-up and context governor for one call."""
        settings = request_030.LoopSettings.from_kit(
            kit.raw, session_key=session_key, count=count or tokens.count_cl100k
        )
        return request_030.loop_messages(system, history, current, steps, settings)

    def call_forms(
        self,
        kit: Kit,
        messages: Sequence[Message],
        entry: Callable[[Message], Message | None],
        session_key: str,
    ) -> CallForms:
        """What 0.3.0's governor makes of each stored message under its budget (over it, the
        frame rebuilds the call)."""
        settings = request_030.LoopSettings.from_kit(
            kit.raw, session_key=session_key, count=tokens.count_cl100k
        )
        unbudgeted = request_030.LoopSettings.from_kit(
            kit.raw, session_key=session_key, count=tokens.count_cl100k, context_window_tokens=0
        )
        return call_forms_03x.call_forms(
            messages,
            entry,
            request_030.in_memory,
            lambda listed: request_030.governed(unbudgeted, listed, 0, set()),
            budget=settings.budget or None,
            merges_users=False,
        )

    def wire_messages(self, kit: Kit, loop: list[Message]) -> list[Message]:
        """0.3.0's OpenAI-compatible provider clean-up."""
        return request_030.wire_messages(loop, kit.raw["wire"])

    def estimate_request(
        self, messages: list[Message], tools: list[Message], count: Callable[[str], int]
    ) -> int:
        """0.3.0's whole-request estimate."""
        return request_030.estimate_request(messages, tools, count)

    def fork_copy(self, message: Message) -> Message:
        """0.3.0 forks keep each message's public form (runtime context stripped)."""
        return public_message(message)

    def changed_entries(self, facts: EntryFacts, settings: HistorySettings) -> set[int] | None:
        """0.3.0's (:func:`~sessionkit.nanobot.entry_changes.changed_03x`); None for a
        release with a rewrite of its own."""
        if type(self).replay_entry is not Policy030.replay_entry:
            return None
        return changed_03x(facts, bool(self.resolve(settings).include_runtime_context))

    def replay_entry(
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
            content = append_lines(content, paths)
        if include_runtime_context and not marked and role == "user":
            content = _cli_app_breadcrumbs(message, content)
        return replayed_entry(message, content)

    def retention_value(self, trim: Trim) -> RetentionResult:
        """The value 0.3.0's ``retain_recent_legal_suffix`` returns for ``trim``."""
        return RetentionResult(list(trim.dropped), trim.already_consolidated)

    def clear(self, messages: list[Message], last_consolidated: int) -> Trim:
        """``clear()``: no messages, offset 0, ``_last_summary`` forgotten (``cleared``)."""
        return self.retain_recent_legal_suffix(messages, last_consolidated, 0)
