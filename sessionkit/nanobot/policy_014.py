"""nanobot-ai 0.1.4 to 0.1.5.post2's history rules, exactly: a count slice, no token budget.

``get_history(max_messages=500)`` takes ``messages[-max_messages:]`` (Python's slice: 0 keeps
every message, a negative count drops that many from the front); from 0.1.4.post2 it slices
what follows ``last_consolidated`` and starts at the first user message in the slice, from
0.1.4.post5 after the last orphan tool result.  Entries keep role, content, tool calls, call id
and name (and reasoning from 0.1.5); nothing is rewritten or skipped.  None of these releases
has a file cap; files are named by the safe key, as 0.2.2 names them.  Before 0.1.5.post2 the
loader has no repair pass: one line (or ``created_at``) it cannot parse loses the session; from
0.1.5.post2 it loads as 0.2.2 does.  Not modelled: ``retain_recent_legal_suffix`` of
0.1.4.post6 to 0.1.5.post2 (called by the heartbeat only), and a stored offset outside the
messages, which these releases slice with as Python does (sessionkit replays from 0).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sessionkit.nanobot import tokens
from sessionkit.nanobot.history import Message, find_legal_message_start, is_user, offset_start
from sessionkit.nanobot.release import LoopCall, ReplayPolicy
from sessionkit.nanobot.request_rules import content_parts, named_parts
from sessionkit.nanobot.settings import HistorySettings

__all__ = ["SLICE_RELEASES", "FirstEstimatePolicy", "SlicePolicy"]

_NOT_TAKEN = frozenset(
    {"max_tokens", "include_timestamps", "extend_to_user", "include_runtime_context", "file_cap"}
)
"""Settings no slice release takes: ``get_history`` has only ``max_messages``, and no file cap."""


def _loop_defaults(max_messages: int) -> HistorySettings:
    """The settings a slice release's agent loop uses (``max_messages``: what it passes)."""
    return HistorySettings(
        max_messages=max_messages,
        max_tokens=0,
        include_timestamps=False,
        extend_to_user=False,
        include_runtime_context=True,
        file_cap=0,
        last_consolidated="recorded",
    )


@dataclass(frozen=True, repr=False)
class SlicePolicy(ReplayPolicy):
    """One release of 0.1.4 to 0.1.5.post2: which of the slice rules its ``get_history`` applies.

    Without an estimator of their own (0.1.4 to 0.1.4.post4), releases count as 0.1.4.post6
    and later count: cl100k_base + 4, characters // 4 + 4 where tiktoken cannot encode.
    """

    default_max_messages: int = 0
    """``get_history(0)`` keeps every message (``messages[-0:]``)."""
    history_default: int = 500
    """``get_history``'s own default ``max_messages``."""
    from_offset: bool = True
    """Whether the slice starts after ``last_consolidated`` (0.1.4 slices every message)."""
    aligns_user: bool = True
    """Whether the slice starts at its first user message, when it holds one."""
    legal_start: bool = True
    """Whether the slice starts after its last orphan tool result."""
    entry_fields: tuple[str, ...] = ("tool_calls", "tool_call_id", "name", "reasoning_content")
    """The fields an entry copies from its message besides role and content."""
    passes_window: bool = True
    """Whether the agent loop passes its configured window (else ``max_messages=0``: all)."""
    writes_key: bool = True
    """Whether the metadata line names the session key (0.1.4's has no ``key``)."""
    temp_name: str = r"(?!)"
    """Saves rewrite the file in place (0.1.5.post2: through ``<name>.jsonl.tmp``)."""
    ignored: frozenset[str] = _NOT_TAKEN
    windowed: bool = False
    counts_as: str = "nanobot-0.2"
    defaults: HistorySettings = _loop_defaults(0)

    def fallback_tokens(self, payload: str) -> int:
        """Characters // 4 + 4 (at least 4), as 0.1.4.post6 to 0.2.2 count without tiktoken."""
        return tokens.fallback_payload_tokens(payload)

    def estimate_message_tokens(self, message: Message) -> int:
        """cl100k_base tokens + 4, characters // 4 + 4 on special-token text."""
        return tokens.estimate_message_tokens(message)

    def loop_call(self, context_window: int, max_output: int, max_messages: int) -> LoopCall:
        """The loop passes its window (or 0, every message) and never a token budget."""
        return LoopCall(max_messages if self.passes_window else 0, 0)

    def metadata_record(
        self, key: str, created_at: str, updated_at: str, metadata: Any, offset: int
    ) -> dict[str, Any]:
        """The first line of a session file as this release writes it."""
        record = super().metadata_record(key, created_at, updated_at, metadata, offset)
        if not self.writes_key:
            del record["key"]
        return record

    def replay_entry(self, message: Message, include_timestamps: bool = False) -> Message:
        """Role, content (``""`` when missing) and the release's copied fields; the flag is
        the shared entry keyword, which these releases never set."""
        entry: Message = {"role": message["role"], "content": message.get("content", "")}
        for key in self.entry_fields:
            if key in message:
                entry[key] = message[key]
        return entry

    @cached_property
    def history_signature(self) -> inspect.Signature:
        """``get_history(max_messages=500)``."""
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return inspect.Signature(
            [inspect.Parameter("max_messages", kind, default=self.history_default)]
        )

    def replay_from(
        self,
        messages: Sequence[Message],
        offset: int,
        max_messages: int,
        *,
        max_tokens: int,
        extend_to_user: bool,
        entry: Callable[[Message], Message | None],
    ) -> list[tuple[int, Message]]:
        """The slice, aligned as the release aligns it (no budget: ``max_tokens`` and
        ``extend_to_user`` are not taken)."""
        start = offset_start(offset, len(messages)) if self.from_offset else 0
        start += slice(-max_messages, None).indices(len(messages) - start)[0]
        if self.aligns_user:
            start = next((i for i in range(start, len(messages)) if is_user(messages[i])), start)
        if self.legal_start:
            start += find_legal_message_start(messages[start:])
        return [
            (i, replayed)
            for i in range(start, len(messages))
            if (replayed := entry(messages[i])) is not None
        ]


@dataclass(frozen=True, repr=False)
class FirstEstimatePolicy(SlicePolicy):
    """0.1.4.post5's estimate, the first nanobot had: no reasoning text, no framing tokens."""

    plain_count: str = "cl100k_base, at least 1, no reasoning"
    counts_as: str = ""

    def message_payload(self, message: Message) -> str:
        """Content, name, call id and tool calls joined (reasoning is not counted)."""
        parts = content_parts(message.get("content"), skip_non_string_text=False, other_blocks=True)
        parts += named_parts(message)
        if message.get("tool_calls"):
            parts.append(json.dumps(message["tool_calls"], ensure_ascii=False))
        return "\n".join(parts)

    def fallback_tokens(self, payload: str) -> int:
        """Characters // 4 (at least 1)."""
        return max(1, len(payload) // 4) if payload else 1

    def estimate_message_tokens(self, message: Message) -> int:
        """cl100k_base tokens (at least 1), the fallback on special-token text."""
        payload = self.message_payload(message)
        if not payload or tokens.has_special_tokens(payload):
            return self.fallback_tokens(payload)
        return max(1, tokens.count_cl100k(payload))

    def encoded_tokens(self, n: int) -> int:
        """``n`` (at least 1): no framing tokens."""
        return max(1, n)


def _release(version: str, kind: type[SlicePolicy] = SlicePolicy, **rules: Any) -> SlicePolicy:
    return kind(name=f"nanobot-{version}", version=version, label=f"nanobot {version}", **rules)


_BEFORE_REASONING = ("tool_calls", "tool_call_id", "name")

SLICE_RELEASES: tuple[SlicePolicy, ...] = (
    _release(
        "0.1.4",
        colour="#8c8c8c",
        from_offset=False,
        aligns_user=False,
        legal_start=False,
        entry_fields=_BEFORE_REASONING,
        writes_key=False,
        defaults=_loop_defaults(50),
        estimates=False,
    ),
    _release(
        "0.1.4.post2",
        colour="#937860",
        legal_start=False,
        estimates=False,
        entry_fields=_BEFORE_REASONING,
        defaults=_loop_defaults(100),
    ),
    _release(
        "0.1.4.post5",
        FirstEstimatePolicy,
        colour="#da8bc3",
        entry_fields=_BEFORE_REASONING,
        passes_window=False,
    ),
    _release("0.1.4.post6", colour="#8172b3", entry_fields=_BEFORE_REASONING, passes_window=False),
    _release("0.1.5", colour="#ccb974", passes_window=False),
    _release(
        "0.1.5.post2",
        colour="#64b5cd",
        passes_window=False,
        temp_name=r"[^/]*\.jsonl\.tmp",
        loss_rule=True,
    ),
)
"""The distinct releases from 0.1.4 to 0.1.5.post2, oldest first (aliases: the registry's)."""
