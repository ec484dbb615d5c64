"""The Session record: nanobot's field names and methods, plus where it was loaded from."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sessionkit.nanobot.policies import Trim, get_policy

__all__ = ["Session"]


def _valid_offset(value: Any, n_messages: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= n_messages


@dataclass
class Session:
    """One conversation, built like nanobot's ``Session`` (same field names and defaults).

    ``messages`` are the raw dicts exactly as stored.  An out-of-range or non-integer
    ``last_consolidated`` becomes 0, as nanobot does.  ``created_at``/``updated_at`` are
    ``None`` when the file did not record them (nanobot would substitute "now").
    """

    key: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    created_at: datetime | None = field(default_factory=datetime.now)
    updated_at: datetime | None = field(default_factory=datetime.now)
    metadata: dict[str, Any] = field(default_factory=dict)
    last_consolidated: int = 0
    path: Path | None = None
    format: str = "memory"
    records: list[dict[str, Any]] = field(default_factory=list, repr=False)
    line_numbers: Sequence[int] | None = field(default=None, repr=False)
    policy: str = "nanobot-0.2"

    def __post_init__(self) -> None:
        if not _valid_offset(self.last_consolidated, len(self.messages)):
            self.last_consolidated = 0

    def __len__(self) -> int:
        return len(self.messages)

    def __repr__(self) -> str:
        return (
            f"Session(key={self.key!r}, messages={len(self.messages)}, "
            f"last_consolidated={self.last_consolidated}, format={self.format!r})"
        )

    @property
    def n_user_turns(self) -> int:
        """Number of user messages, the range of ``before_user_index`` in forks."""
        return sum(1 for m in self.messages if m.get("role") == "user")

    def copy(self) -> Session:
        """A deep copy, so mutating policy methods leave this session untouched."""
        return copy.deepcopy(self)

    def get_history(
        self,
        max_messages: int = 120,
        *,
        max_tokens: int = 0,
        include_timestamps: bool = False,
        extend_to_user: bool = False,
    ) -> list[dict[str, Any]]:
        """What nanobot would send the model as history now (nanobot's own signature)."""
        return get_policy(self.policy).get_history(
            self.messages,
            self.last_consolidated,
            max_messages,
            max_tokens=max_tokens,
            include_timestamps=include_timestamps,
            extend_to_user=extend_to_user,
        )

    def retain_recent_legal_suffix(
        self, max_messages: int, *, extend_to_user: bool = False
    ) -> tuple[list[dict[str, Any]], int]:
        """Trim to a legal recent suffix in place; return ``(dropped, already_consolidated)``."""
        trim = get_policy(self.policy).retain_recent_legal_suffix(
            self.messages, self.last_consolidated, max_messages, extend_to_user=extend_to_user
        )
        self._apply(trim)
        return trim.dropped, trim.already_consolidated

    def enforce_file_cap(
        self,
        on_archive: Callable[[list[dict[str, Any]]], Any] | None = None,
        limit: int = 2000,
    ) -> None:
        """Bound the file by archiving and trimming old messages, in place, as nanobot does."""
        trim = get_policy(self.policy).file_cap(self.messages, self.last_consolidated, limit)
        self._apply(trim)
        if trim.archived and on_archive:
            on_archive(trim.archived)

    def _apply(self, trim: Trim) -> None:
        """Take a policy's trim: new messages and offset (and a cleared summary)."""
        if trim.retained is self.messages:
            return
        self.messages = trim.retained
        self.last_consolidated = trim.last_consolidated
        self.updated_at = datetime.now()
        if trim.cleared and isinstance(self.metadata, dict):
            self.metadata.pop("_last_summary", None)

    def with_history_trimmed(
        self, max_messages: int, *, extend_to_user: bool = False
    ) -> tuple[Session, list[dict[str, Any]], int]:
        """Non-mutating ``retain_recent_legal_suffix``: ``(new_session, dropped, consolidated)``."""
        new = self.copy()
        dropped, already = new.retain_recent_legal_suffix(
            max_messages, extend_to_user=extend_to_user
        )
        return new, dropped, already

    def with_file_cap(self, limit: int = 2000) -> tuple[Session, list[dict[str, Any]]]:
        """Non-mutating ``enforce_file_cap``: ``(new_session, raw_archived_messages)``."""
        new = self.copy()
        archived: list[dict[str, Any]] = []
        new.enforce_file_cap(archived.extend, limit=limit)
        return new, archived
