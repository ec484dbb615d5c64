"""nanobot-ai 0.3.5's history policy, exactly (``"nanobot-0.3.5"``).

What changed from 0.2.2 (:mod:`sessionkit.nanobot.policy_022`): replay starts at
``last_archived``, where a summary checkpoint leaves a hidden continuation message; there is
no count limit unless the caller passes one; ``include_runtime_context=False`` strips the
``_runtime_context`` suffix a user turn carries; media breadcrumbs list only usable paths;
CLI-app breadcrumbs are skipped on turns with a runtime-context marker; MCP presets are gone;
the token fallback counts UTF-8 bytes; loading a file rewrites legacy ``write_stdin`` tool
records.  There is no file cap.  0.3.5's agent loop calls
``get_history(extend_to_user=<is subagent>)`` with no count or token limit; its context
governor budgets the whole request instead and, under pressure, summarises and commits a
checkpoint (:meth:`Policy035.commit_summary_checkpoint`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any

from sessionkit.nanobot import call_forms_03x, governor_035, request_035, tokens
from sessionkit.nanobot.call_forms import CallForms
from sessionkit.nanobot.entry_changes import EntryFacts, changed_03x
from sessionkit.nanobot.history import (
    CONTINUATION_TEXT,
    FORK_VOLATILE_METADATA_KEYS,
    HIDDEN_HISTORY_KEY,
    RUNTIME_CONTEXT_KEY,
    Message,
    append_lines,
    cli_app_lines,
    media_breadcrumbs,
    public_message,
    replayed_entry,
    sanitize_assistant_text,
)
from sessionkit.nanobot.kit import Kit
from sessionkit.nanobot.legacy_exec import migrate_exec_records
from sessionkit.nanobot.naming import Naming
from sessionkit.nanobot.release import SAFETY_BUFFER, LoopCall, ReplayPolicy
from sessionkit.nanobot.settings import HistorySettings

__all__ = [
    "NAME",
    "Policy035",
    "SessionState",
    "estimate_message_tokens",
    "fallback_message_tokens",
    "message_payload",
]

NAME = "nanobot-0.3.5"


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


@dataclass(frozen=True)
class SessionState:
    """A session's messages, ``last_archived`` and metadata after a mutating 0.3.5 method."""

    messages: list[Message]
    last_archived: int
    metadata: dict[str, Any]


@dataclass(frozen=True, repr=False)
class Policy035(ReplayPolicy):
    """nanobot-ai 0.3.5's ``Session`` rules on plain data (``name="nanobot-0.3.5"``).

    Methods take the stored ``messages`` and ``last_archived`` (0.3.5's name for
    ``last_consolidated``) and never modify them; mutating ones return a :class:`SessionState`.
    """

    name: str = NAME
    version: str = "0.3.5"
    probe: str = "probe_035.py"
    governor_probe: str = "probe_035_governor.py"
    label: str = "nanobot 0.3.5"
    colour: str = "#55a868"
    default_max_messages: int = 0
    naming: Naming = "nanobot-0.3"
    temp_name: str = r"\.[^/]*\.jsonl\.[0-9a-f]{16}\.tmp"
    entry_setting: str = "include_runtime_context"
    entry_default: bool = True
    defaults: HistorySettings = HistorySettings(
        max_messages=0,
        max_tokens=0,
        include_timestamps=False,
        extend_to_user=False,
        include_runtime_context=True,
        file_cap=0,
        last_consolidated="recorded",
    )
    ignored: frozenset[str] = frozenset({"include_timestamps", "file_cap"})
    hidden_turns: bool = False
    checkpoints: bool = True
    governed: bool = True
    fork_volatile_keys: frozenset[str] = FORK_VOLATILE_METADATA_KEYS | {
        "pending_user_followups",
        "session_handle",
        "webui_recovery",
    }

    def system_prompt(self, kit: Kit, session: Any) -> str:
        """The kit's prompt, plus the archived summary of ``_last_summary`` when usable."""
        metadata = session.metadata if isinstance(session.metadata, dict) else {}
        return request_035.system_prompt(
            kit.raw, metadata.get("_last_summary"), updated_at=session.updated_at
        )

    def current_message(self, kit: Kit, user: Message, session_key: str) -> Message:
        """The stored user message as 0.3.5's loop sent it (its ``_meta`` marker)."""
        return request_035.current_message(kit.raw, user)

    def turn_steps(self, turn: list[Message]) -> list[list[Message]]:
        """What 0.3.5's loop appended before each call of a turn."""
        return request_035.turn_steps(turn)

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
        """0.3.5's runner clean-up for one call (it counts nothing: ``count`` is unused)."""
        return request_035.loop_messages(
            system, history, current, steps, kit=kit.raw, session_key=session_key
        )

    def call_forms(
        self,
        kit: Kit,
        messages: Sequence[Message],
        entry: Callable[[Message], Message | None],
        session_key: str,
    ) -> CallForms:
        """What 0.3.5's loop clean-up makes of each stored message."""
        rules = kit.raw["loop"]
        return call_forms_03x.call_forms(
            messages,
            entry,
            lambda m: request_035.as_held(m) if request_035.in_loop(m) else None,
            lambda listed: request_035.cleaned_for_model(listed, rules, session_key),
            budget=None,
            merges_users=True,
        )

    def wire_messages(self, kit: Kit, loop: list[Message]) -> list[Message]:
        """0.3.5's OpenAI-compatible provider clean-up."""
        return request_035.wire_messages(loop, kit=kit.raw)

    def estimate_request(
        self, messages: list[Message], tools: list[Message], count: Callable[[str], int]
    ) -> int:
        """0.3.5's whole-request estimate (what its governor compares with the budget)."""
        return request_035.estimate_request(messages, tools, count)

    def governed_turn(
        self,
        messages: Sequence[Message],
        user_index: int,
        stop: int,
        metadata: Mapping[str, Any],
        *,
        texts: Sequence[str | None] | None = None,
        zone: tzinfo | None = None,
    ) -> governor_035.GovernedTurn:
        """Where 0.3.5's governor summarised in the turn, read from its checkpoints."""
        return governor_035.governed_turn(
            messages,
            user_index,
            stop,
            metadata,
            is_turn=self.is_user_turn,
            texts=texts,
            zone=zone,
        )

    def summary_journal(self, workspace: Path, session_key: str) -> list[str] | None:
        """The summaries 0.3.5's memory store appended to ``memory/history.jsonl``."""
        try:
            text = (workspace / "memory" / "history.jsonl").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        return governor_035.journal_summaries(text, session_key)

    def summary_system_prompt(
        self, kit: Kit, last_summary: Mapping[str, Any] | None, updated_at: Any
    ) -> str:
        """0.3.5's system prompt with the archived-summary part of ``last_summary``."""
        return request_035.system_prompt(kit.raw, last_summary, updated_at=updated_at)

    def governed_loop_messages(
        self,
        kit: Kit,
        session_key: str,
        *,
        system: str,
        history: list[Message],
        current: Message,
        steps: list[list[Message]],
        step: int,
        summary_step: int | None = None,
        summary_system: str | None = None,
        measured: bool = False,
    ) -> list[Message]:
        """0.3.5's loop messages of a call, after the turn's summary when one preceded it."""
        build = governor_035.candidate_messages if measured else governor_035.sent_messages
        return build(
            kit.raw,
            session_key,
            system=system,
            history=history,
            current=current,
            steps=steps,
            step=step,
            summary_step=summary_step,
            summary_system=summary_system,
        )

    def summary_loop_messages(
        self,
        kit: Kit,
        session_key: str,
        archive: Mapping[str, Any],
        *,
        system: str,
        history: list[Message],
        current: Message,
        steps: list[list[Message]],
        step: int,
    ) -> list[Message]:
        """0.3.5's summary call: the accepted messages and the archive instruction."""
        return governor_035.summary_messages(
            kit.raw,
            session_key,
            archive,
            system=system,
            history=history,
            current=current,
            steps=steps,
            step=step,
        )

    def governor_verdict(self, tokens: int, context_window: int, max_output: int) -> bool:
        """0.3.5 summarises at or over ``ctx - max_output - 1024`` (always when that is not
        positive, never without a context window)."""
        return governor_035.verdict(tokens, context_window, max_output)

    def archive_fits(self, tokens: int, context_window: int, max_output: int) -> bool:
        """0.3.5's archive calls the model only within ``ctx - max_output``."""
        return governor_035.archive_fits(tokens, context_window, max_output)

    def fork_copy(self, message: Message) -> Message:
        """0.3.5 forks keep each message's public form (runtime context stripped)."""
        return public_message(message)

    def loop_call(self, context_window: int, max_output: int, max_messages: int) -> LoopCall:
        """0.3.5's loop passes no count window and no budget: its governor budgets
        ``ctx - max_output - 1024`` (0 when not positive: every request is over it) for the
        whole request instead."""
        governor = context_window - max_output - SAFETY_BUFFER
        return LoopCall(0, 0, max(governor, 0))

    def records_after_clear(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``clear()`` forgets the provider state."""
        return [r for r in records if r.get("_type") != "provider_state"]

    def rewrite_on_load(self, messages: list[Message], metadata: dict[str, Any]) -> bool:
        """0.3.5's load renames legacy ``write_stdin`` records to ``exec_session`` and rewrites
        their arguments (:mod:`~sessionkit.nanobot.legacy_exec`); a session it changed loses
        its provider state."""
        return migrate_exec_records(messages, metadata)

    def metadata_record(
        self, key: str, created_at: str, updated_at: str, metadata: Any, offset: int
    ) -> dict[str, Any]:
        """0.3.5 writes the offset twice: ``last_archived``, and ``last_consolidated`` for
        older releases."""
        record = super().metadata_record(key, created_at, updated_at, metadata, offset)
        del record["last_consolidated"]  # re-added after last_archived, where 0.3.5 puts it
        return record | {"last_archived": offset, "last_consolidated": offset}

    def message_payload(self, message: Message) -> str:
        """0.3.5's payload: text blocks whose text is not a string are skipped."""
        return message_payload(message)

    def changed_entries(self, facts: EntryFacts, settings: HistorySettings) -> set[int] | None:
        """0.3.5's (:func:`~sessionkit.nanobot.entry_changes.changed_03x`); None for a
        release with a rewrite of its own."""
        if type(self).replay_entry is not Policy035.replay_entry:
            return None
        return changed_03x(facts, bool(self.resolve(settings).include_runtime_context))

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
            lines = cli_app_lines(apps)
            if lines:
                content = append_lines(content, lines)
        return replayed_entry(message, content)

    def count_window(self, max_messages: int) -> int:
        """0.3.5 applies a count window only when asked for a positive one."""
        return max(max_messages, 0)

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
