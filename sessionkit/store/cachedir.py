"""Where sessionkit keeps what it persists between processes (the index, token counts), and
the one way it writes there."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from sessionkit.store.integrity import seal

__all__ = [
    "cache_contents",
    "cache_dir_problem",
    "clear_cache_dir",
    "folder_size",
    "default_cache_dir",
    "make_private_dir",
    "name_digest",
    "persistence_on",
    "private_dir_problem",
    "remove_dead_temp_files",
    "write_ipc",
    "write_private",
]


def name_digest(data: bytes | str) -> str:
    """A short stable name for ``data`` in the cache folder (32 hex digits of BLAKE2b)."""
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


PERSISTENCE_ENV = "SESSIONKIT_CACHE"
"""sessionkit's one persistence switch: ``off`` (or ``0``, ``false``, ``no``) keeps nothing on
disk and reads nothing kept (index, token counts, replays, release kits), whatever a call's
``cache=`` says; with it on, ``cache=False`` does the same for one call and what derives
from it."""


def persistence_on(cache: object = None) -> bool:
    """Whether a call given ``cache`` persists: never when :data:`PERSISTENCE_ENV` is off,
    else unless ``cache`` is False (None: not given, True or a folder: on)."""
    value = os.environ.get(PERSISTENCE_ENV, "").strip().lower()
    return value not in {"off", "0", "false", "no"} and cache is not False


def default_cache_dir() -> Path:
    """``$SESSIONKIT_CACHE_DIR``, else the user cache folder (``$XDG_CACHE_HOME`` or
    ``~/.cache`` on Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows) plus
    ``sessionkit``."""
    chosen = os.environ.get("SESSIONKIT_CACHE_DIR")
    if chosen:
        return Path(chosen).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "sessionkit"
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(local) / "sessionkit" / "Cache"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sessionkit"


def make_private_dir(folder: Path) -> None:
    """Create ``folder`` and its missing parents readable by the user only (0700, set
    explicitly so no umask widens it): the cache holds the text of private conversations.
    Folders that already exist are left as they are."""
    missing = []
    for path in (folder, *folder.parents):
        if path.is_dir():
            break
        missing.append(path)
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        os.chmod(path, 0o700)


def cache_dir_problem(folder: Path) -> str | None:
    """Why ``folder`` (following symlinks) must not hold sessionkit's cache, else None: owned
    by another user, or writable by group or others without the sticky bit, so another
    account could plant or swap files that loads would trust.  A folder not there yet is
    fine (it is created 0700)."""
    try:
        found = os.stat(folder)
    except PermissionError as exc:
        return f"cannot be inspected ({exc.strerror})"
    except OSError:
        return None  # not there yet (created 0700), or under a file (writing fails)
    if not stat.S_ISDIR(found.st_mode) or os.name == "nt":
        return None  # not a folder: writing there fails, which costs speed only
    if found.st_uid != os.getuid():
        return f"is owned by another user (uid {found.st_uid})"
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not found.st_mode & stat.S_ISVTX:
        return f"is writable by other users (mode {stat.S_IMODE(found.st_mode):o}, no sticky bit)"
    return None


def private_dir_problem(folder: Path) -> str | None:
    """Make ``folder`` ready to hold private files (forks of conversations): created 0700
    (with any missing parents) when missing, else refused, with the reason, when another
    user owns it or group or others may write to it (sticky bit or not: anyone could read
    what lands there, or plant files).  None when it is fine."""
    problem = cache_dir_problem(folder)
    if problem is not None:
        return problem
    try:
        found = os.stat(folder)
    except FileNotFoundError:
        make_private_dir(folder)
        return None
    if os.name != "nt" and found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by other users (mode {stat.S_IMODE(found.st_mode):o})"
    return None


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0 checks without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process, or not a pid we can judge: leave it
    return True


def remove_dead_temp_files(folder: Path) -> int:
    """Remove the temp files :func:`write_ipc` left in ``folder`` when its writer died
    mid-write (``.<name>.<pid>.<ns>.tmp`` whose pid is no longer running); returns how
    many.  A live writer's temp file is left alone.  Skipped on Windows, where signal 0 is
    not a probe."""
    if os.name == "nt":
        return 0
    removed = 0
    try:
        found = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in found:
        name = entry.name
        if not (name.startswith(".") and name.endswith(".tmp")):
            continue
        parts = name[1:-4].rsplit(".", 2)
        if len(parts) != 3 or not parts[1].isdigit() or _pid_alive(int(parts[1])):
            continue
        try:
            os.unlink(entry.path)
            removed += 1
        except OSError:
            pass
    return removed


def write_ipc(
    target: Path,
    schema: pa.Schema,
    parts: Iterable[pa.RecordBatch | pa.Table],
    *,
    last: tuple[pa.RecordBatch, dict[bytes, str]] | None = None,
) -> int:
    """Write an Arrow IPC file atomically: a temp file beside ``target`` (created 0600, the
    user's only), sealed with its checksum (:func:`sessionkit.store.integrity.seal`), then a
    rename, so a reader sees the old file or the new one.  ``last``: a batch written after
    ``parts`` with its own custom metadata.  Not fsynced: a cache file cut short by a crash
    fails its seal, and such files are rebuilt.  Returns the checksum sealed."""
    make_private_dir(target.parent)
    temp = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            if os.name != "nt":
                os.fchmod(descriptor, 0o600)  # no umask decides who reads the cache
        finally:
            os.close(descriptor)
        with pa.OSFile(str(temp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for part in parts:
                writer.write(part)
            if last is not None:
                writer.write_batch(last[0], custom_metadata=last[1])
        checksum = seal(temp)
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return checksum


def write_private(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` atomically (a temp file beside it, created 0600, the
    user's only, then a rename), making its folder 0700 when missing; raises ``OSError``."""
    make_private_dir(target.parent)
    temp = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as sink:
            if os.name != "nt":
                os.fchmod(descriptor, 0o600)  # no umask decides who reads the cache
            sink.write(data)
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


_OWN_FOLDERS = re.compile(r"(index|tokens|kits|plans|answers)-\d+(-.*)?")
"""sessionkit's own folders in a cache folder: the index (``index-<format>-<version>``), the
token counts (``tokens-<format>``), the kits the releases gave (``kits-<format>``), the
experiments' plans (``plans-<format>-<version>``) and the models' answers to experiments
(``answers-<format>``), of this version or older ones.  Installed releases (``releases/``)
and forks are not among them."""
_KIND_OF_FOLDER = {
    "stores": "entries",
    "catalogs": "entries",
    "files": "entries",
    "replays": "replays",
}


def _own_files(root: Path) -> list[tuple[str, Path]]:
    """Every file sessionkit wrote in cache folder ``root``, with its kind: ``entries``,
    ``replays``, ``derived`` (window stacks), ``tokens``, ``kits``, ``plans``, ``answers`` or
    ``temp`` (a writer's temp file).
    Symlinks are not followed; anything else in ``root`` is not sessionkit's."""
    found = []
    try:
        children = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return []
    for child in children:
        if not child.is_dir(follow_symlinks=False) or not _OWN_FOLDERS.fullmatch(child.name):
            continue
        for folder, _, names in os.walk(child.path):
            for name in sorted(names):
                path = Path(folder, name)
                if name.startswith(".") and name.endswith(".tmp"):
                    kind = "temp"
                elif child.name.startswith(("tokens", "kits", "plans", "answers")):
                    kind = child.name.split("-", 1)[0]
                else:
                    kind = _KIND_OF_FOLDER.get(path.parent.name, path.parent.name)
                found.append((kind, path))
    return found


def cache_contents(root: Path) -> dict[str, tuple[int, int]]:
    """What sessionkit keeps in cache folder ``root``: (number of files, bytes) per kind
    (see :func:`_own_files`)."""
    contents: dict[str, tuple[int, int]] = {}
    for kind, path in _own_files(root):
        try:
            size = path.lstat().st_size
        except OSError:
            continue
        files, total = contents.get(kind, (0, 0))
        contents[kind] = (files + 1, total + size)
    return contents


def folder_size(folder: Path) -> tuple[int, int]:
    """(files, bytes) below ``folder`` (symlinks not followed; (0, 0) when it is missing)."""
    files = size = 0
    for parent, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(OSError):
                size += Path(parent, name).lstat().st_size
                files += 1
    return files, size


def clear_cache_dir(root: Path, *, answers: bool = False) -> tuple[int, int]:
    """Remove sessionkit's own files from cache folder ``root`` (the index, token counts and
    kits of every format and version, temp files included; the experiments' answers, which
    cost money to ask again, only with ``answers``) and their folders once empty; anything
    else there (installed releases, forks, the user's own files) stays.  Returns (files,
    bytes) removed."""
    removed = size = 0
    for kind, path in _own_files(root):
        if kind == "answers" and not answers:
            continue
        try:
            bytes_ = path.lstat().st_size
            path.unlink()
        except OSError:
            continue
        removed, size = removed + 1, size + bytes_
    for child in os.scandir(root) if root.is_dir() else ():
        if child.is_dir(follow_symlinks=False) and _OWN_FOLDERS.fullmatch(child.name):
            for folder, _, _ in sorted(os.walk(child.path), reverse=True):
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
    return removed, size
