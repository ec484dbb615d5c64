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

import weakref
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from sessionkit.corpus import resolve_session
from sessionkit.counting import count_tokens
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session
from sessionkit.schema import STATES, STATUSES, empty_frame
from sessionkit.windowing import windows

if TYPE_CHECKING:
    from sessionkit.corpus import Corpus

__all__ = ["Settings", "message_states", "summarize"]

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
    """One turn's window in source indices, with the :func:`sessionkit.windows` row behind it.

    ``retained`` are the messages the file cap left (source indices), the first
    ``consolidated`` of them below the offset in force; ``count_start`` and ``start`` are
    where the count window and the final window begin (``stop`` when empty).
    """

    stop: int
    retained: np.ndarray
    consolidated: int
    count_start: int
    start: int
    row: dict[str, Any]


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
    """:func:`sessionkit.windows` at ``turn``, after the file cap, in source indices."""
    stop = _turn_stop(session, turn)
    prefix = session.messages[:stop]
    offset = session.last_consolidated if session.last_consolidated <= stop else 0
    trim = get_policy(session.policy).file_cap(prefix, offset, settings.file_cap)
    if trim.dropped:
        where = {id(m): i for i, m in enumerate(prefix)}
        retained = np.array([where[id(m)] for m in trim.retained], dtype=np.int64)
        subject = Session(
            session.key,
            trim.retained,
            last_consolidated=trim.last_consolidated,
            policy=session.policy,
        )
    else:
        retained, subject = np.arange(stop, dtype=np.int64), session
    frame = windows(
        subject,
        max_messages=settings.max_messages,
        max_tokens=sorted({0, max(settings.max_tokens, 0)}),
        include_timestamps=settings.include_timestamps,
        extend_to_user=settings.extend_to_user,
        at=[len(retained)] if trim.dropped else [stop],
    )
    source = np.append(retained, stop)
    count_row, row = frame.iloc[0], frame.iloc[-1]
    return _Window(
        stop=stop,
        retained=retained,
        consolidated=int(row["consolidated"]),
        count_start=int(source[count_row["start"]]),
        start=int(source[row["start"]]),
        row=row.to_dict(),
    )


# Per-message token counts by (id(session), include_timestamps); valid while the session is
# alive and holds the same messages list at the same length (as sessionkit.windows caches).
_COUNTS: dict[
    tuple[int, bool], tuple[int, int, pd.arrays.IntegerArray, pd.arrays.IntegerArray]
] = {}


def _token_counts(
    session: Session, include_timestamps: bool
) -> tuple[pd.arrays.IntegerArray, pd.arrays.IntegerArray]:
    """Tokens of each stored message, and of each as sent (<NA> where never sent)."""
    key = (id(session), include_timestamps)
    hit = _COUNTS.get(key)
    if hit is not None and hit[:2] == (id(session.messages), len(session.messages)):
        return hit[2], hit[3]
    policy = get_policy(session.policy)
    entries = [policy.replay_entry(m, include_timestamps) for m in session.messages]
    counts = iter(count_tokens([e for e in entries if e is not None]))
    sent = pd.array([None if e is None else next(counts) for e in entries], dtype="Int64")
    stored = pd.array(count_tokens(session.messages), dtype="Int64")
    if hit is None:
        weakref.finalize(session, _COUNTS.pop, key, None)
    _COUNTS[key] = (id(session.messages), len(session.messages), stored, sent)
    return stored, sent


def _statuses(session: Session, window: _Window, sent: pd.arrays.IntegerArray) -> np.ndarray:
    code = {status: np.int8(i) for i, status in enumerate(STATUSES)}
    status = np.full(len(session.messages), code["later"], dtype=np.int8)
    status[: window.stop] = code["file_cap"]
    status[window.retained[: window.consolidated]] = code["consolidated"]
    live = window.retained[window.consolidated :]
    status[live] = np.where(
        live < window.count_start,
        code["trimmed_count"],
        np.where(live < window.start, code["trimmed_tokens"], code["in_window"]),
    )
    never_sent = live[np.asarray(sent.isna())[live]]
    commands = np.array([bool(session.messages[i].get("_command")) for i in never_sent], bool)
    status[never_sent] = np.where(commands, code["command"], code["skipped"])
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
    """One row per message of a session: its tokens and its status at ``turn`` (see :data:`STATES`).

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
    turn), the settings, and :func:`sessionkit.windows`' ``cut``, ``messages_kept`` and
    ``tokens_kept`` for this window, so a plot or a summary of the frame needs nothing else.
    """
    session = resolve_session(source, key)
    settings = Settings(max_messages, max_tokens, include_timestamps, extend_to_user, file_cap)
    window = _window(session, turn, settings)
    messages = session.messages
    if not messages:
        frame = empty_frame(STATES)
    else:
        stored, sent = _token_counts(session, include_timestamps)
        roles = [m.get("role") for m in messages]
        is_user = np.array([r == "user" for r in roles], dtype=np.int64)
        frame = pd.DataFrame(
            {
                "idx": pd.array(np.arange(len(messages)), dtype="Int64"),
                "role": pd.Categorical(roles),
                "user_index": pd.array(np.cumsum(is_user) - 1, dtype="Int64"),
                "tokens": stored,
                "sent_tokens": sent,
                "status": pd.Categorical.from_codes(
                    _statuses(session, window, sent), categories=list(STATUSES)
                ),
            }
        )
    frame.attrs.update(
        key=session.key,
        turn=session.n_user_turns if turn is None else int(turn),
        stop=window.stop,
        **asdict(settings),
        cut=str(window.row["cut"]),
        messages_kept=int(window.row["messages_kept"]),
        tokens_kept=int(window.row["tokens_kept"]),
    )
    return frame


def summarize(states: pd.DataFrame) -> dict[str, Any]:
    """The numbers behind a states frame, as the explorer shows them.

    ``in_window`` and ``sent_tokens`` are :func:`sessionkit.windows`' ``messages_kept`` and
    ``tokens_kept`` (the entries ``get_history`` returns and their tokens), ``cut`` what set
    the window's start; then the number of messages with each other status, and ``window``,
    the source index range ``(first, last + 1)`` of the messages sent (None when empty).
    """
    counts = states["status"].value_counts().reindex(list(STATUSES), fill_value=0)
    sent = np.flatnonzero(states["status"].to_numpy() == "in_window")
    return {
        **{status: int(n) for status, n in counts.items()},
        "in_window": states.attrs["messages_kept"],
        "sent_tokens": states.attrs["tokens_kept"],
        "cut": states.attrs["cut"],
        "window": (int(sent[0]), int(sent[-1]) + 1) if len(sent) else None,
    }
