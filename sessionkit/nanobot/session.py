"""The Session record: nanobot's field names and methods, plus where it was loaded from."""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sessionkit.nanobot.policies import CappedPolicy, Trim, get_policy
from sessionkit.nanobot.release import WindowRefused
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings, Offset

__all__ = ["Session", "turn_number"]


def turn_number(value: Any, name: str) -> int:
    """``value`` as a user-turn index, refusing a bool or a non-integer (``name`` says whose)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None


def _valid_offset(value: Any, n_messages: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= n_messages


def _user_position(
    messages: list[dict[str, Any]], index: int, is_user_turn: Callable[[dict[str, Any]], bool]
) -> int | None:
    """Where user turn ``index`` sits (``len(messages)`` one past the last), else ``None``."""
    users = 0
    for position, message in enumerate(messages):
        if is_user_turn(message):
            if users == index:
                return position
            users += 1
    return len(messages) if users == index else None


@dataclass
class Session:
    """One conversation, built like nanobot's ``Session`` (same field names and defaults).

    ``messages`` are the raw dicts exactly as stored.  An out-of-range or non-integer
    ``last_consolidated`` becomes 0, as nanobot does.  ``created_at``/``updated_at`` are
    ``None`` when the file did not record them (nanobot would substitute "now").
    ``held_lines`` are the file's lines that are valid JSON past Python's ``json`` limits,
    which no nanobot release can parse: ``(position, text)``, the line as it is, sitting
    before message ``position``.  They are no messages (replays leave them out); saving the
    session writes them back unchanged.  Appending a message keeps them; any other rewrite
    of the messages drops them, since their place among the messages is gone.
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
    held_lines: tuple[tuple[int, str], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if not _valid_offset(self.last_consolidated, len(self.messages)):
            self.last_consolidated = 0

    def __len__(self) -> int:
        return len(self.messages)

    def __repr__(self) -> str:
        return (
            f"Session(key={self.key!r}, messages={len(self)}, "
            f"last_consolidated={self.last_consolidated}, format={self.format!r})"
        )

    @property
    def n_user_turns(self) -> int:
        """Number of user turns (0.3.5 does not count its hidden checkpoint and automation
        messages): :meth:`before_user` and forks take 0 to this."""
        return sum(map(get_policy(self.policy).is_user_turn, self.messages))

    def copy(self) -> Session:
        """A deep copy, so mutating policy methods leave this session untouched."""
        return copy.deepcopy(self)

    def add_message(self, role: str, content: str, **kwargs: Any) -> None:
        """Append ``{"role", "content", "timestamp", **kwargs}`` stamped now, as nanobot does.

        The timestamp is local ``datetime.now().isoformat()`` (a ``timestamp`` keyword replaces
        its value, not its place); ``updated_at`` becomes now.  ``line_numbers`` no longer
        describe the messages, so they become ``None``.
        """
        stamp = datetime.now().isoformat()
        self.messages.append(get_policy(self.policy).new_message(role, content, stamp, kwargs))
        self.updated_at = datetime.now()
        self.line_numbers = None

    def clear(self) -> None:
        """Drop every message and the offset, and the summary that covered them, as nanobot does
        (0.3.5 also forgets its provider state)."""
        self.records = get_policy(self.policy).records_after_clear(self.records)
        self.messages = []
        self.last_consolidated = 0
        self.updated_at = datetime.now()
        self.line_numbers = None
        self.held_lines = ()
        if isinstance(self.metadata, dict):
            self.metadata.pop("_last_summary", None)

    def before_user(self, index: int, *, deep: bool = False) -> Session:
        """The session as stored just before user message ``index`` (0-based) was added.

        Its messages are those before that user turn (``index == n_user_turns`` keeps them
        all; under 0.3.5 hidden messages are not turns); ``last_consolidated`` is kept when it lies within them, else 0 (nanobot resets an
        offset past the end).  Everything else is the source's: key, timestamps, metadata,
        records, policy, path and format, with ``line_numbers`` cut to the messages and
        ``held_lines`` to those before the cut.  This is
        the history nanobot had when it answered user message ``index``, and what
        :func:`sessionkit.writers.forking.fork` copies.

        Parameters
        ----------
        index
            Zero-based user message to stop before, from 0 to ``n_user_turns``.
        deep
            Deep-copy messages, metadata and records.  By default the new session shares the
            message dicts (a new list) and gets a shallow copy of the metadata, so taking every
            turn of a long session stays cheap; do not edit its message dicts in place.

        Raises
        ------
        TypeError
            When ``index`` is not an integer (a bool is not one).
        IndexError
            When ``index`` is below 0 or past ``n_user_turns``.
        """
        index = turn_number(index, "the user message index")
        turn = get_policy(self.policy).is_user_turn
        stop = None if index < 0 else _user_position(self.messages, index, turn)
        if stop is None:
            n_users = self.n_user_turns
            raise IndexError(
                f"user message index {index} is out of range: session {self.key!r} has "
                f"{n_users} user messages, so it must be between 0 and {n_users}"
            )
        messages = self.messages[:stop]
        clone = copy.deepcopy if deep else copy.copy
        return Session(
            key=self.key,
            messages=copy.deepcopy(messages) if deep else messages,
            created_at=self.created_at,
            updated_at=self.updated_at,
            metadata=clone(self.metadata),
            last_consolidated=self.last_consolidated if self.last_consolidated <= stop else 0,
            path=self.path,
            format=self.format,
            records=clone(self.records),
            line_numbers=None if self.line_numbers is None else self.line_numbers[:stop],
            policy=self.policy,
            held_lines=tuple(h for h in self.held_lines if h[0] <= stop),
        )

    def replay_offset(self, setting: Offset | None) -> int:
        """The offset a replay starts from under ``HistorySettings.last_consolidated``: this
        session's own (``"recorded"``, or ``None``), 0 (``"none"``), or a given index (0 when
        outside the messages)."""
        if setting is None or setting == "recorded":
            return self.last_consolidated
        if setting == "none":
            return 0
        if isinstance(setting, int) and not isinstance(setting, bool):
            return setting if 0 <= setting <= len(self) else 0
        raise ValueError(f"last_consolidated must be 'recorded', 'none' or an int, not {setting!r}")

    def history(self, settings: HistorySettings = DEFAULT_SETTINGS) -> list[dict[str, Any]]:
        """:meth:`get_history` for one :class:`HistorySettings` value, its offset included.

        ``settings.last_consolidated`` picks the offset replayed from (``"recorded"`` is this
        session's own); ``file_cap`` is not applied, as ``get_history`` does not apply it.
        Only the settings this session's release takes are passed on.
        """
        policy = get_policy(self.policy)
        resolved = policy.resolve(settings)
        try:
            return policy.get_history(
                self.messages,
                self.replay_offset(resolved.last_consolidated),
                **policy.history_kwargs(resolved),
            )
        except WindowRefused as refused:
            raise refused.at(self.key) from None

    def get_history(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        """What nanobot would send the model as history now, with the release's own signature.

        ``nanobot-0.2``: ``(max_messages=120, *, max_tokens=0, include_timestamps=False,
        extend_to_user=False)``; ``nanobot-0.3.0``: ``(max_messages=2000, *, max_tokens=0,
        extend_to_user=False, include_runtime_context=True)``; ``nanobot-0.3.5``: the same with
        ``max_messages=0`` (no count limit), replayed from :attr:`last_archived`.  A keyword the
        release does not take raises ``TypeError``, as the release does.
        """
        policy = get_policy(self.policy)
        try:
            return policy.get_history(self.messages, self.last_consolidated, *args, **kwargs)
        except WindowRefused as refused:
            raise refused.at(self.key) from None

    def _capped(self, name: str) -> CappedPolicy:
        """The release, when it has a file cap (and so the ``Session`` method ``name``)."""
        policy = get_policy(self.policy)
        if not isinstance(policy, CappedPolicy):
            raise AttributeError(f"{self.policy} sessions have no {name}() (the release has none)")
        return policy

    def _checkpointed(self, name: str) -> Any:
        """The release, when it keeps summary checkpoints (and so ``name``)."""
        policy = get_policy(self.policy)
        if not policy.checkpoints:
            raise AttributeError(f"{self.policy} sessions have no {name} (the release has none)")
        return policy

    def retain_recent_legal_suffix(self, max_messages: int, *, extend_to_user: bool = False) -> Any:
        """Trim to a legal recent suffix in place; return what the release returns.

        0.2.2: ``(dropped, already_consolidated)``; 0.3.0: a ``RetentionResult``.  0.3.5 has
        no such method (``AttributeError``).
        """
        policy = self._capped("retain_recent_legal_suffix")
        trim = policy.retain_recent_legal_suffix(
            self.messages, self.last_consolidated, max_messages, extend_to_user=extend_to_user
        )
        self._apply(trim)
        return policy.retention_value(trim)

    def enforce_file_cap(
        self,
        on_archive: Callable[[list[dict[str, Any]]], Any] | None = None,
        limit: int = 2000,
    ) -> None:
        """Bound the file by archiving and trimming old messages, in place, as nanobot does.

        0.2.2 and 0.3.0 only: 0.3.5 removed the file cap (``AttributeError``).
        """
        policy = self._capped("enforce_file_cap")
        trim = policy.file_cap(self.messages, self.last_consolidated, limit)
        self._apply(trim)
        if trim.archived and on_archive:
            on_archive(trim.archived)

    @property
    def last_archived(self) -> int:
        """0.3.5's name for the replay offset (``last_consolidated``), read and written."""
        self._checkpointed("last_archived")
        return self.last_consolidated

    @last_archived.setter
    def last_archived(self, value: int) -> None:
        self._checkpointed("last_archived")
        self.last_consolidated = value

    def commit_summary_checkpoint(
        self, summary: Any, *, insert_at: int | None = None, last_active: datetime | None = None
    ) -> None:
        """0.3.5: insert the hidden continuation message at ``insert_at`` (default: the end),
        replay from there, and remember the summary in ``metadata["_last_summary"]``.

        The offset is stored as given, even outside the messages, as 0.3.5 stores it.
        """
        policy = self._checkpointed("commit_summary_checkpoint()")
        state = policy.commit_summary_checkpoint(
            self.messages,
            self.metadata,
            summary,
            insert_at=insert_at,
            last_active=last_active or self.updated_at or datetime.now(),
            now=datetime.now(),
        )
        self.messages[:] = state.messages
        self.metadata["_last_summary"] = state.metadata["_last_summary"]
        self.last_consolidated = state.last_archived
        self.line_numbers = None
        self.held_lines = ()

    def _apply(self, trim: Trim) -> None:
        """Take a policy's trim: new messages and offset (and a cleared summary)."""
        if trim.retained is self.messages:
            return
        self.messages = trim.retained
        self.last_consolidated = trim.last_consolidated
        self.updated_at = datetime.now()
        self.line_numbers = None
        self.held_lines = ()
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
