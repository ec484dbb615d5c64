"""Plots: the data behind every artist equals the API's numbers; same data, same picture."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable, Iterator

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle, StepPatch

import sessionkit
from sessionkit import plot
from sessionkit.nanobot.settings import HistorySettings
from sessionkit.plot import style
from sessionkit.plot.style import KeptLayout, png
from sessionkit.schema import STATUSES
from sessionkit.simulate.filecap import file_cap
from sessionkit.simulate.states import message_states
from sessionkit.simulate.windowing import windows
from sessionkit.testing import figures

KEY = "telegram:12345"
SETTINGS = {"turn": 600, "max_messages": 120, "max_tokens": 3000, "file_cap": 2000}


@pytest.fixture(scope="module")
def corpus(data_dir) -> sessionkit.Corpus:
    return sessionkit.load(data_dir)


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    """New figures are made through pyplot, which keeps them open (as seaborn's): close them."""
    yield
    plt.close("all")


def _gid(ax: Axes, gid: str) -> list:
    return [a for a in ax.get_children() if a.get_gid() == gid]


def _span(patch: Rectangle) -> tuple[float, float]:
    x = patch.get_x()
    return x, x + patch.get_width()


def _runs(status: np.ndarray, name: str) -> list[tuple[float, float]]:
    idx = np.flatnonzero(status == name)
    if not len(idx):
        return []
    breaks = np.flatnonzero(np.diff(idx) > 1)
    starts = np.concatenate(([idx[0]], idx[breaks + 1]))
    stops = np.concatenate((idx[breaks], [idx[-1]])) + 1
    return [(a - 0.5, b - 0.5) for a, b in zip(starts, stops, strict=True)]


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def test_timeline_bars_are_the_tokens_by_role(corpus) -> None:
    states = message_states(corpus, KEY, **SETTINGS).frame
    ax = plot.token_timeline(corpus, KEY, **SETTINGS)
    bars = [p for p in ax.patches if isinstance(p, StepPatch)]
    assert [b.get_gid() for b in bars] == ["role:user", "role:assistant", "role:tool"]
    tokens = states["tokens"].to_numpy(dtype=float)
    for bar in bars:
        role = bar.get_gid().removeprefix("role:")
        data = bar.get_data()
        np.testing.assert_array_equal(data.values, np.where(states["role"] == role, tokens, 0))
        np.testing.assert_array_equal(data.edges, np.arange(len(states) + 1) - 0.5)
    total = sum(b.get_data().values for b in bars)
    np.testing.assert_array_equal(total, tokens)


def test_timeline_spans_are_the_statuses(corpus) -> None:
    session = corpus[KEY]
    options = {"turn": 600, "max_tokens": 3000, "file_cap": 1500}
    result = message_states(session, **options)
    ax = plot.token_timeline(session, **options)
    status = result.frame["status"].to_numpy()
    for name in ("trimmed_tokens", "consolidated", "file_cap", "later"):
        assert [_span(p) for p in _gid(ax, name)] == _runs(status, name)
    assert _runs(status, "file_cap") and _runs(status, "later") and _runs(status, "trimmed_tokens")
    first, stop = result.summary()["window"]
    assert [_span(p) for p in _gid(ax, "window")] == [(first - 0.5, stop - 0.5)]
    assert ax.get_xlim() == (-0.5, len(session.messages) - 0.5)


def test_timeline_consolidated_prefix(corpus) -> None:
    session = corpus[KEY]
    ax = plot.token_timeline(session, file_cap=0)
    offset = session.last_consolidated
    assert offset > 0
    assert [_span(p) for p in _gid(ax, "consolidated")] == [(-0.5, offset - 0.5)]


def test_timeline_budget_lines_and_sent_tokens(corpus) -> None:
    result = message_states(corpus, KEY, **SETTINGS)
    states = result.frame
    ax = plot.token_timeline(result)
    twin = ax.figure.axes[-1]
    (budget,) = _gid(twin, "max_tokens")
    assert budget.get_ydata()[0] == SETTINGS["max_tokens"]
    status = states["status"].to_numpy()
    (count,) = _gid(twin, "max_messages")
    assert count.get_xdata()[0] == np.flatnonzero(status == "trimmed_count")[-1] + 0.5
    (line,) = _gid(twin, "sent_from_here")
    live = ~np.isin(status, ["consolidated", "file_cap", "later"])
    sent = states["sent_tokens"].fillna(0).to_numpy(dtype=float) * live
    expected = np.where(live, np.cumsum(sent[::-1])[::-1], np.nan)
    np.testing.assert_array_equal(line.get_ydata(), expected)
    first = result.summary()["window"][0]
    assert line.get_ydata()[first] == result.tokens_kept


def test_timeline_from_states_equals_from_session(corpus) -> None:
    a = plot.token_timeline(corpus, KEY, **SETTINGS)
    b = plot.token_timeline(message_states(corpus[KEY], **SETTINGS))
    assert _png(a.figure) == _png(b.figure)
    turn, keywords = SETTINGS["turn"], {k: v for k, v in SETTINGS.items() if k != "turn"}
    c = plot.token_timeline(corpus[KEY], turn=turn, settings=HistorySettings(**keywords))
    assert _png(a.figure) == _png(c.figure)


def test_timeline_on_given_axes_and_xlim(corpus) -> None:
    ax = plot.timeline_axes()
    assert plot.token_timeline(corpus, KEY, xlim=(2000, 2100), ax=ax) is ax
    assert ax.get_xlim() == (2000, 2100)
    assert plot.timeline_axes(ax.figure).figure is ax.figure
    assert len(ax.figure.axes) == 1


def test_session_lengths_histograms(corpus) -> None:
    fig = plot.session_lengths(corpus, file_cap=300, budgets=(10_000, 50_000))
    messages_ax, tokens_ax = fig.axes
    for ax, column in ((messages_ax, "n_messages"), (tokens_ax, "tokens")):
        values = corpus.sessions[column].to_numpy(dtype=float)
        bars = [p for p in ax.patches if isinstance(p, Rectangle)]
        edges = np.array([b.get_x() for b in bars] + [bars[-1].get_x() + bars[-1].get_width()])
        heights, _ = np.histogram(values, bins=edges)
        assert [b.get_height() for b in bars] == heights.tolist()
        assert heights.sum() == len(corpus)
    (cap,) = _gid(messages_ax, "file_cap")
    assert cap.get_xdata()[0] == 300
    over = int((corpus.sessions["n_messages"] > 300).sum())
    assert cap.get_label() == f"file cap 300: {over} over"
    assert [line.get_xdata()[0] for line in tokens_ax.lines] == [10_000, 50_000]
    from_frame = plot.session_lengths(corpus.sessions, file_cap=300, budgets=(10_000, 50_000))
    assert _png(from_frame) == _png(fig)


GRID = {"max_messages": (10, 40, 120), "max_tokens": (0, 1_000, 8_000)}


@pytest.fixture(scope="module")
def sweep(corpus) -> pd.DataFrame:
    return windows(corpus, grid={k: list(v) for k, v in GRID.items()}, include_timestamps=True)


@pytest.mark.parametrize("value", ["messages_kept", "tokens_kept", "truncated"])
def test_window_heatmap_cells(corpus, sweep, value: str) -> None:
    ax = plot.window_heatmap(corpus, value=value, **GRID)
    frame = sweep.assign(truncated=sweep["cut"].isin(plot.TRUNCATING_CUTS))
    expected = frame.groupby(["max_tokens", "max_messages"])[value].mean().unstack()
    expected = expected.loc[[1_000, 8_000, 0]]  # no budget is the largest: last, not first
    np.testing.assert_allclose(ax.images[0].get_array(), expected.to_numpy())
    assert [t.get_text() for t in ax.get_xticklabels()] == ["10", "40", "120"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1,000", "8,000", "none"]
    assert len(ax.texts) == 9


def test_window_heatmap_puts_no_count_limit_last(corpus) -> None:
    ax = plot.window_heatmap(corpus, max_messages=(0, 10), max_tokens=(0,))
    frame = windows(corpus, grid={"max_messages": [0, 10]}, max_tokens=0)
    means = frame.groupby("max_messages")["messages_kept"].mean()
    assert ax.images[0].get_array().tolist() == [[means[10], means[0]]]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["10", "none"]


def test_sweeps_take_their_other_settings_from_the_settings_value(corpus, sweep) -> None:
    stamped = plot.window_heatmap(corpus, **GRID)
    assert np.array_equal(
        stamped.images[0].get_array(), plot.window_heatmap(sweep).images[0].get_array()
    )
    plain = HistorySettings(include_timestamps=False)
    by_value = plot.truncation_share(corpus, settings=plain, **GRID)
    by_keyword = plot.truncation_share(corpus, include_timestamps=False, **GRID)
    frame = windows(corpus, settings=plain, grid={k: list(v) for k, v in GRID.items()})
    expected = plot.truncation_share(frame)
    for ax in (by_value, by_keyword):
        assert [line.get_ydata().tolist() for line in ax.get_lines()] == [
            line.get_ydata().tolist() for line in expected.get_lines()
        ]


def test_window_heatmap_refuses_mixed_frames(corpus) -> None:
    mixed = windows(corpus["webui:abc123"], grid={"include_timestamps": [False, True]})
    with pytest.raises(ValueError, match="include_timestamps"):
        plot.window_heatmap(mixed)
    with pytest.raises(ValueError, match="value must be one of"):
        plot.window_heatmap(mixed, value="kept")


def test_truncation_share_lines(sweep) -> None:
    ax = plot.truncation_share(sweep)
    truncated = sweep["cut"].isin(plot.TRUNCATING_CUTS)
    share = truncated.groupby([sweep["max_messages"], sweep["max_tokens"]]).mean().unstack()
    for count in GRID["max_messages"]:
        (line,) = _gid(ax, f"max_messages={count}")
        np.testing.assert_allclose(line.get_ydata(), share.loc[count, [1_000, 8_000, 0]])
        assert line.get_xdata().tolist() == [0, 1, 2]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1,000", "8,000", "none"]


@pytest.mark.parametrize("replay", ["final", "growth"])
def test_file_cap_curve(corpus, replay: str) -> None:
    limits = [100, 300, 1000, 5000]
    ax = plot.file_cap_curve(corpus, limits=limits, replay=replay)
    frame = file_cap(corpus, grid={"file_cap": limits}, replay=replay)
    (sessions,) = _gid(ax, "sessions")
    (messages,) = _gid(ax.figure.axes[-1], "messages")
    for limit, n, dropped in zip(
        sessions.get_xdata(), sessions.get_ydata(), messages.get_ydata(), strict=True
    ):
        rows = frame[(frame["limit"] == limit) & frame["tripped"]]
        assert n == rows["session_key"].nunique()
        assert dropped == rows["dropped"].sum()
    assert sessions.get_xdata().tolist() == limits
    assert sessions.get_ydata()[-1] == 0
    (nanobot,) = _gid(ax, "nanobot")
    assert nanobot.get_xdata()[0] == 2000


@pytest.mark.parametrize(
    "draw",
    [
        lambda c: plot.token_timeline(c, KEY, **SETTINGS).figure,
        lambda c: plot.session_lengths(c),
        lambda c: plot.window_heatmap(c, **GRID).figure,
        lambda c: plot.truncation_share(c, **GRID).figure,
        lambda c: plot.file_cap_curve(c).figure,
    ],
    ids=["timeline", "lengths", "heatmap", "share", "file_cap"],
)
def test_same_data_same_picture(corpus, draw: Callable[[sessionkit.Corpus], Figure]) -> None:
    first = draw(corpus)
    assert first.get_size_inches().tolist() == draw(corpus).get_size_inches().tolist()
    assert _png(first) == _png(draw(corpus))


def test_timeline_status_colours_and_labels_come_from_the_status_table(corpus) -> None:
    ax = plot.token_timeline(corpus[KEY], turn=600, max_tokens=3000, file_cap=1500)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[3:6] == ["trimmed: tokens", "file cap", "after turn"]
    spans = {gid: _gid(ax, gid)[0] for gid in ("trimmed_tokens", "file_cap", "later", "window")}
    twin = {line.get_gid(): line for line in ax.figure.axes[-1].get_lines()}
    drawn = {gid: to_hex(span.get_facecolor()) for gid, span in spans.items()} | {
        gid: to_hex(twin[gid].get_color()) for gid in ("max_tokens", "max_messages")
    }
    color = {s.name: s.color for s in STATUSES}
    assert drawn == {
        "trimmed_tokens": color["trimmed_tokens"],
        "file_cap": color["file_cap"],
        "later": color["later"],
        "window": color["in_window"],
        "max_tokens": color["trimmed_tokens"],
        "max_messages": color["trimmed_count"],
    }


def _drawn_tick_labels(ax: Axes) -> list:
    """The x tick labels drawn, left to right: ticks inside the view, with text."""
    low, high = ax.get_xlim()
    ticks = zip(ax.get_xticks(), ax.get_xticklabels(), strict=True)
    return [label for tick, label in ticks if low <= tick <= high and label.get_text()]


@pytest.mark.parametrize(
    ("low", "high"), [(50_000, 1_000_000), (10, 100_000_000), (1_000, 5_000), (3, 40)]
)
def test_session_lengths_tick_labels_never_collide(low: int, high: int) -> None:
    values = np.geomspace(low, high, 30).round()
    fig = plot.session_lengths(pd.DataFrame({"n_messages": values, "tokens": values}))
    fig.canvas.draw()
    for ax in fig.axes:
        boxes = [label.get_window_extent() for label in _drawn_tick_labels(ax)]
        assert len(boxes) >= 2
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False))


def test_session_lengths_wide_token_range_labels() -> None:
    tokens = np.geomspace(50_000, 1_000_000, 30).round()
    fig = plot.session_lengths(pd.DataFrame({"n_messages": tokens / 100, "tokens": tokens}))
    fig.canvas.draw()
    labels = [label.get_text() for label in _drawn_tick_labels(fig.axes[1])]
    assert labels == ["10k", "20k", "50k", "100k", "200k", "500k", "1M"]


def _big_session(scale: float) -> sessionkit.Session:
    """40 turns whose messages run to about ``scale`` x 8 tokens (a 5-digit axis at 1,000)."""
    messages = []
    for i in range(40):
        messages.append({"role": "user", "content": "ask " * int(scale * (i % 5 + 1))})
        messages.append({"role": "assistant", "content": "an answer " * int(scale * (i % 7 + 3))})
    return sessionkit.Session("cli:big", messages)


@pytest.mark.parametrize("scale", [1, 1_000, 10_000])
def test_timeline_labels_fit_the_figure(scale: int) -> None:
    ax = plot.token_timeline(_big_session(scale), max_tokens=190_784, file_cap=0)
    fig = ax.figure
    fig.savefig(io.BytesIO(), format="png", bbox_inches=None)
    twin = fig.axes[-1]
    inside = fig.bbox
    for axis in (ax.yaxis, twin.yaxis):
        box = axis.label.get_window_extent()
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1, axis.label.get_text()
        for label in axis.get_ticklabels():
            box = label.get_window_extent()
            assert inside.x0 <= box.x0 and box.x1 <= inside.x1, label.get_text()


def test_timeline_budget_reads_on_its_own_axis() -> None:
    ax = plot.token_timeline(_big_session(1_000), max_tokens=190_784, file_cap=0)
    twin = ax.figure.axes[-1]
    (budget,) = _gid(twin, "max_tokens")
    assert list(budget.get_ydata()) == [190_784, 190_784]
    low, high = twin.get_ylim()
    assert low < 190_784 < high and ax.get_ylim()[1] < 190_784
    (note,) = _gid(twin, "max_tokens_label")
    assert (note.get_text(), note.get_position()[1]) == ("max_tokens 190,784 (right axis)", 190_784)
    assert twin.get_ylabel() == "tokens sent from here to the turn"


def test_plot_namespace_is_its_public_names() -> None:
    assert dir(plot) == sorted(plot.__all__)
    assert not {"np", "pd", "plt", "Figure", "Axes"} & set(dir(plot))


def test_session_lengths_of_sessions(corpus) -> None:
    """A Session or a list of them is plotted as its own corpus; anything else is refused."""
    one, two = corpus["webui:f00d42"], corpus["cli:direct"]
    for source, n in [(one, 1), ([one, two], 2), ((one, two), 2)]:
        fig = plot.session_lengths(source)
        assert [sum(p.get_height() for p in ax.patches) for ax in fig.axes] == [n, n]
    with pytest.raises(TypeError, match="a Session or a list of Sessions, got str"):
        plot.session_lengths("data/")


RELEASES = list(sessionkit.POLICIES)
CONTEXTS = [32_000, 128_000]


@pytest.fixture(scope="module")
def by_release(corpus) -> pd.DataFrame:
    """Every release's windows, as the release plots compute them (commands left out)."""
    frame = windows(corpus, grid={"policy": RELEASES, "context_window": CONTEXTS})
    return frame[~frame["command"]]


def test_release_comparison_lines_are_the_windows(corpus, by_release) -> None:
    ax = plot.release_comparison(corpus, KEY, context_window=32_000)
    rows = by_release[(by_release["session_key"] == KEY) & (by_release["context_window"] == 32_000)]
    for name in RELEASES:
        (line,) = _gid(ax, f"policy:{name}")
        mine = rows[rows["policy"] == name]
        assert line.get_xdata().tolist() == mine["turn"].tolist()
        assert line.get_ydata().tolist() == mine["tokens_kept"].tolist()
    over = rows[(rows["policy"] == "nanobot-0.3.5") & rows["needs_summary"].fillna(False)]
    assert len(over) > 0
    (marks,) = _gid(ax, "needs_summary:nanobot-0.3.5")
    assert marks.get_xdata().tolist() == over["turn"].tolist()
    assert marks.get_ydata().tolist() == over["tokens_kept"].tolist()
    assert not _gid(ax, "needs_summary:nanobot-0.2") and not _gid(ax, "needs_summary:nanobot-0.3.0")
    (budget,) = _gid(ax, "budget")
    assert budget.get_ydata()[0] == 32_000 - 8_192 - 1_024
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [
        "nanobot 0.2.2 (120 messages, budget 22,784)",
        "nanobot 0.3.0 (320 messages, budget 22,784)",
        "nanobot 0.3.5 (no count window, no budget)",
        f"nanobot 0.3.5 would summarise ({len(over):,} turns)",
        "input budget 22,784",
    ]


def test_release_comparison_from_a_frame_equals_from_the_session(corpus, by_release) -> None:
    one = by_release[(by_release["session_key"] == KEY) & (by_release["context_window"] == 32_000)]
    assert _png(plot.release_comparison(one).figure) == _png(
        plot.release_comparison(corpus[KEY], context_window=32_000).figure
    )
    with pytest.raises(ValueError, match="one session at one context_window"):
        plot.release_comparison(by_release)
    with pytest.raises(ValueError, match="context_window"):
        plot.release_comparison(windows(corpus[KEY], grid={"policy": RELEASES}))


def _bars(ax: Axes, gid: str) -> list[float]:
    return [p.get_height() for p in ax.patches if p.get_gid() == gid]


def test_release_summary_bars_are_the_windows(corpus, by_release) -> None:
    fig = plot.release_summary(corpus, context_window=CONTEXTS)
    tokens_ax, cut_ax, summary_ax = fig.axes
    for name in RELEASES:
        rows = by_release[by_release["policy"] == name].groupby("context_window")
        assert _bars(tokens_ax, name) == rows["tokens_kept"].median().tolist()
        (p90,) = _gid(tokens_ax, f"p90:{name}")
        assert p90.get_ydata().tolist() == rows["tokens_kept"].quantile(0.9).tolist()
        cut = rows["cut"].agg(lambda c: c.isin(plot.TRUNCATING_CUTS).mean())
        assert _bars(cut_ax, name) == cut.tolist()
    summaries = by_release[by_release["policy"] == "nanobot-0.3.5"].groupby("context_window")
    assert _bars(summary_ax, "nanobot-0.3.5") == summaries["needs_summary"].sum().tolist()
    assert _bars(summary_ax, "nanobot-0.2") == _bars(summary_ax, "nanobot-0.3.0") == []
    assert [t.get_text() for t in summary_ax.texts[-1:]] == [
        "nanobot 0.2.2, nanobot 0.3.0: no governor\n(trimmed to the budget instead)"
    ]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["nanobot 0.2.2", "nanobot 0.3.0", "nanobot 0.3.5", "p90 per turn"]
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["32k", "128k"]
    assert _png(
        plot.release_summary(windows(corpus, grid={"policy": RELEASES, "context_window": CONTEXTS}))
    ) == _png(fig)


def _no_overlap(labels: list) -> bool:
    boxes = [label.get_window_extent() for label in labels if label.get_text()]
    return all(not a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


def test_release_plot_tick_labels_never_collide(corpus) -> None:
    contexts = [8_000, 16_000, 32_000, 64_000, 128_000, 200_000, 1_000_000]
    fig = plot.release_summary(corpus["webui:f00d42"], context_window=contexts)
    ax = plot.release_comparison(corpus, KEY, context_window=16_000)
    for figure in (fig, ax.figure):
        figure.canvas.draw()
        for axes in figure.axes:
            assert _no_overlap(_drawn_tick_labels(axes))
            assert _no_overlap(axes.get_yticklabels())
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [
        "8k",
        "16k",
        "32k",
        "64k",
        "128k",
        "200k",
        "1M",
    ]


@pytest.fixture(scope="module")
def capped(corpus) -> pd.DataFrame:
    return file_cap(corpus, grid={"file_cap": list(plot.sweeps.DEFAULT_LIMITS)})


def _tiny() -> sessionkit.Session:
    """Two short messages: a few tokens, so an axis left to itself would tick at 0.5 steps."""
    return sessionkit.Session(
        "cli:tiny", [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    )


def _timeline_counts(ax: Axes) -> list:
    return [ax.xaxis, ax.yaxis, ax.figure.axes[1].yaxis]


def _explorer_timeline(corpus) -> Axes:
    """The explorer's way: its own Figure (no pyplot) through timeline_axes in a KeptLayout,
    rendered with ``png``, then redrawn in the margins kept (laid out again when resized)."""
    ax = plot.timeline_axes()
    ax.figure.set_layout_engine(KeptLayout())
    plot.token_timeline(corpus, KEY, **SETTINGS, ax=ax)
    png(ax.figure)
    ax = plot.timeline_axes(ax.figure)
    plot.token_timeline(corpus, KEY, **SETTINGS, xlim=(2000, 2100), ax=ax)
    png(ax.figure)
    return ax


def test_the_explorer_figure_reads_after_every_redraw(corpus) -> None:
    """Laid out once, the explorer's figure keeps its margins while the texts fit them: every
    redraw at its own size reads, and few of them lay it out again."""
    ax = plot.timeline_axes()
    fig = ax.figure
    fig.set_layout_engine(engine := KeptLayout())
    draws = [
        {"key": KEY, **SETTINGS},
        {"key": KEY, **SETTINGS, "xlim": (2000, 2100)},
        {"key": KEY, "turn": 5},
        {"key": KEY, "turn": 600, "max_tokens": 150_000, "max_messages": 2000},
        {"key": "webui:f00d42", "max_tokens": 3000},
        {"key": "webui:f00d42", "max_messages": 30, "xlim": (10, 40)},
    ]
    for draw in draws:
        ax = plot.token_timeline(corpus, **draw, ax=plot.timeline_axes(fig))
        assert png(fig)[:8] == b"\x89PNG\r\n\x1a\n"
        assert figures.layout_problems(fig, counts=_timeline_counts(ax)) == [], draw
    assert 1 <= engine.layouts < len(draws) / 2


def test_kept_layout_is_redone_when_the_texts_outgrow_or_undergrow_it() -> None:
    fig = Figure(figsize=(10, 4), dpi=100)
    fig.set_layout_engine(engine := KeptLayout())
    for label, layouts in [("short", 1), ("shorts", 1), ("a much longer label " * 3, 2)]:
        fig.clear()
        ax = fig.add_subplot()
        ax.plot([0, 1], label=label)
        style.legend_beside(ax, *ax.get_legend_handles_labels())
        png(fig)
        assert engine.layouts == layouts, label
        assert figures.layout_problems(fig) == [], label
    fig.clear()
    ax = fig.add_subplot()
    ax.plot([0, 1], label="short")
    style.legend_beside(ax, *ax.get_legend_handles_labels())
    png(fig)
    assert engine.layouts == 3  # the plot takes back the room the long label needed


# name: (draw from the fixtures, the axes that count)
LAYOUTS: dict[str, tuple[Callable, Callable]] = {
    "timeline": (lambda f: plot.token_timeline(f["corpus"], KEY, **SETTINGS), _timeline_counts),
    "timeline_tiny": (lambda f: plot.token_timeline(_tiny(), max_tokens=5), _timeline_counts),
    "timeline_explorer": (lambda f: _explorer_timeline(f["corpus"]), _timeline_counts),
    "lengths": (
        lambda f: plot.session_lengths(f["corpus"]),
        lambda fig: [ax.yaxis for ax in fig.axes],
    ),
    "lengths_tiny": (
        lambda f: plot.session_lengths(_tiny()),
        lambda fig: [ax.yaxis for ax in fig.axes],
    ),
    "heatmap": (lambda f: plot.window_heatmap(f["sweep"]), lambda ax: []),
    "heatmap_truncated": (
        lambda f: plot.window_heatmap(f["sweep"], value="truncated"),
        lambda ax: [],
    ),
    "share": (lambda f: plot.truncation_share(f["sweep"]), lambda ax: []),
    "file_cap": (
        lambda f: plot.file_cap_curve(f["capped"]),
        lambda ax: [ax.yaxis, ax.figure.axes[1].yaxis],
    ),
    "release_comparison": (
        lambda f: plot.release_comparison(
            f["by_release"][
                (f["by_release"]["session_key"] == KEY)
                & (f["by_release"]["context_window"] == 32_000)
            ]
        ),
        lambda ax: [ax.xaxis, ax.yaxis],
    ),
    "release_summary": (
        lambda f: plot.release_summary(f["by_release"]),
        lambda fig: [fig.axes[0].yaxis, fig.axes[2].yaxis],
    ),
}


@pytest.mark.parametrize("width", [800, 1024, 2000])
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_figures_read_at_any_width(
    corpus, sweep, capped, by_release, name: str, width: int
) -> None:
    """At 800 to 2,000 pixels: every text and legend on the canvas (as savefig with
    bbox_inches=None keeps it), tick labels apart, legends off the data, counts at whole numbers."""
    draw, counts = LAYOUTS[name]
    fixtures = {"corpus": corpus, "sweep": sweep, "capped": capped, "by_release": by_release}
    drawn = draw(fixtures)
    fig = drawn if isinstance(drawn, Figure) else drawn.figure
    fig.set_size_inches(width / fig.dpi, fig.get_figheight())
    assert figures.layout_problems(fig, counts=counts(drawn)) == []
    saved = io.BytesIO()
    fig.savefig(saved, format="png", bbox_inches=None)
    assert int.from_bytes(saved.getvalue()[16:20], "big") == width


# Every public plot function, and the README's plot examples, as a notebook user calls them.
JUPYTER_CELLS = {
    "token_timeline": f"sk.plot.token_timeline(corpus, {KEY!r}, turn=600, max_tokens=3000)",
    "readme_timeline": 'sk.plot.token_timeline(corpus, "webui:f00d42", turn=40, max_tokens=8000)',
    "readme_heatmap": 'sk.plot.window_heatmap(sweep, value="truncated")',
    "truncation_share": "sk.plot.truncation_share(sweep)",
    "session_lengths": "sk.plot.session_lengths(corpus)",
    "session_lengths_assigned": "fig = sk.plot.session_lengths(corpus)",
    "file_cap_curve": "sk.plot.file_cap_curve(corpus, limits=[100, 1000])",
    "release_comparison": f"sk.plot.release_comparison(corpus, {KEY!r}, context_window=32_000)",
    "release_summary": "sk.plot.release_summary(corpus, context_window=[32_000, 128_000])",
    "timeline_axes": f"ax = sk.plot.timeline_axes(plt.figure())\nsk.plot.token_timeline(corpus, {KEY!r}, ax=ax)",
    "figure_again": "fig",
}


def test_every_plot_shows_in_a_fresh_kernel(data_dir, tmp_path) -> None:
    """In a new IPython kernel (inline backend, ipykernel's default), each call's cell shows
    exactly one PNG: the figures are pyplot's, as seaborn's and pandas' are."""
    import nbformat
    from nbclient import NotebookClient

    setup = (
        "import matplotlib.pyplot as plt\nimport sessionkit as sk\n"
        f"corpus = sk.load({str(data_dir)!r})\n"
        "sweep = sk.windows(corpus, grid={'max_messages': [20, 120], 'max_tokens': [0, 8000]})"
    )
    cells = [setup, *JUPYTER_CELLS.values()]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    shown = {
        name: [o for o in cell.outputs if "image/png" in o.get("data", {})]
        for name, cell in zip(JUPYTER_CELLS, notebook.cells[1:], strict=True)
    }
    assert {name: len(images) for name, images in shown.items()} == dict.fromkeys(JUPYTER_CELLS, 1)
    errors = [o for cell in notebook.cells for o in cell.outputs if o.output_type == "error"]
    assert errors == []


CJK_KEY = "cli:中文"


def _cjk_store(root) -> sessionkit.Corpus:
    """A store whose key, title and messages are Chinese and Japanese."""
    import json

    sessions = root / "sessions"
    sessions.mkdir()
    lines = [
        {
            "_type": "metadata",
            "key": CJK_KEY,
            "created_at": "2026-01-01T00:00:00",
            "updated_at": "2026-01-01T00:00:00",
            "metadata": {"title": "日本語のタイトル"},
            "last_consolidated": 0,
        },
    ]
    texts = [
        "你好，请帮我总结这段对话。",
        "こんにちは、要約してください。",
        "好的，这是摘要：会話の要点。",
    ]
    for i in range(12):
        role = "user" if i % 2 == 0 else "assistant"
        stamp = f"2026-01-01T00:00:{i + 1:02d}"
        lines.append({"role": role, "content": texts[i % 3] * (i + 1), "timestamp": stamp})
    text = "\n".join(json.dumps(line, ensure_ascii=False) for line in lines) + "\n"
    (sessions / "cli_中文.jsonl").write_text(text, encoding="utf-8")
    return sessionkit.load(root)


def test_cjk_text_draws_without_missing_glyphs(tmp_path) -> None:
    """Keys and titles in Chinese and Japanese draw with the packaged CJK font as a fallback;
    the user's own rcParams stay as they were."""
    import matplotlib as mpl

    corpus = _cjk_store(tmp_path)
    before = mpl.rcParams["font.family"]
    figs = [
        plot.token_timeline(corpus, CJK_KEY, max_tokens=200).figure,
        plot.session_lengths(corpus),
        plot.release_comparison(corpus, CJK_KEY, context_window=32_000).figure,
    ]
    assert mpl.rcParams["font.family"] == before
    titles = [fig.axes[0].get_title("left") for fig in (figs[0], figs[2])]
    assert all(CJK_KEY in title for title in titles)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for fig in figs:
            fig.canvas.draw()
            fig.savefig(io.BytesIO(), format="png", bbox_inches=None)
    missing = [str(w.message) for w in caught if "missing from font" in str(w.message)]
    assert missing == []
