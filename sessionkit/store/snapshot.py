"""A warm open without a Python object per file: when every session file of one folder is
the version its store's pack holds, the corpus's frames come straight from the pack and its
catalog (:mod:`sessionkit.store.catalog`), and its sessions are made only when first used."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pandas as pd

from sessionkit.nanobot.naming import sessions_folder
from sessionkit.nanobot.policies import kept_as
from sessionkit.nanobot.reader import Problem, named_like_session, temp_file_problems
from sessionkit.nanobot.workspace import config_dir_hint
from sessionkit.store.catalog import IDENTITY, Catalog
from sessionkit.store.counting import Method
from sessionkit.store.frames import (
    SESSION_VALUES,
    SUMS,
    Entry,
    SessionColumns,
    SessionValues,
    counted_apart,
    message_rows,
    session_rows,
    sidecar_names,
)
from sessionkit.store.index import Identity, Index, OpenPack, folders_key
from sessionkit.store.nogc import no_gc

__all__ = ["Snapshot", "open_snapshot"]

PathLike = str | Path


class Snapshot:
    """A store opened from its pack and catalog: its frames from their columns, its entries
    (and sessions) read from the pack's description when first asked for."""

    def __init__(
        self, index: Index, store: str, opened: OpenPack, catalog: Catalog, policy: str | None
    ) -> None:
        self.index = index
        self.store = store
        self.opened = opened
        self.catalog = catalog
        self.policy = policy
        """The release every session is replayed with (None: the one that wrote its file)."""
        self.keys: list[str] = catalog.column("key")
        self.leftovers: list[Problem] = []
        """The temp files interrupted saves left in the folder (listed with its sessions)."""

    def __len__(self) -> int:
        return len(self.keys)

    def _paths(self) -> list[str]:
        """Each file's path, as :func:`~sessionkit.nanobot.reader.find_session_files` names it."""
        folder = self.catalog.folder
        prefix = folder if folder.endswith(os.sep) else folder + os.sep
        return [prefix + name for name in self.catalog.column("name")]

    def _policies(self) -> list[str]:
        if self.policy is not None:
            return [self.policy] * len(self.keys)
        return self.catalog.column("policy")

    @property
    def n_messages(self) -> int:
        """How many messages the store holds."""
        return self.opened.table.num_rows

    def problems(self) -> list[Problem]:
        """The problems the store's files record, file by file."""
        found = []
        for path, kept in zip(self._paths(), self.catalog.column("problems"), strict=True):
            if kept is not None:
                found += [
                    Problem(path, line, why, skipped) for line, why, skipped in json.loads(kept)
                ]
        return found

    def messages_frame(self, tokens: Method | None, workspace: str) -> pd.DataFrame:
        """The messages frame (see :func:`~sessionkit.store.frames.messages_frame`), every
        session in ``workspace``."""
        columns = SessionColumns(
            self.catalog.table.column("n_messages").to_numpy(),
            self.keys,
            [workspace] * len(self.keys),
            self.catalog.column("last_consolidated"),
            self._policies(),
            {},
        )
        return message_rows(self.opened.table, columns, None, tokens=tokens)

    def sessions_frame(self, tokens: Method | None, workspace: str) -> pd.DataFrame:
        """The sessions frame (see :func:`~sessionkit.store.frames.sessions_frame`), every
        session in ``workspace``."""
        policies = self._policies()
        values = SessionValues(
            {name: self.catalog.column(name) for name in SESSION_VALUES},
            self._by_release("turns", [kept_as(p)[0] for p in policies]),
            self.catalog.column("last_consolidated"),
            policies,
            self.catalog.column("has_records"),
            [None] * len(policies)
            if tokens is None
            else self._by_release(SUMS[tokens], [kept_as(p)[1] for p in policies]),
        )
        paths = self._paths()
        none = [None] * len(paths) if sidecar_names(self.catalog.folder) == set() else None
        workspaces = [workspace] * len(paths)
        return session_rows(self.keys, paths, workspaces, values, checkpoints=none)

    def _by_release(self, value: str, releases: list[str | None]) -> list[Any]:
        """Each session's ``value`` (turns or a token sum) under the release it counts as
        (``releases``, one per session; None: it has no estimate)."""
        columns = {
            name: [None] * len(releases) if name is None else self.catalog.column(f"{value} {name}")
            for name in set(releases)
        }
        if len(columns) == 1:
            return columns[releases[0]]
        return [columns[name][i] for i, name in enumerate(releases)]

    def entries(self) -> list[Entry]:
        """Each file's entry, read from the pack's description."""
        folder = Path(self.catalog.folder)
        files = [
            (path, folder / name)
            for path, name in zip(self._paths(), self.catalog.column("name"), strict=True)
        ]
        identities = list(map(Identity._make, self.catalog.identities()))
        with no_gc():
            return self.index.unfolded(self.store, self.opened, files, identities)


def open_snapshot(
    index: Index,
    source: PathLike | list[PathLike] | tuple[PathLike, ...],
    config_dir: PathLike | None,
    *,
    counted: bool,
    policy: str | None,
) -> Snapshot | None:
    """The snapshot of ``source`` when it names one folder whose session files (regular
    files all, none changed) are exactly those its store's pack and catalog hold (with
    ``counted``, with exact token counts, in unique keys); else None, and the load reads
    file by file."""
    items = source if isinstance(source, list | tuple) else [source]
    if len(items) != 1 or (policy is not None and counted_apart(policy)):
        return None
    path = Path(items[0]).expanduser()
    if config_dir_hint(path) is not None or not path.is_dir():
        return None
    folder = sessions_folder(path, config_dir)
    try:
        with os.scandir(folder) as listing:
            found = [(e.name, e.is_file(follow_symlinks=False)) for e in listing]
        resolved = os.fspath(folder.resolve())
    except OSError:
        return None
    named = sorted(entry for entry in found if named_like_session(entry[0]))
    if not named or not all(regular for _, regular in named):
        return None
    store = folders_key([resolved])
    kept = index.open_store(store)
    if kept is None:
        return None
    opened, catalog = kept
    names = [name for name, _ in named]
    if catalog.folder != resolved or catalog.column("name") != names:
        return None
    if counted and not all(catalog.column("counted")):
        return None
    identities = _identities(resolved, names)
    if identities is None or not catalog.holds(identities):
        return None
    snapshot = Snapshot(index, store, opened, catalog, policy)
    if len(set(snapshot.keys)) != len(snapshot.keys):
        return None  # duplicate keys: the load records which file it skipped
    snapshot.leftovers = temp_file_problems(folder.absolute(), [name for name, _ in found])
    return snapshot


def _identities(folder: str, names: list[str]) -> list[list[int]] | None:
    """The identities of files ``names`` in ``folder``, one list per :data:`IDENTITY`
    column; None when one is gone or not a regular file (the store changed)."""
    columns: list[list[int]] = [[] for _ in IDENTITY]
    device, inode, size, mtime, ctime = columns
    descriptor = None
    try:
        if os.stat in os.supports_dir_fd:
            descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        for name in names:
            if descriptor is None:
                seen = os.stat(os.path.join(folder, name))
            else:
                seen = os.stat(name, dir_fd=descriptor)
            if not stat.S_ISREG(seen.st_mode):
                return None
            device.append(seen.st_dev)
            inode.append(seen.st_ino)
            size.append(seen.st_size)
            mtime.append(seen.st_mtime_ns)
            ctime.append(seen.st_ctime_ns)
    except OSError:
        return None
    finally:
        if descriptor is not None:
            os.close(descriptor)
    return columns
