"""The data a matplotlib figure draws, as a frame, so a snapshot pins what it says, not its pixels."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator

from sessionkit import schema
from sessionkit.schema import FIGURE_DATA
from sessionkit.testing.snapshots import FLOAT_DIGITS, Snapshot, assert_frame_snapshot

__all__ = ["assert_figure_snapshot", "figure_data"]

_COLORBAR = "<colorbar>"  # the label matplotlib gives a colorbar's Axes


def _figure(source: Figure | Axes) -> Figure:
    return source if isinstance(source, Figure) else source.figure


def _label(artist: Any) -> str | None:
    """An artist's gid, else its label; matplotlib's generated ``_child0``-style labels are
    left out (they only count artists)."""
    label = artist.get_gid() or artist.get_label()
    return None if not label or label.startswith("_") else str(label)


def _values(array: Any) -> np.ndarray:
    return np.ma.filled(np.ma.asarray(array, dtype=float), np.nan)


def _rows_of_axes(n: int, ax: Axes) -> Iterable[tuple[Any, ...]]:
    """:data:`FIGURE_DATA` rows for what ``ax`` draws."""

    def row(artist: str, label: str | None, i: int, *xywhv: float | None) -> tuple[Any, ...]:
        x, y, width, height, value = (*xywhv, None, None, None, None, None)[:5]
        return n, artist, label, i, x, y, width, height, value

    texts = (("title", ax.get_title("left") or ax.get_title()), ("xlabel", ax.get_xlabel()))
    for kind, text in (*texts, ("ylabel", ax.get_ylabel())):
        if text:
            yield row(kind, text, 0)
    for kind, axis in (("xtick", ax.xaxis), ("ytick", ax.yaxis)):
        if isinstance(axis.get_major_locator(), FixedLocator):
            ticks = zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=False)
            for i, (where, text) in enumerate(ticks):
                yield row(
                    kind, text.get_text(), i, *((where, None) if kind == "xtick" else (None, where))
                )
    for line in ax.get_lines():
        points = zip(_values(line.get_xdata()), _values(line.get_ydata()), strict=False)
        yield from (row("line", _label(line), i, x, y) for i, (x, y) in enumerate(points))
    for i, patch in enumerate(ax.patches):
        if hasattr(patch, "get_data"):
            values, edges, _ = patch.get_data()
            for j, value in enumerate(_values(values)):
                width = edges[j + 1] - edges[j]
                yield row("step", _label(patch), j, edges[j], 0.0, width, value)
        elif hasattr(patch, "get_height"):
            x, y = patch.get_x(), patch.get_y()
            yield row("rect", _label(patch), i, x, y, patch.get_width(), patch.get_height())
    for image in ax.get_images():
        cells = enumerate(np.ndenumerate(_values(image.get_array())))
        for i, ((r, c), value) in cells:
            yield row("image", _label(image), i, c, r, None, None, value)
    for collection in ax.collections:
        array = collection.get_array()
        if array is not None:
            values = _values(array).ravel()
            for i, value in enumerate(values):
                yield row("mesh", _label(collection), i, None, None, None, None, value)
        else:
            offsets = _values(collection.get_offsets())
            points = enumerate(offsets)
            yield from (row("points", _label(collection), i, x, y) for i, (x, y) in points)


def figure_data(source: Figure | Axes) -> pd.DataFrame:
    """The data a figure draws, one row per point, bar or cell (see :data:`FIGURE_DATA`).

    ``artist`` is ``title``/``xlabel``/``ylabel`` (text in ``label``), ``xtick``/``ytick``
    (ticks placed explicitly, as on a heatmap: label and position), ``line`` (x, y),
    ``step`` (a stairs bin: x, width, height), ``rect`` (a bar or span), ``image`` (a heatmap
    cell: column x, row y, value), ``mesh`` (a colour-mapped collection's values) or ``points``
    (scatter offsets).  ``label`` is the artist's gid, else its label.  Pixels, colours, fonts
    and colorbars (a colour scale, not data) are left out, so the snapshot of this frame pins
    what a figure says, not its bytes.
    """
    fig = _figure(source)
    rows = [
        row
        for n, ax in enumerate(fig.axes)
        if ax.get_label() != _COLORBAR
        for row in _rows_of_axes(n, ax)
    ]
    columns = list(zip(*rows, strict=True)) or [()] * len(FIGURE_DATA)
    return schema.frame(
        FIGURE_DATA, {c.name: list(v) for c, v in zip(FIGURE_DATA, columns, strict=True)}
    )


def assert_figure_snapshot(
    source: Figure | Axes,
    path: str | Path,
    *,
    update: bool | None = None,
    float_digits: int = FLOAT_DIGITS,
) -> Snapshot:
    """:func:`assert_frame_snapshot` of :func:`figure_data`: pin what a figure shows."""
    return assert_frame_snapshot(
        figure_data(source), path, update=update, float_digits=float_digits
    )
