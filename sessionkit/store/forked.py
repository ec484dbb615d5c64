"""Work done in forked worker processes: one pool rule, one place for what workers inherit.

Workers are forked, so they inherit the parent's sessions, messages and token cache through
:data:`SHARED` instead of receiving pickles.  A process that may not have children (a Dask or
multiprocessing worker is a daemon) does the work itself.  Workers ignore Ctrl-C: the parent
takes the KeyboardInterrupt and ends them (see :func:`forked_pool`).
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

__all__ = ["SHARED", "can_fork", "forked_pool"]

SHARED: dict[str, Any] = {}
"""What the running pool's workers read (set just before the pool forks, cleared after)."""


def can_fork() -> bool:
    """Whether this process may fork workers: the ``fork`` start method exists and it is not a
    daemon (a Dask or multiprocessing worker may not have children)."""
    return (
        "fork" in multiprocessing.get_all_start_methods()
        and not multiprocessing.current_process().daemon
    )


def _ignore_interrupts() -> None:
    """Leave Ctrl-C to the parent: a terminal sends SIGINT to the whole process group, and a
    worker interrupted mid-task would only report it back (or print a traceback when idle)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _terminate(pool: ProcessPoolExecutor) -> None:
    """End the pool's workers now, dropping queued tasks (waiting for them would make Ctrl-C,
    or an error in the caller, wait for the whole batch)."""
    for process in list((pool._processes or {}).values()):  # no public way before 3.14
        process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


@contextmanager
def forked_pool(
    workers: int, *, large_results: bool = False, **shared: Any
) -> Iterator[ProcessPoolExecutor]:
    """A pool of ``workers`` forked processes that inherit ``shared`` as :data:`SHARED`.

    Leaving the block normally waits for the tasks submitted; leaving it by any exception
    (a KeyboardInterrupt included, even one raised while waiting) terminates the workers
    at once and re-raises.  With ``large_results`` (results of megabytes, which a worker
    ended mid-send would leave half-written in the pipe the pool then waits on forever),
    queued tasks are dropped instead and the running ones finish first."""
    SHARED.update(shared)
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_ignore_interrupts)
    finished = False
    try:
        yield pool
        pool.shutdown(wait=True)
        finished = True
    finally:
        if not finished:
            if large_results:
                pool.shutdown(wait=True, cancel_futures=True)
            else:
                _terminate(pool)
        SHARED.clear()
