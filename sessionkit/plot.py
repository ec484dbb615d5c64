"""Matplotlib views of sessions, corpora and sweeps; fixed sizes and colours, no state.

Every function takes the objects or the DataFrames sessionkit produces, draws on a given Axes
(or a new Figure it creates without pyplot), and returns what it drew on.  The data behind a
plot stays readable from the artists: bars are ``ax.patches`` (``StepPatch`` or bar
``Rectangle``), spans are ``Rectangle`` patches whose ``gid`` names what they shade.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import StepPatch
from matplotlib.ticker import (
    LogLocator,
    MaxNLocator,
    NullFormatter,
    PercentFormatter,
    StrMethodFormatter,
)

from sessionkit.filecap import file_cap
from sessionkit.nanobot.session import Session
from sessionkit.states import message_states
from sessionkit.windowing import windows

if TYPE_CHECKING:
    from sessionkit.corpus import Corpus

__all__ = [
    "ROLE_COLORS",
    "STATUS_COLORS",
    "SWEEP_VALUES",
    "TRUNCATING_CUTS",
    "file_cap_curve",
    "session_lengths",
    "timeline_axes",
    "token_timeline",
    "truncation_share",
    "window_heatmap",
]

ROLE_COLORS: dict[str, str] = {
    "user": "#4c72b0",
    "assistant": "#dd8452",
    "tool": "#55a868",
    "system": "#8172b3",
}
OTHER_ROLE_COLOR = "#999999"

STATUS_COLORS: dict[str, str] = {
    "in_window": "#2ca02c",
    "trimmed_count": "#ff7f0e",
    "trimmed_tokens": "#d62728",
    "consolidated": "#7f7f7f",
    "command": "#9467bd",
    "skipped": "#bcbd22",
    "file_cap": "#8c564b",
    "later": "#c7c7c7",
}
"""One colour per status of :data:`sessionkit.schema.STATUSES` (the widget's CSS matches)."""

_SHADED = {"trimmed_tokens": 0.12, "consolidated": 0.25, "file_cap": 0.25, "later": 0.25}
"""Statuses shaded on the timeline, with their opacity."""


def timeline_axes(fig: Figure | None = None) -> Axes:
    """Fresh Axes for :func:`token_timeline` with fixed margins (fast to redraw).

    On a new 10 x 4 inch Figure, or on ``fig`` after clearing it.
    """
    if fig is None:
        fig = Figure(figsize=(10.0, 4.0), dpi=100)
    fig.clear()
    fig.subplots_adjust(left=0.07, right=0.92, top=0.93, bottom=0.25)
    return fig.add_subplot()


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``(start, stop)`` of every run of True in ``mask``."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


def _span(ax: Axes, start: float, stop: float, gid: str, label: str, **style: object) -> None:
    patch = ax.axvspan(start - 0.5, stop - 0.5, label=label, zorder=0, **style)
    patch.set_gid(gid)


def _sent_from_here(states: pd.DataFrame) -> np.ndarray:
    """Tokens the history would send if it started at each message (NaN where none could)."""
    live = ~states["status"].isin(["consolidated", "file_cap", "later"]).to_numpy()
    sent = states["sent_tokens"].fillna(0).to_numpy(dtype=float) * live
    from_here = np.cumsum(sent[::-1])[::-1]
    return np.where(live, from_here, np.nan)


def token_timeline(
    source: Session | Corpus | pd.DataFrame,
    key: str | None = None,
    *,
    turn: int | None = None,
    max_messages: int = 120,
    max_tokens: int = 0,
    include_timestamps: bool = True,
    extend_to_user: bool = False,
    file_cap: int = 2000,
    xlim: tuple[float, float] | None = None,
    ax: Axes | None = None,
) -> Axes:
    """One session's messages as token bars by role, with the window kept at ``turn``.

    ``source`` is a session, a Corpus with ``key``, or a frame from
    :func:`sessionkit.states.message_states` (then the other settings are read from its
    ``attrs``).  Drawn: one filled ``StepPatch`` per role (``gid`` ``"role:<role>"``, heights =
    stored tokens); spans with gids ``"window"`` (first to last message sent),
    ``"trimmed_tokens"``, ``"consolidated"``, ``"file_cap"`` and ``"later"``; on a twin axis the tokens sent if the
    history started at each message (``gid`` ``"sent_from_here"``), the ``max_tokens`` budget
    (``gid`` ``"max_tokens"``) and the start of the ``max_messages`` window
    (``gid`` ``"max_messages"``).  Returns the main Axes; the twin is ``ax.figure.axes[-1]``.
    """
    states = (
        source
        if isinstance(source, pd.DataFrame)
        else message_states(
            source,
            key,
            turn=turn,
            max_messages=max_messages,
            max_tokens=max_tokens,
            include_timestamps=include_timestamps,
            extend_to_user=extend_to_user,
            file_cap=file_cap,
        )
    )
    attrs = states.attrs
    ax = ax if ax is not None else timeline_axes()
    n = len(states)
    edges = np.arange(n + 1) - 0.5
    tokens = states["tokens"].fillna(0).to_numpy(dtype=float)
    roles = states["role"].astype("string").fillna("?").to_numpy()
    order = list(ROLE_COLORS)
    for role in sorted(set(roles), key=lambda r: (order.index(r) if r in order else len(order), r)):
        # add_artist, not ax.stairs: the limits are set below, and ax.stairs would walk
        # every step of the path to update them (most of the drawing time on 2000 messages).
        patch = StepPatch(
            np.where(roles == role, tokens, 0.0),
            edges,
            fill=True,
            color=ROLE_COLORS.get(role, OTHER_ROLE_COLOR),
            label=role,
            zorder=2,
            gid=f"role:{role}",
        )
        ax.add_artist(patch)
    status = states["status"].to_numpy()
    for name in _SHADED:
        for k, (start, stop) in enumerate(_runs(status == name)):
            label = name.replace("_", " ") if k == 0 else "_nolegend_"
            _span(
                ax, start, stop, name, label, color=STATUS_COLORS[name], alpha=_SHADED[name], lw=0
            )
    in_window = np.flatnonzero(status == "in_window")
    if len(in_window):
        _span(
            ax,
            in_window[0],
            in_window[-1] + 1,
            "window",
            f"window ({len(in_window)} sent)",
            color=STATUS_COLORS["in_window"],
            alpha=0.18,
            lw=0,
        )
    low, high = xlim if xlim is not None else (-0.5, max(n, 1) - 0.5)
    visible = tokens[max(0, int(np.ceil(low))) : max(0, int(np.floor(high)) + 1)]
    ax.set_xlim(low, high)
    ax.set_ylim(0, 1.05 * max(visible.max(initial=0.0), 1.0))
    ax.set_xlabel("message index")
    ax.set_ylabel("tokens per message")
    title = f"{attrs.get('key', '')} at turn {attrs.get('turn', '')}"
    ax.set_title(title.strip(), loc="left", fontsize=10)
    twin = ax.twinx()
    _draw_budget(twin, states, in_window)
    handles, labels = ax.get_legend_handles_labels()
    more_handles, more_labels = twin.get_legend_handles_labels()
    ax.legend(
        handles + more_handles,
        labels + more_labels,
        loc="upper left",
        bbox_to_anchor=(0.0, -0.15),
        fontsize=7,
        ncols=7,
        frameon=False,
    )
    return ax


def _draw_budget(twin: Axes, states: pd.DataFrame, in_window: np.ndarray) -> None:
    """The twin axis: tokens sent from each message to the turn, and the two limits."""
    attrs = states.attrs
    from_here = _sent_from_here(states)
    (line,) = twin.step(
        np.arange(len(states)),
        from_here,
        where="mid",
        color="#222222",
        lw=1.2,
        label="tokens sent from here",
    )
    line.set_gid("sent_from_here")
    max_tokens = int(attrs.get("max_tokens", 0))
    if max_tokens > 0:
        twin.axhline(max_tokens, color=STATUS_COLORS["trimmed_tokens"], ls="--", lw=1.2).set(
            gid="max_tokens", label=f"max_tokens={max_tokens:,}"
        )
    status = states["status"].to_numpy()
    trimmed = np.flatnonzero(status == "trimmed_count")
    live = np.flatnonzero(~np.isnan(from_here))
    count_start = trimmed[-1] + 1 if len(trimmed) else (live[0] if len(live) else None)
    if count_start is not None and "max_messages" in attrs:
        twin.axvline(count_start - 0.5, color=STATUS_COLORS["trimmed_count"], ls=":", lw=1.5).set(
            gid="max_messages", label=f"max_messages={attrs['max_messages']} window"
        )
    window_tokens = float(from_here[in_window[0]]) if len(in_window) else 0.0
    top = 1.6 * max(max_tokens, window_tokens, 1.0)
    twin.set_ylim(0, top)
    twin.set_ylabel("tokens sent from here to the turn")


def _sessions_frame(source: Corpus | pd.DataFrame) -> pd.DataFrame:
    return source if isinstance(source, pd.DataFrame) else source.sessions


def _log_bins(values: np.ndarray, n_bins: int) -> np.ndarray:
    low = max(1.0, float(values.min()) if len(values) else 1.0)
    high = max(low * 2, float(values.max()) if len(values) else 2.0)
    return np.geomspace(low, high * 1.0001, n_bins + 1)


def session_lengths(
    source: Corpus | pd.DataFrame,
    *,
    file_cap: int = 2000,
    budgets: Sequence[int] = (8_000, 32_000),
    bins: int = 20,
) -> Figure:
    """Histograms of session length in messages and in tokens (log-spaced bins).

    ``source`` is a Corpus or its ``sessions`` frame.  The file cap is marked on the messages
    axis (``gid`` ``"file_cap"``), each token budget on the tokens axis (``gid``
    ``"budget:<n>"``).  Returns the Figure; ``fig.axes`` are (messages, tokens) and their bars
    are ``ax.patches`` with heights equal to ``np.histogram(values, bins=edges)``.
    """
    sessions = _sessions_frame(source)
    fig = Figure(figsize=(10.0, 3.4), dpi=100, layout="constrained")
    ax_messages, ax_tokens = fig.subplots(1, 2)
    panels = (
        (ax_messages, "n_messages", "messages per session", [("file_cap", file_cap)]),
        (ax_tokens, "tokens", "tokens per session", [(f"budget:{b}", b) for b in budgets]),
    )
    for ax, column, xlabel, marks in panels:
        values = sessions[column].dropna().to_numpy(dtype=float)
        ax.hist(values, bins=_log_bins(values, bins), color="#4c72b0", edgecolor="white", lw=0.5)
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(xlabel)
        ax.set_ylabel("sessions")
        for gid, limit in marks:
            if limit > 0:
                over = int((values > limit).sum())
                name = "file cap" if gid == "file_cap" else "budget"
                ax.axvline(limit, color="#d62728", ls="--", lw=1.2).set(
                    gid=gid, label=f"{name} {limit:,}: {over} over"
                )
        if marks:
            ax.legend(fontsize=8, loc="upper right")
    return fig


DEFAULT_MAX_MESSAGES: tuple[int, ...] = (20, 60, 120, 240)
DEFAULT_BUDGETS: tuple[int, ...] = (0, 2_000, 4_000, 8_000, 16_000, 32_000)
DEFAULT_LIMITS: tuple[int, ...] = (100, 200, 300, 500, 1_000, 2_000, 5_000)
SWEEP_VALUES: dict[str, str] = {
    "messages_kept": "mean messages sent per turn",
    "tokens_kept": "mean tokens sent per turn",
    "truncated": "share of turns truncated",
}
"""What :func:`window_heatmap` can show; ``truncated`` means ``cut`` is one of
:data:`TRUNCATING_CUTS`."""
TRUNCATING_CUTS: tuple[str, ...] = ("count", "orphan", "tokens")
"""Window cuts that hide messages the session still holds unconsolidated."""


def _sweep(
    source: Session | Corpus | pd.DataFrame,
    max_messages: Sequence[int],
    max_tokens: Sequence[int],
    include_timestamps: bool,
) -> pd.DataFrame:
    """A :func:`sessionkit.windows` frame over one grid, with a ``truncated`` column."""
    if isinstance(source, pd.DataFrame):
        frame = source
    else:
        frame = windows(
            source,
            max_messages=list(max_messages),
            max_tokens=list(max_tokens),
            include_timestamps=include_timestamps,
        )
    for column in ("include_timestamps", "extend_to_user", "last_consolidated"):
        if frame[column].nunique() > 1:
            raise ValueError(
                f"the windows frame mixes several {column} values; select one first, e.g. "
                f"frame[frame[{column!r}] == ...]"
            )
    return frame.assign(truncated=frame["cut"].isin(TRUNCATING_CUTS))


def _budget_label(budget: int) -> str:
    return "none" if budget <= 0 else f"{budget:,}"


def window_heatmap(
    source: Session | Corpus | pd.DataFrame,
    *,
    value: str = "messages_kept",
    max_messages: Sequence[int] = DEFAULT_MAX_MESSAGES,
    max_tokens: Sequence[int] = DEFAULT_BUDGETS,
    include_timestamps: bool = True,
    ax: Axes | None = None,
) -> Axes:
    """Mean window size (or truncation rate) per (max_tokens, max_messages), as a heatmap.

    ``source`` is a :func:`sessionkit.windows` frame (one value of every other setting), or
    a Session or Corpus whose every-user-turn windows are computed over the grid given.
    ``value`` is a key of :data:`SWEEP_VALUES`.  ``ax.images[0].get_array()`` is the grid:
    rows are ``max_tokens`` ascending, columns ``max_messages`` ascending.
    """
    if value not in SWEEP_VALUES:
        raise ValueError(f"value must be one of {', '.join(SWEEP_VALUES)}, not {value!r}")
    frame = _sweep(source, max_messages, max_tokens, include_timestamps)
    grid = frame.pivot_table(
        index="max_tokens", columns="max_messages", values=value, aggfunc="mean"
    ).astype(float)
    if ax is None:
        ax = Figure(figsize=(7.0, 4.2), dpi=100, layout="constrained").add_subplot()
    share = value == "truncated"
    image = ax.imshow(
        grid.to_numpy(),
        origin="lower",
        aspect="auto",
        cmap="viridis",
        vmin=0.0 if share else None,
        vmax=1.0 if share else None,
    )
    middle = np.nanmean(image.norm.inverse(0.5)) if grid.size else 0.0
    for (row, col), cell in np.ndenumerate(grid.to_numpy()):
        text = f"{cell:.0%}" if share else f"{cell:,.0f}"
        ax.text(
            col,
            row,
            text,
            ha="center",
            va="center",
            fontsize=8,
            color="black" if cell > middle else "white",
        )
    ax.set_xticks(range(grid.shape[1]), [str(m) for m in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [_budget_label(b) for b in grid.index])
    ax.set_xlabel("max_messages")
    ax.set_ylabel("max_tokens")
    ax.set_title(SWEEP_VALUES[value], loc="left", fontsize=10)
    ax.figure.colorbar(image, ax=ax, label=SWEEP_VALUES[value])
    return ax


def truncation_share(
    source: Session | Corpus | pd.DataFrame,
    *,
    max_messages: Sequence[int] = DEFAULT_MAX_MESSAGES,
    max_tokens: Sequence[int] = DEFAULT_BUDGETS,
    include_timestamps: bool = True,
    ax: Axes | None = None,
) -> Axes:
    """Share of turns whose window was truncated (cut by count, an orphan or tokens) against the budget.

    One line per ``max_messages`` (``gid`` ``"max_messages=<n>"``), over the budgets in
    ascending order, evenly spaced (x = position, tick labels = budgets; 0 is "none").
    ``source`` as for :func:`window_heatmap`.
    """
    frame = _sweep(source, max_messages, max_tokens, include_timestamps)
    share = frame.groupby(["max_messages", "max_tokens"])["truncated"].mean().unstack()
    if ax is None:
        ax = Figure(figsize=(7.0, 3.8), dpi=100, layout="constrained").add_subplot()
    positions = np.arange(share.shape[1])
    for count, row in share.iterrows():
        (line,) = ax.plot(positions, row.to_numpy(dtype=float), marker="o", label=f"{count}")
        line.set_gid(f"max_messages={count}")
    ax.set_xticks(positions, [_budget_label(b) for b in share.columns])
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("max_tokens")
    ax.set_ylabel("turns truncated")
    ax.legend(title="max_messages", fontsize=8, title_fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def file_cap_curve(
    source: Session | Corpus | pd.DataFrame,
    *,
    limits: Sequence[int] = DEFAULT_LIMITS,
    replay: Literal["final", "growth"] = "final",
    ax: Axes | None = None,
) -> Axes:
    """Sessions trimmed and messages dropped by ``enforce_file_cap`` against its limit.

    ``source`` is a :func:`sessionkit.file_cap` frame (its limits are the x values), or a
    Session or Corpus capped at ``limits`` (``replay`` as for ``file_cap``; with
    ``"growth"``, messages dropped add up over every trim).  On ``ax`` the number of sessions the cap
    trims (``gid`` ``"sessions"``); on a twin axis the messages it drops (``gid``
    ``"messages"``); nanobot's limit 2000 is marked (``gid`` ``"nanobot"``).
    """
    if isinstance(source, pd.DataFrame):
        frame, grid = source, sorted(int(x) for x in source["limit"].unique())
    else:
        frame, grid = file_cap(source, list(limits), replay=replay), sorted(set(limits))
    trimmed = frame[frame["tripped"]].groupby("limit")
    sessions = trimmed["session_key"].nunique().reindex(grid, fill_value=0)
    dropped = trimmed["dropped"].sum().reindex(grid, fill_value=0)
    if ax is None:
        ax = Figure(figsize=(7.0, 3.8), dpi=100, layout="constrained").add_subplot()
    (line,) = ax.plot(
        grid, sessions.to_numpy(), marker="o", color="#4c72b0", label="sessions trimmed"
    )
    line.set_gid("sessions")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(grid)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("file cap limit (messages)")
    ax.set_ylabel("sessions trimmed")
    ax.axvline(2000, color="#7f7f7f", ls=":", lw=1.2).set(gid="nanobot", label="nanobot 0.2 limit")
    twin = ax.twinx()
    (line,) = twin.plot(
        grid, dropped.to_numpy(), marker="s", color="#d62728", label="messages dropped"
    )
    line.set_gid("messages")
    twin.set_ylim(bottom=0)
    twin.set_ylabel("messages dropped")
    handles, labels = ax.get_legend_handles_labels()
    more_handles, more_labels = twin.get_legend_handles_labels()
    ax.legend(handles + more_handles, labels + more_labels, fontsize=8, loc="upper right")
    return ax
