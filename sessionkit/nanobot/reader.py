"""Read nanobot session stores: find the files, parse every format, record what is damaged.

Reading never writes.  A damaged line is skipped and reported as a :class:`Problem`; every
intact line is kept.  Where nanobot 0.2.2 loads a file, the result equals nanobot's load.
"""

from __future__ import annotations

import dataclasses
import errno
import glob
import json
import os
import re
import reprlib
import stat
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from itertools import compress, repeat
from operator import contains, methodcaller, not_
from pathlib import Path
from typing import Any, cast

import orjson

from sessionkit.nanobot.jsontext import (
    DEEP,
    LONG_NUMBER,
    NANOBOT_INT_DIGITS,
    SHAPE,
    TooDeep,
    exact_int,
    json_depth,
    loads_as_nanobot,
)
from sessionkit.nanobot.naming import (
    SessionPathError,
    key_from_filename,
    sessions_folder,
    storage_key,
)
from sessionkit.nanobot.policies import get_policy, temp_file_names
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.workspace import config_dir_hint, recorded_workspace

__all__ = [
    "MAX_LINE_BYTES",
    "NANOBOT_ROLES",
    "NOT_NANOBOT",
    "Problem",
    "SessionPathError",
    "FILE_KINDS",
    "file_kind",
    "find_session_files",
    "leftover_temp_files",
    "named_like_session",
    "parse_timestamp",
    "read_session_file",
    "sessions_folders_below",
    "unforeseen_failure",
    "workspace_of",
    "split_batches",
]

SESSION_SUFFIXES = (".jsonl", ".json")
CHECKPOINT_SUFFIX = ".checkpoint.json"
SIDECAR_NAMES = frozenset({".webui_session_index.json"})
"""Files 0.3.5 keeps beside its sessions that are not sessions (the WebUI's list index)."""
MAX_LINE_BYTES = 1 << 28
"""Longer lines are reported, not parsed (nanobot would need several times this in memory)."""
_GLOB_CHARS = frozenset("*?[")
_PATH = type(Path())
"""The concrete class ``Path(...)`` makes here: a path already of it is used as it is."""
_BRIEF = reprlib.Repr()
_BRIEF.maxstring = _BRIEF.maxother = 60


def _brief(value: Any) -> str:
    """A short repr of ``value`` for a problem's reason, even of an integer too long for
    Python's int-string limit (read from a line past ``json``'s limits)."""
    try:
        return _BRIEF.repr(value)
    except ValueError:
        if type(value) is int:
            return f"<an integer of about {int(value.bit_length() * 0.30103):,} digits>"
        return f"<a {type(value).__name__} holding an integer too long to show>"


@dataclass(frozen=True)
class Problem:
    """Something in a file that could not be loaded as it stands; ``line_no`` is 1-based.

    ``skipped`` marks a line left out whole (not JSON, not an object, not UTF-8, or past
    ``json``'s limits: such a line is held as it is, see ``Session.held_lines``), as opposed
    to a value that was replaced (a bad offset or timestamp).
    """

    path: str
    line_no: int | None
    reason: str
    skipped: bool = False


def named_like_session(name: str) -> bool:
    """Whether a folder entry's name is a session file's (not 0.3.5's sidecars: a turn's
    ``<stem>.checkpoint.json`` state, the WebUI's ``.webui_session_index.json``).  Its
    suffix is ``os.path.splitext``'s (only dots before it: none, as ``.jsonl``), told
    without splitting the name: a folder's every name is asked."""
    for suffix in SESSION_SUFFIXES:
        if name.endswith(suffix):
            return (
                name[: -len(suffix)].strip(".") != ""
                and not name.endswith(CHECKPOINT_SUFFIX)
                and name not in SIDECAR_NAMES
            )
    return False


def _session_files_in(folder: Path, folders: dict[Path, Path]) -> list[Path]:
    """Every entry named like a session, whatever its kind (reading reports what is not a
    file), in name order, as :func:`_identity` names it.  One listing gives each entry's
    kind, so a regular file costs no ``stat`` and the folder is resolved once."""
    with os.scandir(folder) as listing:
        found = sorted((e.name, _regular(e)) for e in listing if named_like_session(e.name))
    if not found:
        return []
    resolved = _resolved(folder, folders)
    return [
        resolved / name if regular else _identity(folder / name, folders) for name, regular in found
    ]


_NOT_SESSIONS = frozenset({"memory", "cron"})
"""Folders of a nanobot workspace or config dir whose JSON files are not sessions."""
_NAMESPACE = re.compile(r"[0-9a-f]{32}")


def sessions_folders_below(folder: Path, skip: Path | None = None) -> list[Path]:
    """Every folder at or below ``folder`` holding session files itself (a config dir's
    ``config.json`` aside), in path order: workspaces' ``sessions/``, 0.3.5 namespaces, bare
    sessions folders.  Hidden folders, a workspace's ``memory/`` and a config dir's ``cron/``
    are not searched, nor folders behind symlinks.  ``skip`` (a folder a load read, named from
    ``folder``) is not listed, nor searched when it lies below ``folder``."""
    found = []
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        dirs[:] = sorted(
            d for d in dirs if not d.startswith(".") and d not in _NOT_SESSIONS and here / d != skip
        )
        if here != skip and any(named_like_session(f) and f != "config.json" for f in files):
            found.append(here)
    return found


def workspace_of(folder: Path) -> Path:
    """The workspace a sessions folder belongs to: a ``sessions/`` folder's parent, the
    workspace a 0.3.5 namespace records (when it exists), else the folder itself."""
    if folder.name == "sessions":
        return folder.parent
    if _NAMESPACE.fullmatch(folder.name) and folder.parent.name == "sessions":
        recorded = recorded_workspace(folder)
        return recorded if recorded is not None and recorded.is_dir() else folder
    return folder


def _regular(entry: os.DirEntry[str]) -> bool:
    """Whether a folder entry is a regular file (not following links), from the listing's
    kind where it has one; False when that cannot be told (:func:`_identity` looks again)."""
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _expand(
    item: str | Path, config_dir: str | Path | None, folders: dict[Path, Path], recursive: bool
) -> list[Path]:
    """The files ``item`` names, each as :func:`_identity` names it (a folder's every
    sessions folder below when ``recursive``)."""
    path = Path(item).expanduser()
    if recursive and path.is_dir():
        files = [
            f for found in sessions_folders_below(path) for f in _session_files_in(found, folders)
        ]
        if not files:
            raise SessionPathError(f"{path} holds no session files (*.jsonl or *.json) below it")
        return files
    hint = config_dir_hint(path)
    if hint is not None:
        raise SessionPathError(hint)
    if path.is_dir():
        folder = sessions_folder(path, config_dir)
        files = _session_files_in(folder, folders)
        if not files:
            raise SessionPathError(f"{folder} holds no session files (*.jsonl or *.json)")
        return files
    if os.path.lexists(path):
        # a file, or a FIFO, device or broken link that reading will report
        return [_identity(path, folders)]
    if _GLOB_CHARS & set(str(item)):
        matches = sorted(Path(m) for m in glob.glob(str(path), recursive=True))
        files = [_identity(m, folders) for m in matches if m.suffix in SESSION_SUFFIXES]
        if not files:
            raise SessionPathError(f"glob {str(item)!r} matches no session files")
        return files
    raise SessionPathError(f"no such file or folder: {path}")


def _resolved(folder: Path, folders: dict[Path, Path]) -> Path:
    """``folder`` resolved, once per folder (``folders`` remembers)."""
    if folder not in folders:
        folders[folder] = folder.resolve()
    return folders[folder]


def _identity(path: Path, folders: dict[Path, Path]) -> Path:
    """A regular file's resolved path; anything else (FIFO, device, broken or looping link)
    stays as named, so its problem names the entry in the folder.  ``folders`` remembers
    resolved folders, so a plain file in one costs one ``lstat``."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return path.absolute()
    if stat.S_ISREG(mode):
        return _resolved(path.parent, folders) / path.name
    return path.resolve() if path.is_file() else path.absolute()


def _items(path: str | Path | list[str | Path] | tuple[str | Path, ...]) -> list[str | Path]:
    items = list(path) if isinstance(path, list | tuple) else [path]
    if not items:
        raise SessionPathError("no paths given")
    return items


def find_session_files(
    path: str | Path | list[str | Path] | tuple[str | Path, ...],
    config_dir: str | Path | None = None,
    recursive: bool = False,
) -> list[Path]:
    """Session files named by a workspace, a sessions folder, a file, a glob, or a list of these.

    A workspace's sessions folder is found by :func:`~sessionkit.nanobot.naming.sessions_folder`
    (0.3.5 workspaces through ``config_dir``); with ``recursive``, a folder's every sessions
    folder below (:func:`sessions_folders_below`).  Anything named like a session is listed, even when it is not a regular file
    (:func:`read_session_file` reports it).  Raises :class:`SessionPathError` naming the path
    that does not exist or is empty.
    """
    seen: dict[Path, None] = {}
    folders: dict[Path, Path] = {}
    for item in _items(path):
        seen.update(dict.fromkeys(_expand(item, config_dir, folders, recursive)))
    return list(seen)


def leftover_temp_files(
    path: str | Path | list[str | Path] | tuple[str | Path, ...],
    config_dir: str | Path | None = None,
    recursive: bool = False,
) -> list[Problem]:
    """One problem per temp file an interrupted save left in the folders ``path`` names (with
    ``recursive``, in every sessions folder below them)."""
    named = [p for p in (Path(i).expanduser() for i in _items(path)) if p.is_dir()]
    chosen = (
        [f for p in named for f in sessions_folders_below(p)]
        if recursive
        else [sessions_folder(p, config_dir) for p in named]
    )
    folders = {folder.absolute(): None for folder in chosen}
    found = []
    for folder in folders:
        with os.scandir(folder) as listing:
            found += temp_file_problems(folder, [e.name for e in listing])
    return found


def temp_file_problems(folder: Path, names: Iterable[str]) -> list[Problem]:
    """One problem per temp file among ``names`` (a listing of ``folder``, absolute), in
    name order."""
    return [
        Problem(
            str(folder / name),
            None,
            f"leftover temp file of an interrupted save ({_size(folder / name)}); not read",
        )
        for name in sorted(temp_file_names(names))
    ]


def _size(path: Path) -> str:
    try:
        return f"{os.lstat(path).st_size:,} bytes"
    except OSError:
        return "size unknown"


_CHUNK_BYTES = 1 << 24


def _chunk_size(size: int) -> int:
    """Bytes per read: the whole of a small file (``size`` bytes) at once, else ``_CHUNK_BYTES``."""
    return min(_CHUNK_BYTES, size + 1)


def _skip_hole(fd: int) -> int:
    """Move past a hole of a sparse file (zero bytes, so no line end) at the read position;
    returns the bytes skipped."""
    here = os.lseek(fd, 0, os.SEEK_CUR)
    try:
        data = os.lseek(fd, here, os.SEEK_DATA)
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            return 0  # holes unknown to this filesystem: read on
        data = os.lseek(fd, 0, os.SEEK_END)
    return data - here


def split_batches(
    read: Callable[[int], bytes],
    step: int,
    limit: int,
    skip_hole: Callable[[], int] | None = None,
) -> Iterator[list[bytes | int]]:
    r"""The lines ``read(step)`` gives, a chunk's worth at a time, without their ends, split as
    nanobot's text-mode reading splits (``\n``, ``\r\n`` and a lone ``\r`` end a line).

    A line over ``limit`` bytes is skipped unread and given as its size (an ``int``);
    ``skip_hole`` (when given) passes over a sparse file's hole inside such a line.
    """
    pending: list[bytes] = []  # the unfinished line, in pieces
    size = 0  # its bytes so far
    skipping = False  # the unfinished line is over the limit: counted, not kept
    held_cr = False  # a chunk's final \r waits for the next chunk (it may start with \n)
    while True:
        chunk = read(step)
        at_end = not chunk
        if held_cr:
            chunk = b"\r" + chunk
        held_cr = not at_end and chunk.endswith(b"\r")
        if held_cr:
            chunk = chunk[:-1]
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = chunk.split(b"\n")
        last = lines.pop()
        batch = cast("list[bytes | int]", lines)  # one list: an over-limit line, its int size
        if batch:
            first = lines[0]
            batch[0] = size + len(first) if skipping else b"".join((*pending, first))
            pending, size, skipping = [], 0, False
            if max(map(len, lines[1:]), default=0) > limit or (  # lines[1:]: bytes still
                type(batch[0]) is bytes and len(batch[0]) > limit
            ):
                batch = [len(x) if type(x) is bytes and len(x) > limit else x for x in batch]
            yield batch
        size += len(last)
        if not skipping and last:
            pending.append(last)
            if size > limit:
                pending, skipping = [], True
        if at_end:
            break
        if skipping and skip_hole is not None:
            size += skip_hole()
    if skipping:
        yield [size]
    elif pending:
        yield [b"".join(pending)]


def _read_batches(fd: int, size: int) -> Iterable[list[bytes | int]]:
    """A session file of ``size`` bytes' lines (:func:`split_batches`), over
    :data:`MAX_LINE_BYTES` unread; a small file's in one batch from one read."""
    step = _chunk_size(size)
    if step > size:
        whole = _whole_lines(fd, step)
        if whole is not None:
            return whole
    return split_batches(partial(os.read, fd), step, MAX_LINE_BYTES, partial(_skip_hole, fd))


def _whole_lines(fd: int, step: int) -> list[list[bytes | int]] | None:
    """A small file's lines (:func:`split_batches` of its bytes), from one read of ``step``
    bytes holding the whole file.  None (and the read position back at the start) when the
    file grew past that, so it is read chunk by chunk."""
    data = os.read(fd, step)
    if len(data) == step or (data and os.read(fd, step)):
        os.lseek(fd, 0, os.SEEK_SET)
        return None
    chunks = iter((data, b""))
    return list(split_batches(lambda _: next(chunks), step, MAX_LINE_BYTES))


_BLANK = object()
_SCALARS = frozenset({str, int, bool, type(None)})


def _as_json_reads(record: dict[str, Any], line: bytes) -> bool:
    """Whether orjson's ``record`` is what ``json`` reads from ``line``.

    A record of scalars is (one C-level pass over its values).  Otherwise the line must
    hold no 19-digit run (an integer orjson may have rounded to a float) and too few
    brackets to nest past ``json``'s limit.
    """
    return _SCALARS.issuperset(map(type, record.values())) or _line_reads_alike(line)


def _line_reads_alike(line: bytes) -> bool:
    """Whether ``line`` holds no 19-digit run and too few brackets to nest past ``json``'s
    limit, so orjson reads it as ``json`` does."""
    shape = line.translate(SHAPE)
    return shape.find(LONG_NUMBER) < 0 and shape.count(b"[") < DEEP


def _parse_line(line: bytes) -> tuple[Any, str | None]:
    """Parse one line as nanobot's ``json`` would: ``(value, None)``, ``(_BLANK, None)``,
    or a reason.  orjson parses; a line it refuses or may read differently goes through
    ``json``."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return _parse_with_json(line)
    return (value, None) if _as_json_reads({"": value}, line) else _parse_with_json(line)


_PAST_LIMITS = "valid JSON, but "
"""How the reason of every line past ``json``'s limits starts."""
_BEYOND_JSON = (
    _PAST_LIMITS + "{what}: nanobot 0.2.2 cannot parse this line, and its repair fails on it "
    "too and loses the whole session"
)
_DEEPER = "nested {depth} levels deep, deeper than Python's json reads on nanobot's stack"
_HELD = (
    "; sessionkit holds the line as it is: replays leave it out, and forks write it back unchanged"
)


def _parse_with_json(line: bytes) -> tuple[Any, str | None]:
    """:func:`_parse_line` through Python's ``json``, exactly as nanobot reads a line.

    A line that is valid JSON but past ``json``'s limits (an integer longer than Python's
    int-string limit, nesting deeper than nanobot's ``json`` reads) gives its reason *and*
    its value read with the limits lifted (None where sessionkit cannot read it either), so
    the caller can keep what nanobot cannot parse.  The answer never depends on the
    caller's stack depth (:func:`~sessionkit.nanobot.jsontext.loads_as_nanobot`).
    """
    try:
        text = line.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        return None, f"not valid UTF-8 (byte {exc.start})"
    if not text:
        return _BLANK, None
    try:
        return loads_as_nanobot(line, text), None
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg} (column {exc.colno})"
    except TooDeep as exc:
        depth = f"over {json_depth():,}" if exc.depth is None else exc.depth
        return exc.value, _BEYOND_JSON.format(what=_DEEPER.format(depth=depth))
    except ValueError:  # an integer past Python's int-string limit, as nanobot meets it
        limit = NANOBOT_INT_DIGITS
        what = f"an integer of more than {limit:,} digits, past Python's int-string limit"
        reason = _BEYOND_JSON.format(what=what)
    try:
        return loads_as_nanobot(line, text, parse_int=exact_int), reason
    except TooDeep as exc:
        return exc.value, reason
    except json.JSONDecodeError as exc:
        return None, (
            f"not JSON: {exc.msg} (column {exc.colno}), and before that {what}: nanobot 0.2.2 "
            "fails on the integer, which its repair does not skip, and loses the whole session"
        )


_VALUE_TYPES = partial(map, type)


def _exact_batch(values: list[Any], lines: list[bytes]) -> bool:
    """Whether orjson read every line of a batch to an object, as ``json`` would.

    The common record, all scalars, is settled by C-level maps alone.
    """
    if set(map(type, values)) - {dict}:
        return False
    plain = map(_SCALARS.issuperset, map(_VALUE_TYPES, map(methodcaller("values"), values)))
    return all(map(_line_reads_alike, compress(lines, map(not_, plain))))


@dataclass
class _Lines:
    """A session file's lines as read: the object ``records`` and their 1-based line
    ``numbers`` (a range when there is no gap); the ``bad`` lines left out, with a reason;
    the metadata lines ``kept`` although nanobot cannot parse them (valid JSON past
    ``json``'s limits), with the reason; and the other lines past those limits, ``held`` as
    ``(line_no, text)`` to be written back unchanged (each also among the bad ones); how
    many ``lines`` were read; and, when the messages went to a sink as read, what is
    ``streamed`` (then ``records`` holds only the records that are not messages)."""

    records: list[dict[str, Any]]
    numbers: Sequence[int]
    bad: list[tuple[int, str]]
    kept: list[tuple[int, str]]
    held: list[tuple[int, str]]
    lines: int = 0
    streamed: _Streamed | None = None


@dataclass
class _Streamed:
    """What a file's lines handed to a sink leave behind: how many messages, their line
    numbers, and the line of the first record of any kind (None: no record)."""

    count: int = 0
    numbers: list[int] = dataclasses.field(default_factory=list)
    first_line: int | None = None


Sink = Callable[[list[dict[str, Any]], list[int]], None]
"""Told each batch of a file's messages as it is read, with their line numbers."""
_KEPT_TYPES = ("metadata", "provider_state")
"""The kinds (``_type``) of records that are not messages."""


def _route(records: list[dict[str, Any]], numbers: list[int], kept: _Lines, sink: Sink) -> None:
    """A batch's messages to ``sink`` (and their count and lines to ``kept.streamed``), its
    other records kept in ``kept``."""
    streamed = kept.streamed
    if streamed.first_line is None and numbers:  # type: ignore[union-attr]  # a sink's _Lines has streamed
        streamed.first_line = numbers[0]  # type: ignore[union-attr]  # a sink's _Lines has streamed
    special = [
        i
        for i in compress(range(len(records)), map(contains, records, repeat("_type")))
        if records[i]["_type"] in _KEPT_TYPES
    ]
    if special:
        kept.records.extend(records[i] for i in special)
        kept.numbers.extend(numbers[i] for i in special)  # type: ignore[attr-defined]  # a list while lines are read
        keep = set(special)
        numbers = [n for i, n in enumerate(numbers) if i not in keep]
        records = [r for i, r in enumerate(records) if i not in keep]
    streamed.count += len(records)  # type: ignore[union-attr]  # a sink's _Lines has streamed
    streamed.numbers.extend(numbers)  # type: ignore[union-attr]  # a sink's _Lines has streamed
    sink(records, numbers)


def _parse_lines(
    fd: int, size: int, sink: Sink | None = None, lines: _Lines | None = None
) -> _Lines:
    """Every line of a session file (:class:`_Lines`).

    A batch of lines is parsed by orjson at once; only a batch holding a line that is not
    an object orjson reads as ``json`` does is taken line by line.  With a ``sink``, each
    batch's messages go to it as read and only the other records are kept
    (``_Lines.streamed`` tells of the messages), in ``lines`` when given: a sink sees the
    records kept before its batch there.
    """
    if sink is not None:
        found = lines or _Lines([], [], [], [], [], streamed=_Streamed())
        for records, numbers in _parsed_batches(fd, size, found):
            _route(records, numbers, found, sink)
        return found
    found = _Lines([], [], [], [], [])
    for records, numbers in _parsed_batches(fd, size, found):
        found.records.extend(records)
        found.numbers.extend(numbers)  # type: ignore[attr-defined]  # a list while lines are read
    if len(found.numbers) == found.lines:
        found.numbers = range(1, found.lines + 1)
    return found


def _parsed_batches(
    fd: int, size: int, found: _Lines
) -> Iterator[tuple[list[dict[str, Any]], list[int]]]:
    """Each batch of a file's lines parsed: its object records and their line numbers; the
    lines that are not records join ``found`` (bad, kept or held), and ``found.lines``
    becomes the count of lines read."""
    bad, kept, held = found.bad, found.kept, found.held
    loads: Callable[[Any], Any] = orjson.loads  # an over-long line's int: TypeError, caught
    line_no = 0
    for lines in _read_batches(fd, size):
        try:
            values = list(map(loads, lines))
        except (orjson.JSONDecodeError, TypeError):  # TypeError: an over-long line's size
            values = None
        if values is not None and _exact_batch(values, lines):  # type: ignore[arg-type]  # orjson read them all: no int (over-long line) among them
            yield values, list(range(line_no + 1, line_no + 1 + len(values)))
            line_no += len(values)
            continue
        records: list[dict[str, Any]] = []
        numbers: list[int] = []
        reason: str | None
        for line in lines:
            line_no += 1
            if type(line) is int:
                reason = f"line of {line:,} bytes is over {MAX_LINE_BYTES:,}; not read"
                bad.append((line_no, reason))
                continue
            value, reason = _parse_line(cast(bytes, line))  # an int went on above
            if reason is not None and reason.startswith(_PAST_LIMITS):
                if type(value) is dict and value.get("_type") == "metadata":
                    kept.append((line_no, f"{reason}; sessionkit keeps its metadata"))
                    reason = None
                else:
                    held.append((line_no, cast(bytes, line).decode("utf-8")))
                    reason += _HELD
            if type(value) is dict and reason is None:
                records.append(value)
                numbers.append(line_no)
            elif reason is not None:
                bad.append((line_no, reason))
            elif value is not _BLANK:
                bad.append((line_no, f"JSON {_json_type(value)}, not an object"))
        yield records, numbers
    found.lines = line_no


def _json_type(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def parse_timestamp(value: Any) -> datetime | None:
    """An ISO timestamp as nanobot reads it (``datetime.fromisoformat``); None if it is not one."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except (ValueError, TypeError):
        return None


def _time_problem(field: str, value: Any) -> str:
    """The reason for a metadata time ``value`` that is not a timestamp."""
    return f"metadata {field} {_brief(value)} is not an ISO timestamp"


def _offset_problem(value: Any, n_messages: int) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"last_consolidated {_brief(value)} is not an integer; using 0"
    if not 0 <= value <= n_messages:
        return f"last_consolidated {_brief(value)} is outside 0..{n_messages}; using 0"
    return None


def _lost_metadata(reason: str, key: str) -> str:
    """A damaged first line's reason, saying what losing the metadata record changes."""
    return (
        f"{reason}; no metadata record survives, so the key falls back to the file name "
        f"({_brief(key)}), last_consolidated is unknown (0 used), and the title and "
        "other metadata are lost"
    )


_STR = frozenset({str})


def _unencodable(what: str, text: Any) -> str | None:
    """Why ``text`` cannot be shown as it stands: a lone surrogate (JSON ``\\ud800``, or a
    file name's undecodable byte) that no UTF-8 output can hold; None for other values.
    The session keeps it as nanobot does; what shows it uses the escape."""
    if type(text) is not str:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        escaped = text.encode("utf-8", "backslashreplace").decode("utf-8")
        return f"{what} {text!r} is not valid Unicode (lone surrogate); kept, shown as {escaped}"
    return None


def _text_problems(
    where: str,
    key: str,
    metadata: Any,
    meta_line: int | None,
    messages: list[dict[str, Any]],
    line_numbers: Sequence[int],
) -> list[Problem]:
    """A problem for a key, title or role that holds a lone surrogate (the key and title
    first, then the roles: :func:`_role_problems`)."""
    title = metadata.get("title") if isinstance(metadata, dict) else None
    named = [text for text in (key, title) if type(text) is str]
    found = []
    try:
        "".join(named).encode("utf-8")
    except UnicodeEncodeError:
        found = [
            Problem(where, meta_line, reason)
            for what, text in (("session key", key), ("metadata title", title))
            if (reason := _unencodable(what, text))
        ]
    return found + _role_problems(where, messages, line_numbers)


def _role_problems(
    where: str, messages: list[dict[str, Any]], line_numbers: Sequence[int]
) -> list[Problem]:
    """A problem for each role that holds a lone surrogate; all roles are checked in one
    C-level pass when all are fine."""
    roles: list[Any] = list(map(dict.get, messages, repeat("role")))
    texts = roles if _STR.issuperset(map(type, roles)) else [r for r in roles if type(r) is str]
    try:
        "".join(texts).encode("utf-8")
    except UnicodeEncodeError:
        return [
            Problem(where, line_numbers[i], reason)
            for i, role in enumerate(roles)
            if (reason := _unencodable("role", role))
        ]
    return []


def _names_storage_key(stem: str, key: str) -> bool:
    """Whether ``stem`` is nanobot 0.3's base64url name for ``key`` (never for an unencodable key).

    A stem shorter than the base64 of ``key``'s fewest bytes (one a character) is not."""
    if len(stem) < (len(key) * 4 + 2) // 3:
        return False
    try:
        return stem == storage_key(key)
    except UnicodeEncodeError:
        return False


_WORKSPACE_ID = re.compile(r"[0-9a-f]{32}")


def _writer_release(
    where: str, fmt: str, metas: list[tuple[int, dict[str, Any]]], provider_state: bool
) -> str:
    """The release that wrote a session file, hence the policy it is replayed with.

    0.3.5: a metadata line with ``last_archived``, a ``provider_state`` record, or a file in
    0.3.5's ``sessions/<32-hex workspace id>/`` folder; 0.3.0: a base64url file name;
    otherwise 0.2 (safe-key names).  ``where`` is the file's path as ``str(Path)`` writes it
    (normalised), so its folders' names are read off the string.
    """
    folder = where.rpartition(os.sep)[0]
    above, _, name = folder.rpartition(os.sep)
    in_namespace = _WORKSPACE_ID.fullmatch(name) and above.rpartition(os.sep)[2] == "sessions"
    if provider_state or in_namespace or any("last_archived" in meta for _, meta in metas):
        return "nanobot-0.3.5"
    return "nanobot-0.3.0" if fmt == "nanobot-0.3" else "nanobot-0.2"


def _format_and_release(
    path: Path,
    where: str,
    key: str,
    metas: list[tuple[int, dict[str, Any]]],
    extra: list[dict[str, Any]],
) -> tuple[str, str]:
    """A session file's naming scheme (a 0.3 name, or provider state, is 0.3's) and the
    release that wrote it (:func:`_writer_release`), given its key."""
    fmt = "nanobot-0.3" if extra or _names_storage_key(path.stem, key) else "nanobot-0.2"
    return fmt, _writer_release(where, fmt, metas, bool(extra))


def _release_so_far(path: Path, where: str, records: list[dict[str, Any]]) -> str:
    """The release a file streamed in batches is known to be from the records other than
    messages read so far (its metadata and provider state), as :func:`_jsonl_session` finds
    it at the end."""
    metas = [(0, r) for r in records if r["_type"] == "metadata"]
    extra = [r for r in records if r["_type"] == "provider_state"]
    stored = metas[-1][1].get("key") if metas else None
    key = stored if isinstance(stored, str) and stored else key_from_filename(path)
    return _format_and_release(path, where, key, metas, extra)[1]


def _archive_offset(meta: dict[str, Any]) -> Any:
    """0.3.5's offset: ``last_archived``, else ``last_consolidated`` (the first integer)."""
    for field in ("last_archived", "last_consolidated"):
        value = meta.get(field)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return meta.get("last_consolidated", 0)


def runtime_checkpoint(path: Path | None) -> dict[str, Any] | None:
    """The 0.3.5 ``<stem>.checkpoint.json`` sidecar beside session file ``path``, parsed.

    The sidecar holds an unfinished turn's volatile state (``checkpoint``, the message count
    and ``updated_at`` it extends); None when there is none, it is not a regular file, or it
    is not a JSON object (0.3.5 then discards it too).
    """
    if path is None:
        return None
    sidecar = path.with_name(path.stem + CHECKPOINT_SUFFIX)
    try:
        if not stat.S_ISREG(sidecar.lstat().st_mode):
            return None
        value = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


_TIME_FIELDS = ("created_at", "updated_at")


def _meta_times(meta: dict[str, Any]) -> list[tuple[str, Any, datetime | None]]:
    """Each time field of a metadata record: its name, stored value and parsed time."""
    return [(field, value := meta.get(field), parse_timestamp(value)) for field in _TIME_FIELDS]


def _jsonl_session(
    path: Path, where: str, fd: int, size: int, sink: Sink | None = None
) -> tuple[Session, list[Problem]]:
    """A JSONL session file read; with a ``sink``, its messages go there as read, and the
    session returned holds none (only their line numbers)."""
    roles: list[Problem] = []
    spoken = [False]  # a streamed message had a nanobot role
    rewritten = [False]  # a streamed message was rewritten as its release loads it
    if sink is None:
        found = _parse_lines(fd, size)
    else:
        lines = _Lines([], [], [], [], [], streamed=_Streamed())

        def routed(messages: list[dict[str, Any]], line_numbers: list[int]) -> None:
            roles.extend(_role_problems(where, messages, line_numbers))
            spoken[0] = spoken[0] or _speaks_nanobot(messages)
            release = get_policy(_release_so_far(path, where, lines.records))
            rewritten[0] = release.rewrite_on_load(messages, {}) or rewritten[0]
            sink(messages, line_numbers)

        found = _parse_lines(fd, size, routed, lines)
    records, numbers, bad, kept = found.records, found.numbers, found.bad, found.kept
    metas: list[tuple[int, dict[str, Any]]] = []
    extra: list[dict[str, Any]] = []
    special: set[int] = set()
    for i in compress(range(len(records)), map(contains, records, repeat("_type"))):
        kind = records[i]["_type"]
        if kind == "metadata":
            metas.append((numbers[i], records[i]))
        elif kind == "provider_state":
            extra.append(records[i])
        else:
            continue
        special.add(i)
    streamed = found.streamed
    line_numbers: Sequence[int]
    if streamed is not None:
        messages, line_numbers = [], streamed.numbers
    elif not special:
        messages, line_numbers = records, numbers
    elif special == {0}:
        messages, line_numbers = records[1:], numbers[1:]
    else:
        keep = [i for i in range(len(records)) if i not in special]
        messages = [records[i] for i in keep]
        line_numbers = [numbers[i] for i in keep]

    # nanobot's strict load resets a time to None at a later metadata record lacking it;
    # its repair pass (taken once any line is damaged) keeps the earlier one.
    stamps = [_meta_times(meta) for _, meta in metas]
    repairing = bool(bad or kept) or any(
        value and parsed is None for fields in stamps for _, value, parsed in fields
    )
    problems: list[Problem] = []
    metadata: Any = {}
    times: dict[str, datetime | None] = {"created_at": None, "updated_at": None}
    offset: Any = 0
    stored_key: Any = None
    for (line_no, meta), fields in zip(metas, stamps, strict=True):
        metadata = meta.get("metadata", {})
        if not isinstance(metadata, dict):
            problems.append(
                Problem(where, line_no, f"metadata is JSON {_json_type(metadata)}, not an object")
            )
        for field, value, parsed in fields:
            if value and parsed is None:
                problems.append(Problem(where, line_no, _time_problem(field, value)))
            if parsed is not None or not repairing:
                times[field] = parsed
        offset = meta.get("last_consolidated", 0)
        stored_key = meta.get("key", stored_key)
    n_messages = len(messages) if streamed is None else streamed.count
    if metas:
        reason = _offset_problem(offset, n_messages)
        if reason:
            problems.append(Problem(where, metas[-1][0], reason))
    if not records and not n_messages and not bad:
        problems.append(Problem(where, None, "empty file: no records"))
    elif not (metas or extra or n_messages == 0 or _spoke(spoken[0], streamed, messages)):
        problems.append(Problem(where, None, _foreign_lines(n_messages)))

    key = stored_key if isinstance(stored_key, str) and stored_key else key_from_filename(path)
    if stored_key is not None and key != stored_key:
        problems.append(
            Problem(
                where,
                metas[-1][0],
                f"metadata key {_brief(stored_key)} is not a non-empty string; "
                f"using the file name ({_brief(key)})",
            )
        )
    meta_line = metas[-1][0] if metas else None
    problems += _text_problems(where, key, metadata, meta_line, messages, line_numbers) + roles
    first_line = streamed.first_line if streamed is not None else next(iter(numbers), None)
    first_damaged = bool(bad) and (first_line is None or bad[0][0] < first_line)
    if first_damaged and not metas:
        bad[0] = (bad[0][0], _lost_metadata(bad[0][1], key))
    if bad or kept:
        problems[:0] = [Problem(where, n, reason, skipped=True) for n, reason in bad]
        problems[len(bad) : len(bad)] = [Problem(where, n, reason) for n, reason in kept]
    fmt, policy = _format_and_release(path, where, key, metas, extra)
    release = get_policy(policy)
    loaded = metadata if isinstance(metadata, dict) else {}
    if release.rewrite_on_load(messages, loaded) or rewritten[0]:
        extra = release.records_after_clear(extra)
    if policy == "nanobot-0.3.5" and metas:
        offset = _archive_offset(metas[-1][1])
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
        policy=policy,
        held_lines=tuple((bisect_left(line_numbers, n), text) for n, text in found.held)
        if found.held
        else (),
    )
    if streamed is not None and _offset_problem(offset, n_messages) is None:
        session.last_consolidated = offset  # checked against the messages streamed, not kept
    return session, problems


NANOBOT_ROLES = frozenset({"user", "assistant", "tool", "system"})
"""The roles nanobot gives messages: a file none of whose messages has one is not nanobot's."""
NOT_NANOBOT = "not a nanobot session: "
"""How the reason of every file that is not a nanobot session starts."""


def _speaks_nanobot(messages: list[dict[str, Any]]) -> bool:
    """Whether any of ``messages`` has a nanobot role (usually the first does)."""
    return any(
        type(r) is str and r in NANOBOT_ROLES for r in map(dict.get, messages, repeat("role"))
    )


def _spoke(
    streamed_spoke: bool, streamed: _Streamed | None, messages: list[dict[str, Any]]
) -> bool:
    """Whether a file's messages (``messages``, or those ``streamed``) had a nanobot role."""
    return streamed_spoke if streamed is not None else _speaks_nanobot(messages)


def _foreign_lines(count: int) -> str:
    """Why a JSONL file with ``count`` records and no nanobot mark is not nanobot's."""
    return (
        f"{NOT_NANOBOT}no metadata record, and none of its {count:,} records has a nanobot role "
        f"({', '.join(sorted(NANOBOT_ROLES))}); kept as messages"
    )


def _legacy_session(path: Path, raw: bytes) -> tuple[Session | None, list[Problem]]:
    where = str(path)
    value, reason = _parse_line(raw)
    if reason is not None:
        return None, [Problem(where, None, f"legacy JSON session: {reason}")]
    if value is _BLANK:
        return None, [Problem(where, None, "empty file: no records")]
    if not isinstance(value, dict):
        reason = f"{NOT_NANOBOT}JSON {_json_type(value)}, where a legacy JSON session is an object"
        return None, [Problem(where, None, reason)]
    history = value.get("history", value.get("messages"))
    if not isinstance(history, list):
        reason = f"{NOT_NANOBOT}a JSON object with no 'history' list, which a legacy session holds"
        return None, [Problem(where, None, reason)]
    problems = [
        Problem(where, None, f"history[{i}] is JSON {_json_type(m)}, not an object")
        for i, m in enumerate(history)
        if not isinstance(m, dict)
    ]
    messages = [m for m in history if isinstance(m, dict)]
    if messages and not _speaks_nanobot(messages):
        reason = f"{NOT_NANOBOT}none of its {len(messages):,} history entries has a nanobot role"
        problems.append(Problem(where, None, f"{reason} ({', '.join(sorted(NANOBOT_ROLES))})"))
    key = value.get("key")
    offset = value.get("last_consolidated", 0)
    if "last_consolidated" in value and (reason := _offset_problem(offset, len(messages))):
        problems.append(Problem(where, None, reason))
    metadata = value.get("metadata", {})
    key = key if isinstance(key, str) and key else key_from_filename(path)
    problems += _text_problems(where, key, metadata, None, messages, [None] * len(messages))  # type: ignore[list-item]  # a JSON session file has no line numbers
    session = Session(
        key=key,
        messages=messages,
        created_at=parse_timestamp(value.get("created_at")),
        updated_at=parse_timestamp(value.get("updated_at")),
        metadata=metadata if isinstance(metadata, dict) else {},
        last_consolidated=offset,
        path=path,
        format="legacy-json",
    )
    return session, problems


FILE_KINDS = (
    (stat.S_ISDIR, "folder"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISLNK, "symlink"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)
"""What each kind of file that is not a regular file is called in every message."""


def file_kind(mode: int) -> str:
    """What kind of file an ``st_mode`` that is not a regular file's describes: ``"FIFO"``, ..."""
    return next((name for test, name in FILE_KINDS if test(mode)), "special file")


def _not_regular(mode: int) -> str | None:
    """Why a file of this mode is not read, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return f"a {file_kind(mode)}, not a regular file; not read"


def _stat_failure(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symlink loop; not read"
    if isinstance(exc, FileNotFoundError) and os.path.islink(path):
        return f"a dangling symlink (to {_brief(os.readlink(path))}); not read"
    return f"unreadable: {exc.strerror or exc}"


_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _open_regular(path: Path, where: str) -> tuple[int | None, int, str | None]:
    """A read-only descriptor of ``path`` (named ``where``) when it is a regular file, and
    its size; else why it is not read.

    The kind is checked before opening and again after: opening never blocks (a FIFO) nor
    touches a device.
    """
    try:
        reason = _not_regular(os.stat(where).st_mode)
        if reason:
            return None, 0, reason
        fd = os.open(where, _OPEN_FLAGS)
    except OSError as exc:
        return None, 0, _stat_failure(path, exc)
    found = os.fstat(fd)
    reason = _not_regular(found.st_mode)
    if reason:
        os.close(fd)
        return None, 0, reason
    return fd, found.st_size, None


def _read_whole(fd: int, known: int) -> bytes | None:
    """A legacy whole-file JSON session's bytes (``known``: its size when opened); None when
    over :data:`MAX_LINE_BYTES`."""
    parts: list[bytes] = []
    size = 0
    step = _chunk_size(known)
    while chunk := os.read(fd, step):
        size += len(chunk)
        if size > MAX_LINE_BYTES:
            return None
        parts.append(chunk)
    return b"".join(parts)


def unforeseen_failure(path: str | Path, exc: Exception) -> Problem:
    """The problem of a file whose reading failed in a way the reader did not foresee (a
    bug), so the failure costs that one file, never a whole load."""
    reason = f"not loaded: sessionkit failed reading it ({type(exc).__name__}: {exc!s:.200})"
    return Problem(str(path), None, reason)


def read_session_file(
    path: str | Path, sink: Sink | None = None
) -> tuple[Session | None, list[Problem]]:
    """Load one session file (JSONL of any nanobot version, or legacy whole-file JSON).

    Returns the session (``None`` only when nothing in the file is usable) and the
    problems found.  Only regular files are opened; lines are read a chunk at a time.
    With a ``sink`` (JSONL only), each batch of messages goes to it as read and the
    session holds none, only their line numbers (a huge file streamed, its messages
    never all in memory).  Never raises for damaged content or an unreadable file.
    """
    if type(path) is not _PATH:
        path = Path(path)
    where = str(path)
    fd, size, reason = _open_regular(path, where)
    if fd is None:
        return None, [Problem(where, None, reason or "not read")]
    try:
        if path.suffix != ".json":
            return _jsonl_session(path, where, fd, size, sink)
        if sink is not None:
            raise ValueError("only a JSONL session file is streamed")
        raw = _read_whole(fd, size)
        if raw is None:
            reason = f"legacy JSON session over {MAX_LINE_BYTES:,} bytes; not read"
            return None, [Problem(where, None, reason)]
        return _legacy_session(path, raw)
    except OSError as exc:
        return None, [Problem(where, None, f"unreadable: {exc.strerror or exc}")]
    finally:
        os.close(fd)
