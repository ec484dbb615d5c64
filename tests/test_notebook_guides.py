"""What the notebooks tell a user about running them on their own data."""

from __future__ import annotations

from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent


def test_the_regression_notebook_says_first_how_to_repin_it_for_your_data() -> None:
    """Notebook 06's pinned policy fits the sample; its first cell says how to re-pin it."""
    first = nbformat.read(REPO / "notebooks" / "06_regression.ipynb", as_version=4).cells[0]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    commands = [
        line.strip()
        for line in readme.splitlines()
        if "nbconvert --to" in line and "06_regression.ipynb" in line
    ]
    assert len(commands) == 2 and commands[0].startswith("SESSIONKIT_UPDATE_SNAPSHOTS=1 ")
    assert first.cell_type == "markdown"
    assert all(command in first.source for command in commands)
    for name in ("DATA_PATH", "SNAPSHOT_DIR", "POLICY"):
        assert f"`{name}`" in first.source
    assert "On your own data" in first.source
