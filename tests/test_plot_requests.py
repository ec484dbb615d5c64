"""Request plots: every bar, line and mark is a column of the sessionkit.requests frame drawn."""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.patches import StepPatch

import sessionkit
from sessionkit import plot
from sessionkit.plot.requests import BREAK_COLORS, PART_COLORS
from sessionkit.schema import CACHE_BREAKS
from sessionkit.simulate.windowing import windows
from sessionkit.testing import figures

KEY = "cli:direct"
OTHER = "webui:f00d42"
WINDOW = 32_000


@pytest.fixture(scope="module")
def corpus(data_dir) -> sessionkit.Corpus:
    return sessionkit.load(data_dir)


@pytest.fixture(scope="module")
def two_counts(corpus) -> pd.DataFrame:
    """Requests of two sessions under two count windows, at a 32k context window."""
    return sessionkit.requests(
        [corpus[KEY], corpus[OTHER]], grid={"max_messages": [10, 40]}, context_window=WINDOW
    )


@pytest.fixture(scope="module")
def one(two_counts) -> pd.DataFrame:
    """One session and setting, rows shuffled (the plots put calls in order themselves)."""
    rows = two_counts[(two_counts["session_key"] == KEY) & (two_counts["max_messages"] == 10)]
    return rows.sample(frac=1.0, random_state=3)


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


def _gid(ax: Axes, gid: str) -> list:
    return [a for a in ax.get_children() if a.get_gid() == gid]


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _in_order(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["turn", "step"]).reset_index(drop=True)


def test_composition_bars_are_the_parts_of_each_call(one) -> None:
    calls = _in_order(one)
    assert len(calls) == 419 and calls["system_tokens"].iloc[0] > 0
    ax = plot.request_composition(one)
    assert [p.get_gid() for p in ax.patches] == list(PART_COLORS)
    bottom = np.zeros(len(calls))
    for patch, (column, colour) in zip(ax.patches, PART_COLORS.items(), strict=True):
        assert isinstance(patch, StepPatch)
        data = patch.get_data()
        assert (data.values - data.baseline).tolist() == calls[column].tolist(), column
        assert data.baseline.tolist() == bottom.tolist(), column
        assert data.edges.tolist() == (np.arange(len(calls) + 1) - 0.5).tolist()
        assert to_hex(patch.get_facecolor()) == colour
        bottom = data.values
    assert bottom.tolist() == calls["total_tokens"].tolist()
    assert ax.get_ylim() == (0, 1.05 * 32_000)
    (window,) = _gid(ax, "window")
    (budget,) = _gid(ax, "budget")
    assert list(window.get_ydata()) == [32_000, 32_000]
    assert list(budget.get_ydata()) == [32_000 - 8_192 - 1_024] * 2
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "tool definitions",
        "system prompt",
        "archived summary",
        "history",
        "current message",
        "earlier tool steps",
        "context window 32,000",
        "input budget 22,784",
    ]
    assert ax.get_title("left") == "cli:direct, nanobot 0.2.2: max_messages 10, max_tokens 22,784"
    firsts = np.flatnonzero(calls["step"] == 0)  # turns answered without a call have none
    firsts = firsts[:: -(-len(firsts) // 12)]
    assert ax.get_xticks().tolist() == firsts.tolist()
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        str(t) for t in calls["turn"].iloc[firsts]
    ]
    assert ax.get_xlim() == (-0.5, len(calls) - 0.5)


def test_composition_window_and_budget_given_or_from_the_frame(corpus, one) -> None:
    plain = sessionkit.requests(corpus[OTHER], max_messages=40)
    assert plain["context_window"].isna().all()
    ax = plot.request_composition(plain)
    assert _gid(ax, "window") == [] and _gid(ax, "budget") == []
    assert ax.get_ylim() == (0, 1.05 * plain["total_tokens"].max())
    cases = [
        ({"context_window": 128_000}, 128_000, 128_000 - 8_192 - 1_024),
        ({"context_window": 128_000, "max_output": 4_096}, 128_000, 128_000 - 4_096 - 1_024),
        ({"max_output": 16_000}, WINDOW, WINDOW - 16_000 - 1_024),
    ]
    for given, window, budget in cases:
        ax = plot.request_composition(plain if "context_window" in given else one, **given)
        assert _gid(ax, "window")[0].get_ydata()[0] == window, given
        assert _gid(ax, "budget")[0].get_ydata()[0] == budget, given
    ax = plot.request_composition(one, context_window=9_000)
    assert [line.get_gid() for line in ax.get_lines()] == ["window"], "no budget below 0"


def test_cache_ratio_draws_one_line_per_setting(two_counts) -> None:
    rows = two_counts[two_counts["session_key"] == KEY]
    ax = plot.cache_ratio(rows.sample(frac=1.0, random_state=5))
    assert [line.get_gid() for line in ax.get_lines()] == ["max_messages=10", "max_messages=40"]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    for line, label, count in zip(ax.get_lines(), labels, (10, 40), strict=True):
        calls = _in_order(rows[rows["max_messages"] == count])
        assert line.get_xdata().tolist() == list(range(len(calls)))
        assert line.get_ydata().tolist() == calls["cache_ratio"].tolist()
        share = calls["prefix_tokens"].sum() / calls["total_tokens"].sum()
        assert label == f"max_messages {count} ({share:.0%} of tokens reusable)"
    assert ax.get_title("left") == "cli:direct, nanobot 0.2.2: max_tokens 22,784"
    assert ax.get_ylim() == (0, 1.02)


def test_cache_ratio_by_a_flag_and_by_no_limit(corpus) -> None:
    flags = sessionkit.requests(corpus[OTHER], grid={"include_timestamps": [False, True]})
    ax = plot.cache_ratio(flags, by="include_timestamps")
    assert [line.get_gid() for line in ax.get_lines()] == [
        "include_timestamps=False",
        "include_timestamps=True",
    ]
    labels = [t.get_text().split(" (")[0] for t in ax.get_legend().get_texts()]
    assert labels == ["include_timestamps False", "include_timestamps True"]
    budgets = sessionkit.requests(corpus[OTHER], grid={"max_tokens": [0, 3_000]})
    ax = plot.cache_ratio(budgets, by="max_tokens")
    labels = [t.get_text().split(" (")[0] for t in ax.get_legend().get_texts()]
    assert labels == ["max_tokens none", "max_tokens 3,000"]
    assert ax.get_title("left") == "webui:f00d42, nanobot 0.2.2: max_messages 120"


def _breaks(calls: pd.DataFrame, name: str) -> list[int]:
    return np.flatnonzero(calls["cache_break"].astype(str) == name).tolist()


def test_cache_breaks_marks_each_break_per_setting(two_counts) -> None:
    rows = two_counts[two_counts["session_key"] == KEY]
    ax = plot.cache_breaks(rows.sample(frac=1.0, random_state=7))
    drawn = {line.get_gid(): line for line in ax.get_lines()}
    expected, labels = [], []
    for row, count in enumerate((10, 40)):
        calls = _in_order(rows[rows["max_messages"] == count])
        for name in CACHE_BREAKS[1:]:
            at = _breaks(calls, name)
            if at:
                line = drawn[f"max_messages={count}:{name}"]
                assert line.get_xdata().tolist() == at, (count, name)
                assert line.get_ydata().tolist() == [row] * len(at), (count, name)
                assert to_hex(line.get_color()) == BREAK_COLORS[name]
                expected.append(f"max_messages={count}:{name}")
        total = calls["total_tokens"].sum()
        full = total - calls["cache_read_tokens"].sum() - calls["cache_write_tokens"].sum()
        labels.append(f"max_messages {count}\n{full / total:.0%} at full price")
    assert list(drawn) == expected
    assert expected == [
        "max_messages=10:first call",
        "max_messages=10:idle past the TTL",
        "max_messages=10:window slid",
        "max_messages=10:clean-up or compaction",
        "max_messages=40:first call",
        "max_messages=40:idle past the TTL",
        "max_messages=40:window slid",
        "max_messages=40:clean-up or compaction",
    ]
    assert [t.get_text() for t in ax.get_yticklabels()] == labels
    assert ax.get_yticks().tolist() == [0, 1] and ax.get_ylim() == (1.5, -0.5)
    legend = ax.get_legend()
    assert legend.get_title().get_text() == "cache broke by"
    assert [t.get_text() for t in legend.get_texts()] == [
        "first call",
        "idle past the TTL",
        "window slid",
        "clean-up or compaction",
    ]
    assert ax.get_title("left") == "cli:direct, nanobot 0.2.2: max_tokens 22,784; cache openai"
    assert ax.get_xlim() == (-0.5, len(calls) - 0.5)


def test_cache_breaks_by_policy_and_count_puts_a_candidate_beside_the_release(corpus) -> None:
    block = sessionkit.candidate("nanobot-0.2", block=8)
    frame = pd.concat(
        [
            sessionkit.requests(corpus[OTHER], max_messages=20),
            sessionkit.requests(corpus[OTHER], policy=block, max_messages=10),
        ],
        ignore_index=True,
    )
    costs = sessionkit.cost(
        frame, model="claude-sonnet-4-5", cache_rules="anthropic", cache_ttl=3600, date="2025-10-01"
    )
    with pytest.raises(ValueError, match=r"\(lines vary policy\); .* several max_messages"):
        plot.cache_breaks(costs, by="policy")
    ax = plot.cache_breaks(costs, by=["policy", "max_messages"])
    labels = [t.get_text().split("\n")[0] for t in ax.get_yticklabels()]
    assert labels == ["nanobot 0.2.2, max_messages 20", "nanobot 0.2.2 + block(8), max_messages 10"]
    assert ax.get_title("left") == "webui:f00d42: max_tokens none; cache anthropic"
    mine = costs[costs["policy"] == block.name].sort_values(["turn", "step"])
    gid = f"policy={block.name}, max_messages=10:window slid"
    (slid,) = [line for line in ax.get_lines() if line.get_gid() == gid]
    assert slid.get_xdata().tolist() == _breaks(mine, "window slid")
    assert slid.get_ydata().tolist() == [1] * len(_breaks(mine, "window slid"))
    own = costs[costs["policy"] == "nanobot-0.2"].sort_values(["turn", "step"])
    assert 0 < len(_breaks(mine, "window slid")) < len(_breaks(own, "window slid"))


def test_mixed_frames_are_refused_naming_the_column(corpus, two_counts, one) -> None:
    with pytest.raises(ValueError, match="several session_key values: select one first"):
        plot.request_composition(two_counts[two_counts["max_messages"] == 10])
    with pytest.raises(ValueError, match=r"several max_messages values.*frame\['max_messages'\]"):
        plot.request_composition(two_counts[two_counts["session_key"] == KEY])
    with pytest.raises(ValueError, match="several session_key values"):
        plot.cache_ratio(two_counts)
    grid = sessionkit.requests(
        corpus[OTHER], grid={"max_messages": [10, 40], "max_tokens": [0, 3_000]}
    )
    with pytest.raises(ValueError, match=r"\(lines vary max_messages\); .* several max_tokens"):
        plot.cache_ratio(grid)
    releases = pd.concat([one, one.assign(policy="nanobot-0.3.0")], ignore_index=True)
    with pytest.raises(ValueError, match="several policy values"):
        plot.cache_ratio(releases)
    with pytest.raises(ValueError, match="by must be a setting column .* not 'turn'"):
        plot.cache_ratio(two_counts, by="turn")
    with pytest.raises(
        ValueError, match="by must be 'policy' or a setting column, or several .* not 'turn'"
    ):
        plot.cache_breaks(two_counts, by="turn")
    with pytest.raises(ValueError, match=r"\(lines vary max_messages\); .* several session_key"):
        plot.cache_breaks(two_counts)
    with pytest.raises(ValueError, match="draws a sessionkit.requests frame; this one has no"):
        plot.request_composition(windows(corpus[OTHER]))


def test_an_empty_frame_draws_empty_axes(one) -> None:
    ax = plot.request_composition(one.iloc[:0])
    assert [len(p.get_data().values) for p in ax.patches] == [0] * len(PART_COLORS)
    assert (ax.get_xticks().tolist(), ax.get_title("left"), ax.get_ylim()) == ([], "", (0, 1.05))
    assert plot.cache_ratio(one.iloc[:0]).get_lines() == []
    ax = plot.cache_breaks(one.iloc[:0])
    assert (ax.get_lines(), ax.get_yticks().tolist(), ax.get_title("left")) == ([], [], "")


def test_same_data_same_picture(one, two_counts) -> None:
    rows = two_counts[two_counts["session_key"] == OTHER]
    for draw in (
        lambda: plot.request_composition(one),
        lambda: plot.cache_ratio(rows),
        lambda: plot.cache_breaks(rows),
    ):
        assert _png(draw().figure) == _png(draw().figure)


@pytest.mark.parametrize("width", [800, 1024, 2000])
def test_request_figures_read_at_any_width(one, two_counts, width: int) -> None:
    rows = two_counts[two_counts["session_key"] == KEY]
    for ax, counts in (
        (plot.request_composition(one), lambda ax: [ax.yaxis]),
        (plot.cache_ratio(rows), lambda ax: []),
        (plot.cache_breaks(rows), lambda ax: []),
    ):
        fig = ax.figure
        fig.set_size_inches(width / fig.dpi, fig.get_figheight())
        assert figures.layout_problems(fig, counts=counts(ax)) == []


def test_a_cjk_key_draws_without_missing_glyphs(one) -> None:
    cjk = one.assign(session_key=pd.Categorical(["cli:中文"] * len(one)))
    axes = [plot.request_composition(cjk), plot.cache_ratio(cjk), plot.cache_breaks(cjk)]
    assert [ax.get_title("left").split(",")[0] for ax in axes] == ["cli:中文"] * 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for ax in axes:
            ax.figure.savefig(io.BytesIO(), format="png", bbox_inches=None)
    assert [str(w.message) for w in caught if "missing from font" in str(w.message)] == []


def test_each_shows_in_a_fresh_kernel(data_dir, tmp_path) -> None:
    """As every sk.plot function: one PNG per cell in a new IPython kernel."""
    import nbformat
    from nbclient import NotebookClient

    cells = [
        "import sessionkit as sk\n"
        f"corpus = sk.load({str(data_dir)!r})\n"
        f"frame = sk.requests(corpus[{OTHER!r}], grid={{'max_messages': [10, 40]}}, context_window=32_000)",
        "sk.plot.request_composition(frame[frame['max_messages'] == 10])",
        "sk.plot.cache_ratio(frame)",
        "sk.plot.cache_breaks(frame)",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    shown = [
        [o for o in cell.outputs if "image/png" in o.get("data", {})] for cell in notebook.cells
    ]
    assert [len(images) for images in shown] == [0, 1, 1, 1]
    assert [o for cell in notebook.cells for o in cell.outputs if o.output_type == "error"] == []
