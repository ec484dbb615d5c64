"""Corpus: loading a store, lookup by key, lazily built frames, round trip to disk."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import sessionkit
import sessionkit.nanobot.writer
from sessionkit import Corpus, Session, load
from sessionkit.nanobot.reader import SessionPathError
from sessionkit.nanobot.tokens import fallback_message_tokens
from sessionkit.store.sources import default_data_dir

META = {
    "_type": "metadata",
    "key": "telegram:42",
    "created_at": "2026-03-01T09:00:00",
    "updated_at": "2026-03-01T09:05:00",
    "metadata": {"title": "<think>naming it</think>Weekend trip"},
    "last_consolidated": 2,
}
MESSAGES = [
    {"role": "assistant", "content": "Morning digest", "_channel_delivery": True},
    {"role": "user", "content": "plan a   trip", "timestamp": "2026-03-01T09:00:00"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "web", "arguments": "{}"}}
        ],
        "timestamp": "2026-03-01T09:00:02",
    },
    {"role": "tool", "tool_call_id": "c1", "name": "web", "content": "results"},
    {"role": "user", "content": "/status", "_command": True, "timestamp": "2026-03-01T09:01:00"},
    {"role": "user", "content": [{"type": "text", "text": "look"}], "media": ["/m/a.png"]},
]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    folder = tmp_path / "ws" / "sessions"
    folder.mkdir(parents=True)
    lines = [META, *MESSAGES]
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines)
    (folder / "telegram_42.jsonl").write_text(text, encoding="utf-8")
    (folder / "cli_direct.jsonl").write_text('{"role": "user", "content": "hi"}\nbroken\n')
    return tmp_path / "ws"


def test_load_workspace(store: Path) -> None:
    corpus = load(store)
    assert len(corpus) == 2
    assert corpus.keys() == ["cli:direct", "telegram:42"]
    assert "telegram:42" in corpus
    assert [s.key for s in corpus] == ["cli:direct", "telegram:42"]
    assert corpus["telegram:42"].messages == MESSAGES
    assert repr(corpus) == "<Corpus: 2 sessions, 7 messages, 1 problems>"


def test_missing_key_suggests_close_ones(store: Path) -> None:
    with pytest.raises(KeyError, match="no session 'telegram:43'.*did you mean 'telegram:42'"):
        load(store)["telegram:43"]


def test_messages_frame(store: Path) -> None:
    frame = load(store).messages
    assert list(frame.columns) == [c.name for c in sessionkit.schema.MESSAGES]
    assert {c.name: str(frame[c.name].dtype) for c in sessionkit.schema.MESSAGES} == {
        c.name: c.dtype for c in sessionkit.schema.MESSAGES
    }
    rows = frame[frame.session_key == "telegram:42"]
    assert rows.idx.tolist() == [0, 1, 2, 3, 4, 5]
    assert rows.line_no.tolist() == [2, 3, 4, 5, 6, 7]
    assert rows.role.astype(str).tolist() == [
        "assistant",
        "user",
        "assistant",
        "tool",
        "user",
        "user",
    ]
    assert rows.text.tolist() == [
        "Morning digest",
        "plan a   trip",
        "",
        "results",
        "/status",
        "look",
    ]
    assert rows.user_index.tolist() == [-1, 0, 0, 0, 1, 2]
    assert rows.consolidated.tolist() == [True, True, False, False, False, False]
    assert rows.is_command.tolist() == [False, False, False, False, True, False]
    assert rows.is_channel_delivery.tolist() == [True, False, False, False, False, False]
    assert rows.n_tool_calls.tolist() == [0, 0, 1, 0, 0, 0]
    assert rows.tool_call_id.tolist()[3] == "c1"
    assert rows.has_media.tolist() == [False] * 5 + [True]
    assert rows.timestamp.iloc[1] == pd.Timestamp("2026-03-01 09:00:00")
    assert rows.tokens.tolist() == [sessionkit.estimate_message_tokens(m) for m in MESSAGES]


def test_sessions_frame(store: Path) -> None:
    corpus = load(store)
    frame = corpus.sessions.set_index("key")
    row = frame.loc["telegram:42"]
    assert (row.channel, row.chat_id, row.format) == ("telegram", "42", "nanobot-0.2")
    assert (row.title, row.preview) == ("Weekend trip", "plan a trip")
    assert (row.n_messages, row.n_user_turns, row.last_consolidated) == (6, 3, 2)
    assert row.tokens == corpus.messages.query("session_key == 'telegram:42'").tokens.sum()
    assert row.created_at == pd.Timestamp("2026-03-01 09:00:00")
    assert row.first_message_at == pd.Timestamp("2026-03-01 09:00:00")
    assert row.last_message_at == pd.Timestamp("2026-03-01 09:01:00")
    assert pd.isna(frame.loc["cli:direct"].created_at)


def test_problems_frame(store: Path) -> None:
    problems = load(store).problems
    assert problems.path.str.endswith("cli_direct.jsonl").tolist() == [True]
    assert problems.line_no.tolist() == [2]
    assert problems.reason.tolist() == ["not JSON: Expecting value (column 1)"]


def test_frames_are_cached(store: Path) -> None:
    corpus = load(store)
    assert corpus.messages is corpus.messages
    assert corpus.sessions is corpus.sessions


def test_token_methods(store: Path) -> None:
    fallback = load(store, tokens="fallback").messages.tokens.tolist()
    assert fallback == [fallback_message_tokens(m) for s in load(store) for m in s.messages]
    assert load(store, tokens=None).messages.tokens.isna().all()


def test_duplicate_keys_are_recorded_not_merged(store: Path) -> None:
    copy = store / "sessions" / "copy.jsonl"
    copy.write_bytes((store / "sessions" / "telegram_42.jsonl").read_bytes())
    with pytest.warns(UserWarning, match="duplicate session key 'telegram:42'"):
        corpus = load(store)
    assert len(corpus) == 2
    assert corpus.problems.reason.str.startswith("duplicate session key 'telegram:42'").sum() == 1


def test_a_glob_matching_a_damaged_copy_says_which_file_it_kept(store: Path) -> None:
    """Two files with one key: the warning and the problem name both and the rule that chose."""
    folder = store / "sessions"
    original = folder / "telegram_42.jsonl"
    damaged = folder / "telegram_42.damaged.jsonl"
    damaged.write_bytes(original.read_bytes() + b"not json\n")
    with pytest.warns(UserWarning) as caught:
        corpus = load(str(folder / "telegram_42*.jsonl"), cache=False)
    problem, unread = corpus.problems.loc[corpus.problems["line_no"].isna(), "reason"]
    assert str(caught[0].message) == problem
    assert unread == (
        "not read from here by nanobot 0.2.2: it reads 'telegram:42' from telegram_42.jsonl "
        "beside it, never this file"
    )
    assert problem == (
        f"duplicate session key 'telegram:42': {damaged} and {original} both hold it; kept "
        f"{damaged}, the first in load order (paths in the order given, each folder's or "
        "glob's files sorted by name), and skipped this file"
    )
    assert corpus["telegram:42"].path == damaged


def test_what_is_not_a_session_store_is_refused(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(store)  # "" would have meant this workspace
    for empty in ("", " ", [store, ""]):
        with pytest.raises(SessionPathError, match="an empty path names no session store; pass"):
            load(empty)
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n", encoding="utf-8")
    expected = (
        f"{passwd} is not a session store; pass a nanobot workspace folder, a sessions folder, "
        "a session file (.jsonl, or a legacy .json), a glob, or a list of these"
    )
    with pytest.raises(SessionPathError) as refused:
        load(passwd)
    assert str(refused.value) == expected


def test_corpus_from_sessions_built_in_memory() -> None:
    corpus = Corpus([Session(key="a:1", messages=[{"role": "user", "content": "x"}])])
    assert corpus.messages.line_no.isna().all()
    assert corpus.sessions.format.astype(str).tolist() == ["memory"]


def test_empty_path_errors(tmp_path: Path) -> None:
    with pytest.raises(SessionPathError, match="holds no session files"):
        load(tmp_path)


def test_default_is_the_bundled_data() -> None:
    assert default_data_dir().name == "data"


def test_save_unchanged_session_reproduces_nanobot_file(store: Path, tmp_path: Path) -> None:
    original = store / "sessions" / "telegram_42.jsonl"
    session = load(original)["telegram:42"]
    out = tmp_path / "out"
    out.mkdir()
    written = sessionkit.nanobot.writer.save_session(session, out)
    assert written.read_bytes() == original.read_bytes()


def test_bundled_store_loads_cleanly(data_dir: Path) -> None:
    corpus = load(data_dir)
    assert (len(corpus), len(corpus.messages), len(corpus.problems)) == (15, 7122, 0)
    formats = corpus.sessions.set_index("key").format.astype(str)
    assert formats["webui:def456"] == "nanobot-0.3"
    assert formats["cli:legacy"] == "legacy-json"
    assert (formats == "nanobot-0.2").sum() == 13


def test_damaged_store_keeps_every_intact_line(data_dir: Path) -> None:
    corpus = load(data_dir / "damaged")
    assert (len(corpus), len(corpus.messages)) == (12, 323)
    per_file = corpus.problems.assign(file=corpus.problems.path.str.rsplit("/", n=1).str[-1])
    assert per_file.groupby("file").size().to_dict() == {
        "damaged_blank_lines.jsonl": 1,
        "damaged_created_at_not_iso.jsonl": 1,
        "damaged_empty.jsonl": 1,
        "damaged_invalid_utf8.jsonl": 1,
        "damaged_last_consolidated_out_of_range.jsonl": 1,
        "damaged_last_consolidated_string.jsonl": 1,
        "damaged_non_object_array.jsonl": 1,
        "damaged_non_object_string.jsonl": 1,
        "damaged_not_json_line.jsonl": 1,
        "damaged_several_problems.jsonl": 4,
        "damaged_truncated_last_line.jsonl": 1,
    }
    sizes = corpus.sessions.set_index("key").n_messages
    assert sizes["damaged:non_object_array"] == 21
    assert sizes["damaged:invalid_utf8"] == 29


def test_sessions_are_indexed_by_key_and_keep_the_key_column(data_dir: Path) -> None:
    sessions = load(data_dir).sessions
    assert sessions.loc["cli:direct", "n_messages"] == 1004
    assert sessions.index.tolist() == sessions["key"].tolist()


def test_each_session_is_replayed_by_the_release_that_wrote_it(data_dir: Path) -> None:
    corpus = load(data_dir)
    assert corpus["telegram:12345"].policy == "nanobot-0.2"
    assert corpus["webui:def456"].policy == "nanobot-0.3.5"  # a provider_state record
    assert corpus.sessions.loc["webui:def456", "has_provider_state"]
    forced = load(data_dir, policy="nanobot-0.3.0")
    assert set(forced.sessions["policy"]) == {"nanobot-0.3.0"}
    with pytest.raises(ValueError, match="unknown history policy"):
        load(data_dir, policy="nanobot-9")


def test_a_file_its_release_never_reads_is_a_problem_cold_and_warm(tmp_path: Path) -> None:
    from tests.nanobot.test_placement import B64, WHO, session_file, store_035

    config, workspace, namespace = store_035(tmp_path)
    session_file(namespace / B64)
    session_file(namespace / "telegram_42.jsonl", key="telegram:42")  # migrated, never read
    reason = (
        f"{WHO}it reads a session only under its base64url name, 'telegram:42' from "
        "dGVsZWdyYW06NDI.jsonl; this file stays unread"
    )
    for cache in (tmp_path / "cache", tmp_path / "cache", False):  # cold, warm (a snapshot), none
        corpus = load(workspace, config_dir=config, cache=cache, tokens=None)
        assert corpus.keys() == ["cli:direct", "telegram:42"]
        assert corpus.problems[["path", "reason"]].values.tolist() == [
            [str((namespace / "telegram_42.jsonl").resolve()), reason]
        ]
        assert repr(corpus).endswith("1 problems>")


def team(root: Path, n: int) -> Path:
    """``n`` workspaces under ``root/team``, each with ``cli:direct`` and its own telegram chat;
    the first also holds a renamed copy of ``cli:direct``."""
    meta = {"_type": "metadata", "created_at": "2026-04-01T10:00:00", "metadata": {},
            "updated_at": "2026-04-01T10:05:00", "last_consolidated": 0}  # fmt: skip
    user = json.dumps({"role": "user", "content": "hi", "timestamp": "2026-04-01T10:00:00"})
    for i in range(n):
        folder = root / "team" / f"ws{i:02d}" / "sessions"
        folder.mkdir(parents=True)
        for key in ("cli:direct", f"telegram:{i}"):
            text = json.dumps({**meta, "key": key}) + "\n" + user + "\n"
            (folder / f"{key.replace(':', '_')}.jsonl").write_text(text, encoding="utf-8")
    first = root / "team" / "ws00" / "sessions"
    (first / "cli_direct.copy.jsonl").write_bytes((first / "cli_direct.jsonl").read_bytes())
    return root / "team"


def test_a_recursive_load_keeps_workspaces_apart(tmp_path: Path) -> None:
    folder = team(tmp_path, 3)
    with pytest.warns(sessionkit.store.corpus.DuplicateKeyWarning) as caught:
        corpus = load(folder, recursive=True, cache=False, tokens=None)
    assert len(caught) == 1
    assert len(corpus) == 6
    assert corpus.keys().count("cli:direct") == 3
    first = folder.resolve() / "ws00" / "sessions"
    assert (
        corpus["team/ws01", "cli:direct"].path
        == folder.resolve() / "ws01/sessions/cli_direct.jsonl"
    )
    assert corpus["telegram:2"].path == folder.resolve() / "ws02/sessions/telegram_2.jsonl"
    with pytest.raises(
        KeyError,
        match=r"names a session in 3 workspaces; pass \(workspace, key\): "
        r"\('team/ws00', 'cli:direct'\), \('team/ws01', 'cli:direct'\)",
    ):
        corpus["cli:direct"]
    kept, skipped = first / "cli_direct.copy.jsonl", first / "cli_direct.jsonl"  # name order
    assert corpus.problems["path"].tolist() == [str(skipped), str(kept)]  # a duplicate, unread
    with pytest.raises(SessionPathError, match="holds no session files"):
        load(folder, cache=False)  # not recursive: team/ itself holds none


def test_a_load_notes_the_sessions_folders_below_it_did_not_read(tmp_path: Path) -> None:
    folder = team(tmp_path, 7)
    (folder / "sessions").mkdir()
    (folder / "sessions" / "cli_direct.jsonl").write_bytes(
        (folder / "ws01" / "sessions" / "cli_direct.jsonl").read_bytes()
    )
    reason = (
        "7 sessions folders below not loaded (ws00/sessions, ws01/sessions, ws02/sessions, "
        "ws03/sessions, ws04/sessions and 2 more); load with recursive=True (--recursive) to "
        "read them too"
    )
    for cache in (tmp_path / "cache", tmp_path / "cache", False):  # cold, warm (a snapshot), none
        corpus = load(folder, cache=cache, tokens=None)
        assert corpus.keys() == ["cli:direct"]
        assert corpus.notes.values.tolist() == [[str(folder), pd.NA, reason]]
        assert corpus.problems.empty
    assert load(folder / "ws01", cache=False, tokens=None).notes.empty
    with pytest.warns(sessionkit.store.corpus.DuplicateKeyWarning):
        assert load(folder, recursive=True, cache=False, tokens=None).notes.empty


def test_the_bundled_load_notes_the_damaged_and_0_3_5_folders() -> None:
    data = default_data_dir()
    assert load(tokens=None).notes.values.tolist() == [
        [
            str(data),
            pd.NA,
            "3 sessions folders below not loaded (damaged, "
            "nanobot-0.3.5/sessions/5e551011c0575a3b9d2e7f4a6c8b0d1e, "
            "nanobot-0.3.5-claude/sessions/c1a0de035ca0e5e55101c0575a3b9d2e); load with "
            "recursive=True (--recursive) to read them too",
        ]
    ]
    assert load(data / "sessions", tokens=None).notes.empty
    loaded = load(tokens=None, recursive=True)
    assert loaded.notes.empty and len(loaded.problems) == 14


def test_a_corpus_made_in_memory_has_no_notes() -> None:
    notes = Corpus([Session(key="cli:direct", messages=[])]).notes
    assert notes.empty
    assert {c: str(t) for c, t in notes.dtypes.items()} == {
        c.name: c.dtype for c in sessionkit.schema.NOTES
    }


def test_the_frames_name_each_session_s_workspace(tmp_path: Path) -> None:
    folder = team(tmp_path, 2)
    with pytest.warns(sessionkit.store.corpus.DuplicateKeyWarning):
        corpus = load(folder, recursive=True, cache=False, tokens=None)
    assert corpus.sessions[["workspace", "key"]].values.tolist() == [
        ["team/ws00", "cli:direct"],
        ["team/ws00", "telegram:0"],
        ["team/ws01", "cli:direct"],
        ["team/ws01", "telegram:1"],
    ]
    assert corpus.messages["workspace"].tolist() == ["team/ws00"] * 2 + ["team/ws01"] * 2
    assert corpus.messages["workspace"].dtype == "category"
    workspace = folder / "ws01"
    for cache in (tmp_path / "cache", tmp_path / "cache", False):  # cold, warm (a snapshot), none
        for path in (workspace, workspace / "sessions", workspace / "sessions" / "*.jsonl"):
            corpus = load(path, cache=cache, tokens=None)
            assert corpus.sessions["workspace"].tolist() == ["ws01", "ws01"]
            assert corpus.messages["workspace"].tolist() == ["ws01"] * 2
    in_memory = Corpus([Session(key="cli:direct", messages=[{"role": "user", "content": "hi"}])])
    assert in_memory.sessions["workspace"].isna().all()
    assert in_memory.messages["workspace"].isna().all()
