"""Matplotlib views of sessions, corpora and sweeps; fixed sizes and colours, no state.

Every function takes the objects or the DataFrames sessionkit produces, draws on a given Axes
(or on a new Figure it makes through pyplot, so Jupyter shows it at the end of the cell as it
does seaborn's), and returns what it drew on.  The data behind a plot stays readable from the
artists: bars are ``ax.patches`` (``StepPatch`` or bar ``Rectangle``), spans are
``Rectangle`` patches whose ``gid`` names what they shade.

Text in any script draws: a CJK font ships with sessionkit and is a fallback after the user's
fonts while sessionkit draws (:mod:`sessionkit.plot.style`).  The modules: ``timeline``
(one session's messages), ``sessions`` (session lengths), ``sweeps`` (settings grids and the
file cap), ``releases`` (nanobot releases compared), ``requests`` (whole requests: parts,
prefix cache and why it broke), ``usage`` (reported usage and cost), ``experiments``
(agreement against tokens or cost) and ``style`` (fonts, colours, layout).
"""

from __future__ import annotations

from sessionkit.plot.experiments import FRONTIER_X, agreement_frontier
from sessionkit.plot.releases import (
    DEFAULT_CONTEXT_WINDOW,
    release_comparison,
    release_summary,
)
from sessionkit.plot.requests import (
    BREAK_COLORS,
    PART_COLORS,
    cache_breaks,
    cache_ratio,
    request_composition,
)
from sessionkit.plot.sessions import session_lengths
from sessionkit.plot.style import ROLE_COLORS
from sessionkit.plot.sweeps import (
    SWEEP_VALUES,
    TRUNCATING_CUTS,
    file_cap_curve,
    truncation_share,
    window_heatmap,
)
from sessionkit.plot.timeline import timeline_axes, token_timeline
from sessionkit.plot.usage import cost_by, cost_heatmap, cumulative_cost, reported_vs_estimated

__all__ = [
    "BREAK_COLORS",
    "DEFAULT_CONTEXT_WINDOW",
    "FRONTIER_X",
    "PART_COLORS",
    "ROLE_COLORS",
    "SWEEP_VALUES",
    "TRUNCATING_CUTS",
    "agreement_frontier",
    "cache_breaks",
    "cache_ratio",
    "cost_by",
    "cost_heatmap",
    "cumulative_cost",
    "file_cap_curve",
    "release_comparison",
    "release_summary",
    "reported_vs_estimated",
    "request_composition",
    "session_lengths",
    "timeline_axes",
    "token_timeline",
    "truncation_share",
    "window_heatmap",
]


def __dir__() -> list[str]:
    """The public names only: ``dir()`` and tab completion leave out the modules, np, pd, ..."""
    return sorted(__all__)
