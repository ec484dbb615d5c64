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
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import fontManager, get_font

from sessionkit.simulate.states import MessageStates

__all__ = ["TextCanvas", "TextImages", "TimelineCanvas"]

_FONT_LISTS = ("font.sans-serif", "font.serif", "font.monospace", "font.cursive", "font.fantasy")
_GLYPH_PARAMS = ("text.hinting", "text.hinting_factor", "text.kerning_factor")
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

    def draw(
        self, renderer: RendererAgg, gc: Any, x: float, y: float, s: str, prop: Any, mtext: Any
    ) -> None:
        """Draw unrotated plain text ``s`` at ``(x, y)`` as ``renderer.draw_text`` would."""
        fx, fy = math.floor(x), math.floor(y)
        key = (
            s,
            hash(prop),
            x - fx,
            y - fy,
            renderer.dpi,
            renderer.height,
            gc.get_antialiased(),
            getattr(mtext, "get_fontfeatures", lambda: None)(),
            getattr(mtext, "get_language", lambda: None)(),
            *_font_params(),
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
            RendererAgg.draw_text(renderer, gc, x, y, s, prop, 0, False, mtext)
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
    for table_name, gap, ascent, descent in (
        ("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"),
        ("hhea", "lineGap", "ascent", "descent"),
    ):
        table = font.get_sfnt_table(table_name)
        if table is None:
            continue
        fontsize = prop.get_size_in_points()
        scale = 1 / font.get_sfnt_table("head")["unitsPerEm"] * fontsize * dpi / 72
        return table[ascent] * scale, -table[descent] * scale, table[gap] * scale
    return None, None, None


class _TextRenderer(RendererAgg):
    """Agg, its unrotated plain strings drawn through :class:`TextImages`, its fonts' height
    metrics kept there too."""

    text_images: TextImages

    def _get_font_height_metrics(self, prop: Any) -> tuple[float | None, ...]:
        """What ``Text`` asks a renderer for before it reads the font's tables itself."""
        key = (hash(prop), self.dpi, *_font_params())
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
        if ismath or angle:
            super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
        else:
            self.text_images.draw(self, gc, x, y, s, prop, mtext)


class TextCanvas(FigureCanvasAgg):
    """An Agg canvas whose renderer keeps its strings' glyph images between draws."""

    def __init__(self, figure: Figure) -> None:
        super().__init__(figure)
        self.text_images = TextImages()

    def get_renderer(self) -> RendererAgg:
        w, h = self.get_width_height(physical=True)
        key = (w, h, self.figure.dpi)
        if self._lastKey != key:
            self.renderer = _TextRenderer(w, h, self.figure.dpi)
            self.renderer.text_images = self.text_images
            self._lastKey = key
        return self.renderer


class _KeptAxes(Axes):
    """Axes whose ``twinx`` makes its twin once and returns it again afterwards."""

    kept_twin: Axes | None = None

    def twinx(self, axes_class: Any = None, **kwargs: Any) -> Axes:
        if self.kept_twin is None:
            self.kept_twin = super().twinx(axes_class, **kwargs)
        return self.kept_twin


def _strip(ax: Axes) -> None:
    """Take off what ``token_timeline`` added: its patches, lines and texts."""
    for artist in [*ax.patches, *ax.lines, *ax.texts, *ax.collections]:
        artist.remove()


class TimelineCanvas:
    """A figure that ``token_timeline`` draws on again and again, on the same Axes."""

    def __init__(self, figure: Figure, *, keep_text: bool = True) -> None:
        self.figure = figure
        if keep_text:
            TextCanvas(figure)
        figure.clear()
        self.ax: _KeptAxes = figure.add_subplot(axes_class=_KeptAxes)

    def plot(self, states: MessageStates, xlim: tuple[float, float] | None = None) -> Axes:
        """``token_timeline(states, xlim=xlim)`` on the kept Axes, nothing of the last
        drawing left; the figure is drawn by the caller."""
        from sessionkit import plot

        for ax in (self.ax, self.ax.kept_twin):
            if ax is not None:
                _strip(ax)
        return plot.token_timeline(states, ax=self.ax, xlim=xlim)

    def png(self, states: MessageStates, xlim: tuple[float, float] | None = None) -> bytes:
        """The timeline of ``states`` as PNG bytes (:func:`sessionkit.plot.style.png`)."""
        from sessionkit.plot.style import png

        self.plot(states, xlim)
        return png(self.figure, compress_level=1)
