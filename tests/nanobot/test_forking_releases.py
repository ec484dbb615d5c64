"""Forks per release: ``sk.fork`` of a ``Session(policy=...)`` against the release's own
``SessionManager.fork_session_before_user_index``, file name and bytes (times aside)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.releases import release

from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.writer import save_session
from sessionkit.simulate.states import message_states
from sessionkit.store.loading import load
from sessionkit.views.transcript import transcript_rows
from sessionkit.writers.forking import fork

pytestmark = pytest.mark.conformance

SOURCE: dict[str, Any] = {
    "key": "webui:f00d",
    "created_at": "2026-01-01T10:00:00",
    "updated_at": "2026-01-02T11:00:00",
    "metadata": {
        "title": "a title",
        "title_user_edited": True,
        "goal_state": {"g": 1},
        "pending_user_followups": ["x"],
        "session_handle": "h",
        "webui_recovery": {"r": 1},
        "_last_summary": {"text": "older turns", "last_active": "2026-01-01T10:30:00"},
        "keep": "me",
    },
    "messages": [
        {"role": "user", "content": "one", "timestamp": "2026-01-01T10:00:00"},
        {"role": "assistant", "content": "reply one"},
        {
            "role": "user",
            "content": "Continue the active task from the working-memory checkpoint above.",
            "_hidden_history": True,
        },
        {
            "role": "user",
            "content": "two\n\n[Runtime context]\nchannel: webui",
            "_runtime_context": {"version": 1, "suffix": "[Runtime context]\nchannel: webui"},
        },
        {"role": "assistant", "content": "reply two"},
        {"role": "user", "content": "cron ping", "_cron_turn": True},
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": "reply three"},
    ],
    "last_consolidated": 3,
}


def _untimed(lines: list[str]) -> list[Any]:
    """The file's records with the metadata line's wall-clock times blanked."""
    records = [json.loads(line) for line in lines]
    records[0].update(created_at="<now>", updated_at="<now>")
    return records


def _ours(version: str, index: int, tmp_path: Path) -> Any:
    source = Session(
        key=SOURCE["key"],
        messages=json.loads(json.dumps(SOURCE["messages"])),
        metadata=json.loads(json.dumps(SOURCE["metadata"])),
        last_consolidated=SOURCE["last_consolidated"],
        policy=f"nanobot-{version}",
    )
    folder = tmp_path / f"{version}-{index}"
    try:
        made = fork(source, "webui:f00d-fork", index, sessions_dir=folder, create=True)
    except IndexError:
        return None
    assert made.path is not None
    return {"name": made.path.name, "lines": made.path.read_text(encoding="utf-8").splitlines()}


@pytest.mark.parametrize("version", ["0.3.0", "0.3.5"])
def test_forks_equal_the_release(version: str, tmp_path: Path) -> None:
    nanobot = release(version)
    indices = list(range(-1, 7))
    cases = [{"args": [SOURCE, "webui:f00d-fork", k]} for k in indices]
    theirs = nanobot.run("release_scenarios:fork_file", cases)
    compared = 0
    for k, result in zip(indices, theirs, strict=True):
        expected = result["returned"]
        ours = _ours(version, k, tmp_path)
        if expected is None:
            assert ours is None, k
            continue
        assert ours["name"] == expected["name"], k
        assert _untimed(ours["lines"]) == _untimed(expected["lines"]), k
        assert ours["lines"][1:] == expected["lines"][1:], k
        compared += 1
    assert compared == {"0.3.0": 6, "0.3.5": 4}[version]


@pytest.mark.parametrize("version", ["0.3.0", "0.3.5"])
def test_the_release_loads_our_fork_unchanged(version: str, tmp_path: Path) -> None:
    made = _ours(version, 2, tmp_path)
    text = "\n".join(made["lines"]) + "\n"
    (loaded,) = release(version).run(
        "release_scenarios:load_file", [{"args": [made["name"], text]}]
    )
    session = loaded["returned"]
    records = [json.loads(line) for line in made["lines"]]
    assert session["key"] == "webui:f00d-fork"
    assert session["messages"] == records[1:]
    assert session["metadata"] == records[0]["metadata"]


@pytest.mark.parametrize("version", ["0.3.0", "0.3.5"])
def test_the_turn_shown_is_where_the_release_forks(version: str, tmp_path: Path) -> None:
    """The explorer's transcript, the messages frame and ``message_states`` show turn ``k`` at
    the message where the release's own fork before user message ``k`` cuts."""
    source = Session(
        key=SOURCE["key"],
        messages=json.loads(json.dumps(SOURCE["messages"])),
        metadata=json.loads(json.dumps(SOURCE["metadata"])),
        policy=f"nanobot-{version}",
    )
    save_session(
        source, tmp_path / "sessions", naming=get_policy(source.policy).naming, create=True
    )
    (loaded,) = load(tmp_path / "sessions", cache=False, policy=source.policy)
    states = message_states(loaded).frame
    shown = {
        r["user"]: r["idx"] for r in transcript_rows(loaded, [0] * len(loaded)) if r["user"] >= 0
    }
    frame_turns = load(tmp_path / "sessions", cache=False, policy=source.policy).messages
    first = frame_turns[frame_turns["user_index"] >= 0].groupby("user_index")["idx"].min()
    assert (
        first.to_dict()
        == shown
        == states.groupby("user_index")["idx"].min().drop(-1, errors="ignore").to_dict()
    )
    cases = [{"args": [SOURCE, "webui:f00d-fork", k]} for k in shown]
    theirs = release(version).run("release_scenarios:fork_file", cases)
    cuts = {k: len(r["returned"]["lines"]) - 1 for k, r in zip(shown, theirs, strict=True)}
    assert cuts == shown
    assert len(shown) == {"0.3.0": 5, "0.3.5": 3}[version]
