"""The wheel: what it ships, and the sample store an installed sessionkit loads by default."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sessionkit import corpus
from sessionkit.corpus import default_data_dir, load
from sessionkit.nanobot.reader import SessionPathError

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ["discord_987.jsonl", "telegram_777.jsonl"]


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The names in a wheel built from this checkout by the project's build backend."""
    pytest.importorskip("hatchling")
    out = tmp_path_factory.mktemp("wheel")
    build = f"import hatchling.build; print(hatchling.build.build_wheel({str(out)!r}))"
    name = subprocess.run(
        [sys.executable, "-c", build], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    with zipfile.ZipFile(out / name) as wheel:
        return set(wheel.namelist())


def test_wheel_ships_the_sample_store(wheel_files: set[str]) -> None:
    shipped = sorted(n for n in wheel_files if n.startswith("sessionkit/_sample/"))
    assert shipped == [f"sessionkit/_sample/sessions/{name}" for name in SAMPLE]
    assert "sessionkit/__main__.py" in wheel_files
    assert not any(name.startswith("data/") for name in wheel_files)


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
    monkeypatch.setattr(corpus, "REPOSITORY_DATA", tmp_path / "data")
    monkeypatch.setattr(corpus, "PACKAGED_SAMPLE", sample)
    assert default_data_dir() == sample
    assert load(tokens=None).keys() == ["discord:987", "telegram:777"]


def test_no_sample_at_all_says_what_to_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(corpus, "REPOSITORY_DATA", tmp_path / "data")
    monkeypatch.setattr(corpus, "PACKAGED_SAMPLE", tmp_path / "_sample")
    with pytest.raises(SessionPathError, match="pass the path of a nanobot workspace"):
        load()
