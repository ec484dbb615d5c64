"""fork and fork_many on small explicit sessions: the cut, metadata, edits, lineage, errors."""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import os
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import sessionkit
from sessionkit.nanobot import writer
from sessionkit.nanobot.naming import UnsafeKeyError
from sessionkit.nanobot.policies import FORK_VOLATILE_METADATA_KEYS as VOLATILE_METADATA_KEYS
from sessionkit.nanobot.reader import read_session_file
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.writer import save_session, session_lines
from sessionkit.store.corpus import Corpus
from sessionkit.tuning import TUNING
from sessionkit.writers.forking import (
    LINEAGE_KEY,
    ForkIndexError,
    fork,
    fork_many,
)

MESSAGES = [
    {"role": "assistant", "content": "Welcome back", "_channel_delivery": True},
    {"role": "user", "content": "Hi", "timestamp": "2025-01-01T10:00:00", "media": ["a.png"]},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "function": {"name": "read", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "name": "read", "content": "file body"},
    {"role": "assistant", "content": "Done."},
    {"role": "user", "content": "Again", "timestamp": "2025-01-01T10:05:00", "channel": "tg"},
    {"role": "assistant", "content": "OK"},
    {"role": "user", "content": "Last", "timestamp": "2025-01-01T10:09:00"},
    {"role": "assistant", "content": "Bye"},
]
METADATA = {
    "title": "Trip",
    "title_user_edited": True,
    "goal_state": {"goal": "x"},
    "pending_user_turn": {"text": "?"},
    "runtime_checkpoint": {"step": 2},
    "thread_goal": "plan",
    "_last_summary": "earlier: greetings",
    "keep": {"nested": [1, 2]},
}
KEPT_METADATA = {"_last_summary": "earlier: greetings", "keep": {"nested": [1, 2]}}


@pytest.fixture
def source() -> Session:
    return Session(
        "telegram:1",
        messages=copy.deepcopy(MESSAGES),
        created_at=datetime(2025, 1, 1, 9),
        updated_at=datetime(2025, 1, 1, 11),
        metadata=copy.deepcopy(METADATA),
        last_consolidated=5,
    )


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# --- nanobot's cut and metadata rules ------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "n_copied", "offset", "metadata"),
    [
        (0, 1, 0, {"keep": {"nested": [1, 2]}}),
        (1, 5, 5, KEPT_METADATA),
        (2, 7, 5, KEPT_METADATA),
        (3, 9, 5, KEPT_METADATA),
    ],
)
def test_cut_before_each_user_message(source, index, n_copied, offset, metadata):
    before = datetime.now()
    result = fork(source, "telegram:1-fork", index)
    assert result.key == "telegram:1-fork"
    assert result.messages == MESSAGES[:n_copied]
    assert result.metadata == metadata
    assert result.last_consolidated == offset
    assert before <= result.created_at == result.updated_at <= datetime.now()
    assert result.path is None and result.records == []


def test_volatile_keys_are_nanobots():
    nanobots = {
        "goal_state",
        "pending_user_turn",
        "runtime_checkpoint",
        "thread_goal",
        "title",
        "title_user_edited",
    }
    assert nanobots == VOLATILE_METADATA_KEYS


def test_offset_beyond_the_cut_resets_to_zero_not_to_the_cut(source):
    source.last_consolidated = 7
    result = fork(source, "t:1", 1)
    assert (len(result.messages), result.last_consolidated) == (5, 0)
    assert "_last_summary" not in result.metadata


def test_offset_at_the_cut_is_kept_with_its_summary(source):
    source.last_consolidated = 7
    result = fork(source, "t:1", 2)
    assert result.last_consolidated == 7
    assert result.metadata["_last_summary"] == "earlier: greetings"


def test_fork_is_a_deep_copy_and_the_source_is_untouched(source):
    before = copy.deepcopy(source)
    result = fork(source, "t:1", 3, edit=None)
    result.messages[1]["media"].append("b.png")
    result.metadata["keep"]["nested"].append(3)
    assert source == before


def test_session_without_user_messages(source):
    source.messages = [{"role": "assistant", "content": "hello"}]
    source.last_consolidated = 1
    result = fork(source, "t:1", 0)
    assert result.messages == [{"role": "assistant", "content": "hello"}]
    assert result.last_consolidated == 1


def test_numpy_index_is_accepted(source):
    assert len(fork(source, "t:1", np.int64(2)).messages) == 7


# --- edits ---------------------------------------------------------------------------------


def test_edit_appends_the_rewritten_user_message(source):
    result = fork(source, "t:1", 1, edit="Again, but shorter")
    assert result.messages[:-1] == MESSAGES[:5]
    edited = result.messages[-1]
    assert list(edited) == ["role", "content", "timestamp", "channel"]
    assert edited["content"] == "Again, but shorter" and edited["channel"] == "tg"
    assert edited["timestamp"] == result.created_at.isoformat()
    assert result.last_consolidated == 5
    assert source.messages[5]["content"] == "Again"


def test_edit_keeps_other_fields_and_adds_a_missing_timestamp(source):
    del source.messages[1]["timestamp"]
    edited = fork(source, "t:1", 0, edit="Hello").messages[-1]
    assert edited == {
        "role": "user",
        "content": "Hello",
        "media": ["a.png"],
        "timestamp": edited["timestamp"],
    }
    datetime.fromisoformat(edited["timestamp"])


def test_edit_past_the_last_user_message_is_refused(source):
    with pytest.raises(ForkIndexError, match=r"has 3 user messages, so it must be between 0 and 2"):
        fork(source, "t:1", 3, edit="more")


def test_edit_without_user_messages_is_refused():
    with pytest.raises(ForkIndexError, match="has 0 user messages, so none to rewrite"):
        fork(Session("a:b", [{"role": "assistant", "content": "x"}]), "t:1", 0, edit="x")


def test_edit_must_be_text(source):
    with pytest.raises(TypeError, match="edit must be the new message text"):
        fork(source, "t:1", 0, edit=["x"])


# --- bad arguments -------------------------------------------------------------------------


@pytest.mark.parametrize("index", [-1, 4, 100])
def test_index_out_of_range(source, index):
    with pytest.raises(ForkIndexError, match=r"has 3 user messages, so it must be between 0 and 3"):
        fork(source, "t:1", index)
    with pytest.raises(IndexError):
        fork(source, "t:1", index)
    with pytest.raises(ValueError):
        fork(source, "t:1", index)


@pytest.mark.parametrize("index", [True, "1", 1.0, None])
def test_index_must_be_an_integer(source, index):
    with pytest.raises(TypeError, match="before_user_index must be an integer"):
        fork(source, "t:1", index)


def test_target_key_must_be_a_string(source):
    with pytest.raises(TypeError, match="target_key must be a string"):
        fork(source, 7, 0)


def test_non_object_metadata_is_refused(source):
    source.metadata = ["not", "an", "object"]
    with pytest.raises(ValueError, match="metadata that is not a JSON object"):
        fork(source, "t:1", 0)


# --- lineage -------------------------------------------------------------------------------


def test_lineage_is_off_by_default(source):
    assert LINEAGE_KEY not in fork(source, "t:1", 1).metadata


def test_lineage_records_the_source_file(source, tmp_path):
    source.path = save_session(source, tmp_path)
    digest = hashlib.sha256(source.path.read_bytes()).hexdigest()
    result = fork(source, "t:1", 2, edit="Last?", lineage=True)
    assert result.metadata[LINEAGE_KEY] == {
        "source_key": "telegram:1",
        "source_file": "telegram_1.jsonl",
        "source_sha256": digest,
        "before_user_index": 2,
        "edited": True,
    }


def test_lineage_of_an_in_memory_session(source):
    record = fork(source, "t:1", 0, lineage=True).metadata[LINEAGE_KEY]
    assert record["source_file"] is None and record["source_sha256"] is None


def test_an_inherited_lineage_is_kept_like_any_metadata(source):
    source.metadata[LINEAGE_KEY] = {"source_key": "older:1"}
    assert fork(source, "t:1", 1).metadata[LINEAGE_KEY] == {"source_key": "older:1"}
    assert fork(source, "t:1", 1, lineage=True).metadata[LINEAGE_KEY]["source_key"] == "telegram:1"


# --- sources from a Corpus -----------------------------------------------------------------


@pytest.fixture
def corpus(source, tmp_path) -> Corpus:
    other = Session("cli:direct", [{"role": "user", "content": "q"}, {"role": "assistant"}])
    for s in (source, other):
        save_session(s, tmp_path / "ws" / "sessions", create=True)
    return sessionkit.load(tmp_path / "ws", tokens=None)


def test_fork_from_a_corpus(corpus):
    result = fork(corpus, "t:1", 1, key="telegram:1")
    assert result.messages == MESSAGES[:5]


def test_missing_source_key(corpus):
    with pytest.raises(KeyError, match="no session 'telegram:2'"):
        fork(corpus, "t:1", 0, key="telegram:2")


def test_corpus_needs_a_source_key(corpus):
    with pytest.raises(TypeError, match="needs key"):
        fork(corpus, "t:1", 0)


def test_source_key_must_match_a_session(source):
    with pytest.raises(ValueError, match="key 'x:y' given with session 'telegram:1'"):
        fork(source, "t:1", 0, key="x:y")


# --- writing -------------------------------------------------------------------------------


def test_written_fork_is_the_returned_session(source, tmp_path):
    result = fork(source, "webui:f1", 2, sessions_dir=tmp_path)
    assert result.path == tmp_path / "webui_f1.jsonl" and result.format == "nanobot-0.2"
    assert _files(tmp_path) == {"webui_f1.jsonl": session_lines(result)}


def test_written_fork_with_storage_naming(source, tmp_path):
    result = fork(source, "webui:f1", 2, sessions_dir=tmp_path, naming="nanobot-0.3")
    assert result.path.name == "d2VidWk6ZjE.jsonl" and result.format == "nanobot-0.3"


def test_writing_touches_no_other_file(corpus, tmp_path):
    folder = tmp_path / "ws" / "sessions"
    before = _files(folder)
    fork(corpus, "telegram:1b", 1, key="telegram:1", sessions_dir=tmp_path / "ws", create=True)
    after = _files(folder)
    assert {k: v for k, v in after.items() if k != "telegram_1b.jsonl"} == before


def test_existing_target_is_refused(source, tmp_path):
    (tmp_path / "t_1.jsonl").write_bytes(b"mine\n")
    with pytest.raises(FileExistsError) as info:
        fork(source, "t:1", 1, sessions_dir=tmp_path)
    assert info.value.strerror == (
        "cannot save session 't:1': the file already exists and holds session 't:1'; "
        "pass overwrite=True to replace it"
    )
    assert info.value.filename == str(tmp_path / "t_1.jsonl")
    assert _files(tmp_path) == {"t_1.jsonl": b"mine\n"}
    fork(source, "t:1", 1, sessions_dir=tmp_path, overwrite=True)
    assert len(_files(tmp_path)["t_1.jsonl"].splitlines()) == 6


def test_the_source_file_is_never_replaced(corpus, tmp_path):
    folder = tmp_path / "ws" / "sessions"
    before = _files(folder)
    for key in ("telegram:1", "telegram_1"):
        with pytest.raises(ValueError, match="source session's own file"):
            fork(corpus, key, 0, key="telegram:1", sessions_dir=folder, overwrite=True)
    assert _files(folder) == before


@pytest.mark.parametrize(
    "key",
    [
        *("", "..", ".", "a\x00b", "  ", "../../etc/evil", "a/b", "a\\b", ".x", "t:" + "x" * 300),
        *("nul", "nul.txt", "CON", "Aux.jsonl", "prn", "COM1", "com9.x", "LPT1", "lpt9"),
    ],
)
def test_hostile_target_keys(source, tmp_path, key):
    with pytest.raises(UnsafeKeyError):
        fork(source, key, 0, sessions_dir=tmp_path)
    assert _files(tmp_path) == {}


def test_unwritable_folder(source, tmp_path, monkeypatch):
    real_open = os.open

    def deny_create(path, flags, *args, **kwargs):
        if flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(writer.os, "open", deny_create)
    with pytest.raises(PermissionError, match="cannot save session 't:1'") as info:
        fork(source, "t:1", 0, sessions_dir=tmp_path)
    assert info.value.filename == str(tmp_path / "t_1.jsonl")
    assert _files(tmp_path) == {}


def test_an_unwritable_folder_stops_the_batch_before_any_write(source, tmp_path, monkeypatch):
    monkeypatch.setattr(writer.os, "access", lambda path, mode: False)
    with pytest.raises(PermissionError, match="no permission to create files in") as info:
        fork_many(source, sessions_dir=tmp_path)
    assert info.value.filename == str(tmp_path / "telegram_1_fork-0.jsonl")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder(source, tmp_path):
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(PermissionError, match="no permission to create files"):
            fork(source, "t:1", 0, sessions_dir=tmp_path)
    finally:
        tmp_path.chmod(0o700)
    assert _files(tmp_path) == {}


# --- batches -------------------------------------------------------------------------------


def test_fork_many_defaults_to_every_user_turn(source):
    forks = fork_many(source)
    assert [f.key for f in forks] == ["telegram:1:fork-0", "telegram:1:fork-1", "telegram:1:fork-2"]
    assert [len(f.messages) for f in forks] == [1, 5, 7]


def test_fork_many_with_a_list_and_a_template(corpus, tmp_path):
    forks = fork_many(
        corpus, [0, 3], key="telegram:1", target_key="exp:{n}-{index}", sessions_dir=tmp_path
    )
    assert [f.key for f in forks] == ["exp:0-0", "exp:1-3"]
    assert sorted(_files(tmp_path)) == ["exp_0-0.jsonl", "exp_1-3.jsonl"]


def test_fork_many_over_a_whole_corpus(corpus):
    forks = fork_many(corpus)
    assert [f.key for f in forks] == [
        "cli:direct:fork-0",
        "telegram:1:fork-0",
        "telegram:1:fork-1",
        "telegram:1:fork-2",
    ]


def test_fork_many_from_a_dataframe(corpus, tmp_path):
    plan = pd.DataFrame(
        {
            "session_key": ["telegram:1", "telegram:1", "cli:direct"],
            "before_user_index": [1, 1, 1],
            "edit": ["Again, politely", None, np.nan],
            "target_key": ["exp:polite", pd.NA, "exp:cli"],
        }
    )
    forks = fork_many(corpus, plan, sessions_dir=tmp_path, lineage=True)
    assert [f.key for f in forks] == ["exp:polite", "telegram:1:fork-1", "exp:cli"]
    assert forks[0].messages[-1]["content"] == "Again, politely"
    assert forks[1].messages == MESSAGES[:5]
    assert [f.metadata[LINEAGE_KEY]["edited"] for f in forks] == [True, False, False]
    assert sorted(_files(tmp_path)) == [
        "exp_cli.jsonl",
        "exp_polite.jsonl",
        "telegram_1_fork-1.jsonl",
    ]


def test_dataframe_from_the_messages_frame(corpus):
    users = corpus.messages.query("role == 'user' and session_key == 'telegram:1'")
    plan = users.rename(columns={"user_index": "before_user_index"})
    forks = fork_many(corpus, plan)
    frame = corpus.messages[corpus.messages["session_key"] == "telegram:1"]
    for k, f in enumerate(forks):
        assert len(f.messages) == (frame["user_index"] < k).sum()


def test_dataframe_needs_before_user_index(source):
    with pytest.raises(ValueError, match="needs a 'before_user_index' column.*'user_index'"):
        fork_many(source, pd.DataFrame({"user_index": [0]}))


@pytest.mark.parametrize(
    ("plan", "error"),
    [
        (pd.DataFrame({"before_user_index": [0, 1, 9]}), ForkIndexError),
        (pd.DataFrame({"before_user_index": [1, 1], "edit": ["a", "b"]}), ValueError),
        (pd.DataFrame({"before_user_index": [0, 1], "target_key": ["ok:1", ".."]}), UnsafeKeyError),
    ],
)
def test_a_bad_row_stops_the_batch_before_any_write(source, tmp_path, plan, error):
    with pytest.raises(error):
        fork_many(source, plan, sessions_dir=tmp_path)
    assert _files(tmp_path) == {}


def test_an_existing_target_stops_the_batch_before_any_write(source, tmp_path):
    (tmp_path / "telegram_1_fork-2.jsonl").write_bytes(b"mine\n")
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        fork_many(source, sessions_dir=tmp_path)
    assert _files(tmp_path) == {"telegram_1_fork-2.jsonl": b"mine\n"}


def test_keys_sharing_a_file_name_are_refused(source, tmp_path):
    plan = pd.DataFrame({"before_user_index": [0, 1], "target_key": ["a:b", "a_b"]})
    with pytest.raises(
        ValueError, match=r"forks 0 \('a:b'\) and 1 \('a_b'\) both go to .*a_b\.jsonl"
    ):
        fork_many(source, plan, sessions_dir=tmp_path)
    assert _files(tmp_path) == {}


def test_an_existing_collision_names_the_stored_session(source, tmp_path):
    fork(source, "a:b", 0, sessions_dir=tmp_path)
    with pytest.raises(
        FileExistsError, match="already exists and holds session 'a:b', whose key maps"
    ):
        fork_many(
            source,
            pd.DataFrame({"before_user_index": [0], "target_key": ["a_b"]}),
            sessions_dir=tmp_path,
        )


def test_progress_bar(source, capsys):
    fork_many(source)
    assert capsys.readouterr().err == ""
    fork_many(source, progress=True)
    assert "forks" in capsys.readouterr().err


# --- lines no nanobot can parse ------------------------------------------------------------


HUGE = b' {"role": "user", "content": "x", "n": 1' + b"0" * 5000 + b"}\t"
DEEP = b'{"role": "tool", "content": ' + b"[" * 950 + b"]" * 950 + b"}"


def _with_held_lines(source: Session, folder: Path) -> list[bytes]:
    """``source`` saved, with lines past json's limits before messages 1 and 4 and at the
    end; its lines."""
    lines = session_lines(source).split(b"\n")[:-1]
    lines[2:2], lines[6:6] = [HUGE], [DEEP]
    lines.append(HUGE)
    folder.mkdir()
    (folder / "telegram_1.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return lines


@pytest.mark.parametrize(("index", "stop"), [(0, 3), (1, 8), (3, 13)])
def test_held_lines_are_forked_back_byte_for_byte(source, tmp_path, monkeypatch, index, stop):
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(TUNING, "racy_ns", 0)  # index the file just written
    source.metadata, source.last_consolidated = {}, 0
    lines = _with_held_lines(source, tmp_path / "src")
    fresh = sessionkit.load(tmp_path / "src")["telegram:1"]
    indexed = sessionkit.load(tmp_path / "src")["telegram:1"]
    assert type(indexed).__name__ == "IndexedSession" and indexed._messages is None
    for n, loaded in enumerate((fresh, indexed)):
        assert loaded.messages == MESSAGES
        assert loaded.held_lines == ((1, HUGE.decode()), (4, DEEP.decode()), (9, HUGE.decode()))
        result = fork(loaded, f"f:{n}", index, sessions_dir=tmp_path / "out", create=True)
        assert result.path.read_bytes().split(b"\n")[1:] == [*lines[1:stop], b""]


def test_an_edited_fork_keeps_held_lines_before_its_edit(source, tmp_path):
    lines = _with_held_lines(source, tmp_path / "src")
    loaded = sessionkit.load(tmp_path / "src", cache=False)["telegram:1"]
    result = fork(loaded, "f:edit", 2, edit="Later", sessions_dir=tmp_path / "out", create=True)
    written = result.path.read_bytes().split(b"\n")
    assert written[1:-2] == lines[1:10]
    assert json.loads(written[-2])["content"] == "Later"
    again, problems = read_session_file(result.path)
    assert again.held_lines == ((1, HUGE.decode()), (4, DEEP.decode()))
    assert again.messages == result.messages
    assert [p.line_no for p in problems] == [3, 7]


def test_a_folder_that_is_not_there_is_refused_before_any_write(source, tmp_path):
    """A mistyped workspace is not made: fork and fork_many refuse it, writing nothing,
    unless asked to create it."""
    missing = tmp_path / "path" / "to" / "workspace"
    with pytest.raises(FileNotFoundError, match="does not exist, so nothing was written"):
        fork(source, "t:1", 1, sessions_dir=missing)
    with pytest.raises(FileNotFoundError, match="pass create=True"):
        fork_many(source, [0, 1], sessions_dir=missing)
    assert list(tmp_path.iterdir()) == []
    made = fork(source, "t:1", 1, sessions_dir=missing, create=True)
    assert made.path == missing / "t_1.jsonl" and made.path.is_file()
