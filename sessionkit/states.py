"""Why each message of a session is, or is not, in the history nanobot sends at one turn.

:func:`message_states` labels every message of a session for one turn and one setting; the
token timeline, the explorer and the notebooks all read these labels, so they always agree
with each other and with the exact policy (``Session.get_history``).

A *turn* ``k`` is the moment nanobot answers user message ``k``: the history is built from the
messages stored before it, which are exactly the messages :func:`sessionkit.fork` keeps for
``before_user_index=k`` (``last_consolidated`` survives only when it lies within them).  Turn
``n_user_turns`` (the default) is the next turn: the whole session as stored.  The file cap is
applied to those messages first, as nanobot applies it after every turn.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from sessionkit.policy import get_policy
from sessionkit.schema import Column, empty_frame
from sessionkit.session import Session
from sessionkit.tokens import count_tokens

if TYPE_CHECKING:
    from sessionkit.corpus import Corpus

__all__ = ["COLUMNS", "STATUSES", "Settings", "message_states", "resolve_session", "summarize"]

STATUSES: tuple[str, ...] = (
    "in_window",
    "trimmed_count",
    "trimmed_tokens",
    "consolidated",
    "command",
    "skipped",
    "file_cap",
    "later",
)
"""Every status, in display order.

``in_window``: sent to the model.  ``trimmed_count``: before the ``max_messages`` window (or cut
to start it on a user turn or a legal tool boundary).  ``trimmed_tokens``: inside the count
window but over ``max_tokens``.  ``consolidated``: below ``last_consolidated``.  ``command``: a
``_command`` message, never sent.  ``skipped``: an assistant message with no text and nothing
else to replay.  ``file_cap``: removed from the file by ``enforce_file_cap(limit)``.
``later``: stored at or after the turn.
"""

COLUMNS: tuple[Column, ...] = (
    Column("idx", "Int64", "zero-based position in the session's messages"),
    Column("role", "category", "user / assistant / tool / system"),
    Column("user_index", "Int64", "user turn the message belongs to (-1 before the first)"),
    Column("tokens", "Int64", "tokens of the stored message (nanobot's estimate)"),
    Column(
        "sent_tokens",
        "Int64",
        "tokens of the message as get_history would send it under these settings "
        "(<NA> for commands and skipped messages, which are never sent)",
    ),
    Column("status", "category", f"one of {', '.join(STATUSES)}"),
)
"""Columns of :func:`message_states`."""


@dataclass(frozen=True)
class Settings:
    """One history setting: ``get_history``'s arguments plus the file cap (0 disables it)."""

    max_messages: int = 120
    max_tokens: int = 0
    include_timestamps: bool = True
    extend_to_user: bool = False
    file_cap: int = 2000


@dataclass(frozen=True)
class _Window:
    """One turn's history in source indices: what the cap kept, the offset, what was sent."""

    stop: int
    retained: np.ndarray
    consolidated: int
    count_kept: np.ndarray
    kept: np.ndarray


def resolve_session(source: Session | Corpus, key: str | None = None) -> Session:
    """``source`` itself, or the session ``key`` of a Corpus."""
    if isinstance(source, Session):
        if key is not None and key != source.key:
            raise ValueError(f"key {key!r} given with session {source.key!r}")
        return source
    if key is None:
        raise TypeError("a Corpus needs key=..., the session to look at")
    return source[key]


def _turn_stop(session: Session, turn: int | None) -> int:
    """Messages stored before user message ``turn`` (all of them for the next turn)."""
    n_turns = session.n_user_turns
    if turn is None or turn == n_turns:
        return len(session.messages)
    if isinstance(turn, bool) or not isinstance(turn, int | np.integer) or not 0 <= turn < n_turns:
        raise ValueError(
            f"turn must be an integer from 0 to {n_turns} (session {session.key!r} has "
            f"{n_turns} user messages; {n_turns} is the next turn), got {turn!r}"
        )
    users = (i for i, m in enumerate(session.messages) if m.get("role") == "user")
    for _ in range(turn):
        next(users)
    return next(users)


def _window(session: Session, turn: int | None, settings: Settings) -> _Window:
    """The exact policy's history at ``turn``, mapped back to source indices."""
    policy = get_policy(session.policy)
    stop = _turn_stop(session, turn)
    prefix = session.messages[:stop]
    offset = session.last_consolidated if session.last_consolidated <= stop else 0
    trim = policy.file_cap(prefix, offset, settings.file_cap)
    where = {id(m): i for i, m in enumerate(prefix)}
    retained = np.array([where[id(m)] for m in trim.retained], dtype=np.int64)

    def kept(max_tokens: int) -> np.ndarray:
        replay = policy.replay(
            trim.retained,
            trim.last_consolidated,
            settings.max_messages,
            max_tokens=max_tokens,
            include_timestamps=settings.include_timestamps,
            extend_to_user=settings.extend_to_user,
        )
        return retained[np.array([i for i, _ in replay], dtype=np.int64)]

    count_kept = kept(0)
    return _Window(
        stop=stop,
        retained=retained,
        consolidated=trim.last_consolidated,
        count_kept=count_kept,
        kept=kept(settings.max_tokens) if settings.max_tokens > 0 else count_kept,
    )


def _sent_tokens(session: Session, include_timestamps: bool) -> pd.arrays.IntegerArray:
    policy = get_policy(session.policy)
    entries = [policy.replay_entry(m, include_timestamps) for m in session.messages]
    sent = [e for e in entries if e is not None]
    counts = iter(count_tokens(sent))
    return pd.array([None if e is None else next(counts) for e in entries], dtype="Int64")


def _statuses(session: Session, window: _Window, sent: pd.arrays.IntegerArray) -> np.ndarray:
    code = {status: np.int8(i) for i, status in enumerate(STATUSES)}
    status = np.full(len(session.messages), code["later"], dtype=np.int8)
    status[: window.stop] = code["file_cap"]
    status[window.retained[: window.consolidated]] = code["consolidated"]
    live = window.retained[window.consolidated :]
    count_start = window.count_kept[0] if len(window.count_kept) else window.stop
    start = window.kept[0] if len(window.kept) else window.stop
    status[live] = np.where(
        live < count_start,
        code["trimmed_count"],
        np.where(live < start, code["trimmed_tokens"], code["skipped"]),
    )
    never_sent = live[np.asarray(sent.isna())[live]]
    commands = np.array([bool(session.messages[i].get("_command")) for i in never_sent], bool)
    status[never_sent] = np.where(commands, code["command"], code["skipped"])
    status[window.kept] = code["in_window"]
    return status


def message_states(
    source: Session | Corpus,
    key: str | None = None,
    *,
    turn: int | None = None,
    max_messages: int = 120,
    max_tokens: int = 0,
    include_timestamps: bool = True,
    extend_to_user: bool = False,
    file_cap: int = 2000,
) -> pd.DataFrame:
    """One row per message of a session: its tokens and its status at ``turn`` (see :data:`COLUMNS`).

    Parameters
    ----------
    source, key
        A session, or a Corpus and the key of one of its sessions.
    turn
        User message whose answer is being prepared, 0 to ``n_user_turns`` (default: the
        next turn, i.e. the whole session).
    max_messages, max_tokens, include_timestamps, extend_to_user
        ``get_history``'s arguments (nanobot's agent loop passes ``include_timestamps=True``).
    file_cap
        ``enforce_file_cap``'s limit applied before the turn; 0 disables it.

    The frame's ``attrs`` record ``key``, ``turn`` (resolved), ``stop`` (messages before the
    turn) and the settings, so a plot of the frame can draw its limits.
    """
    session = resolve_session(source, key)
    settings = Settings(max_messages, max_tokens, include_timestamps, extend_to_user, file_cap)
    window = _window(session, turn, settings)
    messages = session.messages
    if not messages:
        frame = empty_frame(COLUMNS)
    else:
        sent = _sent_tokens(session, include_timestamps)
        roles = [m.get("role") for m in messages]
        is_user = np.array([r == "user" for r in roles], dtype=np.int64)
        frame = pd.DataFrame(
            {
                "idx": pd.array(np.arange(len(messages)), dtype="Int64"),
                "role": pd.Categorical(roles),
                "user_index": pd.array(np.cumsum(is_user) - 1, dtype="Int64"),
                "tokens": pd.array(count_tokens(messages), dtype="Int64"),
                "sent_tokens": sent,
                "status": pd.Categorical.from_codes(
                    _statuses(session, window, sent), categories=list(STATUSES)
                ),
            }
        )
    resolved = session.n_user_turns if turn is None else int(turn)
    frame.attrs.update(key=session.key, turn=resolved, stop=window.stop, **asdict(settings))
    return frame


def summarize(states: pd.DataFrame) -> dict[str, Any]:
    """Counts behind a states frame: messages per status, and the tokens sent.

    ``in_window`` is the number of history entries ``get_history`` returns, ``sent_tokens``
    their token total, ``window`` the source index range ``(first, last + 1)`` they span.
    """
    counts = states["status"].value_counts().reindex(list(STATUSES), fill_value=0)
    sent = states.loc[states["status"] == "in_window", ["idx", "sent_tokens"]]
    window = (int(sent["idx"].iloc[0]), int(sent["idx"].iloc[-1]) + 1) if len(sent) else None
    return {
        **{status: int(n) for status, n in counts.items()},
        "sent_tokens": int(sent["sent_tokens"].sum()),
        "window": window,
    }
