"""``sessionkit doctor``: what nanobot would lose from a session store, and the mend.

:func:`doctor` reports, one row per file, what nanobot 0.2.2 loses (the whole session or some
lines, which its next save of the key then overwrites) against what sessionkit keeps, plus
leftover temporary files and anything else named like a session that is not a regular file.
Each session file is described in the terms of the release that wrote it (its ``policy``):
the loss rule is known for nanobot 0.2.2 only (:mod:`sessionkit.nanobot.loss`), so a file a
later release wrote is not measured against it; its row says so.  0.3.5's
``<stem>.checkpoint.json`` sidecars are not sessions and are not listed.

:func:`fix` rewrites each file with lines nanobot cannot load, atomically, into the lines it
loads (each kept line's text unchanged but for surrounding whitespace), and moves leftover
temporary files out.  Values nanobot replaces (a bad offset or timestamp) are reported, not
changed: the intended value cannot be known.  The
original file and its damaged lines go to a backup folder, by default
``<parent of the sessions folder>/sessionkit-doctor-backup-<YYYYmmdd-HHMMSS>/``: never inside
the folder nanobot reads, and never deleted.  A second run changes nothing.  Run it while
nanobot is stopped: nanobot 0.2.2 takes no lock while it saves.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from operator import methodcaller
from pathlib import Path
from typing import BinaryIO

import pandas as pd

from sessionkit.nanobot.loss import LongLine, NanobotLoad, nanobot_load, read_line, split_lines
from sessionkit.nanobot.naming import key_from_filename, sessions_folder
from sessionkit.nanobot.placement import placement_problem
from sessionkit.nanobot.policies import POLICIES, get_policy, is_temp_file
from sessionkit.nanobot.reader import (
    SessionPathError,
    file_kind,
    named_like_session,
    read_session_file,
)
from sessionkit.nanobot.workspace import config_dir_hint
from sessionkit.nanobot.writer import LOCK_FILENAME, check_folder, temp_name, write_file
from sessionkit.store.sources import check_source

__all__ = [
    "COLUMNS",
    "LOSS_RULE_POLICY",
    "LOSS_RULE_RELEASE",
    "doctor",
    "fix",
    "has_problems",
    "loser",
]

LOSS_RULE_POLICY = next(name for name, release in POLICIES.items() if release.loss_rule)
"""The policy whose release's loader :mod:`sessionkit.nanobot.loss` reproduces (an unreadable
file is described in its terms)."""
LOSS_RULE_RELEASE = get_policy(LOSS_RULE_POLICY).label
"""That release, as :mod:`sessionkit.nanobot.loss` names it."""


def loser(policy: str) -> str:
    """Who ``doctor`` says loses a file of ``policy``: the release's label where its loss rule
    is known, else the policy's name (``""`` for a file no release wrote)."""
    release = POLICIES.get(policy)
    return release.label if release is not None and release.loss_rule else policy


COLUMNS = [
    "file",
    "kind",
    "policy",
    "nanobot_keeps",
    "sessionkit_keeps",
    "nanobot_loses",
    "next_save_overwrites",
    "problems",
    "fix",
    "path",
]
"""Columns of :func:`doctor`'s frame.

``policy`` is the release that wrote a session file (as ``Session.policy``; ``""`` for temp
files and oddities).  ``nanobot_keeps``/``sessionkit_keeps`` count the messages each loads
(``nanobot_keeps`` is missing where nanobot loses the whole session, does not read the file,
or wrote it with a release whose loss rule is not known); ``next_save_overwrites`` is true when
nanobot's next save of the key writes the file without what it lost; ``fix`` says what
:func:`fix` does (``""`` for nothing, ``"by hand: ..."`` for what it leaves to you).
"""

_REWRITE = "rewrite without {lines} (kept in the backup)"
_MOVE = "move to the backup folder"


@dataclass(frozen=True)
class _Row:
    """One file's diagnosis; ``load`` and ``key`` are set for the session files nanobot reads."""

    path: Path
    kind: str
    policy: str = ""
    nanobot_keeps: int | None = None
    sessionkit_keeps: int | None = None
    nanobot_loses: str = ""
    next_save_overwrites: bool = False
    problems: str = ""
    fix: str = ""
    load: NanobotLoad | None = None
    key: str = ""


def _lines_text(numbers: Sequence[int]) -> str:
    """``line 3`` or ``lines 3, 7``."""
    return f"line{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))}"


def _nanobot_loses(load: NanobotLoad) -> str:
    if load.lost and load.fatal:
        line_no, reason = load.fatal[0]
        return f"whole session (line {line_no}: {reason})"
    if load.lost:
        return "whole session (no message and empty metadata after skipping bad lines)"
    lost = list(load.replaced)
    if load.skipped:
        lost.insert(0, f"{_lines_text([n for n, _ in load.skipped])} (not JSON)")
    return "; ".join(lost) or "nothing"


def _load(path: Path) -> NanobotLoad:
    with open(path, "rb") as stream:
        return nanobot_load(split_lines(stream))


def _session_row(path: Path, config_dir: str | Path | None) -> _Row:
    session, problems = read_session_file(path)
    kept = None if session is None else len(session.messages) + len(session.records)
    reasons = [p.reason if p.line_no is None else f"line {p.line_no}: {p.reason}" for p in problems]
    if path.name.startswith("."):
        reasons.append(
            "hidden file name, as a path-like key makes; sessionkit now refuses such keys"
        )
    policy = session.policy if session is not None else LOSS_RULE_POLICY
    unread = None if session is None else placement_problem(path, session.key, policy, config_dir)
    text = "; ".join([*reasons, unread] if unread else reasons)
    if unread:
        return _Row(
            path,
            "session",
            policy=policy,
            sessionkit_keeps=kept,
            nanobot_loses=f"whole session ({unread})",
            problems=text,
        )
    if not get_policy(policy).loss_rule:
        return _Row(
            path,
            "session",
            policy=policy,
            sessionkit_keeps=kept,
            nanobot_loses=f"not known (only {LOSS_RULE_RELEASE}'s loss rule is known)",
            problems=text,
        )
    if path.suffix != ".jsonl":
        return _Row(
            path,
            "legacy JSON session",
            policy=policy,
            sessionkit_keeps=kept,
            nanobot_loses="not read: nanobot 0.2.2 reads only .jsonl files",
            problems=text,
        )
    try:
        load = _load(path)
    except OSError as exc:
        return _Row(
            path,
            "session",
            policy=policy,
            sessionkit_keeps=kept,
            nanobot_loses=f"whole session (unreadable: {exc.strerror or exc})",
            next_save_overwrites=True,
            problems=text,
            fix="by hand: make the file readable",
        )
    damaged = load.damaged_lines
    fix = ""
    if damaged:
        fix = _REWRITE.format(lines=_lines_text(damaged))
        if path.is_symlink():
            fix = "by hand: a symlink; run doctor on the file it points to"
    return _Row(
        path,
        "session",
        policy=policy,
        nanobot_keeps=None if load.lost else len(load.message_lines),
        sessionkit_keeps=kept,
        nanobot_loses=_nanobot_loses(load),
        next_save_overwrites=load.lost or bool(load.skipped or load.replaced),
        problems=text,
        fix=fix,
        load=load,
        key=session.key if session is not None else key_from_filename(path),
    )


def _row(path: Path, config_dir: str | Path | None) -> _Row | None:
    """The row for a session file, a leftover temp file or an oddity; None for other files."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None
    if is_temp_file(path) and stat.S_ISREG(mode):
        return _Row(
            path,
            "temp file",
            problems="left by a save that crashed; not a session",
            fix=_MOVE,
        )
    if path.name == LOCK_FILENAME:
        if stat.S_ISREG(mode):
            return None
        return _Row(
            path,
            "lock file",
            problems=f"a {file_kind(mode)}, not a regular file: sessionkit refuses to save here",
            fix="by hand: remove it (nanobot recreates it)",
        )
    if not named_like_session(path.name):
        return None
    if stat.S_ISLNK(mode):
        try:
            mode = path.stat().st_mode
        except OSError as exc:
            return _Row(
                path,
                "broken symlink",
                problems=f"a symlink that leads nowhere ({exc.strerror}); no session loads",
                fix="by hand: remove it or point it at a session file",
            )
    if stat.S_ISREG(mode):
        return _session_row(path, config_dir)
    return _Row(
        path,
        file_kind(mode),
        problems=f"named like a session but a {file_kind(mode)}; no session loads from it",
        fix="by hand: move it out of the sessions folder",
    )


def _entries(path: str | Path, config_dir: str | Path | None) -> tuple[Path, list[Path]]:
    """The sessions folder and the entries to examine in it (or the one file named)."""
    check_source(path)
    target = Path(path).expanduser()
    hint = config_dir_hint(target)
    if hint is not None:
        raise SessionPathError(hint)
    if target.is_dir():
        folder = sessions_folder(target, config_dir)
        return folder, sorted(folder.iterdir())
    if os.path.lexists(target):
        return target.parent, [target]
    raise SessionPathError(f"no such file or folder: {target}")


def _rows(path: str | Path, config_dir: str | Path | None = None) -> tuple[Path, list[_Row]]:
    folder, entries = _entries(path, config_dir)
    rows = [row for entry in entries if (row := _row(entry, config_dir)) is not None]
    if not rows:
        raise SessionPathError(
            f"{folder} holds no session files (*.jsonl or *.json) and no leftover temp files"
        )
    return folder, rows


def _frame(rows: list[_Row]) -> pd.DataFrame:
    records = [
        {
            "file": row.path.name,
            "kind": row.kind,
            "policy": row.policy,
            "nanobot_keeps": row.nanobot_keeps,
            "sessionkit_keeps": row.sessionkit_keeps,
            "nanobot_loses": row.nanobot_loses,
            "next_save_overwrites": row.next_save_overwrites,
            "problems": row.problems,
            "fix": row.fix,
            "path": str(row.path),
        }
        for row in rows
    ]
    frame = pd.DataFrame(records, columns=COLUMNS)
    return frame.astype(
        {
            "nanobot_keeps": "Int64",
            "sessionkit_keeps": "Int64",
            "next_save_overwrites": "bool",
        }
    )


def doctor(path: str | Path, *, config_dir: str | Path | None = None) -> pd.DataFrame:
    """One row per session file, temp file or oddity in a sessions folder (see :data:`COLUMNS`).

    ``path`` is a workspace, a sessions folder or one file; a 0.3.5 workspace's sessions
    folder is found through ``config_dir`` (the config file or its folder, as for
    :func:`sessionkit.load`).  Nothing is written.

    Raises
    ------
    SessionPathError
        When ``path`` is missing, is not a session store (an empty string, a file not named
        ``.jsonl``/``.json``), or names a folder with nothing to examine.
    """
    return _frame(_rows(path, config_dir)[1])


def has_problems(report: pd.DataFrame) -> bool:
    """Whether a :func:`doctor` frame shows anything wrong: a file nanobot would lose data
    from, a recorded problem (a damaged line, a temp file, an oddity) or something to fix."""
    return bool(
        report["next_save_overwrites"].any()
        or report["problems"].astype(bool).any()
        or report["fix"].astype(bool).any()
    )


def _backup_folder(folder: Path, backup_dir: str | Path | None, create: bool) -> Path:
    """The backup folder, created; refused when inside the sessions folder, or when the
    folder named to hold it is not there and ``create`` is false."""
    if backup_dir is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        backup = folder.resolve().parent / f"sessionkit-doctor-backup-{stamp}"
    else:
        backup = Path(backup_dir).expanduser()
    if backup.resolve().is_relative_to(folder.resolve()):
        raise ValueError(
            f"the backup folder {backup} is inside the sessions folder {folder}, where nanobot "
            "would read it; choose one outside"
        )
    check_folder(backup.parent, create)
    backup.mkdir(parents=create, exist_ok=True)
    return backup


def _fresh(backup: Path, name: str) -> Path:
    """A path in ``backup`` for ``name`` that holds nothing yet."""
    candidate, n = backup / name, 1
    while os.path.lexists(candidate):
        candidate, n = backup / f"{name}.{n}", n + 1
    return candidate


def _write_new(path: Path, fill: Callable[[BinaryIO], object]) -> None:
    """Make the new file ``path`` through a temporary file beside it: ``fill`` writes the
    bytes, which are flushed to disk before the temporary file takes the name.  On any
    failure nothing is left at ``path`` and the temporary file is removed."""
    tmp = path.with_name(temp_name(path.name))
    try:
        with open(tmp, "xb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)  # never replaces: ``path`` is fresh
    finally:
        tmp.unlink(missing_ok=True)


def _copy_of(source: Path) -> Callable[[BinaryIO], object]:
    def fill(target: BinaryIO) -> None:
        with open(source, "rb") as f:
            shutil.copyfileobj(f, target)

    return fill


def _failure(exc: OSError, what: str, path: Path) -> OSError:
    """``exc`` as one line naming what failed and the file that is left as it was."""
    reason = "disk full (no space left on device)" if exc.errno == errno.ENOSPC else None
    reason = reason or exc.strerror or str(exc)
    return OSError(exc.errno, f"{what} failed: {reason}; {path} is unchanged")


def _mended(path: Path, load: NanobotLoad) -> tuple[bytes, bytes]:
    """The file's lines nanobot loads (stripped), and its damaged lines as JSON records."""
    damaged = dict(load.skipped + load.fatal)
    kept, lost = [], []
    with open(path, "rb") as stream:
        for line_no, raw in enumerate(split_lines(stream), 1):
            if line_no in damaged:
                too_long = isinstance(raw, LongLine)
                text = None if too_long else raw.decode("utf-8", "surrogateescape")
                record = {"line_no": line_no, "reason": damaged[line_no], "text": text}
                lost.append(json.dumps(record) + "\n")
            elif read_line(raw).status == "record":
                kept.append(raw.decode("utf-8").strip() + "\n")
    return "".join(kept).encode("utf-8"), "".join(lost).encode("ascii")


def _rewrite(row: _Row, load: NanobotLoad, backup: Path) -> str:
    data, lost = _mended(row.path, load)
    original = _fresh(backup, row.path.name)
    try:
        _write_new(original, _copy_of(row.path))
        shutil.copystat(row.path, original)
        _write_new(
            _fresh(backup, f"{row.path.name}.damaged-lines.txt"), methodcaller("write", lost)
        )
    except OSError as exc:
        raise _failure(exc, f"backing up {row.path.name} to {backup}", row.path) from exc
    try:
        write_file(row.path, data, row.key, overwrite=True)
    except OSError as exc:
        raise _failure(exc, f"rewriting {row.path.name}", row.path) from exc
    return f"rewrote without {_lines_text(load.damaged_lines)}; original in {original}"


def _move(row: _Row, backup: Path) -> str:
    moved = _fresh(backup, row.path.name)
    try:
        os.rename(row.path, moved)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise _failure(exc, f"moving {row.path.name} to {backup}", row.path) from exc
        try:  # another file system: copy through a temp file, then remove the original
            _write_new(moved, _copy_of(row.path))
            shutil.copystat(row.path, moved)
        except OSError as exc:
            raise _failure(exc, f"moving {row.path.name} to {backup}", row.path) from exc
        row.path.unlink()
    return f"moved to {moved}"


def fix(
    path: str | Path,
    backup_dir: str | Path | None = None,
    *,
    config_dir: str | Path | None = None,
    create: bool = False,
) -> pd.DataFrame:
    """Mend what nanobot 0.2.2 would destroy; returns the rows acted on, ``fix`` saying what was done.

    Parameters
    ----------
    path
        A workspace, a sessions folder or one file.
    backup_dir
        Where the originals, their damaged lines (``<file>.damaged-lines.txt``: one JSON
        record per line with ``line_no``, ``reason`` and ``text``, bytes that are not UTF-8 as
        ``\\udcXX`` escapes, ``null`` for a line too long to read) and the leftover temporary
        files go; created if missing (in a folder that exists, unless ``create``) and
        refused inside the sessions folder.  Default:
        ``sessionkit-doctor-backup-<timestamp>`` next to the sessions folder, made only when
        there is something to fix.
    config_dir
        For a 0.3.5 workspace, as for :func:`doctor`.
    create
        Make the missing folders above ``backup_dir``.
    """
    folder, rows = _rows(path, config_dir)
    todo = [row for row in rows if row.fix.startswith(("rewrite", "move"))]
    if not todo:
        return _frame([])
    backup = _backup_folder(folder, backup_dir, create)
    done = []
    for row in todo:
        action = _move(row, backup) if row.load is None else _rewrite(row, row.load, backup)
        done.append(replace(row, fix=action))
    return _frame(done)
