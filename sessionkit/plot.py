"""Matplotlib views of sessions, corpora and sweeps; fixed sizes and colours, no state.

Every function takes the objects or the DataFrames sessionkit produces, draws on a given Axes
(or a new Figure it creates without pyplot), and returns what it drew on.  The data behind a
plot stays readable from the artists: bars are ``ax.patches`` (``StepPatch`` or bar
``Rectangle``), spans are ``Rectangle`` patches whose ``gid`` names what they shade.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings
from sessionkit.schema import STATUSES
from sessionkit.states import MessageStates, message_states
from sessionkit.windowing import windows

if TYPE_CHECKING:
    from sessionkit.corpus import Corpus

__all__ = [
    "ROLE_COLORS",
    "SWEEP_VALUES",
    "TRUNCATING_CUTS",
    "file_cap_curve",
    "session_lengths",
    "timeline_axes",
    "token_timeline",
    "truncation_share",
    "window_heatmap",
]


def __dir__() -> list[str]:
    """The public names only: ``dir()`` and tab completion leave out np, pd, Figure, ..."""
    return sorted(__all__)


ROLE_COLORS: dict[str, str] = {
    "user": "#4c72b0",
    "assistant": "#dd8452",
    "tool": "#55a868",
    "system": "#8172b3",
}
OTHER_ROLE_COLOR = "#999999"

_STATUS = {status.name: status for status in STATUSES}
"""The status table by name: every status colour and legend label comes from it."""

_SHADED = {"trimmed_tokens": 0.12, "consolidated": 0.25, "file_cap": 0.25, "later": 0.25}
"""Statuses shaded on the timeline, with their opacity."""


def timeline_axes(fig: Figure | None = None) -> Axes:
    """Fresh Axes for :func:`token_timeline` with fixed margins (fast to redraw).

    On a new 10 x 4 inch Figure, or on ``fig`` after clearing it.  The margins fit the axis
    labels and compact tick labels (at most six characters, e.g. ``137.5k``) on both sides.
    """
    if fig is None:
        fig = Figure(figsize=(10.0, 4.0), dpi=100)
    fig.clear()
    fig.subplots_adjust(left=0.08, right=0.915, top=0.93, bottom=0.25)
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
    source: Session | Corpus | MessageStates,
    key: str | None = None,
    *,
    turn: int | None = None,
    settings: HistorySettings = DEFAULT_SETTINGS,
    max_messages: int | None = None,
    max_tokens: int | None = None,
    include_timestamps: bool | None = None,
    extend_to_user: bool | None = None,
    file_cap: int | None = None,
    xlim: tuple[float, float] | None = None,
    ax: Axes | None = None,
) -> Axes:
    """One session's messages as token bars by role, with the window kept at ``turn``.

    ``source`` is a session, a Corpus with ``key`` (``turn``, ``settings`` and the keywords
    overriding them as for :func:`sessionkit.message_states`), or the
    :class:`~sessionkit.states.MessageStates` that call returned.  Drawn: one filled ``StepPatch`` per role (``gid`` ``"role:<role>"``, heights =
    stored tokens); spans with gids ``"window"`` (first to last message sent),
    ``"trimmed_tokens"``, ``"consolidated"``, ``"file_cap"`` and ``"later"``; on a twin axis the tokens sent if the
    history started at each message (``gid`` ``"sent_from_here"``), the ``max_tokens`` budget
    (``gid`` ``"max_tokens"``) and the start of the ``max_messages`` window
    (``gid`` ``"max_messages"``).  Returns the main Axes; the twin is ``ax.figure.axes[-1]``.
    """
    result = (
        source
        if isinstance(source, MessageStates)
        else message_states(
            source,
            key,
            turn=turn,
            settings=settings,
            max_messages=max_messages,
            max_tokens=max_tokens,
            include_timestamps=include_timestamps,
            extend_to_user=extend_to_user,
            file_cap=file_cap,
        )
    )
    states = result.frame
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
            label = _STATUS[name].label if k == 0 else "_nolegend_"
            _span(
                ax, start, stop, name, label, color=_STATUS[name].color, alpha=_SHADED[name], lw=0
            )
    in_window = np.flatnonzero(status == "in_window")
    if len(in_window):
        _span(
            ax,
            in_window[0],
            in_window[-1] + 1,
            "window",
            f"window ({len(in_window)} sent)",
            color=_STATUS["in_window"].color,
            alpha=0.18,
            lw=0,
        )
    low, high = xlim if xlim is not None else (-0.5, max(n, 1) - 0.5)
    visible = tokens[max(0, int(np.ceil(low))) : max(0, int(np.floor(high)) + 1)]
    ax.set_xlim(low, high)
    ax.set_ylim(0, 1.05 * max(visible.max(initial=0.0), 1.0))
    ax.set_xlabel("message index")
    ax.set_ylabel("tokens per message")
    ax.yaxis.set_major_formatter(_compact)
    ax.set_title(f"{result.key} at turn {result.turn}", loc="left", fontsize=10)
    twin = ax.twinx()
    _draw_budget(twin, result, in_window)
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


def _draw_budget(twin: Axes, result: MessageStates, in_window: np.ndarray) -> None:
    """The twin axis: tokens sent from each message to the turn, and the two limits."""
    states = result.frame
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
    max_tokens = result.settings.max_tokens
    if max_tokens > 0:
        twin.axhline(max_tokens, color=_STATUS["trimmed_tokens"].color, ls="--", lw=1.2).set(
            gid="max_tokens", label=f"max_tokens={max_tokens:,}"
        )
        # Named on the line itself: the eye reads a level line against the left axis.
        twin.text(
            0.995,
            max_tokens,
            f"max_tokens {max_tokens:,} (right axis)",
            transform=twin.get_yaxis_transform(),
            ha="right",
            va="bottom",
            fontsize=8,
            color="#222222",
            bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0, "pad": 1},
            gid="max_tokens_label",
        )
    status = states["status"].to_numpy()
    trimmed = np.flatnonzero(status == "trimmed_count")
    live = np.flatnonzero(~np.isnan(from_here))
    count_start = trimmed[-1] + 1 if len(trimmed) else (live[0] if len(live) else None)
    if count_start is not None:
        twin.axvline(count_start - 0.5, color=_STATUS["trimmed_count"].color, ls=":", lw=1.5).set(
            gid="max_messages", label=f"max_messages={result.settings.max_messages} window"
        )
    window_tokens = float(from_here[in_window[0]]) if len(in_window) else 0.0
    top = 1.6 * max(max_tokens, window_tokens, 1.0)
    twin.set_ylim(0, top)
    twin.set_ylabel("tokens sent from here to the turn")
    twin.yaxis.set_major_formatter(_compact)


def _sessions_frame(source: Corpus | Session | Sequence[Session] | pd.DataFrame) -> pd.DataFrame:
    """The ``sessions`` frame of a Corpus, a Session or a list of Sessions; a frame as it is."""
    from sessionkit.corpus import Corpus

    if isinstance(source, pd.DataFrame):
        return source
    if isinstance(source, Corpus):
        return source.sessions
    sessions = [source] if isinstance(source, Session) else source
    if isinstance(sessions, list | tuple) and all(isinstance(s, Session) for s in sessions):
        return Corpus(sessions).sessions
    raise TypeError(
        "expected a Corpus, its sessions frame, a Session or a list of Sessions, "
        f"got {type(source).__name__}"
    )


def _log_bins(values: np.ndarray, n_bins: int) -> np.ndarray:
    low = max(1.0, float(values.min()) if len(values) else 1.0)
    high = max(low * 2, float(values.max()) if len(values) else 2.0)
    return np.geomspace(low, high * 1.0001, n_bins + 1)


def _compact(x: float, _pos: int | None = None) -> str:
    """A tick value, exact and short with a k/M/B suffix: 500, 2k, 12.5k, 1M, 2B."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if x >= size:
            return f"{x / size:g}{suffix}"
    return f"{x:g}"


def _log_ticks(ax: Axes) -> None:
    """Compact labels on a log x axis: at 1, 2 and 5 per decade over up to three decades, at
    powers of ten beyond, so the labels never run into each other on a 4-inch axis."""
    low, high = ax.get_xlim()
    decades = np.log10(max(high, 1.0) / max(low, 1.0))
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0) if decades <= 3 else (1.0,)))
    ax.xaxis.set_major_formatter(_compact)
    ax.xaxis.set_minor_formatter(NullFormatter())


def session_lengths(
    source: Corpus | Session | Sequence[Session] | pd.DataFrame,
    *,
    settings: HistorySettings = DEFAULT_SETTINGS,
    file_cap: int | None = None,
    budgets: Sequence[int] = (8_000, 32_000),
    bins: int = 20,
) -> Figure:
    """Histograms of session length in messages and in tokens (log-spaced bins).

    ``source`` is a Corpus, its ``sessions`` frame, a Session or a list of Sessions.  The
    file cap (``settings.file_cap``, or ``file_cap`` when given) is marked on the messages axis
    (``gid`` ``"file_cap"``), each token budget on the tokens axis (``gid`` ``"budget:<n>"``).  Returns the Figure;
    ``fig.axes`` are (messages, tokens) and their bars are ``ax.patches`` with heights equal
    to ``np.histogram(values, bins=edges)``.
    """
    sessions = _sessions_frame(source)
    cap = settings.replace(file_cap=file_cap).file_cap
    fig = Figure(figsize=(10.0, 3.4), dpi=100, layout="constrained")
    ax_messages, ax_tokens = fig.subplots(1, 2)
    panels = (
        (ax_messages, "n_messages", "messages per session", [("file_cap", cap)]),
        (ax_tokens, "tokens", "tokens per session", [(f"budget:{b}", b) for b in budgets]),
    )
    for ax, column, xlabel, marks in panels:
        values = sessions[column].dropna().to_numpy(dtype=float)
        ax.hist(values, bins=_log_bins(values, bins), color="#4c72b0", edgecolor="white", lw=0.5)
        ax.set_xscale("log")
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
        _log_ticks(ax)
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
    settings: HistorySettings,
) -> pd.DataFrame:
    """A :func:`sessionkit.windows` frame over one grid, with a ``truncated`` column."""
    if isinstance(source, pd.DataFrame):
        frame = source
    else:
        frame = windows(
            source, settings=settings, max_messages=list(max_messages), max_tokens=list(max_tokens)
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


def _budget_order(budgets: Iterable[int]) -> list[int]:
    """Budgets ascending, no budget (0, "none") last: no limit is the largest budget."""
    return sorted(budgets, key=lambda budget: (budget <= 0, budget))


def window_heatmap(
    source: Session | Corpus | pd.DataFrame,
    *,
    value: str = "messages_kept",
    max_messages: Sequence[int] = DEFAULT_MAX_MESSAGES,
    max_tokens: Sequence[int] = DEFAULT_BUDGETS,
    settings: HistorySettings = DEFAULT_SETTINGS,
    include_timestamps: bool | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Mean window size (or truncation rate) per (max_tokens, max_messages), as a heatmap.

    ``source`` is a :func:`sessionkit.windows` frame (one value of every other setting), or
    a Session or Corpus whose every-user-turn windows are computed over the grid given, the
    other settings from ``settings`` (``include_timestamps`` overrides it).
    ``value`` is a key of :data:`SWEEP_VALUES`.  ``ax.images[0].get_array()`` is the grid:
    rows are ``max_tokens`` ascending with no budget (0) last, columns ``max_messages``
    ascending.
    """
    if value not in SWEEP_VALUES:
        raise ValueError(f"value must be one of {', '.join(SWEEP_VALUES)}, not {value!r}")
    settings = settings.replace(include_timestamps=include_timestamps)
    frame = _sweep(source, max_messages, max_tokens, settings)
    grid = frame.pivot_table(
        index="max_tokens", columns="max_messages", values=value, aggfunc="mean"
    ).astype(float)
    grid = grid.reindex(_budget_order(grid.index))
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
    settings: HistorySettings = DEFAULT_SETTINGS,
    include_timestamps: bool | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Share of turns whose window was truncated (cut by count, an orphan or tokens) against the budget.

    One line per ``max_messages`` (``gid`` ``"max_messages=<n>"``), over the budgets in
    ascending order, evenly spaced (x = position, tick labels = budgets), no budget (0,
    "none") last.
    ``source`` as for :func:`window_heatmap`.
    """
    settings = settings.replace(include_timestamps=include_timestamps)
    frame = _sweep(source, max_messages, max_tokens, settings)
    share = frame.groupby(["max_messages", "max_tokens"])["truncated"].mean().unstack()
    share = share[_budget_order(share.columns)]
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
    ``"messages"``); nanobot's limit (``HistorySettings().file_cap``) is marked (``gid`` ``"nanobot"``).
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
    ax.axvline(DEFAULT_SETTINGS.file_cap, color="#7f7f7f", ls=":", lw=1.2).set(
        gid="nanobot", label="nanobot 0.2 limit"
    )
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
