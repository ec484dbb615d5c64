"""Cached tokens predicted against reported, and the fitted cache lifetime, on a usage log
nanobot 0.3.5 wrote against a stub provider whose Anthropic-style cache (writes reported)
keeps entries 2 minutes: the fit finds the range of lifetimes that reproduces every report,
and ``sk.cost(..., cache_ttl="fitted")`` prices with it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support.e2e import SCENARIO_CACHE, GatewayRun, run_gateway
from support.provider_caches import BreakpointCache
from support.releases import release

import sessionkit as sk
from sessionkit.accounting.cache_fit import fit_caches
from sessionkit.schema import CACHE_CALIBRATION

pytestmark = pytest.mark.conformance

MODEL = "anthropic/claude-sonnet-4.5"
STUB_TTL = 120.0


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The usage log and the requests frame (cache columns at the default 300 s) of one run."""
    scenario = SCENARIO_CACHE | {"provider": "openrouter", "model": MODEL}
    run: GatewayRun = run_gateway(
        tmp_path_factory.mktemp("fit"), scenario, BreakpointCache(STUB_TTL)
    )
    usage = sk.usage(run.data_dir, cache=False)
    requests = sk.requests(
        sk.load(run.sessions_dir, cache=False),
        workspace=run.workspace,
        config_dir=run.config,
        nanobot=release("0.3.5").python,
        usage=usage,
    )
    return usage, requests.sort_values(["turn", "step"], ignore_index=True)


def _gaps(requests: pd.DataFrame) -> list[float]:
    """Seconds before each turn's first call (from the call before it)."""
    ms = requests["time"].dt.as_unit("ms").array.asi8
    starts = np.flatnonzero(requests["step"].to_numpy() == 0)[1:]
    return [(ms[i] - ms[i - 1]) / 1000 for i in starts]


def test_the_fitted_ttl_reproduces_every_reported_read_and_write(logged) -> None:
    usage, requests = logged
    calibration = sk.calibrate(usage, requests)
    report = calibration.cache_report
    assert list(report.columns) == [c.name for c in CACHE_CALIBRATION]
    row = report.set_index("model").loc[MODEL]
    gaps = _gaps(requests)  # 60, 420, 200, 30, 600 s and the turns' own seconds
    assert (row["cache_rules"], row["calls"], row["write_calls"]) == ("openai-marked", 9, 9)
    assert (row["read_median"], row["read_p90"], row["write_median"], row["write_p90"]) == (
        0,
        0,
        0,
        0,
    )
    assert (row["predicted_read"], row["predicted_write"]) == (
        usage["cached_tokens"].sum(),
        usage["cache_write_tokens"].sum(),
    )
    # warm up to the 60 s gap, cold from the 200 s one: the stub's 120 s lies between
    assert (row["ttl_low"], row["ttl_high"]) == (gaps[0], gaps[2])
    assert row["ttl"] == gaps[0] == calibration.cache_ttl(MODEL)
    # at the default 300 s the 200 s gap is predicted warm: one turn's read and write are off
    missed = (
        requests["cache_read_tokens"].to_numpy()
        != usage.sort_values("call_id")["cached_tokens"].to_numpy()
    )
    assert requests.loc[missed, "turn"].unique().tolist() == [3]


def test_cost_prices_with_the_fitted_ttl(logged) -> None:
    usage, requests = logged
    calibration = sk.calibrate(usage, requests)
    fitted = sk.cost(requests, model=MODEL, calibration=calibration, cache_ttl="fitted")
    same = sk.cost(
        requests, model=MODEL, calibration=calibration, cache_ttl=calibration.cache_ttl(MODEL)
    )
    pd.testing.assert_frame_equal(fitted, same)
    reported = usage.sort_values("call_id")
    assert fitted["cache_read_tokens"].tolist() == reported["cached_tokens"].tolist()
    assert fitted["cache_write_tokens"].tolist() == reported["cache_write_tokens"].tolist()
    with pytest.raises(ValueError, match='cache_ttl="fitted" needs calibration='):
        sk.cost(requests, model=MODEL, cache_ttl="fitted")
    with pytest.raises(KeyError, match="no cache lifetime fitted for model 'gpt-4o'"):
        sk.cost(requests, model="gpt-4o", calibration=calibration, cache_ttl="fitted")
    with pytest.raises(ValueError, match="not 'soon'"):
        sk.cost(requests, model=MODEL, cache_ttl="soon")


def test_without_requests_or_with_several_settings(logged) -> None:
    usage, requests = logged
    assert sk.calibrate(usage).cache_report.empty
    both = pd.concat([requests, requests.assign(max_messages=10)], ignore_index=True)
    with pytest.raises(ValueError, match="several rows per call"):
        fit_caches(usage, both)
