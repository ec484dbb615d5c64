"""Read nanobot session stores: find the files, parse every format, record what is damaged.

Reading never writes.  A damaged line is skipped and reported as a :class:`Problem`; every
intact line is kept.  Where nanobot 0.2.2 loads a file, the result equals nanobot's load.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Sequence
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
    "Problem",
    "SessionPathError",
    "find_session_files",
    "parse_timestamp",
    "read_session_file",
]

SESSION_SUFFIXES = (".jsonl", ".json")
_GLOB_CHARS = frozenset("*?[")


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
    return sorted(p for p in folder.iterdir() if p.suffix in SESSION_SUFFIXES and p.is_file())


def _expand(item: str | Path) -> list[Path]:
    path = Path(item).expanduser()
    if path.is_file():
        return [path]
    if path.is_dir():
        folder = sessions_folder(path)
        files = _session_files_in(folder)
        if not files:
            raise SessionPathError(f"{folder} holds no session files (*.jsonl or *.json)")
        return files
    if _GLOB_CHARS & set(str(item)):
        matches = sorted(Path(m) for m in glob.glob(str(path), recursive=True) if Path(m).is_file())
        files = [m for m in matches if m.suffix in SESSION_SUFFIXES]
        if not files:
            raise SessionPathError(f"glob {str(item)!r} matches no session files")
        return files
    raise SessionPathError(f"no such file or folder: {path}")


def find_session_files(path: str | Path | list[str | Path] | tuple[str | Path, ...]) -> list[Path]:
    """Session files named by a workspace, a sessions folder, a file, a glob, or a list of these.

    A folder with a ``sessions/`` subfolder is a nanobot workspace and its ``sessions/`` is
    read.  Raises :class:`SessionPathError` naming the path that does not exist or is empty.
    """
    items = list(path) if isinstance(path, list | tuple) else [path]
    if not items:
        raise SessionPathError("no paths given")
    seen: dict[Path, None] = {}
    for item in items:
        for file in _expand(item):
            seen.setdefault(file.resolve(), None)
    return list(seen)


def _split_lines(raw: bytes) -> list[memoryview]:
    """The lines of a file as zero-copy views, split as nanobot's text-mode reading splits.

    Universal newlines: ``\n``, ``\r\n`` and a lone ``\r`` all end a line.
    """
    if b"\r" in raw:
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    view = memoryview(raw)
    find = raw.find
    lines: list[memoryview] = []
    start = 0
    while (end := find(b"\n", start)) >= 0:
        lines.append(view[start:end])
        start = end + 1
    if start < len(raw):
        lines.append(view[start:])
    return lines


_BLANK = object()


def _parse_line(line: bytes | memoryview) -> tuple[Any, str | None]:
    """Parse one line as nanobot would: ``(value, None)``, ``(_BLANK, None)``, or a reason."""
    try:
        return orjson.loads(line), None
    except orjson.JSONDecodeError:
        pass
    try:
        text = bytes(line).decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        return None, f"not valid UTF-8 (byte {exc.start})"
    if not text:
        return _BLANK, None
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg} (column {exc.colno})"
    except RecursionError:
        return None, "not JSON: nested too deeply"


def _parse_lines(raw: bytes) -> tuple[list[dict[str, Any]], Sequence[int], list[tuple[int, str]]]:
    """The object records, their 1-based line numbers, and the failed lines with a reason."""
    lines = _split_lines(raw)
    try:
        values = [orjson.loads(line) for line in lines]
    except orjson.JSONDecodeError:
        values = None
    if values is not None and set(map(type, values)) <= {dict}:
        return values, range(1, len(values) + 1), []
    records: list[dict[str, Any]] = []
    numbers: list[int] = []
    bad: list[tuple[int, str]] = []
    for line_no, line in enumerate(lines, 1):
        value, reason = _parse_line(line)
        if reason is not None:
            bad.append((line_no, reason))
        elif isinstance(value, dict):
            records.append(value)
            numbers.append(line_no)
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
        return f"metadata {field} {value!r} is not an ISO timestamp"
    return None


def _offset_problem(value: Any, n_messages: int) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"last_consolidated {value!r} is not an integer; using 0"
    if not 0 <= value <= n_messages:
        return f"last_consolidated {value} is outside 0..{n_messages}; using 0"
    return None


def _jsonl_session(path: Path, raw: bytes) -> tuple[Session, list[Problem]]:
    records, numbers, bad = _parse_lines(raw)
    problems = [Problem(str(path), n, reason, skipped=True) for n, reason in bad]
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
    fmt = "nanobot-0.3" if extra or path.stem == storage_key(key) else "nanobot-0.2"
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


def read_session_file(path: str | Path) -> tuple[Session | None, list[Problem]]:
    """Load one session file (JSONL of any nanobot version, or legacy whole-file JSON).

    Returns the session (``None`` only when nothing in the file is usable) and the
    problems found.  Never raises for damaged content or an unreadable file.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, [Problem(str(path), None, f"unreadable: {exc.strerror or exc}")]
    if path.suffix == ".json":
        return _legacy_session(path, raw)
    return _jsonl_session(path, raw)
