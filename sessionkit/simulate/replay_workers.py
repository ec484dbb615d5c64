"""Scheduling replays: the missing ones computed here, or in forked workers for large batches.

Workers take chunks of whole sessions, or each a range of the messages of a long one
(``TUNING.split_messages``), read from its file up to the end of that range when it is not
read yet.  Workers are forked (:func:`~sessionkit.store.forked.forked_pool`) and inherit
what they replay; their new token counts join the parent's cache.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import as_completed
from contextlib import suppress
from typing import Any

import numpy as np

from sessionkit.nanobot.session import Session
from sessionkit.simulate import replay_compute
from sessionkit.simulate.replay_compute import Job, Part, Replay, Target
from sessionkit.store.counting import ReadThroughCache, TokenCache, ready_to_fork
from sessionkit.store.forked import SHARED, can_fork, forked_pool
from sessionkit.store.index import IndexedSession
from sessionkit.store.nogc import no_gc
from sessionkit.tuning import TUNING

__all__ = ["compute_missing"]


def compute_missing(
    sessions: list[Session],
    jobs: list[Job],
    missing: dict[int, list[int]],
    sizes: list[int],
    cache: TokenCache | None,
    stored: Sequence[np.ndarray | None],
    workers: int | None,
) -> Iterator[tuple[list[int], list[list[Replay]]]]:
    """The replays each session in ``missing`` lacks (by position: the jobs it lacks), batch
    by batch as they are done: the positions, and each one's replays in the order of its
    jobs.  ``sizes`` is each session's work; ``workers`` the processes (default: every core
    from ``TUNING.parallel_replay_messages`` messages to replay; one: this process)."""
    todo = list(missing)
    total = sum(sizes)
    if workers is None:
        workers = (os.cpu_count() or 1) if total >= TUNING.parallel_replay_messages else 1
    parallel = workers > 1 and can_fork()
    rest = todo
    if parallel:  # a long session is replayed in ranges of messages by every worker
        rest = [i for i in todo if len(sessions[i]) < TUNING.split_messages]
        for i in sorted(set(todo) - set(rest)):
            targets = _targets(sessions[i], jobs, missing[i])
            yield [i], [_compute_split(sessions[i], targets, cache, stored[i], workers)]
    if not parallel or len(rest) < 2:
        for i in rest:
            targets = _targets(sessions[i], jobs, missing[i])
            with no_gc():
                computed = replay_compute.compute(sessions[i], targets, cache, stored[i])
            yield [i], [computed]
    else:
        chunks = _chunks(sizes, rest, max(4 * workers, total // TUNING.replay_chunk_messages))
        yield from _compute_in_workers(sessions, jobs, missing, cache, stored, chunks, workers)


def _targets(session: Session, jobs: list[Job], wanted: list[int]) -> list[Target]:
    """The release and settings of each job in ``wanted`` for ``session``."""
    return [(replay_compute.policy_for(session, jobs[j][0]), jobs[j][1]) for j in wanted]


def _chunks(sizes: list[int], todo: list[int], n_chunks: int) -> list[list[int]]:
    """Split ``todo`` into about ``n_chunks`` groups of similar work (``sizes``)."""
    order = sorted(todo, key=lambda i: -sizes[i])
    groups: list[list[int]] = [[] for _ in range(max(1, n_chunks))]
    loads = [0] * len(groups)
    for i in order:
        lightest = loads.index(min(loads))
        groups[lightest].append(i)
        loads[lightest] += sizes[i] + 1
    return [g for g in groups if g]


def _compute_in_workers(
    sessions: list[Session],
    jobs: list[Job],
    missing: dict[int, list[int]],
    cache: TokenCache | None,
    stored: Sequence[np.ndarray | None],
    chunks: list[list[int]],
    workers: int,
) -> Iterator[tuple[list[int], list[list[Replay]]]]:
    """Replay chunks of sessions in forked workers (the BPE ranks and ``cache``'s files loaded
    here first, once, not by each); their new token counts join ``cache``."""
    shared: dict[str, Any] = {
        "sessions": sessions,
        "jobs": jobs,
        "missing": missing,
        "cache": cache,
        "stored": stored,
    }
    ready_to_fork(cache)
    with forked_pool(workers, **shared) as pool:
        futures = [pool.submit(_compute_chunk, chunk) for chunk in chunks]
        for future in as_completed(futures):
            indices, replays, fresh = future.result()
            if cache is not None and fresh:
                cache.update(*zip(*fresh, strict=True))
            yield indices, replays


def _compute_chunk(indices: list[int]) -> tuple[list[int], list[list[Replay]], list]:
    """In a worker: each session's missing replays, one per job it lacks (its messages
    parsed once for all of them)."""
    sessions, jobs, missing = SHARED["sessions"], SHARED["jobs"], SHARED["missing"]
    delta = ReadThroughCache(SHARED["cache"])
    with no_gc(kept=True):  # sessions parsed before the fork keep their messages
        replays = [
            replay_compute.compute(
                sessions[i],
                _targets(sessions[i], jobs, missing[i]),
                delta,
                SHARED["stored"][i],
                _read_once(sessions[i]),
            )
            for i in indices
        ]
    return indices, replays, delta.fresh


def _read_once(session: Session) -> list[dict[str, Any]]:
    """In a worker: the session's messages, read from its file and dropped once replayed
    when it is not read yet (its parse kept by the worker's copy of the session, with the
    digest a first use takes, would serve nothing: the worker ends), else the ones it holds."""
    if not (isinstance(session, IndexedSession) and session.streamable):
        return session.messages
    messages: list[dict[str, Any]] = []
    session.stream(messages.extend)
    return messages


def _compute_split(
    session: Session,
    targets: list[Target],
    cache: TokenCache | None,
    stored: np.ndarray | None,
    workers: int,
) -> list[Replay]:
    """:func:`~sessionkit.simulate.replay_compute.compute` of one long session by forked
    workers, each replaying a range of its messages: read from the file by each worker when
    not read yet (the messages then never all in memory), else inherited.  Their new token
    counts join ``cache``."""
    n = len(session)
    if isinstance(session, IndexedSession) and session.streamable:
        bounds = _streamed_bounds(n, workers, len(targets))
        task: Callable[[int, int], tuple[list[Part], list]] = _compute_streamed
        shared: dict[str, Any] = {"session": session}
    else:
        step = max(1, -(-n // (4 * workers)))
        bounds = [*range(0, n, step), n]
        task = _compute_range
        shared = {"messages": session.messages}
    shared |= {"targets": targets, "cache": cache, "stored": stored}
    ready_to_fork(cache)
    parts: list[Part] = []
    with forked_pool(workers, **shared) as pool:
        futures = [pool.submit(task, a, b) for a, b in zip(bounds, bounds[1:], strict=False)]
        for future in futures:
            found, fresh = future.result()
            if cache is not None and fresh:
                cache.update(*zip(*fresh, strict=True))
            parts.extend(found)
    return replay_compute.assembled(parts, targets)


def _streamed_bounds(n: int, workers: int, targets: int) -> list[int]:
    """Where the workers' ranges of ``n`` messages start (and the last ends) when each reads
    the file from its start: a range ending further in is shorter, by what reading up to it
    costs.  Replaying a message for one release costs about what parsing it does, so with
    ``r = targets`` and ``q = r / (1 + r)`` range ``j`` ends at ``n (1 - q^j) / (1 - q^w)``,
    which gives every worker the same work."""
    q = targets / (1 + targets)
    ends = [round(n * (1 - q**j) / (1 - q**workers)) for j in range(workers + 1)]
    return sorted(set(ends))


class _RangeRead(Exception):
    """Raised by a worker's sink once it has the messages of its range."""


def _compute_streamed(start: int, stop: int) -> tuple[list[Part], list]:
    """In a worker: the :class:`~sessionkit.simulate.replay_compute.Part` of each batch of
    messages ``start:stop`` of the session shared, read from its file (up to ``stop``) and
    dropped batch by batch."""
    targets, stored = SHARED["targets"], SHARED["stored"]
    delta = ReadThroughCache(SHARED["cache"])
    parts: list[Part] = []
    seen = 0

    def sink(messages: list[dict[str, Any]]) -> None:
        nonlocal seen
        low, high = max(start, seen), min(stop, seen + len(messages))
        if low < high:
            ours = None if stored is None else stored[low:high]
            batch = messages[low - seen : high - seen]
            parts.append(replay_compute.part(batch, low, targets, delta, ours))
        seen += len(messages)
        if seen >= stop and stop < len(SHARED["session"]):
            raise _RangeRead

    with no_gc(kept=True), suppress(_RangeRead):
        SHARED["session"].stream(sink)
    return parts, delta.fresh


def _compute_range(start: int, stop: int) -> tuple[list[Part], list]:
    """In a worker: the :class:`~sessionkit.simulate.replay_compute.Part` of messages
    ``start:stop`` of the messages shared."""
    stored = SHARED["stored"]
    delta = ReadThroughCache(SHARED["cache"])
    with no_gc(kept=True):
        part = replay_compute.part(
            SHARED["messages"][start:stop],
            start,
            SHARED["targets"],
            delta,
            None if stored is None else stored[start:stop],
        )
    return [part], delta.fresh
