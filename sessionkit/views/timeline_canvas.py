"""The explorer's timeline: :func:`sessionkit.plot.token_timeline` redrawn on kept Axes.

A move of a control redraws the timeline.  On a cleared figure each redraw made two Axes and
every tick of their three axes afresh (a fifth of a move's time); here the Axes and the
twin ``token_timeline`` asks for stay, only the artists it adds are taken off before the next
drawing, and matplotlib reuses its ticks.  ``token_timeline`` sets every limit, label,
locator and formatter itself each time, so each PNG equals one drawn on a fresh figure.

Drawing text is most of what is left (matplotlib 3.11 lays out and renders every string
glyph by glyph on each draw), and most strings come back from one move to the next at the
same place: the title, legend entries, tick labels of an axis whose range stayed.  The
canvas keeps the glyph images Agg drew for each string at each sub-pixel offset and
composites them again (:class:`TextImages`), so the pixels are the ones Agg would draw.
Its renderer also keeps each font's height metrics, which matplotlib otherwise looks up in the
font's tables every time it measures a string (several times per string per draw).

Matplotlib finds each axis's ticks and measures their labels three or four times a draw (to
draw them, to place the axis label and the title), and twice more when the legend is placed
beside the twin's axis; the kept Axes do it once for what the ticks depend on (view, place,
locator, formatter, fonts) while a move draws (:class:`_OnceAxis`).  A move also measures
the legend's boxes and lays each string out once, and keeps a legend whose entries look the
same (:meth:`_DrawnOnce.legend`).  The PNG is encoded unfiltered (a fifth of the time
Pillow's adaptive filters take, about the same size for a plot on white).

All this reaches into matplotlib's private internals, here and nowhere else in sessionkit.
They are written for matplotlib ``>=3.11,<3.12`` (:data:`MATPLOTLIB_RANGE`, the range
``pyproject.toml`` requires); :func:`fast_canvas_supported` checks the installed matplotlib
has each one of :data:`INTERNALS` as used here.  Where it has not, or where
``TUNING.fast_timeline`` is False, :class:`TimelineCanvas` draws ``token_timeline`` on fresh
Axes on a plain Agg canvas, with matplotlib's public API only (the same pixels, slower).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import struct
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

import matplotlib as mpl
import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.axis import XAxis, YAxis
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import fontManager, get_font
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.offsetbox import OffsetBox, PackerBase, VPacker
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter

from sessionkit.plot.style import drawn, titles
from sessionkit.simulate.states import MessageStates
from sessionkit.tuning import TUNING

if TYPE_CHECKING:
    from matplotlib.axis import Axis
    from matplotlib.typing import RcKeyType

__all__ = [
    "INTERNALS",
    "MATPLOTLIB_RANGE",
    "TextCanvas",
    "TextImages",
    "TimelineCanvas",
    "fast_canvas_problems",
    "fast_canvas_supported",
    "internals_probe",
    "rgba_png",
]

MATPLOTLIB_RANGE = ((3, 11), (3, 12))
"""The matplotlib releases (major, minor) this module is written for, lowest included,
highest not: ``pyproject.toml``'s ``matplotlib>=3.11,<3.12``."""


def _method(*params: str) -> Callable[[Any], bool]:
    """The shape of a method called with ``params`` (these names, in this order; any further
    parameters optional)."""

    def shaped(value: Any) -> bool:
        try:
            found = list(inspect.signature(value).parameters.values())
        except (TypeError, ValueError):
            return False
        optional = all(
            p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            for p in found[len(params) :]
        )
        return tuple(p.name for p in found[: len(params)]) == params and optional

    return shaped


def _has(method: str) -> Callable[[Any], bool]:
    """The shape of an object with a ``method``."""
    return lambda value: callable(getattr(value, method, None))


def _instance(kind: type | tuple[type, ...]) -> Callable[[Any], bool]:
    """The shape of an instance of ``kind``."""
    return lambda value: isinstance(value, kind)


def _asks(name: str) -> Callable[[Any], bool]:
    """The shape of a function whose code looks up attribute ``name`` (a hook it calls)."""

    def shaped(value: Any) -> bool:
        code = getattr(getattr(value, "__func__", value), "__code__", None)
        return code is not None and name in code.co_names

    return shaped


def _title_group(value: Any) -> bool:
    """The shape of a figure's groups of aligned labels: the titles' among them."""
    return isinstance(value, Mapping) and callable(
        getattr(value.get("title"), "get_siblings", None)
    )


INTERNALS: tuple[tuple[str, str, Callable[[Any], bool], str], ...] = (
    ("renderer", "_renderer", _has("draw_text_image"), "Agg's surface, swapped to keep glyphs"),
    ("font manager", "_find_fonts_by_props", _method("prop"), "the font files of a text"),
    ("text", "_get_layout", _method("renderer"), "a string's layout, kept for a draw"),
    ("text", "_get_layout", _asks("_get_font_height_metrics"), "asks renderers for font heights"),
    ("legend", "_legend_box", _instance(OffsetBox), "the legend's boxes, measured once a draw"),
    ("packer", "_get_bbox_and_child_offsets", _method("renderer"), "a box's measuring, kept"),
    ("axis", "_update_ticks", _method(), "the axis's tick finding, kept"),
    ("axis", "_get_ticklabel_bboxes", _method("ticks", "renderer"), "tick label measuring, kept"),
    ("axis", "_major_tick_kw", _instance(dict), "the settings of ticks to come: their font"),
    ("axes", "_init_axis", _method(), "makes the Axes' axes (kept ones instead)"),
    ("axes", "_update_title_position", _method("renderer"), "title placement, mostly skipped"),
    ("axes", "_twinned_axes", _has("get_siblings"), "the Axes' twins"),
    ("axes", "_autotitlepos", _instance((bool, type(None))), "a title placed by the user"),
    ("figure", "_align_label_groups", _title_group, "Axes whose titles align"),
    ("line", "_unscaled_dash_pattern", _instance(tuple), "a line's dashes (no getter)"),
    ("patch", "_unscaled_dash_pattern", _instance(tuple), "a patch's dashes (no getter)"),
)
"""Each matplotlib internal this module uses: the role of the object that has it (a key of
:func:`internals_probe`), its name, its shape and what it is for.  A hook matplotlib looks up
(the renderer's ``_get_font_height_metrics``) is checked where it looks it up."""

_MISSING = object()


def internals_probe() -> dict[str, Any]:
    """One matplotlib object of each role in :data:`INTERNALS`, made on a small figure."""
    figure = Figure()
    ax = figure.add_subplot()
    line, patch = Line2D([], []), Patch()
    return {
        "renderer": RendererAgg(1, 1, 72),
        "font manager": fontManager,
        "text": ax.title,
        "legend": ax.legend([line, patch], ["line", "patch"]),
        "packer": VPacker(),
        "axis": ax.yaxis,
        "axes": ax,
        "figure": figure,
        "line": line,
        "patch": patch,
    }


def fast_canvas_problems(version: tuple[int, int], objects: Mapping[str, Any]) -> list[str]:
    """Why this module cannot draw with matplotlib ``version`` (major, minor) whose objects, by
    role, are ``objects``: a version outside :data:`MATPLOTLIB_RANGE`, an internal missing or
    of another shape.  Empty where it can."""
    (low, high), problems = MATPLOTLIB_RANGE, []
    if not low <= version < high:
        problems.append(
            f"matplotlib {version[0]}.{version[1]} is not >={low[0]}.{low[1]},<{high[0]}.{high[1]}"
        )
    for role, name, shaped, what in INTERNALS:
        found = getattr(objects[role], name, _MISSING)
        if found is _MISSING:
            problems.append(f"the {role} has no {name} ({what})")
        elif not shaped(found):
            problems.append(f"the {role}'s {name} has another shape ({what})")
    return problems


@functools.cache
def fast_canvas_supported() -> bool:
    """Whether the installed matplotlib has every internal this module uses, as it uses them
    (:func:`fast_canvas_problems` of the installed version and :func:`internals_probe`)."""
    version = mpl.__version_info__
    return not fast_canvas_problems((version.major, version.minor), internals_probe())


_FONT_LISTS: tuple[RcKeyType, ...] = (
    "font.sans-serif",
    "font.serif",
    "font.monospace",
    "font.cursive",
    "font.fantasy",
)
_GLYPH_PARAMS: tuple[RcKeyType, ...] = (
    "text.hinting",
    "text.hinting_factor",
    "text.kerning_factor",
)
"""rcParams that change which font (the families a generic one names; a string's own
families are in its FontProperties), or which glyph images, a string is drawn with."""


class _Recorder:
    """Stands in for Agg's drawing surface while a string is drawn: passes each glyph image
    on and keeps a copy."""

    def __init__(self, surface: Any) -> None:
        self.surface = surface
        self.images: list[tuple[np.ndarray, int, int]] | None = []

    def draw_text_image(self, image: Any, x: Any, y: Any, angle: float, gc: Any) -> None:
        self.surface.draw_text_image(image, x, y, angle, gc)
        if self.images is not None and isinstance(image, np.ndarray) and angle == 0:
            self.images.append((image.copy(), int(x), int(y)))
        else:
            self.images = None  # drawn some other way: not kept

    def __getattr__(self, name: str) -> Any:
        self.images = None  # the string needed more than glyph images: not kept
        return getattr(self.surface, name)


class TextImages:
    """Glyph images of the strings drawn, by string, font, size and sub-pixel offset: a
    string drawn again at a whole-pixel shift is composited from them (Agg places glyphs on
    the pen position rounded to 1/64 pixel, so a whole-pixel shift moves the same images)."""

    LIMIT = 4096
    """Strings kept (the oldest dropped first)."""

    def __init__(self) -> None:
        self.kept: OrderedDict[tuple[Any, ...], list[tuple[np.ndarray, int, int]]] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.heights: dict[tuple[Any, ...], tuple[float | None, ...]] = {}
        self.params: tuple[Any, ...] | None = None
        """The font settings in force, read once per draw (None: read at each use)."""

    def font_params(self) -> tuple[Any, ...]:
        """:func:`_font_params`, as read at the start of the draw under way."""
        return self.params if self.params is not None else _font_params()

    def draw(
        self,
        renderer: RendererAgg,
        gc: Any,
        x: float,
        y: float,
        s: str,
        prop: Any,
        angle: float,
        mtext: Any,
    ) -> None:
        """Draw plain text ``s`` at ``(x, y)``, turned ``angle`` degrees, as
        ``renderer.draw_text`` would (Agg composites a turned string's glyphs as images too)."""
        fx, fy = math.floor(x), math.floor(y)
        key = (
            s,
            hash(prop),
            angle,
            x - fx,
            y - fy,
            renderer.dpi,
            renderer.height,
            gc.get_antialiased(),
            getattr(mtext, "get_fontfeatures", lambda: None)(),
            getattr(mtext, "get_language", lambda: None)(),
            *self.font_params(),
        )
        images = self.kept.get(key)
        surface = renderer._renderer
        if images is not None:
            self.hits += 1
            self.kept.move_to_end(key)
            for image, dx, dy in images:
                surface.draw_text_image(image, dx + fx, dy + fy, 0, gc)
            return
        self.misses += 1
        recorder = _Recorder(surface)
        renderer._renderer = recorder
        try:
            RendererAgg.draw_text(renderer, gc, x, y, s, prop, angle, False, mtext)
        finally:
            renderer._renderer = surface
        if recorder.images is not None:
            self.kept[key] = [(image, dx - fx, dy - fy) for image, dx, dy in recorder.images]
            if len(self.kept) > self.LIMIT:
                self.kept.popitem(last=False)


def _font_params() -> tuple[Any, ...]:
    """The :data:`_FONT_LISTS` and :data:`_GLYPH_PARAMS` in force, hashable."""
    rc = mpl.rcParams
    return (*[tuple(rc[name]) for name in _FONT_LISTS], *[rc[name] for name in _GLYPH_PARAMS])


def _font_heights(prop: Any, dpi: float) -> tuple[float | None, float | None, float | None]:
    """``prop``'s ascent, descent and line gap in pixels, read from its font's OS/2 or hhea
    table as matplotlib's ``Text`` reads them (None: neither table; it measures instead)."""
    font = get_font(fontManager._find_fonts_by_props(prop))
    tables: tuple[tuple[Literal["OS/2", "hhea"], str, str, str], ...] = (
        ("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"),
        ("hhea", "lineGap", "ascent", "descent"),
    )
    for table_name, gap, ascent, descent in tables:
        table: Mapping[str, Any] | None = font.get_sfnt_table(table_name)
        if table is None:
            continue
        fontsize = prop.get_size_in_points()
        head = font.get_sfnt_table("head")
        assert head is not None  # FreeType gives every sfnt font (one with OS/2 or hhea) a head
        scale = 1 / head["unitsPerEm"] * fontsize * dpi / 72
        return table[ascent] * scale, -table[descent] * scale, table[gap] * scale
    return None, None, None


class _TextRenderer(RendererAgg):
    """Agg, its plain strings drawn through :class:`TextImages`, its fonts' height
    metrics kept there too."""

    text_images: TextImages

    def _get_font_height_metrics(self, prop: Any) -> tuple[float | None, ...]:
        """What ``Text`` asks a renderer for before it reads the font's tables itself."""
        key = (hash(prop), self.dpi, *self.text_images.font_params())
        heights = self.text_images.heights
        if key not in heights:
            heights[key] = _font_heights(prop, self.dpi)
        return heights[key]

    def draw_text(
        self,
        gc: Any,
        x: float,
        y: float,
        s: str,
        prop: Any,
        angle: float,
        ismath: Any = False,
        mtext: Any = None,
    ) -> None:
        if ismath:
            super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
        else:
            self.text_images.draw(self, gc, x, y, s, prop, angle, mtext)


class TextCanvas(FigureCanvasAgg):
    """An Agg canvas whose renderer keeps its strings' glyph images between draws."""

    def __init__(self, figure: Figure) -> None:
        self.renderer_key: tuple[int, int, float] | None = None
        """The size and dpi the renderer was made for (None: none made yet)."""
        super().__init__(figure)
        self.text_images = TextImages()

    def get_renderer(self) -> RendererAgg:
        """A :class:`_TextRenderer`, made anew as Agg makes its own: for a new size or dpi."""
        w, h = self.get_width_height(physical=True)
        key = (w, h, self.figure.dpi)
        if self.renderer_key != key:
            self.renderer = _TextRenderer(w, h, self.figure.dpi)
            self.renderer.text_images = self.text_images
            self.renderer_key = key
        return self.renderer

    def draw(self) -> None:
        """Draw the figure, the font settings read once for all its strings."""
        self.text_images.params = _font_params()
        try:
            super().draw()
        finally:
            self.text_images.params = None


def _measure_once(legend: Legend | None) -> list[tuple[OffsetBox, str]]:
    """Have each box of ``legend`` measure itself once (per renderer) until the names
    returned are deleted from the boxes: a legend's packers measure all the boxes inside
    them again at each level, each entry's text five times a draw, and the sizes stay while
    its texts do (a layout moves the legend, never resizes its boxes)."""
    measured = []
    boxes = [] if legend is None else [legend._legend_box]  # type: ignore[attr-defined]  # matplotlib private: the legend's laid-out box
    while boxes:
        box = boxes.pop()
        name = "_get_bbox_and_child_offsets" if isinstance(box, PackerBase) else "get_bbox"
        setattr(box, name, functools.cache(getattr(box, name)))
        measured.append((box, name))
        boxes += [child for child in box.get_children() if isinstance(child, OffsetBox)]
    return measured


def _texts(figure: Figure) -> Iterator[Text]:
    """The texts of ``figure``'s Axes: titles, axis and tick labels, offsets, legend, others."""
    for ax in figure.axes:
        yield from (*titles(ax), *ax.texts)
        for axis in (ax.xaxis, ax.yaxis):
            yield from (axis.label, axis.offsetText)
            for tick in (*axis.majorTicks, *axis.minorTicks):
                yield from (tick.label1, tick.label2)
        legend = ax.get_legend()
        if legend is not None:
            yield from (legend.get_title(), *legend.texts)


def _lay_out_once(figure: Figure) -> list[tuple[Text, str]]:
    """Have each text of ``figure`` lay its string out once (per renderer and string) until
    the names returned are deleted from the texts: matplotlib lays a string out each time it
    draws or measures it (two to four times a draw), and the layout, made relative to the
    text's position, stays while the string does (a draw changes tick labels' strings and
    positions only)."""
    laid_out = []
    for text in _texts(figure):
        if text.get_wrap() or text.get_transform_rotates_text() or "_get_layout" in vars(text):
            continue
        text._get_layout = _once(text)  # type: ignore[attr-defined]  # matplotlib private: Text's string layout
        laid_out.append((text, "_get_layout"))
    return laid_out


def _once(text: Text) -> Callable[[Any], Any]:
    """``text._get_layout``, kept by renderer and string."""
    lay_out = text._get_layout  # type: ignore[attr-defined]  # matplotlib private: Text's string layout
    kept: dict[tuple[int, str], Any] = {}

    def layout(renderer: Any) -> Any:
        key = (id(renderer), text.get_text())
        if key not in kept:
            kept[key] = lay_out(renderer)
        return kept[key]

    return layout


def _flat_top(ax: Axes) -> bool:
    """Whether nothing of ``ax`` but its frame can reach above it: no x tick labels or
    x label on top, no y offset text, no colorbar outline."""
    formatter = ax.yaxis.get_major_formatter()
    return (
        ax.xaxis.get_ticks_position() not in ("top", "unknown")
        and ax.xaxis.get_label_position() != "top"
        and "outline" not in ax.spines
        and (
            not ax.yaxis.offsetText.get_visible()
            or (isinstance(formatter, FuncFormatter) and not formatter.get_offset())
        )
    )


if TYPE_CHECKING:
    _AxisBase = Axis  # what a _OnceAxis is mixed into
else:
    _AxisBase = object


class _OnceAxis(_AxisBase):
    """An axis of :class:`_DrawnOnce` Axes that finds its ticks, and measures their labels,
    once for what they depend on while its figure's ``tick_memo`` is a dict: matplotlib
    does both three or four times a draw, and again to measure the axis before it."""

    axes: _DrawnOnce

    def _memo(self) -> dict[tuple[Any, ...], Any] | None:
        return getattr(self.axes.get_figure(root=True), "tick_memo", None)

    def _state(self) -> tuple[Any, ...]:
        """What the ticks depend on: the view, the Axes' place, the locators and formatters
        (new ones each time a plot sets them)."""
        return (
            id(self),
            *self.get_view_interval(),
            *self.axes.bbox.bounds,
            id(self.major.locator),
            id(self.major.formatter),
            id(self.minor.locator),
            id(self.minor.formatter),
        )

    def _update_ticks(self) -> list[Any]:
        memo = self._memo()
        if memo is None:
            return super()._update_ticks()  # type: ignore[misc]  # matplotlib private: the axis's tick finding
        key = ("ticks", *self._state())
        if key not in memo:
            memo[key] = super()._update_ticks()  # type: ignore[misc]  # matplotlib private: the axis's tick finding
        return list(memo[key])

    def _get_ticklabel_bboxes(self, ticks: list[Any], renderer: Any) -> tuple[list, list]:
        memo = self._memo()
        if memo is None or not ticks:
            return super()._get_ticklabel_bboxes(ticks, renderer)  # type: ignore[misc]  # matplotlib private: tick label measuring
        fonts = (ticks[0].label1.get_fontproperties(), ticks[0].label2.get_fontproperties())
        key = ("boxes", *self._state(), id(renderer), *map(hash, fonts), *map(id, ticks))
        if key not in memo:
            memo[key] = super()._get_ticklabel_bboxes(ticks, renderer)  # type: ignore[misc]  # matplotlib private: tick label measuring
        first, second = memo[key]
        return list(first), list(second)

    def get_tightbbox(self, renderer: Any = None, *, for_layout_only: bool = False) -> Any:
        """As matplotlib measures it, the ticks found and their labels measured once for it
        outside a draw too (matplotlib does both twice)."""
        figure = self.axes.get_figure(root=True)
        assert figure is not None  # an axis is measured in its Axes' figure
        with _tick_memo(figure):
            return super().get_tightbbox(renderer, for_layout_only=for_layout_only)


class _OnceXAxis(_OnceAxis, XAxis):
    pass


class _OnceYAxis(_OnceAxis, YAxis):
    pass


@contextlib.contextmanager
def _tick_memo(figure: Figure) -> Iterator[None]:
    """While in it, the :class:`_DrawnOnce` Axes of ``figure`` find their ticks and measure
    their labels once for what they depend on (nested: the outermost one's)."""
    if getattr(figure, "tick_memo", None) is not None:
        yield
        return
    figure.tick_memo = {}  # type: ignore[attr-defined]  # sessionkit's own attribute on the figure
    try:
        yield
    finally:
        figure.tick_memo = None  # type: ignore[attr-defined]  # sessionkit's own attribute on the figure


class _DrawnOnce(Axes):
    """Axes that find each axis's ticks once per draw: nothing a draw does moves them, and
    matplotlib asks for them to draw the ticks, to place the axis label and the title."""

    def _init_axis(self) -> None:
        self.xaxis = _OnceXAxis(self, clear=False)
        self.spines.bottom.register_axis(self.xaxis)
        self.spines.top.register_axis(self.xaxis)
        self.yaxis = _OnceYAxis(self, clear=False)
        self.spines.left.register_axis(self.yaxis)
        self.spines.right.register_axis(self.yaxis)

    def _update_title_position(self, renderer: Any) -> None:
        """The titles at the top of the Axes, where matplotlib leaves them when nothing rises
        above it: no x tick labels or x label on top, no y offset text (a ``FuncFormatter``
        such as :func:`~sessionkit.plot.style.compact` writes none); matplotlib measures every
        y axis to learn that.  Anything else is placed by matplotlib."""
        figure = self.get_figure(root=False)
        assert figure is not None  # titles are placed while the Axes' figure draws
        others = {*self._twinned_axes.get_siblings(self)}  # type: ignore[attr-defined]  # matplotlib private: the Axes' twins
        others |= {*figure._align_label_groups["title"].get_siblings(self)}  # type: ignore[union-attr]  # matplotlib private: Axes whose titles align
        texts = titles(self)
        if self._autotitlepos is False or self.child_axes or not all(map(_flat_top, others)):  # type: ignore[attr-defined]  # matplotlib private: a title placed by the user
            super()._update_title_position(renderer)  # type: ignore[misc]  # matplotlib private: its own title placement
            return
        top = max(ax.get_window_extent().ymax for ax in others)
        for title in texts:
            title.set_y(1.0)
        low = min(title.get_window_extent(renderer).ymin for title in texts)
        if top < 0 or low < top:
            super()._update_title_position(renderer)  # type: ignore[misc]  # matplotlib private: its own title placement

    def draw(self, renderer: Any) -> None:
        figure = self.get_figure(root=True)
        assert figure is not None  # Axes draw in their figure
        with _tick_memo(figure):
            super().draw(renderer)

    def tick_params(self, axis: Literal["both", "x", "y"] = "both", **kwargs: Any) -> None:
        """As matplotlib's, but the tick labels' font family asked for again (by
        :func:`~sessionkit.plot.style.plotting`, after each drawing) restyles no tick."""
        family = kwargs.get("labelfontfamily")
        if (axis, [*kwargs]) == ("both", ["labelfontfamily"]) and all(
            each._major_tick_kw.get("labelfontfamily") == family  # type: ignore[union-attr]  # matplotlib private: the settings of ticks to come
            for each in (self.xaxis, self.yaxis)
        ):
            return
        super().tick_params(axis, **kwargs)

    def legend(self, *args: Any, **kwargs: Any) -> Legend:
        """As matplotlib's; given handles and labels whose entries look as those of the legend
        there do (a redrawn plot's), that legend, relabelled and anchored anew (a new Legend
        was a twentieth of a move)."""
        if len(args) != 2:
            return super().legend(*args, **kwargs)
        handles, labels = list(args[0]), list(args[1])
        options = {k: v for k, v in kwargs.items() if k != "bbox_transform"}  # new each time
        looks = (options, [_look(handle) for handle in handles], _legend_settings())
        legend = self.get_legend()
        if legend is not None and getattr(legend, "sessionkit_looks", None) == looks:
            for text, label in zip(legend.texts, labels, strict=True):
                text.set_text(label)
            legend.set_bbox_to_anchor(kwargs.get("bbox_to_anchor"), kwargs.get("bbox_transform"))
            return legend
        legend = super().legend(handles, labels, **kwargs)
        legend.sessionkit_looks = looks  # type: ignore[attr-defined]  # sessionkit's own attribute on the legend
        return legend


_PATCH_LOOK = (
    "get_facecolor",
    "get_edgecolor",
    "get_linewidth",
    "get_linestyle",
    "get_hatch",
    "get_hatch_linewidth",
    "get_fill",
    "get_alpha",
    "get_capstyle",
    "get_joinstyle",
    "get_antialiased",
    "get_sketch_params",
    "get_path_effects",
    "get_visible",
)
_LINE_LOOK = (
    "get_color",
    "get_gapcolor",
    "get_linewidth",
    "get_linestyle",
    "get_drawstyle",
    "get_marker",
    "get_markersize",
    "get_markerfacecolor",
    "get_markerfacecoloralt",
    "get_markeredgecolor",
    "get_markeredgewidth",
    "get_fillstyle",
    "get_markevery",
    "get_alpha",
    "get_dash_capstyle",
    "get_dash_joinstyle",
    "get_solid_capstyle",
    "get_solid_joinstyle",
    "get_antialiased",
    "get_sketch_params",
    "get_path_effects",
    "get_visible",
)
"""What a legend copies from a patch or a line to draw its entry (``update_from``)."""


def _look(handle: Artist) -> tuple[Any, ...]:
    """How ``handle``'s legend entry looks: its class and the properties the legend copies
    (any other artist: itself, so its entry is never taken for another's)."""
    getters: tuple[str, ...]
    if isinstance(handle, Line2D):
        getters = _LINE_LOOK
    elif isinstance(handle, Patch):
        getters = _PATCH_LOOK
    else:
        return (handle,)
    dashes = handle._unscaled_dash_pattern  # type: ignore[union-attr]  # matplotlib private: the dashes a legend copies (no getter)
    return (type(handle), str(dashes), *(str(getattr(handle, name)()) for name in getters))


def _legend_settings() -> list[Any]:
    """The rcParams a new legend reads: its own, its texts' and its handles' defaults."""
    return [value for name, value in mpl.rcParams.items() if name.startswith(_LEGEND_RC)]


_LEGEND_RC = ("legend.", "font.", "text.", "patch.", "lines.", "hatch.", "markers.")


class _KeptAxes(_DrawnOnce):
    """Axes whose ``twinx`` makes its twin (:class:`_DrawnOnce` too) once and returns it
    again afterwards."""

    kept_twin: Axes | None = None

    def twinx(self, axes_class: Any = None, **kwargs: Any) -> Axes:
        if self.kept_twin is None:
            self.kept_twin = super().twinx(axes_class or _DrawnOnce, **kwargs)  # type: ignore[arg-type]  # matplotlib's stub types axes_class as an Axes; it is an Axes class
        return self.kept_twin


def _strip(ax: Axes) -> None:
    """Take off what ``token_timeline`` added: its patches, lines and texts."""
    for artist in [*ax.patches, *ax.lines, *ax.texts, *ax.collections]:
        artist.remove()


class TimelineCanvas:
    """A figure that ``token_timeline`` draws on again and again: on the same Axes where
    :func:`fast_canvas_supported` (unless ``TUNING.fast_timeline`` is False), else on fresh
    Axes on a plain Agg canvas, with matplotlib's public API only."""

    def __init__(self, figure: Figure, *, keep_text: bool = True) -> None:
        self.figure = figure
        self.ax: _KeptAxes | None = None
        """The kept Axes (None: drawn on fresh Axes each time)."""
        if not (TUNING.fast_timeline and fast_canvas_supported()):
            FigureCanvasAgg(figure)
            return
        if keep_text:
            TextCanvas(figure)
        figure.clear()
        self.ax = cast(_KeptAxes, figure.add_subplot(axes_class=_KeptAxes))

    @property
    def fast(self) -> bool:
        """Whether it draws on kept Axes, through matplotlib's internals."""
        return self.ax is not None

    def plot(self, states: MessageStates, xlim: tuple[float, float] | None = None) -> Axes:
        """``token_timeline(states, xlim=xlim)`` on the kept Axes, nothing of the last
        drawing left (or on fresh Axes); the figure is drawn by the caller."""
        from sessionkit import plot

        if self.ax is None:
            return plot.token_timeline(states, ax=plot.timeline_axes(self.figure), xlim=xlim)
        for ax in (self.ax, self.ax.kept_twin):
            if ax is not None:
                _strip(ax)
        return plot.token_timeline(states, ax=self.ax, xlim=xlim)

    def png(self, states: MessageStates, xlim: tuple[float, float] | None = None) -> bytes:
        """The timeline of ``states`` as PNG bytes (:func:`rgba_png` of the figure
        :func:`~sessionkit.plot.style.drawn`)."""
        if self.ax is None:
            self.plot(states, xlim)
            return rgba_png(np.asarray(drawn(self.figure).buffer_rgba()))
        with _tick_memo(self.figure):  # the twin's ticks, measured to place the legend, drawn
            legend = self.plot(states, xlim).get_legend()
            # For the draw, and the check that the drawing fits.
            measured = _measure_once(legend) + _lay_out_once(self.figure)
            try:
                canvas = drawn(self.figure)
            finally:
                for artist, name in measured:
                    delattr(artist, name)
        return rgba_png(np.asarray(canvas.buffer_rgba()))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def rgba_png(rgba: np.ndarray, level: int = 1) -> bytes:
    """An 8-bit RGBA image (rows of pixels, top row first) as PNG bytes: rows unfiltered,
    deflated at ``level`` (Pillow tries five filters on every row, four fifths of its time;
    a plot, mostly flat colour, deflates about as small without them)."""
    height, width, _ = rgba.shape
    rows = np.zeros((height, 1 + 4 * width), np.uint8)  # each row: filter type 0, pixels
    rows[:, 1:] = rgba.reshape(height, -1)
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return b"".join(
        (
            b"\x89PNG\r\n\x1a\n",
            _chunk(b"IHDR", header),
            _chunk(b"IDAT", zlib.compress(rows.tobytes(), level)),
            _chunk(b"IEND", b""),
        )
    )
