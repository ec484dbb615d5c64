"""sk.request on the bundled 0.2.2 store (the test environment holds nanobot-ai 0.2.2): its
parts, its errors, and when it says the prompt is today's rather than the one sent."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import sessionkit as sk

KEY = "cli:direct"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    folder = tmp_path_factory.mktemp("workspace")
    shutil.copytree(data_dir / "sessions", folder / "sessions")
    (folder / "memory").mkdir()
    (folder / "memory" / "MEMORY.md").write_text("The user prefers metric units.\n")
    old = 1_600_000_000  # 2020: before every stored message
    os.utime(folder / "memory" / "MEMORY.md", (old, old))
    return folder


def test_parts_name_every_piece_and_the_memory(workspace: Path) -> None:
    session = sk.load(workspace)[KEY]
    request = sk.request(session, turn=1)
    parts = request.parts.set_index("part")
    assert list(parts.index) == [
        "system: identity",
        "system: tool contract",
        "system: memory",
        "system: active skills",
        "system: skills summary",
        "tools",
        "history",
        "current",
        "steps",
    ]
    assert request.as_of_now is False and request.notes == ()
    assert request.messages[0]["role"] == "system"
    assert "The user prefers metric units." in request.messages[0]["content"]
    assert parts.loc["history", "messages"] == len(request.loop_messages) - 2
    assert bool(parts.loc["current", "inferred"]) is True  # 0.2.2's clock is not on disk


def test_a_prompt_file_changed_since_makes_it_as_of_now(workspace: Path, tmp_path: Path) -> None:
    copy = tmp_path / "workspace"
    shutil.copytree(workspace, copy)
    (copy / "memory" / "MEMORY.md").write_text("The user prefers imperial units.\n")
    request = sk.request(sk.load(copy)[KEY], turn=1)
    assert request.as_of_now is True
    assert request.notes == (
        "the workspace files the prompt reads changed after the turn; rebuilt from "
        f"{copy.resolve()} as it is now",
    )


def test_out_of_range_turns_and_steps_say_so(workspace: Path) -> None:
    session = sk.load(workspace)[KEY]
    with pytest.raises(IndexError, match=rf"turn {session.n_user_turns} is out of range"):
        sk.request(session, turn=session.n_user_turns)
    with pytest.raises(IndexError, match=r"step 5 is out of range: turn 1 of session 'cli:direct'"):
        sk.request(session, turn=1, step=5)


def test_a_session_without_a_workspace_asks_for_one(workspace: Path) -> None:
    session = sk.load(workspace)[KEY].copy()
    session.path = None
    with pytest.raises(ValueError, match=r"pass workspace=<the workspace folder>"):
        sk.request(session, turn=1)
