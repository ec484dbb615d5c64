"""Whole requests drawn: where each call's tokens go (stacked parts per call, the context
window and the governor's budget as lines), how much of each request a provider's prefix
cache could reuse, and why the cache broke, for two settings side by side.

Each takes a :func:`sessionkit.requests` frame of one session and release; the bars, lines
and marks are the frame's columns, named by ``gid`` (the part's column, ``"window"``,
``"budget"``, ``"<setting>=<value>"``, ``"<setting>=<value>:<break>"``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.patches import StepPatch
from matplotlib.ticker import FuncFormatter, PercentFormatter

from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.release import DEFAULT_MAX_OUTPUT, SAFETY_BUFFER
from sessionkit.plot.style import compact, count_axis, legend_beside, new_figure, plotting
from sessionkit.schema import CACHE_BREAKS, REQUEST_SETTINGS, REQUESTS
from sessionkit.store.text import plot_label

__all__ = [
    "BREAK_COLORS",
    "PART_COLORS",
    "SETTING_COLUMNS",
    "cache_breaks",
    "cache_ratio",
    "request_composition",
]

PART_COLORS: dict[str, str] = {
    "tools_tokens": "#8c8c8c",
    "system_tokens": "#4c72b0",
    "summary_tokens": "#8172b3",
    "history_tokens": "#dd8452",
    "current_tokens": "#55a868",
    "steps_tokens": "#c44e52",
}
"""The parts of a request, bottom to top, and their colours (columns of
:func:`sessionkit.requests`)."""
_PART_LABELS = {
    "tools_tokens": "tool definitions",
    "system_tokens": "system prompt",
    "summary_tokens": "archived summary",
    "history_tokens": "history",
    "current_tokens": "current message",
    "steps_tokens": "earlier tool steps",
}
BREAK_COLORS: dict[str, str] = {
    "first call": "#8c8c8c",
    "idle past the TTL": "#4c72b0",
    "tools changed": "#8172b3",
    "system prompt changed": "#937860",
    "summary": "#da8bc3",
    "window slid": "#c44e52",
    "clean-up or compaction": "#dd8452",
}
"""The colour of each ``cache_break`` but ``"none"`` (:data:`sessionkit.schema.CACHE_BREAKS`)."""
SETTING_COLUMNS = REQUEST_SETTINGS
"""The columns of a requests frame that name its setting (what ``cache_ratio`` lines vary)."""
_NONE_AT_ZERO = ("max_messages", "max_tokens")
"""Settings whose 0 means no limit."""


def _calls(frame: pd.DataFrame, what: str, *varying: str) -> pd.DataFrame:
    """``frame``'s calls in order, checked to be one session, release and setting (but for
    the columns ``varying``); else a ValueError saying what to select."""
    missing = [c.name for c in REQUESTS if c.name not in frame.columns]
    if missing:
        raise ValueError(
            f"{what} draws a sessionkit.requests frame; this one has no {', '.join(missing)}"
        )
    for column in ("session_key", "policy", *SETTING_COLUMNS):
        if column not in varying and frame[column].nunique(dropna=False) > 1:
            vary = f" (lines vary {', '.join(varying)})" if varying else ""
            raise ValueError(
                f"{what} draws one session, release and setting{vary}; the frame has several "
                f"{column} values: select one first, e.g. frame[frame[{column!r}] == ...]"
            )
    return frame.sort_values(["turn", "step"], kind="stable")


def _value(column: str, value: Any) -> str:
    """A setting's value as a label: no limit as 'none', counts with thousands separators."""
    if pd.isna(value) or (column in _NONE_AT_ZERO and value == 0):
        return "none"
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    return str(value)


def _title(calls: pd.DataFrame, *columns: str, release: bool = True) -> str:
    """``<session>, <release>: <setting> <value>, ...`` of the frame's first row (without
    the release where ``release`` is False)."""
    if not len(calls):
        return ""
    first = calls.iloc[0]
    settings = ", ".join(f"{c} {_value(c, first[c])}" for c in columns)
    head = plot_label(first["session_key"])
    if release:
        head += f", {get_policy(str(first['policy'])).label}"
    return f"{head}: {settings}" if settings else head


def _turn_ticks(calls: pd.DataFrame) -> Mapping[int, str]:
    """At most ~12 ticks, at the first call of evenly spaced turns."""
    firsts = np.flatnonzero(calls["step"].to_numpy() == 0)
    if not len(firsts):
        return {}
    every = max(1, int(np.ceil(len(firsts) / 12)))
    turns = calls["turn"].to_numpy()
    return {int(i): str(int(turns[i])) for i in firsts[::every]}


def _by_turn(ax: Axes, calls: pd.DataFrame) -> None:
    """x ticks at turns' first calls, labelled with the turn, the calls' range in view."""
    ticks = _turn_ticks(calls)
    ax.set_xticks(list(ticks), list(ticks.values()))
    ax.set_xlabel("turn (a turn's calls side by side)")
    ax.set_xlim(-0.5, max(len(calls) - 0.5, 0.5))


def _known(calls: pd.DataFrame, column: str) -> int | None:
    values = calls[column].dropna()
    return int(values.iloc[0]) if len(values) else None


@plotting
def request_composition(
    frame: pd.DataFrame,
    *,
    context_window: int | None = None,
    max_output: int | None = None,
    ax: Axes | None = None,
) -> Axes:
    """One bar per call (turns in order, a turn's steps side by side), its parts stacked:
    one ``StepPatch`` per part (``gid``: the part's column), from the parts below it to
    them plus its own (the last one's top is ``total_tokens``); the context window
    (``gid`` ``"window"``) and the governor's budget ``context_window - max_output - 1024``
    (``gid`` ``"budget"``) as horizontal lines when the window is known (given, else the
    frame's; ``max_output`` given, else the frame's, else nanobot's default 8,192)."""
    calls = _calls(frame, "request_composition")
    if ax is None:
        ax = new_figure(9.0, 4.0).add_subplot()
    edges = np.arange(len(calls) + 1) - 0.5
    bottom = np.zeros(len(calls))
    handles: list[Artist] = []
    for column, colour in PART_COLORS.items():
        top = bottom + calls[column].to_numpy(dtype=float)
        # add_artist, not ax.stairs: the limits are set below, and ax.stairs would walk
        # every step of the path to update them (most of the drawing time).
        patch = StepPatch(
            top,
            edges,
            baseline=bottom,  # type: ignore[arg-type]  # matplotlib's stub says float; StepPatch takes an array too
            fill=True,
            color=colour,
            label=_PART_LABELS[column],
            gid=column,
        )
        ax.add_artist(patch)
        handles.append(patch)
        bottom = top
    window = context_window if context_window is not None else _known(calls, "context_window")
    reserve = max_output if max_output is not None else _known(calls, "max_output")
    if window:
        handles.append(
            ax.axhline(
                window,
                color="black",
                linewidth=1,
                label=f"context window {window:,}",
                gid="window",
            )
        )
        budget = window - (DEFAULT_MAX_OUTPUT if reserve is None else reserve) - SAFETY_BUFFER
        if budget > 0:
            handles.append(
                ax.axhline(
                    budget,
                    color="black",
                    linestyle="--",
                    linewidth=1,
                    label=f"input budget {budget:,}",
                    gid="budget",
                )
            )
    ax.set_ylim(0, 1.05 * max(bottom.max(initial=0.0), window or 0, 1))
    ax.set_title(_title(calls, "max_messages", "max_tokens"), loc="left", fontsize=10)
    _by_turn(ax, calls)
    ax.set_ylabel("tokens per request")
    ax.yaxis.set_major_formatter(FuncFormatter(compact))
    count_axis(ax.yaxis)
    legend_beside(ax, handles, [str(h.get_label()) for h in handles])
    return ax


@plotting
def cache_ratio(
    frame: pd.DataFrame,
    *,
    by: str = "max_messages",
    ax: Axes | None = None,
) -> Axes:
    """Share of each request its prefix shares with the previous one (``cache_ratio``), call
    by call, one line per value of the setting ``by`` (``gid`` ``"<by>=<value>"``; e.g. two
    ``max_messages`` values side by side), its legend giving the share of all the line's
    tokens reusable: a count window that slides every turn breaks the prefix every turn."""
    if by not in SETTING_COLUMNS:
        raise ValueError(f"by must be a setting column ({', '.join(SETTING_COLUMNS)}), not {by!r}")
    calls = _calls(frame, "cache_ratio", by)
    if ax is None:
        ax = new_figure(9.0, 3.6).add_subplot()
    groups = list(calls.groupby(by, sort=True, observed=True, dropna=False))
    for value, line in groups:
        share = line["prefix_tokens"].sum() / max(int(line["total_tokens"].sum()), 1)
        ax.plot(
            np.arange(len(line)),
            line["cache_ratio"].to_numpy(dtype=float),
            drawstyle="steps-mid",
            label=f"{by} {_value(by, value)} ({share:.0%} of tokens reusable)",
            gid=f"{by}={value}",
        )
    others = [c for c in ("max_messages", "max_tokens") if c != by]
    ax.set_title(_title(calls, *others), loc="left", fontsize=10)
    _by_turn(ax, groups[0][1] if groups else calls)
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel("prefix shared with the previous request")
    legend_beside(ax, *ax.get_legend_handles_labels())
    return ax


def _full_price_share(calls: pd.DataFrame) -> float:
    """Share of the calls' input neither read from the cache nor written to it: billed at
    the base input price."""
    total = int(calls["total_tokens"].sum())
    written = int(calls["cache_write_tokens"].sum())
    return (total - int(calls["cache_read_tokens"].sum()) - written) / max(total, 1)


@plotting
def cache_breaks(
    frame: pd.DataFrame,
    *,
    by: str | Sequence[str] = "max_messages",
    ax: Axes | None = None,
) -> Axes:
    """Why the prefix cache broke, call by call, one row per value of ``by`` (a setting
    column or ``"policy"``, or several: nanobot's window above a candidate at another count):
    a mark at each call whose ``cache_break`` is not ``"none"``, one ``Line2D`` per row and
    break (``gid`` ``"<by>=<value>, ...:<break>"``, colour :data:`BREAK_COLORS`), and each
    row's share of input billed at full price (neither read from the cache nor written)."""
    columns = [by] if isinstance(by, str) else list(by)
    wrong = [c for c in columns if c not in ("policy", *SETTING_COLUMNS)]
    if wrong or not columns:
        raise ValueError(
            "by must be 'policy' or a setting column, or several "
            f"({', '.join(SETTING_COLUMNS)}), not {by!r}"
        )
    calls = _calls(frame, "cache_breaks", *columns)
    groups = list(calls.groupby(columns, sort="policy" not in columns, observed=True, dropna=False))
    if ax is None:
        ax = new_figure(11.0, 2.0 + 0.5 * max(len(groups), 1)).add_subplot()
    handles: dict[str, Artist] = {}
    labels = []
    for row, (values, line) in enumerate(groups):
        named = list(zip(columns, values, strict=True))
        gid = ", ".join(f"{column}={value}" for column, value in named)
        breaks = line["cache_break"].astype(str).to_numpy()
        for name in CACHE_BREAKS[1:]:
            at = np.flatnonzero(breaks == name)
            if not len(at):
                continue
            (marks,) = ax.plot(
                at,
                np.full(len(at), row),
                linestyle="none",
                marker="|",
                markersize=14,
                color=BREAK_COLORS[name],
                gid=f"{gid}:{name}",
            )
            handles.setdefault(name, marks)
        shown = ", ".join(
            get_policy(str(value)).label
            if column == "policy"
            else f"{column} {_value(column, value)}"
            for column, value in named
        )
        labels.append(f"{shown}\n{_full_price_share(line):.0%} at full price")
    ax.set_yticks(range(len(groups)), labels)
    ax.set_ylim(max(len(groups), 1) - 0.5, -0.5)
    others = [c for c in ("max_messages", "max_tokens") if c not in columns]
    title = _title(calls, *others, release="policy" not in columns)
    rules = calls["cache_rules"].dropna().astype(str).unique()
    ax.set_title(
        f"{title}; cache {rules[0]}" if len(rules) == 1 else title, loc="left", fontsize=10
    )
    _by_turn(ax, max((line for _, line in groups), key=len) if groups else calls)
    ordered = [name for name in CACHE_BREAKS if name in handles]
    legend_beside(ax, [handles[name] for name in ordered], ordered, title="cache broke by")
    return ax
