"""``load``: a session store into a :class:`~sessionkit.store.corpus.Corpus`, opened whole from
its index when nothing changed, else file by file (each from the index or read in
:mod:`~sessionkit.store.runs`), with what it built kept in the index for the next load."""

from __future__ import annotations

import os
import time
import warnings
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import cast

import pyarrow as pa
from tqdm.auto import tqdm

from sessionkit.nanobot.naming import sessions_folder
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.reader import Problem, find_session_files, leftover_temp_files
from sessionkit.nanobot.session import Session
from sessionkit.store.cachedir import cache_dir_problem, persistence_on
from sessionkit.store.corpus import Corpus, as_loaded, problems_by_path, warn_duplicates
from sessionkit.store.counting import (
    DEFAULT_CACHE,
    CountingBatches,
    Method,
    PendingCounts,
    TokenCache,
    counting_workers,
    token_cache_in,
)
from sessionkit.store.forked import can_fork
from sessionkit.store.frames import Entry, build_entries
from sessionkit.store.heap import release_freed
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
from sessionkit.store.runs import (
    built_apart,
    cut_runs,
    indexable,
    read_run,
    streamed_file,
    streams,
)
from sessionkit.store.snapshot import Snapshot, open_snapshot
from sessionkit.store.sources import PathLike, check_source, default_data_dir, workspace_names
from sessionkit.tuning import TUNING

__all__ = ["load"]


def load(
    path: PathLike | list[PathLike] | tuple[PathLike, ...] | None = None,
    *,
    tokens: Method | None = "tiktoken",
    config_dir: PathLike | None = None,
    policy: str | None = None,
    cache: bool | PathLike | None = None,
    progress: bool | None = None,
    recursive: bool = False,
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
        this corpus and everything computed from it (a huge file is streamed all the same:
        its session parses the file again on first use).  ``SESSIONKIT_CACHE=off`` in the
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
    recursive
        Load every sessions folder below each folder given (workspaces' ``sessions/``, 0.3.5
        config dirs' ``sessions/<workspace id>/``, bare sessions folders), each session in its
        workspace (the frames' ``workspace`` column): keys may repeat across workspaces, and
        ``corpus[workspace, key]`` names one.

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
        if index is not None and not recursive:
            counted = tokens == "tiktoken"
            found_whole = open_snapshot(index, source, config_dir, counted=counted, policy=chosen)
        if found_whole is not None:
            corpus = _snapshot_corpus(found_whole, tokens, counts)
            folders = [Path(found_whole.catalog.folder)]
            corpus.workspaces = workspace_names(source, folders, config_dir, recursive=False)
        else:
            found = (source, config_dir, recursive)
            corpus = _loaded(found, tokens, chosen, index, counts, progress)
    warn_duplicates(corpus, stacklevel=2)
    named = source if isinstance(source, list | tuple) else [source]
    corpus.loaded_from = tuple(Path(p).expanduser() for p in named)
    corpus.config_dir = None if config_dir is None else Path(config_dir).expanduser()
    corpus.recursive = recursive
    return corpus


def _snapshot_corpus(
    snapshot: Snapshot, tokens: Method | None, counts: TokenCache | None
) -> Corpus:
    """The corpus of a store every file of which its index holds as it is (see
    :func:`~sessionkit.store.snapshot.open_snapshot`): nothing read, nothing written."""
    snapshot.index.sweep()
    cast("TokenCache", counts).sweep()  # a snapshot is only opened with an index: counts set
    return Corpus.of_snapshot(snapshot, snapshot.leftovers, tokens, counts)


def _loaded(
    found_in: tuple[PathLike | list[PathLike] | tuple[PathLike, ...], PathLike | None, bool],
    tokens: Method | None,
    chosen: str | None,
    index: Index | None,
    counts: TokenCache | None,
    progress: bool | None,
) -> Corpus:
    """The corpus of a store read file by file: each file's entry from the index when it
    holds that version, else read (and counted) now, and kept for the next load;
    ``found_in``: the source, config dir and whether folders are searched below."""
    source, config_dir, recursive = found_in
    files = find_session_files(source, config_dir, recursive)
    store = store_key(files)
    identities = [file_identity(f) for f in files]  # a huge file streams without an index too
    now = time.time_ns()
    counted = tokens == "tiktoken"
    if index is not None:
        served = index.read_entries(store, files, identities, counted=counted)
        found, from_pack, stale = served.found, served.from_pack, served.stale
    else:
        found, from_pack, stale = [None] * len(files), 0, 0
    problems: list[Problem] = []
    todo = [i for i, entry in enumerate(found) if entry is None]
    sizes = [_size(files[i], identities[i]) for i in todo]
    shown = sum(sizes) >= TUNING.read_progress_bytes if progress is None else progress
    big = counted and sum(sizes) >= TUNING.fork_bytes
    huge = big and any(size >= TUNING.stream_bytes for size in sizes)
    runs = _runs(list(zip(todo, sizes, strict=True)), big)
    spread = index is not None and not huge and len(runs) > 1 and can_fork()
    if not spread:
        runs = cut_runs(list(zip(todo, sizes, strict=True)), TUNING.run_bytes, TUNING.run_files)
    forking = big and not spread
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
            for i, entry in built_apart(
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
            more than one run, the sessions of settled files drop their parsed messages,
            with or without the index (see :attr:`~sessionkit.tuning.Tuning.run_bytes`)."""
            built = build_entries(
                fresh,
                problems_by_path(read),
                tokens=tokens,
                cache=counts,
                progress=counting and len(runs) < 2,
                pending=pending,
            )
            for i, entry in zip(where, built, strict=True):
                found[i] = entry
                if len(runs) > 1:
                    _unparsed(entry, files[i], identities[i], index, store, now)

        waiting = None  # the run read last, built once the next is read and sent
        read_bytes, trim_from = 0, sum(sizes) * TUNING.trim_after
        for run in [] if spread else runs:
            read_bytes += sum(size for _, size in run)
            if streams(run, files, identities, now):
                if waiting is not None:
                    waiting()
                    waiting = None
                i = run[0][0]
                options = {"tokens": tokens, "cache": counts, "batches": batches}
                done, entry = streamed_file(i, files, identities, now, kept_in, options, problems)
                bar.update(run[0][1])
                if done:
                    found[i] = entry
                    continue
            fresh, where, read = read_run(run, files, problems, bar, batches)
            many = sum(len(s.messages) for s in fresh) >= TUNING.count_progress_messages
            counting = (shown or many) if progress is None else progress
            pending = None if batches is None else batches.close()
            if waiting is not None:
                waiting()
            waiting = partial(build, fresh, where, read, pending, counting)
            del fresh
            if read_bytes >= trim_from:
                release_freed()  # the run built above was dropped with its partial
        if waiting is not None:
            waiting()
            del waiting
    if index is not None:
        built_here = set(todo)
        _keep(index, store, files, identities, found, (from_pack, stale, built_here), now)
        if from_pack == len(files):
            _keep_catalog(index, store, served)
        cast("TokenCache", counts).sweep()  # an index always comes with its counts
    entries = as_loaded([e for e in found if e is not None], chosen, counts)
    problems.extend(leftover_temp_files(source, config_dir, recursive))
    names = workspace_names(source, {f.parent for f in files}, config_dir, recursive)
    return Corpus.of_entries(entries, problems, tokens, counts, workspaces=names)


def _runs(files: list[tuple[int, int]], big: bool) -> list[list[tuple[int, int]]]:
    """``files`` (position, bytes) cut into the runs forked workers each read, build and
    count (:func:`~sessionkit.store.runs.built_apart`): of
    :attr:`~sessionkit.tuning.Tuning.spread_run_bytes` when ``big`` (exact counts, of
    :attr:`~sessionkit.tuning.Tuning.fork_bytes` or more), else of
    :attr:`~sessionkit.tuning.Tuning.run_bytes`."""
    limit = TUNING.spread_run_bytes if big else TUNING.run_bytes
    return cut_runs(files, limit, TUNING.run_files)


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
    # file's, and indexable holds for none without one
    kept = cast(
        "list[tuple[Entry, Identity]]",
        [
            (entry, identity)
            for i, (file, identity, entry) in enumerate(zip(files, identities, found, strict=True))
            if entry is not None
            and (whole or i in built)
            and (isinstance(entry.session, IndexedSession) or indexable(file, identity, now))
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


def _unparsed(
    entry: Entry, file: Path, identity: Identity | None, index: Index | None, store: str, now: int
) -> None:
    """Let ``entry``'s session drop its parsed messages when its file, as read, can stand for
    them (:func:`indexable`), with or without the index."""
    if indexable(file, identity, now):
        entry.session = IndexedSession.restored(
            entry.meta, file, cast("Identity", identity), index, store
        )  # indexable: identity set
