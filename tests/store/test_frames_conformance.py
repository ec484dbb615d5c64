"""Differential: a store loaded by each later release's own ``SessionManager`` and by
``sk.load`` holds the same sessions, under the same keys (a pre-key file's from its name),
with the same messages (0.3.5's rewritten legacy exec records) and histories, each message
counted as the release counts it (with tiktoken and without)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support.releases import release

import sessionkit as sk
from sessionkit.nanobot.naming import storage_key

pytestmark = pytest.mark.conformance

WORKSPACE_ID = "0123456789abcdef0123456789abcdef"


def _file(key: str | None, messages: list[dict[str, Any]], **meta: Any) -> str:
    record = {"_type": "metadata", "created_at": "2026-02-01T09:00:00", "metadata": {}}
    record |= {"updated_at": "2026-02-01T09:30:00", "last_consolidated": 0, **meta}
    if key is not None:
        record["key"] = key
    lines = [record, *messages]
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines)


CHAT = [
    {"role": "user", "content": "整理一下今天的会议记录", "timestamp": "2026-02-01T09:00:00"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "会议/今天.md"}'},
            }
        ],
        "reasoning_content": "读文件。",
    },
    {
        "role": "tool",
        "content": "- 发布推迟\n- 预算通过",
        "tool_call_id": "call_1",
        "name": "read_file",
    },
    {"role": "assistant", "content": "发布推迟，预算通过。Special text: <|endoftext|>"},
    {"role": "user", "content": [{"type": "text", "text": "看图"}, {"type": "image_url"}]},
]

EXEC = [
    {"role": "user", "content": "answer yes to the installer"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_9",
                "type": "function",
                "function": {
                    "name": "write_stdin",
                    "arguments": '{"session_id": 2, "chars": "y\\n", "yield_time_ms": 800}',
                },
            }
        ],
    },
    {"role": "tool", "content": "Installed.", "tool_call_id": "call_9", "name": "write_stdin"},
    {"role": "assistant", "content": "The installer finished."},
]
"""A turn 0.3.1 saved: its exec tool was ``write_stdin``, which 0.3.5 rewrites on load."""

HEARTBEAT = [
    {"role": "user", "content": "Read HEARTBEAT.md and follow it."},
    {"role": "assistant", "content": "HEARTBEAT_OK"},
]

STORE = {
    f"{storage_key('webui:meeting')}.jsonl": _file("webui:meeting", CHAT),
    f"{storage_key('cli:direct')}.jsonl": _file("cli:direct", EXEC),
    f"{storage_key('heartbeat')}.jsonl": _file(None, HEARTBEAT),
}
"""A chat, a session with legacy exec records, and a pre-key heartbeat session as 0.3.0
renamed it (``aGVhcnRiZWF0.jsonl``, metadata without ``key``)."""


def _load(version: str, tmp_path: Path, files: dict[str, str], tokens: str) -> sk.Corpus:
    """``files`` where the release keeps them (0.3.5: a workspace's folder under the config
    dir), loaded by sessionkit."""
    if version == "0.3.5":
        folder = tmp_path / "config" / "sessions" / WORKSPACE_ID
    else:
        folder = tmp_path / "workspace" / "sessions"
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return sk.load(folder, tokens=tokens, cache=False, progress=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("tokens", ["tiktoken", "fallback"])
@pytest.mark.parametrize("version", ["0.3.0", "0.3.5"])
def test_frames_count_each_message_as_its_release(
    version: str, tokens: str, tmp_path: Path
) -> None:
    (theirs,) = release(version).run(
        "release_scenarios:read_store", [{"args": [STORE]}], tiktoken=tokens == "tiktoken"
    )
    loaded = theirs["returned"]
    corpus = _load(version, tmp_path, STORE, tokens)
    assert sorted(corpus.keys()) == sorted(loaded)
    frame = corpus.messages
    assert sorted(loaded) == ["cli:direct", "heartbeat", "webui:meeting"]
    tool = "exec_session" if version == "0.3.5" else "write_stdin"
    assert loaded["cli:direct"]["messages"][2]["name"] == tool
    assert frame[frame.session_key == "cli:direct"]["name"].tolist()[2] == tool
    for key, found in loaded.items():
        assert corpus[key].policy == f"nanobot-{version}"
        assert corpus[key].messages == found["messages"]
        assert corpus[key].get_history() == found["history"]
        ours = frame[frame.session_key == key]["tokens"].tolist()
        assert ours == [pd.NA if n is None else n for n in found["tokens"]]
        assert corpus.sessions.loc[key, "tokens"] == sum(n for n in found["tokens"] if n)
