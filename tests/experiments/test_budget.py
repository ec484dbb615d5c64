"""The budget: calls and dollars reserved before sending, settled after."""

from __future__ import annotations

from sessionkit.experiments.budget import Budget


def test_calls_are_counted_once_sent_and_refused_ones_given_back() -> None:
    budget = Budget(calls=2, usd=None)
    assert budget.reserve(float("nan")) and budget.reserve(1.0)
    assert not budget.reserve(0.0)
    budget.settle(1.0, float("nan"), refused=True)
    assert budget.sent == 1 and budget.reserve(0.0)
    budget.settle(0.0, 0.5, refused=False)
    assert budget.sent == 2 and not budget.reserve(0.0)


def test_dollars_reserve_the_worst_case_and_settle_at_the_price() -> None:
    budget = Budget(calls=None, usd=1.0)
    assert budget.reserve(0.75)
    assert not budget.reserve(0.5)  # 0.75 + 0.5 would overrun while the first is in flight
    budget.settle(0.75, 0.25, refused=False)
    assert budget.spent == 0.25 and budget.reserve(0.75)
    budget.settle(0.75, float("nan"), refused=False)  # no usage reported: the worst case stands
    assert budget.spent == 1.0 and not budget.reserve(0.0 + 1e-9)
    assert not Budget(calls=None, usd=1.0).reserve(float("nan"))  # no price: never fits
    budget = Budget(calls=None, usd=1.0)
    budget.reserve(0.5)
    budget.settle(0.5, float("nan"), refused=True)
    assert (budget.spent, budget.sent) == (0.0, 0)
