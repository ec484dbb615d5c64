"""``make lab``: the command it runs, as root and as a user (``id`` faked on PATH)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _lab_command(uid: int, tmp_path: Path) -> str:
    """The ``jupyter lab`` line ``make -n lab`` prints when ``id -u`` answers ``uid``."""
    fake = tmp_path / "id"
    fake.write_text(f"#!/bin/sh\necho {uid}\n", encoding="utf-8")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    dry_run = subprocess.run(
        ["make", "-n", "lab"], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    (line,) = [cmd for cmd in dry_run.stdout.splitlines() if "jupyter lab" in cmd]
    return line


def test_lab_allows_root_as_root(tmp_path: Path) -> None:
    assert _lab_command(0, tmp_path).split() == [
        ".venv/bin/jupyter",
        "lab",
        "--allow-root",
        "notebooks/",
    ]


def test_lab_keeps_the_root_check_for_users(tmp_path: Path) -> None:
    assert _lab_command(1000, tmp_path).split() == [".venv/bin/jupyter", "lab", "notebooks/"]
