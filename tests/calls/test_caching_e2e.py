"""End to end: the prompt cache sessionkit predicts (``sk.requests``' cache columns) equals
what a provider's cache reports, call by call, on requests nanobot 0.3.5's own gateway loop
sent.  The stub model server applies a cache rule written from the providers' documentation
(``support.provider_caches``, apart from ``sessionkit.calls.caching``): OpenAI's automatic
prefix cache for a plain OpenAI-compatible provider, Anthropic's breakpoint cache (writes
reported) for a Claude model behind OpenRouter, where 0.3.5 sends ``cache_control`` markers.
The release's clock and the stub's jump by the same idle gaps between turns, some under the
5-minute lifetime, some over it (``gateway_035.py``)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pandas as pd
import pytest
from support.e2e import SCENARIO_CACHE, GatewayRun, run_gateway
from support.provider_caches import BreakpointCache, OpenAIPrefixCache
from support.releases import release

import sessionkit as sk
from sessionkit.calls.caching import cache_columns, minimum_tokens

pytestmark = pytest.mark.conformance

TTL = 300.0


def _without_text(scenario: dict[str, Any], calls: list[tuple[int, int]]) -> dict[str, Any]:
    """``scenario`` with the replies of ``calls`` ((turn, step)) tool calls without text:
    0.3.5 sends those assistant messages with null content and marks none of them."""
    turns = copy.deepcopy(scenario["turns"])
    for turn, step in calls:
        del turns[turn]["replies"][step]["text"]
    return scenario | {"turns": turns}


OPENROUTER = {"provider": "openrouter", "model": "anthropic/claude-sonnet-4.5"}
BARE_CALLS = [(1, 0), (1, 1), (2, 0)]
"""Tool calls without text: turn 1's two (two calls in a row without a message breakpoint),
and turn 2's, whose next call (turn 3's first, within the TTL) reads the entry turn 2's first
call wrote, two calls back."""
RULES = {
    "openai": ("openai", {"provider": "custom", "model": "gpt-4o-mini"}, OpenAIPrefixCache),
    "openai-marked": ("openai-marked", OPENROUTER, BreakpointCache),
    "openai-marked-null-content": (
        "openai-marked",
        _without_text(SCENARIO_CACHE, BARE_CALLS) | OPENROUTER,
        BreakpointCache,
    ),
}
IDLE_TURNS = [2, 5]
"""The turns whose gap is over the TTL."""


@pytest.fixture(scope="module", params=sorted(RULES))
def case(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, GatewayRun]:
    family, overrides, rule = RULES[request.param]
    run = run_gateway(tmp_path_factory.mktemp(request.param), SCENARIO_CACHE | overrides, rule(TTL))
    return family, run


def _frame(run: GatewayRun) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The usage log as ``sk.usage`` reads it, and the requests frame timed by it."""
    logged = sk.usage(run.data_dir, estimate=False, cache=False)
    frame = sk.requests(
        sk.load(run.sessions_dir, cache=False),
        workspace=run.workspace,
        config_dir=run.config,
        nanobot=release("0.3.5").python,
        usage=logged,
        cache_ttl=TTL,
    )
    return logged.sort_values("call_id"), frame.sort_values(["turn", "step"], ignore_index=True)


def test_predicted_reads_and_writes_are_the_stub_s(case: tuple[str, GatewayRun]) -> None:
    family, run = case
    logged, frame = _frame(run)
    assert run.kinds == ["scripted"] * 9
    assert frame["cache_rules"].astype(str).tolist() == [family] * 9
    assert not frame["time_inferred"].any()  # every call's time is the log's
    reported = [(u.prompt_tokens, u.cached_tokens, u.cache_write_tokens or 0) for u in run.usage]
    columns = ["total_tokens", "cache_read_tokens", "cache_write_tokens"]
    assert [tuple(r) for r in frame[columns].itertuples(index=False)] == reported
    assert logged["cached_tokens"].tolist() == [u.cached_tokens for u in run.usage]
    writes = [pd.NA if u.cache_write_tokens is None else u.cache_write_tokens for u in run.usage]
    assert logged["cache_write_tokens"].tolist() == writes
    assert (frame["cache_write_tokens"] > 0).any() == (family == "openai-marked")
    null = [len(b["messages"]) >= 3 and b["messages"][-2]["content"] is None for b in run.requests]
    assert frame["marker_dropped"].tolist() == null  # told from the stored messages
    if any(null):  # a marker assumed on each of those messages would miss the stub's reads
        assumed = frame.assign(marker_dropped=False)
        least = np.full(len(frame), minimum_tokens(family, OPENROUTER["model"]))
        found = cache_columns(assumed, frame["cache_rules"], least, TTL, "session")
        assert found["cache_read_tokens"].tolist() != [r for _, r, _ in reported]


def test_the_gaps_over_the_ttl_break_the_cache(case: tuple[str, GatewayRun]) -> None:
    _, run = case
    _, frame = _frame(run)
    assert frame.loc[frame["cache_break"] == "idle past the TTL", "turn"].tolist() == IDLE_TURNS
    first = frame[frame["step"] == 0].set_index("turn")
    assert first["cache_read_tokens"].gt(0).tolist() == [
        t > 0 and t not in IDLE_TURNS for t in range(6)
    ]
    waited = first["time"].diff().dt.total_seconds().to_numpy()[1:]
    gaps = np.array(SCENARIO_CACHE["gaps"][1:], dtype=float)
    assert ((waited >= gaps) & (waited < gaps + 30)).all()  # the stored clock jumped too
