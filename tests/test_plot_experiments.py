"""The agreement frontier: each marker is a setting's (tokens or cost per call, agreement
rate) as agreement_by_setting computes it, the frontier joins the settings no other beats."""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.axes import Axes
from support.experiment_results import results

from sessionkit import plot
from sessionkit.experiments.agreement import agreement_by_setting
from sessionkit.testing import figures


def _setting(m: int, tokens: int, cost: float, agreeing: int, out_of: int = 10) -> list[dict]:
    return [
        {
            "max_messages": m,
            "call": i,
            "same_action": i < agreeing,
            "estimated_prompt_tokens": tokens,
            "cost_usd": cost,
        }
        for i in range(out_of)
    ]


# 4 and 20 are on the frontier, 60 agrees less than 20 at more tokens, 0 (none) agrees most.
RESULTS = results(
    *_setting(4, 1000, 0.001, 3),
    *_setting(20, 2000, 0.002, 7),
    *_setting(60, 3000, 0.003, 6),
    *_setting(0, 5000, 0.005, 9),
)


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


def _marks(ax: Axes) -> dict[str, tuple[list[float], list[float]]]:
    return {
        str(line.get_gid()): (list(line.get_xdata()), list(line.get_ydata()))
        for line in ax.get_lines()
    }


def test_each_setting_is_a_marker_at_its_tokens_and_rate_and_the_frontier_skips_beaten_ones() -> (
    None
):
    ax = plot.agreement_frontier(RESULTS)
    assert _marks(ax) == {
        "max_messages 4": ([1000.0], [0.3]),
        "max_messages 20": ([2000.0], [0.7]),
        "max_messages 60": ([3000.0], [0.6]),
        "max_messages none": ([5000.0], [0.9]),
        "frontier": ([1000.0, 2000.0, 5000.0], [0.3, 0.7, 0.9]),
    }
    assert ax.get_lines()[-1].get_drawstyle() == "steps-post"
    assert ax.get_xlabel() == "prompt tokens per call (the release's estimate)"
    assert ax.get_title("left") == "agreement vs tokens per call"
    assert ax.get_ylim() == (0, 1.05)
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [
        "max_messages 4: 30% of 10",
        "max_messages 20: 70% of 10",
        "max_messages 60: 60% of 10",
        "max_messages none: 90% of 10",
    ]


def test_against_cost_from_the_agreement_frame() -> None:
    ax = plot.agreement_frontier(agreement_by_setting(RESULTS), x="cost")
    marks = _marks(ax)
    assert [x for xs, _ in marks.values() for x in xs] == pytest.approx(
        [0.001, 0.002, 0.003, 0.005, 0.001, 0.002, 0.005], rel=1e-12
    )
    assert marks["frontier"][1] == [0.3, 0.7, 0.9]
    assert ax.get_xlabel() == "cost per answered call (USD)"


def test_ties_in_cost_keep_the_one_agreeing_more_and_unanswered_settings_are_left_out() -> None:
    frame = results(
        *_setting(4, 1000, 0.001, 3),
        *_setting(8, 1000, 0.001, 5),
        *[
            r | {"outcome": "planned", "same_action": None, "cost_usd": float("nan")}
            for r in _setting(16, 1500, 0.001, 0)
        ],
    )
    marks = _marks(plot.agreement_frontier(frame))
    assert marks == {
        "max_messages 4": ([1000.0], [0.3]),
        "max_messages 8": ([1000.0], [0.5]),
        "frontier": ([1000.0], [0.5]),
    }


def test_an_empty_frame_draws_empty_axes_and_a_wrong_x_is_refused() -> None:
    ax = plot.agreement_frontier(RESULTS.iloc[:0])
    assert (ax.get_lines(), ax.get_legend()) == ([], None)
    with pytest.raises(ValueError, match="x must be one of tokens, cost, not 'dollars'"):
        plot.agreement_frontier(RESULTS, x="dollars")


@pytest.mark.parametrize("width", [800, 1024, 2000])
def test_the_frontier_reads_at_any_width(width: int) -> None:
    fig = plot.agreement_frontier(RESULTS).figure
    fig.set_size_inches(width / fig.dpi, fig.get_figheight())
    assert figures.layout_problems(fig) == []


def test_a_cjk_model_draws_without_missing_glyphs() -> None:
    frame = RESULTS.assign(model=pd.array(["模型"] * 20 + ["gpt"] * 20, dtype="string"))
    ax = plot.agreement_frontier(frame)
    assert "max_messages 4, model 模型" in _marks(ax)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ax.figure.savefig(io.BytesIO(), format="png", bbox_inches=None)
    assert [str(w.message) for w in caught if "missing from font" in str(w.message)] == []


def test_it_shows_in_a_fresh_kernel(tmp_path) -> None:
    """As every sk.plot function: one PNG per cell in a new IPython kernel."""
    import nbformat
    from nbclient import NotebookClient

    cells = [
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import sessionkit as sk\n"
        "from test_plot_experiments import RESULTS",
        "sk.plot.agreement_frontier(RESULTS)",
        "sk.plot.agreement_frontier(RESULTS, x='cost')",
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
    assert [len(images) for images in shown] == [0, 1, 1]
    assert [o for cell in notebook.cells for o in cell.outputs if o.output_type == "error"] == []
