"""Work done in forked worker processes: one pool rule, one place for what workers inherit.

Workers are forked, so they inherit the parent's sessions, messages and token cache through
:data:`SHARED` instead of receiving pickles.  A process that may not have children (a Dask or
multiprocessing worker is a daemon) does the work itself.
"""

from __future__ import annotations

import multiprocessing
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


@contextmanager
def forked_pool(workers: int, **shared: Any) -> Iterator[ProcessPoolExecutor]:
    """A pool of ``workers`` forked processes that inherit ``shared`` as :data:`SHARED`."""
    SHARED.update(shared)
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            yield pool
    finally:
        SHARED.clear()
