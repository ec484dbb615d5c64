"""The explorer's timeline canvas draws the pixels matplotlib draws: kept Axes and kept glyph
images give the same PNG bytes as token_timeline on a fresh figure and a plain Agg canvas."""

from __future__ import annotations

import dataclasses
import io

import matplotlib as mpl
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

import sessionkit
from sessionkit import plot
from sessionkit.plot.style import KeptLayout, font_family, png
from sessionkit.simulate.states import message_states
from sessionkit.views.timeline_canvas import TextCanvas, TextImages, TimelineCanvas, rgba_png

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
