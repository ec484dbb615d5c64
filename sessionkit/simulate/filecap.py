"""The file cap as data: which sessions nanobot trims at each limit, and what it archives.

After every turn nanobot 0.2.2 (and 0.3.0) calls ``enforce_file_cap(on_archive=raw_archive)``: once a
session holds more than ``limit`` messages it keeps a legal recent suffix and raw-archives
the dropped messages that were not already consolidated.  :func:`file_cap` applies that rule
(through the exact policy) to each session's final messages, or replays it turn by turn.
"""

from __future__ import annotations

import bisect
import dataclasses
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, cast

import pandas as pd
from tqdm.auto import tqdm

from sessionkit.conventions import entry_point, is_many, swept
from sessionkit.nanobot.policies import Trim, get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings, checked_setting
from sessionkit.schema import FILE_CAP, frame
from sessionkit.store.corpus import selected

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


@entry_point(limits="file_cap")
def file_cap(
    source: Session | Iterable[Session],
    key: str | None = None,
    *,
    policy: str | None = None,
    settings: HistorySettings | None = None,
    file_cap: int | None = None,
    grid: Mapping[str, Sequence[Any]] | None = None,
    replay: Literal["final", "growth"] = "final",
    progress: bool | None = None,
) -> pd.DataFrame:
    """What ``enforce_file_cap`` does to each session at each limit (columns: :data:`FILE_CAP`).

    Each session is capped by its release's rule; 0.3.5 has no file cap, so its sessions are
    never trimmed.

    Parameters
    ----------
    source, key
        A Session, a Corpus or any iterable of Sessions (each is left untouched), and one
        session of it (None: every session).
    policy
        The release whose cap to apply (default: each session's own).
    settings
        The history settings whose ``file_cap`` is the default limit (None: each release's:
        2000 for 0.2.2 and 0.3.0, 0 for 0.3.5, which has no cap).
    file_cap
        The limit, overriding ``settings`` (``limits=`` is its deprecated spelling, and a
        limit given second, ``file_cap(source, 100)``, still works with a warning).
    grid
        Limits or releases to sweep: ``{"file_cap": [500, 2000], "policy": [...]}``
        (``None`` in a list: the release's default).
    replay
        ``"final"``: one row per (session, limit), the cap applied to the stored messages
        with the recorded offset.  ``"growth"``: the session rebuilt turn by turn with the
        cap applied after every turn, as nanobot's agent loop does; one row per trim.
    progress
        Show a progress bar (default: for large corpora).
    """
    if key is not None and not isinstance(key, str):
        warnings.warn(
            "file_cap(source, limits) is deprecated; pass file_cap=<limit> or "
            "grid={'file_cap': [...]} (the second parameter is the session key)",
            DeprecationWarning,
            stacklevel=3,
        )
        if file_cap is not None or (grid and "file_cap" in grid):
            raise TypeError("file_cap() got limits second and file_cap=; pass file_cap= only")
        if is_many(key):
            grid = {**(grid or {}), "file_cap": list(key)}
        else:
            file_cap = key
        key = None
    given = swept("file_cap", grid, ("policy", "file_cap"), policy=policy, file_cap=file_cap)
    if replay not in ("final", "growth"):
        raise ValueError(f"replay must be 'final' or 'growth', not {replay!r}")
    chosen = selected(source, key)
    sessions = [chosen] if isinstance(chosen, Session) else list(chosen)
    names = [None if n is None else get_policy(n).name for n in _values(given["policy"])]
    limits = [
        None if x is None else checked_setting("file_cap", x) for x in _values(given["file_cap"])
    ]
    settings = DEFAULT_SETTINGS if settings is None else settings
    step = _final if replay == "final" else _growth
    show = len(sessions) >= _AUTO_PROGRESS_SESSIONS if progress is None else progress
    rows: list[tuple] = []
    for session in tqdm(sessions, desc=f"file cap ({replay})", unit="session", disable=not show):
        for name in names:
            subject = session
            if name is not None and name != session.policy:
                subject = dataclasses.replace(session, policy=name)
            release = get_policy(subject.policy)
            cap = _no_cap if release.file_cap is None else release.file_cap
            own = cast(int, release.resolve(settings).file_cap)  # resolved: every release has one
            for limit in limits:
                rows.extend(step(cap, subject, own if limit is None else limit))
    return _frame(rows, [s.key for s in sessions])


def _values(value: Any) -> list[Any]:
    """A swept value as the list of its values (one value, or None: a list of it)."""
    return value if isinstance(value, list) else [value]


def _frame(rows: list[tuple], keys: list[str]) -> pd.DataFrame:
    """The rows as the documented frame; ``session_key`` categories are the sessions' keys."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in FILE_CAP]
    values: dict[str, Sequence[Any]] = dict(zip([c.name for c in FILE_CAP], columns, strict=True))
    categories = list(dict.fromkeys(keys))
    code = {key: i for i, key in enumerate(categories)}
    values["session_key"] = [code[key] for key in values["session_key"]]
    releases = list(dict.fromkeys(values["policy"]))
    values["policy"] = [releases.index(name) for name in values["policy"]]
    return frame(FILE_CAP, values, categories={"session_key": categories, "policy": releases})
