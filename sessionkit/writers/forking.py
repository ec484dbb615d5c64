"""Fork a conversation before a chosen user message, as nanobot's WebUI does, from a notebook.

Without an edit, a fork equals field for field what nanobot 0.2.2's
``SessionManager.fork_session_before_user_index`` creates; with one, the rewritten user
message is appended so the fork ends on the question nanobot would answer next.  Forks are
written with :func:`sessionkit.nanobot.writer.save_session`, so they are atomic, never replace an
existing file unless asked, and never touch their source.
"""

from __future__ import annotations

import copy
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from tqdm.auto import tqdm

from sessionkit.conventions import entry_point
from sessionkit.nanobot.naming import Naming, session_path
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session, turn_number
from sessionkit.nanobot.writer import check_sessions_folder, check_target, save_session
from sessionkit.store.corpus import resolve_session

if TYPE_CHECKING:
    from sessionkit.store.corpus import Corpus

__all__ = [
    "LINEAGE_KEY",
    "ForkIndexError",
    "fork",
    "fork_many",
]

LINEAGE_KEY = "sessionkit_fork"
"""Metadata key of a fork's lineage, written only with ``lineage=True``.

Its value is ``{"source_key", "source_file", "source_sha256", "before_user_index",
"edited"}``: the source session's key, its file's name and SHA-256 at fork time (``None`` for a
session not read from a file), the user index forked before, and whether an edit was appended.
nanobot keeps unknown metadata keys as they are and never reads this one.
"""

DEFAULT_TARGET = "{key}:fork-{index}"
_PROGRESS_FROM = 20


class ForkIndexError(IndexError, ValueError):
    """A ``before_user_index`` outside what the source session allows."""


@dataclass(frozen=True)
class _Job:
    """One fork to make, checked: its source, cut, edit, target key and file."""

    source: Session
    index: int
    edit: str | None
    target_key: str
    sessions_dir: str | Path | None
    path: Path | None
    naming: Naming
    config_dir: str | Path | None = None
    create: bool = False


def _index(session: Session, before_user_index: Any, edit: str | None) -> int:
    index = turn_number(before_user_index, "before_user_index")
    n_users = session.n_user_turns
    has = f"session {session.key!r} has {n_users} user message{'' if n_users == 1 else 's'}"
    if edit is None and not 0 <= index <= n_users:
        raise ForkIndexError(
            f"before_user_index {index} is out of range: {has}, so it must be between 0 and "
            f"{n_users} ({n_users} copies the whole session)"
        )
    if edit is not None and not 0 <= index < n_users:
        rule = f"so it must be between 0 and {n_users - 1}" if n_users else "so none to rewrite"
        raise ForkIndexError(
            f"before_user_index {index} is out of range for an edit, which rewrites an existing "
            f"user message: {has}, {rule}"
        )
    return index


def _prepare(
    source: Session,
    target_key: Any,
    before_user_index: Any,
    edit: Any,
    sessions_dir: str | Path | None,
    naming: Naming | None,
    config_dir: str | Path | None = None,
    create: bool = False,
) -> _Job:
    if not isinstance(target_key, str):
        raise TypeError(f"target_key must be a string, got {type(target_key).__name__}")
    if edit is not None and not isinstance(edit, str):
        raise TypeError(f"edit must be the new message text (a string), got {type(edit).__name__}")
    if not isinstance(source.metadata, dict):
        raise ValueError(f"session {source.key!r} has metadata that is not a JSON object")
    index = _index(source, before_user_index, edit)
    naming = naming or get_policy(source.policy).naming
    path = (
        None if sessions_dir is None else session_path(target_key, sessions_dir, naming, config_dir)
    )
    if path is not None:
        check_sessions_folder(path.parent, create)
    return _Job(source, index, edit, target_key, sessions_dir, path, naming, config_dir, create)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or os.path.samefile(a, b)
    except OSError:
        return False


def _check_targets(jobs: list[_Job], overwrite: bool) -> None:
    """Refuse the batch before writing anything if any target clashes."""
    seen: dict[str, int] = {}
    for n, job in enumerate(jobs):
        name = str(job.path) if job.path is not None else job.target_key
        if name in seen:
            first = jobs[seen[name]].target_key
            raise ValueError(
                f"forks {seen[name]} ({first!r}) and {n} ({job.target_key!r}) both go to {name}; "
                "give each a different target_key (the template may use {key}, {index} and {n})"
            )
        seen[name] = n
    sources = {j.source.path for j in jobs if j.source.path is not None}
    for job in jobs:
        if job.path is None:
            continue
        if any(_same_file(job.path, p) for p in sources):
            raise ValueError(f"{job.path} is a source session's own file; forks never replace it")
        check_target(job.path, job.target_key, overwrite=overwrite)


def _digest(path: Path | None) -> str | None:
    if path is None or not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _make(job: _Job, now: datetime, lineage: dict[str, Any] | None) -> Session:
    """The fork itself: the release's cut, copy and metadata rules, then the optional edit."""
    source = job.source
    policy = get_policy(source.policy)
    cut = source.before_user(job.index)
    metadata = copy.deepcopy(cut.metadata)
    for key in policy.fork_volatile_keys:
        metadata.pop(key, None)
    if source.last_consolidated > len(cut.messages):
        metadata.pop("_last_summary", None)
    if lineage is not None:
        metadata[LINEAGE_KEY] = lineage

    messages = [policy.fork_copy(m) for m in cut.messages]
    if job.edit is not None:
        message = policy.fork_copy(source.messages[len(messages)])
        message["content"] = job.edit
        message["timestamp"] = now.isoformat()
        messages.append(message)

    return Session(
        key=job.target_key,
        messages=messages,
        created_at=now,
        updated_at=now,
        metadata=metadata,
        last_consolidated=cut.last_consolidated,
        policy=source.policy,
        held_lines=cut.held_lines,
    )


def _lineage(job: _Job, digests: dict[Path, str | None]) -> dict[str, Any]:
    """The :data:`LINEAGE_KEY` record; each source file is hashed once per batch."""
    src = job.source.path
    if src is not None and src not in digests:
        digests[src] = _digest(src)
    return {
        "source_key": job.source.key,
        "source_file": None if src is None else src.name,
        "source_sha256": None if src is None else digests[src],
        "before_user_index": job.index,
        "edited": job.edit is not None,
    }


def _run(job: _Job, *, overwrite: bool, lineage: bool, digests: dict[Path, str | None]) -> Session:
    session = _make(job, datetime.now(), _lineage(job, digests) if lineage else None)
    if job.sessions_dir is not None:
        session.path = save_session(
            session,
            job.sessions_dir,
            naming=job.naming,
            overwrite=overwrite,
            config_dir=job.config_dir,
            create=job.create,
        )
        session.format = job.naming
    return session


@entry_point(source_key="key")
def fork(
    source: Session | Corpus,
    target_key: str,
    before_user_index: int,
    *,
    key: str | None = None,
    edit: str | None = None,
    sessions_dir: str | Path | None = None,
    overwrite: bool = False,
    lineage: bool = False,
    naming: Naming | None = None,
    config_dir: str | Path | None = None,
    create: bool = False,
) -> Session:
    """A new session holding ``source``'s messages before its ``before_user_index``-th user message.

    Without ``edit`` the result equals nanobot 0.2.2's
    ``fork_session_before_user_index(source_key, target_key, before_user_index)``: the
    messages before that user message, deep-copied; metadata deep-copied minus
    :attr:`~sessionkit.nanobot.policies.ReplayPolicy.fork_volatile_keys` of the source's release; ``last_consolidated`` kept when it lies within the copy,
    else 0 with ``_last_summary`` dropped; fresh ``created_at``/``updated_at``.  Lines of the
    source that no nanobot can parse (``Session.held_lines``: valid JSON past ``json``'s
    limits) before the cut are written back byte for byte, in their places; nanobot itself
    cannot load such a source at all.

    Parameters
    ----------
    source
        The session, or a :class:`~sessionkit.Corpus` together with ``key``.
    target_key
        Key of the new session (``channel:chat_id``); it names the file.
    before_user_index
        Zero-based user message to cut before; the number of user messages copies everything.
    edit
        New text for that user message, appended at the fork point with a fresh timestamp and
        the original message's other fields, so the fork ends on the question to answer.
    key
        Which session of a Corpus to fork (``source_key=`` is its deprecated spelling).
    sessions_dir
        Write the fork there (a sessions folder or a workspace; see
        :func:`~sessionkit.nanobot.writer.save_session`); ``None`` only returns it.  A
        0.3.5 workspace's fork goes where 0.3.5 keeps its sessions,
        ``<config_dir>/sessions/<workspace id>/``.
    overwrite
        Replace an existing file for ``target_key``; the source's own file is never replaced.
    lineage
        Record where the fork came from under :data:`LINEAGE_KEY` in its metadata.
    naming
        File naming scheme, ``"nanobot-0.2"`` (safe key) or ``"nanobot-0.3"`` (base64url);
        default: the scheme of the source session's release (``Session.policy``).
    config_dir
        For a 0.3.5 workspace: the config file nanobot runs with, or its folder (default
        ``~/.nanobot``), as for :func:`sessionkit.load`.
    create
        Make ``sessions_dir`` when it does not exist (by default a missing folder is refused
        with ``FileNotFoundError``, before anything is written).

    Raises
    ------
    ForkIndexError
        For an index below 0 or past the number of user messages (with ``edit``: not naming
        an existing user message); nanobot returns ``None`` there.
    KeyError
        When ``key`` is not in the corpus.
    FileExistsError, UnsafeKeyError, PermissionError
        From writing, as :func:`~sessionkit.nanobot.writer.save_session` raises them.
    """
    session = resolve_session(source, key)
    job = _prepare(
        session, target_key, before_user_index, edit, sessions_dir, naming, config_dir, create
    )
    _check_targets([job], overwrite)
    return _run(job, overwrite=overwrite, lineage=lineage, digests={})


def _plan_rows(
    source: Session | Corpus,
    plan: Iterable[int] | pd.DataFrame | None,
    key: str | None,
) -> list[tuple[Session, Any, Any, Any]]:
    """``(session, before_user_index, edit, target_key)`` for every fork the plan asks for."""
    if isinstance(plan, pd.DataFrame):
        if "before_user_index" not in plan.columns:
            raise ValueError(
                "the plan DataFrame needs a 'before_user_index' column (for the user rows of "
                f"Corpus.messages, that is 'user_index'); it has {list(plan.columns)}"
            )
        rows = []
        for row in plan.to_dict("records"):
            chosen = row.get("session_key", key)
            edit, target = row.get("edit"), row.get("target_key")
            rows.append(
                (
                    resolve_session(source, None if pd.isna(chosen) else chosen),
                    row["before_user_index"],
                    None if edit is None or pd.isna(edit) else edit,
                    None if target is None or pd.isna(target) else target,
                )
            )
        return rows
    if plan is None and key is None and not isinstance(source, Session):
        sessions = list(source)
    else:
        sessions = [resolve_session(source, key)]
    if plan is None:
        return [(s, i, None, None) for s in sessions for i in range(s.n_user_turns)]
    return [(sessions[0], i, None, None) for i in plan]


@entry_point(source_key="key")
def fork_many(
    source: Session | Corpus,
    plan: Iterable[int] | pd.DataFrame | None = None,
    *,
    key: str | None = None,
    target_key: str = DEFAULT_TARGET,
    sessions_dir: str | Path | None = None,
    overwrite: bool = False,
    lineage: bool = False,
    naming: Naming | None = None,
    progress: bool | None = None,
    config_dir: str | Path | None = None,
    create: bool = False,
) -> list[Session]:
    """Make a batch of forks in one call; every fork is checked before any is written.

    Parameters
    ----------
    source
        A session, or a :class:`~sessionkit.Corpus`.
    plan
        ``None``: a fork before every user message (of ``key``'s session, or of every
        session in a Corpus).  A list of ``before_user_index`` values.  Or a DataFrame with a
        ``before_user_index`` column and optional ``session_key`` (which session of the
        Corpus), ``edit`` and ``target_key`` columns; missing values mean "none".
    key
        The session of a Corpus that a list plan, or a plan without ``session_key``, forks
        (``source_key=`` is its deprecated spelling).
    target_key
        Template for keys a plan does not give: ``{key}`` (source key), ``{index}`` (the
        ``before_user_index``) and ``{n}`` (position in the plan).
    sessions_dir, overwrite, lineage, naming, config_dir, create
        As for :func:`fork`, applied to every fork.
    progress
        Show a progress bar; by default only for more than 20 forks.

    Returns
    -------
    list of Session
        The forks, in plan order.  A failure while writing leaves earlier forks written.
    """
    jobs = []
    for n, (session, index, edit, target) in enumerate(_plan_rows(source, plan, key)):
        if target is None:
            target = target_key.format(key=session.key, index=index, n=n)
        jobs.append(
            _prepare(session, target, index, edit, sessions_dir, naming, config_dir, create)
        )
    _check_targets(jobs, overwrite)
    show = len(jobs) > _PROGRESS_FROM if progress is None else progress
    digests: dict[Path, str | None] = {}
    return [
        _run(job, overwrite=overwrite, lineage=lineage, digests=digests)
        for job in tqdm(jobs, desc="forks", unit="fork", disable=not show)
    ]
