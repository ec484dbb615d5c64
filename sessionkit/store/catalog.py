"""A store's catalog: its files and each session's own values as columns, kept beside the
store's pack and bound to it by the pack's checksum, so a warm open of a folder compares
identities as arrays and builds its frames with no Python object per file
(:mod:`sessionkit.store.snapshot`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from sessionkit.nanobot.policies import POLICIES
from sessionkit.store.cachedir import write_ipc
from sessionkit.store.frames import SESSION_VALUES, SUMS
from sessionkit.store.integrity import IntegrityError, read_sealed_checked

__all__ = ["CATALOG", "IDENTITY", "Catalog", "catalog_of", "read_catalog", "write_catalog"]

IDENTITY = ("device", "inode", "size", "mtime_ns", "ctime_ns")
"""The identity columns, in :class:`~sessionkit.store.index.Identity`'s order."""

_TEXT = pa.large_string()
CATALOG = pa.schema(
    [pa.field("name", _TEXT, nullable=False)]
    + [pa.field(name, pa.uint64(), nullable=False) for name in IDENTITY[:2]]
    + [pa.field(name, pa.int64(), nullable=False) for name in IDENTITY[2:]]
    + [pa.field("key", _TEXT, nullable=False), pa.field("format", _TEXT, nullable=False)]
    + [pa.field(name, _TEXT) for name in ("created_at", "updated_at", "title", "preview")]
    + [pa.field("n_messages", pa.int64(), nullable=False)]
    + [pa.field(f"{kind} {name}", pa.int64()) for kind in SUMS.values() for name in POLICIES]
    + [pa.field(name, pa.int64()) for name in ("first_message_at", "last_message_at")]
    + [pa.field("last_consolidated", pa.int64(), nullable=False)]
    + [pa.field("policy", _TEXT, nullable=False)]
    + [pa.field(name, pa.bool_(), nullable=False) for name in ("has_records", "counted")]
    + [pa.field("problems", _TEXT)]
    + [pa.field(f"turns {name}", pa.int64(), nullable=False) for name in POLICIES]
)
"""One row per file of a pack, in the pack's order: its name in the store's folder, its
identity, and the values the frames show (``problems``: their JSON, null when none; tokens
and turns under every release)."""

_KEY = b"sessionkit"
_REQUIRED = [field.name for field in CATALOG if not field.nullable]


class Catalog:
    """A catalog read back and checked: its table and the folder and format it was written
    for (a class: its columns are converted once, on first use)."""

    def __init__(self, table: pa.Table, folder: str) -> None:
        self.table = table
        self.folder = folder

    def column(self, name: str) -> list[Any]:
        """A column as Python values (through numpy, many times faster than Arrow's
        scalars, except for a column of integers with nulls)."""
        found = self.table.column(name)
        if found.null_count and pa.types.is_integer(found.type):
            return found.to_pylist()
        return found.to_numpy(zero_copy_only=False).tolist()

    def identities(self) -> list[tuple[int, ...]]:
        """The files' identities (as :data:`IDENTITY`), in order."""
        return list(zip(*(self.column(name) for name in IDENTITY), strict=True))

    def holds(self, identities: list[list[int]]) -> bool:
        """Whether the files' identities, one list per :data:`IDENTITY` column, are those
        the catalog holds."""
        for name, values in zip(IDENTITY, identities, strict=True):
            kept = self.table.column(name).to_numpy()
            if len(values) != len(kept) or not np.array_equal(np.array(values, kept.dtype), kept):
                return False
        return True


def catalog_of(
    paths: list[str], metas: list[dict[str, Any]], identities: list[tuple[int, ...]]
) -> pa.Table | None:
    """The catalog of a pack's files (``paths``, their entries' values ``metas`` and
    identities), or None when they are not the files of one folder or hold what a catalog
    does not (strings Arrow cannot hold, such as lone surrogates; escaped strings; turns of
    other releases): such a store opens through its pack's description."""
    if not paths or len({os.path.dirname(p) for p in paths}) != 1:
        return None
    releases = list(POLICIES)
    for meta in metas:
        if any(meta["escapes"].values()) or any(
            list(meta[name]) != releases for name in ("turns", *SUMS.values())
        ):
            return None
    columns: dict[str, Any] = {"name": [os.path.basename(p) for p in paths]}
    for i, name in enumerate(IDENTITY):
        columns[name] = [identity[i] for identity in identities]
    for name in ("key", *SESSION_VALUES, "last_consolidated", "policy", "counted"):
        columns[name] = [meta[name] for meta in metas]
    columns["has_records"] = [bool(meta["records"]) for meta in metas]
    columns["problems"] = [json.dumps(m["problems"]) if m["problems"] else None for m in metas]
    for release in releases:
        for name in ("turns", *SUMS.values()):
            columns[f"{name} {release}"] = [meta[name][release] for meta in metas]
    try:
        return pa.table(columns, schema=CATALOG)
    except (UnicodeEncodeError, pa.ArrowException, TypeError, ValueError, OverflowError):
        return None


def write_catalog(target: Path, table: pa.Table, folder: str, pack: int, layout: int) -> None:
    """Keep a catalog for the pack of checksum ``pack`` (``layout``: the index's format)."""
    described = json.dumps({"format": layout, "pack": pack, "folder": folder})
    write_ipc(target, CATALOG.with_metadata({_KEY: described}), [table])


def read_catalog(path: Path, pack: int, pack_rows: int, layout: int) -> Catalog | None:
    """The catalog at ``path`` when it was written for the pack of checksum ``pack`` (of
    ``pack_rows`` rows) in format ``layout``, else None.  Its values are checked: one that
    fails its seal, or whose columns break the catalog's rules, is removed with a warning."""

    def checked(table: pa.Table) -> Catalog | None:
        found = json.loads(table.schema.metadata[_KEY])
        if found["format"] != layout or found["pack"] != pack:
            return None
        if table.schema.remove_metadata() != CATALOG or type(found["folder"]) is not str:
            raise IntegrityError("another schema")
        if any(table.column(name).null_count for name in _REQUIRED):
            raise IntegrityError("a required value is missing")
        rows = table.column("n_messages").to_numpy()
        if (rows < 0).any() or int(rows.sum()) != pack_rows:
            raise IntegrityError("row counts disagree with the pack")
        if not set(table.column("policy").unique().to_pylist()) <= set(POLICIES):
            raise IntegrityError("an unknown release")
        return Catalog(table, found["folder"])

    return read_sealed_checked(path, checked)
