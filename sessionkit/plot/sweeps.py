"""Sweeps over settings: the window kept per (max_tokens, max_messages), the share of turns
truncated, and what the file cap trims at each limit."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal, cast

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import NullFormatter, PercentFormatter, StrMethodFormatter

from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings
from sessionkit.plot.style import count_axis, legend_beside, new_figure, plotting
from sessionkit.simulate.filecap import file_cap
from sessionkit.simulate.windowing import windows

if TYPE_CHECKING:
    from matplotlib.colors import Normalize

    from sessionkit.store.corpus import Corpus

__all__ = [
    "SWEEP_VALUES",
    "TRUNCATING_CUTS",
    "file_cap_curve",
    "truncation_share",
    "window_heatmap",
]

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
        grid = {"max_messages": list(max_messages), "max_tokens": list(max_tokens)}
        frame = windows(source, settings=settings, grid=grid)
    per_release = frame.groupby("policy", observed=True)
    for column in ("include_timestamps", "extend_to_user", "last_consolidated"):
        if per_release[column].nunique().max() > 1:
            raise ValueError(
                f"the windows frame mixes several {column} values; select one first, e.g. "
                f"frame[frame[{column!r}] == ...]"
            )
    return frame.assign(truncated=frame["cut"].isin(TRUNCATING_CUTS))


def budget_label(budget: int) -> str:
    return "none" if budget <= 0 else f"{budget:,}"


def budget_order(budgets: Iterable[int]) -> list[int]:
    """Budgets ascending, no budget (0, "none") last: no limit is the largest budget."""
    return sorted(budgets, key=lambda budget: (budget <= 0, budget))


@plotting
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
    ascending with no limit (0, "none") last.
    """
    if value not in SWEEP_VALUES:
        raise ValueError(f"value must be one of {', '.join(SWEEP_VALUES)}, not {value!r}")
    settings = settings.replace(include_timestamps=include_timestamps)
    frame = _sweep(source, max_messages, max_tokens, settings)
    grid = frame.pivot_table(
        index="max_tokens", columns="max_messages", values=value, aggfunc="mean"
    ).astype(float)
    grid = grid.reindex(index=budget_order(grid.index), columns=budget_order(grid.columns))
    if ax is None:
        ax = new_figure(7.0, 4.2).add_subplot()
    share = value == "truncated"
    image = ax.imshow(
        grid.to_numpy(),
        origin="lower",
        aspect="auto",
        cmap="viridis",
        vmin=0.0 if share else None,
        vmax=1.0 if share else None,
    )
    # imshow without a norm: a Normalize.
    middle = np.nanmean(cast("Normalize", image.norm).inverse(0.5)) if grid.size else 0.0
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
    ax.set_xticks(range(grid.shape[1]), [budget_label(m) for m in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [budget_label(b) for b in grid.index])
    ax.set_xlabel("max_messages")
    ax.set_ylabel("max_tokens")
    ax.set_title(SWEEP_VALUES[value], loc="left", fontsize=10)
    ax.figure.colorbar(image, ax=ax, label=SWEEP_VALUES[value])
    return ax


@plotting
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
    share = share[budget_order(share.columns)]
    if ax is None:
        ax = new_figure(7.0, 3.8).add_subplot()
    positions = np.arange(share.shape[1])
    for count, row in share.iterrows():
        (line,) = ax.plot(positions, row.to_numpy(dtype=float), marker="o", label=f"{count}")
        line.set_gid(f"max_messages={count}")
    ax.set_xticks(positions, [budget_label(b) for b in share.columns])
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("max_tokens")
    ax.set_ylabel("turns truncated")
    handles, labels = ax.get_legend_handles_labels()
    legend_beside(ax, handles, labels, title="max_messages", title_fontsize=8)
    ax.grid(alpha=0.3)
    return ax


@plotting
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
    ``"messages"``); nanobot 0.2.2's limit (``get_policy().defaults.file_cap``) is marked (``gid`` ``"nanobot"``).
    """
    if isinstance(source, pd.DataFrame):
        frame, grid = source, sorted(int(x) for x in source["limit"].unique())
    else:
        frame = file_cap(source, grid={"file_cap": list(limits)}, replay=replay)
        grid = sorted(set(limits))
    trimmed = frame[frame["tripped"]].groupby("limit")
    sessions = trimmed["session_key"].nunique().reindex(grid, fill_value=0)
    dropped = trimmed["dropped"].sum().reindex(grid, fill_value=0)
    if ax is None:
        ax = new_figure(7.0, 3.8).add_subplot()
    (line,) = ax.plot(
        grid, sessions.to_numpy(), marker="o", color="#4c72b0", label="sessions trimmed"
    )
    line.set_gid("sessions")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(grid)
    count_axis(ax.yaxis)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("file cap limit (messages)")
    ax.set_ylabel("sessions trimmed")
    cap = get_policy().defaults.file_cap
    assert cap is not None  # nanobot 0.2.2's default: 2000
    ax.axvline(cap, color="#7f7f7f", ls=":", lw=1.2).set(gid="nanobot", label="nanobot 0.2 limit")
    twin = ax.twinx()
    (line,) = twin.plot(
        grid, dropped.to_numpy(), marker="s", color="#d62728", label="messages dropped"
    )
    line.set_gid("messages")
    twin.set_ylim(bottom=0)
    count_axis(twin.yaxis)
    twin.set_ylabel("messages dropped")
    handles, labels = ax.get_legend_handles_labels()
    more_handles, more_labels = twin.get_legend_handles_labels()
    legend_beside(ax, handles + more_handles, labels + more_labels, past=[twin])
    return ax
