"""Finding a release's interpreter: named, the current environment, PATH, or a managed venv;
and the clear error that says how to install one."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from support.releases import release  # noqa: E402

from sessionkit.calls import installs
from sessionkit.calls.installs import ReleaseNotInstalled, find_release, installed, release_version


def test_the_test_environment_holds_0_2_2() -> None:
    assert release_version(Path(sys.executable)) == "0.2.2"
    assert find_release("0.2.2") == Path(sys.executable)


@pytest.mark.conformance
def test_a_named_venv_or_interpreter_is_checked(tmp_path: Path) -> None:
    python = release("0.3.5").python
    assert find_release("0.3.5", python.parent.parent) == python
    assert find_release("0.3.5", python) == python
    with pytest.raises(ReleaseNotInstalled) as error:
        find_release("0.3.0", python)
    assert str(error.value) == (
        f"{python} has nanobot-ai 0.3.5, not nanobot-ai 0.3.0: pass the interpreter or venv of "
        "that release, or install it with `sessionkit releases install 0.3.0`"
    )


def test_the_releases_folder_is_the_users_cache_unless_set(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SESSIONKIT_RELEASES_DIR", raising=False)
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path))
    assert installs.releases_dir() == tmp_path / "releases"
    monkeypatch.setenv("SESSIONKIT_RELEASES_DIR", str(tmp_path / "elsewhere"))
    assert installs.releases_dir() == tmp_path / "elsewhere"


def test_missing_release_says_how_to_install(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ReleaseNotInstalled) as error:
        find_release("0.3.0", releases=tmp_path / "releases")
    assert str(error.value) == (
        "nanobot-ai 0.3.0 is not installed where sessionkit looks (this environment, the "
        f"`nanobot` command on PATH, {tmp_path / 'releases'}): run `sessionkit releases "
        "install 0.3.0`, or pass nanobot=<its python or venv>"
    )


@pytest.mark.conformance
def test_the_nanobot_command_on_path_is_followed(tmp_path: Path, monkeypatch) -> None:
    python = release("0.3.5").python
    command = tmp_path / "nanobot"
    command.write_text(f"#!{python}\nimport sys\n")
    command.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_release("0.3.5", releases=tmp_path / "releases") == python


@pytest.mark.conformance
def test_a_managed_venv_counts_only_when_complete_and_right(tmp_path: Path) -> None:
    venv = release("0.3.5").python.parent.parent
    folder = tmp_path / "releases" / "0.3.5"
    (folder / "bin").mkdir(parents=True)
    os.symlink(venv / "bin" / "python", folder / "bin" / "python")
    os.symlink(venv / "lib", folder / "lib")
    (folder / "pyvenv.cfg").write_bytes((venv / "pyvenv.cfg").read_bytes())
    assert installed(tmp_path / "releases") == {}  # no marker: an install cut short
    (folder / ".sessionkit-release.json").write_text(json.dumps({"nanobot-ai": "0.3.5"}))
    assert installed(tmp_path / "releases") == {"0.3.5": folder / "bin" / "python"}
    (folder / ".sessionkit-release.json").write_text(json.dumps({"nanobot-ai": "0.3.0"}))
    assert installed(tmp_path / "releases") == {}


def test_install_refuses_a_folder_others_may_write(tmp_path: Path) -> None:
    (tmp_path / "releases").mkdir(mode=0o777)
    os.chmod(tmp_path / "releases", 0o777)
    with pytest.raises(PermissionError, match="writable by other users"):
        installs.install("0.3.5", releases=tmp_path / "releases")
