"""Replays kept in the persistent index, so a new process replays nothing it replayed before.

Each indexed session's replays are kept per store and setting for the file version indexed
(:func:`read_replays`, :func:`write_replays`), and what is derived from a large store's
replays (the windows' stacked arrays) as named arrays (:func:`derived_home`).  Only sessions
still as indexed are served; a cache that cannot be written costs speed only.
"""

from __future__ import annotations

import os
from contextlib import suppress
from typing import cast

import numpy as np
import pyarrow as pa

from sessionkit.nanobot.session import Session
from sessionkit.simulate.replay_compute import Replay, ReplayKey
from sessionkit.store.cachedir import name_digest
from sessionkit.store.index import (
    REPLAY_COLUMNS,
    REPLAY_PER_ENTRY,
    Index,
    IndexedSession,
    Item,
)
from sessionkit.tuning import TUNING

__all__ = [
    "DerivedHome",
    "derived_home",
    "read_derived",
    "read_replays",
    "write_derived",
    "write_replays",
]

_PER_MESSAGE = tuple(c for c in REPLAY_COLUMNS if c not in REPLAY_PER_ENTRY)


def _index_name(key: ReplayKey) -> str:
    return f"{key[0]}|{key[1]!r}"


def _homes(sessions: list[Session], todo: list[int]) -> dict[tuple[Index, str], list[int]]:
    """The sessions (by position) whose replays the persistent index keeps, by index and store."""
    homes: dict[tuple[Index, str], list[int]] = {}
    for i in todo:
        session = sessions[i]
        home = session.replay_home if isinstance(session, IndexedSession) else None
        if home is not None:
            homes.setdefault(home, []).append(i)
    return homes


def read_replays(
    sessions: list[Session], keys: list[ReplayKey], todo: list[int]
) -> dict[int, Replay]:
    """Replays the persistent index keeps for indexed sessions still as indexed: each
    setting's columns read once (memory-mapped), each replay a view into them (its token
    counts widened to int64, as computed)."""
    found: dict[int, Replay] = {}
    for (index, store), members in _homes(sessions, todo).items():
        by_name: dict[str, list[int]] = {}
        for i in members:
            by_name.setdefault(_index_name(keys[i]), []).append(i)
        for name, group in by_name.items():
            columns, listed = index.read_replays(store, name)
            items = {item.path: item for item in listed}
            for i in group:
                item = items.get(os.fsdecode(sessions[i].path))  # type: ignore[arg-type]  # _homes: indexed sessions only, each from its file
                if item is None or item.identity != sessions[i].identity:  # type: ignore[attr-defined]  # _homes: IndexedSessions only
                    continue
                start, stop = item.start, item.start + item.rows
                arrays = {c: columns[c][start:stop] for c in _PER_MESSAGE}
                first = item.extra["entry_start"]
                end = first + item.extra["entries"]
                arrays |= {c: columns[c][first:end] for c in REPLAY_PER_ENTRY}
                arrays["tokens"] = arrays["tokens"].astype(np.int64, copy=False)
                found[i] = Replay(**arrays)
    return found


def write_replays(
    sessions: list[Session], keys: list[ReplayKey], computed: dict[int, Replay]
) -> None:
    """Keep computed replays of indexed sessions in the persistent index, one write per store
    and setting (all its replays' columns end to end, see :func:`_replay_columns`); a cache
    that cannot be written costs speed only."""
    for (index, store), members in _homes(sessions, list(computed)).items():
        by_name: dict[str, list[int]] = {}
        for i in members:
            by_name.setdefault(_index_name(keys[i]), []).append(i)
        for name, group in by_name.items():
            items = []
            for i in group:
                n, entries = len(computed[i].is_user), len(computed[i].kept)
                path = os.fsdecode(sessions[i].path)  # type: ignore[arg-type]  # _homes: indexed sessions only, each from its file
                identity = sessions[i].identity  # type: ignore[attr-defined]  # _homes: IndexedSessions only, identity set
                items.append(Item(path, identity, {"entries": entries}, None, 0, n))
            columns = _replay_columns([computed[i] for i in group])
            with suppress(OSError, pa.ArrowException):
                index.write_replays(store, name, items, columns)


def _replay_columns(replays: list[Replay]) -> dict[str, np.ndarray]:
    """Replays' columns end to end, in the narrowest type their values take (flags as bool,
    indices as int32, token counts as int32 where they fit): equal columns of two settings
    are equal bytes, kept once (:meth:`~sessionkit.store.index.Index.write_replays`)."""
    columns = {}
    for name in REPLAY_COLUMNS:
        values = np.concatenate([getattr(r, name) for r in replays])
        if values.dtype.kind == "b":
            columns[name] = values
        elif (
            not len(values)
            or np.iinfo(np.int32).min <= values.min() <= values.max() <= np.iinfo(np.int32).max
        ):
            columns[name] = values.astype(np.int32)
        else:
            columns[name] = values.astype(np.int64)
    return columns


DerivedHome = tuple[Index, str, str]
"""Where the index keeps a value derived from replays: the index, its name, and the stamp of
the file versions it was derived from."""


def derived_home(sessions: list[Session], key: ReplayKey, kind: str) -> DerivedHome | None:
    """Where, under which name and for which file versions the index keeps what ``kind``
    derives from these sessions' replays: only for many messages, all in indexed sessions of
    one store, still as indexed.  The name covers the files, the stamp their versions, so a
    change replaces the kept arrays instead of adding more."""
    homes = {s.replay_home if isinstance(s, IndexedSession) else None for s in sessions}
    if len(homes) != 1 or None in homes or sum(map(len, sessions)) < TUNING.persist_min_messages:
        return None
    (index, store) = cast("tuple[Index, str]", homes.pop())  # None is ruled out above
    paths = [os.fsdecode(s.path) for s in sessions]  # type: ignore[arg-type]  # one home: all indexed, each from its file
    versions = [list(s.identity) for s in sessions]  # type: ignore[attr-defined]  # one home: all IndexedSessions, identity set
    name = f"{store}-{kind}-{name_digest(repr((key, paths)))}"
    return index, name, name_digest(repr(versions))


def read_derived(home: DerivedHome) -> dict[str, np.ndarray] | None:
    """The arrays kept at ``home`` (see :func:`derived_home`); None when none are kept there."""
    index, name, stamp = home
    return index.read_arrays(name, stamp)


def write_derived(home: DerivedHome, arrays: dict[str, np.ndarray]) -> None:
    """Keep ``arrays`` at ``home``, replacing what an older version kept there; a cache that
    cannot be written costs speed only."""
    index, name, stamp = home
    with suppress(OSError, pa.ArrowException):
        index.write_arrays(name, stamp, arrays)
