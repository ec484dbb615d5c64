"""The forked pool: workers leave Ctrl-C to the parent, and leaving the pool by an exception
ends them at once instead of waiting for the tasks submitted."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable

import psutil
import pytest

from sessionkit.store.forked import SHARED, forked_pool

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fork")


def _shared(name: str) -> object:
    return SHARED[name]


def test_workers_inherit_shared_values_and_ignore_sigint() -> None:
    # Python's own handler, even when this test process was started with SIGINT ignored
    # (a background job of a shell without job control)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with forked_pool(2, answer=42) as pool:
            assert pool.submit(_shared, "answer").result() == 42
            assert pool.submit(signal.getsignal, signal.SIGINT).result() == signal.SIG_IGN
        assert SHARED == {}
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the parent's own
    finally:
        signal.signal(signal.SIGINT, before)


def _until(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    """Wait for ``condition``; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"still not so after {seconds} s"
        time.sleep(0.01)


def test_leaving_by_an_exception_terminates_busy_workers_at_once() -> None:
    started = time.monotonic()
    others = set(psutil.Process().children())  # an earlier test's (a Dask cluster's, say)
    with pytest.raises(KeyboardInterrupt), forked_pool(2, answer=42) as pool:
        jobs = [pool.submit(time.sleep, 30) for _ in range(6)]
        _until(lambda: all(job.running() for job in jobs[:2]))
        workers = [p for p in psutil.Process().children() if p not in others]
        raise KeyboardInterrupt
    assert time.monotonic() - started < 5  # not the 90 s the six sleeps would take
    assert len(workers) == 2
    assert psutil.wait_procs(workers, timeout=3)[1] == []
    assert jobs[-1].cancelled()  # still waiting to be queued: dropped
    broken = [type(job.exception()).__name__ for job in jobs[:2]]
    assert broken == ["BrokenProcessPool"] * 2  # the running ones end with their workers
    assert SHARED == {}


def test_leaving_normally_waits_for_the_tasks() -> None:
    with forked_pool(2) as pool:
        jobs = [pool.submit(time.sleep, 0.2) for _ in range(4)]
    assert [job.done() and job.exception() is None for job in jobs] == [True] * 4


def test_large_results_let_running_tasks_finish_and_drop_queued_ones() -> None:
    """Leaving by an exception with ``large_results``: no worker is ended mid-send (which
    would leave the pool waiting on a half-written result forever); the running tasks
    finish, the queued ones are dropped, and the workers exit."""
    started = time.monotonic()
    others = set(psutil.Process().children())
    with pytest.raises(KeyboardInterrupt), forked_pool(2, large_results=True) as pool:
        jobs = [pool.submit(_big_after, 0.5) for _ in range(6)]
        _until(lambda: all(job.running() for job in jobs[:2]))
        workers = [p for p in psutil.Process().children() if p not in others]
        raise KeyboardInterrupt
    assert time.monotonic() - started < 5  # two rounds of 0.5 s, not six
    assert len(workers) == 2
    assert psutil.wait_procs(workers, timeout=3)[1] == []
    assert [len(job.result()) for job in jobs[:2]] == [1 << 24] * 2
    assert jobs[-1].cancelled()  # never handed to the pool's queue (it holds workers + 1)
    assert SHARED == {}


def _big_after(seconds: float) -> bytes:
    time.sleep(seconds)
    return bytes(1 << 24)
