"""The data a matplotlib figure draws, as a frame, so a snapshot pins what it says, not its pixels;
and what keeps a figure from being read (text off the canvas, colliding labels, legends on the
data, fractional counts), as a list of problems."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.figure import Figure, SubFigure
from matplotlib.legend import Legend
from matplotlib.text import Text
from matplotlib.ticker import FixedLocator
from matplotlib.transforms import Bbox, BboxBase

from sessionkit import schema
from sessionkit.plot.style import titles
from sessionkit.schema import FIGURE_DATA
from sessionkit.testing.snapshots import FLOAT_DIGITS, Snapshot, assert_frame_snapshot

__all__ = ["assert_figure_snapshot", "drawn_ticks", "figure_data", "layout_problems"]

_COLORBAR = "<colorbar>"  # the label matplotlib gives a colorbar's Axes


class _Box(Protocol):
    """A patch with a place and a size (a bar's or a span's rectangle)."""

    def get_x(self) -> float: ...
    def get_y(self) -> float: ...
    def get_width(self) -> float: ...
    def get_height(self) -> float: ...


def _figure(source: Figure | Axes) -> Figure | SubFigure:
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
            for i, (where, tick_label) in enumerate(ticks):
                yield row(
                    kind,
                    tick_label.get_text(),
                    i,
                    *((where, None) if kind == "xtick" else (None, where)),
                )
    for line in ax.get_lines():
        points: Iterable[tuple[Any, Any]] = zip(
            _values(line.get_xdata()), _values(line.get_ydata()), strict=False
        )
        yield from (row("line", _label(line), i, x, y) for i, (x, y) in enumerate(points))
    for i, patch in enumerate(ax.patches):
        if hasattr(patch, "get_data"):
            values, edges, _ = patch.get_data()
            for j, value in enumerate(_values(values)):
                width = edges[j + 1] - edges[j]
                yield row("step", _label(patch), j, edges[j], 0.0, width, value)
        elif hasattr(patch, "get_height"):
            box = cast(_Box, patch)
            x, y = box.get_x(), box.get_y()
            yield row("rect", _label(patch), i, x, y, box.get_width(), box.get_height())
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


def drawn_ticks(axis: Axis) -> list[tuple[float, Text]]:
    """The major ticks an axis draws, after ``fig.canvas.draw()``: position and label, for
    the ticks inside the view with a visible label."""
    if not (axis.get_visible() and axis.axes.get_visible()):
        return []  # a twin's shared axis, say
    low, high = sorted(axis.get_view_interval())
    span = (high - low) * 1e-9
    ticks = zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=False)
    return [
        (float(where), label)
        for where, label in ticks
        if low - span <= where <= high + span and label.get_visible() and label.get_text()
    ]


def _texts(fig: Figure) -> list[tuple[str, Text]]:
    """Every text the figure draws, named: titles, axis labels, drawn tick labels, legend
    texts and free text (annotations)."""
    found: list[tuple[str, Text]] = []
    for n, ax in enumerate(fig.axes):
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if axis.get_visible() and axis.label.get_visible() and axis.label.get_text():
                found.append((f"axes {n} {name}label", axis.label))
            found += [
                (f"axes {n} {name}tick {where:g}", label) for where, label in drawn_ticks(axis)
            ]
        found += [(f"axes {n} title", title) for title in titles(ax)]
        found += [(f"axes {n} text {t.get_text()!r}", t) for t in ax.texts if t.get_visible()]
    for legend in _legends(fig):
        found += [(f"legend text {t.get_text()!r}", t) for t in legend.get_texts()]
    found += [(f"figure text {t.get_text()!r}", t) for t in fig.texts if t.get_visible()]
    return [(name, text) for name, text in found if text.get_text()]


def _legends(fig: Figure) -> list[Legend]:
    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    return [legend for legend in legends if legend is not None and legend.get_visible()]


def _inside(box: Bbox, frame: BboxBase, slack: float = 0.5) -> bool:
    return (
        frame.x0 - slack <= box.x0
        and box.x1 <= frame.x1 + slack
        and frame.y0 - slack <= box.y0
        and box.y1 <= frame.y1 + slack
    )


def _overlap(a: Bbox, b: Bbox, slack: float = 0.5) -> bool:
    """True where the boxes share more than a hairline."""
    return min(a.x1, b.x1) - max(a.x0, b.x0) > slack and min(a.y1, b.y1) - max(a.y0, b.y0) > slack


def layout_problems(source: Figure | Axes, *, counts: Iterable[Axis] = ()) -> list[str]:
    """What keeps a drawn figure from being read, as sentences; empty where nothing does.

    Draws the figure (layout included), then finds: a text (title, axis label, tick label, legend text,
    annotation) or a legend reaching outside the canvas, as ``savefig(bbox_inches=None)``
    would clip it; two texts outside legends overlapping (tick labels of one axis touching
    count too: they are read one by one); a legend over the data area
    of any Axes (colorbars included), over another legend or over any text outside legends;
    a tick at a fractional value on an axis in ``counts`` (axes that count messages, tokens,
    sessions).
    """
    fig = _figure(source).canvas.figure
    fig.draw_without_rendering()  # lays out and draws on any canvas (a Figure() has no renderer)
    # Measured as a PNG draws them: Agg at the figure's size and dpi (what an Agg canvas keeps).
    renderer = RendererAgg(*fig.canvas.get_width_height(physical=True), fig.dpi)
    canvas = fig.bbox
    problems: list[str] = []
    texts = _texts(fig)
    for name, text in texts:
        box = text.get_window_extent(renderer)
        if not _inside(box, canvas):
            problems.append(f"{name} outside the canvas: {box.bounds} not in {canvas.bounds}")
    legends = _legends(fig)
    for i, legend in enumerate(legends):
        box = legend.get_window_extent(renderer)
        if not _inside(box, canvas):
            problems.append(f"legend {i} outside the canvas: {box.bounds}")
        for n, ax in enumerate(fig.axes):
            if _overlap(box, ax.bbox):
                problems.append(f"legend {i} covers the data area of axes {n}")
        for j, later in enumerate(legends[i + 1 :], start=i + 1):
            if _overlap(box, later.get_window_extent(renderer)):
                problems.append(f"legends {i} and {j} overlap")
        own = set(map(id, legend.get_texts())) | {id(legend.get_title())}
        for name, text in texts:
            if id(text) not in own and _overlap(box, text.get_window_extent(renderer)):
                problems.append(f"legend {i} covers {name}")
    free = [(name, text.get_window_extent(renderer)) for name, text in texts]
    free = [(name, box) for name, box in free if not name.startswith("legend text")]
    for k, (a, box) in enumerate(free):
        for b, other in free[k + 1 :]:
            if _overlap(box, other):
                problems.append(f"{a} and {b} overlap")
    for n, ax in enumerate(fig.axes):
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            boxes = [
                (label.get_text(), label.get_window_extent(renderer))
                for _, label in drawn_ticks(axis)
            ]
            for k, (a, box) in enumerate(boxes):
                for b, other in boxes[k + 1 :]:
                    if _overlap(box, other, slack=0.0):
                        problems.append(f"axes {n} {name} tick labels {a!r} and {b!r} overlap")
    for counted in counts:
        fractional = [where for where, _ in drawn_ticks(counted) if not float(where).is_integer()]
        if fractional:
            label = counted.label.get_text() or counted.axes.get_title("left") or "?"
            problems.append(f"fractional ticks on the count axis {label!r}: {fractional}")
    return problems
