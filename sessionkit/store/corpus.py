"""A loaded session store: sessions by key, their problems, and lazily built DataFrames."""

from __future__ import annotations

import difflib
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from datetime import tzinfo
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import pandas as pd

from sessionkit import schema
from sessionkit.nanobot.placement import placement_problem
from sessionkit.nanobot.reader import Problem
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.usage_records import data_dir_of
from sessionkit.nanobot.workspace import recorded_workspace
from sessionkit.store.counting import DEFAULT_CACHE, Method, TokenCache, bind_token_cache
from sessionkit.store.frames import (
    Entry,
    build_entries,
    entry_problems,
    messages_frame,
    problems_frame,
    sessions_frame,
)
from sessionkit.store.nogc import no_gc
from sessionkit.store.snapshot import Snapshot
from sessionkit.store.sources import PathLike, folders_left_out

__all__ = [
    "DUPLICATE",
    "Corpus",
    "DuplicateKeyWarning",
    "SessionKey",
    "as_loaded",
    "problems_by_path",
    "resolve_session",
    "selected",
    "warn_duplicates",
]


class Corpus:
    """Sessions by key plus the problems met loading them; frames are built on first use.

    Parameters
    ----------
    sessions
        The sessions; keys must be unique (later duplicates are recorded as problems).
    problems
        Problems already met while reading.
    tokens
        How the ``tokens`` columns are counted: ``"tiktoken"`` (nanobot's exact count),
        ``"fallback"`` (nanobot's estimate without tiktoken) or ``None`` (not counted).
    workspaces
        The workspace of each sessions folder (its path, as a string) a load found; keys
        are unique within a workspace and may repeat across workspaces.
    """

    def __init__(
        self,
        sessions: Iterable[Session] = (),
        problems: Iterable[Problem] = (),
        *,
        tokens: Method | None = "tiktoken",
        token_cache: TokenCache | None = DEFAULT_CACHE,
        workspaces: dict[str, str] | None = None,
    ) -> None:
        self._problems = list(problems)
        self.workspaces = workspaces or {}
        """Each sessions folder's workspace, as the ``workspace`` columns name it."""
        self._by_key: dict[tuple[str, str], Session] = {}
        self._where: dict[str, list[str]] = {}
        self._entries: list[Entry] | None = None
        self._snapshot: Snapshot | None = None
        for session in sessions:
            first = self._add(session)
            if first is not None:
                self._problems.append(_duplicate(session, first))
        self.token_method = tokens
        self.token_cache = token_cache
        """Where this corpus's token counts are remembered (None: nowhere, as ``cache=False``)."""
        self.loaded_from: tuple[Path, ...] = ()
        """The paths :func:`sessionkit.load` read (none for a corpus built in memory)."""
        self.config_dir: Path | None = None
        """The ``config_dir`` :func:`sessionkit.load` was given (None: not given)."""
        self.recursive = False
        """Whether :func:`sessionkit.load` read every sessions folder below the folders given."""

    def _add(self, session: Session) -> Session | None:
        """Take ``session`` under its workspace and key; the session already there, if any."""
        place = self.place(session)
        first = self._by_key.get(place)
        if first is None:
            self._by_key[place] = session
            self._where.setdefault(session.key, []).append(place[0])
        return first

    def place(self, session: Session) -> tuple[str, str]:
        """``(workspace, key)`` of a session of this corpus (workspace ``""``: not loaded from
        a folder of :attr:`workspaces`)."""
        folder = "" if session.path is None else os.fspath(session.path.parent)
        return self.workspaces.get(folder, ""), session.key

    @classmethod
    def of_entries(
        cls,
        entries: list[Entry],
        problems: list[Problem],
        tokens: Method | None,
        token_cache: TokenCache | None = DEFAULT_CACHE,
        workspaces: dict[str, str] | None = None,
    ) -> Corpus:
        """A corpus of entries already built or read back from the index (a load's, file by
        file); the problems of an entry whose key its workspace already holds join ``problems``."""
        corpus = cls((), problems, tokens=tokens, token_cache=token_cache, workspaces=workspaces)
        kept = []
        for entry in entries:
            first = corpus._add(entry.session)
            if first is not None:
                duplicate = _duplicate(entry.session, first)
                corpus._problems += [*entry_problems(entry), duplicate]
                continue
            kept.append(entry)
        corpus._entries = kept
        return corpus

    @classmethod
    def of_snapshot(
        cls,
        snapshot: Snapshot,
        problems: list[Problem],
        tokens: Method | None,
        token_cache: TokenCache | None = DEFAULT_CACHE,
    ) -> Corpus:
        """A corpus of a store opened from its pack and catalog: frames from their columns,
        sessions made on first use (:meth:`_unfold`)."""
        corpus = cls((), problems, tokens=tokens, token_cache=token_cache)
        corpus._snapshot = snapshot
        return corpus

    def _unfold(self) -> None:
        """Make a snapshot's sessions and entries (read from its pack's description; the
        snapshot stays when that fails)."""
        snapshot = self._snapshot
        if snapshot is None:
            return
        entries = as_loaded(snapshot.entries(), snapshot.policy, self.token_cache)
        self._snapshot = None
        for entry in entries:
            self._add(entry.session)
        self._entries = entries

    @property
    def _sessions(self) -> dict[tuple[str, str], Session]:
        """Sessions by workspace and key (a snapshot's made now)."""
        self._unfold()
        return self._by_key

    def __len__(self) -> int:
        if self._snapshot is not None:
            return len(self._snapshot)
        return len(self._sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(self._sessions.values())

    def __contains__(self, key: object) -> bool:
        sessions = self._sessions
        return key in sessions if isinstance(key, tuple) else key in self._where

    def __getitem__(self, key: SessionKey) -> Session:
        """The session of ``key``, or of ``(workspace, key)``; a key several workspaces hold
        is refused, naming them."""
        sessions = self._sessions
        if isinstance(key, tuple):
            if key in sessions:
                return sessions[key]
            raise KeyError(f"no session {key!r} (workspace, key) in this corpus")
        places = self._where.get(key, [])
        if len(places) > 1:
            shown = ", ".join(repr((w, key)) for w in places)
            raise KeyError(
                f"session key {key!r} names a session in {len(places)} workspaces; "
                f"pass (workspace, key): {shown}"
            )
        if places:
            return sessions[places[0], key]
        close = difflib.get_close_matches(str(key), list(self._where), n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise KeyError(f"no session {key!r} in this corpus{hint}")

    def __repr__(self) -> str:
        if self._snapshot is not None:
            found = len(self._problems) + len(self._snapshot.problems()) + len(self._misplaced)
            return (
                f"<Corpus: {len(self)} sessions, {self._snapshot.n_messages} messages, "
                f"{found} problems>"
            )
        n_messages = sum(map(len, self))
        built = self._entries or []
        n_problems = len(self._problems) + sum(len(e.meta["problems"]) for e in built)
        n_problems += len(self._misplaced)
        return f"<Corpus: {len(self)} sessions, {n_messages} messages, {n_problems} problems>"

    def keys(self) -> list[str]:
        """Session keys in load order."""
        if self._snapshot is not None:
            return list(self._snapshot.keys)
        return [key for _, key in self._sessions]

    @property
    def built_entries(self) -> list[Entry] | None:
        """The entries a load built or read from the index, without building any (None for
        a corpus made in memory whose frames were never used)."""
        self._unfold()
        return self._entries

    @property
    def entries(self) -> list[Entry]:
        """Each session's columnar copy, built on first use unless loaded from the index."""
        self._unfold()
        if self._entries is None:
            sessions = list(self)
            paths = {str(s.path) for s in sessions}
            read = [p for p in self._problems if p.path in paths]
            self._problems = [p for p in self._problems if p.path not in paths]
            with no_gc():
                self._entries = build_entries(
                    sessions,
                    problems_by_path(read),
                    tokens=self.token_method,
                    cache=self.token_cache,
                )
        return self._entries

    def _origin(self) -> tuple[Path | None, Path | None]:
        """The data dir and workspace this corpus's load names: its ``config_dir``, else the
        data dir of a 0.3.5 session folder (``<data dir>/sessions/<workspace id>/``) with the
        workspace it records; a workspace, or a sessions folder's workspace."""
        if len(self.loaded_from) != 1 or not self.loaded_from[0].is_dir():
            return self.config_dir, None
        path = self.loaded_from[0]
        data = data_dir_of(path)
        if data is not None:
            return self.config_dir or data, recorded_workspace(path)
        return self.config_dir, path.parent if path.name == "sessions" else path

    def usage(
        self,
        *,
        config_dir: PathLike | None = None,
        workspace: PathLike | None = None,
        tz: str | tzinfo | None = None,
        model: str | None = None,
        provider: str | None = None,
        estimate: bool = True,
        runtime: Mapping[str, Any] | None = None,
    ) -> pd.DataFrame:
        """Every LLM call nanobot recorded, tied to this corpus's sessions, turns and steps,
        priced: :func:`sessionkit.usage` of this corpus (same columns and arguments).

        The usage records are read from ``config_dir``: by default the one this corpus was
        loaded with, else, for a corpus loaded from a 0.3.5 session folder
        (``<data dir>/sessions/<workspace id>/``), that data dir, else ``~/.nanobot``.
        ``workspace`` (the prompt files of ``estimated_prompt_tokens``) defaults to the
        workspace it was loaded from.  Calls of sessions not in this corpus stay unattributed.
        """
        import sessionkit  # the public function: the ledger sits above the store

        data, found = self._origin()
        return sessionkit.usage(
            self,
            config_dir=config_dir if config_dir is not None else data,
            workspace=workspace if workspace is not None else found,
            tz=tz,
            model=model,
            provider=provider,
            estimate=estimate,
            runtime=runtime,
        )

    @cached_property
    def messages(self) -> pd.DataFrame:
        """One row per message (see :data:`sessionkit.schema.MESSAGES`)."""
        with no_gc():
            if self._snapshot is not None:
                return self._snapshot.messages_frame(self.token_method, self._snapshot_workspace)
            return messages_frame(
                self.entries, tokens=self.token_method, workspaces=self._workspaces()
            )

    @cached_property
    def sessions(self) -> pd.DataFrame:
        """One row per session (see :data:`sessionkit.schema.SESSIONS`)."""
        with no_gc():
            if self._snapshot is not None:
                return self._snapshot.sessions_frame(self.token_method, self._snapshot_workspace)
            return sessions_frame(
                self.entries, tokens=self.token_method, workspaces=self._workspaces()
            )

    @property
    def _snapshot_workspace(self) -> str:
        """The workspace of every session of a snapshot (one sessions folder)."""
        return self.workspaces[os.fspath(Path(cast("Snapshot", self._snapshot).catalog.folder))]

    def _workspaces(self) -> list[str | None]:
        """Each entry's workspace, as the frames show it (None: made in memory)."""
        return [self.place(e.session)[0] or None for e in self.entries]

    @cached_property
    def problems(self) -> pd.DataFrame:
        """One row per damaged line or file, and per message nanobot cannot count (see
        :data:`sessionkit.schema.PROBLEMS`)."""
        if self._snapshot is not None:
            return problems_frame(self._problems + self._snapshot.problems() + self._misplaced)
        entries = self.entries
        found = [p for e in entries for p in entry_problems(e)]
        return problems_frame(self._problems + found + self._misplaced)

    @cached_property
    def notes(self) -> pd.DataFrame:
        """What is worth knowing but lost nothing (see :data:`sessionkit.schema.NOTES`): the
        sessions folders below a folder loaded without ``recursive``, which were not read."""
        found = [] if self.recursive else folders_left_out(self.loaded_from, self.config_dir)
        return schema.frame(
            schema.NOTES,
            {
                "path": [n.path for n in found],
                "line_no": [n.line_no for n in found],
                "reason": [n.reason for n in found],
            },
        )

    @cached_property
    def _misplaced(self) -> list[Problem]:
        """A problem per session its release would not read from where its file lies
        (:func:`~sessionkit.nanobot.placement.placement_problem`): told at each load, as it
        depends on the files around it."""
        placed: Iterable[tuple[str, str, str]]
        if self._snapshot is not None:
            table = self.sessions
            placed = zip(table["path"], table["key"], table["policy"], strict=True)
        else:
            placed = ((str(s.path), s.key, s.policy) for s in self if s.path is not None)
        return [
            Problem(path, None, reason)
            for path, key, policy in placed
            if (reason := placement_problem(Path(path), key, policy, self.config_dir))
        ]


DUPLICATE = "duplicate session key "
"""How the reason of every file skipped for a key its workspace already holds starts."""


def _duplicate(session: Session, first: Session) -> Problem:
    """The problem of ``session``, skipped: ``first`` of its workspace holds its key."""
    reason = (
        f"{DUPLICATE}{session.key!r}: {first.path} and {session.path} both hold it; "
        f"kept {first.path}, the first in load order (paths in the order given, each "
        "folder's or glob's files sorted by name), and skipped this file"
    )
    return Problem(str(session.path), None, reason)


def warn_duplicates(corpus: Corpus, stacklevel: int) -> None:
    """One warning for the duplicate keys a load met: the one's reason, or how many (each is
    a problem of the corpus)."""
    found = [p.reason for p in corpus._problems if p.reason.startswith(DUPLICATE)]
    if len(found) == 1:
        warnings.warn(found[0], DuplicateKeyWarning, stacklevel=stacklevel)
    elif found:
        warnings.warn(
            f"{len(found)} files hold a session key a file of their workspace already holds; "
            "each kept the first in load order and is listed in corpus.problems",
            DuplicateKeyWarning,
            stacklevel=stacklevel,
        )


class DuplicateKeyWarning(UserWarning):
    """A load met session files whose key their workspace already holds (see corpus.problems)."""


def problems_by_path(problems: list[Problem]) -> dict[str, list[Problem]]:
    """``problems`` by the file they are about: what reading each file found, as
    :func:`~sessionkit.store.frames.build_entries` takes it."""
    grouped: dict[str, list[Problem]] = {}
    for problem in problems:
        grouped.setdefault(problem.path, []).append(problem)
    return grouped


def as_loaded(entries: list[Entry], chosen: str | None, counts: TokenCache | None) -> list[Entry]:
    """``entries`` with their sessions as a load hands them out: replayed with the release
    ``chosen`` (None: each its own), counting through the load's token cache."""
    for entry in entries:
        entry.session.policy = chosen or entry.meta["policy"]
    if counts is not DEFAULT_CACHE:
        bind_token_cache((e.session for e in entries), counts)
    return entries


SessionKey = str | tuple[str, str]
"""A session key, or ``(workspace, key)`` where keys repeat across workspaces."""


def selected(source: Any, key: SessionKey | None) -> Any:
    """``source`` (a Corpus, a Session or sessions) narrowed to session ``key`` (None: as it
    is): the Corpus's session of that key, the Session when it has it, the sessions of an
    iterable that have it (``KeyError`` when none has)."""
    if key is None:
        return source
    if not _a_key(key):
        raise TypeError(f"key= takes a session key (str) or (workspace, key), not {key!r}")
    if isinstance(source, Corpus | Session):
        return resolve_session(source, key)
    chosen = [s for s in source if s.key == (key if isinstance(key, str) else key[1])]
    if not chosen:
        raise KeyError(f"no session of key {key!r} among those given")
    return chosen


def _a_key(key: object) -> bool:
    """Whether ``key`` is a session key or a ``(workspace, key)`` pair of strings."""
    pair = isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key)
    return isinstance(key, str) or pair


def resolve_session(
    source: Session | Corpus, key: SessionKey | None = None, *, key_name: str = "key"
) -> Session:
    """``source`` itself when it is a Session, else the session ``key`` of the Corpus.

    ``key_name`` is the caller's parameter name, used in the error messages.
    """
    if isinstance(source, Session):
        if key is not None and (key if isinstance(key, str) else key[1]) != source.key:
            raise ValueError(f"{key_name} {key!r} given with session {source.key!r}")
        return source
    if key is None:
        raise TypeError(f"a Corpus needs {key_name}=..., the key of the session to use")
    session = source[key]
    if not isinstance(session, Session):
        raise TypeError(f"{type(source).__name__}[{key!r}] is not a Session")
    return session
