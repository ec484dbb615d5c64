"""Whole requests drawn: where each call's tokens go (stacked parts per call, the context
window and the governor's budget as lines), and how much of each request a provider's
prefix cache could reuse, for two settings side by side."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, PercentFormatter

from sessionkit.nanobot.release import SAFETY_BUFFER
from sessionkit.plot.style import compact, count_axis, legend_beside, new_figure, plotting

__all__ = ["PART_COLORS", "cache_ratio", "request_composition"]

PART_COLORS: dict[str, str] = {
    "tools_tokens": "#8c8c8c",
    "system_tokens": "#4c72b0",
    "history_tokens": "#dd8452",
    "current_tokens": "#55a868",
    "steps_tokens": "#c44e52",
}
"""The parts of a request, bottom to top, and their colours (columns of
:func:`sessionkit.requests`)."""
_PART_LABELS = {
    "tools_tokens": "tool definitions",
    "system_tokens": "system prompt",
    "history_tokens": "history",
    "current_tokens": "current message",
    "steps_tokens": "earlier tool steps",
}


def _one_setting(frame: pd.DataFrame, what: str) -> pd.DataFrame:
    """``frame`` holding one session, release and setting (else a ValueError saying which
    column to select on)."""
    for column in ("session_key", "policy", "max_messages", "max_tokens", "context_window"):
        if frame[column].nunique(dropna=False) > 1:
            raise ValueError(
                f"{what} draws one session, release and setting; the frame has several "
                f"{column} values: select one first, e.g. frame[frame[{column!r}] == ...]"
            )
    return frame.sort_values(["turn", "step"], kind="stable")


@plotting
def request_composition(
    frame: pd.DataFrame,
    *,
    context_window: int | None = None,
    max_output: int | None = None,
    ax: Axes | None = None,
) -> Axes:
    """One bar per call (turns in order, a turn's steps side by side), its parts stacked;
    the context window and the governor's budget (``context_window - max_output - 1024``)
    as horizontal lines when known (from the frame or given)."""
    calls = _one_setting(frame, "request_composition")
    if ax is None:
        ax = new_figure(9.0, 4.0).add_subplot()
    x = np.arange(len(calls))
    bottom = np.zeros(len(calls))
    for column, colour in PART_COLORS.items():
        values = calls[column].to_numpy(dtype=float)
        ax.bar(
            x,
            values,
            bottom=bottom,
            width=0.9,
            color=colour,
            label=_PART_LABELS[column],
            gid=column,
        )
        bottom += values
    window = context_window
    if window is None and len(calls) and not calls["context_window"].isna().all():
        window = int(calls["context_window"].dropna().iloc[0])
    reserve = max_output
    if reserve is None and len(calls) and not calls["max_output"].isna().all():
        reserve = int(calls["max_output"].dropna().iloc[0])
    if window:
        ax.axhline(window, color="black", linewidth=1, label="context window", gid="window")
        if reserve is not None:
            budget = window - reserve - SAFETY_BUFFER
            ax.axhline(
                budget, color="black", linestyle="--", linewidth=1, label="budget", gid="budget"
            )
    ticks = _turn_ticks(calls)
    ax.set_xticks(list(ticks), list(ticks.values()))
    ax.set_xlabel("turn (steps of a turn side by side)")
    ax.set_ylabel("tokens per request")
    ax.yaxis.set_major_formatter(FuncFormatter(compact))
    count_axis(ax.yaxis)
    ax.set_xlim(-0.6, max(len(calls) - 0.4, 0.6))
    legend_beside(ax)
    return ax


def _turn_ticks(calls: pd.DataFrame) -> Mapping[int, str]:
    """At most ~12 ticks, at the first call of evenly spaced turns."""
    firsts = np.flatnonzero(calls["step"].to_numpy() == 0)
    if not len(firsts):
        return {}
    every = max(1, int(np.ceil(len(firsts) / 12)))
    turns = calls["turn"].to_numpy()
    return {int(i): str(int(turns[i])) for i in firsts[::every]}


@plotting
def cache_ratio(
    frame: pd.DataFrame,
    *,
    by: str = "max_messages",
    ax: Axes | None = None,
) -> Axes:
    """Share of each request its prefix shares with the previous one, call by call, one line
    per value of setting ``by`` (e.g. two ``max_messages`` values side by side): a count
    window that slides every turn breaks the prefix every turn."""
    if by not in frame.columns:
        raise ValueError(f"by must be a column of the requests frame, not {by!r}")
    if frame["session_key"].nunique() > 1 or frame["policy"].nunique() > 1:
        raise ValueError("cache_ratio draws one session and release: select one first")
    if ax is None:
        ax = new_figure(9.0, 3.6).add_subplot()
    for value, calls in frame.groupby(by, sort=True, observed=True, dropna=False):
        calls = calls.sort_values(["turn", "step"], kind="stable")
        share = calls["prefix_tokens"].sum() / max(int(calls["total_tokens"].sum()), 1)
        ax.plot(
            np.arange(len(calls)),
            calls["cache_ratio"].to_numpy(dtype=float),
            drawstyle="steps-mid",
            label=f"{by}={_setting_label(value)} ({share:.0%} of tokens reusable)",
            gid=f"{by}={value}",
        )
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("call (turns and steps in order)")
    ax.set_ylabel("prefix shared with the previous request")
    legend_beside(ax)
    return ax


def _setting_label(value: Any) -> str:
    if isinstance(value, int | np.integer) and value == 0:
        return "none"
    return str(value)
