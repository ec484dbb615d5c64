"""``make lab`` and ``make notebooks``: the commands they run (``make -n``; ``id`` faked on
PATH), the lab's own settings, and notebooks stored without widget state."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from support.reference import need

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(ROOT.glob("notebooks/*.ipynb"))
LAB_CONFIG = ROOT / "jupyter-config"
SCRIPTS = ROOT / "scripts"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _dry_run(target: str, tmp_path: Path, uid: int = 1000) -> list[str]:
    """The commands ``make -n target`` prints when ``id -u`` answers ``uid``."""
    fake = tmp_path / "id"
    fake.write_text(f"#!/bin/sh\necho {uid}\n", encoding="utf-8")
    fake.chmod(0o755)
    # Run as a top-level make even under `make test`: a sub-make prints "make[1]: ..." lines.
    inherited = {"MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES"}
    env = {k: v for k, v in os.environ.items() if k not in inherited}
    env["PATH"] = f"{tmp_path}{os.pathsep}{os.environ['PATH']}"
    dry_run = subprocess.run(
        ["make", "--no-print-directory", "-n", *target.split()],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dry_run.stdout.replace("\\\n", " ").splitlines()


def _lab_command(uid: int, tmp_path: Path) -> str:
    """The ``jupyter lab`` line ``make -n lab`` prints when ``id -u`` answers ``uid``."""
    (line,) = [cmd for cmd in _dry_run("lab", tmp_path, uid) if "jupyter lab" in cmd]
    return line


LAB = [
    f"JUPYTER_CONFIG_PATH={LAB_CONFIG}",
    ".venv/bin/jupyter",
    "lab",
]


def test_lab_allows_root_as_root(tmp_path: Path) -> None:
    assert _lab_command(0, tmp_path).split() == [
        *LAB,
        "--allow-root",
        "--LabApp.news_url=None",
        "notebooks/",
    ]


def test_lab_keeps_the_root_check_for_users(tmp_path: Path) -> None:
    assert _lab_command(1000, tmp_path).split() == [*LAB, "--LabApp.news_url=None", "notebooks/"]


def test_lab_trusts_the_bundled_notebooks_first(tmp_path: Path) -> None:
    commands = _dry_run("lab", tmp_path)
    trust = [i for i, cmd in enumerate(commands) if cmd.startswith(".venv/bin/jupyter trust ")]
    (lab,) = [i for i, cmd in enumerate(commands) if "jupyter lab" in cmd]
    assert len(trust) == 1 and trust[0] < lab
    assert shlex.split(commands[trust[0]])[2:] == [str(p.relative_to(ROOT)) for p in NOTEBOOKS]


def test_the_lab_config_turns_news_and_update_checks_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JupyterLab merges the file as default settings when its folder is on JUPYTER_CONFIG_PATH."""
    assert json.loads(
        (LAB_CONFIG / "labconfig" / "default_setting_overrides.json").read_text()
    ) == {
        "@jupyterlab/apputils-extension:notification": {
            "checkForUpdates": False,
            "fetchNews": "false",
        }
    }
    settings_utils = need("jupyterlab_server.settings_utils")
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(LAB_CONFIG))
    overrides, _ = settings_utils._get_overrides(str(tmp_path))
    settings = overrides["@jupyterlab/apputils-extension:notification"]
    assert settings == {"checkForUpdates": False, "fetchNews": "false"}


@pytest.mark.parametrize("target", ["lab", "notebooks"])
def test_lab_and_notebooks_install_the_releases_the_bundled_data_needs_first(
    tmp_path: Path, target: str
) -> None:
    """0.2.2 for data/sessions (notebook 09), 0.3.5 for data/nanobot-0.3.5 (notebook 10)."""
    commands = _dry_run(target, tmp_path)
    installs = [i for i, c in enumerate(commands) if " releases install " in c]
    (jupyter,) = [i for i, c in enumerate(commands) if "jupyter lab" in c or "nbconvert" in c]
    assert len(installs) == 1 and installs[0] < jupyter
    assert shlex.split(commands[installs[0]]) == [
        ".venv/bin/sessionkit",
        "releases",
        "install",
        "0.2.2",
        "0.3.5",
        "--missing",
    ]


def test_make_notebooks_reexecutes_every_notebook_then_strips_widget_state(
    tmp_path: Path,
) -> None:
    commands = _dry_run("notebooks", tmp_path)
    names = [str(p.relative_to(ROOT)) for p in NOTEBOOKS]
    (execute,) = [shlex.split(c) for c in commands if "nbconvert" in c]
    assert execute[:6] == [
        ".venv/bin/jupyter",
        "nbconvert",
        "--to",
        "notebook",
        "--execute",
        "--inplace",
    ]
    assert "--ExecutePreprocessor.store_widget_state=False" in execute
    assert execute[-len(names) :] == names
    assert shlex.split(commands[-1]) == [".venv/bin/python", "scripts/clean_notebooks.py", *names]


def _clean_notebooks(capsys: pytest.CaptureFixture[str], *paths: Path) -> str:
    """What ``scripts/clean_notebooks.py paths...`` prints (run in this process)."""
    spec = importlib.util.spec_from_file_location("clean_notebooks", SCRIPTS / "clean_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([str(p) for p in paths]) == 0
    return capsys.readouterr().out


def test_clean_notebooks_strips_widget_state_and_timings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    view = {"model_id": "3f27c9fe", "version_major": 2, "version_minor": 0}
    cell = nbformat.v4.new_code_cell(
        "app",
        metadata={"execution": {"iopub.status.busy": "2026-01-01T00:00:00Z"}, "tags": ["keep"]},
        outputs=[
            nbformat.v4.new_output(
                "execute_result",
                {"application/vnd.jupyter.widget-view+json": view, "text/plain": "Explorer()"},
                execution_count=1,
            )
        ],
    )
    notebook = nbformat.v4.new_notebook(cells=[cell])
    notebook.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    path = tmp_path / "n.ipynb"
    nbformat.write(notebook, path)
    assert _clean_notebooks(capsys, path) == f"cleaned {path}\n"
    cleaned = nbformat.read(path, as_version=4)
    assert "widgets" not in cleaned.metadata
    assert cleaned.cells[0].metadata == {"tags": ["keep"]}
    assert cleaned.cells[0].outputs[0]["data"] == {"text/plain": "Explorer()"}
    before = path.read_bytes()
    assert _clean_notebooks(capsys, path) == ""  # nothing left to clean: the file is not rewritten
    assert path.read_bytes() == before


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_notebook_stores_widget_state(path: Path) -> None:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    assert "widgets" not in notebook["metadata"]
    for cell in notebook["cells"]:
        assert "execution" not in cell["metadata"]
        for output in cell.get("outputs", []):
            assert "application/vnd.jupyter.widget-view+json" not in output.get("data", {})


def test_make_test_installs_chromium_and_runs_every_test(tmp_path: Path) -> None:
    commands = _dry_run("test", tmp_path)
    assert any("apt-get install -y -qq chromium fonts-wqy-zenhei" in c for c in commands)
    assert commands[-1].split() == [".venv/bin/pytest"]


def test_make_test_without_a_browser_installs_none_and_deselects_browser_tests(
    tmp_path: Path,
) -> None:
    commands = _dry_run("test NO_BROWSER=1", tmp_path)
    assert not any("apt-get" in c for c in commands)
    assert commands[-1] == '.venv/bin/pytest -m "not browser"'
