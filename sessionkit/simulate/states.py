"""Why each message of a session is, or is not, in the history nanobot sends at one turn.

:func:`message_states` labels every message of a session for one turn and one setting; the
token timeline, the explorer and the notebooks all read these labels, so they always agree
with each other and with the exact policy (``Session.get_history``).

A *turn* ``k`` is the moment nanobot answers user message ``k``: the history is built from
``Session.before_user(k)``, the messages stored before it (``last_consolidated`` survives only
when it lies within them).  Turn ``n_user_turns`` (the default) is the next turn: the whole
session as stored.  The file cap is applied to those messages first, as nanobot applies it
after every turn.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from sessionkit.conventions import entry_point
from sessionkit.nanobot.policies import Trim, get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings, Offset
from sessionkit.schema import STATES, STATUS_NAMES, frame
from sessionkit.simulate import replay
from sessionkit.simulate.windowing import windows
from sessionkit.store.corpus import resolve_session
from sessionkit.store.text import shown

if TYPE_CHECKING:
    from sessionkit.store.corpus import Corpus

__all__ = ["MessageStates", "message_states"]


@dataclass(frozen=True, eq=False)
class MessageStates:
    """One turn of one session: each message's status, and the window behind them.

    ``frame`` has one row per message (columns: :data:`sessionkit.schema.STATES`).  ``turn``
    is the turn resolved (``n_user_turns`` for the next one), ``stop`` the number of messages
    stored before it; ``cut``, ``messages_kept``, ``tokens_kept`` and ``recovered`` are
    :func:`sessionkit.windows`' for this window, so a plot or a summary needs nothing else.
    ``count_window`` is the count window the session's release applies with these settings
    (0: none, as under 0.3.5 by default).
    """

    frame: pd.DataFrame = field(repr=False)
    key: str
    turn: int
    stop: int
    settings: HistorySettings
    cut: str
    messages_kept: int
    tokens_kept: int
    recovered: bool
    count_window: int

    def summary(self) -> dict[str, Any]:
        """The numbers behind these states, as the explorer shows them.

        ``in_window`` and ``sent_tokens`` are ``messages_kept`` and ``tokens_kept`` (the
        entries ``get_history`` returns and their tokens), ``cut`` what set the window's
        start; then the number of messages with each other status, and ``window``, the source
        index range ``(first, last + 1)`` of the messages sent (None when empty).
        """
        status = self.frame["status"]
        counts = status.value_counts().reindex(list(STATUS_NAMES), fill_value=0)
        sent = np.flatnonzero(status.to_numpy() == "in_window")
        return {
            **{name: int(n) for name, n in counts.items()},
            "in_window": self.messages_kept,
            "sent_tokens": self.tokens_kept,
            "cut": self.cut,
            "window": (int(sent[0]), int(sent[-1]) + 1) if len(sent) else None,
        }


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


def _window(session: Session, turn: int, settings: HistorySettings) -> _Window:
    """:func:`sessionkit.windows` at ``turn``, after the file cap, in source indices."""
    before = session.before_user(turn)
    stop = len(before.messages)
    policy = get_policy(session.policy)
    offset = before.replay_offset(settings.last_consolidated)
    trim = (
        Trim(before.messages, [], 0, offset)
        if policy.file_cap is None
        else policy.file_cap(before.messages, offset, settings.file_cap)
    )
    if trim.dropped:
        where = {id(m): i for i, m in enumerate(before.messages)}
        retained = np.array([where[id(m)] for m in trim.retained], dtype=np.int64)
        subject = Session(session.key, trim.retained, policy=session.policy)
    else:
        retained, subject = np.arange(stop, dtype=np.int64), session
    rows = windows(
        subject,
        settings=settings,
        grid={"max_tokens": sorted({0, max(cast(int, settings.max_tokens), 0)})},
        last_consolidated=trim.last_consolidated,
        at=[len(retained)],
    )
    source = np.append(retained, stop)
    count_row, row = rows.iloc[0], rows.iloc[-1]
    return _Window(
        stop=stop,
        retained=retained,
        consolidated=int(row["consolidated"]),
        count_start=int(source[count_row["start"]]),
        start=int(source[row["start"]]),
        row=row.to_dict(),
    )


def _statuses(session: Session, window: _Window, sent: np.ndarray) -> np.ndarray:
    """Each message's status code (into :data:`STATUS_NAMES`); ``sent`` flags replayed ones."""
    code = {status: np.int8(i) for i, status in enumerate(STATUS_NAMES)}
    status = np.full(len(session.messages), code["later"], dtype=np.int8)
    status[: window.stop] = code["file_cap"]
    status[window.retained[: window.consolidated]] = code["consolidated"]
    live = window.retained[window.consolidated :]
    status[live] = np.where(
        live < window.count_start,
        code["trimmed_count"],
        np.where(live < window.start, code["trimmed_tokens"], code["in_window"]),
    )
    never_sent = live[~sent[live]]
    commands = np.array([bool(session.messages[i].get("_command")) for i in never_sent], bool)
    status[never_sent] = np.where(commands, code["command"], code["skipped"])
    return status


def _turn(session: Session, turn: Any) -> int:
    """``turn`` checked, or the next turn when None."""
    n_turns = session.n_user_turns
    if turn is None:
        return n_turns
    if isinstance(turn, bool) or not isinstance(turn, int | np.integer) or not 0 <= turn <= n_turns:
        raise ValueError(
            f"turn must be an integer from 0 to {n_turns} (session {session.key!r} has "
            f"{n_turns} user messages; {n_turns} is the next turn), got {turn!r}"
        )
    return int(turn)


@entry_point()
def message_states(
    source: Session | Corpus,
    key: str | None = None,
    *,
    turn: int | None = None,
    policy: str | None = None,
    settings: HistorySettings | None = None,
    max_messages: int | None = None,
    max_tokens: int | None = None,
    include_timestamps: bool | None = None,
    include_runtime_context: bool | None = None,
    extend_to_user: bool | None = None,
    last_consolidated: Offset | None = None,
    file_cap: int | None = None,
) -> MessageStates:
    """Every message of a session with its tokens and its status at ``turn``.

    Parameters
    ----------
    source, key
        A session, or a Corpus and the key of one of its sessions.
    turn
        User message whose answer is being prepared, 0 to ``n_user_turns`` (default: the
        next turn, i.e. the whole session).
    policy
        The release to replay with (default: the session's own).
    settings
        The history settings, the file cap applied before the turn included (None, or a
        field left ``None``: the release's default, see :class:`~sessionkit.HistorySettings`);
        the result carries them resolved.
    max_messages, max_tokens, include_timestamps, include_runtime_context, extend_to_user, \
last_consolidated, file_cap
        Overrides of ``settings``, one value each (None: the setting's).
    """
    session = resolve_session(source, key)
    if policy is not None and get_policy(policy).name != session.policy:
        session = dataclasses.replace(session, policy=get_policy(policy).name)
    settings = (DEFAULT_SETTINGS if settings is None else settings).replace(
        max_messages=max_messages,
        max_tokens=max_tokens,
        include_timestamps=include_timestamps,
        include_runtime_context=include_runtime_context,
        extend_to_user=extend_to_user,
        last_consolidated=last_consolidated,
        file_cap=file_cap,
    )
    release = get_policy(session.policy)
    settings = release.resolve(settings)
    resolved = _turn(session, turn)
    window = _window(session, resolved, settings)
    replayed = replay.replay(session, settings)
    roles = [shown(m.get("role")) for m in session.messages]
    is_user = np.fromiter(map(release.is_user_turn, session.messages), np.int64, len(roles))
    states = frame(
        STATES,
        {
            "idx": np.arange(len(roles)),
            "role": roles,
            "user_index": np.cumsum(is_user) - 1,
            "tokens": replay.stored_tokens(session),
            "sent_tokens": replayed.sent_tokens(),
            "status": _statuses(session, window, replayed.sent()),
        },
        categories={"status": STATUS_NAMES},
    )
    return MessageStates(
        frame=states,
        key=session.key,
        turn=resolved,
        stop=window.stop,
        settings=settings,
        cut=str(window.row["cut"]),
        messages_kept=int(window.row["messages_kept"]),
        tokens_kept=int(window.row["tokens_kept"]),
        recovered=bool(window.row["recovered"]),
        count_window=release.count_window(cast(int, settings.max_messages)),
    )
