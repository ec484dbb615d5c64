"""The wheel: what it ships, and the sample store an installed sessionkit loads by default."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from support.reference import need

from sessionkit.nanobot.reader import SessionPathError
from sessionkit.store import sources
from sessionkit.store.loading import load
from sessionkit.store.sources import default_data_dir

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ["discord_987.jsonl", "telegram_777.jsonl"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from this checkout by the project's build backend."""
    need("hatchling")
    out = tmp_path_factory.mktemp("wheel")
    build = f"import hatchling.build; print(hatchling.build.build_wheel({str(out)!r}))"
    name = subprocess.run(
        [sys.executable, "-c", build], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    return out / name


@pytest.fixture(scope="module")
def wheel_files(wheel: Path) -> set[str]:
    """The names in the wheel."""
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_wheel_ships_the_sample_store(wheel_files: set[str]) -> None:
    """All of data/ (sessions/, damaged/ and its README), as the tour and the README use it."""
    data = ROOT / "data"
    sample = {
        f"sessionkit/_sample/{p.relative_to(data).as_posix()}"
        for p in data.rglob("*")
        if p.is_file()
    }
    assert {n for n in wheel_files if n.startswith("sessionkit/_sample/")} == sample
    assert {"sessionkit/_sample/damaged/damaged_invalid_utf8.jsonl"} < sample
    assert "sessionkit/__main__.py" in wheel_files
    assert not any(name.startswith("data/") for name in wheel_files)


def test_wheel_ships_the_license_and_py_typed(wheel: Path, wheel_files: set[str]) -> None:
    assert "sessionkit/py.typed" in wheel_files
    (info,) = {n.split("/")[0] for n in wheel_files if ".dist-info/" in n}
    with zipfile.ZipFile(wheel) as archive:
        license_text = archive.read(f"{info}/licenses/LICENSE").decode()
        metadata = archive.read(f"{info}/METADATA").decode()
    assert license_text == (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License\n\nCopyright (c) the sessionkit authors\n")
    assert "License-Expression: MIT" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()


def _readme_quick_start() -> str:
    """The README's first Python snippet (the short tour on the bundled data)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.search(r"```python\n(.*?)```", readme, re.DOTALL).group(1)


_QUICK_START = """\
import json, runpy, sys
import sessionkit
ns = runpy.run_path(sys.argv[1])
print(json.dumps({
    "file": sessionkit.__file__,
    "keys": ns["corpus"].keys(),
    "problems": len(ns["corpus"].problems),
    "history": len(ns["session"].get_history(120, max_tokens=8000)),
}))
"""


def test_installed_wheel_runs_the_quick_start_and_the_report(wheel: Path, tmp_path: Path) -> None:
    """The wheel alone, in a fresh venv outside the checkout: README quick start and report.

    The venv gets only the wheel (``--no-deps``, offline); the test environment's
    site-packages stand in for its dependencies through a ``.pth`` file, which does not run
    their ``.pth`` files (so not the editable install of this checkout), and JUPYTER_PATH
    for their data files (nbconvert's templates).
    """
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
        + ["--no-deps", "--no-index", "--disable-pip-version-check", str(wheel)],
        check=True,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "test-environment.pth").write_text(sysconfig.get_path("purelib") + "\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "quick_start.py").write_text(_readme_quick_start(), encoding="utf-8")
    (run / "check.py").write_text(_QUICK_START, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env |= {
        "JUPYTER_PATH": str(Path(sys.prefix, "share", "jupyter")),
        "SESSIONKIT_CACHE_DIR": str(tmp_path / "cache"),
    }
    quick = subprocess.run(
        [str(python), "check.py", "quick_start.py"],
        cwd=run,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert quick.returncode == 0, quick.stderr
    result = json.loads(quick.stdout.splitlines()[-1])
    assert Path(result["file"]).is_relative_to(venv), result["file"]
    assert len(result["keys"]) == 15
    assert {"telegram:12345", "telegram:777", "webui:def456", "cli:legacy"} < set(result["keys"])
    assert result["problems"] == 0 and result["history"] > 0

    report = subprocess.run(
        [str(venv / "bin" / "sessionkit"), "report", "-o", str(run / "r.html")],
        cwd=run,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    assert report.stdout == f"wrote {run / 'r.html'}\n"
    html = (run / "r.html").read_text(encoding="utf-8")
    assert "telegram:12345" in html and "damaged_invalid_utf8.jsonl" in html
    assert "15 files in <code>sessions/</code>" in html
    assert "12 files in <code>damaged/</code>" in html


def test_checkout_default_is_the_repository_data() -> None:
    assert default_data_dir() == ROOT / "data"


def test_installed_default_is_the_packaged_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the checkout's data/, load() reads sessionkit/_sample as the wheel lays it out."""
    sample = tmp_path / "sessionkit" / "_sample"
    (sample / "sessions").mkdir(parents=True)
    for name in SAMPLE:
        (sample / "sessions" / name).write_bytes((ROOT / "data" / "sessions" / name).read_bytes())
    monkeypatch.setattr(sources, "REPOSITORY_DATA", tmp_path / "data")
    monkeypatch.setattr(sources, "PACKAGED_SAMPLE", sample)
    assert default_data_dir() == sample
    assert load(tokens=None).keys() == ["discord:987", "telegram:777"]


def test_no_sample_at_all_says_what_to_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "REPOSITORY_DATA", tmp_path / "data")
    monkeypatch.setattr(sources, "PACKAGED_SAMPLE", tmp_path / "_sample")
    with pytest.raises(SessionPathError, match="pass the path of a nanobot workspace"):
        load()
