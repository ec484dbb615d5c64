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
from sessionkit.store.index import REPLAY_TABLE, Index, IndexedSession, Item
from sessionkit.tuning import TUNING

__all__ = [
    "DerivedHome",
    "derived_home",
    "read_derived",
    "read_replays",
    "write_derived",
    "write_replays",
]

_PER_MESSAGE = ("is_user", "delivery", "command", "checkpoint", "turn", "declared")
_PER_ENTRY = ("kept", "entry_declared", "tokens")


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
    """Replays the persistent index keeps for indexed sessions still as indexed: each pack's
    columns read once, each replay a view into them."""
    found: dict[int, Replay] = {}
    for (index, store), members in _homes(sessions, todo).items():
        by_name: dict[str, list[int]] = {}
        for i in members:
            by_name.setdefault(_index_name(keys[i]), []).append(i)
        for name, group in by_name.items():
            table, items = index.read_replays(store, name)
            columns = {c: table.column(c).to_numpy() for c in (*_PER_MESSAGE, *_PER_ENTRY)}
            for i in group:
                item = items.get(os.fsdecode(sessions[i].path))  # type: ignore[arg-type]  # _homes: indexed sessions only, each from its file
                if item is None or item.identity != sessions[i].identity:  # type: ignore[attr-defined]  # _homes: IndexedSessions only
                    continue
                start, stop = item.start, item.start + item.n_rows
                arrays = {c: columns[c][start:stop] for c in _PER_MESSAGE}
                end = start + item.extra["entries"]
                arrays |= {c: columns[c][start:end] for c in _PER_ENTRY}
                found[i] = Replay(**arrays)
    return found


def write_replays(
    sessions: list[Session], keys: list[ReplayKey], computed: dict[int, Replay]
) -> None:
    """Keep computed replays of indexed sessions in the persistent index, one write per store
    and setting (all its replays joined into one table); a cache that cannot be written
    costs speed only."""
    for (index, store), members in _homes(sessions, list(computed)).items():
        by_name: dict[str, list[int]] = {}
        for i in members:
            by_name.setdefault(_index_name(keys[i]), []).append(i)
        for name, group in by_name.items():
            table = _replay_table([computed[i] for i in group])
            items, start = [], 0
            for i in group:
                n, entries = len(computed[i].is_user), len(computed[i].kept)
                path = os.fsdecode(sessions[i].path)  # type: ignore[arg-type]  # _homes: indexed sessions only, each from its file
                identity = sessions[i].identity  # type: ignore[attr-defined]  # _homes: IndexedSessions only, identity set
                items.append(Item(path, identity, {"entries": entries}, None, start, n, table))
                start += n
            with suppress(OSError, pa.ArrowException):
                index.write_replays(store, name, items)


def _replay_table(replays: list[Replay]) -> pa.Table:
    """Replays end to end as :data:`REPLAY_TABLE` rows: each one's per-message columns, and
    its per-entry ones padded with zeros to its message count."""
    sizes = [len(r.is_user) for r in replays]
    starts = np.cumsum([0, *sizes])
    columns = {}
    for column in REPLAY_TABLE:
        dtype = column.type.to_pandas_dtype()
        if column.name in _PER_MESSAGE:
            parts = [getattr(r, column.name) for r in replays]
            columns[column.name] = np.concatenate([*parts, np.zeros(0, dtype)]).astype(
                dtype, copy=False
            )
            continue
        values = np.zeros(int(starts[-1]), dtype=dtype)
        for r, start in zip(replays, starts.tolist(), strict=False):
            part = getattr(r, column.name)
            values[start : start + len(part)] = part
        columns[column.name] = values
    return pa.table(columns, schema=REPLAY_TABLE)


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
