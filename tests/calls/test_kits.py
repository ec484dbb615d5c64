"""Kits: asked once from the installed release, cached privately, trusted only when whole."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from sessionkit.calls.kits import KitError, kit_for, package_folder, shown_at

pytestmark = pytest.mark.conformance  # every kit here is probed from nanobot-ai 0.2.2

PYTHON = Path(sys.executable)  # the test environment holds nanobot-ai 0.2.2


def _kit(workspace: Path, cache: Path | bool):
    return kit_for("0.2.2", "probe_022.py", PYTHON, workspace, channel="cli", cache_dir=cache)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "workspace"
    (folder / "memory").mkdir(parents=True)
    (folder / "memory" / "MEMORY.md").write_text("The user prefers metric units.\n")
    (folder / "SOUL.md").write_text("Be brief.\n")
    return folder


def _listing(folder: Path) -> list[tuple[str, int, int]]:
    return sorted(
        (str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    )


def test_probing_never_writes_into_the_workspace(workspace: Path, tmp_path: Path) -> None:
    before = _listing(workspace)
    kit = _kit(workspace, tmp_path / "cache")
    assert _listing(workspace) == before
    assert "The user prefers metric units." in kit.system_text
    assert kit.joiner.join(text for _, text, _ in kit.system) == kit.system_text


def test_a_kit_is_read_back_from_the_cache(workspace: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _kit(workspace, cache)
    (path,) = (cache / "kits-1").iterdir()
    assert stat.S_IMODE(os.stat(cache / "kits-1").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # A cached kit edited and re-sealed is what comes back: proof the probe did not run again.
    stored = json.loads(path.read_text())
    stored["kit"]["system_text"] = "edited"
    from sessionkit.calls import kits

    stored["check"] = kits._checksum(stored["kit"])
    path.write_text(json.dumps(stored))
    assert _kit(workspace, cache).system_text == "edited"
    assert first.system_text != "edited"


def test_a_damaged_kit_is_discarded_and_asked_again(workspace: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _kit(workspace, cache)
    (path,) = (cache / "kits-1").iterdir()
    stored = json.loads(path.read_text())
    stored["kit"]["system_text"] = "tampered"
    path.write_text(json.dumps(stored))
    with pytest.warns(UserWarning, match=r"damaged kit cache file .* \(checksum mismatch\)"):
        again = _kit(workspace, cache)
    assert again == first
    path.write_bytes(b"\x00garbage")
    with pytest.warns(UserWarning, match=r"unreadable: JSONDecodeError"):
        assert _kit(workspace, cache) == first


def test_a_changed_workspace_file_makes_a_new_kit(workspace: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _kit(workspace, cache)
    (workspace / "memory" / "MEMORY.md").write_text("The user prefers imperial units.\n")
    second = _kit(workspace, cache)
    assert "imperial" in second.system_text and "imperial" not in first.system_text
    assert len(list((cache / "kits-1").iterdir())) == 2


def test_no_cache_keeps_nothing(workspace: Path, tmp_path: Path) -> None:
    _kit(workspace, False)
    assert not (tmp_path / "cache").exists()


def test_a_failing_probe_says_why(tmp_path: Path) -> None:
    with pytest.raises(KitError, match=r"the nanobot probe \(probe_022\.py, .*\) failed"):
        kit_for("0.2.2", "probe_022.py", Path("/bin/false"), tmp_path, cache_dir=False)


PINNED = {
    "workspace_path": "/home/user/.nanobot/workspace",
    "system": "Linux",
    "machine": "x86_64",
    "python_version": "3.11.2",
    "path": "/usr/bin:/bin",
}


def test_a_pinned_runtime_gives_the_same_kit_from_any_folder(tmp_path: Path) -> None:
    """A workspace moved to another folder or machine renders the prompt it ran with."""
    kits = []
    for name in ("a", "a-much-longer-folder-name"):
        folder = tmp_path / name / "workspace"
        (folder / "memory").mkdir(parents=True)
        (folder / "memory" / "MEMORY.md").write_text(f"Notes live in {folder}/notes.\n")
        kits.append(
            kit_for(
                "0.2.2",
                "probe_022.py",
                PYTHON,
                folder,
                channel="cli",
                runtime=PINNED,
                cache_dir=False,
            )
        )
    first, second = kits
    assert first.system_text == second.system_text and first.tools == second.tools
    assert "Notes live in /home/user/.nanobot/workspace/notes." in first.system_text
    assert str(tmp_path) not in json.dumps(first.raw)


def test_shown_at_rewrites_the_workspace_path_in_every_string() -> None:
    kit = {"a": ["/w/x and /w", 3, {"b": "/w/"}], "n": None, "/w": "key kept"}
    assert shown_at(kit, "/w", "/s") == {
        "a": ["/s/x and /s", 3, {"b": "/s/"}],
        "n": None,
        "/w": "key kept",
    }


def test_a_pinned_release_path_hides_where_the_release_is_installed(workspace: Path) -> None:
    """0.2.2 names its skills' files under its own package folder: pinned, no install path."""
    installed = package_folder(PYTHON)
    plain = kit_for("0.2.2", "probe_022.py", PYTHON, workspace, channel="cli", cache_dir=False)
    assert installed in plain.system_text
    pinned = kit_for(
        "0.2.2",
        "probe_022.py",
        PYTHON,
        workspace,
        channel="cli",
        runtime={"release_path": "/opt/nanobot"},
        cache_dir=False,
    )
    assert installed not in json.dumps(pinned.raw)
    assert pinned.system_text == plain.system_text.replace(installed, "/opt/nanobot")


def test_a_missing_workspace_is_made_in_a_scratch_folder_and_shown_at_its_path(
    tmp_path: Path,
) -> None:
    """A workspace that does not exist (a config's relative path read against the current
    folder) is the empty one the release would make there: made in a scratch folder and shown
    at its own path, so nothing appears where it would be, even for a moment (the folder
    above it keeps its modification time)."""
    here = tmp_path / "here"
    here.mkdir()
    before = here.stat().st_mtime_ns
    kit = _kit(here / "workspace", False)
    assert here.stat().st_mtime_ns == before and list(here.iterdir()) == []
    assert str(here / "workspace") in kit.system_text
    assert "sessionkit-kit-" not in json.dumps(kit.raw)
