"""nanobot-ai 0.1.5.post3 to 0.2.1's history rules, exactly: 0.2.2's, before ``extend_to_user``.

``get_history(max_messages=120, *, max_tokens=0, include_timestamps=False)`` replays from
``last_consolidated`` through a count window (120 for ``max_messages <= 0``), the user-turn and
delivery start, the legal tool-call start and the token budget from the tail, as 0.2.2 does;
the estimate is 0.2.2's.  What differs is each entry's rewrite and the file cap's trim:

- 0.1.5.post3 rewrites no text: media breadcrumbs on any role, time stamps on user turns and on
  ``_channel_delivery`` assistant messages, no ``_command`` skip, reasoning but no thinking
  blocks copied;
- 0.2.0 adds 0.2.2's rewrite of assistant text, skips commands and empty assistant messages,
  spells out media on user turns only and stamps user turns only;
- 0.2.1 adds the CLI-app and MCP-preset breadcrumbs (0.2.2's entries).

0.1.5.post3 and 0.2.0 trim by count: when the newest messages hold no user turn, they keep the
window after the latest user message but archive the oldest messages instead, and
``retain_recent_legal_suffix`` returns None; 0.2.1 trims as 0.2.2 does.  They load files as
0.2.2 does, except that a stored offset outside the messages is kept (sessionkit replays from 0).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any

from sessionkit.nanobot import tokens
from sessionkit.nanobot.history import (
    Message,
    Trim,
    append_lines,
    find_legal_message_start,
    is_user,
    rewritten_entry,
    unchanged,
)
from sessionkit.nanobot.release import CappedPolicy
from sessionkit.nanobot.settings import HistorySettings

__all__ = ["BUDGET_RELEASES", "BudgetPolicy"]

_STAMP = "[Message Time: {}]\n{}"


def _media_lines(media: Any) -> list[str]:
    return [f"[image: {path}]" for path in media if isinstance(path, str) and path]


def _entry_0153(message: Message, include_timestamps: bool) -> Message | None:
    """0.1.5.post3: media on any role, stamps on user turns and deliveries, no rewrite."""
    content = message.get("content", "")
    media = message.get("media")
    if isinstance(media, list) and media and isinstance(content, str):
        # Appended even when no entry is a usable path (the text then gains a newline).
        content = append_lines(content, _media_lines(media))
    stamp = message.get("timestamp")
    role = message.get("role")
    stamped = role == "user" or (role == "assistant" and message.get("_channel_delivery"))
    if include_timestamps and stamp and isinstance(content, str) and stamped:
        content = _STAMP.format(stamp, content)
    entry: Message = {"role": message["role"], "content": content}
    for key in ("tool_calls", "tool_call_id", "name", "reasoning_content"):
        if key in message:
            entry[key] = message[key]
    return entry


def _media_only(message: Message, text: str) -> str:
    media = message.get("media")
    return append_lines(text, _media_lines(media)) if isinstance(media, list) and media else text


@dataclass(frozen=True, repr=False)
class BudgetPolicy(CappedPolicy):
    """One release of 0.1.5.post3 to 0.2.1: 0.2.2's window rules without ``extend_to_user``,
    with the release's entry rewrite and file-cap trim."""

    entry_rule: Callable[[Message, bool], Message | None] = _entry_0153
    """The rewrite of one stored message (``include_timestamps`` as the release applies it)."""
    trims_by_count: bool = True
    """Whether the trim archives the oldest messages and returns None (0.1.5.post3, 0.2.0)."""
    clear_forgets_summary: bool = True
    """Whether emptying the session drops ``metadata["_last_summary"]`` (0.2.0 on)."""
    defaults: HistorySettings = HistorySettings(
        max_messages=120,
        max_tokens=0,
        include_timestamps=True,
        extend_to_user=False,
        include_runtime_context=True,
        file_cap=2000,
        last_consolidated="recorded",
    )
    ignored: frozenset[str] = frozenset({"extend_to_user", "include_runtime_context"})
    loss_rule: bool = True
    counts_as: str = "nanobot-0.2"

    def fallback_tokens(self, payload: str) -> int:
        """Characters // 4 + 4 (at least 4), as 0.2.2."""
        return tokens.fallback_payload_tokens(payload)

    def estimate_message_tokens(self, message: Message) -> int:
        """0.2.2's estimate: cl100k_base tokens + 4, characters // 4 + 4 on special tokens."""
        return tokens.estimate_message_tokens(message)

    def replay_entry(self, message: Message, include_timestamps: bool = False) -> Message | None:
        """The dict one stored message becomes in the model's history, or None if skipped."""
        return self.entry_rule(message, include_timestamps)

    @cached_property
    def history_signature(self) -> inspect.Signature:
        """``(max_messages=120, *, max_tokens=0, include_timestamps=False)``."""
        keyword = inspect.Parameter.KEYWORD_ONLY
        return inspect.Signature(
            [
                inspect.Parameter(
                    "max_messages", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=120
                ),
                inspect.Parameter("max_tokens", keyword, default=0),
                inspect.Parameter("include_timestamps", keyword, default=False),
            ]
        )

    def retention_value(self, trim: Trim) -> Any:
        """None (0.1.5.post3, 0.2.0), else ``(dropped, already_consolidated)``."""
        return None if self.trims_by_count else super().retention_value(trim)

    def retain_recent_legal_suffix(
        self,
        messages: list[Message],
        last_consolidated: int,
        max_messages: int,
        *,
        extend_to_user: bool = False,
    ) -> Trim:
        """Trim to at most ``max_messages`` recent messages starting at a user turn.

        These releases take no ``extend_to_user`` (``TypeError``).  A count trim's
        ``dropped`` are the oldest messages, which it archives, whichever it kept.
        """
        if extend_to_user:
            raise TypeError("retain_recent_legal_suffix() got an unexpected keyword argument")
        if not self.trims_by_count:
            return super().retain_recent_legal_suffix(messages, last_consolidated, max_messages)
        n = len(messages)
        if max_messages <= 0:
            cleared = self.clear_forgets_summary
            return Trim([], list(messages), min(last_consolidated, n), 0, cleared=cleared)
        if n <= max_messages:
            return unchanged(messages, last_consolidated)
        start, stop = n - max_messages, n
        first = next((i for i in range(start, n) if is_user(messages[i])), None)
        if first is not None:
            start = first
        else:
            latest = next((i for i in range(n - 1, -1, -1) if is_user(messages[i])), None)
            if latest is not None:
                start, stop = latest, min(n, latest + max_messages)
        start += find_legal_message_start(messages[start:stop])
        count = n - (stop - start)
        return Trim(
            retained=messages[start:stop],
            dropped=messages[:count],
            already_consolidated=min(last_consolidated, count),
            last_consolidated=max(0, last_consolidated - count),
        )


def _release(version: str, **rules: Any) -> BudgetPolicy:
    return BudgetPolicy(
        name=f"nanobot-{version}", version=version, label=f"nanobot {version}", **rules
    )


BUDGET_RELEASES: tuple[BudgetPolicy, ...] = (
    _release("0.1.5.post3", colour="#b47cc7", clear_forgets_summary=False),
    _release(
        "0.2.0", colour="#c44e52", entry_rule=partial(rewritten_entry, breadcrumbs=_media_only)
    ),
    _release(
        "0.2.1",
        colour="#4c8c4a",
        entry_rule=rewritten_entry,
        trims_by_count=False,
    ),
)
"""The distinct releases from 0.1.5.post3 to 0.2.1, oldest first."""
