"""What nanobot 0.2.2's ``SessionManager._load`` keeps of a session file, line by line.

nanobot reads the file as UTF-8 text, strips each line and parses it with ``json.loads``.  A
first pass stops at any error; a repair pass then skips lines that are not JSON.  Anything else
in either pass (a byte that is not UTF-8, a line that is JSON but not an object, a value
Python's ``json`` refuses) makes the load return ``None``: the whole session is lost, and
nanobot's next save of the key writes a fresh session over the file.  The repair pass also
returns ``None`` when it found no message and empty metadata.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO, cast

from sessionkit.nanobot.jsontext import loads_as_nanobot
from sessionkit.nanobot.reader import MAX_LINE_BYTES, split_batches

__all__ = [
    "LineVerdict",
    "LongLine",
    "NanobotLoad",
    "nanobot_load",
    "read_line",
    "split_lines",
]

_BLOCK = 1 << 20
"""Bytes read at a time.  A line over the reader's ``MAX_LINE_BYTES`` is not read: nanobot would
try to read it whole and most likely fail for lack of memory, losing the session, which is what
is reported for it."""


@dataclass(frozen=True)
class LineVerdict:
    """One line as nanobot reads it: ``status`` is blank, record, skipped or fatal."""

    status: str
    value: Any = None
    reason: str | None = None


@dataclass(frozen=True)
class NanobotLoad:
    """What nanobot 0.2.2 makes of a file; line numbers are 1-based.

    ``lost`` means ``_load`` returns ``None``.  ``skipped`` lines are dropped by the repair
    pass, ``fatal`` lines make the whole load fail; both are ``(line_no, reason)``.
    ``replaced`` names metadata values nanobot does not keep (a bad offset or timestamp).
    """

    lost: bool
    repaired: bool
    message_lines: tuple[int, ...]
    metadata_lines: tuple[int, ...]
    skipped: tuple[tuple[int, str], ...]
    fatal: tuple[tuple[int, str], ...]
    last_consolidated: int
    replaced: tuple[str, ...] = ()

    @property
    def damaged_lines(self) -> tuple[int, ...]:
        """Lines nanobot cannot load: the skipped and the fatal ones, in file order."""
        return tuple(sorted(n for n, _ in self.skipped + self.fatal))


class LongLine(bytes):
    """Stands in for a line over :data:`MAX_LINE_BYTES`, which is not read; ``size`` in bytes."""

    size: int

    def __new__(cls, size: int) -> LongLine:
        line = super().__new__(cls, b"")
        line.size = size
        return line


def split_lines(stream: BinaryIO, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    r"""The lines of a binary stream without their ends, split as Python's text mode splits.

    ``\n``, ``\r\n`` and a lone ``\r`` each end a line (:func:`~sessionkit.nanobot.reader.split_batches`,
    the reader's own splitter); a line over ``limit`` bytes is not kept but counted, and comes
    out as a :class:`LongLine`.
    """
    for batch in split_batches(stream.read, _BLOCK, limit):
        for line in batch:
            yield LongLine(line) if type(line) is int else line  # type: ignore[misc]  # ``type(line) is int`` does not narrow: an int became a LongLine


def _json_type(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def read_line(raw: bytes) -> LineVerdict:
    """How nanobot's loader treats one line: blank, a record, skipped by repair, or fatal.

    The same from any caller's stack: a line nested past what nanobot's ``json`` reads is
    fatal however much room the caller has left
    (:func:`~sessionkit.nanobot.jsontext.loads_as_nanobot`).
    """
    if isinstance(raw, LongLine):
        return LineVerdict("fatal", reason=f"a line of {raw.size:,} bytes, too long to read")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        return LineVerdict("fatal", reason=f"not valid UTF-8 (byte {exc.start})")
    if not text:
        return LineVerdict("blank")
    try:
        value = loads_as_nanobot(raw, text)
    except json.JSONDecodeError as exc:
        return LineVerdict("skipped", reason=f"not JSON: {exc.msg} (column {exc.colno})")
    except RecursionError:
        return LineVerdict("fatal", reason="JSON nested too deeply for Python's json")
    except ValueError as exc:
        return LineVerdict("fatal", reason=f"Python's json refuses it: {exc}")
    if not isinstance(value, dict):
        return LineVerdict("fatal", reason=f"JSON {_json_type(value)}, not an object")
    return LineVerdict("record", value=value)


def _bad_time(value: Any) -> bool:
    """Whether nanobot's first pass fails on this ``created_at``/``updated_at`` value."""
    if not value:
        return False
    try:
        datetime.fromisoformat(value)
    except (ValueError, TypeError):
        return True
    return False


def nanobot_load(lines: Iterable[bytes]) -> NanobotLoad:
    """What nanobot 0.2.2's ``SessionManager._load`` keeps of a file with these raw lines.

    ``lines`` come from :func:`split_lines` (line ends removed).
    """
    messages: list[int] = []
    metadata_lines: list[int] = []
    skipped: list[tuple[int, str]] = []
    fatal: list[tuple[int, str]] = []
    bad_times: list[str] = []
    metadata: Any = {}
    offset: Any = 0
    for line_no, raw in enumerate(lines, 1):
        verdict = read_line(raw)
        if verdict.status in ("skipped", "fatal"):
            reason = cast(str, verdict.reason)  # a skipped or fatal verdict always has one
            (skipped if verdict.status == "skipped" else fatal).append((line_no, reason))
        if verdict.status != "record":
            continue
        record = verdict.value
        if record.get("_type") != "metadata":
            messages.append(line_no)
            continue
        metadata_lines.append(line_no)
        metadata = record.get("metadata", {})
        offset = record.get("last_consolidated", 0)
        bad_times += [
            f"{field} {record[field]!r} (not ISO)"
            for field in ("created_at", "updated_at")
            if _bad_time(record.get(field))
        ]
    repaired = bool(skipped or fatal or bad_times)
    lost = bool(fatal) or (repaired and not messages and not metadata)
    valid = not isinstance(offset, bool) and isinstance(offset, int)
    kept_offset = offset if not lost and valid and 0 <= offset <= len(messages) else 0
    offset_reset = (f"last_consolidated {offset!r} (reset to 0)",) if offset != kept_offset else ()
    return NanobotLoad(
        lost=lost,
        repaired=repaired,
        message_lines=() if lost else tuple(messages),
        metadata_lines=() if lost else tuple(metadata_lines),
        skipped=tuple(skipped),
        fatal=tuple(fatal),
        last_consolidated=kept_offset,
        replaced=tuple(bad_times) + offset_reset,
    )
