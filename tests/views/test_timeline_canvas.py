"""The explorer's timeline canvas draws the pixels matplotlib draws: kept Axes and kept glyph
images give the same PNG bytes as token_timeline on a fresh figure and a plain Agg canvas, the
way it draws where the matplotlib internals it uses are missing."""

from __future__ import annotations

import dataclasses
import io
import tomllib
from pathlib import Path
from types import SimpleNamespace

import matplotlib as mpl
import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

import sessionkit
from sessionkit import plot
from sessionkit.plot.style import KeptLayout, font_family, png
from sessionkit.simulate.states import message_states
from sessionkit.tuning import tuned
from sessionkit.views.explorer import explore
from sessionkit.views.timeline_canvas import (
    MATPLOTLIB_RANGE,
    TextCanvas,
    TextImages,
    TimelineCanvas,
    fast_canvas_problems,
    fast_canvas_supported,
    internals_probe,
    rgba_png,
)

KEY = "cli:direct"


@pytest.fixture(scope="module")
def corpus(data_dir) -> sessionkit.Corpus:
    return sessionkit.load(data_dir)


def _figure() -> Figure:
    figure = plot.timeline_axes().figure
    figure.set_layout_engine(KeptLayout())
    return figure


def _fresh(figure: Figure, states, xlim) -> bytes:
    """The timeline as the explorer drew it before: a cleared figure, plain Agg, its PNG
    decoded (Pillow's encoding of it) to RGBA bytes."""
    plot.token_timeline(states, ax=plot.timeline_axes(figure), xlim=xlim)
    return _pixels(png(figure, compress_level=1))


def _pixels(data: bytes) -> bytes:
    """A PNG's pixels as RGBA bytes (its size checked against the timeline's)."""
    image = Image.open(io.BytesIO(data))
    assert (image.mode, image.size) == ("RGBA", (1000, 400))
    return image.tobytes()


def test_kept_axes_and_glyph_images_draw_the_same_png_as_a_fresh_figure(corpus) -> None:
    session = corpus[KEY]
    other = dataclasses.replace(session, policy="nanobot-0.3.5")
    turns = session.n_user_turns
    cases = [
        (session, turns, {"max_tokens": 0}, None),
        (session, turns, {"max_tokens": 3000}, (850.5, 1003.5)),
        (session, turns - 1, {"max_tokens": 3100}, (851.5, 1001.5)),
        (session, turns - 1, {"max_messages": 60, "max_tokens": 3100}, (900.5, 1001.5)),
        (session, turns - 1, {"max_messages": 60, "max_tokens": 3100}, None),
        (other, 40, {"max_tokens": 5000}, (100.5, 240.5)),
        (corpus["webui:f00d42"], 3, {}, None),
        (session, turns, {"max_tokens": 3000}, (850.5, 1003.5)),
        (session, turns, {"max_tokens": 3000}, (850.5, 1003.5)),
    ]
    reference = _figure()
    FigureCanvasAgg(reference)
    canvas = TimelineCanvas(_figure())
    kept = canvas.figure.canvas.text_images
    misses = []
    for subject, turn, options, xlim in cases:
        states = message_states(subject, turn=turn, **options)
        assert _pixels(canvas.png(states, xlim)) == _fresh(reference, states, xlim)
        misses.append(kept.misses)
    assert misses[-1] == misses[-2] > 0, "a drawing made again comes from the kept images"
    assert len(kept.heights) >= 2, "each font size's height metrics looked up once"
    assert len(canvas.figure.axes) == 2, "the Axes and its twin are kept, never added again"


def test_text_moved_by_whole_and_fractional_pixels_draws_as_agg_draws_it() -> None:
    """Kept glyph images are reused only at the same sub-pixel offset, shifted whole pixels."""
    texts = ["max_tokens 3,000 (right axis)", "1.25k", "会話の履歴", "tool", "$x^2$"]

    family = font_family()

    def drawn(canvas_class, shift: float) -> list[bytes]:
        figure = Figure(figsize=(4, 2), dpi=100)
        canvas = canvas_class(figure)
        for k, text in enumerate(texts):
            rotation = 90 if k == 3 else 0
            figure.text(0.1 + 0.0137 * k, 0.19 * k + 0.05, text, rotation=rotation, family=family)
        images = []
        for step in range(3):
            for k, artist in enumerate(figure.texts):
                artist.set_x(0.1 + 0.0137 * k + step * shift / 400)
            canvas.draw()
            images.append(bytes(canvas.buffer_rgba()))
        return images

    for shift in (3.0, 0.37):
        assert drawn(TextCanvas, shift) == drawn(FigureCanvasAgg, shift)


def test_kept_images_are_bounded() -> None:
    figure = Figure(figsize=(4, 2), dpi=100)
    canvas = TextCanvas(figure)
    kept: TextImages = canvas.text_images
    kept.LIMIT = 5
    label = figure.text(0.1, 0.5, "")
    for k in range(12):
        label.set_text(f"label {k}")
        canvas.draw()
    assert len(kept.kept) == 5
    assert [key[0] for key in kept.kept] == [f"label {k}" for k in range(7, 12)]


def test_a_changed_font_setting_draws_afresh() -> None:
    """Kept images and heights belong to the font settings they were drawn under."""

    def drawn(canvas_class) -> list[bytes]:
        figure = Figure(figsize=(3, 1), dpi=100)
        canvas = canvas_class(figure)
        figure.text(0.1, 0.4, "tokens sent 1.25k", family="sans-serif")
        images = []
        for first in ("DejaVu Sans", "Noto Sans CJK JP", "DejaVu Sans"):
            with mpl.rc_context({"font.sans-serif": [first, "DejaVu Sans"]}):
                canvas.draw()
                images.append(bytes(canvas.buffer_rgba()))
        return images

    kept, plain = drawn(TextCanvas), drawn(FigureCanvasAgg)
    assert kept == plain
    assert kept[0] != kept[1] and kept[0] == kept[2]


def test_rgba_png_decodes_to_the_pixels_it_was_given() -> None:
    """Every byte value in every channel (alpha too), odd sizes, and a deflate level kept."""
    rng = np.random.default_rng(7)
    for height, width in ((1, 1), (3, 257), (40, 9)):
        rgba = rng.integers(0, 256, size=(height, width, 4), dtype=np.uint8)
        rgba[0, 0] = (0, 0, 0, 0)
        data = rgba_png(rgba, level=6)
        image = Image.open(io.BytesIO(data))
        assert (image.mode, image.size) == ("RGBA", (width, height))
        assert image.tobytes() == rgba.tobytes()
    flat = np.full((400, 1000, 4), 255, np.uint8)
    assert len(rgba_png(flat)) < len(rgba_png(flat, level=0)) // 100, "level passed to zlib"


def _labels(legend) -> list[str]:
    return [text.get_text() for text in legend.texts]


def test_a_legend_whose_entries_look_the_same_is_kept_with_the_new_labels(corpus) -> None:
    """Moves that change only labels keep the legend; new entries or settings make one."""
    session = corpus[KEY]
    turns = session.n_user_turns
    canvas = TimelineCanvas(_figure())

    def legends(**options):
        states = message_states(session, turn=turns, **options)
        fresh = plot.token_timeline(states, ax=plot.timeline_axes()).get_legend()
        return canvas.plot(states).get_legend(), fresh

    first, _ = legends(max_tokens=3000)
    kept, fresh = legends(max_tokens=3100)
    assert kept is first
    assert "max_tokens=3,100" in _labels(kept)
    assert _labels(kept) == _labels(fresh)
    without_budget, fresh = legends(max_tokens=0)
    assert without_budget is not kept, "the budget line's entry is gone"
    assert _labels(without_budget) == _labels(fresh)
    with mpl.rc_context({"legend.handlelength": 3.0}):
        wider, _ = legends(max_tokens=0)
    assert wider is not without_budget, "a legend setting changed"
    assert wider.handlelength == 3.0


def test_the_pinned_matplotlib_has_every_internal_in_the_range_pyproject_requires() -> None:
    assert fast_canvas_supported()
    assert TimelineCanvas(_figure()).fast
    (low, high) = MATPLOTLIB_RANGE
    assert (mpl.__version_info__.major, mpl.__version_info__.minor) == low
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    dependencies = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    required = [d for d in dependencies if d.startswith("matplotlib")]
    assert required == [f"matplotlib>={low[0]}.{low[1]},<{high[0]}.{high[1]}"]


def test_a_missing_or_reshaped_internal_or_another_release_fails_the_check() -> None:
    """Checked on the objects given: fakes stand for a matplotlib that changed."""
    probe = internals_probe()
    assert fast_canvas_problems((3, 11), probe) == []
    assert fast_canvas_problems((3, 12), probe) == ["matplotlib 3.12 is not >=3.11,<3.12"]
    assert fast_canvas_problems((3, 10), probe) == ["matplotlib 3.10 is not >=3.11,<3.12"]
    assert fast_canvas_problems((3, 11), probe | {"legend": object()}) == [
        "the legend has no _legend_box (the legend's boxes, measured once a draw)"
    ]

    def lay_out(renderer, dpi):  # a required parameter more, and no font height hook
        return renderer, dpi

    assert fast_canvas_problems(
        (3, 11), probe | {"text": SimpleNamespace(_get_layout=lay_out)}
    ) == [
        "the text's _get_layout has another shape (a string's layout, kept for a draw)",
        "the text's _get_layout has another shape (asks renderers for font heights)",
    ]

    class Fonts:
        def _find_fonts_by_props(self, prop, fontext="ttf"):  # a further optional parameter
            return [prop, fontext]

    assert fast_canvas_problems((3, 11), probe | {"font manager": Fonts()}) == []
    assert fast_canvas_problems((3, 11), probe | {"axis": SimpleNamespace()}) == [
        "the axis has no _update_ticks (the axis's tick finding, kept)",
        "the axis has no _get_ticklabel_bboxes (tick label measuring, kept)",
        "the axis has no _major_tick_kw (the settings of ticks to come: their font)",
    ]


def test_with_the_fallback_forced_the_explorer_sends_the_same_png(corpus, tmp_path: Path) -> None:
    """TUNING.fast_timeline=False: fresh Axes on a plain Agg canvas, public API only; every
    move sends the bytes the kept Axes send (one encoder: the same pixels, the same PNG)."""
    fast = explore(corpus, key=KEY, sessions_dir=tmp_path)
    with tuned(fast_timeline=False):
        plain = explore(corpus, key=KEY, sessions_dir=tmp_path)
    turns = corpus[KEY].n_user_turns
    moves = [
        {},
        {"max_tokens": 3000},
        {"turn": turns - 1, "max_messages": 60},
        {"zoom": False},
        {"picker": "webui:f00d42"},
        {"max_tokens": 0, "zoom": True},
    ]
    for move in moves:
        for app in (fast, plain):
            for control, value in move.items():
                getattr(app, control).value = value
        sent = bytes(plain.timeline.value)
        assert sent == bytes(fast.timeline.value), move
        assert len(_pixels(sent)) == 1000 * 400 * 4
    assert (fast._canvas.fast, plain._canvas.fast) == (True, False)
    assert type(plain._figure.canvas) is FigureCanvasAgg
    assert [type(ax) for ax in plain._figure.axes] == [Axes, Axes]
