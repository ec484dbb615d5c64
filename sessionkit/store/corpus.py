"""A loaded session store: sessions by key, their problems, and lazily built DataFrames."""

from __future__ import annotations

import difflib
import os
import pickle
import time
import warnings
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from datetime import tzinfo
from functools import cached_property, partial
from pathlib import Path
from typing import Any, cast

import pandas as pd
import pyarrow as pa
from tqdm.auto import tqdm

from sessionkit.nanobot.naming import sessions_folder
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.reader import (
    SESSION_SUFFIXES,
    Problem,
    SessionPathError,
    find_session_files,
    leftover_temp_files,
    read_session_file,
    unforeseen_failure,
)
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.usage_records import data_dir_of
from sessionkit.nanobot.workspace import recorded_workspace
from sessionkit.store.cachedir import cache_dir_problem, persistence_on
from sessionkit.store.counting import (
    DEFAULT_CACHE,
    CountingBatches,
    Method,
    PendingCounts,
    ReadThroughCache,
    TokenCache,
    bind_token_cache,
    counting_workers,
    ready_to_fork,
    token_cache_in,
)
from sessionkit.store.forked import SHARED, can_fork, forked_pool
from sessionkit.store.frames import (
    Entry,
    build_entries,
    entry_problems,
    messages_frame,
    problems_frame,
    sessions_frame,
)
from sessionkit.store.index import (
    Identity,
    Index,
    IndexedSession,
    Served,
    default_cache_dir,
    file_identity,
    store_key,
)
from sessionkit.store.nogc import no_gc
from sessionkit.store.snapshot import Snapshot, open_snapshot
from sessionkit.store.streamed import streamed_entry
from sessionkit.tuning import TUNING

__all__ = ["Corpus", "check_source", "default_data_dir", "load", "resolve_session", "selected"]

PathLike = str | Path


_PACKAGE = Path(__file__).resolve().parents[1]
REPOSITORY_DATA = _PACKAGE.parent / "data"
"""The sample store of a source checkout (generated, 15 sessions)."""
PACKAGED_SAMPLE = _PACKAGE / "_sample"
"""The same store (``sessions/`` and ``damaged/``) shipped inside the wheel (see pyproject's
force-include)."""


def default_data_dir() -> Path:
    """The bundled sample store, the default everywhere: the checkout's ``data/``, else (an
    installed wheel) its copy packaged as ``sessionkit/_sample``."""
    for path in (REPOSITORY_DATA, PACKAGED_SAMPLE):
        if (path / "sessions").is_dir():
            return path
    raise SessionPathError(
        f"no bundled sample data ({REPOSITORY_DATA} and {PACKAGED_SAMPLE} are missing); "
        "pass the path of a nanobot workspace or sessions folder"
    )


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
    """

    def __init__(
        self,
        sessions: Iterable[Session] = (),
        problems: Iterable[Problem] = (),
        *,
        tokens: Method | None = "tiktoken",
        token_cache: TokenCache | None = DEFAULT_CACHE,
    ) -> None:
        self._problems = list(problems)
        self._by_key: dict[str, Session] = {}
        self._entries: list[Entry] | None = None
        self._snapshot: Snapshot | None = None
        for session in sessions:
            first = self._by_key.get(session.key)
            if first is not None:
                self._problems.append(_duplicate(session, first, 3))
                continue
            self._by_key[session.key] = session
        self.token_method = tokens
        self.token_cache = token_cache
        """Where this corpus's token counts are remembered (None: nowhere, as ``cache=False``)."""
        self.loaded_from: tuple[Path, ...] = ()
        """The paths :func:`load` read (none for a corpus built in memory)."""
        self.config_dir: Path | None = None
        """The ``config_dir`` :func:`load` was given (None: not given)."""

    @classmethod
    def _of_entries(
        cls,
        entries: list[Entry],
        problems: list[Problem],
        tokens: Method | None,
        token_cache: TokenCache | None = DEFAULT_CACHE,
    ) -> Corpus:
        """A corpus of entries already built or read back from the index; the problems of an
        entry whose key is taken join ``problems``."""
        corpus = cls((), problems, tokens=tokens, token_cache=token_cache)
        kept = []
        for entry in entries:
            first = corpus._by_key.get(entry.session.key)
            if first is not None:
                duplicate = _duplicate(entry.session, first, 5)  # warned at load's caller
                corpus._problems += [*entry_problems(entry), duplicate]
                continue
            corpus._by_key[entry.session.key] = entry.session
            kept.append(entry)
        corpus._entries = kept
        return corpus

    @classmethod
    def _of_snapshot(
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
        entries = _as_loaded(snapshot.entries(), snapshot.policy, self.token_cache)
        self._snapshot = None
        self._by_key = {entry.session.key: entry.session for entry in entries}
        self._entries = entries

    @property
    def _sessions(self) -> dict[str, Session]:
        """Sessions by key (a snapshot's made now)."""
        self._unfold()
        return self._by_key

    def __len__(self) -> int:
        if self._snapshot is not None:
            return len(self._snapshot)
        return len(self._sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(self._sessions.values())

    def __contains__(self, key: object) -> bool:
        return key in self._sessions

    def __getitem__(self, key: str) -> Session:
        try:
            return self._sessions[key]
        except KeyError:
            close = difflib.get_close_matches(str(key), list(self._sessions), n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise KeyError(f"no session {key!r} in this corpus{hint}") from None

    def __repr__(self) -> str:
        if self._snapshot is not None:
            found = len(self._problems) + len(self._snapshot.problems())
            return (
                f"<Corpus: {len(self)} sessions, {self._snapshot.n_messages} messages, "
                f"{found} problems>"
            )
        n_messages = sum(map(len, self))
        built = self._entries or []
        n_problems = len(self._problems) + sum(len(e.meta["problems"]) for e in built)
        return f"<Corpus: {len(self)} sessions, {n_messages} messages, {n_problems} problems>"

    def keys(self) -> list[str]:
        """Session keys in load order."""
        if self._snapshot is not None:
            return list(self._snapshot.keys)
        return list(self._sessions)

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
                    sessions, _by_path(read), tokens=self.token_method, cache=self.token_cache
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
        )

    @cached_property
    def messages(self) -> pd.DataFrame:
        """One row per message (see :data:`sessionkit.schema.MESSAGES`)."""
        with no_gc():
            if self._snapshot is not None:
                return self._snapshot.messages_frame(self.token_method)
            return messages_frame(self.entries, tokens=self.token_method)

    @cached_property
    def sessions(self) -> pd.DataFrame:
        """One row per session (see :data:`sessionkit.schema.SESSIONS`)."""
        with no_gc():
            if self._snapshot is not None:
                return self._snapshot.sessions_frame(self.token_method)
            return sessions_frame(self.entries, tokens=self.token_method)

    @cached_property
    def problems(self) -> pd.DataFrame:
        """One row per damaged line or file, and per message nanobot cannot count (see
        :data:`sessionkit.schema.PROBLEMS`)."""
        if self._snapshot is not None:
            return problems_frame(self._problems + self._snapshot.problems())
        entries = self.entries
        return problems_frame(self._problems + [p for e in entries for p in entry_problems(e)])


_EXPECTED = (
    "a nanobot workspace folder, a sessions folder, a session file (.jsonl, or a legacy "
    ".json), a glob, or a list of these"
)


def check_source(path: PathLike | list[PathLike] | tuple[PathLike, ...]) -> None:
    """Refuse, naming what is expected, a path that cannot be a session store: an empty
    string (it would mean the current folder) or an existing file that is not named like a
    session (``/etc/passwd``).  Missing paths and globs are left to the reader."""
    for item in path if isinstance(path, list | tuple) else [path]:
        if not str(item).strip():
            raise SessionPathError(f"an empty path names no session store; pass {_EXPECTED}")
        target = Path(item).expanduser()
        if target.exists() and not target.is_dir() and target.suffix not in SESSION_SUFFIXES:
            raise SessionPathError(f"{target} is not a session store; pass {_EXPECTED}")


def _duplicate(session: Session, first: Session, stacklevel: int) -> Problem:
    reason = (
        f"duplicate session key {session.key!r}: {first.path} and {session.path} both hold it; "
        f"kept {first.path}, the first in load order (paths in the order given, each "
        "folder's or glob's files sorted by name), and skipped this file"
    )
    warnings.warn(reason, stacklevel=stacklevel)
    return Problem(str(session.path), None, reason)


def _by_path(problems: list[Problem]) -> dict[str, list[Problem]]:
    grouped: dict[str, list[Problem]] = {}
    for problem in problems:
        grouped.setdefault(problem.path, []).append(problem)
    return grouped


def load(
    path: PathLike | list[PathLike] | tuple[PathLike, ...] | None = None,
    *,
    tokens: Method | None = "tiktoken",
    config_dir: PathLike | None = None,
    policy: str | None = None,
    cache: bool | PathLike | None = None,
    progress: bool | None = None,
) -> Corpus:
    """Load every session under ``path`` into a :class:`Corpus`; never writes there.

    Files unchanged since an earlier load are not read again: their columnar copy comes from
    the persistent index (:mod:`sessionkit.store.index`), and their messages are parsed only when
    ``Session.messages`` is first used.

    Parameters
    ----------
    path
        A nanobot workspace (0.2 and 0.3.0 keep sessions in its ``sessions/``; 0.3.5 in
        ``<config_dir>/sessions/<workspace id>/``), a sessions folder, one session file, a
        glob, or a list of these.  Default: the bundled sample store.  A 0.3.5 config
        folder, its ``sessions`` folder or its config file is refused, naming the workspaces
        it holds sessions for: pass one of them with ``config_dir``.
    tokens
        Token counting for the frames: ``"tiktoken"``, ``"fallback"`` or ``None``.
    config_dir
        The config file a 0.3.5 nanobot runs with (its ``--config``), or that file's folder;
        default ``~/.nanobot``.  Sessions of a 0.3.5 workspace are found in
        ``<config dir>/sessions/<workspace id>/``.
    policy
        Replay every session with this release's policy (see ``sessionkit.POLICIES``) instead
        of the release that wrote its file.
    cache
        ``None`` (default) or ``True``: use the index and token counts in
        :func:`sessionkit.store.index.default_cache_dir`; a path: those in that folder;
        ``False``: read every file, count every token and read or keep nothing on disk, for
        this corpus and everything computed from it.  ``SESSIONKIT_CACHE=off`` in the
        environment means ``False`` for every load (sessionkit's one persistence switch).
        A folder owned by another user or writable by others (no sticky bit), or one that
        lies (symlinks resolved) inside what is loaded, is refused with a warning: nothing
        is kept then either.
    progress
        Show progress bars on stderr (a widget in Jupyter) over the files read (bytes) and
        the messages counted; default: only when that work is large (files to read of
        :attr:`~sessionkit.tuning.Tuning.read_progress_bytes` or more, or :attr:`~sessionkit.tuning.Tuning.count_progress_messages` messages to
        count), so a warm open shows none.  Ctrl-C stops a load promptly (counting workers
        included) with KeyboardInterrupt; the cache keeps only whole files, and the next
        load reads what was not kept.

    Raises
    ------
    KeyboardInterrupt
        On Ctrl-C.
    SessionPathError
        When a path does not exist, holds no session files, or is not a session store
        (an empty string, a file not named ``.jsonl``/``.json``, a 0.3.5 config folder or
        config file).
    """
    source = default_data_dir() if path is None else path
    check_source(source)
    chosen = None if policy is None else get_policy(policy).name
    with no_gc():  # the whole load: millions of acyclic dicts
        index = _index(cache, source, config_dir)
        counts = None if index is None else _token_cache(cache, index)
        found_whole = None
        if index is not None:
            counted = tokens == "tiktoken"
            found_whole = open_snapshot(index, source, config_dir, counted=counted, policy=chosen)
        if found_whole is not None:
            corpus = _snapshot_corpus(found_whole, tokens, counts)
        else:
            corpus = _loaded(source, config_dir, tokens, chosen, index, counts, progress)
    named = source if isinstance(source, list | tuple) else [source]
    corpus.loaded_from = tuple(Path(p).expanduser() for p in named)
    corpus.config_dir = None if config_dir is None else Path(config_dir).expanduser()
    return corpus


def _snapshot_corpus(
    snapshot: Snapshot, tokens: Method | None, counts: TokenCache | None
) -> Corpus:
    """The corpus of a store every file of which its index holds as it is (see
    :func:`~sessionkit.store.snapshot.open_snapshot`): nothing read, nothing written."""
    snapshot.index.sweep()
    cast("TokenCache", counts).sweep()  # a snapshot is only opened with an index: counts set
    return Corpus._of_snapshot(snapshot, snapshot.leftovers, tokens, counts)


def _loaded(
    source: PathLike | list[PathLike] | tuple[PathLike, ...],
    config_dir: PathLike | None,
    tokens: Method | None,
    chosen: str | None,
    index: Index | None,
    counts: TokenCache | None,
    progress: bool | None,
) -> Corpus:
    """The corpus of a store read file by file: each file's entry from the index when it
    holds that version, else read (and counted) now, and kept for the next load."""
    files = find_session_files(source, config_dir)
    store = store_key(files)
    identities = [file_identity(f) if index is not None else None for f in files]
    now = time.time_ns()
    if index is not None:
        counted = tokens == "tiktoken"
        served = index.read_entries(store, files, identities, counted=counted)
        found, from_pack, stale = served.found, served.from_pack, served.stale
    else:
        found, from_pack, stale = [None] * len(files), 0, 0
    problems: list[Problem] = []
    todo = [i for i, entry in enumerate(found) if entry is None]
    sizes = [_size(files[i], identities[i]) for i in todo]
    shown = sum(sizes) >= TUNING.read_progress_bytes if progress is None else progress
    runs = _runs(list(zip(todo, sizes, strict=True)), TUNING.run_bytes, TUNING.run_files)
    forking = tokens == "tiktoken" and sum(sizes) >= TUNING.fork_bytes
    spread = index is not None and not forking and len(runs) > 1 and can_fork()
    kept_in = (index, store, now)
    entry: Entry | None
    with (
        tqdm(
            total=sum(sizes),
            desc="reading and counting" if len(runs) > 1 and tokens == "tiktoken" else "reading",
            unit="B",
            unit_scale=True,
            disable=not (shown and todo),
        ) as bar,
        counting_workers(counts) if forking else nullcontext() as pool,
    ):
        if spread:
            # spread needs an index, and load() gives every index its token cache
            for i, entry in _built_apart(
                runs,
                files,
                identities,
                cast("tuple[Index, str, int]", kept_in),
                (tokens, cast(TokenCache, counts)),
                problems,
                bar,
            ):
                found[i] = entry
        batches = None if pool is None else CountingBatches(pool, counts)

        def build(
            fresh: list[Session],
            where: list[int],
            read: list[Problem],
            pending: PendingCounts | None,
            counting: bool,
        ) -> None:
            """One run's entries into ``found``, with the counts ``pending`` for it; with
            more than one run, indexed sessions drop their parsed messages (see
            :attr:`~sessionkit.tuning.Tuning.run_bytes`)."""
            built = build_entries(
                fresh,
                _by_path(read),
                tokens=tokens,
                cache=counts,
                progress=counting and len(runs) < 2,
                pending=pending,
            )
            for i, entry in zip(where, built, strict=True):
                found[i] = entry
                if index is not None and len(runs) > 1:
                    _unparsed(entry, files[i], identities[i], index, store, now)

        waiting = None  # the run read last, built once the next is read and sent
        for run in [] if spread else runs:
            if index is not None and _streams(run, files, identities, now):
                if waiting is not None:
                    waiting()
                    waiting = None
                i = run[0][0]
                options = {"tokens": tokens, "cache": counts, "batches": batches}
                done, entry = _streamed(i, files, identities, now, kept_in, options, problems)
                bar.update(run[0][1])
                if done:
                    found[i] = entry
                    continue
            fresh, where, read = _read_run(run, files, problems, bar, batches)
            many = sum(len(s.messages) for s in fresh) >= TUNING.count_progress_messages
            counting = (shown or many) if progress is None else progress
            pending = None if batches is None else batches.close()
            if waiting is not None:
                waiting()
            waiting = partial(build, fresh, where, read, pending, counting)
            del fresh
        if waiting is not None:
            waiting()
            del waiting
    if index is not None:
        built_here = set(todo)
        _keep(index, store, files, identities, found, (from_pack, stale, built_here), now)
        if from_pack == len(files):
            _keep_catalog(index, store, served)
        cast("TokenCache", counts).sweep()  # an index always comes with its counts
    entries = _as_loaded([e for e in found if e is not None], chosen, counts)
    problems.extend(leftover_temp_files(source, config_dir))
    return Corpus._of_entries(entries, problems, tokens, counts)


def _as_loaded(entries: list[Entry], chosen: str | None, counts: TokenCache | None) -> list[Entry]:
    """``entries`` with their sessions as a load hands them out: replayed with the release
    ``chosen`` (None: each its own), counting through the load's token cache."""
    for entry in entries:
        entry.session.policy = chosen or entry.meta["policy"]
    if counts is not DEFAULT_CACHE:
        bind_token_cache((e.session for e in entries), counts)
    return entries


def _built_apart(
    runs: list[list[tuple[int, int]]],
    files: list[Path],
    identities: list[Identity | None],
    kept_in: tuple[Index, str, int],
    counting: tuple[Method | None, TokenCache],
    problems: list[Problem],
    bar: tqdm,
) -> Iterator[tuple[int, Entry]]:
    """Each run read, built and counted by forked workers, both cores at once (a load in
    more than one run whose counting workers are not forked before reading): the entries by
    file position, in order.  A worker sends back its run's table and each indexable file's
    values, not parsed messages: those sessions are restored from the index (parsed again
    on first use); a file changed while it was read comes back whole (``kept_in``: the
    index, store key and load time).  Exact counts read through the token cache
    (``counting``: the method and cache), and the counts a worker made join it.  A run whose
    result cannot be sent back (nested past what pickle writes) is built here.  Files that
    could not be read add to ``problems``."""
    index, store, now = kept_in
    tokens, counts = counting
    if tokens == "tiktoken":
        ready_to_fork(counts)
    shared = {"files": files, "identities": identities, "now": now, "tokens": tokens}
    with forked_pool(os.cpu_count() or 1, large_results=True, cache=counts, **shared) as pool:
        for run, future in [(run, pool.submit(_built_run, run)) for run in runs]:
            try:
                table, restorable, whole, met, made = future.result()
            except (RecursionError, pickle.PicklingError):
                table, restorable, whole, met, made = _built_run(run)
            problems.extend(met)
            counts.update((k for k, _ in made), (n for _, n in made))
            for i, start, meta in restorable:
                session = IndexedSession.restored(
                    meta, files[i], cast("Identity", identities[i]), index, store
                )  # restorable files are indexable: identity set
                yield i, Entry(session, None, meta, (table, start))
            yield from whole
            bar.update(sum(size for _, size in run))
    counts.flush_soon()


def _streams(
    run: list[tuple[int, int]], files: list[Path], identities: list[Identity | None], now: int
) -> bool:
    """Whether a run is one JSONL file to stream (:data:`~sessionkit.store.streamed.STREAM_BYTES`
    or more) whose messages the index can stand for (settled: see :func:`_indexable`)."""
    if len(run) != 1 or run[0][1] < TUNING.stream_bytes:
        return False
    i = run[0][0]
    identity = identities[i]
    return identity is not None and not identity.racy(now) and files[i].suffix != ".json"


def _streamed(
    i: int,
    files: list[Path],
    identities: list[Identity | None],
    now: int,
    kept_in: tuple[Index | None, str, int],
    options: dict[str, Any],
    problems: list[Problem],
) -> tuple[bool, Entry | None]:
    """File ``i`` streamed into its entry (:func:`~sessionkit.store.streamed.streamed_entry`,
    with ``options``), its session restored from the index (parsed again on first use):
    whether that is done, and the entry.  Not done when the file changed while it was read
    (the caller reads it whole); a file that could not be read at all adds its problems to
    ``problems`` (done, no entry)."""
    index, store, _ = kept_in
    entry, met = streamed_entry(files[i], **options)
    if entry is None:
        problems.extend(met)
        return True, None
    if not _indexable(files[i], identities[i], now):
        return False, None
    entry.session = IndexedSession.restored(entry.meta, files[i], identities[i], index, store)  # type: ignore[arg-type]  # indexable: identity set; streamed only with an index
    return True, entry


def _built_run(
    run: list[tuple[int, int]],
) -> tuple[
    pa.Table | None,
    list[tuple[int, int, dict]],
    list[tuple[int, Entry]],
    list[Problem],
    list[tuple[int, int]],
]:
    """One run read, built and counted (:func:`_built_apart`, in a worker): its table, each
    indexable file's (position, first row, values), the other files' whole entries, the
    problems of files that could not be read, and the token counts made (key, count)."""
    files, identities, now = SHARED["files"], SHARED["identities"], SHARED["now"]
    counts = ReadThroughCache(SHARED["cache"])
    if _streams(run, files, identities, now):
        i = run[0][0]
        streamed, met = streamed_entry(files[i], tokens=SHARED["tokens"], cache=counts, workers=1)
        if streamed is None:
            return None, [], [], met, counts.fresh
        if _indexable(files[i], identities[i], now):
            return streamed.span[0], [(i, 0, streamed.meta)], [], [], counts.fresh  # type: ignore[index]  # a built entry holds a span
    met = []
    fresh, where, read = _read_run(run, files, met, None, None)
    built = build_entries(fresh, _by_path(read), tokens=SHARED["tokens"], cache=counts, workers=1)
    table, restorable, whole = None, [], []
    for i, entry in zip(where, built, strict=True):
        if _indexable(files[i], identities[i], now):
            table, start = cast("tuple[pa.Table, int]", entry.span)  # built entries hold spans
            restorable.append((i, start, entry.meta))
        else:
            whole.append((i, Entry(entry.session, entry.table, entry.meta)))
    return table, restorable, whole, met, counts.fresh


def _read_run(
    run: list[tuple[int, int]],
    files: list[Path],
    problems: list[Problem],
    bar: tqdm | None,
    batches: CountingBatches | None,
) -> tuple[list[Session], list[int], list[Problem]]:
    """The sessions read from one run's files, their positions and what reading them found
    (each session's messages sent on to ``batches`` as it is read); a file that could not
    be read at all adds its problems to ``problems``."""
    fresh: list[Session] = []
    where: list[int] = []
    read: list[Problem] = []
    for i, size in run:
        session, met = _read_isolated(files[i])
        if bar is not None:
            bar.update(size)
        if session is None:
            problems.extend(met)
            continue
        read.extend(met)
        if batches is not None:
            batches.add(session.messages)
        fresh.append(session)
        where.append(i)
    return fresh, where, read


def _size(file: Path, identity: Identity | None) -> int:
    """``file``'s size in bytes: its identity's when it has one, else from a ``stat`` (0 when
    it cannot be read: reading it reports the problem)."""
    if identity is not None:
        return identity.size
    try:
        return os.stat(file).st_size
    except OSError:
        return 0


def _token_cache(cache: bool | PathLike | None, index: Index) -> TokenCache:
    """The token counts that go with the index: the shared default cache for the default
    folder, else the counts kept in the folder given."""
    return DEFAULT_CACHE if cache is None or cache is True else token_cache_in(index.root)


def _index(
    cache: bool | PathLike | None,
    source: PathLike | list[PathLike] | tuple[PathLike, ...],
    config_dir: PathLike | None,
) -> Index | None:
    """The index to use, or None: not asked for, or its folder would lie inside a workspace
    or sessions folder being loaded (loading writes nothing there).  Only folders named are
    loaded as folders: the folder of a file or glob named (``~/chat.jsonl``) is not, so the
    default index under ``~`` is used for it.  Symlinks are resolved first, so a cache folder
    that links into a workspace is caught too; a cache folder owned by another user or
    writable by others without the sticky bit
    (:func:`~sessionkit.store.cachedir.cache_dir_problem`) is refused as well."""
    if not persistence_on(cache):
        return None
    chosen = default_cache_dir() if cache is None or cache is True else Path(cast(PathLike, cache))
    given = chosen.expanduser()
    problem = cache_dir_problem(given)
    if problem is not None:
        warnings.warn(
            f"the cache folder {given} {problem}; loading without the index or token cache "
            "(set SESSIONKIT_CACHE_DIR to a folder of your own)",
            stacklevel=3,
        )
        return None
    root = given.resolve()  # symlinks resolved: a link into the workspace is caught below
    items = source if isinstance(source, list | tuple) else [source]
    named = [path for path in (Path(p).expanduser() for p in items) if path.is_dir()]
    folders = {path.resolve() for path in named}
    folders |= {sessions_folder(path, config_dir).resolve() for path in named}
    if any(root == folder or folder in root.parents for folder in folders):
        warnings.warn(
            f"the index folder {root} lies inside a workspace or sessions folder being "
            "loaded; loading without the index (set SESSIONKIT_CACHE_DIR elsewhere)",
            stacklevel=3,
        )
        return None
    return Index(root)


def _keep(
    index: Index,
    store: str,
    files: list[Path],
    identities: list[Identity | None],
    found: list[Entry | None],
    packed: tuple[int, int, set[int]],
    now: int,
) -> None:
    """Persist what this load built: the whole store as a new pack when many files were not
    in the old one or many of its items are for files gone or changed (``packed``: entries
    served from the pack, its stale items, and the files read now by position), else each
    new entry in its file's own pack, and drop own packs of files gone or changed.  Files
    changed too recently, or while being read, are left out (a session already indexed,
    read back or checked when its file was read, is not looked at again); a cache that
    cannot be written costs speed only."""
    from_pack, stale, built = packed
    served = sum(e is not None for e in found)
    least = max(TUNING.pack_min, len(files) // 10)
    whole = served - from_pack >= least or stale >= least
    # every entry kept has an identity: an indexed session was served or restored at its
    # file's, and _indexable holds for none without one
    kept = cast(
        "list[tuple[Entry, Identity]]",
        [
            (entry, identity)
            for i, (file, identity, entry) in enumerate(zip(files, identities, found, strict=True))
            if entry is not None
            and (whole or i in built)
            and (isinstance(entry.session, IndexedSession) or _indexable(file, identity, now))
        ],
    )
    try:
        index.sweep()
        if kept:
            index.write_entries(store, kept, whole=whole)
        index.forget_gone(store, files)
    except (OSError, pa.ArrowException, ValueError) as exc:
        warnings.warn(f"could not write the index in {index.root}: {exc}", stacklevel=4)
        return
    for entry, identity in kept:
        if not isinstance(entry.session, IndexedSession):
            entry.session = IndexedSession.adopted(
                entry.session, entry.meta["turns"], identity, index, store
            )


def _keep_catalog(index: Index, store: str, served: Served) -> None:
    """Give a store's pack that served every file its catalog, when it has none."""
    try:
        index.keep_catalog(store, served)
    except (OSError, pa.ArrowException, ValueError) as exc:
        warnings.warn(f"could not write the index in {index.root}: {exc}", stacklevel=4)


def _runs(
    files: list[tuple[int, int]], limit: int, most: int = TUNING.run_files
) -> list[list[tuple[int, int]]]:
    """``files`` (position, bytes) in order, cut into runs of about ``limit`` bytes and at
    most ``most`` files each (a file larger than ``limit`` is a run of its own); at least
    one run."""
    runs: list[list[tuple[int, int]]] = [[]]
    total = 0
    for item in files:
        if runs[-1] and (total + item[1] > limit or len(runs[-1]) >= most):
            runs.append([])
            total = 0
        runs[-1].append(item)
        total += item[1]
    return runs


def _unparsed(
    entry: Entry, file: Path, identity: Identity | None, index: Index, store: str, now: int
) -> None:
    """Let ``entry``'s session drop its parsed messages when the index can stand for them
    (:func:`_indexable`)."""
    if _indexable(file, identity, now):
        entry.session = IndexedSession.restored(
            entry.meta, file, cast("Identity", identity), index, store
        )  # indexable: identity set


def _indexable(file: Path, identity: Identity | None, now: int) -> bool:
    """Whether a file read at ``identity`` may be indexed: not changed since it was read,
    nor too recently (see :data:`~sessionkit.tuning.Tuning.racy_ns`)."""
    return identity is not None and not identity.racy(now) and file_identity(file) == identity


def _read_isolated(file: Path) -> tuple[Session | None, list[Problem]]:
    """:func:`read_session_file`, with any failure it did not foresee kept to this one file."""
    try:
        return read_session_file(file)
    except Exception as exc:  # a bug must cost one file, never the whole corpus
        return None, [unforeseen_failure(file, exc)]


def selected(source: Any, key: str | None) -> Any:
    """``source`` (a Corpus, a Session or sessions) narrowed to session ``key`` (None: as it
    is): the Corpus's session of that key, the Session when it has it, the sessions of an
    iterable that have it (``KeyError`` when none has)."""
    if key is None:
        return source
    if not isinstance(key, str):
        raise TypeError(f"key= takes a session key (str), not {key!r}")
    if isinstance(source, Corpus | Session):
        return resolve_session(source, key)
    chosen = [s for s in source if s.key == key]
    if not chosen:
        raise KeyError(f"no session of key {key!r} among those given")
    return chosen


def resolve_session(
    source: Session | Corpus, key: str | None = None, *, key_name: str = "key"
) -> Session:
    """``source`` itself when it is a Session, else the session ``key`` of the Corpus.

    ``key_name`` is the caller's parameter name, used in the error messages.
    """
    if isinstance(source, Session):
        if key is not None and key != source.key:
            raise ValueError(f"{key_name} {key!r} given with session {source.key!r}")
        return source
    if key is None:
        raise TypeError(f"a Corpus needs {key_name}=..., the key of the session to use")
    session = source[key]
    if not isinstance(session, Session):
        raise TypeError(f"{type(source).__name__}[{key!r}] is not a Session")
    return session
