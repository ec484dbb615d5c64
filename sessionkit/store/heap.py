"""Freed memory handed back to the system between a load's runs: glibc keeps the heap pages a
run's parsed dicts freed, so without this a cold load's resident memory climbs by most of a
run's dicts with every run built, though little of it is still in use.  A forked worker,
which exits when the load ends, does the opposite (:func:`retain_freed`)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

__all__ = ["release_freed", "retain_freed"]


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` in this process, or None where the C library has none (macOS,
    musl, Windows): there freed memory stays with the allocator, as before."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


_TRIM = _malloc_trim()
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt`` in this process, or None where the C library has none."""
    try:
        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return None


def release_freed() -> bool:
    """Return the C heap's free pages to the system (a few milliseconds after a run's dicts
    are dropped); False where the C library cannot."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


def retain_freed() -> bool:
    """Keep the memory this process frees in its C heap, for a forked worker that exits when
    its load ends: glibc then takes blocks of up to 32 MiB from the heap instead of mapping
    each anew, and never shrinks the heap, so each run reuses the pages the last one freed
    instead of faulting fresh ones in (a first open of the 123 MB store: its workers' page
    faults 19-20 thousand against 65-66, their peak the same).  False where the C library
    cannot.  Never in the user's process: the setting lasts as long as the process."""
    mallopt = _mallopt()
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(_M_TRIM_THRESHOLD, 1 << 30))
