"""One session's messages over time: token bars by role, the window kept, the budget."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle, StepPatch

from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import HistorySettings, Offset
from sessionkit.plot.style import (
    DPI,
    OTHER_ROLE_COLOR,
    ROLE_COLORS,
    STATUS,
    compact,
    count_axis,
    legend_beside,
    new_figure,
    plotting,
)
from sessionkit.simulate.states import MessageStates, message_states
from sessionkit.store.text import plot_label

if TYPE_CHECKING:
    from sessionkit.store.corpus import Corpus

__all__ = ["timeline_axes", "token_timeline"]

_SHADED = {"trimmed_tokens": 0.12, "consolidated": 0.25, "file_cap": 0.25, "later": 0.25}
"""Statuses shaded on the timeline, with their opacity."""
_WINDOW_ALPHA = 0.18
_CHIP_ALPHA = 0.55
"""A span's legend entry: the status colour strong enough to read against white, edged."""

TIMELINE_SIZE = (10.0, 4.0)
"""A new timeline's size in inches (1,000 x 400 pixels)."""


def timeline_axes(fig: Figure | None = None) -> Axes:
    """Fresh Axes for :func:`token_timeline`, in constrained layout (room for the labels and
    the legend right of the plot at any figure width); a figure already in a kind of it (the
    explorer's :class:`~sessionkit.plot.style.KeptLayout`) keeps its own.

    On ``fig`` after clearing it, or on a new 10 x 4 inch Figure made without pyplot: a
    canvas to render by hand (as the explorer does), which Jupyter does not show by itself;
    ``token_timeline`` without ``ax`` makes its figure through pyplot, and
    ``timeline_axes(plt.figure())`` does too.
    """
    if fig is None:
        fig = Figure(figsize=TIMELINE_SIZE, dpi=DPI)
    fig.clear()
    if not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        fig.set_layout_engine("constrained")
    return fig.add_subplot()


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``(start, stop)`` of every run of True in ``mask``."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


def _span(ax: Axes, start: float, stop: float, gid: str, label: str, **style: Any) -> None:
    """Messages ``start`` to ``stop`` shaded full height, the rectangle ``ax.axvspan`` draws;
    added as an artist: the limits are set below (``axvspan`` would update them in vain)."""
    patch = Rectangle(
        (start - 0.5, 0.0),
        stop - start,
        1.0,
        transform=ax.get_xaxis_transform(which="grid"),
        label=label,
        zorder=0,
        gid=gid,
        **style,
    )
    ax.add_artist(patch)


def _chip(color: str) -> Patch:
    """A span's legend entry (not drawn on the Axes)."""
    return Patch(facecolor=color, alpha=_CHIP_ALPHA, edgecolor=color, linewidth=1.0)


def _sent_from_here(states: pd.DataFrame, status: np.ndarray) -> np.ndarray:
    """Tokens the history would send if it started at each message (NaN where none could);
    ``status`` is the frame's status column as an array."""
    live = ~np.isin(status, ["consolidated", "file_cap", "later"])
    sent = states["sent_tokens"].fillna(0).to_numpy(dtype=float) * live
    from_here = np.cumsum(sent[::-1])[::-1]
    return np.where(live, from_here, np.nan)


@plotting
def token_timeline(
    source: Session | Corpus | MessageStates,
    key: str | None = None,
    *,
    turn: int | None = None,
    policy: str | None = None,
    settings: HistorySettings | None = None,
    max_messages: int | None = None,
    max_tokens: int | None = None,
    include_timestamps: bool | None = None,
    include_runtime_context: bool | None = None,
    extend_to_user: bool | None = None,
    last_consolidated: Offset | None = None,
    file_cap: int | None = None,
    xlim: tuple[float, float] | None = None,
    ax: Axes | None = None,
) -> Axes:
    """One session's messages as token bars by role, with the window kept at ``turn``.

    ``source`` is a session, a Corpus with ``key`` (``turn``, ``policy``, ``settings`` and the
    keywords overriding them as for :func:`sessionkit.message_states`), or the
    :class:`~sessionkit.simulate.states.MessageStates` that call returned.  Drawn: one filled ``StepPatch`` per role (``gid`` ``"role:<role>"``, heights =
    stored tokens); spans with gids ``"window"`` (first to last message sent),
    ``"trimmed_tokens"``, ``"consolidated"``, ``"file_cap"`` and ``"later"``; on a twin axis the tokens sent if the
    history started at each message (``gid`` ``"sent_from_here"``), the ``max_tokens`` budget
    (``gid`` ``"max_tokens"``) and the start of the ``max_messages`` window
    (``gid`` ``"max_messages"``).  Returns the main Axes; the twin is ``ax.figure.axes[-1]``.
    Without ``ax``, on a new 10 x 4 inch pyplot figure (shown by Jupyter).
    """
    result = (
        source
        if isinstance(source, MessageStates)
        else message_states(
            source,
            key,
            turn=turn,
            policy=policy,
            settings=settings,
            max_messages=max_messages,
            max_tokens=max_tokens,
            include_timestamps=include_timestamps,
            include_runtime_context=include_runtime_context,
            extend_to_user=extend_to_user,
            last_consolidated=last_consolidated,
            file_cap=file_cap,
        )
    )
    states = result.frame
    ax = ax if ax is not None else timeline_axes(new_figure(*TIMELINE_SIZE))
    n = len(states)
    edges = np.arange(n + 1) - 0.5
    tokens = states["tokens"].fillna(0).to_numpy(dtype=float)
    role = states["role"]
    roles = np.where(role.isna().to_numpy(), "?", role.to_numpy(dtype=object))
    order = list(ROLE_COLORS)
    handles: list = []
    for role in sorted(set(roles), key=lambda r: (order.index(r) if r in order else len(order), r)):
        # add_artist, not ax.stairs: the limits are set below, and ax.stairs would walk
        # every step of the path to update them (most of the drawing time on 2000 messages).
        patch = StepPatch(
            np.where(roles == role, tokens, 0.0),
            edges,
            fill=True,
            color=ROLE_COLORS.get(role, OTHER_ROLE_COLOR),
            label=plot_label(role),
            zorder=2,
            gid=f"role:{role}",
        )
        ax.add_artist(patch)
        handles.append(patch)
    labels = [str(h.get_label()) for h in handles]
    status = states["status"].to_numpy()
    for name in _SHADED:
        for k, (start, stop) in enumerate(_runs(status == name)):
            label = STATUS[name].label if k == 0 else "_nolegend_"
            _span(ax, start, stop, name, label, color=STATUS[name].color, alpha=_SHADED[name], lw=0)
            if k == 0:
                handles.append(_chip(STATUS[name].color))
                labels.append(label)
    in_window = np.flatnonzero(status == "in_window")
    if len(in_window):
        label = f"window ({len(in_window)} sent)"
        color = STATUS["in_window"].color
        _span(
            ax,
            in_window[0],
            in_window[-1] + 1,
            "window",
            label,
            color=color,
            alpha=_WINDOW_ALPHA,
            lw=0,
        )
        handles.append(_chip(color))
        labels.append(label)
    low, high = xlim if xlim is not None else (-0.5, max(n, 1) - 0.5)
    visible = tokens[max(0, int(np.ceil(low))) : max(0, int(np.floor(high)) + 1)]
    ax.set_xlim(low, high)
    ax.set_ylim(0, 1.05 * max(visible.max(initial=0.0), 1.0))
    ax.set_xlabel("message index")
    ax.set_ylabel("tokens per message")
    count_axis(ax.xaxis)
    count_axis(ax.yaxis)
    ax.yaxis.set_major_formatter(compact)
    ax.set_title(f"{plot_label(result.key)} at turn {result.turn}", loc="left", fontsize=10)
    twin = ax.twinx()
    _draw_budget(twin, result, status, in_window)
    more_handles, more_labels = twin.get_legend_handles_labels()
    legend_beside(ax, handles + more_handles, labels + more_labels, past=[twin])
    return ax


def _line(ax: Axes, x: Any, y: Any, **style: Any) -> Line2D:
    """The line ``ax.step``, ``axhline`` or ``axvline`` draws, added as an artist: the limits
    are set after it (those would update them in vain, over every step of the line)."""
    line = Line2D(x, y, **style)
    ax.add_artist(line)
    return line


def _draw_budget(
    twin: Axes, result: MessageStates, status: np.ndarray, in_window: np.ndarray
) -> None:
    """The twin axis: tokens sent from each message to the turn, and the two limits."""
    states = result.frame
    from_here = _sent_from_here(states, status)
    _line(
        twin,
        np.arange(len(states)),
        from_here,
        drawstyle="steps-mid",
        color="#222222",
        lw=1.2,
        label="tokens sent from here",
        gid="sent_from_here",
    )
    max_tokens = result.settings.max_tokens
    assert max_tokens is not None  # resolved settings: every release has a default
    if max_tokens > 0:
        _line(
            twin,
            [0, 1],
            [max_tokens, max_tokens],
            transform=twin.get_yaxis_transform(which="grid"),
            color=STATUS["trimmed_tokens"].color,
            ls="--",
            lw=1.2,
            gid="max_tokens",
            label=f"max_tokens={max_tokens:,}",
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
    trimmed = np.flatnonzero(status == "trimmed_count")
    live = np.flatnonzero(~np.isnan(from_here))
    count_start = trimmed[-1] + 1 if len(trimmed) else (live[0] if len(live) else None)
    if count_start is not None and result.count_window > 0:
        _line(
            twin,
            [count_start - 0.5] * 2,
            [0, 1],
            transform=twin.get_xaxis_transform(which="grid"),
            color=STATUS["trimmed_count"].color,
            ls=":",
            lw=1.5,
            gid="max_messages",
            label=f"max_messages={result.count_window} window",
        )
    window_tokens = float(from_here[in_window[0]]) if len(in_window) else 0.0
    top = 1.6 * max(max_tokens, window_tokens, 1.0)
    twin.set_ylim(0, top)
    twin.set_ylabel("tokens sent from here to the turn")
    count_axis(twin.yaxis)
    twin.yaxis.set_major_formatter(compact)
