"""The persistent index: each session file's :class:`~sessionkit.store.frames.Entry` kept in a cache
folder, so opening a store again reads only what changed.

Entries are Arrow IPC files, memory-mapped on open (strings used in place): a store's pack
holds every file's entry, and a file changed since that pack was written has a small pack of
its own, until the store's pack is rewritten.  A pack of one folder's files has a catalog
beside it (:mod:`sessionkit.store.catalog`: its files and their sessions' values as columns,
bound to the pack by its checksum), so a warm open of that folder checks and serves it
without an object per file (:mod:`sessionkit.store.snapshot`).  Each entry is valid only for
its file's identity (device, inode, size, mtime_ns, ctime_ns): a new, grown, replaced or
edited file no longer matches and is read again; an edit that keeps size and mtime still
changes ctime.  A
file changed within :attr:`~sessionkit.tuning.Tuning.racy_ns` of being read is not indexed (a later change could keep
every timestamp), so it is simply read next time.  Replays (:mod:`sessionkit.simulate.replay`) are
kept per store and setting under the same identities, and what windows derive from a large
store's replays under a stamp of them; both name their columns by digest, each distinct one
kept once per store.  Writes are atomic (:func:`~sessionkit.store.cachedir.write_ipc`)
and sealed with a checksum that is checked before pyarrow reads a byte
(:mod:`sessionkit.store.integrity`); anything damaged is removed with a warning and rebuilt,
anything of another format or for another identity is never trusted.  Entries and replays
of files that are gone or changed are dropped when the store is next indexed, and temp files
of writers that died are swept.  The cache folder is ``$SESSIONKIT_CACHE_DIR``, else the
platform's user cache folder, and never a workspace.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass, fields
from datetime import datetime
from functools import cached_property, partial
from pathlib import Path
from typing import Any, NamedTuple, cast

import numpy as np
import orjson
import pyarrow as pa
import xxhash

from sessionkit.nanobot.jsontext import dumps_exact, loads_exact
from sessionkit.nanobot.naming import SessionPathError
from sessionkit.nanobot.reader import read_session_file
from sessionkit.nanobot.session import Session
from sessionkit.store.cachedir import (
    default_cache_dir,
    name_digest,
    remove_dead_temp_files,
    write_ipc,
)
from sessionkit.store.catalog import Catalog, catalog_of, read_catalog, write_catalog
from sessionkit.store.frames import MESSAGE_TABLE, Entry
from sessionkit.store.integrity import (
    IntegrityError,
    discard,
    open_sealed_checked_or_none,
    read_sealed_checked,
)
from sessionkit.store.versions import content_digest
from sessionkit.tuning import TUNING

__all__ = [
    "FORMAT",
    "REPLAY_COLUMNS",
    "REPLAY_PER_ENTRY",
    "Identity",
    "Index",
    "IndexedSession",
    "Item",
    "OpenPack",
    "Served",
    "SessionChangedError",
    "default_cache_dir",
    "file_identity",
    "folders_key",
    "store_key",
]

FORMAT = 8
"""The layout of entries; entries of another format (or sessionkit version) are not read."""
_KEY = b"sessionkit"


class Identity(NamedTuple):
    """What tells one version of a file from another without reading it (a tuple: made and
    compared per file on every open)."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    def racy(self, now_ns: int) -> bool:
        """Whether the file changed too recently (see :attr:`~sessionkit.tuning.Tuning.racy_ns`) to index it."""
        return now_ns - max(self.mtime_ns, self.ctime_ns) < TUNING.racy_ns


def file_identity(path: Path) -> Identity | None:
    """The identity of a regular file (following links), else None."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(found.st_mode):
        return None
    return Identity(found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)


class SessionChangedError(SessionPathError):
    """A session's file changed after it was loaded, so its messages no longer match the frames."""


def store_key(files: list[Path]) -> str:
    """The key of the store ``files`` form: their folders (a pack is kept per store).  The
    files are absolute, so each folder is its path's ``dirname``, without a Path made (and
    only the few folders encoded)."""
    return folders_key({os.path.dirname(os.fspath(f)) for f in files})


def folders_key(folders: Iterable[str]) -> str:
    """The key of the store of the files in ``folders`` (absolute paths, symlinks resolved)."""
    return name_digest(b"\0".join(sorted(map(os.fsencode, folders))))


class Item(NamedTuple):
    """One file's part of a pack: its path, the identity it is valid for, its values
    (``extra``), its rows (``own``, or rows ``start`` .. ``start + rows`` of the pack's
    table ``whole``, sliced only when asked for: a slice costs more than the rest of
    reading an item back).  A tuple: a pack of many small files makes one per file."""

    path: str
    identity: Identity
    extra: dict[str, Any]
    own: pa.Table | None = None
    start: int = 0
    rows: int = 0
    whole: pa.Table | None = None

    @property
    def table(self) -> pa.Table:
        """The item's rows."""
        if self.own is not None:
            return self.own
        return cast("pa.Table", self.whole).slice(self.start, self.rows)  # no own rows: a whole

    @property
    def n_rows(self) -> int:
        """How many rows the item holds."""
        return self.own.num_rows if self.own is not None else self.rows


def _write_pack(target: Path, items: list[Item], schema: pa.Schema) -> int:
    """Write items as one Arrow IPC file (their rows in turn, small items joined into shared
    record batches by :func:`_batches`), atomically.  The items are described by one JSON
    text (:func:`_description`) in the custom metadata of a last, empty batch: written once
    (a schema's metadata is written twice, at the file's start and in its footer).  Returns
    the pack's checksum."""
    described = pa.RecordBatch.from_pylist([], schema=schema)
    parts = _batches(_spans(items))
    return write_ipc(target, schema, parts, last=(described, {_KEY: _description(items)}))


def _spans(items: list[Item]) -> Iterator[pa.Table]:
    """The items' rows in order, each run of items that are adjacent spans of one table
    sliced once (a load's entries share their run's table)."""
    whole, start, stop = None, 0, 0
    for item in items:
        if item.own is None and item.whole is whole and item.start == stop:
            stop += item.rows
            continue
        if whole is not None:
            yield whole.slice(start, stop - start)
        if item.own is not None:
            whole = None
            yield item.own
        else:
            whole, start, stop = item.whole, item.start, item.start + item.rows
    if whole is not None:
        yield whole.slice(start, stop - start)


_FILE_VALUES = ("metadata", "records")
"""The values of an item that hold what a session file wrote (any JSON, NaN included);
sessionkit computes the others, which hold no floats."""


def _description(items: list[Item]) -> str:
    """The JSON text describing a pack's items as parallel lists (paths, identities, row
    counts, values), read back in one parse.  Written by orjson where it is exact (no NaN
    or infinity, which it would write as null; no integer past 64 bits, lone surrogate or
    key that is not a string, which it refuses), else by one ``json.dumps``, else by
    :func:`~sessionkit.nanobot.jsontext.dumps_exact`: a session's metadata holding an
    integer past Python's int-string limit, or nested deep, is kept as it is.  An item's
    values leave out its path, which the paths list holds (:func:`_lean`)."""
    described = {
        "format": FORMAT,
        "paths": [item.path for item in items],
        "identities": [list(item.identity) for item in items],
        "rows": [item.n_rows for item in items],
        "extras": [_lean(item) for item in items],
    }
    if all(_finite(item.extra.get(name)) for item in items for name in _FILE_VALUES):
        with suppress(TypeError, RecursionError):  # orjson.JSONEncodeError is a TypeError
            return orjson.dumps(described).decode()
    try:
        return json.dumps(described)
    except (ValueError, RecursionError):
        return dumps_exact(described)


def _finite(value: Any) -> bool:
    """Whether a JSON value holds no NaN or infinite float."""
    if not value:
        return True
    stack = [value]
    while stack:
        found = stack.pop()
        kind = type(found)
        if kind is dict:
            stack.extend(found.values())
        elif kind is list:
            stack.extend(found)
        elif kind is float and not math.isfinite(found):
            return False
    return True


def _lean(item: Item) -> dict[str, Any]:
    """An item's values as described: an entry's own ``path`` (its item's) left out."""
    if item.extra.get("path") != item.path:
        return item.extra
    return {k: v for k, v in item.extra.items() if k != "path"}


BATCH_ROWS = 1 << 12
"""Rows from which items' rows are written as record batches of their own; smaller items
share batches of about this many rows, so a pack's batches (and the work per batch to
write, read and slice them) grow with its rows, not with its files, and joining them copies
at most this many rows at a time."""


def _batches(tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
    """The rows of ``tables`` in order: a table of at least :data:`BATCH_ROWS` rows as it
    is, runs of smaller ones joined into one batch each."""
    group: list[pa.Table] = []
    rows = 0
    for table in tables:
        if table.num_rows >= BATCH_ROWS:
            yield from _joined(group)
            group, rows = [], 0
            yield table
            continue
        group.append(table)
        rows += table.num_rows
        if rows >= BATCH_ROWS:
            yield from _joined(group)
            group, rows = [], 0
    yield from _joined(group)


def _joined(tables: list[pa.Table]) -> Iterator[pa.Table]:
    """``tables`` as one table of one chunk per column (nothing for no tables)."""
    if tables:
        yield pa.concat_tables(tables).combine_chunks()


def _read_pack(path: Path, schema: pa.Schema) -> tuple[pa.Table, dict[str, Item]]:
    """A pack's whole table (memory-mapped) and its items by path; nothing when it is
    missing or of another format.  A pack that fails its seal or whose description does
    not match its table (:func:`_items`) is removed with a warning (:func:`discard`)."""
    table, items, _ = _read_pack_checked(path, schema)
    return table, items


def _read_pack_checked(
    path: Path, schema: pa.Schema
) -> tuple[pa.Table, dict[str, Item], int | None]:
    """:func:`_read_pack` and the pack's checksum (None: no pack read)."""
    nothing: tuple[pa.Table, dict[str, Item], int | None] = (schema.empty_table(), {}, None)
    opened = _open_pack(path, schema)
    if opened is None:
        return nothing
    try:
        found = loads_exact(opened.description)
        if found["format"] != FORMAT:
            return nothing
        return opened.table, _items(found, opened.table), opened.checksum
    except (IntegrityError, KeyError, TypeError, ValueError, RecursionError) as exc:
        discard(path, exc, opened.inode)
        return nothing


class OpenPack(NamedTuple):
    """A pack opened and checked, its description not yet parsed: its whole table
    (memory-mapped), the description's JSON text, the file's inode and its checksum."""

    table: pa.Table
    description: bytes
    inode: int
    checksum: int


def _open_pack(path: Path, schema: pa.Schema) -> OpenPack | None:
    """A pack's table and description, once its seal and schema check out; None when it is
    missing, and when it is damaged (removed with a warning, :func:`discard`)."""
    sealed = open_sealed_checked_or_none(path)
    if sealed is None:
        return None
    body, inode, checksum = sealed
    try:
        reader = pa.ipc.open_file(body)
        count = reader.num_record_batches
        if count == 0:
            raise IntegrityError("no description")
        last, metadata = reader.get_batch_with_custom_metadata(count - 1)
        if reader.schema.remove_metadata() != schema or last.num_rows:
            raise IntegrityError("another schema")
        table = pa.Table.from_batches([reader.get_batch(i) for i in range(count - 1)], schema)
        return OpenPack(table, metadata[_KEY], inode, checksum)
    except (IntegrityError, pa.ArrowException, OSError, KeyError, TypeError, ValueError) as exc:
        discard(path, exc, inode)
        return None


_INT = {int}


def _items(described: dict[str, Any], table: pa.Table) -> dict[str, Item]:
    """A pack's items from its description, checked against its table: paths are strings,
    identities five integers, values JSON objects, row counts non-negative and adding up
    to the table's (a pack whose description disagrees is damaged: raises IntegrityError).
    Each item's rows are a span of the table, sliced only when used (:class:`Item`)."""
    paths, identities = described["paths"], described["identities"]
    rows, extras = described["rows"], described["extras"]
    if not len(paths) == len(identities) == len(rows) == len(extras):
        raise IntegrityError("a description whose lists disagree in length")
    items, start = {}, 0
    for path, identity, n, extra in zip(paths, identities, rows, extras, strict=True):
        if type(n) is not int or n < 0 or type(path) is not str or type(extra) is not dict:
            raise IntegrityError("an item with a bad path, row count or values")
        if type(identity) is not list or len(identity) != 5 or set(map(type, identity)) != _INT:
            raise IntegrityError("an item with a bad file identity")
        items[path] = Item(path, Identity._make(identity), extra, None, start, n, table)
        start += n
    if start != table.num_rows:
        raise IntegrityError(f"items hold {start} rows, the table {table.num_rows}")
    return items


class Served(NamedTuple):
    """What :meth:`Index.read_entries` found: each file's entry or None, how many came from
    the store's pack, how many of its items are stale, and the pack's items by path and
    checksum (None: no pack)."""

    found: list[Entry | None]
    from_pack: int
    stale: int
    pack: dict[str, Item]
    checksum: int | None


@dataclass(frozen=True)
class Index:
    """The entries kept under one cache folder (one sub-folder per format and version): a
    pack per store, and one small pack per file changed since its store's pack was written."""

    root: Path

    @cached_property
    def folder(self) -> Path:
        """Where this format and sessionkit version keep their entries."""
        from sessionkit import __version__

        return self.root / f"index-{FORMAT}-{__version__}"

    def _pack_path(self, kind: str, name: str) -> Path:
        return self.folder / kind / f"{name}.arrow"

    def _own_path(self, store: str, file: Path | str) -> Path:
        """The small pack of one file of ``store`` changed since the store's pack was written."""
        return self.folder / "files" / _own_name(store, file)

    def _own_names(self, store: str) -> set[str]:
        """The names of the own packs ``store`` has (one listing of the folder, so a file
        without one costs no attempt to open it)."""
        prefix = f"{store}-"
        try:
            found = os.scandir(self.folder / "files")
        except OSError:
            return set()
        with found:
            return {
                e.name for e in found if e.name.startswith(prefix) and e.name.endswith(".arrow")
            }

    def read_entries(
        self,
        store: str,
        files: list[Path],
        identities: list[Identity | None],
        *,
        counted: bool = False,
    ) -> Served:
        """Each file's entry valid for its identity (None: none; with ``counted``, also
        when its exact token counts were not made), how many came from the store's pack,
        how many of that pack's items are for files gone or changed, and the pack."""
        pack_path = self._pack_path("stores", store)
        _, pack, checksum = _read_pack_checked(pack_path, MESSAGE_TABLE)
        own = self._own_names(store)
        found: list[Entry | None] = []
        from_pack = 0
        for file, identity in zip(files, identities, strict=True):
            key = os.fsdecode(file)
            item = pack.get(key)
            in_pack = item is not None and identity is not None and item.identity == identity
            source = pack_path
            if not in_pack and identity is not None:
                item = None
                if own and (name := _own_name(store, key)) in own:
                    source = self.folder / "files" / name
                    item = _read_pack(source, MESSAGE_TABLE)[1].get(key)
            if item is None or identity is None or item.identity != identity:
                found.append(None)
                continue
            if counted and item.extra.get("counted") is not True:
                found.append(None)
                continue
            try:
                found.append(_entry(item, file, identity, self, store))
            except (IntegrityError, KeyError, TypeError, ValueError) as exc:
                discard(source, exc)
                found.append(None)
                continue
            from_pack += in_pack
        return Served(found, from_pack, _stale(pack, files, from_pack), pack, checksum)

    def write_entries(
        self, store: str, entries: list[tuple[Entry, Identity]], *, whole: bool
    ) -> None:
        """Keep entries at their identities: ``whole`` as the store's new pack (dropping
        those files' own packs), else each in its file's own pack."""
        items = [_item(entry, identity) for entry, identity in entries]
        if whole:
            checksum = _write_pack(self._pack_path("stores", store), items, MESSAGE_TABLE)
            self._write_catalog(store, items, checksum)
            own = self._own_names(store)  # listed once: most files have none
            if own:
                for name in own & {_own_name(store, item.path) for item in items}:
                    (self.folder / "files" / name).unlink(missing_ok=True)
            return
        for item in items:
            _write_pack(self._own_path(store, item.path), [item], MESSAGE_TABLE)

    def keep_catalog(self, store: str, served: Served) -> None:
        """Write the catalog of a store's pack that has none (it was written by a load
        that could not, or its catalog was lost) once a load served every file from it."""
        if served.checksum is None:
            return
        path = self._pack_path("catalogs", store)
        rows = sum(item.n_rows for item in served.pack.values())
        if read_catalog(path, served.checksum, rows, FORMAT) is None:
            self._write_catalog(store, list(served.pack.values()), served.checksum)

    def _write_catalog(self, store: str, items: list[Item], checksum: int) -> None:
        """Keep the catalog of the store's new pack (of ``checksum``), or drop the old one
        when the store has none (see :func:`~sessionkit.store.catalog.catalog_of`)."""
        target = self._pack_path("catalogs", store)
        paths = [item.path for item in items]
        table = catalog_of(paths, [item.extra for item in items], [i.identity for i in items])
        if table is None:
            target.unlink(missing_ok=True)
            return
        write_catalog(target, table, os.path.dirname(paths[0]), checksum, FORMAT)

    def open_store(self, store: str) -> tuple[OpenPack, Catalog] | None:
        """The store's pack, opened and checked but its description not parsed, and its
        catalog; None when either is missing, damaged or not of this pack."""
        opened = _open_pack(self._pack_path("stores", store), MESSAGE_TABLE)
        if opened is None:
            return None
        path = self._pack_path("catalogs", store)
        found = read_catalog(path, opened.checksum, opened.table.num_rows, FORMAT)
        return None if found is None else (opened, found)

    def unfolded(
        self,
        store: str,
        opened: OpenPack,
        files: list[tuple[str, Path]],
        identities: list[Identity],
    ) -> list[Entry]:
        """The entries of a pack opened by :meth:`open_store` for ``files`` (each path as
        text and as a Path) at ``identities`` (its catalog's), read from its description;
        IntegrityError when that disagrees with them."""
        pack_path = self._pack_path("stores", store)
        try:
            found = loads_exact(opened.description)
            if found["format"] != FORMAT:
                raise IntegrityError("another format than its catalog's")
            items = _items(found, opened.table)
            if len(items) != len(files):
                raise IntegrityError("another file count than its catalog's")
            entries = []
            for (named, file), identity in zip(files, identities, strict=True):
                item = items[named]
                if item.identity != identity:
                    raise IntegrityError("another identity than its catalog's")
                entries.append(_entry(item, file, identity, self, store))
        except (IntegrityError, KeyError, TypeError, ValueError, RecursionError) as exc:
            discard(pack_path, exc, opened.inode)
            raise IntegrityError(
                f"the index of {os.path.dirname(files[0][0])} disagrees with its catalog "
                f"({exc}); it was removed: load the store again"
            ) from exc
        return entries

    def forget_gone(self, store: str, files: list[Path]) -> int:
        """Remove the store's own packs of files that are gone or changed: any not named
        for one of ``files`` whose entries no longer match their files (another load of
        the same folders may have left valid ones).  Returns how many were removed."""
        folder = self.folder / "files"
        names = self._own_names(store)
        if not names:
            return 0
        wanted = {_own_name(store, f) for f in files}
        removed = 0
        for name in sorted(names - wanted):
            _, items = _read_pack(folder / name, MESSAGE_TABLE)
            if items and all(file_identity(Path(i.path)) == i.identity for i in items.values()):
                continue
            (folder / name).unlink(missing_ok=True)
            removed += 1
        return removed

    def sweep(self) -> int:
        """Remove temp files that writers which died mid-write left in the index (see
        :func:`~sessionkit.store.cachedir.remove_dead_temp_files`); returns how many."""
        kinds = ("stores", "catalogs", "files", "replays", "derived")
        return sum(remove_dead_temp_files(self.folder / kind) for kind in kinds)

    def read_replays(self, store: str, name: str) -> tuple[dict[str, np.ndarray], list[Item]]:
        """The replays kept for a store under ``name`` (a policy and entry setting): their
        columns end to end (memory-mapped, read-only; per-message columns over the items'
        ``start``/``rows``, per-entry ones over their ``extra`` ``entry_start``/``entries``)
        and each file's item; nothing when none are kept, when they are of an older layout
        (replayed again, silently) or when a column they name is gone."""
        nothing: tuple[dict[str, np.ndarray], list[Item]] = ({}, [])
        found = read_sealed_checked(self._replay_path(store, name), _replay_description)
        if found is None:
            return nothing
        columns = self._shared_arrays(store, found)
        if columns is None:
            return nothing
        items = _replay_items(columns, self._replay_path(store, name))
        return (columns, items) if items is not None else nothing

    def write_replays(
        self, store: str, name: str, items: list[Item], columns: dict[str, np.ndarray]
    ) -> None:
        """Add replays to the store's under ``name`` (``items`` over ``columns`` as
        :meth:`read_replays` gives them), replacing those of the same files and dropping
        those of files gone or changed since they were replayed.  Each column is kept once
        per store by the digest of its bytes (the replays of settings that replay alike
        share theirs, and the window stacks derived from them), as derived arrays are."""
        kept_columns, kept_items = self.read_replays(store, name)
        new = {item.path for item in items}
        kept_items = [
            i for i in kept_items if i.path not in new and file_identity(Path(i.path)) == i.identity
        ]
        joined = _joined_replays(kept_columns, kept_items, columns, items)
        target = self._replay_path(store, name)
        self._keep_shared(target, store, {"name": name}, joined[0] | _replay_lists(joined[1]))
        self._forget_arrays(store)

    def read_arrays(self, name: str, stamp: str) -> dict[str, np.ndarray] | None:
        """Arrays kept under ``name`` for ``stamp`` (the versions of what they were derived
        from), memory-mapped and read-only; None when there are none for that stamp, or
        when an array they name is gone (a concurrent write removed it: derived again).  A
        damaged file is removed with a warning (:func:`discard`)."""

        def checked(table: pa.Table) -> list[list[str]] | None:
            found = json.loads(table.schema.metadata[_KEY])
            if found["format"] != FORMAT or [found["name"], found["stamp"]] != [name, stamp]:
                return None
            shared = found.get("shared")  # None: written before arrays were shared
            if shared is not None and not all(
                isinstance(row, list) and len(row) == 3 and all(type(v) is str for v in row)
                for row in shared
            ):
                raise IntegrityError("arrays named wrongly")
            return cast("list[list[str]] | None", shared)

        described = read_sealed_checked(self._derived_path(name), checked)
        if described is None:
            return None
        return self._shared_arrays(name.partition("-")[0], described)

    def write_arrays(self, name: str, stamp: str, arrays: dict[str, np.ndarray]) -> None:
        """Keep numpy arrays under ``name`` for ``stamp``, replacing any kept before; a
        store keeps its :data:`DERIVED_KEPT` latest (older ones are for sets of files or
        versions no longer asked for).  Each distinct array is kept once per store, by
        the digest of its bytes, whichever values hold it (the stacks of releases that
        replay alike share most of theirs), and removed once no kept value names it."""
        store = name.partition("-")[0]
        target = self._derived_path(name)
        self._keep_shared(target, store, {"name": name, "stamp": stamp}, arrays)
        prefix = target.name.partition("-")[0] + "-"
        kept = [e for e in os.scandir(target.parent) if e.name.startswith(prefix)]
        kept.sort(key=lambda e: e.stat().st_mtime_ns, reverse=True)
        for old in kept[DERIVED_KEPT:]:
            Path(old.path).unlink(missing_ok=True)
        self._forget_arrays(store)

    def _keep_shared(
        self, target: Path, store: str, values: dict[str, Any], arrays: dict[str, np.ndarray]
    ) -> None:
        """Write ``target``: ``values`` and the digests of ``arrays``, each array kept in a
        file of its own named by its digest unless the store keeps it already."""
        described = []
        for key, array in arrays.items():
            data = np.ascontiguousarray(array)
            digest = _array_digest(data)
            path = self._array_path(store, digest)
            if not path.exists():
                _write_array(path, data, digest)
            described.append([key, data.dtype.str, digest])
        metadata = {"format": FORMAT, **values, "shared": described}
        schema = pa.schema([("data", pa.large_binary())], metadata={_KEY: json.dumps(metadata)})
        write_ipc(target, schema, [])

    def _shared_arrays(self, store: str, shared: list[list[str]]) -> dict[str, np.ndarray] | None:
        """The store's kept arrays ``shared`` names (key, dtype, digest), memory-mapped and
        read-only; None when one is gone (a concurrent write removed it) or unreadable."""
        opened: dict[str, pa.Buffer] = {}
        arrays: dict[str, np.ndarray] = {}
        for key, dtype, digest in shared:
            if digest not in opened:
                path = self._array_path(store, digest)
                found = read_sealed_checked(path, partial(_array_bytes, digest=digest))
                if found is None:
                    return None
                opened[digest] = found
            try:
                arrays[key] = np.frombuffer(opened[digest], dtype=dtype)
            except (TypeError, ValueError):  # a crafted file: derived again
                return None
            arrays[key].flags.writeable = False  # the cache's own bytes, mapped
        return arrays

    def _forget_arrays(self, store: str) -> None:
        """Remove the store's kept arrays that none of its derived values or replays names."""
        named: set[str] = set()
        for kind in ("derived", "replays"):
            with suppress(OSError), os.scandir(self.folder / kind) as found:
                for entry in found:
                    if entry.name.startswith(f"{store}-"):
                        digests = read_sealed_checked(Path(entry.path), _named_digests)
                        named.update(digests or ())
        for entry in os.scandir(self.folder / "derived"):
            store_part, marked, rest = entry.name.partition(_ARRAY_MARK)
            if marked and store_part == store and rest.removesuffix(".arrow") not in named:
                Path(entry.path).unlink(missing_ok=True)

    def _array_path(self, store: str, digest: str) -> Path:
        """One kept array's file: named for its store and the digest of its bytes."""
        return self._pack_path("derived", f"{store}{_ARRAY_MARK}{digest}")

    def _derived_path(self, name: str) -> Path:
        """Derived arrays' file: named for their store (the part of ``name`` before its first
        ``-``), so a store's files can be counted, and a digest of ``name``."""
        return self._pack_path("derived", f"{name.partition('-')[0]}-{name_digest(name.encode())}")

    def _replay_path(self, store: str, name: str) -> Path:
        return self._pack_path("replays", f"{store}-{name_digest(name.encode())}")


def _item(entry: Entry, identity: Identity) -> Item:
    """An entry as a pack's item: its span of a shared table where it has one."""
    if entry.span is None:
        return Item(entry.meta["path"], identity, entry.meta, entry.table)
    whole, start = entry.span
    return Item(
        entry.meta["path"], identity, entry.meta, None, start, entry.meta["n_messages"], whole
    )


def _own_name(store: str, file: Path | str) -> str:
    """The file name of the own pack of ``file`` of ``store`` (see :meth:`Index._own_path`)."""
    return f"{store}-{name_digest(os.fsencode(file))}.arrow"


def _stale(pack: dict[str, Item], files: list[Path], from_pack: int) -> int:
    """How many of a store pack's items are for files gone or changed, when this load holds
    every file the pack still serves (else 0: rewriting the pack from this load would drop
    the entries of files it did not name, such as the rest of a folder when one file of it
    is loaded)."""
    named = {os.fsdecode(f) for f in files}
    outside = [item for path, item in pack.items() if path not in named]
    if any(file_identity(Path(item.path)) == item.identity for item in outside):
        return 0
    return len(pack) - from_pack


DERIVED_KEPT = 8
"""Derived array files kept per store (the latest written)."""
_ARRAY_MARK = "="
"""What names a kept array's file in ``derived`` (``<store>=<digest>``), apart from the
values' files (``<store>-<digest of name>``)."""


def _array_digest(values: np.ndarray) -> str:
    """The digest a kept array is named by: of its dtype and bytes (32 hex digits of XXH3-128,
    tens of times faster than BLAKE2b over a first grid's replays and stacks)."""
    digest = xxhash.xxh3_128(values.dtype.str.encode())
    digest.update(values.view(np.uint8).data if values.size else b"")
    return digest.hexdigest()


def _write_array(target: Path, values: np.ndarray, digest: str) -> None:
    """One array's bytes as a sealed file of one binary value (its digest in the file's
    description), written without a copy."""
    data = pa.py_buffer(values)
    offsets = pa.py_buffer(np.array([0, data.size], dtype=np.int64))
    column = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 1, [None, offsets, data])
    table = pa.table({"data": column})
    described = json.dumps({"format": FORMAT, "digest": digest})
    write_ipc(target, table.schema.with_metadata({_KEY: described}), [table])


def _array_bytes(table: pa.Table, digest: str) -> pa.Buffer:
    """The bytes of the kept array named ``digest`` (IntegrityError when the file holds
    another shape, or names another array: another file's bytes)."""
    found = json.loads(table.schema.metadata[_KEY])
    if found != {"format": FORMAT, "digest": digest}:
        raise IntegrityError("another array")
    if table.column_names != ["data"] or table.num_rows != 1:
        raise IntegrityError("not one array")
    chunk = next(c for c in table.column("data").chunks if len(c))
    return cast("pa.Buffer", chunk[0].as_buffer())


def _named_digests(table: pa.Table) -> list[str] | None:
    """The digests of the arrays a values' or replays' file names (None: another format or
    layout)."""
    found = json.loads((table.schema.metadata or {}).get(_KEY, b"{}"))
    if found.get("format") != FORMAT:
        return None
    return [digest for _, _, digest in found.get("shared", ())]


REPLAY_PER_ENTRY = ("kept", "entry_declared", "tokens")
"""The replay columns with a row per replayed entry; the others have one per message."""
REPLAY_COLUMNS = (
    "is_user",
    "delivery",
    "command",
    "checkpoint",
    "turn",
    "declared",
    *REPLAY_PER_ENTRY,
)
"""Every column of a kept replay."""
_REPLAY_LISTS = ("items", "entries")
"""The arrays that describe a replays' file's items (:func:`_replay_lists`)."""


def _replay_description(table: pa.Table) -> list[list[str]] | None:
    """The arrays a replays' file names (None: another format, or the layout before
    replays' columns were kept apart, whose file holds them: replayed again)."""
    found = json.loads((table.schema.metadata or {}).get(_KEY, b"{}"))
    if found.get("format") != FORMAT or "shared" not in found:
        return None
    shared = found["shared"]
    if type(shared) is not list or not all(
        type(row) is list and len(row) == 3 and all(type(v) is str for v in row) for row in shared
    ):
        raise IntegrityError("arrays named wrongly")
    names = [row[0] for row in shared]
    if sorted(names) != sorted([*_REPLAY_LISTS, *REPLAY_COLUMNS]):
        raise IntegrityError("other arrays than a replay's")
    return cast("list[list[str]]", shared)


def _replay_items(columns: dict[str, np.ndarray], path: Path) -> list[Item] | None:
    """The items a replays' file lists (:func:`_replay_lists`, taken out of ``columns``),
    checked against its columns (None: they disagree, the file removed with a warning)."""
    try:
        listed = orjson.loads(columns.pop("items").tobytes())
        lists = [listed["paths"], listed["identities"], listed["rows"]]
        lists.append(columns.pop("entries").tolist())
        if len({len(values) for values in lists}) != 1:
            raise IntegrityError("a description whose lists disagree in length")
        items, start, entry_start = [], 0, 0
        for path_text, identity, n, entries in zip(*lists, strict=True):
            if type(path_text) is not str or type(n) is not int or type(entries) is not int:
                raise IntegrityError("an item with a bad path or row count")
            if n < 0 or not 0 <= entries <= n:
                raise IntegrityError("an item with a bad row count")
            if type(identity) is not list or len(identity) != 5 or set(map(type, identity)) != _INT:
                raise IntegrityError("an item with a bad file identity")
            extra = {"entries": entries, "entry_start": entry_start}
            items.append(Item(path_text, Identity._make(identity), extra, None, start, n))
            start, entry_start = start + n, entry_start + entries
        for name, values in columns.items():
            if len(values) != (entry_start if name in REPLAY_PER_ENTRY else start):
                raise IntegrityError(f"a column {name} of another length than its items")
    except (IntegrityError, KeyError, TypeError, orjson.JSONDecodeError) as exc:
        discard(path, exc)
        return None
    return items


def _joined_replays(
    kept: dict[str, np.ndarray],
    kept_items: list[Item],
    columns: dict[str, np.ndarray],
    items: list[Item],
) -> tuple[dict[str, np.ndarray], list[Item]]:
    """The kept items' spans of ``kept`` followed by ``columns`` (all of ``items``), as
    columns end to end and their items (``extra``: ``entries`` and ``entry_start``)."""
    if not kept_items or set(kept) != set(columns):
        return columns, _restarted(items)
    joined = {}
    for name, values in columns.items():
        spans = [_replay_span(kept[name], item, name) for item in kept_items]
        joined[name] = np.concatenate([*spans, values])
    return joined, _restarted([*kept_items, *items])


def _replay_span(values: np.ndarray, item: Item, name: str) -> np.ndarray:
    """An item's rows of one replay column."""
    if name in REPLAY_PER_ENTRY:
        start = item.extra["entry_start"]
        return values[start : start + item.extra["entries"]]
    return values[item.start : item.start + item.rows]


def _restarted(items: list[Item]) -> list[Item]:
    """``items`` laid end to end from row 0 (their spans in the joined columns)."""
    laid, start, entry_start = [], 0, 0
    for item in items:
        entries = item.extra["entries"]
        extra = {"entries": entries, "entry_start": entry_start}
        laid.append(Item(item.path, item.identity, extra, None, start, item.rows))
        start, entry_start = start + item.rows, entry_start + entries
    return laid


def _replay_lists(items: list[Item]) -> dict[str, np.ndarray]:
    """What describes replays' items, as two more of their arrays: their paths, identities
    and message counts as JSON bytes, and their entry counts (the same for the replays of
    one set of files under each setting, so kept once)."""
    listed = {
        "paths": [item.path for item in items],
        "identities": [list(item.identity) for item in items],
        "rows": [item.rows for item in items],
    }
    return {
        "items": np.frombuffer(orjson.dumps(listed), dtype=np.uint8),
        "entries": np.array([item.extra["entries"] for item in items], dtype=np.int32),
    }


def _entry(item: Item, file: Path, identity: Identity, index: Index, store: str) -> Entry:
    """The entry an item describes, its values checked against its table (IntegrityError
    when they disagree: a damaged pack)."""
    meta = item.extra
    meta["path"] = item.path
    if meta["n_messages"] != item.n_rows:
        raise IntegrityError("an entry whose values disagree with its table")
    session = IndexedSession.restored(meta, file, identity, index, store)
    if item.own is not None:
        return Entry(session, item.own, meta)
    return Entry(session, None, meta, (item.whole, item.start))


class IndexedSession(Session):
    """A :class:`Session` read back from the index: its messages (and line numbers and held
    lines) are parsed from its file on first use, exactly as a fresh load would read them.

    Raises :class:`SessionChangedError` on that first use when the file is no longer the one
    indexed (load the store again).
    """

    _messages: list[dict[str, Any]] | None = None
    _lines: Any = None
    _held: tuple[tuple[int, str], ...] = ()
    _parsed: list[dict[str, Any]] | None = None
    _size = 0
    _turns: dict[str, int] = {}  # noqa: RUF012 (read-only default)
    _identity: Identity | None = None
    _index: Index | None = None
    _store = ""
    _seen: bytes | None = None  # the parsed messages' digest when first handed out

    @classmethod
    def restored(
        cls, meta: dict[str, Any], file: Path, identity: Identity, index: Index | None, store: str
    ) -> IndexedSession:
        """The session an entry describes, its messages not yet read (``index`` None: a
        streamed file of a load without the index, whose replays are kept nowhere)."""
        session = cls.__new__(cls)
        session.__dict__.update(
            key=meta["key"],
            created_at=_time(meta["created_at"]),
            updated_at=_time(meta["updated_at"]),
            metadata=meta["metadata"],
            last_consolidated=meta["last_consolidated"],
            path=file,
            format=meta["format"],
            records=meta["records"],
            policy=meta["policy"],
            _size=meta["n_messages"],
            _turns=meta["turns"],
            _identity=identity,
            _index=index,
            _store=store,
        )
        return session

    @classmethod
    def adopted(
        cls, session: Session, turns: dict[str, int], identity: Identity, index: Index, store: str
    ) -> IndexedSession:
        """A session just read and indexed, its messages already in memory."""
        adopted = cls.__new__(cls)
        lazy = ("messages", "line_numbers", "held_lines")
        fields = {k: v for k, v in vars(session).items() if k not in lazy}
        adopted.__dict__.update(
            fields,
            _messages=session.messages,
            _lines=session.line_numbers,
            _held=session.held_lines,
            _parsed=session.messages,
            _size=len(session.messages),
            _turns=turns,
            _identity=identity,
            _index=index,
            _store=store,
        )
        return adopted

    def _check_identity(self) -> None:
        if file_identity(cast("Path", self.path)) != self._identity:  # indexed: has its file
            raise SessionChangedError(
                f"{self.path} changed since session {self.key!r} was loaded, so its messages "
                "no longer match the corpus frames; load the store again"
            )

    def _changed(self) -> SessionChangedError:
        return SessionChangedError(f"{self.path} no longer holds the indexed session {self.key!r}")

    def _parse(self) -> None:
        self._check_identity()
        session, _ = read_session_file(cast("Path", self.path))  # indexed: has its file
        if session is None or len(session.messages) != self._size:
            raise self._changed()
        self._messages, self._lines, self._parsed = (
            session.messages,
            session.line_numbers,
            session.messages,
        )
        self._held = session.held_lines

    def _unread(self) -> bool:
        return self._messages is None and self._identity is not None

    @property
    def streamable(self) -> bool:
        """Whether the messages are still unread in a JSONL file, so :meth:`stream` can hand
        them out batch by batch."""
        return self._unread() and cast("Path", self.path).suffix == ".jsonl"  # indexed: has a file

    def stream(self, sink: Callable[[list[dict[str, Any]]], None]) -> None:
        """Hand the messages to ``sink`` a batch at a time as the file is read, keeping none
        (a worker replaying a range of a huge session).  Raises :class:`SessionChangedError`
        as the first use of :attr:`messages` would, and whatever ``sink`` raises (which is
        how it stops the reading early)."""
        self._check_identity()
        seen = 0

        def counted(messages: list[dict[str, Any]], _lines: list[int]) -> None:
            nonlocal seen
            seen += len(messages)
            sink(messages)

        session, _ = read_session_file(cast("Path", self.path), counted)  # indexed: has its file
        if session is None or seen != self._size:
            raise self._changed()

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The raw message dicts, parsed from the file on first use.  The first time the
        parsed list is handed out its digest is taken, so :attr:`pristine` can tell an edit
        made in place afterwards."""
        if self._unread():
            self._parse()
        if self._seen is None and self._messages is self._parsed:
            self._seen = b""  # while digesting, which reads this property again
            self._seen = content_digest(self) or b""
        return cast("list[dict[str, Any]]", self._messages)  # set: adopted, or parsed above

    @messages.setter
    def messages(self, value: list[dict[str, Any]]) -> None:
        self._messages = value

    @property
    def line_numbers(self) -> Any:
        """Line numbers of the messages, parsed with them."""
        if self._unread():
            self._parse()
        return self._lines

    @line_numbers.setter
    def line_numbers(self, value: Any) -> None:
        if self._unread():
            self._parse()
        self._lines = value

    @property
    def held_lines(self) -> tuple[tuple[int, str], ...]:
        """The lines held as they are (past ``json``'s limits), read with the messages."""
        if self._unread():
            self._parse()
        return self._held

    @held_lines.setter
    def held_lines(self, value: tuple[tuple[int, str], ...]) -> None:
        if self._unread():
            self._parse()
        self._held = value

    @property
    def pristine(self) -> bool:
        """Whether the messages are still those indexed: not parsed yet, or parsed and neither
        replaced, resized nor edited in place since they were first handed out (from then on
        an edit of the key, release, offset, metadata or records counts too)."""
        if self._identity is None:
            return False
        if self._messages is None:
            return True
        if self._messages is not self._parsed or len(self._messages) != self._size:
            return False
        return self._seen is None or content_digest(self) == self._seen

    def __len__(self) -> int:
        return self._size if self._unread() else len(self.messages)

    def __eq__(self, other: object) -> bool:
        """Equal to any :class:`Session`, indexed or not, with equal fields."""
        if not isinstance(other, Session):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(Session))

    __hash__ = None  # type: ignore[assignment]  # unhashable like Session; typeshed types it a method

    @property
    def n_user_turns(self) -> int:
        """Number of user turns under the session's policy (from the index while unparsed)."""
        if self.pristine and self.policy in self._turns:
            return self._turns[self.policy]
        return super().n_user_turns

    @property
    def identity(self) -> Identity | None:
        """The version of its file the session was indexed at (None: not indexed)."""
        return self._identity

    @property
    def replay_home(self) -> tuple[Index, str] | None:
        """Where this session's replays are kept (its index and store) while its messages
        are those indexed, else None."""
        if not self.pristine or self._index is None:
            return None
        return self._index, self._store


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)
