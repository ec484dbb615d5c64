"""A load's files read in runs of about :attr:`~sessionkit.tuning.Tuning.run_bytes` (one run's
parsed messages held at a time), in this process or by forked workers, a huge file streamed; a
file that cannot be read costs its own problems, never the load."""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
from tqdm.auto import tqdm

from sessionkit.nanobot.reader import Problem, read_session_file, unforeseen_failure
from sessionkit.nanobot.session import Session
from sessionkit.store.corpus import problems_by_path
from sessionkit.store.counting import (
    CountingBatches,
    Method,
    ReadThroughCache,
    TokenCache,
    ready_to_fork,
)
from sessionkit.store.forked import SHARED, forked_pool
from sessionkit.store.frames import Entry, build_entries
from sessionkit.store.heap import release_freed, retain_freed
from sessionkit.store.index import Identity, Index, IndexedSession, file_identity
from sessionkit.store.streamed import streamed_entry
from sessionkit.tuning import TUNING

__all__ = ["built_apart", "cut_runs", "indexable", "read_run", "streamed_file", "streams"]


def cut_runs(
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


def read_run(
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


def _read_isolated(file: Path) -> tuple[Session | None, list[Problem]]:
    """:func:`read_session_file`, with any failure it did not foresee kept to this one file."""
    try:
        return read_session_file(file)
    except Exception as exc:  # a bug must cost one file, never the whole corpus
        return None, [unforeseen_failure(file, exc)]


def streams(
    run: list[tuple[int, int]], files: list[Path], identities: list[Identity | None], now: int
) -> bool:
    """Whether a run is one JSONL file to stream (:attr:`~sessionkit.tuning.Tuning.stream_bytes`
    or more) settled enough (see :func:`indexable`) for its session to parse it again on first
    use, with or without the index."""
    if len(run) != 1 or run[0][1] < TUNING.stream_bytes:
        return False
    i = run[0][0]
    identity = identities[i]
    return identity is not None and not identity.racy(now) and files[i].suffix != ".json"


def streamed_file(
    i: int,
    files: list[Path],
    identities: list[Identity | None],
    now: int,
    kept_in: tuple[Index | None, str, int],
    options: dict[str, Any],
    problems: list[Problem],
) -> tuple[bool, Entry | None]:
    """File ``i`` streamed into its entry (:func:`~sessionkit.store.streamed.streamed_entry`,
    with ``options``), its session restored from the entry (parsed again on first use; the
    index of ``kept_in`` may be None: a load with ``cache=False`` streams too):
    whether that is done, and the entry.  Not done when the file changed while it was read
    (the caller reads it whole); a file that could not be read at all adds its problems to
    ``problems`` (done, no entry)."""
    index, store, _ = kept_in
    entry, met = streamed_entry(files[i], **options)
    if entry is None:
        problems.extend(met)
        return True, None
    if not indexable(files[i], identities[i], now):
        return False, None
    entry.session = IndexedSession.restored(entry.meta, files[i], identities[i], index, store)  # type: ignore[arg-type]  # indexable: identity set
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
    """One run read, built and counted (:func:`built_apart`, in a worker): its table, each
    indexable file's (position, first row, values), the other files' whole entries, the
    problems of files that could not be read, and the token counts made (key, count)."""
    files, identities, now = SHARED["files"], SHARED["identities"], SHARED["now"]
    counts = ReadThroughCache(SHARED["cache"])
    if streams(run, files, identities, now):
        i = run[0][0]
        streamed, met = streamed_entry(files[i], tokens=SHARED["tokens"], cache=counts, workers=1)
        if streamed is None:
            return None, [], [], met, counts.fresh
        if indexable(files[i], identities[i], now):
            return streamed.span[0], [(i, 0, streamed.meta)], [], [], counts.fresh  # type: ignore[index]  # a built entry holds a span
    met = []
    fresh, where, read = read_run(run, files, met, None, None)
    built = build_entries(
        fresh, problems_by_path(read), tokens=SHARED["tokens"], cache=counts, workers=1
    )
    table, restorable, whole = None, [], []
    for i, entry in zip(where, built, strict=True):
        if indexable(files[i], identities[i], now):
            table, start = cast("tuple[pa.Table, int]", entry.span)  # built entries hold spans
            restorable.append((i, start, entry.meta))
        else:
            whole.append((i, Entry(entry.session, entry.table, entry.meta)))
    return table, restorable, whole, met, counts.fresh


def _built_in_worker(run: list[tuple[int, int]]) -> tuple[Any, ...]:
    """:func:`_built_run` in a worker of :func:`built_apart`, which keeps the memory it frees
    for its next run (:func:`~sessionkit.store.heap.retain_freed`)."""
    retain_freed()
    return _built_run(run)


def built_apart(
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
        for run, future in [(run, pool.submit(_built_in_worker, run)) for run in runs]:
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
    release_freed()  # before the index is written, what this load keeps at its largest
    counts.flush_soon()


def indexable(file: Path, identity: Identity | None, now: int) -> bool:
    """Whether a file read at ``identity`` may be indexed: not changed since it was read,
    nor too recently (see :data:`~sessionkit.tuning.Tuning.racy_ns`)."""
    return identity is not None and not identity.racy(now) and file_identity(file) == identity
