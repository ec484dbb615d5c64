"""An experiment's frontier: each setting's agreement with the session against what it sends
per call (tokens or dollars), and the settings no other beats on both."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import PercentFormatter, StrMethodFormatter

from sessionkit.experiments.agreement import agreement_by_setting
from sessionkit.plot.style import legend_beside, new_figure, plotting
from sessionkit.schema import AGREEMENT
from sessionkit.store.text import plot_label

__all__ = ["FRONTIER_X", "agreement_frontier"]

FRONTIER_X: dict[str, tuple[str, str]] = {
    "tokens": ("tokens_per_call", "prompt tokens per call (the release's estimate)"),
    "cost": ("cost_per_call", "cost per answered call (USD)"),
}
"""What :func:`agreement_frontier` can put on x: the column of the agreement frame and the
axis label."""


def _frontier(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The points no other beats on both (as cheap or cheaper and agreeing as much or more,
    better on one), by x ascending."""
    order = np.lexsort((-y, x))
    kept, best = [], -np.inf
    for at in order:
        if y[at] > best:
            kept.append(at)
            best = y[at]
    return np.array(kept, dtype=np.int64)


@plotting
def agreement_frontier(
    source: pd.DataFrame,
    *,
    x: str = "tokens",
    ax: Axes | None = None,
) -> Axes:
    """Each setting's agreement rate (answers taking the session's action) against its
    tokens per call (``x="tokens"``) or cost per answered call (``x="cost"``), and the
    frontier through the settings no other beats on both.

    ``source`` is a :func:`sessionkit.experiment` frame or its agreement per setting
    (:func:`sessionkit.experiments.agreement.agreement_by_setting`).  Each setting with an
    answer compared is one marker, a ``Line2D`` whose ``gid`` is its ``setting`` label and
    whose data is its (x, rate); the frontier is the ``Line2D`` with ``gid`` ``"frontier"``,
    drawn as steps (a setting left of it on the frontier agrees less).
    """
    if x not in FRONTIER_X:
        raise ValueError(f"x must be one of {', '.join(FRONTIER_X)}, not {x!r}")
    missing = [c.name for c in AGREEMENT if c.name not in source]
    table = agreement_by_setting(source) if missing else source
    column, label = FRONTIER_X[x]
    shown = table[(table["compared"] > 0) & table[column].notna()].reset_index(drop=True)
    xs = shown[column].to_numpy(dtype=float)
    ys = shown["agreement_rate"].to_numpy(dtype=float)
    if ax is None:
        ax = new_figure(7.5, 4.2).add_subplot()
    handles, labels = [], []
    for i, row in shown.iterrows():
        text = plot_label(row["setting"])
        (mark,) = ax.plot(
            [xs[i]], [ys[i]], linestyle="none", marker="o", markersize=7, gid=str(row["setting"])
        )
        handles.append(mark)
        labels.append(f"{text}: {ys[i]:.0%} of {row['compared']}")
    if len(shown):
        best = _frontier(xs, ys)
        ax.plot(
            xs[best],
            ys[best],
            drawstyle="steps-post",
            color="#7f7f7f",
            lw=1.2,
            ls="--",
            gid="frontier",
            zorder=1,
        )
    ax.set_ylim(0, 1.05)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}" if x == "tokens" else "${x:,.4f}"))
    ax.set_xlabel(label)
    ax.set_ylabel("answers taking the session's action")
    ax.set_title(f"agreement vs {x} per call", loc="left", fontsize=10)
    ax.grid(alpha=0.3)
    if handles:
        legend_beside(ax, handles, labels, title="setting", title_fontsize=8)
    return ax
