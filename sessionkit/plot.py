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

from sessionkit.corpus import resolve_session
from sessionkit.filecap import file_cap
from sessionkit.nanobot.policies import POLICIES
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings
from sessionkit.schema import STATUSES
from sessionkit.states import MessageStates, message_states
from sessionkit.windowing import DEFAULT_MAX_OUTPUT, SAFETY_BUFFER, windows

if TYPE_CHECKING:
    from sessionkit.corpus import Corpus

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "RELEASE_COLORS",
    "RELEASE_LABELS",
    "ROLE_COLORS",
    "SWEEP_VALUES",
    "TRUNCATING_CUTS",
    "file_cap_curve",
    "release_comparison",
    "release_summary",
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
    per_release = frame.groupby("policy", observed=True)
    for column in ("include_timestamps", "extend_to_user", "last_consolidated"):
        if per_release[column].nunique().max() > 1:
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


DEFAULT_CONTEXT_WINDOW = 200_000
"""nanobot's default ``context_window_tokens`` (the same in 0.2.2, 0.3.0 and 0.3.5)."""
RELEASE_COLORS: dict[str, str] = {
    "nanobot-0.2": "#4c72b0",
    "nanobot-0.3.0": "#dd8452",
    "nanobot-0.3.5": "#55a868",
}
"""One colour per release (policy name), in every release plot."""
RELEASE_LABELS: dict[str, str] = {
    "nanobot-0.2": "nanobot 0.2.2",
    "nanobot-0.3.0": "nanobot 0.3.0",
    "nanobot-0.3.5": "nanobot 0.3.5",
}
"""The release each policy reproduces, as legends name it."""
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
        frame = windows(
            source, policy=list(policies), context_window=context_window, max_output=max_output
        )
    if frame["context_window"].isna().any() or frame["max_output"].nunique() > 1:
        raise ValueError(
            "release plots need windows made from one max_output and a context_window "
            "(sk.windows(..., policy=[...], context_window=..., max_output=...))"
        )
    return frame[~frame["command"]]


def _drawn(frame: pd.DataFrame, policies: Sequence[str]) -> list[str]:
    """The releases of ``policies`` present in ``frame``, in the order asked for."""
    present = set(frame["policy"].astype(str))
    return [name for name in policies if name in present]


def _release_label(name: str) -> str:
    return RELEASE_LABELS.get(name, name)


def _loop_note(rows: pd.DataFrame) -> str:
    """What the release's agent loop passed to ``get_history``, for a legend entry."""
    count, budget = int(rows["max_messages"].iloc[0]), int(rows["max_tokens"].iloc[0])
    window = f"{count:,} messages" if count > 0 else "no count window"
    return f"{window}, {'no budget' if budget <= 0 else f'budget {budget:,}'}"


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
        ax = Figure(figsize=(10.0, 3.8), dpi=100, layout="constrained").add_subplot()
    for name in _drawn(frame, policies):
        rows = frame[frame["policy"] == name]
        label = f"{_release_label(name)} ({_loop_note(rows)})"
        (line,) = ax.plot(
            rows["turn"], rows["tokens_kept"], lw=1.2, color=RELEASE_COLORS.get(name), label=label
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
                label=f"{_release_label(name)} would summarise ({len(over):,} turns)",
            )
            marks.set_gid(f"needs_summary:{name}")
    if len(frame):
        ctx, out = int(frame["context_window"].iloc[0]), int(frame["max_output"].iloc[0])
        budget = ctx - out - SAFETY_BUFFER
        title = f"{frame['session_key'].iloc[0]}: context window {ctx:,}, max_output {out:,}"
        if budget > 0:
            ax.axhline(budget, color="#7f7f7f", ls="--", lw=1.0).set(
                gid="budget", label=f"input budget {budget:,}"
            )
        ax.set_title(title, loc="left", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(_compact)
    ax.set_xlabel("user turn")
    ax.set_ylabel("history tokens sent")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
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
    fig = Figure(figsize=(10.0, 3.6), dpi=100, layout="constrained")
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
            bars = ax.bar(x[shown], values[shown], width, color=RELEASE_COLORS.get(name))
            for bar in bars:
                bar.set_gid(name)
            if column == "median":
                bars.set_label(_release_label(name))
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
            [_compact(c) for c in contexts],
            rotation=0 if len(contexts) <= 5 else 90,
        )
        ax.set_xlim(-0.5, len(contexts) - 0.5)
        ax.set_xlabel("context window")
        ax.set_title(title, loc="left", fontsize=10)
        ax.set_ylim(bottom=0)
    axes[0].yaxis.set_major_formatter(_compact)
    axes[1].yaxis.set_major_formatter(PercentFormatter(1.0))
    axes[1].set_ylim(0, 1.02)
    axes[2].yaxis.set_major_locator(MaxNLocator(integer=True))
    most = stats["summaries"].fillna(0).max() if len(stats) else 0
    axes[2].set_ylim(0, 1.4 * max(float(most), 1.0))
    ungoverned = [_release_label(n) for n in names if stats.loc[n, "summaries"].isna().all()]
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
