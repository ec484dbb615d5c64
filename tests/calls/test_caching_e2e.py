"""End to end: the prompt cache sessionkit predicts (``sk.requests``' cache columns) equals
what a provider's cache reports, call by call, on requests nanobot 0.3.5's own gateway loop
sent.  The stub model server applies a cache rule written from the providers' documentation
(``support.provider_caches``, apart from ``sessionkit.calls.caching``): OpenAI's automatic
prefix cache for a plain OpenAI-compatible provider, Anthropic's breakpoint cache (writes
reported) for a Claude model behind OpenRouter, where 0.3.5 sends ``cache_control`` markers.
The release's clock and the stub's jump by the same idle gaps between turns, some under the
5-minute lifetime, some over it (``gateway_035.py``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support.e2e import SCENARIO_CACHE, GatewayRun, run_gateway
from support.provider_caches import BreakpointCache, OpenAIPrefixCache
from support.releases import release

import sessionkit as sk

pytestmark = pytest.mark.conformance

TTL = 300.0


RULES = {
    "openai": ({"provider": "custom", "model": "gpt-4o-mini"}, OpenAIPrefixCache),
    "openai-marked": (
        {"provider": "openrouter", "model": "anthropic/claude-sonnet-4.5"},
        BreakpointCache,
    ),
}
IDLE_TURNS = [2, 5]
"""The turns whose gap is over the TTL."""


@pytest.fixture(scope="module", params=sorted(RULES))
def case(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, GatewayRun]:
    overrides, rule = RULES[request.param]
    run = run_gateway(tmp_path_factory.mktemp(request.param), SCENARIO_CACHE | overrides, rule(TTL))
    return request.param, run


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
