"""Drop what a re-recorded notebook should not store: widget state and run-specific metadata.

``make notebooks`` runs every notebook in place, then this script, so a re-recording's diff
shows only the outputs that changed.  Removed: the notebook's ``metadata.widgets`` (the state
of every live widget, about 1 MB for the explorer), widget views in outputs (a model id that
changes every run and names state no longer stored; the output's ``text/plain`` stays), and
cells' execution timestamps and output scroll state.  A changed file is written as
nbformat writes it.

    python scripts/clean_notebooks.py notebooks/*.ipynb
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import nbformat

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
VOLATILE_CELL_METADATA = ("execution", "scrolled")


def clean(notebook: Any) -> bool:
    """Strip widget state and volatile metadata from ``notebook`` in place; True if changed."""
    changed = notebook.metadata.pop("widgets", None) is not None
    for cell in notebook.cells:
        for name in VOLATILE_CELL_METADATA:
            changed |= cell.metadata.pop(name, None) is not None
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data:
                del data[WIDGET_VIEW]
                changed = True
    return changed


def main(paths: list[str]) -> int:
    for path in map(Path, paths):
        notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)
        if clean(notebook):
            nbformat.write(notebook, path)
            print(f"cleaned {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
