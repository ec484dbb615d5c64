"""What every sessionkit figure shares: fonts (with a CJK fallback), colours, number formats,
new figures made through pyplot, and legends placed beside the data.

The CJK font is Noto Sans CJK (the ``noto-cjk-sans-jp-regular`` package, SIL OFL 1.1; its
one OpenType file holds the whole Pan-CJK glyph set, simplified and traditional Chinese,
Japanese and Korean).  It is added to matplotlib's font manager when this module is imported
(nothing is downloaded, nothing written) and used as a fallback after the user's own
``font.family``, only while sessionkit draws: the user's rcParams are left as they were.
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ParamSpec, TypeVar, cast

import matplotlib as mpl
import matplotlib.pyplot as plt
from matplotlib import font_manager
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imsave
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.legend import Legend
from matplotlib.text import Text
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import Bbox, ScaledTranslation

from sessionkit.schema import STATUSES

__all__ = [
    "CJK_FAMILY",
    "OTHER_ROLE_COLOR",
    "ROLE_COLORS",
    "KeptLayout",
    "compact",
    "count_axis",
    "drawn",
    "font_family",
    "legend_beside",
    "new_figure",
    "plotting",
    "png",
    "styled",
    "titles",
]

ROLE_COLORS: dict[str, str] = {
    "user": "#4c72b0",
    "assistant": "#dd8452",
    "tool": "#55a868",
    "system": "#8172b3",
}
OTHER_ROLE_COLOR = "#999999"

STATUS = {status.name: status for status in STATUSES}
"""The status table by name: every status colour and legend label comes from it."""

DPI = 100
"""Every new figure's dots per inch: its pixel size is 100 x its size in inches."""


def _register_cjk() -> str | None:
    """Add the packaged Noto Sans CJK to matplotlib's font manager; its family name, or None
    where the package is missing or its file unreadable (text then draws as before)."""
    try:
        from noto_cjk_sans_jp_regular import FONT_PATH
    except ImportError:
        return None
    path = str(FONT_PATH)
    try:
        font_manager.fontManager.addfont(path)
        return font_manager.FontProperties(fname=path).get_name()
    except (OSError, RuntimeError, ValueError):
        return None


CJK_FAMILY: str | None = _register_cjk()
"""The CJK fallback font's family name (``"Noto Sans CJK JP"``), None without it."""


def font_family() -> list[str]:
    """The user's ``font.family`` with the CJK font after it, as a fallback for the glyphs
    the user's fonts lack."""
    family = list(mpl.rcParams["font.family"])
    if CJK_FAMILY is not None and CJK_FAMILY not in family:
        family.append(CJK_FAMILY)
    return family


@contextlib.contextmanager
def styled() -> Iterator[None]:
    """sessionkit's drawing: the CJK fallback font, the rest as the user set it; on leaving,
    ``font.family`` is restored, and only it (``mpl.rc_context`` would also undo what the
    first pyplot figure sets up, e.g. IPython's interactive mode, and Jupyter would show no
    figure after it)."""
    before = mpl.rcParams["font.family"]
    mpl.rcParams["font.family"] = font_family()
    try:
        yield
    finally:
        mpl.rcParams["font.family"] = before


P = ParamSpec("P")
R = TypeVar("R", Axes, Figure)


def plotting(function: Callable[P, R]) -> Callable[P, R]:
    """Run a plot function in :func:`styled`, then give the tick labels of the figure's Axes
    the same fonts (matplotlib makes tick labels at draw time, outside the context)."""

    @functools.wraps(function)
    def draw(*args: P.args, **kwargs: P.kwargs) -> R:
        with styled():
            result = function(*args, **kwargs)
            family = font_family()
        figure = result if isinstance(result, Figure) else result.figure
        for ax in figure.axes:
            ax.tick_params(labelfontfamily=family)
        return result

    return draw


def titles(ax: Axes) -> list[Text]:
    """``ax``'s three title texts (centre, left, right): its child texts not in ``ax.texts``
    (matplotlib names only the centre one, ``ax.title``)."""
    own = set(ax.texts)
    return [child for child in ax.get_children() if isinstance(child, Text) and child not in own]


class PlotFigure(Figure):
    """A Figure sessionkit made through pyplot: Jupyter shows it once at the end of the cell,
    also when a cell ends with it (see :func:`_show_once`)."""

    def __repr__(self) -> str:
        return super().__repr__().replace(type(self).__name__, "Figure", 1)


def new_figure(width: float, height: float, **kwargs: Any) -> Figure:
    """A new Figure of ``width`` x ``height`` inches, constrained layout, made through pyplot
    so Jupyter's inline backend shows it at the end of the cell (as seaborn's and pandas'
    figures are); like theirs it stays open in pyplot until closed (``plt.close(fig)``)."""
    return plt.figure(
        figsize=(width, height), dpi=DPI, layout="constrained", FigureClass=PlotFigure, **kwargs
    )


_FIGURE_MIMES = ("image/png", "image/svg+xml", "image/jpeg", "application/pdf")


def _show_once() -> None:
    """In IPython: a :class:`PlotFigure` rendered for display (a cell ending with it, or the
    inline backend showing the open figures when the cell ends) leaves pyplot as it is shown,
    so it shows once (without this a figure returned by ``session_lengths`` would show twice:
    as the cell's result and again among the open figures).  Rendered again later (``fig`` in
    a later cell), it shows as any Figure does."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    formatters = shell.display_formatter.formatters
    for mime in _FIGURE_MIMES:
        if mime in formatters:
            formatters[mime].for_type(PlotFigure, functools.partial(_format, formatters[mime]))


def _format(formatter: Any, fig: Figure) -> Any:
    try:
        printer = formatter.lookup_by_type(Figure)
    except KeyError:
        return None
    output = printer(fig)
    manager = fig.canvas.manager
    if output is not None and manager is not None and plt.fignum_exists(manager.num):
        plt.close(fig)  # shown now: the inline backend would show it again when the cell ends
    return output


_show_once()


def compact(x: float, _pos: float | None = None) -> str:
    """A tick value, exact and short with a k/M/B suffix: 500, 2k, 12.5k, 1M, 2B."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if x >= size:
            return f"{x / size:g}{suffix}"
    return f"{x:g}"


def count_axis(axis: Any) -> None:
    """Ticks at whole numbers only, on an axis that counts (messages, tokens, sessions)."""
    axis.set_major_locator(MaxNLocator(integer=True))


def _right_of(ax: Axes, others: Sequence[Axes]) -> float:
    """How far (inches) the y axes of ``others`` (twins) reach right of ``ax``: their tick
    labels and label, which sit in the same place however the figure is laid out."""
    reach = 0.0
    for other in others:
        box = other.yaxis.get_tightbbox()  # measured with the renderer matplotlib picks
        if box is not None:
            reach = max(reach, box.x1 - other.bbox.x1)
    return reach / ax.figure.canvas.figure.dpi  # the root figure's, also on a SubFigure


def legend_beside(
    ax: Axes,
    handles: Sequence[Artist],
    labels: Sequence[str],
    *,
    past: Sequence[Axes] = (),
    **kwargs: Any,
) -> Legend:
    """A one-column legend right of ``ax`` (and right of the y axis of every twin in
    ``past``), so it never covers the data; constrained layout makes room for it."""
    figure = ax.figure
    offset = _right_of(ax, past) + 0.08
    transform = ax.transAxes + ScaledTranslation(offset, 0.0, figure.dpi_scale_trans)
    options = {"fontsize": 8, "frameon": False, "borderaxespad": 0.0} | kwargs
    return ax.legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        bbox_transform=transform,
        **options,
    )


class KeptLayout(ConstrainedLayoutEngine):
    """Constrained layout for a figure redrawn from scratch at one size (the explorer's):
    laid out on its first draw, at each new size and after :meth:`forget`; every other draw
    puts its Axes where that layout put them (a layout costs as much as the draw itself).

    Kept margins fit the next drawing only if its texts are no wider: each layout leaves
    ``reserve`` inches more than the texts need left and right of the Axes (a wider tick
    label or legend entry), and :func:`png` checks after drawing that the texts fit, laying
    the figure out again (and redrawing) when they do not.
    """

    SLACK = 0.6
    """Inches of margin beyond the reserve, left or right, that make :func:`png` lay the
    figure out again (narrower texts after wider ones: the plot grows back)."""

    def __init__(self, *, reserve: float = 0.16, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reserve = reserve
        self._kept: tuple[tuple[float, ...], list[Any]] | None = None
        self.layouts = 0
        """How many times the layout ran (the others kept it)."""

    def forget(self) -> None:
        """Lay the figure out again on its next draw."""
        self._kept = None

    def execute(self, fig: Any) -> Any:
        size = (*fig.get_size_inches(), fig.dpi)
        if self._kept is not None and self._kept[0] == size and len(self._kept[1]) == len(fig.axes):
            for ax, box in zip(fig.axes, self._kept[1], strict=True):
                _place(ax, box)
            return None
        result = super().execute(fig)
        self.layouts += 1
        spare = self.reserve / size[0]
        kept = []
        for ax in fig.axes:
            box = ax.get_position(original=True)
            if box.width > 4 * spare:
                box = Bbox.from_extents(box.x0 + spare, box.y0, box.x1 - spare, box.y1)
                _place(ax, box)
            kept.append(box.frozen())
        self._kept = (size, kept)
        return result

    def misfit(self, fig: Figure) -> bool:
        """Whether the drawing just made needs another layout: a title, axis label (an
        unlabelled axis: tick label) or legend past the canvas's left or right edge, or more
        than :attr:`SLACK` to spare on a side."""
        renderer = cast(FigureCanvasAgg, fig.canvas).get_renderer()  # drawn() gave it an Agg canvas
        texts = []
        for ax in fig.axes:
            texts += titles(ax)
            for axis in (ax.xaxis, ax.yaxis):
                texts += [axis.label] if axis.label.get_text() else _tick_labels(axis)
        boxes = [legend.get_window_extent(renderer) for legend in _legends_of(fig)]
        boxes += [
            text.get_window_extent(renderer)
            for text in texts
            if text.get_visible() and text.get_text()
        ]
        if not boxes:
            return False
        pad = self.get()["w_pad"] * fig.dpi
        left = min(box.x0 for box in boxes)
        right = fig.bbox.x1 - max(box.x1 for box in boxes)
        slack = (self.reserve + self.SLACK) * fig.dpi + pad
        return not (-0.5 <= left <= slack and -0.5 <= right <= slack)


def _place(ax: Axes, box: Bbox) -> None:
    """Put ``ax`` (and its twins) at ``box`` as constrained layout does, leaving it in the
    layout (``set_position`` alone takes it out)."""
    in_layout = ax.get_in_layout()
    ax.set_position(box)
    ax.set_in_layout(in_layout)


def _tick_labels(axis: Any) -> list[Any]:
    """The major tick labels ``axis`` drew (those of ticks in its view)."""
    low, high = sorted(axis.get_view_interval())
    locs = axis.get_majorticklocs()
    ticks = axis.majorTicks[: len(locs)]
    return [
        label
        for tick, loc in zip(ticks, locs, strict=False)
        if low <= loc <= high
        for label in (tick.label1, tick.label2)
    ]


def _legends_of(fig: Figure) -> list[Legend]:
    legends = [ax.get_legend() for ax in fig.axes]
    return [legend for legend in [*legends, *fig.legends] if legend is not None]


def drawn(fig: Figure) -> FigureCanvasAgg:
    """``fig`` drawn once on a canvas kept with the figure (its renderer, and so matplotlib's
    text measurements, are reused from one call to the next; ``savefig`` makes a new canvas
    and, with a layout engine, draws twice).  Under :class:`KeptLayout`, drawn again after a
    fresh layout when the kept one no longer fits (:meth:`KeptLayout.misfit`)."""
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    engine = fig.get_layout_engine()
    if isinstance(engine, KeptLayout) and engine.misfit(fig):
        engine.forget()
        canvas.draw()
    return canvas


def png(fig: Figure, **pil_kwargs: Any) -> bytes:
    """``fig`` as PNG bytes, :func:`drawn` (Pillow's encoder, given ``pil_kwargs``)."""
    canvas = drawn(fig)
    buffer = io.BytesIO()
    imsave(
        buffer,
        canvas.buffer_rgba(),
        format="png",
        origin="upper",
        dpi=fig.dpi,
        pil_kwargs=pil_kwargs,
    )
    return buffer.getvalue()
