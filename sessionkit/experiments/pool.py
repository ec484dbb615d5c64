"""The calls of an experiment sent in plan order, at most ``concurrency`` at a time, each
reserved from the budget before it goes; Ctrl-C stops sending and keeps what came back."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from sessionkit.experiments.answers import Answer, Failure
from sessionkit.experiments.budget import Budget

__all__ = ["Job", "Sent", "send_all"]


@dataclass(frozen=True)
class Job:
    """One call to send: its position in the plan and its worst-case cost."""

    at: int
    worst_usd: float


@dataclass(frozen=True)
class Sent:
    """What came back for each position sent, and whether Ctrl-C stopped the run."""

    results: dict[int, Answer | Failure]
    interrupted: bool


def send_all(
    jobs: Sequence[Job],
    send: Callable[[Job], Answer | Failure],
    cost_of: Callable[[Job, Answer], float],
    budget: Budget,
    concurrency: int,
    tick: Callable[[], None],
) -> Sent:
    """Send ``jobs`` in order while the budget allows: a call that does not fit waits for
    those in flight to settle, and once none is in flight and it still does not fit, no
    later call is sent (those positions have no result)."""
    results: dict[int, Answer | Failure] = {}
    flying: dict[Future[Answer | Failure], Job] = {}
    interrupted = False

    def settle(done: set[Future[Answer | Failure]]) -> None:
        for future in done:
            job = flying.pop(future)
            result = future.result()
            results[job.at] = result
            refused = isinstance(result, Failure) and not result.billed
            cost = cost_of(job, result) if isinstance(result, Answer) else float("nan")
            budget.settle(job.worst_usd, cost, refused)
            tick()

    def admitted(job: Job) -> bool:
        """Wait until ``job`` fits beside the calls in flight; False when it never will."""
        while not (len(flying) < concurrency and budget.reserve(job.worst_usd)):
            if not flying:
                return False
            settle(wait(flying, return_when=FIRST_COMPLETED).done)
        return True

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        try:
            for job in jobs:
                if not admitted(job):
                    break
                flying[pool.submit(send, job)] = job
            while flying:
                settle(wait(flying, return_when=FIRST_COMPLETED).done)
        except KeyboardInterrupt:
            interrupted = True
            settle(wait(flying).done)
    return Sent(results, interrupted)
