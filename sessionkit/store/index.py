"""The persistent index: each session file's :class:`~sessionkit.store.frames.Entry` kept in a cache
folder, so opening a store again reads only what changed.

Entries are Arrow IPC files, memory-mapped on open (strings used in place): a store's pack
holds every file's entry, and a file changed since that pack was written has a small pack of
its own, until the store's pack is rewritten.  Each entry is valid only for its file's
identity (device, inode, size, mtime_ns, ctime_ns): a new, grown, replaced or edited file no
longer matches and is read again; an edit that keeps size and mtime still changes ctime.  A
file changed within :data:`RACY_NS` of being read is not indexed (a later change could keep
every timestamp), so it is simply read next time.  Replays (:mod:`sessionkit.simulate.replay`) are
kept per store and setting under the same identities, and what windows derive from a large
store's replays under a stamp of them.  Writes are atomic (:func:`~sessionkit.store.cachedir.write_ipc`);
anything unreadable, of another format or for another identity is never trusted, only
rebuilt.  The cache folder is ``$SESSIONKIT_CACHE_DIR``, else the platform's user cache
folder, and never a workspace.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, fields
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from sessionkit.nanobot.naming import SessionPathError
from sessionkit.nanobot.reader import read_session_file
from sessionkit.nanobot.session import Session
from sessionkit.store.cachedir import default_cache_dir, name_digest, write_ipc
from sessionkit.store.frames import MESSAGE_TABLE, Entry

__all__ = [
    "FORMAT",
    "RACY_NS",
    "REPLAY_TABLE",
    "Identity",
    "Index",
    "IndexedSession",
    "Item",
    "SessionChangedError",
    "default_cache_dir",
    "file_identity",
    "store_key",
]

FORMAT = 2
"""The layout of entries; entries of another format (or sessionkit version) are not read."""
RACY_NS = 3_000_000_000
"""A file whose mtime or ctime is this close to the moment it was read is not indexed yet:
file systems stamp times coarsely, so a change right after could leave its identity as is."""
_KEY = b"sessionkit"


@dataclass(frozen=True)
class Identity:
    """What tells one version of a file from another without reading it."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    def racy(self, now_ns: int) -> bool:
        """Whether the file changed too recently (see :data:`RACY_NS`) to index it."""
        return now_ns - max(self.mtime_ns, self.ctime_ns) < RACY_NS


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
    """The key of the store ``files`` form: their folders (a pack is kept per store)."""
    return name_digest(b"\0".join(sorted({os.fsencode(f.parent) for f in files})))


@dataclass(frozen=True)
class Item:
    """One file's part of a pack: its path, the identity it is valid for, its values
    (``extra``), its table, and where that table starts in the pack's (``start``)."""

    path: str
    identity: Identity
    extra: dict[str, Any]
    table: pa.Table
    start: int = 0


def _write_pack(target: Path, items: list[Item], schema: pa.Schema) -> None:
    """Write items as one Arrow IPC file (each item's record batches in turn, the rest in the
    schema metadata), atomically."""
    parts = [item.table.to_batches() for item in items]
    described = [
        {
            "path": item.path,
            "identity": list(vars(item.identity).values()),
            "extra": item.extra,
            "rows": item.table.num_rows,
        }
        for item in items
    ]
    stamped = schema.with_metadata({_KEY: json.dumps({"format": FORMAT, "items": described})})
    write_ipc(target, stamped, (batch for batches in parts for batch in batches))


def _read_pack(path: Path, schema: pa.Schema) -> tuple[pa.Table, dict[str, Item]]:
    """A pack's whole table (memory-mapped) and its items by path; nothing when it is
    missing, unreadable, of another format or another schema."""
    nothing = (schema.empty_table(), {})
    try:
        with pa.memory_map(str(path)) as source:
            reader = pa.ipc.open_file(source)
            table = reader.read_all()
            found = json.loads(reader.schema.metadata[_KEY])
        if table.schema.remove_metadata() != schema or found["format"] != FORMAT:
            return nothing
        table = table.replace_schema_metadata(None)
        items, start = {}, 0
        for item in found["items"]:
            rows = item["rows"]
            items[item["path"]] = Item(
                item["path"],
                Identity(*item["identity"]),
                item["extra"],
                table.slice(start, rows),
                start,
            )
            start += rows
        if start != table.num_rows:
            return nothing
    except (OSError, pa.ArrowException, KeyError, TypeError, ValueError):
        return nothing
    return table, items


REPLAY_TABLE = pa.schema(
    [(name, pa.bool_()) for name in ("is_user", "delivery", "command", "checkpoint", "turn")]
    + [("declared", pa.int32()), ("kept", pa.int32()), ("entry_declared", pa.int32())]
    + [("tokens", pa.int64())]
)
"""A replay as kept: per-message columns, then per-entry ones padded to the message count."""


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

    def read_entries(
        self, store: str, files: list[Path], identities: list[Identity | None]
    ) -> tuple[list[Entry | None], int]:
        """Each file's entry valid for its identity (None: none), and how many came from
        the store's pack."""
        _, pack = _read_pack(self._pack_path("stores", store), MESSAGE_TABLE)
        found: list[Entry | None] = []
        from_pack = 0
        for file, identity in zip(files, identities, strict=True):
            key = os.fsdecode(file)
            item = pack.get(key)
            in_pack = item is not None and identity is not None and item.identity == identity
            if not in_pack and identity is not None:
                own = self._pack_path("files", name_digest(os.fsencode(file)))
                item = _read_pack(own, MESSAGE_TABLE)[1].get(key)
            if item is None or identity is None or item.identity != identity:
                found.append(None)
                continue
            from_pack += in_pack
            meta = item.extra
            session = IndexedSession.restored(meta, file, identity, self, store)
            found.append(Entry(session, item.table, meta))
        return found, from_pack

    def write_entries(
        self, store: str, entries: list[tuple[Entry, Identity]], *, whole: bool
    ) -> None:
        """Keep entries at their identities: ``whole`` as the store's new pack (dropping
        those files' own packs), else each in its file's own pack."""
        items = [Item(e.meta["path"], i, e.meta, e.table) for e, i in entries]
        if whole:
            _write_pack(self._pack_path("stores", store), items, MESSAGE_TABLE)
            for item in items:
                self._pack_path("files", name_digest(os.fsencode(item.path))).unlink(
                    missing_ok=True
                )
            return
        for item in items:
            target = self._pack_path("files", name_digest(os.fsencode(item.path)))
            _write_pack(target, [item], MESSAGE_TABLE)

    def read_replays(self, store: str, name: str) -> tuple[pa.Table, dict[str, Item]]:
        """The replays kept for a store under ``name`` (a policy and entry setting): the
        pack's whole table, and each file's item by path."""
        return _read_pack(self._replay_path(store, name), REPLAY_TABLE)

    def write_replays(self, store: str, name: str, items: list[Item]) -> None:
        """Add replays to the store's pack under ``name`` (replacing those of the same files)."""
        target = self._replay_path(store, name)
        _, kept = _read_pack(target, REPLAY_TABLE)
        kept.update((item.path, item) for item in items)
        _write_pack(target, list(kept.values()), REPLAY_TABLE)

    def read_arrays(self, name: str, stamp: str) -> dict[str, np.ndarray] | None:
        """Arrays kept under ``name`` for ``stamp`` (the versions of what they were derived
        from), memory-mapped and read-only; None when there are none for that stamp."""
        path = self._pack_path("derived", name_digest(name.encode()))
        try:
            with pa.memory_map(str(path)) as source:
                table = pa.ipc.open_file(source).read_all()
            found = json.loads(table.schema.metadata[_KEY])
            if found["format"] != FORMAT or [found["name"], found["stamp"]] != [name, stamp]:
                return None
            chunks = table.column("data").chunks
            column = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
            return {
                key: np.frombuffer(column[i].as_buffer(), dtype=dtype)
                for i, (key, dtype) in enumerate(found["arrays"])
            }
        except (OSError, pa.ArrowException, KeyError, TypeError, ValueError):
            return None

    def write_arrays(self, name: str, stamp: str, arrays: dict[str, np.ndarray]) -> None:
        """Keep numpy arrays under ``name`` for ``stamp``, replacing any kept before."""
        data = pa.array(
            [np.ascontiguousarray(a).tobytes() for a in arrays.values()], pa.large_binary()
        )
        described = [[key, a.dtype.str] for key, a in arrays.items()]
        metadata = {"format": FORMAT, "name": name, "stamp": stamp, "arrays": described}
        table = pa.table({"data": data})
        target = self._pack_path("derived", name_digest(name.encode()))
        write_ipc(target, table.schema.with_metadata({_KEY: json.dumps(metadata)}), [table])

    def _replay_path(self, store: str, name: str) -> Path:
        return self._pack_path("replays", f"{store}-{name_digest(name.encode())}")


class IndexedSession(Session):
    """A :class:`Session` read back from the index: its messages (and line numbers) are parsed
    from its file on first use, exactly as a fresh load would read them.

    Raises :class:`SessionChangedError` on that first use when the file is no longer the one
    indexed (load the store again).
    """

    _messages: list[dict[str, Any]] | None = None
    _lines: Any = None
    _parsed: list[dict[str, Any]] | None = None
    _size = 0
    _turns: dict[str, int] = {}  # noqa: RUF012 (read-only default)
    _identity: Identity | None = None
    _index: Index | None = None
    _store = ""

    @classmethod
    def restored(
        cls, meta: dict[str, Any], file: Path, identity: Identity, index: Index, store: str
    ) -> IndexedSession:
        """The session an entry describes, its messages not yet read."""
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
        fields = {k: v for k, v in vars(session).items() if k not in ("messages", "line_numbers")}
        adopted.__dict__.update(
            fields,
            _messages=session.messages,
            _lines=session.line_numbers,
            _parsed=session.messages,
            _size=len(session.messages),
            _turns=turns,
            _identity=identity,
            _index=index,
            _store=store,
        )
        return adopted

    def _parse(self) -> None:
        if file_identity(self.path) != self._identity:  # type: ignore[arg-type]
            raise SessionChangedError(
                f"{self.path} changed since session {self.key!r} was loaded, so its messages "
                "no longer match the corpus frames; load the store again"
            )
        session, _ = read_session_file(self.path)  # type: ignore[arg-type]
        if session is None or len(session.messages) != self._size:
            raise SessionChangedError(
                f"{self.path} no longer holds the indexed session {self.key!r}"
            )
        self._messages, self._lines, self._parsed = (
            session.messages,
            session.line_numbers,
            session.messages,
        )

    def _unread(self) -> bool:
        return self._messages is None and self._identity is not None

    @property  # type: ignore[override]
    def messages(self) -> list[dict[str, Any]]:
        """The raw message dicts, parsed from the file on first use."""
        if self._unread():
            self._parse()
        return self._messages  # type: ignore[return-value]

    @messages.setter
    def messages(self, value: list[dict[str, Any]]) -> None:
        self._messages = value

    @property  # type: ignore[override]
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
    def pristine(self) -> bool:
        """Whether the messages are still those indexed (not parsed yet, or parsed and
        neither replaced nor resized)."""
        if self._identity is None:
            return False
        return self._messages is None or (
            self._messages is self._parsed and len(self._messages) == self._size
        )

    def __len__(self) -> int:
        return self._size if self._unread() else len(self.messages)

    def __eq__(self, other: object) -> bool:
        """Equal to any :class:`Session`, indexed or not, with equal fields."""
        if not isinstance(other, Session):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(Session))

    __hash__ = None  # type: ignore[assignment]

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
