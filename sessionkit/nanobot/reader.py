"""Read nanobot session stores: find the files, parse every format, record what is damaged.

Reading never writes.  A damaged line is skipped and reported as a :class:`Problem`; every
intact line is kept.  Where nanobot 0.2.2 loads a file, the result equals nanobot's load.
"""

from __future__ import annotations

import errno
import glob
import json
import mmap
import os
import re
import reprlib
import stat
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from itertools import compress, repeat
from operator import contains
from pathlib import Path
from typing import Any

import orjson

from sessionkit.nanobot.naming import key_from_filename, sessions_folder, storage_key
from sessionkit.nanobot.session import Session

__all__ = [
    "MAX_LINE_BYTES",
    "Problem",
    "SessionPathError",
    "find_session_files",
    "leftover_temp_files",
    "parse_timestamp",
    "read_session_file",
]

SESSION_SUFFIXES = (".jsonl", ".json")
MAX_LINE_BYTES = 1 << 30
"""Longer lines are reported, not parsed (nanobot would need several times this in memory)."""
_GLOB_CHARS = frozenset("*?[")
# What an interrupted save leaves: sessionkit's ``.<stem>.<12 hex>.tmp``, nanobot's ``<stem>.jsonl.tmp``.
_TEMP_NAME = re.compile(r"\..+\.[0-9a-f]{12}\.tmp|.+\.jsonl\.tmp", re.DOTALL)
_BRIEF = reprlib.Repr()
_BRIEF.maxstring = _BRIEF.maxother = 60


class SessionPathError(FileNotFoundError):
    """A path that does not exist or holds no session files."""


@dataclass(frozen=True)
class Problem:
    """Something in a file that could not be loaded as it stands; ``line_no`` is 1-based.

    ``skipped`` marks a line dropped whole (not JSON, not an object, not UTF-8), as opposed
    to a value that was replaced (a bad offset or timestamp).
    """

    path: str
    line_no: int | None
    reason: str
    skipped: bool = False


def _session_files_in(folder: Path) -> list[Path]:
    """Every entry named like a session, whatever its kind: reading reports what is not a file."""
    return sorted(p for p in folder.iterdir() if p.suffix in SESSION_SUFFIXES)


def _expand(item: str | Path) -> list[Path]:
    path = Path(item).expanduser()
    if path.is_dir():
        folder = sessions_folder(path)
        files = _session_files_in(folder)
        if not files:
            raise SessionPathError(f"{folder} holds no session files (*.jsonl or *.json)")
        return files
    if os.path.lexists(path):
        return [path]  # a file, or a FIFO, device or broken link that reading will report
    if _GLOB_CHARS & set(str(item)):
        matches = sorted(Path(m) for m in glob.glob(str(path), recursive=True))
        files = [m for m in matches if m.suffix in SESSION_SUFFIXES]
        if not files:
            raise SessionPathError(f"glob {str(item)!r} matches no session files")
        return files
    raise SessionPathError(f"no such file or folder: {path}")


def _identity(path: Path) -> Path:
    """The resolved path of a reachable file; a broken or looping link stays as named."""
    return path.resolve() if os.path.exists(path) else path.absolute()


def _items(path: str | Path | list[str | Path] | tuple[str | Path, ...]) -> list[str | Path]:
    items = list(path) if isinstance(path, list | tuple) else [path]
    if not items:
        raise SessionPathError("no paths given")
    return items


def find_session_files(path: str | Path | list[str | Path] | tuple[str | Path, ...]) -> list[Path]:
    """Session files named by a workspace, a sessions folder, a file, a glob, or a list of these.

    A folder with a ``sessions/`` subfolder is a nanobot workspace and its ``sessions/`` is
    read.  Anything named like a session is listed, even when it is not a regular file
    (:func:`read_session_file` reports it).  Raises :class:`SessionPathError` naming the path
    that does not exist or is empty.
    """
    seen: dict[Path, None] = {}
    for item in _items(path):
        for file in _expand(item):
            seen.setdefault(_identity(file), None)
    return list(seen)


def leftover_temp_files(
    path: str | Path | list[str | Path] | tuple[str | Path, ...],
) -> list[Problem]:
    """One problem per temp file an interrupted save left in the folders ``path`` names."""
    folders = {
        sessions_folder(p).absolute(): None
        for p in (Path(i).expanduser() for i in _items(path))
        if p.is_dir()
    }
    return [
        Problem(
            str(temp),
            None,
            f"leftover temp file of an interrupted save ({_size(temp)}); not a session, not read",
        )
        for folder in folders
        for temp in sorted(folder.iterdir())
        if _TEMP_NAME.fullmatch(temp.name)
    ]


def _size(path: Path) -> str:
    try:
        return f"{os.lstat(path).st_size:,} bytes"
    except OSError:
        return "size unknown"


_SCAN_BYTES = 1 << 26


def _find(buf: Any, fd: int, needle: bytes, start: int) -> int:
    """Where ``needle`` next occurs at or after ``start`` (-1: nowhere), scanning in chunks and
    skipping the holes of a sparse file (they hold only zero bytes)."""
    size = len(buf)
    while start < size:
        stop = min(size, start + _SCAN_BYTES)
        found = buf.find(needle, start, stop)
        if found >= 0:
            return found
        start = _next_data(fd, stop, size)
    return -1


def _next_data(fd: int, offset: int, size: int) -> int:
    """The first offset at or after ``offset`` that may hold data; ``size`` when none does."""
    if offset >= size:
        return size
    try:
        return os.lseek(fd, offset, os.SEEK_DATA)
    except OSError as exc:
        return size if exc.errno == errno.ENXIO else offset


def _line_spans(buf: Any, fd: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each line, split as nanobot's text-mode reading splits.

    Universal newlines: ``\n``, ``\r\n`` and a lone ``\r`` all end a line.
    """
    size = len(buf)
    if _find(buf, fd, b"\r", 0) < 0:  # the usual file: only \n
        find = buf.find
        start = 0
        while start < size:
            end = find(b"\n", start, start + _SCAN_BYTES)
            if end < 0:
                end = _find(buf, fd, b"\n", start)
                end = size if end < 0 else end
            yield start, end
            start = end + 1
        return
    start = 0
    nl = _find(buf, fd, b"\n", 0)
    cr = _find(buf, fd, b"\r", 0)
    while start < size:
        if 0 <= nl < start:
            nl = _find(buf, fd, b"\n", start)
        if 0 <= cr < start:
            cr = _find(buf, fd, b"\r", start)
        end = min(nl if nl >= 0 else size, cr if cr >= 0 else size)
        yield start, end
        start = end + (2 if end == cr and end + 1 == nl else 1)


_BLANK = object()
_NANOBOT_LOSES = "; nanobot 0.2.2's repair fails on it too and loses the whole session"
_DIGIT_MAP = bytes(0x30 if 0x30 <= b <= 0x39 else 0x2E for b in range(256))
_LONG_NUMBER = b"0" * 19
"""19 digits in a row: the shortest integer orjson would turn into a float (>= 2**63)."""


def _parse_line(line: bytes) -> tuple[Any, str | None]:
    """Parse one line as nanobot's ``json`` would: ``(value, None)``, ``(_BLANK, None)``,
    or a reason.  orjson parses; a line it refuses or might round goes through ``json``."""
    if line.translate(_DIGIT_MAP).find(_LONG_NUMBER) < 0:
        try:
            return orjson.loads(line), None
        except orjson.JSONDecodeError:
            pass
    return _parse_with_json(line)


def _parse_with_json(line: bytes) -> tuple[Any, str | None]:
    """:func:`_parse_line` through Python's ``json``, exactly as nanobot reads a line."""
    try:
        text = line.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        return None, f"not valid UTF-8 (byte {exc.start})"
    if not text:
        return _BLANK, None
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg} (column {exc.colno})"
    except RecursionError:
        return None, f"nested too deeply for json (RecursionError){_NANOBOT_LOSES}"
    except ValueError as exc:  # an integer past Python's int-string limit, as nanobot meets it
        return None, f"not JSON: {str(exc).split(':')[0]}{_NANOBOT_LOSES}"


def _parse_lines(
    buf: Any, fd: int
) -> tuple[list[dict[str, Any]], list[int], list[tuple[int, str]]]:
    """The object records, their 1-based line numbers, and the failed lines with a reason."""
    records: list[dict[str, Any]] = []
    numbers: list[int] = []
    bad: list[tuple[int, str]] = []
    loads = orjson.loads
    for line_no, (start, end) in enumerate(_line_spans(buf, fd), 1):
        if end - start > MAX_LINE_BYTES:
            bad.append(
                (line_no, f"line of {end - start:,} bytes is over {MAX_LINE_BYTES:,}; not read")
            )
            continue
        line = buf[start:end]
        reason = None
        if line.translate(_DIGIT_MAP).find(_LONG_NUMBER) < 0:
            try:
                value = loads(line)
            except orjson.JSONDecodeError:
                value, reason = _parse_with_json(line)
        else:
            value, reason = _parse_with_json(line)
        if type(value) is dict:
            records.append(value)
            numbers.append(line_no)
        elif reason is not None:
            bad.append((line_no, reason))
        elif value is not _BLANK:
            bad.append((line_no, f"JSON {_json_type(value)}, not an object"))
    return records, numbers, bad


def _json_type(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def parse_timestamp(value: Any) -> datetime | None:
    """An ISO timestamp as nanobot reads it (``datetime.fromisoformat``); None if it is not one."""
    if not value:
        return None
    with suppress(ValueError, TypeError):
        return datetime.fromisoformat(value)
    return None


def _time_problem(field: str, value: Any) -> str | None:
    if value and parse_timestamp(value) is None:
        return f"metadata {field} {_BRIEF.repr(value)} is not an ISO timestamp"
    return None


def _offset_problem(value: Any, n_messages: int) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"last_consolidated {_BRIEF.repr(value)} is not an integer; using 0"
    if not 0 <= value <= n_messages:
        return f"last_consolidated {_BRIEF.repr(value)} is outside 0..{n_messages}; using 0"
    return None


def _lost_metadata(reason: str, key: str) -> str:
    """A damaged first line's reason, saying what losing the metadata record changes."""
    return (
        f"{reason}; no metadata record survives, so the key falls back to the file name "
        f"({_BRIEF.repr(key)}), last_consolidated is unknown (0 used), and the title and "
        "other metadata are lost"
    )


def _names_storage_key(stem: str, key: str) -> bool:
    """Whether ``stem`` is nanobot 0.3's base64url name for ``key`` (never for an unencodable key)."""
    try:
        return stem == storage_key(key)
    except UnicodeEncodeError:
        return False


def _jsonl_session(path: Path, buf: Any, fd: int) -> tuple[Session, list[Problem]]:
    records, numbers, bad = _parse_lines(buf, fd)
    typed = list(compress(range(len(records)), map(contains, records, repeat("_type"))))
    metas = [(numbers[i], records[i]) for i in typed if records[i]["_type"] == "metadata"]
    extra = [records[i] for i in typed if records[i]["_type"] == "provider_state"]
    special = {i for i in typed if records[i]["_type"] in ("metadata", "provider_state")}
    if not special:
        messages, line_numbers = records, numbers
    elif special == {0}:
        messages, line_numbers = records[1:], numbers[1:]
    else:
        keep = [i for i in range(len(records)) if i not in special]
        messages = [records[i] for i in keep]
        line_numbers = [numbers[i] for i in keep]

    # nanobot's strict load resets a time to None at a later metadata record lacking it;
    # its repair pass (taken once any line is damaged) keeps the earlier one.
    repairing = bool(bad) or any(
        _time_problem(f, m.get(f)) for _, m in metas for f in ("created_at", "updated_at")
    )
    problems: list[Problem] = []
    metadata: Any = {}
    times: dict[str, datetime | None] = {"created_at": None, "updated_at": None}
    offset: Any = 0
    stored_key: Any = None
    for line_no, meta in metas:
        metadata = meta.get("metadata", {})
        if not isinstance(metadata, dict):
            problems.append(
                Problem(
                    str(path), line_no, f"metadata is JSON {_json_type(metadata)}, not an object"
                )
            )
        for field in times:
            reason = _time_problem(field, meta.get(field))
            if reason:
                problems.append(Problem(str(path), line_no, reason))
            parsed = parse_timestamp(meta.get(field))
            if parsed is not None or not repairing:
                times[field] = parsed
        offset = meta.get("last_consolidated", 0)
        stored_key = meta.get("key", stored_key)
    if metas:
        reason = _offset_problem(offset, len(messages))
        if reason:
            problems.append(Problem(str(path), metas[-1][0], reason))
    if not records and not bad:
        problems.append(Problem(str(path), None, "empty file: no records"))

    key = stored_key if isinstance(stored_key, str) and stored_key else key_from_filename(path)
    if stored_key is not None and key != stored_key:
        problems.append(
            Problem(
                str(path),
                metas[-1][0],
                f"metadata key {_BRIEF.repr(stored_key)} is not a non-empty string; "
                f"using the file name ({_BRIEF.repr(key)})",
            )
        )
    first_damaged = bool(bad) and (not numbers or bad[0][0] < numbers[0])
    if first_damaged and not metas:
        bad[0] = (bad[0][0], _lost_metadata(bad[0][1], key))
    problems[:0] = [Problem(str(path), n, reason, skipped=True) for n, reason in bad]
    fmt = "nanobot-0.3" if extra or _names_storage_key(path.stem, key) else "nanobot-0.2"
    session = Session(
        key=key,
        messages=messages,
        created_at=times["created_at"],
        updated_at=times["updated_at"],
        metadata=metadata,
        last_consolidated=offset,
        path=path,
        format=fmt,
        records=extra,
        line_numbers=line_numbers,
    )
    return session, problems


def _legacy_session(path: Path, raw: bytes) -> tuple[Session | None, list[Problem]]:
    where = str(path)
    value, reason = _parse_line(raw)
    if reason is not None:
        return None, [Problem(where, None, f"legacy JSON session: {reason}")]
    if value is _BLANK:
        return None, [Problem(where, None, "empty file: no records")]
    if not isinstance(value, dict):
        return None, [Problem(where, None, f"legacy JSON session is {_json_type(value)}")]
    history = value.get("history", value.get("messages"))
    if not isinstance(history, list):
        return None, [Problem(where, None, "legacy JSON session has no 'history' list")]
    problems = [
        Problem(where, None, f"history[{i}] is JSON {_json_type(m)}, not an object")
        for i, m in enumerate(history)
        if not isinstance(m, dict)
    ]
    messages = [m for m in history if isinstance(m, dict)]
    key = value.get("key")
    offset = value.get("last_consolidated", 0)
    if "last_consolidated" in value and (reason := _offset_problem(offset, len(messages))):
        problems.append(Problem(where, None, reason))
    metadata = value.get("metadata", {})
    session = Session(
        key=key if isinstance(key, str) and key else key_from_filename(path),
        messages=messages,
        created_at=parse_timestamp(value.get("created_at")),
        updated_at=parse_timestamp(value.get("updated_at")),
        metadata=metadata if isinstance(metadata, dict) else {},
        last_consolidated=offset,
        path=path,
        format="legacy-json",
    )
    return session, problems


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(mode: int) -> str | None:
    """Why a file of this mode is not read, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"{kind}, not a regular file; not read"


def _stat_failure(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symlink loop; not read"
    if isinstance(exc, FileNotFoundError) and os.path.islink(path):
        return f"a dangling symlink (to {_BRIEF.repr(os.readlink(path))}); not read"
    return f"unreadable: {exc.strerror or exc}"


def _open_regular(path: Path) -> tuple[int | None, str | None]:
    """A read-only descriptor of ``path`` when it is a regular file, else why it is not read.

    The kind is checked before opening and again after: opening never blocks (a FIFO) nor
    touches a device.
    """
    try:
        reason = _not_regular(os.stat(path).st_mode)
        if reason:
            return None, reason
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return None, _stat_failure(path, exc)
    reason = _not_regular(os.fstat(fd).st_mode)
    if reason:
        os.close(fd)
        return None, reason
    return fd, None


def _mapped(fd: int) -> Any:
    """The file's bytes, memory-mapped (paged in as read, never copied whole); ``b""`` when empty."""
    size = os.fstat(fd).st_size
    return mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else b""


def read_session_file(path: str | Path) -> tuple[Session | None, list[Problem]]:
    """Load one session file (JSONL of any nanobot version, or legacy whole-file JSON).

    Returns the session (``None`` only when nothing in the file is usable) and the
    problems found.  Only regular files are opened; the file is memory-mapped and parsed
    line by line.  Never raises for damaged content or an unreadable file.
    """
    path = Path(path)
    fd, reason = _open_regular(path)
    if fd is None:
        return None, [Problem(str(path), None, reason or "not read")]
    try:
        buf = _mapped(fd)
    except (OSError, ValueError) as exc:
        os.close(fd)
        return None, [Problem(str(path), None, f"unreadable: cannot be memory-mapped ({exc})")]
    try:
        if path.suffix != ".json":
            return _jsonl_session(path, buf, fd)
        if len(buf) > MAX_LINE_BYTES:
            reason = (
                f"legacy JSON session of {len(buf):,} bytes is over {MAX_LINE_BYTES:,}; not read"
            )
            return None, [Problem(str(path), None, reason)]
        return _legacy_session(path, buf[:])
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()
        os.close(fd)
