"""Read 0.3.5's per-call usage log from a private snapshot, never from nanobot's data dir.

Opening a WAL database, even read-only, can create ``-wal``/``-shm`` files and take locks
beside it, so the database and its ``-wal``/``-shm`` files are copied into a fresh 0700
folder first and only the copy is opened (read-only).  Whatever is wrong with the file
(locked, truncated, not a database, a newer schema, unknown or missing columns, values that
are no counts) becomes a problem; the rows that can be read are kept.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sessionkit.nanobot.usage_records import LOG_COLUMNS, LOG_FILE, LOG_SCHEMA_VERSION, LOG_TABLE

__all__ = ["LogRead", "read_log"]

_TEXT = ("provider", "model", "source", "finish_reason")
_COUNTS = (
    "duration_ms",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reported_tokens",
    "estimated_tokens",
)
_SUFFIXES = ("", "-wal", "-shm")
_ATTEMPTS = 3

LogRead = tuple[dict[str, list[Any]], list[tuple[int | None, str]]]
"""Columns (``id``, ``started_at_ms``, text and count columns; None where unreadable) and
problems as (row id or None, reason)."""


def _state(db: Path) -> tuple[tuple[int, int] | None, ...]:
    """Size and modification time of the database and its WAL files (None: absent)."""
    out: list[tuple[int, int] | None] = []
    for suffix in _SUFFIXES:
        try:
            st = os.stat(f"{db}{suffix}")
            out.append((st.st_size, st.st_mtime_ns))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)


def _copy(source: str, target: str) -> None:
    """Copy one file's bytes into a new 0600 file (symlinks are not followed)."""
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        with os.fdopen(fd, "rb", closefd=False) as src:
            data = src.read()
    finally:
        os.close(fd)
    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(out, "wb") as dst:
        dst.write(data)


def _snapshot(db: Path, folder: Path) -> tuple[Path, bool]:
    """The copy of ``db`` (and its WAL files) in ``folder``, and whether the files stayed
    unchanged while copied (a writer between the copies could leave them inconsistent)."""
    copy = folder / LOG_FILE
    steady = False
    for _ in range(_ATTEMPTS):
        for suffix in _SUFFIXES:
            Path(f"{copy}{suffix}").unlink(missing_ok=True)
        before = _state(db)
        for suffix, present in zip(_SUFFIXES, before, strict=True):
            if present is not None:
                _copy(f"{db}{suffix}", f"{copy}{suffix}")
        if _state(db) == before:
            steady = True
            break
    return copy, steady


def _count(column: str) -> str:
    """SQL: the column as a non-negative integer, else NULL."""
    return (
        f"CASE WHEN typeof({column}) = 'integer' AND {column} >= 0 THEN {column} "
        f"WHEN typeof({column}) = 'real' AND {column} >= 0 AND {column} = CAST({column} AS "
        f"INTEGER) THEN CAST({column} AS INTEGER) END"
    )


def _text(column: str) -> str:
    return f"CASE WHEN typeof({column}) = 'text' THEN {column} END"


def _columns(connection: sqlite3.Connection) -> list[str]:
    return [row[1] for row in connection.execute(f"PRAGMA table_info({LOG_TABLE})")]


def _query(connection: sqlite3.Connection, present: set[str]) -> LogRead:
    """Every row, each column validated in SQL; problems name the rows left out or cut."""
    problems: list[tuple[int | None, str]] = []
    exprs = {"id": "id", "started_at_ms": _count("started_at_ms")}
    exprs |= {c: _text(c) if c in present else "NULL" for c in _TEXT}
    exprs |= {c: _count(c) if c in present else "NULL" for c in _COUNTS}
    checked = [c for c in ("started_at_ms", *_TEXT, *_COUNTS) if c in present]
    bad = ", ".join(
        f"SUM({c} IS NOT NULL AND ({exprs[c]}) IS NULL), MIN(CASE WHEN {c} IS NOT NULL AND "
        f"({exprs[c]}) IS NULL THEN id END)"
        for c in checked
    )
    found = connection.execute(f"SELECT {bad} FROM {LOG_TABLE}").fetchone()
    for i, column in enumerate(checked):
        n, first = found[2 * i], found[2 * i + 1]
        if n:
            kind = "text" if column in _TEXT else "a non-negative integer"
            what = "row left out" if column == "started_at_ms" else f"{column} left <NA>"
            problems.append(
                (first, f"{n} row(s) with {column} not {kind} (first id {first}): {what}")
            )
    select = ", ".join(f"{expr} AS {name}" for name, expr in exprs.items())
    rows = connection.execute(
        f"SELECT {select} FROM {LOG_TABLE} WHERE ({exprs['started_at_ms']}) IS NOT NULL "
        "ORDER BY started_at_ms, id"
    ).fetchall()
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in exprs]
    return {name: list(values) for name, values in zip(exprs, columns, strict=True)}, problems


def _read(copy: Path) -> LogRead:
    problems: list[tuple[int | None, str]] = []
    uri = f"file:{quote(str(copy))}?mode=ro"
    connection = sqlite3.connect(uri, uri=True, timeout=0)
    try:
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        present = set(_columns(connection))
        if not present:
            return {}, [(None, f"no {LOG_TABLE} table: not a nanobot 0.3.5 usage log")]
        if version > LOG_SCHEMA_VERSION:
            problems.append(
                (
                    None,
                    f"schema version {version} is newer than {LOG_SCHEMA_VERSION}: the "
                    "columns it shares with version 1 are read",
                )
            )
        unknown = sorted(present - set(LOG_COLUMNS))
        if unknown:
            problems.append((None, f"unknown columns ignored: {', '.join(unknown)}"))
        missing = [c for c, required in LOG_COLUMNS.items() if required and c not in present]
        if missing:
            return {}, [*problems, (None, f"required columns missing: {', '.join(missing)}")]
        absent = [c for c in (*_TEXT, *_COUNTS) if c not in present]
        if absent:
            problems.append((None, f"columns missing, left <NA>: {', '.join(absent)}"))
        columns, met = _query(connection, present)
        return columns, [*problems, *met]
    finally:
        connection.close()


def read_log(data_dir: Path) -> LogRead:
    """The rows of ``<data_dir>/llm_usage.sqlite3`` (none when it is absent) and problems."""
    db = data_dir / LOG_FILE
    if not db.exists():
        return {}, []
    with tempfile.TemporaryDirectory(prefix="sessionkit-usage-") as folder:
        os.chmod(folder, 0o700)
        try:
            copy, steady = _snapshot(db, Path(folder))
            columns, problems = _read(copy)
        except (OSError, sqlite3.Error) as exc:
            return {}, [(None, f"usage log unreadable ({exc}): no per-call rows")]
    if not steady:
        problems.insert(0, (None, "the log changed while it was copied: read as copied"))
    return columns, problems
