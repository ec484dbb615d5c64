"""sessionkit.synthetic: nanobot 0.2.2 reads and re-saves its files byte for byte, the sample
store has every feature (counted exactly), and generation is deterministic."""

from __future__ import annotations

import json
import random
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sessionkit.nanobot.naming import key_from_filename, safe_key, storage_key
from sessionkit.synthetic import (
    FeatureMix,
    generate_corpus,
    generate_session,
    to_jsonl,
    write_sample_data,
    write_store,
)

_CJK = re.compile(r"[\u4e00-\u9fff]")
_ECHO = re.compile(r"^\s*(?:generate_image|message)\([^)]*\)\s*$", re.MULTILINE)
_META_KEYS = ["_type", "key", "created_at", "updated_at", "metadata", "last_consolidated"]

MESSAGES_PER_FILE = {
    "cli_direct.jsonl": 1004,
    "d2VidWk6ZGVmNDU2.jsonl": 314,
    "dingtalk_staff42.jsonl": 327,
    "discord_987.jsonl": 332,
    "email_alice@example.com.jsonl": 213,
    "feishu_ou_5f3a.jsonl": 321,
    "legacy_chat.json": 164,
    "qq_10001.jsonl": 288,
    "slack_C01_thread.jsonl": 359,
    "telegram_12345.jsonl": 2238,
    "telegram_42.jsonl": 200,
    "telegram_777.jsonl": 336,
    "webui_abc123.jsonl": 428,
    "webui_f00d42.jsonl": 294,
    "whatsapp_+15551234567.jsonl": 304,
}
ROUND_TRIP = sorted(
    set(MESSAGES_PER_FILE) - {"d2VidWk6ZGVmNDU2.jsonl", "legacy_chat.json", "qq_10001.jsonl"}
)


def _read(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(non-message records, messages) of one sample file, JSONL or legacy whole-file JSON."""
    if path.suffix == ".json":
        return [], json.loads(path.read_text(encoding="utf-8"))["history"]
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [r for r in records if "_type" in r], [r for r in records if "_type" not in r]


def _features(files: list[Path]) -> Counter[str]:
    """Count every realistic feature the generator promises, over a set of sample files."""
    c: Counter[str] = Counter()
    for path in files:
        heads, messages = _read(path)
        c["sessions"] += 1
        c["legacy_json"] += path.suffix == ".json"
        c["no_metadata_line"] += path.suffix == ".jsonl" and not heads
        c["no_user_message"] += not any(m["role"] == "user" for m in messages)
        c["provider_state"] += sum(r["_type"] == "provider_state" for r in heads)
        for head in heads:
            if head["_type"] != "metadata":
                continue
            meta = head["metadata"]
            c["title"] += "title" in meta
            c["think_title"] += "<think>" in meta.get("title", "")
            c["title_user_edited"] += meta.get("title_user_edited") is True
            c["last_summary"] += "_last_summary" in meta
            c["consolidated"] += head["last_consolidated"] > 0
        declared: set[str] = set()
        for i, m in enumerate(messages):
            role, content = m["role"], m["content"]
            c[role] += 1
            c["list_content"] += isinstance(content, list)
            text = content if isinstance(content, str) else ""
            c["chinese"] += bool(_CJK.search(text))
            c["code_block"] += "```" in text
            c["reasoning"] += "reasoning_content" in m
            if m.get("_command") is True:
                c["command_" + role] += 1
            if role == "user" and "media" in m:
                c["media"] += 1
                c["image_only"] += content == ""
            if m.get("_channel_delivery"):
                c["delivery"] += 1
                following = messages[i + 1]["role"] if i + 1 < len(messages) else None
                c["delivery_before_user"] += following == "user"
            if role == "assistant" and "tool_calls" in m:
                c["tool_call_messages"] += 1
                c["tool_calls"] += len(m["tool_calls"])
                c["empty_with_tool_calls"] += content == ""
                declared.update(call["id"] for call in m["tool_calls"])
            if role == "assistant":
                c["time_prefix"] += text.startswith("[Message Time: ")
                c["echo_line"] += bool(_ECHO.search(text))
            if role == "tool":
                c["orphan_tool"] += m["tool_call_id"] not in declared
                c["long_tool_output"] += len(content) > 2000
    return c


EXPECTED_FEATURES = {
    "sessions": 15,
    "legacy_json": 1,
    "no_metadata_line": 1,
    "user": 1870,
    "assistant": 3365,
    "tool": 1887,
    "tool_call_messages": 1234,
    "tool_calls": 1854,
    "empty_with_tool_calls": 735,
    "orphan_tool": 33,
    "long_tool_output": 106,
    "command_user": 82,
    "command_assistant": 82,
    "delivery": 261,
    "delivery_before_user": 61,
    "no_user_message": 1,
    "media": 107,
    "image_only": 41,
    "list_content": 56,
    "reasoning": 644,
    "chinese": 786,
    "code_block": 315,
    "time_prefix": 48,
    "echo_line": 47,
    "title": 7,
    "think_title": 3,
    "title_user_edited": 2,
    "last_summary": 3,
    "consolidated": 4,
    "provider_state": 1,
}


def test_sample_has_every_feature_counted_exactly(data_dir: Path) -> None:
    files = sorted((data_dir / "sessions").iterdir())
    assert {p.name: len(_read(p)[1]) for p in files} == MESSAGES_PER_FILE
    features = _features(files)
    assert dict(features) == EXPECTED_FEATURES
    assert features["tool"] == features["tool_calls"] + features["orphan_tool"]
    assert sum(n > 2000 for n in MESSAGES_PER_FILE.values()) == 1
    assert sum(p.stat().st_size for p in files) < 4_000_000


def test_every_sample_file_is_well_formed(data_dir: Path) -> None:
    legacy = json.loads((data_dir / "sessions" / "legacy_chat.json").read_text(encoding="utf-8"))
    assert (list(legacy), legacy["key"]) == (["key", "created_at", "history"], "cli:legacy")
    for path in sorted((data_dir / "sessions").iterdir()):
        heads, messages = _read(path)
        stamps = [m["timestamp"] for m in messages]
        assert stamps == sorted(set(stamps)), path.name
        if not heads:
            continue
        meta = heads[0]
        assert meta["_type"] == "metadata"
        if path.name in ROUND_TRIP:
            assert list(meta) == _META_KEYS
            assert path.name == f"{safe_key(meta['key'])}.jsonl"
        else:
            assert path.name == f"{storage_key(meta['key'])}.jsonl"
            assert heads[1]["_type"] == "provider_state"
        assert meta["created_at"] < stamps[0] and stamps[-1] < meta["updated_at"]
        offset = meta["last_consolidated"]
        assert offset == 0 or messages[offset]["role"] == "user"


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A nanobot workspace; HOME moves too so nanobot's legacy-path migration looks nowhere real."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "ws" / "sessions").mkdir(parents=True)
    return tmp_path / "ws"


def _manager(workspace: Path) -> Any:
    from nanobot.session.manager import SessionManager

    return SessionManager(workspace)


@pytest.mark.conformance
def test_nanobot_loads_and_resaves_every_sample_byte_for_byte(
    data_dir: Path, workspace: Path
) -> None:
    manager = _manager(workspace)
    for name in ROUND_TRIP:
        path = shutil.copy(data_dir / "sessions" / name, workspace / "sessions")
        original = Path(path).read_bytes()
        key = json.loads(original.split(b"\n", 1)[0])["key"]
        session = manager._load(key)
        assert len(session.messages) == MESSAGES_PER_FILE[name]
        Path(path).unlink()
        manager.save(session)
        assert Path(path).read_bytes() == original, name


@pytest.mark.conformance
def test_nanobot_on_the_other_layouts(data_dir: Path, workspace: Path) -> None:
    manager = _manager(workspace)
    # No metadata line: nanobot keeps every message and writes one on save.
    path = Path(shutil.copy(data_dir / "sessions" / "qq_10001.jsonl", workspace / "sessions"))
    original = path.read_bytes()
    session = manager._load("qq:10001")
    assert (len(session.messages), session.last_consolidated) == (MESSAGES_PER_FILE[path.name], 0)
    manager.save(session)
    assert path.read_bytes().split(b"\n", 1)[1] == original
    # A later release's base64url name is invisible to 0.2.2; under a safe-key name its
    # provider_state record would be read as a message.
    later = data_dir / "sessions" / "d2VidWk6ZGVmNDU2.jsonl"
    shutil.copy(later, workspace / "sessions")
    assert manager._load("webui:def456") is None
    shutil.copy(later, workspace / "sessions" / "webui_def456.jsonl")
    session = manager._load("webui:def456")
    assert len(session.messages) == MESSAGES_PER_FILE[later.name] + 1
    assert session.messages[0]["_type"] == "provider_state"


# name -> what nanobot 0.2.2's _load gives: None, or (messages, last_consolidated, kept created_at)
NANOBOT_ON_DAMAGED = {
    "truncated_last_line": (44, 0, True),
    "not_json_line": (36, 0, True),
    "non_object_array": None,
    "non_object_string": None,
    "invalid_utf8": None,
    "last_consolidated_string": (37, 0, True),
    "last_consolidated_out_of_range": (25, 0, True),
    "empty": (0, 0, False),
    "blank_lines": (0, 0, False),
    "crlf_line_endings": (27, 0, True),
    "created_at_not_iso": (31, 0, False),
    "several_problems": (31, 0, False),
}


@pytest.mark.conformance
def test_nanobot_on_the_damaged_files(data_dir: Path, workspace: Path) -> None:
    names = sorted(p.name for p in (data_dir / "damaged").iterdir())
    assert names == sorted(f"damaged_{n}.jsonl" for n in NANOBOT_ON_DAMAGED)
    manager = _manager(workspace)
    for name, expected in NANOBOT_ON_DAMAGED.items():
        path = Path(
            shutil.copy(data_dir / "damaged" / f"damaged_{name}.jsonl", workspace / "sessions")
        )
        session = manager._load(key_from_filename(path))
        if expected is None:
            assert session is None, name
            continue
        first = path.read_bytes().split(b"\n", 1)[0].decode("utf-8", "replace")
        kept_created = session.created_at.isoformat() in first
        assert (len(session.messages), session.last_consolidated, kept_created) == expected, name


def test_sample_generation_is_deterministic_and_matches_the_committed_data(
    tmp_path: Path, data_dir: Path
) -> None:
    def tree(root: Path) -> dict[str, bytes]:
        return {
            str(p.relative_to(root)): p.read_bytes()
            for folder in ("sessions", "damaged")
            for p in sorted((root / folder).iterdir())
        }

    write_sample_data(tmp_path / "a")
    write_sample_data(tmp_path / "b")
    first = tree(tmp_path / "a")
    assert first == tree(tmp_path / "b")
    assert first == tree(data_dir), "data/ differs: run scripts/generate_sample_data.py"


def test_generate_session_shape_and_seed_forms() -> None:
    record, messages = generate_session(5, "telegram:1", 30)
    assert list(record) == _META_KEYS
    assert (record["_type"], record["key"]) == ("metadata", "telegram:1")
    assert generate_session(random.Random(5), "telegram:1", 30) == (record, messages)
    for m in messages:
        first = ["role", "tool_call_id", "name", "content"] if m["role"] == "tool" else ["role"]
        assert list(m)[: len(first)] == first
        assert "timestamp" in m
    only, deliveries = generate_session(5, "telegram:2", 12, assistant_only=True)
    assert len(deliveries) == 12 and only["last_consolidated"] == 0
    assert all(m["role"] == "assistant" and m["_channel_delivery"] for m in deliveries)
    _, trimmed = generate_session(5, "cli:x", 3, leading_orphan=True, mix=FeatureMix(tool_turn=0))
    assert trimmed[0]["role"] == "tool"


def test_write_store_names_and_bytes(tmp_path: Path) -> None:
    sessions = [generate_session(1, "slack:C01:thread", 5), generate_session(2, "cli:direct", 5)]
    old = write_store(tmp_path / "old", sessions)
    new = write_store(tmp_path / "new", sessions, naming="nanobot-0.3")
    assert [p.name for p in old] == ["slack_C01_thread.jsonl", "cli_direct.jsonl"]
    assert [p.name for p in new] == ["c2xhY2s6QzAxOnRocmVhZA.jsonl", "Y2xpOmRpcmVjdA.jsonl"]
    record, messages = sessions[0]
    expected = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in [record, *messages])
    assert old[0].read_bytes() == new[0].read_bytes() == expected.encode("utf-8")
    assert to_jsonl([record, *messages]) == expected
    with pytest.raises(ValueError, match="map to"):
        write_store(tmp_path / "clash", [sessions[0], sessions[0]])


def test_generate_corpus_hits_its_target(tmp_path: Path) -> None:
    stats = generate_corpus(tmp_path / "a", n_sessions=30, target_messages=6_000, seed=3)
    assert stats.n_sessions == len(stats.paths) == 30
    assert abs(stats.n_messages - 6_000) < 600
    assert stats.n_bytes == sum(p.stat().st_size for p in stats.paths)
    assert 900 < stats.n_bytes / stats.n_messages < 1_600
    again = generate_corpus(tmp_path / "b", n_sessions=30, target_messages=6_000, seed=3)
    assert [p.read_bytes() for p in again.paths] == [p.read_bytes() for p in stats.paths]
