"""Sending under a budget: plan order, bounded concurrency, and Ctrl-C keeping what is done."""

from __future__ import annotations

import threading

from sessionkit.experiments.answers import Answer, Failure
from sessionkit.experiments.budget import Budget
from sessionkit.experiments.pool import Job, send_all

ANSWER = Answer("ok", [], "stop", 10, 0, 1, "m", 0.0)


def test_calls_go_in_plan_order_and_never_more_than_concurrency_at_once() -> None:
    lock, flying, most, order = threading.Lock(), [0], [0], []

    def send(job: Job) -> Answer | Failure:
        with lock:
            flying[0] += 1
            most[0] = max(most[0], flying[0])
            order.append(job.at)
        threading.Event().wait(0.01)
        with lock:
            flying[0] -= 1
        return ANSWER

    jobs = [Job(at, 0.0) for at in range(12)]
    sent = send_all(jobs, send, lambda job, a: 0.0, Budget(7, None), 3, lambda: None)
    assert sorted(sent.results) == list(range(7)) and most[0] == 3
    assert sorted(order[:3]) == [0, 1, 2] and sent.interrupted is False


def test_ctrl_c_stops_sending_and_keeps_what_came_back() -> None:
    ticks = []

    def tick() -> None:
        ticks.append(1)
        if len(ticks) == 2:
            raise KeyboardInterrupt

    jobs = [Job(at, 0.0) for at in range(5)]
    sent = send_all(jobs, lambda job: ANSWER, lambda job, a: 0.0, Budget(None, None), 1, tick)
    assert sent.interrupted is True
    assert sorted(sent.results) == [0, 1]
