"""Write sessions back as nanobot session files: nanobot's exact bytes, written atomically.

The layout is what nanobot 0.2.2's ``SessionManager.save`` writes: a metadata line, then one
line per message, each ``json.dumps(record, ensure_ascii=False)`` followed by ``\\n``.  Non-message
records (a later nanobot's ``provider_state``) go right after the metadata line.

Everything that can be checked (the key, its file name's length, the folder, the lock file,
an existing file) is checked before anything is written; errors name the key and the target
file.  The file is then written to a temporary file in the same folder (:data:`TEMP_NAME`),
flushed to disk and moved into place, so a reader (or a crash) sees either the old file or the
complete new one.  An existing file is only replaced on request, and a later nanobot's
``.session-files.lock`` is honoured without ever blocking past the timeout.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

from sessionkit.nanobot.naming import Naming, session_path
from sessionkit.nanobot.policies import SESSIONKIT_TEMP_NAME, get_policy
from sessionkit.nanobot.reader import file_kind
from sessionkit.nanobot.session import Session

__all__ = [
    "LOCK_FILENAME",
    "TEMP_NAME",
    "check_folder",
    "check_sessions_folder",
    "check_target",
    "jsonl_line",
    "save_session",
    "session_lines",
    "temp_name",
    "write_file",
]

LOCK_FILENAME = ".session-files.lock"
"""Advisory lock a later nanobot keeps in its sessions folder while it writes session files."""

TEMP_NAME = SESSIONKIT_TEMP_NAME
"""Name of a save's temporary file: ``.<first 64 bytes of the stem>.<12 hex digits>.tmp``.

A save removes it; only a crash (``kill -9``, power loss) mid-save leaves one behind.
"""

_TEMP_STEM_BYTES = 64

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
    """The bytes of ``session`` as a nanobot session file, laid out as its release writes it.

    A missing ``created_at``/``updated_at`` (``None``) becomes ``now`` (default: the current
    time), which is what nanobot writes for a session it loaded without them.  Lines held
    as they were read (``Session.held_lines``) go back unchanged, each before the message it
    preceded.
    """
    now = now or datetime.now()
    header = get_policy(session.policy).metadata_record(
        session.key,
        _isoformat(session.created_at, now, "created_at"),
        _isoformat(session.updated_at, now, "updated_at"),
        session.metadata,
        session.last_consolidated,
    )
    parts = [_line(header, "the metadata line", session.key)]
    parts += [_line(r, f"record {i}", session.key) for i, r in enumerate(session.records)]
    messages = [_line(m, f"message {i}", session.key) for i, m in enumerate(session.messages)]
    for position, text in reversed(session.held_lines):
        messages.insert(min(position, len(session.messages)), text.encode("utf-8") + b"\n")
    return b"".join(parts + messages)


def temp_name(stem: str) -> str:
    """A fresh :data:`TEMP_NAME` for ``stem``: at most 64 bytes of it, so the name stays short."""
    prefix = stem.encode("utf-8")[:_TEMP_STEM_BYTES].decode("utf-8", "ignore")
    return f".{prefix}.{secrets.token_hex(6)}.tmp"


_temp_name = temp_name


def _refusal(exc: OSError, key: str, final: Path, what: str) -> OSError:
    """``exc`` again, naming the session key and the target file instead of a temp file."""
    reason = exc.strerror or str(exc)
    return OSError(exc.errno, f"cannot save session {key!r}: {what}: {reason}", str(final))


def _check_folder(folder: Path, key: str, final: Path) -> None:
    """Refuse a folder that cannot take new files, before anything is written."""
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(
            errno.EACCES,
            f"cannot save session {key!r}: no permission to create files in {folder}",
            str(final),
        )
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        raise OSError(
            errno.EROFS,
            f"cannot save session {key!r}: {folder} is on a read-only file system",
            str(final),
        )


def _stored_key(path: Path) -> str | None:
    """The key of the session already stored in ``path``, when it can be read."""
    # Imported here: the reader may use this module's temp-file names.
    from sessionkit.nanobot.reader import read_session_file

    session, _ = read_session_file(path)
    return None if session is None else session.key


def _exists_error(path: Path, key: str) -> FileExistsError:
    stored = _stored_key(path) if path.is_file() else None
    held = "" if stored is None else f" and holds session {stored!r}"
    if stored is not None and stored != key:
        held += ", whose key maps to the same file name"
    return FileExistsError(
        errno.EEXIST,
        f"cannot save session {key!r}: the file already exists{held}; "
        "pass overwrite=True to replace it",
        str(path),
    )


def _lock_error(lock_path: Path, problem: str, saving: str) -> OSError:
    return OSError(
        errno.EINVAL,
        f"{saving}: the lock file {lock_path} {problem}; remove it (nanobot recreates it) "
        "and try again",
        str(lock_path),
    )


def _open_lock(lock_path: Path, saving: str) -> int | None:
    """An open descriptor on the folder's lock file, or None when there is none; never blocks."""
    try:
        mode = os.lstat(lock_path).st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(mode):
        raise _lock_error(lock_path, f"is a {file_kind(mode)}, not a regular file", saving)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(lock_path, flags)
    except FileNotFoundError:
        return None
    except PermissionError as exc:
        raise PermissionError(
            exc.errno, f"{saving}: no permission to open the lock file {lock_path}", str(lock_path)
        ) from exc
    except OSError as exc:
        raise _lock_error(lock_path, f"cannot be opened ({exc.strerror})", saving) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _lock_error(lock_path, "is not a regular file", saving)
    return fd


@contextmanager
def _folder_lock(folder: Path, timeout: float, saving: str) -> Iterator[None]:
    """Hold an exclusive flock on the folder's lock file, if any, waiting ``timeout`` s at most.

    The lock file is checked with ``lstat`` and opened non-blocking, so a FIFO or a device
    named like it is refused instead of hanging; ``saving`` starts every error message.
    """
    lock_path = folder / LOCK_FILENAME
    fd = _open_lock(lock_path, saving)
    if fd is None:
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
                        f"{saving}: {lock_path} stayed locked for {timeout:g} s (is nanobot writing "
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
        tmp = folder / _temp_name(stem)
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
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


def _move_into_place(tmp: Path, final: Path, overwrite: bool, key: str) -> None:
    """Rename ``tmp`` to ``final``; without ``overwrite``, never replace an existing file."""
    if overwrite:
        os.replace(tmp, final)
        return
    try:
        os.link(tmp, final)
    except FileExistsError:
        raise _exists_error(final, key) from None
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        # No hard links here: the existence check and rename can race; the lock narrows it.
        if os.path.lexists(final):
            raise _exists_error(final, key) from None
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


def check_target(final: Path, key: str, *, overwrite: bool = False) -> None:
    """Everything about writing ``key``'s file ``final`` that can be checked before writing.

    The folder, when it exists, must take new files; without ``overwrite`` the file must
    not exist.  Raises as :func:`save_session` does.
    """
    if final.parent.is_dir():
        _check_folder(final.parent, key, final)
    if not overwrite and os.path.lexists(final):
        raise _exists_error(final, key)


def write_file(
    final: Path,
    data: bytes,
    key: str,
    *,
    overwrite: bool = False,
    fsync: bool = True,
    lock_timeout: float = 60.0,
) -> Path:
    """Write ``data`` atomically as ``final`` (session ``key``'s file), all checks first.

    The folder must exist.  Folder permissions, the lock file and an existing file are
    checked before a temporary file is created; any later failure removes the temporary file
    and names ``key`` and ``final``, not the temporary file.
    """
    folder = final.parent
    _check_folder(folder, key, final)
    with _folder_lock(folder, lock_timeout, f"cannot save session {key!r} to {final}"):
        if not overwrite and os.path.lexists(final):
            raise _exists_error(final, key)
        try:
            tmp = _write_temp(folder, final.stem, data, fsync)
        except OSError as exc:
            raise _refusal(exc, key, final, "writing the temporary file failed") from exc
        try:
            _move_into_place(tmp, final, overwrite, key)
        except FileExistsError:
            tmp.unlink(missing_ok=True)
            raise
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise _refusal(exc, key, final, "moving the file into place failed") from exc
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if fsync:
            _fsync_folder(folder)
    return final


# What nanobot writes into every workspace it starts in (its templates and their folders).
WORKSPACE_MARKS = ("AGENTS.md", "SOUL.md", "USER.md", "HEARTBEAT.md", "memory", ".nanobot")


def _workspace_marks(folder: Path) -> list[str]:
    return [name for name in WORKSPACE_MARKS if os.path.lexists(folder / name)]


def _is_workspace(folder: Path) -> bool:
    """Whether ``folder`` holds two or more of the files nanobot puts in a workspace."""
    return len(_workspace_marks(folder)) >= 2


def check_folder(folder: Path, create: bool, *, what: str = "folder") -> None:
    """Refuse to write into ``folder`` when it does not exist and ``create`` is false: the
    user named a folder that is not there (a typo, a workspace path taken for another)."""
    if create or folder.is_dir():
        return
    raise FileNotFoundError(
        errno.ENOENT,
        f"{folder} does not exist, so nothing was written: name an existing {what}, or pass "
        "create=True (command line: --create) to make it",
        str(folder),
    )


def check_sessions_folder(folder: Path, create: bool) -> None:
    """:func:`check_folder` for a sessions folder, refusing also a workspace that has none
    (a fork written there would never be read: nanobot reads ``<workspace>/sessions``)."""
    if folder.is_dir() and folder.name != "sessions" and _is_workspace(folder):
        raise FileNotFoundError(
            errno.ENOENT,
            f"{folder} is a nanobot workspace ({', '.join(_workspace_marks(folder))}) without a "
            f"sessions folder, so nothing was written: nanobot reads sessions from "
            f"{folder / 'sessions'}; pass that folder, with create=True (command line: "
            "--create) to make it",
            str(folder / "sessions"),
        )
    check_folder(folder, create, what="sessions folder or workspace")


def save_session(
    session: Session,
    sessions_dir: str | Path,
    *,
    naming: Naming | None = None,
    overwrite: bool = False,
    fsync: bool = True,
    lock_timeout: float = 60.0,
    config_dir: str | Path | None = None,
    create: bool = False,
) -> Path:
    """Write ``session`` atomically as the file nanobot expects; return the file's path.

    The bytes are exactly those nanobot's own ``SessionManager.save`` writes for the same
    session.  The session object and every other file are left untouched.

    Parameters
    ----------
    session
        The session to write; its ``key`` names the file and goes in the metadata line.
    sessions_dir
        The sessions folder, or a nanobot workspace: its ``sessions/`` subfolder, or for a
        0.3.5 workspace (one holding ``.nanobot/workspace-id``) the folder 0.3.5 keeps its
        sessions in, ``<config_dir>/sessions/<workspace id>/``.  It must exist unless
        ``create`` is given (a mistyped path is refused, not made).
    naming
        ``"nanobot-0.2"``: the safe key (``telegram_123.jsonl``), as nanobot 0.1.5-0.2.2
        name files; ``"nanobot-0.3"``: the base64url storage key of later releases.  Default:
        the scheme of the session's release (``Session.policy``).
    overwrite
        Replace an existing file for the key.  Without it an existing file, even one that
        appears while this call runs, raises :class:`FileExistsError`.
    fsync
        Flush the file and the folder to disk before returning (nanobot does for forks).
    lock_timeout
        Seconds to wait for a later nanobot's ``.session-files.lock`` in the folder, which is
        held for the whole write; a :class:`TimeoutError` after that.
    config_dir
        The config file a 0.3.5 nanobot runs with, or its folder (default ``~/.nanobot``);
        used only for a 0.3.5 workspace.
    create
        Make the sessions folder (and its missing parents) when it does not exist.

    Raises
    ------
    FileNotFoundError
        When the sessions folder does not exist and ``create`` is false; nothing is written.
    UnsafeKeyError
        For a key that cannot name a file inside the folder: path-like, hidden, control
        characters, or a file name longer than the folder's file system takes.
    FileExistsError
        When the file exists and ``overwrite`` is false; the message names the session
        already stored there (``a:b``, ``a_b`` and ``a\\b`` share ``a_b.jsonl``).
    PermissionError
        When the folder or its lock file cannot be written or read.
    OSError
        For a lock file that is not a regular file, a read-only file system, or a failed
        write; every check comes before a temporary file exists, and errors name the key
        and the target file.
    """
    naming = naming or get_policy(session.policy).naming
    final = session_path(session.key, sessions_dir, naming, config_dir)
    check_sessions_folder(final.parent, create)
    data = session_lines(session)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _refusal(exc, session.key, final, "cannot create the sessions folder") from exc
    return write_file(
        final, data, session.key, overwrite=overwrite, fsync=fsync, lock_timeout=lock_timeout
    )
