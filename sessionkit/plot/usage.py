"""Usage and cost drawn: reported against estimated prompt tokens (and the calibrated line),
cost per session or day, cumulative cost with and without prefix caching, and a what-if
heatmap of total cost over a settings grid.

The first two take a :func:`sessionkit.usage` frame, the last two a :func:`sessionkit.cost`
frame.  A cost genai-prices has no price for stays missing (NaN): a bar not drawn, a line
broken, a blank cell, and a count in the title, never a 0.
"""

from __future__ import annotations

import datetime as dt
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, cast

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter

from sessionkit.accounting.calibration import Calibration
from sessionkit.accounting.pricing import price_calls, price_moment
from sessionkit.accounting.report import usage_table
from sessionkit.plot.requests import SETTING_COLUMNS
from sessionkit.plot.style import compact, count_axis, legend_beside, new_figure, plotting
from sessionkit.plot.sweeps import budget_label, budget_order
from sessionkit.store.text import plot_label

if TYPE_CHECKING:
    from matplotlib.colors import Normalize

__all__ = ["cost_by", "cost_heatmap", "cumulative_cost", "reported_vs_estimated", "usd"]

_GRID = ("max_messages", "max_tokens")
_ORDER = ("session_key", "turn", "step")
_PRICED = ("prompt_tokens", "completion_tokens")


def usd(value: float, _pos: int | None = None) -> str:
    """A cost (or a tick) as a short label: $1,234, $12.35, $0.00123; 'n/a' when unknown (NaN)."""
    if np.isnan(value):
        return "n/a"
    if abs(value) >= 100:
        return f"${value:,.0f}"
    if abs(value) >= 1 or value == 0:
        return f"${value:,.2f}"
    return f"${value:.3g}"


def _unpriced(count: int, of: int, what: str) -> str:
    """The title's note on missing prices ('' when every one is priced)."""
    return f" ({count} of {of} {what} unpriced)" if count else ""


@plotting
def reported_vs_estimated(
    usage: pd.DataFrame, calibration: Calibration | None = None, ax: Axes | None = None
) -> Axes:
    """Each attributed agent call whose usage the provider reported: its reported prompt
    tokens (y) against sessionkit's estimate of its request (x), one scatter per model
    (``gid`` ``"model=<model>"``), the line y = x (``gid`` ``"y=x"``) and, with a
    ``calibration``, each plotted model's calibrated line (``gid`` ``"calibrated=<model>"``)."""
    rows = usage[
        (usage["kind"] == "agent")
        & usage["session_key"].notna()
        & usage["reported"].fillna(False).astype(bool)
        & usage["estimated_prompt_tokens"].notna()
        & usage["prompt_tokens"].notna()
        & usage["model"].notna()
    ].sort_values("time", kind="stable")
    if ax is None:
        ax = new_figure(7.0, 4.5).add_subplot()
    top = 1.0
    models = list(rows.groupby(rows["model"].astype(str), sort=True))
    for model, group in models:
        x = group["estimated_prompt_tokens"].to_numpy(dtype=np.float64)
        y = group["prompt_tokens"].to_numpy(dtype=np.float64)
        ax.scatter(x, y, s=12, alpha=0.7, label=plot_label(model), gid=f"model={model}")
        top = max(top, x.max(), y.max())
    top *= 1.05
    ax.plot([0, top], [0, top], color="black", linewidth=1, label="reported = estimated", gid="y=x")
    if calibration is not None:
        for model, _ in models:
            if model in calibration.fits:
                fit = calibration.fits[model]
                ax.plot(
                    [0, top],
                    [fit.intercept, fit.slope * top + fit.intercept],
                    linestyle="--",
                    linewidth=1,
                    label=f"{plot_label(model)} calibrated: x {fit.slope:.3g}",
                    gid=f"calibrated={model}",
                )
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("estimated prompt tokens (rebuilt request)")
    ax.set_ylabel("reported prompt tokens")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FuncFormatter(compact))
        count_axis(axis)
    ax.set_title(f"{len(rows):,} reported agent calls", loc="left", fontsize=10)
    legend_beside(ax, *ax.get_legend_handles_labels())
    return ax


@plotting
def cost_by(
    usage: pd.DataFrame, by: str = "session", ax: Axes | None = None, *, tz: tzinfo | None = None
) -> Axes:
    """Cost per session or per day (local to ``tz``, default this machine's zone) as
    horizontal bars, first at the top: a bar's width is the sum of its priced calls, NaN (no
    bar) when none is priced; a label names its calls without a price and the title counts
    them.  Calls tied to no session form one bar, '(unattributed)'."""
    if by not in ("session", "day"):
        raise ValueError(f"by must be 'session' or 'day', not {by!r}")
    table = usage_table(usage, by=by, tz=tz)
    if ax is None:
        ax = new_figure(7.0, max(2.5, 1.4 + 0.25 * len(table))).add_subplot()
    ax.barh(np.arange(len(table)), table["cost_usd"].to_numpy(dtype=np.float64), color="#4c72b0")
    labels = [
        plot_label(name) + (f" ({n} unpriced)" if n else "")
        for name, n in zip(table[by], table["unpriced"], strict=True)
    ]
    ax.set_yticks(np.arange(len(table)), labels)
    ax.set_ylim(max(len(table), 1) - 0.5, -0.5)
    ax.set_xlabel("cost (USD)")
    ax.xaxis.set_major_formatter(FuncFormatter(usd))
    unpriced, calls = int(table["unpriced"].sum()), int(table["calls"].sum())
    ax.set_title(f"cost per {by}{_unpriced(unpriced, calls, 'calls')}", loc="left", fontsize=10)
    return ax


def _one_setting(
    costs: pd.DataFrame, what: str, needed: tuple[str, ...], varying: tuple[str, ...] = ()
) -> None:
    """Refuse a frame without the ``needed`` columns of a cost frame, or one that mixes
    releases or settings (but the ``varying`` ones)."""
    missing = [c for c in ("cost_usd", *needed) if c not in costs.columns]
    if missing:
        raise ValueError(
            f"{what} draws a sessionkit.cost frame; this one has no {', '.join(missing)}"
        )
    for column in ("policy", *SETTING_COLUMNS):
        if column in costs.columns and column not in varying and costs[column].nunique() > 1:
            raise ValueError(
                f"{what} draws one release and setting; the frame has several {column} "
                f"values: select one first, e.g. frame[frame[{column!r}] == ...]"
            )


@plotting
def cumulative_cost(
    costs: pd.DataFrame,
    ax: Axes | None = None,
    *,
    model: str,
    provider: str | None = None,
    date: datetime | dt.date | str | None = None,
) -> Axes:
    """The running total of a :func:`sessionkit.cost` frame of one setting over its calls
    (sessions, turns and steps in order): as priced, its prefix read from the provider's
    cache (``gid`` ``"cached"``), and every prompt token priced as fresh input (``gid``
    ``"uncached"``).  ``model``, ``provider`` and ``date`` are those the frame was priced
    with (``cost`` keeps no record of them); a missing price breaks the line from there."""
    _one_setting(costs, "cumulative_cost", _ORDER + _PRICED)
    calls = costs.sort_values(list(_ORDER), kind="stable")
    prompt = calls["prompt_tokens"].to_numpy(dtype=np.int64)
    completion = calls["completion_tokens"].to_numpy(dtype=np.int64)
    counts = np.stack([prompt, np.zeros_like(prompt), np.zeros_like(prompt), completion], axis=1)
    n = len(calls)
    at = np.full(n, int(price_moment(date).timestamp() * 1000), dtype=np.int64)
    fresh = price_calls([model] * n, [provider] * n, at, counts).cost
    if ax is None:
        ax = new_figure(8.0, 3.8).add_subplot()
    x = np.arange(1, n + 1)
    totals = []
    for gid, values, label in (
        ("cached", calls["cost_usd"].to_numpy(dtype=np.float64), "prefix cached"),
        ("uncached", fresh, "no prefix cache"),
    ):
        running = np.cumsum(values)
        total = float(running[-1]) if n else 0.0
        totals.append(total)
        ax.plot(x, running, label=f"{label}: {usd(total)}", gid=gid)
    head = f"{n:,} requests, {plot_label(model)}"
    if n and not np.isnan(totals).any() and totals[1] > 0:
        head += f": caching saves {1 - totals[0] / totals[1]:.0%}"
    missing = int(np.isnan(calls["cost_usd"].to_numpy(dtype=np.float64)).sum())
    ax.set_title(head + _unpriced(missing, n, "requests"), loc="left", fontsize=10)
    ax.set_xlim(0, max(n, 1))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("requests (sessions, turns and steps in order)")
    ax.set_ylabel("cumulative cost (USD)")
    ax.yaxis.set_major_formatter(FuncFormatter(usd))
    count_axis(ax.xaxis)
    legend_beside(ax, *ax.get_legend_handles_labels())
    return ax


@plotting
def cost_heatmap(costs: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Total cost of a :func:`sessionkit.cost` frame per (max_tokens, max_messages), as a
    heatmap: ``ax.images[0].get_array()`` is the grid, rows ``max_tokens`` ascending with no
    budget (0) last, columns ``max_messages`` ascending with no limit (0) last; a cell with any unpriced request
    is NaN (blank, 'n/a'), never a partial sum."""
    _one_setting(costs, "cost_heatmap", _GRID, varying=_GRID)
    cells = costs.groupby(list(_GRID))["cost_usd"]
    total = cells.sum().where(cells.count() == cells.size())
    grid = total.unstack("max_messages").astype(float)
    grid = grid.reindex(index=budget_order(grid.index), columns=budget_order(grid.columns))
    if ax is None:
        ax = new_figure(7.0, 4.2).add_subplot()
    image = ax.imshow(grid.to_numpy(), origin="lower", aspect="auto", cmap="viridis")
    # imshow without a norm: a Normalize.
    middle = (
        np.nanmean(cast("Normalize", image.norm).inverse(0.5)) if grid.notna().any().any() else 0.0
    )
    for (row, col), cell in np.ndenumerate(grid.to_numpy()):
        colour = "black" if cell > middle else "white"
        ax.text(col, row, usd(cell), ha="center", va="center", fontsize=8, color=colour)
    ax.set_xticks(range(grid.shape[1]), [budget_label(m) for m in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [budget_label(b) for b in grid.index])
    ax.set_xlabel("max_messages")
    ax.set_ylabel("max_tokens")
    per_cell = int(cells.size().max()) if len(costs) else 0
    missing = int(costs["cost_usd"].isna().sum())
    title = f"total cost of {per_cell:,} requests per setting"
    ax.set_title(title + _unpriced(missing, len(costs), "requests"), loc="left", fontsize=10)
    ax.figure.colorbar(image, ax=ax, label="total cost (USD)", format=FuncFormatter(usd))
    return ax
