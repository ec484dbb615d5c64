"""The nanobot releases side by side: tokens each sends per turn, turns cut, summaries.

Each release's colour and legend name come from its release object
(``sk.get_policy(name).colour`` and ``.label``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, PercentFormatter

from sessionkit.conventions import is_many
from sessionkit.nanobot.policies import POLICIES, get_policy
from sessionkit.nanobot.session import Session
from sessionkit.plot.style import compact, count_axis, legend_beside, new_figure, plotting
from sessionkit.plot.sweeps import TRUNCATING_CUTS
from sessionkit.simulate.windowing import DEFAULT_MAX_OUTPUT, SAFETY_BUFFER, windows
from sessionkit.store.corpus import resolve_session
from sessionkit.store.text import plot_label

if TYPE_CHECKING:
    from sessionkit.store.corpus import Corpus

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "release_comparison",
    "release_summary",
]


DEFAULT_CONTEXT_WINDOW = 200_000
"""nanobot's default ``context_window_tokens`` (the same in 0.2.2, 0.3.0 and 0.3.5)."""
SUMMARY_COLOR = "#d62728"
"""Turns where 0.3.5's context governor would have summarised."""


def _release_windows(
    source: Session | Corpus | Iterable[Session] | pd.DataFrame,
    policies: Sequence[str],
    context_window: int | Sequence[int],
    max_output: int,
) -> pd.DataFrame:
    """Windows of every release in ``policies`` from one :func:`sessionkit.windows` call (or
    the frame given), turns answered without the model (``command``) left out."""
    if isinstance(source, pd.DataFrame):
        frame = source[source["policy"].isin(list(policies))]
    else:
        windows_given = (
            cast("Sequence[int]", context_window) if is_many(context_window) else [context_window]
        )
        grid: dict[str, Sequence[Any]] = {
            "policy": list(policies),
            "context_window": list(windows_given),
        }
        frame = windows(source, grid=grid, max_output=max_output)
    if frame["context_window"].isna().any() or frame["max_output"].nunique() > 1:
        raise ValueError(
            "release plots need windows made from one max_output and a context_window "
            "(sk.windows(..., grid={'policy': [...]}, context_window=..., max_output=...))"
        )
    return frame[~frame["command"]]


def _drawn(frame: pd.DataFrame, policies: Sequence[str]) -> list[str]:
    """The releases of ``policies`` present in ``frame``, in the order asked for."""
    present = set(frame["policy"].astype(str))
    return [name for name in policies if name in present]


def _label(name: str) -> str:
    return get_policy(name).label


def _loop_note(rows: pd.DataFrame) -> str:
    """What the release's agent loop passed to ``get_history``, for a legend entry."""
    count, budget = int(rows["max_messages"].iloc[0]), int(rows["max_tokens"].iloc[0])
    window = f"{count:,} messages" if count > 0 else "no count window"
    return f"{window}, {'no budget' if budget <= 0 else f'budget {budget:,}'}"


@plotting
def release_comparison(
    source: Session | Corpus | pd.DataFrame,
    key: str | None = None,
    *,
    context_window: int = DEFAULT_CONTEXT_WINDOW,
    max_output: int = DEFAULT_MAX_OUTPUT,
    policies: Sequence[str] = tuple(POLICIES),
    ax: Axes | None = None,
) -> Axes:
    """Tokens each release sends at every turn of one session, with 0.3.5's summaries marked.

    ``source`` is a session, a Corpus with ``key``, or a :func:`sessionkit.windows` frame of
    one session and one ``context_window`` (with a ``policy`` per release).  One line per
    release (``gid`` ``"policy:<name>"``, x = turn, y = ``tokens_kept``); markers where
    ``needs_summary`` (``gid`` ``"needs_summary:<name>"``); the input budget
    ``context_window - max_output - 1024`` (``gid`` ``"budget"``).  Turns answered without
    the model (``command``) are left out.
    """
    if key is not None and not isinstance(source, pd.DataFrame):
        source = resolve_session(source, key)
    frame = _release_windows(source, policies, context_window, max_output)
    if frame["session_key"].nunique() > 1 or frame["context_window"].nunique() > 1:
        raise ValueError("release_comparison draws one session at one context_window")
    if ax is None:
        ax = new_figure(10.0, 3.8).add_subplot()
    for name in _drawn(frame, policies):
        rows = frame[frame["policy"] == name]
        label = f"{_label(name)} ({_loop_note(rows)})"
        (line,) = ax.plot(
            rows["turn"], rows["tokens_kept"], lw=1.2, color=get_policy(name).colour, label=label
        )
        line.set_gid(f"policy:{name}")
        over = rows[rows["needs_summary"].fillna(False).to_numpy(dtype=bool)]
        if len(over):
            (marks,) = ax.plot(
                over["turn"],
                over["tokens_kept"],
                ls="none",
                marker="v",
                ms=5,
                color=SUMMARY_COLOR,
                label=f"{_label(name)} would summarise ({len(over):,} turns)",
            )
            marks.set_gid(f"needs_summary:{name}")
    if len(frame):
        ctx, out = int(frame["context_window"].iloc[0]), int(frame["max_output"].iloc[0])
        budget = ctx - out - SAFETY_BUFFER
        title = f"{plot_label(frame['session_key'].iloc[0])}: context window {ctx:,}, max_output {out:,}"
        if budget > 0:
            ax.axhline(budget, color="#7f7f7f", ls="--", lw=1.0).set(
                gid="budget", label=f"input budget {budget:,}"
            )
        ax.set_title(title, loc="left", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    count_axis(ax.yaxis)
    ax.yaxis.set_major_formatter(compact)
    ax.set_xlabel("user turn")
    ax.set_ylabel("history tokens sent")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    legend_beside(ax, handles, labels)
    return ax


def _release_stats(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (policy, context_window): median and p90 tokens sent, share of turns cut, and
    turns that need a summary (<NA> where the release has no governor)."""
    summary = frame["needs_summary"]
    stats = frame.assign(
        cut_turn=frame["cut"].isin(TRUNCATING_CUTS),
        summary=summary.fillna(False),
        governed=summary.notna(),
    ).groupby(["policy", "context_window"], observed=True)
    table = stats.agg(
        median=("tokens_kept", "median"),
        p90=("tokens_kept", lambda s: s.quantile(0.9)),
        cut=("cut_turn", "mean"),
        summaries=("summary", "sum"),
        governed=("governed", "any"),
    )
    table["summaries"] = table["summaries"].astype("Int64").where(table["governed"])
    return table.drop(columns="governed")


@plotting
def release_summary(
    source: Corpus | Session | Iterable[Session] | pd.DataFrame,
    *,
    context_window: int | Sequence[int] = DEFAULT_CONTEXT_WINDOW,
    max_output: int = DEFAULT_MAX_OUTPUT,
    policies: Sequence[str] = tuple(POLICIES),
) -> Figure:
    """Per release and context window, over every turn: tokens sent, turns cut, summaries.

    ``source`` is a Corpus, a Session, sessions, or a :func:`sessionkit.windows` frame with
    one ``max_output`` and a ``policy`` per release.  Three panels, x = context window, one
    bar per release in each group (patches' ``gid`` = the policy name): the median tokens
    sent per turn (the p90 as a marker, ``gid`` ``"p90:<name>"``); the share of turns whose
    window is cut (``cut`` in :data:`TRUNCATING_CUTS`); the number of turns where the release
    would have summarised (``needs_summary``; only 0.3.5 has a governor, the others get no
    bar).  Turns answered without the model (``command``) are left out.
    """
    frame = _release_windows(source, policies, context_window, max_output)
    stats = _release_stats(frame)
    names = _drawn(frame, policies)
    contexts = sorted(int(c) for c in frame["context_window"].unique())
    fig = new_figure(10.0, 3.6)
    axes = fig.subplots(1, 3)
    width = 0.8 / max(len(names), 1)
    titles = ("tokens sent per turn (median, p90)", "turns cut", "turns that need a summary")
    handles: list = []  # the median bars, then one p90 marker
    p90s: list = []
    for ax, column, title in zip(axes, ("median", "cut", "summaries"), titles, strict=True):
        for i, name in enumerate(names):
            rows = stats.loc[name].reindex(contexts)
            x = np.arange(len(contexts)) + (i - (len(names) - 1) / 2) * width
            values = rows[column].astype(float).to_numpy()
            shown = ~np.isnan(values)
            bars = ax.bar(x[shown], values[shown], width, color=get_policy(name).colour)
            for bar in bars:
                bar.set_gid(name)
            if column == "median":
                bars.set_label(_label(name))
                handles.append(bars)
                (p90,) = ax.plot(
                    x, rows["p90"].to_numpy(dtype=float), "_", ms=12, mew=2, color="#222222"
                )
                p90.set(gid=f"p90:{name}", label="p90 per turn")
                p90s.append(p90)
            elif column == "summaries":
                ax.bar_label(bars, fmt="{:,.0f}", fontsize=8)
        # Upright labels fit five groups on a third of the figure; more stand on end.
        ax.set_xticks(
            range(len(contexts)),
            [compact(c) for c in contexts],
            rotation=0 if len(contexts) <= 5 else 90,
        )
        ax.set_xlim(-0.5, len(contexts) - 0.5)
        ax.set_xlabel("context window")
        ax.set_title(title, loc="left", fontsize=10)
        ax.set_ylim(bottom=0)
    count_axis(axes[0].yaxis)
    axes[0].yaxis.set_major_formatter(compact)
    axes[1].yaxis.set_major_formatter(PercentFormatter(1.0))
    axes[1].set_ylim(0, 1.02)
    count_axis(axes[2].yaxis)
    most = stats["summaries"].fillna(0).max() if len(stats) else 0
    axes[2].set_ylim(0, 1.4 * max(float(most), 1.0))
    ungoverned = [_label(n) for n in names if stats.loc[n, "summaries"].isna().all()]
    if ungoverned:
        axes[2].text(
            0.02,
            0.97,
            f"{', '.join(ungoverned)}: no governor\n(trimmed to the budget instead)",
            transform=axes[2].transAxes,
            va="top",
            fontsize=8,
            color="#555555",
            gid="no_governor",
        )
    fig.legend(
        handles=handles + p90s[:1],
        loc="outside lower center",
        ncols=len(handles) + 1,
        fontsize=8,
        frameon=False,
    )
    return fig
