"""Figure data: what a figure draws, read from its artists, and snapshots of it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from sessionkit.testing import UPDATE_ENV, SnapshotMismatch, assert_figure_snapshot, figure_data


@pytest.fixture(autouse=True)
def _no_update_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UPDATE_ENV, raising=False)


def test_figure_data_reads_lines_bars_steps_and_heatmaps() -> None:
    fig = Figure()
    left, right = fig.subplots(1, 2)
    left.plot([0, 1], [2.0, 3.0], label="coverage")
    left.bar([0, 1], [5, 7])
    left.stairs([1, 2], [0, 1, 3]).set_gid("role:user")
    left.set_title("sweep")
    fig.colorbar(right.imshow(np.array([[1.0, 2.0], [3.0, np.nan]])), ax=right)
    data = figure_data(fig)
    assert set(data["axes"]) == {0, 1}
    assert data.loc[data["artist"] == "title", "label"].tolist() == ["sweep"]
    assert "xtick" not in set(data["artist"])
    line = data[data["artist"] == "line"]
    assert line[["x", "y"]].to_numpy().tolist() == [[0, 2], [1, 3]]
    assert data.loc[data["artist"] == "rect", "height"].tolist() == [5, 7]
    step = data[data["artist"] == "step"]
    assert step["label"].unique().tolist() == ["role:user"]
    assert step[["x", "width", "height"]].to_numpy().tolist() == [[0, 1, 1], [1, 2, 2]]
    right.set_xticks([0, 1], ["none", "8,000"])
    ticks = figure_data(fig).query("artist == 'xtick'")
    assert ticks[["axes", "label", "x"]].values.tolist() == [[1, "none", 0], [1, "8,000", 1]]
    image = data[data["artist"] == "image"]
    assert (image["axes"] == 1).all()
    assert image["value"].tolist()[:3] == [1, 2, 3] and np.isnan(image["value"].iloc[3])


def test_figure_snapshot_pins_the_data_not_the_pixels(tmp_path: Path) -> None:
    def draw(y: float, colour: str) -> Figure:
        fig = Figure(figsize=(3, 2))
        fig.add_subplot().plot([0, 1], [1, y], color=colour)
        return fig

    path = tmp_path / "fig.csv"
    assert_figure_snapshot(draw(2, "red"), path, update=True)
    assert assert_figure_snapshot(draw(2, "blue").axes[0], path).status == "matches"
    with pytest.raises(SnapshotMismatch, match="row 1, y: 2 -> 3"):
        assert_figure_snapshot(draw(3, "red"), path)


def test_layout_problems_finds_what_keeps_a_figure_from_being_read() -> None:
    from sessionkit.testing.figures import layout_problems

    fig = Figure(figsize=(4, 3), layout="constrained")
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 3], label="a line")
    ax.set_ylabel("messages")
    assert layout_problems(fig) == []
    (fractional,) = layout_problems(fig, counts=[ax.yaxis])
    assert fractional.startswith("fractional ticks on the count axis 'messages': [0.5")
    ax.legend(loc="center")
    assert "legend 0 covers the data area of axes 0" in layout_problems(fig)
    ax.get_legend().remove()
    ax.text(1.2, 0.5, "far right", transform=ax.transAxes, in_layout=False)
    assert any("outside the canvas" in p for p in layout_problems(fig))
