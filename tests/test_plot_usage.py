"""Usage and cost plots: every point, bar, line and cell is read back from the artists and
equals the numbers of the frame drawn (frames built with known numbers, no gateway)."""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from genai_prices import Usage, calc_price
from matplotlib.axes import Axes

from sessionkit import plot
from sessionkit.accounting.calibration import Calibration, Fit
from sessionkit.accounting.ledger import ATTRIBUTIONS, KINDS
from sessionkit.accounting.pricing import cost
from sessionkit.plot.usage import usd
from sessionkit.schema import REQUEST_COSTS, REQUESTS, USAGE, frame
from sessionkit.testing import figures

NAN = float("nan")
MODEL = "gpt-4o-mini"


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


def _usage(rows: list[dict]) -> pd.DataFrame:
    """A usage frame: each row's given columns, the rest an attributed, reported agent call."""
    n = len(rows)
    base = {
        "kind": "agent",
        "source": "user",
        "reported": True,
        "calls": 1,
        "attribution": "exact",
        "session_key": "cli:a",
        "model": MODEL,
        "provider": "openai",
    }
    values = {c.name: [None] * n for c in USAGE}
    for column in {*base, *(k for r in rows for k in r)}:
        values[column] = [r.get(column, base.get(column)) for r in rows]
    values["kind"] = pd.Categorical(values["kind"], categories=KINDS)
    values["attribution"] = pd.Categorical(values["attribution"], categories=ATTRIBUTIONS)
    values["time"] = pd.to_datetime(values["time"], utc=True)
    return frame(USAGE, values)


def _at(day: int, hour: int) -> datetime:
    return datetime(2026, 1, day, hour, tzinfo=UTC)


@pytest.fixture(scope="module")
def usage() -> pd.DataFrame:
    """Two models' agent calls, a summary, an unreported, an unattributed and unpriced calls."""
    m, n = "m-model", "n-model"
    return _usage(
        [
            {"time": _at(1, 9), "model": m, "estimated_prompt_tokens": 100, "prompt_tokens": 150},
            {"time": _at(1, 10), "model": m, "estimated_prompt_tokens": 200, "prompt_tokens": 300},
            {"time": _at(1, 11), "model": n, "estimated_prompt_tokens": 400, "prompt_tokens": 440},
            {"time": _at(1, 8), "model": m, "estimated_prompt_tokens": 300, "prompt_tokens": 450},
            {"time": _at(1, 12), "kind": "summary", "estimated_prompt_tokens": 50},
            {"time": _at(1, 13), "reported": False, "estimated_prompt_tokens": 70},
            {"time": _at(1, 14), "session_key": None, "estimated_prompt_tokens": 90},
            {"time": _at(1, 15), "estimated_prompt_tokens": None, "prompt_tokens": 999},
        ]
    ).assign(prompt_tokens=lambda f: f["prompt_tokens"].fillna(1_000))


def _costed() -> pd.DataFrame:
    """Calls of three sessions over two days with known costs, some unpriced."""
    rows = [
        ("cli:a", _at(1, 9), 0.25),
        ("cli:a", _at(1, 10), 0.5),
        ("cli:b", _at(1, 11), NAN),
        ("cli:b", _at(2, 9), 1.0),
        ("cli:c", _at(2, 10), NAN),
        (None, _at(2, 11), 0.125),
    ]
    return _usage(
        [{"session_key": k, "time": t, "cost_usd": c, "prompt_tokens": 10} for k, t, c in rows]
    )


def _requests(max_messages: list[int], max_tokens: list[int], turns: int) -> pd.DataFrame:
    """A requests frame over a grid: one session, ``turns`` one-step turns per setting."""
    grid = [(m, t, turn) for m in max_messages for t in max_tokens for turn in range(turns)]
    n = len(grid)
    total = [1_000 * (turn + 1) + m + t // 10 for m, t, turn in grid]
    prefix = [0 if turn == 0 else 800 * turn for _, _, turn in grid]
    values = {c.name: [0] * n for c in REQUESTS} | {
        "session_key": ["cli:a"] * n,
        "policy": ["nanobot-0.2"] * n,
        "turn": [turn for *_, turn in grid],
        "max_messages": [m for m, _, _ in grid],
        "max_tokens": [t for _, t, _ in grid],
        "include_timestamps": [False] * n,
        "include_runtime_context": [False] * n,
        "extend_to_user": [False] * n,
        "last_consolidated": ["0"] * n,
        "context_window": [None] * n,
        "max_output": [None] * n,
        "total_tokens": total,
        "history_tokens": total,
        "prefix_tokens": prefix,
        "cache_ratio": [p / t for p, t in zip(prefix, total, strict=True)],
        "inferred": [False] * n,
        "cache_rules": ["openai"] * n,
        "cache_break": ["none"] * n,
    }
    return frame(REQUESTS, values)


def _costs(requests: pd.DataFrame, cost_usd: list[float], completion: int = 5) -> pd.DataFrame:
    """``requests`` with the cost columns, costs as given (prompt = total, cached = prefix)."""
    added = frame(
        REQUEST_COSTS,
        {
            "prompt_tokens": requests["total_tokens"],
            "cached_tokens": requests["prefix_tokens"],
            "written_tokens": [0] * len(requests),
            "completion_tokens": [completion] * len(requests),
            "cost_usd": cost_usd,
        },
    )
    return pd.concat([requests, added], axis=1)


def _gid(ax: Axes, gid: str) -> list:
    return [a for a in ax.get_children() if a.get_gid() == gid]


def _price(prompt: int, cached: int, completion: int) -> float:
    usage = Usage(input_tokens=prompt, cache_read_tokens=cached, output_tokens=completion)
    when = datetime(2026, 1, 1, tzinfo=UTC)
    price = calc_price(usage, MODEL, provider_id="openai", genai_request_timestamp=when)
    return float(price.total_price)


def test_usd_labels() -> None:
    assert [usd(v) for v in (1234.4, 12.345, 1.0, 0.0, 0.001234, NAN)] == [
        "$1,234",
        "$12.35",
        "$1.00",
        "$0.00",
        "$0.00123",
        "n/a",
    ]


def test_reported_vs_estimated_points_and_lines(usage) -> None:
    calibration = Calibration(
        {
            "m-model": Fit(1.5, 0.0, 3, 0, NAN, NAN, NAN, NAN),
            "other": Fit(2.0, 1.0, 3, 0, NAN, NAN, NAN, NAN),
        }
    )
    ax = plot.reported_vs_estimated(usage, calibration)
    (m,) = _gid(ax, "model=m-model")
    (n,) = _gid(ax, "model=n-model")
    assert m.get_offsets().tolist() == [[300, 450], [100, 150], [200, 300]], "in time order"
    assert n.get_offsets().tolist() == [[400, 440]]
    top = 450 * 1.05
    (diagonal,) = _gid(ax, "y=x")
    assert (list(diagonal.get_xdata()), list(diagonal.get_ydata())) == ([0, top], [0, top])
    (line,) = _gid(ax, "calibrated=m-model")
    assert (list(line.get_xdata()), list(line.get_ydata())) == ([0, top], [0.0, 1.5 * top])
    assert _gid(ax, "calibrated=n-model") == [] and _gid(ax, "calibrated=other") == []
    assert (ax.get_xlim(), ax.get_ylim()) == ((0, top), (0, top))
    assert ax.get_title("left") == "4 reported agent calls"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "m-model",
        "n-model",
        "reported = estimated",
        "m-model calibrated: x 1.5",
    ]
    plain = plot.reported_vs_estimated(usage)
    assert [line.get_gid() for line in plain.get_lines()] == ["y=x"]


def test_cost_per_session_keeps_unpriced_sessions_missing() -> None:
    ax = plot.cost_by(_costed())
    widths = [p.get_width() for p in ax.patches]
    assert widths[:2] == [0.125, 0.75] and np.isnan(widths[3])
    assert widths[2] == 1.0, "a partly priced session: the sum of its priced calls"
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "(unattributed)",
        "cli:a",
        "cli:b (1 unpriced)",
        "cli:c (1 unpriced)",
    ]
    assert [p.get_y() + p.get_height() / 2 for p in ax.patches] == [0, 1, 2, 3]
    assert ax.get_ylim() == (3.5, -0.5), "the first at the top"
    assert ax.get_title("left") == "cost per session (2 of 6 calls unpriced)"


def test_cost_per_day_in_the_zone_given() -> None:
    costed = _costed()
    ax = plot.cost_by(costed, by="day", tz=UTC)
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "2026-01-01 (1 unpriced)",
        "2026-01-02 (1 unpriced)",
    ]
    assert [p.get_width() for p in ax.patches] == [0.75, 1.125]
    late = costed.assign(time=costed["time"] + pd.Timedelta(hours=14))  # 23:00 UTC onwards
    tokyo = plot.cost_by(late, by="day", tz=pd.Timestamp(0, tz="Asia/Tokyo").tzinfo)
    assert [t.get_text() for t in tokyo.get_yticklabels()] == [
        "2026-01-02 (1 unpriced)",
        "2026-01-03 (1 unpriced)",
    ]
    priced = costed.assign(cost_usd=1.0)
    assert plot.cost_by(priced, by="day", tz=UTC).get_title("left") == "cost per day"
    with pytest.raises(ValueError, match="by must be 'session' or 'day', not 'model'"):
        plot.cost_by(costed, by="model")


def test_cumulative_cost_with_and_without_the_prefix_cache() -> None:
    requests = _requests([60], [0], 3).sample(frac=1.0, random_state=1)
    priced = cost(requests, model=MODEL, provider="openai", date="2026-01-01", completion_tokens=5)
    ax = plot.cumulative_cost(priced, model=MODEL, provider="openai", date="2026-01-01")
    ordered = priced.sort_values("turn")
    tokens = zip(ordered["total_tokens"], ordered["cached_tokens"], strict=True)
    cached = [_price(p, c, 5) for p, c in tokens]
    fresh = [_price(p, 0, 5) for p in ordered["total_tokens"]]
    assert ordered["cost_usd"].tolist() == cached
    (with_cache,) = _gid(ax, "cached")
    (without,) = _gid(ax, "uncached")
    assert with_cache.get_xdata().tolist() == [1, 2, 3]
    assert with_cache.get_ydata().tolist() == np.cumsum(cached).tolist()
    assert without.get_ydata().tolist() == np.cumsum(fresh).tolist()
    assert cached[0] == fresh[0] and cached[2] < fresh[2]
    saving = 1 - sum(cached) / sum(fresh)
    assert ax.get_title("left") == f"3 requests, {MODEL}: caching saves {saving:.0%}"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        f"prefix cached: {usd(np.cumsum(cached)[-1])}",
        f"no prefix cache: {usd(np.cumsum(fresh)[-1])}",
    ]


def test_cumulative_cost_breaks_at_a_missing_price() -> None:
    costs = _costs(_requests([60], [0], 3), [0.5, NAN, 0.25])
    ax = plot.cumulative_cost(costs, model="no-such-model-xyz")
    assert _gid(ax, "cached")[0].get_ydata()[:1].tolist() == [0.5]
    assert np.isnan(_gid(ax, "cached")[0].get_ydata()[1:]).all()
    assert np.isnan(_gid(ax, "uncached")[0].get_ydata()).all()
    assert ax.get_title("left") == "3 requests, no-such-model-xyz (1 of 3 requests unpriced)"


def test_cost_heatmap_cells_are_total_costs() -> None:
    requests = _requests([20, 60], [0, 2_000, 500], 2)
    costs = _costs(requests, [float(i) / 8 for i in range(len(requests))])
    ax = plot.cost_heatmap(costs.sample(frac=1.0, random_state=2))
    # rows: max_tokens 500, 2000, none; columns: max_messages 20, 60; 2 turns per cell
    sums = costs.groupby(["max_tokens", "max_messages"])["cost_usd"].sum()
    expected = [[sums[(t, m)] for m in (20, 60)] for t in (500, 2_000, 0)]
    assert ax.images[0].get_array().tolist() == expected
    assert expected == [[1.125, 2.625], [0.625, 2.125], [0.125, 1.625]]
    assert [t.get_text() for t in ax.texts] == [
        "$1.12",
        "$2.62",
        "$0.625",
        "$2.12",
        "$0.125",
        "$1.62",
    ]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["500", "2,000", "none"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["20", "60"]
    assert ax.get_title("left") == "total cost of 2 requests per setting"


def test_cost_heatmap_puts_no_limit_last_on_both_axes() -> None:
    requests = _requests([0, 20], [0, 500], 1)
    costs = _costs(requests, [float(i) for i in range(len(requests))])
    ax = plot.cost_heatmap(costs)
    sums = costs.groupby(["max_tokens", "max_messages"])["cost_usd"].sum()
    assert ax.images[0].get_array().tolist() == [[sums[(t, m)] for m in (20, 0)] for t in (500, 0)]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["20", "none"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["500", "none"]


def test_cost_heatmap_leaves_a_partly_unpriced_cell_blank() -> None:
    requests = _requests([20, 60], [0], 2)
    costs = _costs(requests, [1.0, NAN, 2.0, 3.0])
    ax = plot.cost_heatmap(costs)
    cells = ax.images[0].get_array()
    assert cells.mask.tolist() == [[True, False]] and cells[0, 1] == 5.0
    assert [t.get_text() for t in ax.texts] == ["n/a", "$5.00"]
    assert ax.get_title("left") == "total cost of 2 requests per setting (1 of 4 requests unpriced)"


def test_mixed_or_foreign_frames_are_refused() -> None:
    costs = _costs(_requests([20, 60], [0], 2), [1.0] * 4)
    with pytest.raises(ValueError, match=r"several max_messages values.*frame\['max_messages'\]"):
        plot.cumulative_cost(costs, model=MODEL)
    flags = costs.assign(include_timestamps=[False, True, False, True])
    with pytest.raises(ValueError, match="several include_timestamps values"):
        plot.cost_heatmap(flags)
    with pytest.raises(ValueError, match="draws a sessionkit.cost frame; this one has no cost_usd"):
        plot.cost_heatmap(_requests([20], [0], 1))


@pytest.mark.parametrize("width", [800, 1400])
def test_usage_figures_read_at_any_width(usage, width: int) -> None:
    calibration = Calibration({"m-model": Fit(1.5, 0.0, 3, 0, NAN, NAN, NAN, NAN)})
    costs = _costs(_requests([20, 60], [0, 2_000], 2), [0.5] * 8)
    one = costs[(costs["max_messages"] == 20) & (costs["max_tokens"] == 0)]
    drawn = [
        (plot.reported_vs_estimated(usage, calibration), lambda ax: [ax.xaxis, ax.yaxis]),
        (plot.cost_by(_costed()), lambda ax: []),
        (plot.cost_by(_costed(), by="day", tz=UTC), lambda ax: []),
        (plot.cumulative_cost(one, model=MODEL, date="2026-01-01"), lambda ax: [ax.xaxis]),
        (plot.cost_heatmap(costs), lambda ax: []),
    ]
    for ax, counts in drawn:
        fig = ax.figure
        fig.set_size_inches(width / fig.dpi, fig.get_figheight())
        assert figures.layout_problems(fig, counts=counts(ax)) == []


def test_a_cjk_session_key_draws_without_missing_glyphs() -> None:
    ax = plot.cost_by(_costed().assign(session_key="cli:中文"))
    assert [t.get_text() for t in ax.get_yticklabels()] == ["cli:中文 (2 unpriced)"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ax.figure.savefig(io.BytesIO(), format="png")
    assert [str(w.message) for w in caught if "missing from font" in str(w.message)] == []
