"""Checks that keep a damaged cache from ever changing an answer.

Every file sessionkit persists (entry packs, replay packs, derived window stacks, token
counts) is an Arrow IPC file followed by a 20-byte seal: a magic tag, the XXH3 (64-bit)
digest of the Arrow bytes and their length (XXH3 reads about 19 GB/s here, CRC-32 2.4: a
warm open checks a store's whole pack).  :func:`open_sealed` checks the seal in Python
before pyarrow parses a single byte, because pyarrow trusts what it maps: flipped bits in
string offsets crash the process, and flipped bits in text or counts give wrong answers
silently.  A file that fails a check is reported once (:func:`discard`: a one-line warning)
and removed, so its entries are rebuilt from the session files and the next load reads a
good copy.
"""

from __future__ import annotations

import os
import struct
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import xxhash

from sessionkit.tuning import TUNING

__all__ = [
    "SEAL",
    "IntegrityError",
    "discard",
    "open_sealed",
    "open_sealed_checked",
    "open_sealed_checked_or_none",
    "read_sealed",
    "read_sealed_checked",
    "read_sealed_or_none",
    "seal",
]

_SEAL = struct.Struct("<4sQQ")
SEAL = _SEAL.size
"""Bytes of the seal after the Arrow bytes: magic, XXH3-64 digest and length of what it
covers."""
_MAGIC = b"SKX3"
T = TypeVar("T")


class IntegrityError(ValueError):
    """A cache file whose seal, layout or values do not check out: never trusted, rebuilt."""


def seal(path: Path) -> int:
    """Append the seal of ``path``'s current bytes (the file just written, not yet renamed
    into place), so a reader can tell it from any damaged or foreign copy; returns their
    checksum (what another file names to say it belongs with this one)."""
    digest, length = xxhash.xxh3_64(), 0
    with open(path, "r+b") as file:
        while chunk := file.read(1 << 22):
            digest.update(chunk)
            length += len(chunk)
        checksum = digest.intdigest()
        file.write(_SEAL.pack(_MAGIC, checksum, length))
    return checksum


def open_sealed(path: Path) -> tuple[pa.Buffer, int]:
    """``path``'s checked Arrow bytes and its inode (see :func:`open_sealed_checked`)."""
    body, inode, _ = open_sealed_checked(path)
    return body, inode


def open_sealed_checked(path: Path) -> tuple[pa.Buffer, int, int]:
    """``path``'s Arrow bytes, memory-mapped and checked against their seal before anything
    parses them, the file's inode (so :func:`discard` removes only this copy) and their
    checksum, computed once per file version and process (see :data:`_VERIFIED`).

    Raises OSError (FileNotFoundError: there is no file), :class:`IntegrityError` when the
    seal is missing, of another length or another checksum.
    """
    try:
        with pa.memory_map(str(path)) as source:  # maps the bytes; parses none of them
            found = os.fstat(source.fileno())
            whole = source.read_buffer()
    except OSError:
        raise  # not there, or not a file: nothing to trust, nothing damaged
    except pa.ArrowException as exc:
        raise IntegrityError(f"cannot be mapped ({type(exc).__name__})") from exc
    if whole.size < SEAL:
        raise IntegrityError(f"{whole.size} bytes, shorter than its seal")
    magic, checksum, length = _SEAL.unpack(memoryview(whole)[whole.size - SEAL :])
    if magic != _MAGIC or length != whole.size - SEAL:
        raise IntegrityError("no seal, or a seal for another length (cut short or appended to)")
    body = whole.slice(0, length)
    version = (found.st_size, found.st_mtime_ns, found.st_ctime_ns, checksum)
    if _VERIFIED.get((found.st_dev, found.st_ino)) != version:
        if xxhash.xxh3_64_intdigest(memoryview(body)) != checksum:
            raise IntegrityError("checksum mismatch")
        _remember(found, version)
    return body, found.st_ino, checksum


_VERIFIED: dict[tuple[int, int], tuple[int, int, int, int]] = {}
"""Files this process checked, by (device, inode): their size, mtime, ctime and checksum
then.  Any write moves ctime, so a file that still matches holds the bytes checked; opening
it again skips recomputing the checksum (a store reopened in one kernel)."""


def _remember(found: os.stat_result, version: tuple[int, int, int, int]) -> None:
    """Remember a file just checked, once its stamps are settled (see :attr:`~sessionkit.tuning.Tuning.racy_ns`)."""
    if time.time_ns() - max(found.st_mtime_ns, found.st_ctime_ns) < TUNING.racy_ns:
        return
    if len(_VERIFIED) >= 4096:
        _VERIFIED.clear()
    _VERIFIED[found.st_dev, found.st_ino] = version


def read_sealed(path: Path) -> tuple[pa.Table, int]:
    """The Arrow table in a sealed file (memory-mapped, zero-copy) and its inode, read only
    once its seal checks out (see :func:`open_sealed`); a file whose checked bytes pyarrow
    still cannot read raises :class:`IntegrityError` too."""
    body, inode = open_sealed(path)
    try:
        return pa.ipc.open_file(body).read_all(), inode
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise IntegrityError(f"unreadable Arrow file ({type(exc).__name__})") from exc


def read_sealed_or_none(path: Path) -> tuple[pa.Table, int] | None:
    """:func:`read_sealed`, or None when the file is missing, unreadable or damaged (a
    damaged one is removed with a warning, :func:`discard`, so it is rebuilt)."""
    return _or_none(read_sealed, path)


def read_sealed_checked(path: Path, check: Callable[[pa.Table], T]) -> T | None:
    """``check`` of the table in a sealed file: None when the file is missing, unreadable
    or damaged (see :func:`read_sealed_or_none`), or when ``check`` finds its values bad
    (raises :class:`IntegrityError`, or fails reading them): that file is removed with a
    warning (:func:`discard`).  ``check`` returns None for a file not for this use."""
    sealed = read_sealed_or_none(path)
    if sealed is None:
        return None
    table, inode = sealed
    try:
        return check(table)
    except (IntegrityError, pa.ArrowException, KeyError, TypeError, ValueError) as exc:
        discard(path, exc, inode)
        return None


def open_sealed_checked_or_none(path: Path) -> tuple[pa.Buffer, int, int] | None:
    """:func:`open_sealed_checked`, or None as :func:`read_sealed_or_none`."""
    return _or_none(open_sealed_checked, path)


def _or_none(read: Callable[[Path], T], path: Path) -> T | None:
    """``read(path)``, or None when the file is missing, unreadable or damaged (a damaged
    one is removed with a warning, :func:`discard`)."""
    try:
        return read(path)
    except FileNotFoundError:
        return None
    except IntegrityError as exc:
        discard(path, exc)
        return None
    except OSError:
        return None


def discard(path: Path, reason: object, inode: int | None = None) -> None:
    """Warn, in one line, that a cache file is damaged and will be rebuilt, and remove it
    (only the copy of ``inode``, when given: another process may have replaced it since)."""
    warnings.warn(
        f"sessionkit: damaged cache file {path} ({reason}); ignored and rebuilt from the "
        "session files",
        stacklevel=3,
    )
    try:
        if inode is None or os.stat(path).st_ino == inode:
            os.unlink(path)
    except OSError:
        pass
