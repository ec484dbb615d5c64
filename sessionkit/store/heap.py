"""Freed memory handed back to the system between a load's runs: glibc keeps the heap pages a
run's parsed dicts freed, so without this a cold load's resident memory climbs by most of a
run's dicts with every run built, though little of it is still in use."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

__all__ = ["release_freed"]


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` in this process, or None where the C library has none (macOS,
    musl, Windows): there freed memory stays with the allocator, as before."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


_TRIM = _malloc_trim()


def release_freed() -> bool:
    """Return the C heap's free pages to the system (a few milliseconds after a run's dicts
    are dropped); False where the C library cannot."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True
