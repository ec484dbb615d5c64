"""Write sessions back as nanobot session files: nanobot's exact bytes, written atomically.

The layout is what nanobot 0.2.2's ``SessionManager.save`` writes: a metadata line, then one
line per message, each ``json.dumps(record, ensure_ascii=False)`` followed by ``\\n``.  Non-message
records (a later nanobot's ``provider_state``) go right after the metadata line.

A file is written to a temporary file in the same folder, flushed to disk, then moved into
place, so a reader (or a crash) sees either the old file or the complete new one.  An existing
file is only replaced on request, and a later nanobot's ``.session-files.lock`` is honoured.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

from sessionkit.nanobot.naming import Naming, session_path
from sessionkit.nanobot.session import Session

__all__ = ["LOCK_FILENAME", "jsonl_line", "save_session", "session_lines"]

LOCK_FILENAME = ".session-files.lock"
"""Advisory lock a later nanobot keeps in its sessions folder while it writes session files."""

# os.link errors meaning "this file system has no hard links", not "the target exists".
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS}


def _isoformat(value: datetime | None, now: datetime, field: str) -> str:
    if value is None:
        return now.isoformat()
    if not isinstance(value, datetime):
        raise TypeError(f"Session.{field} must be a datetime or None, got {type(value).__name__}")
    return value.isoformat()


def jsonl_line(record: Any) -> str:
    """One record as a line of a nanobot session file (``json.dumps``, non-ASCII kept)."""
    return json.dumps(record, ensure_ascii=False) + "\n"


def _line(record: Any, what: str, key: str) -> bytes:
    try:
        return jsonl_line(record).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"session {key!r}: {what} holds text that is not valid Unicode ({exc.reason})"
        ) from exc
    except (TypeError, ValueError) as exc:
        raise ValueError(f"session {key!r}: {what} is not JSON-serialisable: {exc}") from exc


def session_lines(session: Session, *, now: datetime | None = None) -> bytes:
    """The bytes of ``session`` as a nanobot session file.

    A missing ``created_at``/``updated_at`` (``None``) becomes ``now`` (default: the current
    time), which is what nanobot writes for a session it loaded without them.
    """
    now = now or datetime.now()
    header = {
        "_type": "metadata",
        "key": session.key,
        "created_at": _isoformat(session.created_at, now, "created_at"),
        "updated_at": _isoformat(session.updated_at, now, "updated_at"),
        "metadata": session.metadata,
        "last_consolidated": session.last_consolidated,
    }
    parts = [_line(header, "the metadata line", session.key)]
    parts += [_line(r, f"record {i}", session.key) for i, r in enumerate(session.records)]
    parts += [_line(m, f"message {i}", session.key) for i, m in enumerate(session.messages)]
    return b"".join(parts)


@contextmanager
def _folder_lock(folder: Path, timeout: float) -> Iterator[None]:
    """Hold an exclusive flock on the folder's lock file, when the file exists."""
    lock_path = folder / LOCK_FILENAME
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield
        return
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"{lock_path} stayed locked for {timeout:g} s (is nanobot writing "
                        "sessions?); try again later or raise lock_timeout"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _write_temp(folder: Path, stem: str, data: bytes, fsync: bool) -> Path:
    """Write ``data`` to a new hidden temporary file in ``folder`` and return its path."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    while True:
        tmp = folder / f".{stem[:64]}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
        except PermissionError as exc:
            raise PermissionError(
                exc.errno, "no permission to create files in the sessions folder", str(folder)
            ) from exc
    try:
        with open(fd, "wb", closefd=True) as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _exists_error(path: Path) -> FileExistsError:
    return FileExistsError(
        errno.EEXIST,
        "session file already exists; pass overwrite=True to replace it",
        str(path),
    )


def _move_into_place(tmp: Path, final: Path, overwrite: bool) -> None:
    """Rename ``tmp`` to ``final``; without ``overwrite``, never replace an existing file."""
    if overwrite:
        os.replace(tmp, final)
        return
    try:
        os.link(tmp, final)
    except FileExistsError:
        raise _exists_error(final) from None
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        # No hard links here: the existence check and rename can race; the lock narrows it.
        if os.path.lexists(final):
            raise _exists_error(final) from None
        os.replace(tmp, final)
        return
    tmp.unlink()


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable; skipped where folders cannot be opened or fsynced."""
    with suppress(PermissionError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
        finally:
            os.close(fd)


def save_session(
    session: Session,
    sessions_dir: str | Path,
    *,
    naming: Naming = "nanobot-0.2",
    overwrite: bool = False,
    fsync: bool = True,
    lock_timeout: float = 60.0,
) -> Path:
    """Write ``session`` atomically as the file nanobot expects; return the file's path.

    The bytes are exactly those nanobot's own ``SessionManager.save`` writes for the same
    session.  The session object and every other file are left untouched.

    Parameters
    ----------
    session
        The session to write; its ``key`` names the file and goes in the metadata line.
    sessions_dir
        The sessions folder, or a nanobot workspace (then its ``sessions/`` subfolder).
        Created if missing, as nanobot does.
    naming
        ``"nanobot-0.2"``: the safe key (``telegram_123.jsonl``), as nanobot 0.1.5-0.2.2
        name files; ``"nanobot-0.3"``: the base64url storage key of later releases.
    overwrite
        Replace an existing file for the key.  Without it an existing file, even one that
        appears while this call runs, raises :class:`FileExistsError`.
    fsync
        Flush the file and the folder to disk before returning (nanobot does for forks).
    lock_timeout
        Seconds to wait for a later nanobot's ``.session-files.lock`` in the folder, which is
        held for the whole write; a :class:`TimeoutError` after that.

    Raises
    ------
    UnsafeKeyError
        For a key that cannot name a file inside the folder.
    FileExistsError
        When the file exists and ``overwrite`` is false.
    PermissionError
        When the folder cannot be written.
    """
    final = session_path(session.key, sessions_dir, naming)
    folder = final.parent
    data = session_lines(session)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except PermissionError as exc:
        raise PermissionError(exc.errno, "cannot create the sessions folder", str(folder)) from exc
    with _folder_lock(folder, lock_timeout):
        if not overwrite and os.path.lexists(final):
            raise _exists_error(final)
        tmp = _write_temp(folder, final.stem, data, fsync)
        try:
            _move_into_place(tmp, final, overwrite)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if fsync:
            _fsync_folder(folder)
    return final
