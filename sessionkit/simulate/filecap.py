"""The file cap as data: which sessions nanobot trims at each limit, and what it archives.

After every turn nanobot 0.2.2 (and 0.3.0) calls ``enforce_file_cap(on_archive=raw_archive)``: once a
session holds more than ``limit`` messages it keeps a legal recent suffix and raw-archives
the dropped messages that were not already consolidated.  :func:`file_cap` applies that rule
(through the exact policy) to each session's final messages, or replays it turn by turn.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import pandas as pd
from tqdm.auto import tqdm

from sessionkit.nanobot.policies import Trim, get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings
from sessionkit.schema import FILE_CAP, frame

__all__ = ["FILE_CAP", "file_cap"]


_AUTO_PROGRESS_SESSIONS = 200


def _row(
    session: Session, limit: int, turn: int, at: int, before: int, n: int, trim: Trim
) -> tuple:
    return (
        session.key,
        session.policy,
        limit,
        turn,
        at,
        n,
        len(trim.dropped) > 0,
        len(trim.dropped),
        len(trim.archived),
        len(trim.retained),
        before,
        trim.last_consolidated,
    )


Cap = Callable[[list[dict[str, Any]], int, int], Trim]


def _no_cap(messages: list[dict[str, Any]], last_consolidated: int, limit: int) -> Trim:
    """A release without a file cap never trims anything."""
    return Trim(messages, [], 0, last_consolidated)


def _final(cap: Cap, session: Session, limit: int) -> list[tuple]:
    n, offset = len(session.messages), session.last_consolidated
    trim = cap(session.messages, offset, limit)
    return [_row(session, limit, session.n_user_turns, n, offset, n, trim)]


def _growth(cap: Cap, session: Session, limit: int) -> list[tuple]:
    """Grow the session turn by turn from empty, capping after each turn; one row per trim.

    Consolidation is not simulated: the offset starts (and so stays) at 0, and every dropped
    message counts as raw-archived.
    """
    messages = session.messages
    turn_of = get_policy(session.policy).is_user_turn
    users = [i for i, m in enumerate(messages) if turn_of(m)]
    ends = [i for i in users if i > 0] + [len(messages)]
    current: list[dict[str, Any]] = []
    offset = 0
    done = 0
    rows: list[tuple] = []
    for end in dict.fromkeys(ends):
        current.extend(messages[done:end])
        done = end
        trim = cap(current, offset, limit)
        if trim.dropped:
            turn = bisect.bisect_left(users, end)
            rows.append(_row(session, limit, turn, end, offset, len(current), trim))
            current, offset = trim.retained, trim.last_consolidated
    return rows


def file_cap(
    source: Session | Iterable[Session],
    limits: int | Sequence[int] | None = None,
    *,
    settings: HistorySettings = DEFAULT_SETTINGS,
    replay: Literal["final", "growth"] = "final",
    progress: bool | None = None,
) -> pd.DataFrame:
    """What ``enforce_file_cap`` does to each session at each limit (columns: :data:`FILE_CAP`).

    Each session is capped by its release's rule; 0.3.5 has no file cap, so its sessions are
    never trimmed.

    Parameters
    ----------
    source
        A Session, a Corpus or any iterable of Sessions (each is left untouched).
    limits
        One limit or several (default: ``settings.file_cap`` as each session's release
        resolves it: 2000 for 0.2.2 and 0.3.0, 0 for 0.3.5, which has no cap).
    settings
        The history settings whose ``file_cap`` is the default limit.
    replay
        ``"final"``: one row per (session, limit), the cap applied to the stored messages
        with the recorded offset.  ``"growth"``: the session rebuilt turn by turn with the
        cap applied after every turn, as nanobot's agent loop does; one row per trim.
    progress
        Show a progress bar (default: for large corpora).
    """
    if replay not in ("final", "growth"):
        raise ValueError(f"replay must be 'final' or 'growth', not {replay!r}")
    sessions = [source] if isinstance(source, Session) else list(source)
    step = _final if replay == "final" else _growth
    show = len(sessions) >= _AUTO_PROGRESS_SESSIONS if progress is None else progress
    rows: list[tuple] = []
    for session in tqdm(sessions, desc=f"file cap ({replay})", unit="session", disable=not show):
        release = get_policy(session.policy)
        cap = _no_cap if release.file_cap is None else release.file_cap
        chosen = release.resolve(settings).file_cap if limits is None else limits
        for limit in [int(x) for x in (chosen if isinstance(chosen, list | tuple) else [chosen])]:
            rows.extend(step(cap, session, limit))
    return _frame(rows, [s.key for s in sessions])


def _frame(rows: list[tuple], keys: list[str]) -> pd.DataFrame:
    """The rows as the documented frame; ``session_key`` categories are the sessions' keys."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in FILE_CAP]
    values = dict(zip([c.name for c in FILE_CAP], columns, strict=True))
    categories = list(dict.fromkeys(keys))
    code = {key: i for i, key in enumerate(categories)}
    values["session_key"] = [code[key] for key in values["session_key"]]
    releases = list(dict.fromkeys(values["policy"]))
    values["policy"] = [releases.index(name) for name in values["policy"]]
    return frame(FILE_CAP, values, categories={"session_key": categories, "policy": releases})
