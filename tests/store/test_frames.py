"""Entries and frames built for many sessions at once hold each session's own values: per-session
sums, times, turns, escapes and problems are gathered in one pass, never mixed across sessions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sessionkit as sk
from sessionkit.nanobot.naming import storage_key
from sessionkit.nanobot.policies import RELEASES, get_policy
from sessionkit.nanobot.reader import read_session_file
from sessionkit.nanobot.session import Session
from sessionkit.store.frames import (
    _arrow_strings,
    _utf8_column,
    build_entries,
    messages_frame,
    sessions_frame,
)

BAD = "bad \ud800 text"
STAMP = "2026-01-01T10:00:0{}"


def _meta(n: int) -> dict[str, Any]:
    return {
        "_type": "metadata",
        "key": f"cli:{n}",
        "created_at": "2026-01-01T10:00:00",
        "updated_at": "2026-01-01T10:01:00",
        "metadata": {},
        "last_consolidated": 0,
    }


SESSIONS: list[list[dict[str, Any]]] = [
    [
        {"role": "user", "content": "hi", "timestamp": STAMP.format(3)},
        {"role": "assistant", "content": BAD, "timestamp": STAMP.format(1)},
    ],
    [],
    [
        {"role": "user", "content": BAD, "timestamp": "t1", "name": "n\udcff"},
        {"role": "tool", "content": "ok", "timestamp": "9999-01-01T00:00:00", "tool_call_id": "i"},
        {"role": "user", "content": BAD, "timestamp": None},
    ],
    [{"role": "assistant", "content": "no time", "timestamp": "t2"}],
    [{"role": "user", "content": "tail", "timestamp": STAMP.format(5)}],
]


def _read(folder: Path) -> tuple[list[Session], dict[str, Any]]:
    folder.mkdir(exist_ok=True)
    sessions, problems = [], {}
    for n, messages in enumerate(SESSIONS):
        path = folder / f"cli_{n}.jsonl"
        lines = "".join(json.dumps(r) + "\n" for r in [_meta(n), *messages])
        path.write_bytes(lines.encode("utf-8", "surrogatepass"))
        session, found = read_session_file(path)
        assert session is not None
        sessions.append(session)
        problems[str(path)] = found
    return sessions, problems


def test_entries_built_together_equal_each_built_alone(tmp_path: Path) -> None:
    sessions, problems = _read(tmp_path)
    together = build_entries(sessions, problems, tokens="fallback")
    alone = [build_entries([s], problems, tokens="fallback")[0] for s in sessions]
    for joint, own in zip(together, alone, strict=True):
        assert joint.table.equals(own.table)
        assert json.dumps(joint.meta) == json.dumps(own.meta)
    metas = [e.meta for e in together]
    assert [m["escapes"] for m in metas] == [
        {"text": {"1": BAD}, "tool_call_id": {}, "name": {}},
        {"text": {}, "tool_call_id": {}, "name": {}},
        {"text": {"0": BAD, "2": BAD}, "tool_call_id": {}, "name": {"0": "n\udcff"}},
        {"text": {}, "tool_call_id": {}, "name": {}},
        {"text": {}, "tool_call_id": {}, "name": {}},
    ]
    stamp = pd.Timestamp
    assert [(m["first_message_at"], m["last_message_at"]) for m in metas] == [
        (stamp(STAMP.format(1)).value, stamp(STAMP.format(3)).value),
        (None, None),
        (None, None),
        (None, None),
        (stamp(STAMP.format(5)).value, stamp(STAMP.format(5)).value),
    ]
    releases = ("nanobot-0.2", "nanobot-0.3.0", "nanobot-0.3.5")
    assert [m["tokens"] for m in metas] == [dict.fromkeys(releases)] * 5
    # 0.2.2: characters // 4 + 4; 0.3.x: UTF-8 bytes + 4, and a lone surrogate cannot be counted
    by_bytes = [6, None, 8, 11, 8]
    assert [list(m["tokens_fallback"].values()) for m in metas] == [
        list(counts) for counts in zip([10, None, 18, 5, 5], by_bytes, by_bytes, strict=True)
    ]
    assert [m["turns"]["nanobot-0.2"] for m in metas] == [1, 0, 2, 0, 1]
    outside = [p for p in metas[2]["problems"] if "9999" in p[1]]
    assert [(p[0], p[1].split(" is outside")[0]) for p in outside] == [
        (3, "timestamp '9999-01-01T00:00:00'")
    ]
    assert [len(m["problems"]) for m in metas] == [
        len(build_entries([s], problems, tokens="fallback")[0].meta["problems"]) for s in sessions
    ]


def test_the_messages_frame_puts_every_sessions_escapes_back_in_order(tmp_path: Path) -> None:
    sessions, problems = _read(tmp_path)
    frame = messages_frame(build_entries(sessions, problems, tokens="fallback"))
    texts = [m["content"] for messages in SESSIONS for m in messages]
    assert frame["text"].tolist() == texts
    names = frame["name"].tolist()
    assert [None if v is pd.NA else v for v in names] == [
        m.get("name") for ms in SESSIONS for m in ms
    ]
    assert frame["session_key"].tolist() == [
        f"cli:{n}" for n, ms in enumerate(SESSIONS) for _ in ms
    ]
    assert frame["user_index"].tolist() == [0, 0, 0, 0, 1, -1, 0]


@pytest.mark.parametrize("sidecar_kind", ["file", "folder"])
def test_only_a_sidecar_that_is_there_is_read(tmp_path: Path, sidecar_kind: str) -> None:
    sessions, problems = _read(tmp_path / "sessions")
    sidecar = tmp_path / "sessions" / "cli_3.checkpoint.json"
    if sidecar_kind == "file":
        sidecar.write_text('{"step": 2}', encoding="utf-8")
    else:
        sidecar.mkdir()
    (tmp_path / "sessions" / "cli_9.checkpoint.json").write_text('{"x": 1}', encoding="utf-8")
    frame = sessions_frame(build_entries(sessions, problems, tokens="fallback"))
    found = {"step": 2} if sidecar_kind == "file" else None
    assert frame["runtime_checkpoint"].tolist() == [None, None, None, found, None]


def test_tiny_entries_share_a_string_chunk_and_large_ones_stay_uncopied(tmp_path: Path) -> None:
    sizes = [2, 1, 70, 0, 3, 1]
    sessions = []
    for n, size in enumerate(sizes):
        path = tmp_path / f"cli_{n}.jsonl"
        messages = [{"role": "user", "content": f"{n}.{i}"} for i in range(size)]
        path.write_text("".join(json.dumps(r) + "\n" for r in [_meta(n), *messages]))
        session, _ = read_session_file(path)
        assert session is not None
        sessions.append(session)
    entries = build_entries(sessions, tokens="fallback")
    text = messages_frame(entries)["text"].array._pa_array
    assert text.to_pylist() == [f"{n}.{i}" for n, size in enumerate(sizes) for i in range(size)]
    assert [len(chunk) for chunk in text.chunks] == [3, 70, 4]
    large = entries[2].table.column("text").chunks[0]
    assert text.chunks[1].buffers()[2].address == large.buffers()[2].address


@given(st.lists(st.none() | st.text(st.characters(exclude_categories=["Cs"]))))
def test_a_utf8_column_equals_arrows_own_conversion(values: list[str | None]) -> None:
    column = _utf8_column(values)
    column.validate(full=True)
    assert column.equals(pa.array(values, type=pa.large_string()))
    assert column.null_count == values.count(None)


def test_strings_arrow_cannot_hold_are_null_and_returned_by_row() -> None:
    column, odd = _arrow_strings(["a", "b\ud800", None, 3, "ü"])
    assert column.to_pylist() == ["a", None, None, None, "ü"]
    assert odd == {1: "b\ud800"}


def _chat_030() -> list[dict[str, Any]]:
    """A 0.3.0 WebUI chat as such files hold them: Chinese and English turns, a tool round with
    reasoning, a tool result and a reply quoting special-token text."""
    calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "笔记/周报.md"}'},
        }
    ]
    return [
        {
            "role": "user",
            "content": "帮我总结一下这周的周报，重点是进度。",
            "timestamp": STAMP.format(0),
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": calls,
            "reasoning_content": "先读文件，再按项目分组。",
            "timestamp": STAMP.format(1),
        },
        {
            "role": "tool",
            "content": "# 周报\n- 数据管道：完成 80%\n- 前端：等待评审",
            "tool_call_id": "call_1",
            "name": "read_file",
            "timestamp": STAMP.format(2),
        },
        {
            "role": "assistant",
            "content": "本周：数据管道完成 80%，前端等待评审。The tokenizer stops at <|endoftext|>.",
            "timestamp": STAMP.format(3),
        },
    ]


def _workspace_030(tmp_path: Path) -> Path:
    """A 0.3.0 workspace holding :func:`_chat_030` under its base64url file name."""
    folder = tmp_path / "workspace" / "sessions"
    folder.mkdir(parents=True)
    meta = _meta(0) | {"key": "webui:weekly"}
    lines = [meta, *_chat_030()]
    (folder / f"{storage_key('webui:weekly')}.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), encoding="utf-8"
    )
    return tmp_path / "workspace"


@pytest.mark.parametrize("cache", [False, True])
def test_frames_count_with_each_sessions_own_release(tmp_path: Path, cache: bool) -> None:
    """A 0.3.0 session is counted by 0.3.0's rules (UTF-8 bytes + 4 without tiktoken; bytes
    + 4 for special-token text with it), equal to its policy's estimates message by message,
    cold and warm; replayed with another release, by that release's."""
    workspace = _workspace_030(tmp_path)
    chat = _chat_030()
    where = {"cache": tmp_path / "cache"} if cache else {"cache": False}
    expected = {
        ("nanobot-0.3.0", "fallback"): [58, 164, 81, 96],
        ("nanobot-0.2", "fallback"): [8, 36, 15, 18],
        ("nanobot-0.3.0", "tiktoken"): [23, 58, 36, 96],
        ("nanobot-0.2", "tiktoken"): [23, 58, 36, 18],
    }
    for _ in range(2):  # cold, then (with the cache) warm
        for (policy, tokens), counts in expected.items():
            chosen = None if policy == "nanobot-0.3.0" else policy
            corpus = sk.load(workspace, tokens=tokens, policy=chosen, progress=False, **where)
            release = get_policy(policy)
            count = (
                release.estimate_message_tokens
                if tokens == "tiktoken"
                else release.fallback_message_tokens
            )
            assert [count(m) for m in chat] == counts
            assert corpus.messages["tokens"].tolist() == counts
            assert corpus.sessions.loc["webui:weekly", ["policy", "tokens"]].tolist() == [
                policy,
                sum(counts),
            ]


_FAMILY_022 = {"tiktoken": [23, 58, 36, 18], "fallback": [8, 36, 15, 18]}


def _expected_counts(name: str, tokens: str) -> list[int] | None:
    """The counts of :func:`_chat_030` a frame holds under release ``name``, written out."""
    release = get_policy(name)
    if not release.estimates:
        return None
    if release.version == "0.1.4.post5":
        return {"tiktoken": [19, 44, 32, 14], "fallback": [4, 28, 11, 14]}[tokens]
    if release.version in ("0.3.0", "0.3.5"):
        return {"tiktoken": [23, 58, 36, 96], "fallback": [58, 164, 81, 96]}[tokens]
    return _FAMILY_022[tokens]


@pytest.mark.parametrize("cache", [False, True])
@pytest.mark.parametrize("tokens", ["tiktoken", "fallback"])
def test_frames_count_every_release_and_candidate(tmp_path: Path, cache: bool, tokens: str) -> None:
    """Every registered release (aliases too) and a candidate given to ``load(policy=)`` or
    set on a session builds both frames, its counts exactly its own estimates: 0.1.4.post5
    its first estimate (no framing tokens, no reasoning), a candidate its base's, and the
    releases without an estimator (0.1.4 to 0.1.4.post4) <NA>; user turns as each counts
    them.  Cold and warm alike."""
    workspace = _workspace_030(tmp_path)
    chat = _chat_030()
    where = {"cache": tmp_path / "cache"} if cache else {"cache": False}
    candidate = sk.candidate("nanobot-0.3.0", block=16)
    for name in [*RELEASES, candidate.name]:
        counts = _expected_counts(candidate.rule.base if name == candidate.name else name, tokens)
        release = get_policy(name)
        if counts is not None:
            own = release.estimate_message_tokens if tokens == "tiktoken" else None
            assert own is None or [own(m) for m in chat] == counts, name
        for _ in range(2):  # cold, then (with the cache) warm
            corpus = sk.load(workspace, policy=name, tokens=tokens, progress=False, **where)
            shown = corpus.messages["tokens"].tolist()
            assert shown == ([pd.NA] * 4 if counts is None else counts), name
            row = corpus.sessions.loc["webui:weekly"]
            assert [row["policy"], row["n_user_turns"]] == [release.name, 1], name
            assert pd.isna(row["tokens"]) if counts is None else row["tokens"] == sum(counts), name
    corpus = sk.load(workspace, tokens=tokens, progress=False, **where)
    corpus["webui:weekly"].policy = "nanobot-0.1.4.post5"
    assert corpus.messages["tokens"].tolist() == _expected_counts("nanobot-0.1.4.post5", tokens)
