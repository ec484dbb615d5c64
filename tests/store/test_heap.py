"""Freed heap memory handed back to the system between a load's runs."""

from __future__ import annotations

import platform
import subprocess
import sys

from sessionkit.store.heap import release_freed

MIB = 1 << 20


def _resident() -> int:
    """This process's resident bytes now (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_memory_freed_below_a_live_block_goes_back_to_the_system() -> None:
    """100 MiB of 4 KiB blocks (C heap, not Python's small-object arenas) freed below a block
    still in use: glibc keeps those pages until :func:`release_freed` returns them."""
    assert platform.libc_ver()[0] == "glibc"  # this machine's C library: the one trimmed
    blocks = [bytes(4096) + bytes([i % 256]) for i in range(25_600)]
    pinned = bytes(4096) + b"live"  # above the blocks: glibc cannot shrink the heap past it
    del blocks
    kept = _resident()
    assert release_freed() is True
    assert kept - _resident() > 80 * MIB
    assert pinned.endswith(b"live")


_RETAINED = """
import sys
from sessionkit.store.heap import retain_freed
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
if sys.argv[1] == "retain":
    assert retain_freed() is True
block = bytearray(b"x" * (16 << 20))  # written: every page resident
before = resident()
del block
print(before - resident())
"""


def test_a_process_that_retains_freed_memory_keeps_a_large_freed_block() -> None:
    """A 16 MiB block freed: glibc unmaps it at once, unless the process retains what it
    frees (:func:`retain_freed`: a forked worker), which keeps its pages for the next run."""
    dropped = {
        how: int(
            subprocess.run(
                [sys.executable, "-c", _RETAINED, how], capture_output=True, text=True, check=True
            ).stdout
        )
        for how in ("retain", "default")
    }
    assert dropped["default"] > 15 * MIB
    assert dropped["retain"] < 1 * MIB
