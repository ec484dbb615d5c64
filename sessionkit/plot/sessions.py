"""A corpus' sessions: how long they are, in messages and in tokens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter

from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings
from sessionkit.plot.style import compact, count_axis, new_figure, plotting

if TYPE_CHECKING:
    from sessionkit.store.corpus import Corpus

__all__ = ["session_lengths"]


def sessions_frame(source: Corpus | Session | Sequence[Session] | pd.DataFrame) -> pd.DataFrame:
    """The ``sessions`` frame of a Corpus, a Session or a list of Sessions; a frame as it is."""
    from sessionkit.store.corpus import Corpus

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


def _log_ticks(ax: Axes) -> None:
    """Compact labels on a log x axis: at 1, 2 and 5 per decade over up to three decades, at
    powers of ten beyond, so the labels never run into each other on a 4-inch axis."""
    low, high = ax.get_xlim()
    decades = np.log10(max(high, 1.0) / max(low, 1.0))
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0) if decades <= 3 else (1.0,)))
    ax.xaxis.set_major_formatter(compact)
    ax.xaxis.set_minor_formatter(NullFormatter())


@plotting
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
    file cap (``settings.file_cap``, nanobot 0.2.2's where None, or ``file_cap`` when given) is marked on the messages axis
    (``gid`` ``"file_cap"``), each token budget on the tokens axis (``gid`` ``"budget:<n>"``).  Returns the Figure;
    ``fig.axes`` are (messages, tokens) and their bars are ``ax.patches`` with heights equal
    to ``np.histogram(values, bins=edges)``.
    """
    sessions = sessions_frame(source)
    cap = get_policy().resolve(settings.replace(file_cap=file_cap)).file_cap or 0
    fig = new_figure(10.0, 3.4)
    ax_messages, ax_tokens = fig.subplots(1, 2)
    panels = (
        (ax_messages, "n_messages", "messages per session", [("file_cap", cap)]),
        (ax_tokens, "tokens", "tokens per session", [(f"budget:{b}", b) for b in budgets]),
    )
    for ax, column, xlabel, marks in panels:
        values = sessions[column].dropna().to_numpy(dtype=float)
        ax.hist(values, bins=_log_bins(values, bins), color="#4c72b0", edgecolor="white", lw=0.5)
        ax.set_xscale("log")
        count_axis(ax.yaxis)
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
        if any(limit > 0 for _, limit in marks):
            # Above the bars, not on them: the tallest bars sit anywhere along the axis.
            ax.legend(
                fontsize=8,
                loc="lower left",
                bbox_to_anchor=(0.0, 1.0),
                frameon=False,
                borderaxespad=0.2,
            )
    return fig
