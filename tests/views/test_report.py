"""The headless report: the tour run on a chosen store, written as one self-contained HTML file."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from support.reference import need, unavailable

from sessionkit.cli import main
from sessionkit.nanobot.reader import SessionPathError
from sessionkit.views.report import (
    INJECTED_TAG,
    PARAMETERS_TAG,
    ReportError,
    _with_data_path,
    kernel_config,
    tour_notebook,
    write_report,
)


def test_the_injected_cell_follows_the_parameters_cell(tmp_path: Path) -> None:
    tour = nbformat.read(tour_notebook(), as_version=4)
    tagged = [n for n, c in enumerate(tour.cells) if PARAMETERS_TAG in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "DATA_PATH = None" in tour.cells[tagged[0]].source
    injected = _with_data_path(tour, tmp_path)
    assert len(injected.cells) == len(tour.cells) + 1
    cell = injected.cells[tagged[0] + 1]
    assert cell.source == f"DATA_PATH = {str(tmp_path)!r}"
    assert cell.metadata["tags"] == [INJECTED_TAG]


def test_a_notebook_without_parameters_is_refused(tmp_path: Path) -> None:
    bare = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("DATA_PATH = None")])
    with pytest.raises(ReportError, match="no cell tagged 'parameters'"):
        _with_data_path(bare, tmp_path)


def test_the_kernel_is_started_with_encrypted_sockets() -> None:
    zmq = need("zmq")
    if not zmq.has("curve"):
        unavailable("pyzmq without CurveZMQ")
    assert kernel_config().KernelManager.transport_encryption == "auto"


def test_a_missing_store_fails_before_any_kernel_starts(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    with pytest.raises(SessionPathError):
        write_report(tmp_path / "nowhere", out)
    assert not out.exists()


def test_the_output_must_be_a_new_file_in_a_folder_that_exists(tmp_path: Path) -> None:
    """Checked before any kernel starts: a typo in the folder, or a report already there."""
    with pytest.raises(FileNotFoundError) as missing:
        write_report(None, tmp_path / "typo" / "report.html")
    assert missing.value.strerror == (
        f"{tmp_path / 'typo'} does not exist, so nothing was written: name an existing folder, "
        "or pass create=True (command line: --create) to make it"
    )
    assert not (tmp_path / "typo").exists()
    (tmp_path / "report.html").write_text("mine")
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        write_report(None, tmp_path / "report.html")
    assert (tmp_path / "report.html").read_text() == "mine"
    assert main(["report", "-o", str(tmp_path / "report.html")]) == 2


def test_report_on_the_bundled_store_embeds_the_figures(tmp_path: Path) -> None:
    out = write_report(None, tmp_path / "deep" / "report.html", create=True)
    html = out.read_text(encoding="utf-8")
    assert "A tour of sessionkit" in html
    assert "&lt;Corpus: 27 sessions, 7445 messages, 14 problems&gt;" in html
    assert html.count('src="data:image/png;base64,') >= 2
    assert "# None: the bundled sample store" in html


def test_report_runs_on_the_store_given(
    data_dir: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    sessions = tmp_path / "workspace" / "sessions"
    sessions.mkdir(parents=True)
    for name in ("telegram_777.jsonl", "discord_987.jsonl"):
        shutil.copy(data_dir / "sessions" / name, sessions)
    html = write_report(tmp_path / "workspace", tmp_path / "r.html", show_code=False).read_text(
        encoding="utf-8"
    )
    assert "&lt;Corpus: 2 sessions, 668 messages, 0 problems&gt;" in html
    assert "telegram:777" in html and "discord:987" in html
    assert "# None: the bundled sample store" not in html
    # The kernel's stderr is this process's: no "running over TCP without encryption" warning.
    assert "without encryption" not in capfd.readouterr().err
