"""Stores written by each later release's own ``SessionManager`` load with ``sk.load``.

0.3.0 keeps base64url-named files in ``<workspace>/sessions/``; 0.3.5 keeps them outside the
workspace, in ``<config dir>/sessions/<workspace id>/``, found through
``<workspace>/.nanobot/workspace-id``.  Each session's policy is the release that wrote it,
and loading writes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.releases import release

import sessionkit as sk
from sessionkit.nanobot.naming import storage_key
from sessionkit.nanobot.reader import read_session_file

pytestmark = pytest.mark.conformance

SESSIONS: list[dict[str, Any]] = [
    {
        "key": "telegram:42",
        "metadata": {"title": "weather"},
        "messages": [
            {"role": "user", "content": "rain?", "timestamp": "2026-01-01T10:00:00"},
            {"role": "assistant", "content": "no"},
            {"role": "user", "content": "sure?", "timestamp": "2026-01-01T10:01:00"},
            {"role": "assistant", "content": "yes"},
        ],
    },
    {
        "key": "webui:a/b c",
        "metadata": {},
        "messages": [
            {
                "role": "user",
                "content": "hi\n\n[Runtime context]\nchannel: webui",
                "_runtime_context": {"version": 1, "suffix": "[Runtime context]\nchannel: webui"},
            },
            {"role": "assistant", "content": "hello"},
        ],
    },
]
CHECKPOINT = {"summary": "they talked about rain", "insert_at": 2}


def _tree(folder: Path) -> list[tuple[str, int, int]]:
    """Every entry under ``folder`` with its size and mtime: what loading must not change."""
    return sorted(
        (str(p.relative_to(folder)), p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in folder.rglob("*")
    )


def _store(version: str, tmp_path: Path, sessions: list[dict[str, Any]]) -> dict[str, Any]:
    (made,) = release(version).run(
        "release_scenarios:make_workspace", [{"args": [str(tmp_path), sessions]}]
    )
    assert "returned" in made, made
    return made["returned"]


def test_a_030_workspace_loads_with_its_policy(tmp_path: Path) -> None:
    made = _store("0.3.0", tmp_path, SESSIONS)
    before = _tree(tmp_path)
    corpus = sk.load(tmp_path / "workspace")
    assert _tree(tmp_path) == before
    assert sorted(corpus.keys()) == ["telegram:42", "webui:a/b c"]
    for spec in SESSIONS:
        session = corpus[spec["key"]]
        assert session.policy == "nanobot-0.3.0"
        assert session.messages == spec["messages"]
        assert session.path is not None and session.path.name in made["files"]


def test_a_035_workspace_loads_through_its_workspace_id(tmp_path: Path) -> None:
    turn = {"phase": "tools", "pending": ["c1"]}
    sessions = [
        {**SESSIONS[0], "checkpoint": CHECKPOINT},
        {**SESSIONS[1], "runtime_checkpoint": turn},
    ]
    made = _store("0.3.5", tmp_path, sessions)
    folder = Path(made["sessions_dir"])
    assert folder.parent == (tmp_path / "config" / "sessions").resolve()
    before = _tree(tmp_path)
    corpus = sk.load(tmp_path / "workspace", config_dir=tmp_path / "config")
    assert _tree(tmp_path) == before
    rain = corpus["telegram:42"]
    assert rain.policy == "nanobot-0.3.5"
    assert rain.last_archived == 2
    assert rain.messages[2]["_hidden_history"] is True
    assert rain.metadata["_last_summary"]["text"] == CHECKPOINT["summary"]
    stored = [json.loads(line) for line in (folder / rain.path.name).read_text().splitlines()]
    assert rain.messages == stored[1:]
    assert corpus["webui:a/b c"].messages == SESSIONS[1]["messages"]
    frame = corpus.messages
    hidden = frame[frame.session_key == "telegram:42"].hidden.tolist()
    assert hidden == [False, False, True, False, False]
    runtime = frame[frame.session_key == "webui:a/b c"].runtime_context.tolist()
    assert runtime == [True, False]
    assert corpus.sessions.loc["telegram:42", "last_archived"] == 2
    assert corpus.sessions.loc["telegram:42", "policy"] == "nanobot-0.3.5"
    sidecar = corpus.sessions.loc["webui:a/b c", "runtime_checkpoint"]
    assert (sidecar["session_key"], sidecar["checkpoint"]) == ("webui:a/b c", turn)
    assert corpus.sessions.loc["telegram:42", "runtime_checkpoint"] is None
    assert len(corpus) == 2  # the sidecar is not read as a session


def test_a_035_workspace_without_its_config_dir_says_where_it_looked(tmp_path: Path) -> None:
    _store("0.3.5", tmp_path, SESSIONS[:1])
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(sk.nanobot.reader.SessionPathError, match="workspace id"):
        sk.load(tmp_path / "workspace", config_dir=tmp_path / "elsewhere")


@pytest.mark.parametrize("version", ["0.3.0", "0.3.5"])
def test_no_later_release_loads_a_session_with_a_line_past_jsons_limits(
    version: str, tmp_path: Path
) -> None:
    """0.3.x lose the session over a huge integer and raise over deep nesting, as 0.2.2 loses
    it over both: sessionkit keeps the rest, holds the line, and replays leave it out."""
    meta = {"_type": "metadata", "key": "cli:x", "metadata": {}, "last_consolidated": 0}
    kept = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    past = ['{"role": "user", "n": 1' + "0" * 4300 + "}", '{"c": ' + "[" * 990 + "]" * 990 + "}"]
    name = f"{storage_key('cli:x')}.jsonl"
    texts = [
        "\n".join([json.dumps(meta), json.dumps(kept[0]), line, json.dumps(kept[1])]) + "\n"
        for line in past
    ]
    results = release(version).run(
        "release_scenarios:load_file", [{"args": [name, text]} for text in texts]
    )
    deep = "maximum recursion depth exceeded while decoding a JSON array from a unicode string"
    assert results == [{"returned": None}, {"raised": "RecursionError", "message": deep}]
    for line, text in zip(past, texts, strict=True):
        (tmp_path / name).write_text(text)
        session, problems = read_session_file(tmp_path / name)
        assert (session.messages, session.held_lines) == (kept, ((1, line),))
        assert [(p.line_no, p.skipped) for p in problems] == [(3, True)]
        assert session.get_history() == kept
