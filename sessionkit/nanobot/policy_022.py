"""nanobot-ai 0.2.2's history policy, exactly (``"nanobot-0.2"``, the reference release).

Replay from ``last_consolidated`` through a count window (default 120), user-turn and legal
tool-call starts and a token budget; user turns may be prefixed with their time stamp, and
media, CLI-app and MCP-preset attachments are spelled out; the no-tiktoken estimate is
``len(payload) // 4 + 4``; the file cap trims to 2000 messages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sessionkit.nanobot import call_forms_022, request_022, tokens
from sessionkit.nanobot.call_forms import CallForms
from sessionkit.nanobot.entry_changes import EntryFacts, changed_022
from sessionkit.nanobot.history import Message, rewritten_entry
from sessionkit.nanobot.kit import Kit
from sessionkit.nanobot.release import CappedPolicy
from sessionkit.nanobot.settings import HistorySettings

__all__ = ["NAME", "Policy"]

NAME = "nanobot-0.2"
_FIXED_CHAT_CHANNELS = frozenset({"cli", "api"})
"""Channels whose runtime context names a fixed chat (``agent``: direct, ``serve``: default)."""


@dataclass(frozen=True, repr=False)
class Policy(CappedPolicy):
    """nanobot-ai 0.2.2's replay and trimming rules (``name="nanobot-0.2"``).

    Every method takes the session's ``messages`` and ``last_consolidated`` and leaves them
    untouched; :class:`sessionkit.Session` applies the results.
    """

    name: str = NAME
    version: str = "0.2.2"
    probe: str = "probe_022.py"
    label: str = "nanobot 0.2.2"
    colour: str = "#4c72b0"
    defaults: HistorySettings = HistorySettings(
        max_messages=120,
        max_tokens=0,
        include_timestamps=True,
        extend_to_user=False,
        include_runtime_context=True,
        file_cap=2000,
        last_consolidated="recorded",
    )
    ignored: frozenset[str] = frozenset({"include_runtime_context"})
    loss_rule: bool = True

    def message_payload(self, message: Message) -> str:
        """0.2.2's payload: every text, name, call id, tool call and reasoning, joined."""
        return tokens.message_payload(message)

    def fallback_tokens(self, payload: str) -> int:
        """0.2.2's count where it cannot encode: characters // 4 + 4."""
        return tokens.fallback_payload_tokens(payload)

    def system_prompt(self, kit: Kit, session: Any) -> str:
        """The kit's prompt, plus the archived summary of ``_last_summary`` when stored."""
        metadata = session.metadata if isinstance(session.metadata, dict) else {}
        return request_022.system_prompt(kit.raw, metadata.get("_last_summary"))

    def current_message(self, kit: Kit, user: Message, session_key: str) -> Message:
        """The stored user message with 0.2.2's runtime context: its clock from the stamp, the
        chat from the session key (``channel:chat_id``) for a chat channel (``nanobot agent``
        and ``serve`` name their own chat whatever the key), the sender as the kit has it."""
        raw = kit.raw
        if ":" in session_key and self.channel(session_key) not in _FIXED_CHAT_CHANNELS:
            chat = session_key.split(":", 1)[1]
            raw = {**raw, "runtime": {**raw["runtime"], "chat_id": chat}}
        return request_022.current_message(raw, user)

    def turn_steps(self, turn: list[Message]) -> list[list[Message]]:
        """What 0.2.2's loop appended before each call of a turn."""
        return request_022.turn_steps(turn)

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
        """0.2.2's per-call clean-up of [system, history, current, steps]."""
        return request_022.loop_messages(
            system, history, current, steps, kit=kit.raw, session_key=session_key, count=count
        )

    def wire_messages(self, kit: Kit, loop: list[Message]) -> list[Message]:
        """0.2.2's OpenAI-compatible provider clean-up."""
        return request_022.wire_messages(loop, kit=kit.raw)

    def estimate_request(
        self, messages: list[Message], tools: list[Message], count: Callable[[str], int]
    ) -> int:
        """0.2.2's whole-request estimate."""
        return request_022.estimate_request(messages, tools, count)

    def call_forms(
        self,
        kit: Kit,
        messages: Sequence[Message],
        entry: Callable[[Message], Message | None],
        session_key: str,
    ) -> CallForms:
        """What 0.2.2's per-call clean-up (bounded, backfilled, compacted results) makes of
        each stored message."""
        return call_forms_022.call_forms(kit, messages, entry, session_key)

    def estimate_message_tokens(self, message: Message) -> int:
        """0.2.2's estimate: cl100k_base tokens + 4, characters // 4 + 4 on special tokens."""
        return tokens.estimate_message_tokens(message)

    def changed_entries(self, facts: EntryFacts, settings: HistorySettings) -> set[int] | None:
        """0.2.2's (:func:`~sessionkit.nanobot.entry_changes.changed_022`); None for a
        release with a rewrite of its own."""
        if type(self).replay_entry is not Policy.replay_entry:
            return None
        return changed_022(facts, bool(self.resolve(settings).include_timestamps))

    def replay_entry(self, message: Message, include_timestamps: bool = False) -> Message | None:
        """The dict one stored message becomes in the model's history, or None if skipped.

        Depends only on the message (never on its neighbours), which is what lets the fast
        path rewrite and count each message once.
        """
        return rewritten_entry(message, include_timestamps)
