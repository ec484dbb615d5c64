"""The verdict's screen: far from the budget the messages' own counts decide, near it the
release's exact estimate does, and the two never disagree about which side of the budget a
request is on (generated requests of every kind, budgets all around their estimate)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from support.strategies import message_lists

from sessionkit.calls.assembly import count_text
from sessionkit.calls.governor import _Meter
from sessionkit.nanobot.kit import Kit
from sessionkit.nanobot.policy_035 import Policy035

POLICY = Policy035()
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.\n  Returns its meaning.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
}


def _meter(tools: tuple[dict[str, Any], ...]) -> _Meter:
    kit = Kit("0.3.5", (), "", "", None, {}, (), tools)
    return _Meter(POLICY, kit)


@given(
    message_lists(max_blocks=10),
    st.text(alphabet="ab \n}{:.", max_size=300),
    st.booleans(),
    st.integers(-40, 40),
)
def test_the_screen_never_changes_the_verdict(
    messages: list[dict[str, Any]], system: str, tools: bool, offset: int
) -> None:
    loop = [{"role": "system", "content": system}, *messages]
    meter = _meter((TOOL,) if tools else ())
    exact = POLICY.estimate_request(loop, list(meter.tools), count_text)
    budget = max(exact + offset, 1)
    tokens, counted = meter.measure(loop, budget)
    assert (tokens >= budget) == (exact >= budget)
    if counted:
        assert tokens == exact


def test_far_from_the_budget_the_screen_decides() -> None:
    loop = [
        {"role": "system", "content": "You are helpful.\n\n" * 40},
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "found\n"},
    ]
    meter = _meter((TOOL,))
    exact = POLICY.estimate_request(loop, [TOOL], count_text)
    screened, counted = meter.measure(loop, exact * 10)
    assert not counted and abs(screened - exact) < 4 * (1 + 1 + 2 + 3 + 1)
    assert meter.measure(loop, exact) == (exact, True)
    assert meter.measure(loop, 0) == (exact, True)  # no budget: every request is over, counted
    with_image = [*loop, {"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]
    assert meter.measure(with_image, 10**9)[1]  # blocks the sum reads differently: counted
