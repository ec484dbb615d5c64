"""A one-file HTML report: the tour notebook executed headless on any session store.

:func:`write_report` copies ``01_tour.ipynb``, sets its ``DATA_PATH`` by inserting a cell after
the one tagged ``parameters`` (papermill's convention), runs it with nbclient in the notebook's
folder and exports it with nbconvert's HTML exporter, figures embedded, so the report opens in
any browser without Jupyter.
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import zmq
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbconvert import HTMLExporter
from traitlets.config import Config

from sessionkit.nanobot.naming import sessions_folder
from sessionkit.nanobot.reader import find_session_files
from sessionkit.writers.output import check_output, write_output

__all__ = ["ReportError", "kernel_config", "tour_notebook", "write_report"]

TOUR = "01_tour.ipynb"
PARAMETERS_TAG = "parameters"
INJECTED_TAG = "injected-parameters"


class ReportError(RuntimeError):
    """The tour notebook could not be run on the given store."""


def tour_notebook() -> Path:
    """The tour notebook: packaged beside the code, else the repository's ``notebooks/``."""
    here = Path(__file__).resolve().parents[1]
    for candidate in (here / "_notebooks" / TOUR, here.parent / "notebooks" / TOUR):
        if candidate.is_file():
            return candidate
    raise ReportError(f"the tour notebook {TOUR} is not installed with sessionkit")


def kernel_config() -> Config:
    """Encrypt the kernel's TCP sockets with CurveZMQ keys when pyzmq can.

    Without keys ipykernel warns on every start that it "is running over TCP without
    encryption"; with them the warning's cause is gone, not just its message.
    """
    if not zmq.has("curve"):
        return Config()
    return Config({"KernelManager": {"transport_encryption": "auto"}})


def _with_data_path(notebook: nbformat.NotebookNode, data_path: Path) -> nbformat.NotebookNode:
    """A copy of ``notebook`` whose ``DATA_PATH`` is ``data_path`` (set after ``parameters``)."""
    notebook = copy.deepcopy(notebook)
    tagged = [
        n for n, c in enumerate(notebook.cells) if PARAMETERS_TAG in c.metadata.get("tags", [])
    ]
    if not tagged:
        raise ReportError(f"{TOUR} has no cell tagged {PARAMETERS_TAG!r} to override")
    cell = nbformat.v4.new_code_cell(
        f"DATA_PATH = {str(data_path)!r}", metadata={"tags": [INJECTED_TAG]}
    )
    notebook.cells.insert(tagged[0] + 1, cell)
    return notebook


def write_report(
    path: str | Path | None,
    out_html: str | Path,
    *,
    timeout: int = 600,
    show_code: bool = True,
    config_dir: str | Path | None = None,
    overwrite: bool = False,
    create: bool = False,
) -> Path:
    """Run the tour on the store at ``path`` and write it as one HTML file to ``out_html``.

    Parameters
    ----------
    path
        A nanobot workspace, sessions folder, session file or glob; ``None`` for the bundled
        sample store.
    out_html
        Where to write the report: a new file in an existing folder (checked before the
        tour runs), unless ``overwrite`` / ``create`` say otherwise.
    timeout
        Seconds any one cell may run.
    show_code
        Keep the code cells in the report (``False``: prose and results only).
    config_dir
        For a 0.3.5 workspace: the config file nanobot runs with, or its folder (default
        ``~/.nanobot``); the tour then reads the sessions folder found through it.
    overwrite
        Replace ``out_html`` when it exists.
    create
        Make ``out_html``'s missing folders.

    Raises
    ------
    SessionPathError
        When ``path`` holds no session files (checked before any kernel starts).
    ReportError
        When a cell of the tour fails on this store.
    """
    out = check_output(out_html, overwrite=overwrite, create=create)
    source = tour_notebook()
    notebook = nbformat.read(source, as_version=4)
    if path is not None:
        resolved = Path(path).expanduser().resolve()
        find_session_files(resolved, config_dir)
        if resolved.is_dir():
            resolved = sessions_folder(resolved, config_dir).resolve()
        notebook = _with_data_path(notebook, resolved)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        config=kernel_config(),
        resources={"metadata": {"path": str(source.parent)}},
    )
    try:
        client.execute()
    except CellExecutionError as exc:
        raise ReportError(f"the tour failed on {path or 'the bundled store'}:\n{exc}") from exc
    exporter = HTMLExporter(template_name="lab", embed_images=True, exclude_input=not show_code)
    html, _ = exporter.from_notebook_node(notebook)
    return write_output(out, html.encode("utf-8"), overwrite=overwrite, create=create)
