"""Where sessionkit keeps what it persists between processes (the index, token counts), and
the one way it writes there."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

__all__ = ["default_cache_dir", "name_digest", "write_ipc"]


def name_digest(data: bytes | str) -> str:
    """A short stable name for ``data`` in the cache folder (32 hex digits of BLAKE2b)."""
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


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


def write_ipc(target: Path, schema: pa.Schema, parts: Iterable[pa.RecordBatch | pa.Table]) -> None:
    """Write an Arrow IPC file atomically: a temp file beside ``target``, then a rename, so a
    reader sees the old file or the new one.  Not fsynced: a cache file cut short by a crash
    is unreadable, and unreadable cache files are rebuilt."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        with pa.OSFile(str(temp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for part in parts:
                writer.write(part.replace_schema_metadata(schema.metadata))
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
