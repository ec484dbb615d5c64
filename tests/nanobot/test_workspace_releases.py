"""Forks into a 0.3.5 workspace land where 0.3.5 looks: nanobot 0.3.5's own
``SessionManager``, run with ``--config <config file>``, lists and loads them unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.releases import release

import sessionkit as sk

pytestmark = pytest.mark.conformance

KEY = "telegram:42"
SESSION: dict[str, Any] = {
    "key": KEY,
    "metadata": {"title": "weather"},
    "messages": [
        {"role": "user", "content": "rain?", "timestamp": "2026-01-01T10:00:00"},
        {"role": "assistant", "content": "no"},
        {"role": "user", "content": "sure?", "timestamp": "2026-01-01T10:01:00"},
        {"role": "assistant", "content": "yes"},
        {"role": "user", "content": "really?", "timestamp": "2026-01-01T10:02:00"},
        {"role": "assistant", "content": "really"},
    ],
}


def test_forks_into_a_035_workspace_are_listed_and_loaded_by_035(tmp_path: Path) -> None:
    nanobot = release("0.3.5")
    (made,) = nanobot.run(
        "release_scenarios:make_workspace", [{"args": [str(tmp_path), [SESSION]]}]
    )
    assert "returned" in made, made
    workspace = tmp_path / "workspace"
    config_file = tmp_path / "config" / "config.json"
    config_file.write_text("{}\n")
    corpus = sk.load(workspace, config_dir=config_file, cache=False)
    one = sk.fork(corpus, f"{KEY}:fork", 1, key=KEY, sessions_dir=workspace, config_dir=config_file)
    many = sk.fork_many(
        corpus, [0, 3], key=KEY, sessions_dir=workspace, config_dir=config_file.parent
    )
    forks = [one, *many]
    assert {f.path.parent for f in forks} == {Path(made["returned"]["sessions_dir"])}
    assert not (workspace / "sessions").exists()

    home = tmp_path / "home"
    home.mkdir()
    (theirs,) = nanobot.run(
        "release_scenarios:workspace_sessions",
        [{"args": [str(config_file), str(workspace)]}],
        env={"HOME": str(home)},
    )
    found = theirs["returned"]
    assert Path(found["sessions_dir"]) == one.path.parent
    assert found["keys"] == sorted([KEY, *(f.key for f in forks)])
    for fork in forks:
        loaded = found["sessions"][fork.key]
        assert loaded["messages"] == json.loads(json.dumps(fork.messages))
        assert loaded["metadata"] == fork.metadata
