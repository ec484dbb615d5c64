"""Costs: exactly what genai-prices' own ``calc_price`` gives for each call (cache reads and
writes, dated and time-of-day prices, token tiers), NaN and a named problem for an unknown
model; ``cost`` prices a settings grid's requests with their prefix as cache reads."""

from __future__ import annotations

from datetime import UTC, date, datetime

import numpy as np
import pandas as pd
import pytest
from genai_prices import Usage, calc_price
from support.request_rows import request_rows
from support.usage_fixtures import call, ledger, write_log

from sessionkit.accounting.calibration import Calibration, Fit
from sessionkit.accounting.pricing import cost

ROWS = [
    call(1, 1200, 40, cached=1000),
    call(2, 1200, 40, cached=1000, provider="custom"),
    call(3, 5000, 300, cached=2000, written=1500, model="claude-sonnet-4-5", provider="anthropic"),
    call(4, 250_000, 900, cached=100_000, model="gemini-2.5-pro", provider="google"),
    call(5, 180_000, 900, cached=100_000, model="gemini-2.5-pro", provider="google"),
    call(6, 3000, 100, cached=1000, model="deepseek-chat", provider="deepseek"),
    call(7 * 3600 + 7, 3000, 100, cached=1000, model="deepseek-chat", provider="deepseek"),
    call(9, 700, 7, model="stub-model", provider="custom"),
]
ORACLE_PROVIDER = ["openai", None, "anthropic", "google", "google", "deepseek", "deepseek"]


def _oracle(row: tuple, provider: str | None) -> float:
    usage = Usage(
        input_tokens=row[7],
        output_tokens=row[8],
        cache_read_tokens=row[10],
        cache_write_tokens=row[11],
    )
    when = datetime.fromtimestamp(row[0] / 1000, UTC)
    return float(
        calc_price(usage, row[3], provider_id=provider, genai_request_timestamp=when).total_price
    )


def test_each_call_costs_what_genai_prices_calculates(tmp_path) -> None:
    write_log(tmp_path, ROWS)
    reported = ledger(tmp_path)
    frame = reported.sort_values("call_id", ignore_index=True)
    expected = [_oracle(r, p) for r, p in zip(ROWS, ORACLE_PROVIDER, strict=False)]
    assert frame["cost_usd"].tolist()[:7] == expected
    assert np.isnan(frame["cost_usd"].iloc[7])
    # off-peak and peak deepseek, and the two gemini tiers, really are priced apart
    assert expected[5] != expected[6] and expected[3] / 250_000 != expected[4] / 180_000
    assert reported.notes["reason"].tolist() == [
        "provider 'custom' is unknown to genai-prices: 'gpt-4o-mini' priced at openai's prices"
    ]
    assert reported.problems["reason"].tolist() == [
        "no price for model 'stub-model' (provider 'custom') in genai-prices: cost_usd NaN for "
        "1 call(s) (Unable to find provider with model matching 'stub-model')",
    ]


def _grid() -> pd.DataFrame:
    return request_rows(
        4,
        max_messages=[60, 60, 120, 120],
        turn=[0, 1, 0, 1],
        total_tokens=[8000, 9100, 8000, 12_000],
        prefix_tokens=[0, 7900, 0, 7000],
        answer_tokens=[12, 30, 12, 40],
    )


def test_cost_prices_each_request_with_its_shared_prefix_as_cache_reads() -> None:
    grid = _grid()
    priced = cost(grid, model="gpt-4o-mini", provider="openai", date="2026-01-01")
    reads = [0, 7808, 0, 6912]  # OpenAI's 128-token steps of the shared prefix
    when = datetime(2026, 1, 1, tzinfo=UTC)
    expected = [
        float(
            calc_price(
                Usage(input_tokens=t, cache_read_tokens=p, output_tokens=o),
                "gpt-4o-mini",
                provider_id="openai",
                genai_request_timestamp=when,
            ).total_price
        )
        for t, p, o in zip(grid["total_tokens"], reads, grid["answer_tokens"], strict=True)
    ]
    assert priced["cost_usd"].tolist() == expected
    assert priced[["prompt_tokens", "cached_tokens", "completion_tokens"]].values.tolist() == [
        [8000, 0, 12],
        [9100, 7808, 30],
        [8000, 0, 12],
        [12000, 6912, 40],
    ]
    assert list(priced.columns[: len(grid.columns)]) == list(grid.columns)
    assert priced.problems.empty
    flat = cost(grid, model="gpt-4o-mini", date="2026-01-01", completion_tokens=5)
    assert flat["completion_tokens"].tolist() == [5, 5, 5, 5]


def test_cost_prices_anthropic_writes_at_the_ttls_premium() -> None:
    grid = request_rows(
        2,
        turn=[0, 1],
        tools_tokens=2000,
        system_tokens=3000,
        history_messages=[2, 4],
        last_results_tokens=[100, 100],
        total_tokens=[8000, 9100],
        prefix_tokens=[0, 8000],
        time=["2026-01-01T10:00Z", "2026-01-01T10:04Z"],
    )
    when = datetime(2026, 1, 1, tzinfo=UTC)

    def price(**usage: int) -> float:
        found = calc_price(Usage(**usage), "claude-sonnet-4-5", genai_request_timestamp=when)
        return float(found.total_price)

    short = cost(grid, model="claude-sonnet-4-5", cache_rules="anthropic", date=when)
    assert short["cached_tokens"].tolist() == [0, 7900]  # the first call's breakpoint
    assert short["written_tokens"].tolist() == [7900, 1100]  # up to each call's breakpoint
    expected = [
        price(input_tokens=8000, cache_write_tokens=7900, output_tokens=0),
        price(input_tokens=9100, cache_read_tokens=7900, cache_write_tokens=1100),
    ]
    assert short["cost_usd"].tolist() == pytest.approx(expected, rel=1e-12)
    hour = cost(grid, model="claude-sonnet-4-5", cache_rules="anthropic", cache_ttl=3600, date=when)
    extra = [0.75 * price(input_tokens=w) for w in (7900, 1100)]  # 2x instead of 1.25x input
    assert hour["cost_usd"].tolist() == pytest.approx(
        [a + b for a, b in zip(expected, extra, strict=True)], rel=1e-12
    )
    idle = cost(grid, model="claude-sonnet-4-5", cache_rules="anthropic", cache_ttl=60, date=when)
    assert idle["cached_tokens"].tolist() == [0, 0]
    assert idle["cache_break"].tolist() == ["first call", "idle past the TTL"]


def test_cost_through_a_calibration_scales_prompt_and_prefix() -> None:
    nan = float("nan")
    calibration = Calibration({"gpt-4o-mini": Fit(1.5, 10.0, 8, 2, nan, nan, nan, nan)})
    priced = cost(_grid(), model="gpt-4o-mini", calibration=calibration, date="2026-01-01")
    assert priced["prompt_tokens"].tolist() == [12010, 13660, 12010, 18010]
    assert priced["cached_tokens"].tolist() == [0, 7808 * 13660 // 9100, 0, 6912 * 18010 // 12000]
    assert priced["completion_tokens"].tolist() == [12, 30, 12, 40]  # no answer line: as stored
    answers = Fit(0.5, 2.0, 8, 2, nan, nan, nan, nan)
    both = Calibration({"gpt-4o-mini": calibration.fits["gpt-4o-mini"]}, {"gpt-4o-mini": answers})
    fitted = cost(_grid(), model="gpt-4o-mini", calibration=both, date="2026-01-01")
    assert fitted["completion_tokens"].tolist() == [8, 17, 8, 22]


def test_cost_of_an_unknown_model_is_nan_and_a_problem() -> None:
    priced = cost(_grid(), model="no-such-model-xyz", date="2026-01-01")
    assert priced["cost_usd"].isna().all()
    assert priced.problems["reason"].tolist() == [
        "no price for model 'no-such-model-xyz' (provider None) in genai-prices: cost_usd NaN "
        "for 4 call(s) (Unable to find provider with model matching 'no-such-model-xyz')"
    ]


@pytest.mark.parametrize(
    ("moment", "when"),
    [
        ("2026-01-01T02:00", datetime(2026, 1, 1, 2, tzinfo=UTC)),
        (datetime(2026, 1, 1, 20, tzinfo=UTC), datetime(2026, 1, 1, 20, tzinfo=UTC)),
        (date(2026, 1, 1), datetime(2026, 1, 1, tzinfo=UTC)),
    ],
)
def test_cost_takes_the_prices_of_its_date(moment, when) -> None:
    priced = cost(_grid().head(1), model="deepseek-chat", provider="deepseek", date=moment)
    usage = Usage(input_tokens=8000, cache_read_tokens=0, output_tokens=12)
    expected = calc_price(
        usage, "deepseek-chat", provider_id="deepseek", genai_request_timestamp=when
    )
    assert priced["cost_usd"].tolist() == [float(expected.total_price)]
