"""The cyclic garbage collector paused around bulk work that allocates millions of acyclic
objects (loads, replays): each collection would walk every dict made so far."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["no_gc"]


@contextmanager
def no_gc(*, kept: bool = False) -> Iterator[None]:
    """Pause the cyclic garbage collector for the block (as it was after: a caller that
    disabled it keeps it disabled).  Only for work that makes no reference cycles, which
    reference counting alone frees.

    ``kept``: for a worker process that keeps what the block made until it exits.  All it
    holds is then frozen (``gc.freeze``), so no collection walks it again: the first one
    after the pause would otherwise walk every object the block made.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if kept:
            gc.freeze()
        if enabled:
            gc.enable()
