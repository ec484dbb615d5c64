"""``Corpus.usage``: the ledger of a loaded corpus, its usage records found where the corpus
was loaded from (a 0.3.5 session folder's data dir, the load's ``config_dir``) or named."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from support.usage_fixtures import (
    NAMESPACE,
    call,
    last_usage,
    ledger,
    reply,
    tied,
    tool_round,
    user,
    write_log,
    write_session,
)

import sessionkit as sk


def _data_dir(data: Path) -> Path:
    """Two sessions and four calls: alice's turn 0 (two steps), bob's turn 0, alice's turn 1
    (its _last_usage confirms it)."""
    write_session(
        data,
        "telegram:alice",
        [
            user("read a.md", 0),
            *tool_round("c1", 5),
            reply("done", 5),
            user("thanks", 20),
            reply("welcome", 22),
        ],
        {"_last_usage": last_usage(1, 1000, 10)},
    )
    write_session(data, "slack:bob", [user("hi", 10), reply("hello", 12)])
    write_log(data, [call(1), call(3), call(11), call(21)])
    return data / "sessions" / NAMESPACE


def _usage(corpus: sk.Corpus, **options: object) -> pd.DataFrame:
    return corpus.usage(**{"tz": "UTC", "estimate": False, **options})


def test_a_corpus_of_a_035_session_folder_reads_its_data_dir(tmp_path: Path) -> None:
    folder = _data_dir(tmp_path)
    corpus = sk.load(folder, tokens=None, cache=False)
    assert (corpus.loaded_from, corpus.config_dir) == ((folder,), None)
    frame = _usage(corpus)
    assert tied(frame) == [
        (1, "telegram:alice", 0, 0, "agent", "time"),
        (2, "telegram:alice", 0, 1, "agent", "time"),
        (3, "slack:bob", 0, 0, "agent", "time"),
        (4, "telegram:alice", 1, 0, "agent", "exact"),
    ]
    pd.testing.assert_frame_equal(frame, ledger(tmp_path), check_exact=True)
    assert frame.summary == ledger(tmp_path).summary


def test_a_corpus_loaded_with_a_config_dir_reads_that_one(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    (workspace / ".nanobot").mkdir(parents=True)
    (workspace / ".nanobot" / "workspace-id").write_text(NAMESPACE)
    data = tmp_path / "data"
    folder = _data_dir(data)
    (folder / ".workspace").write_text(str(workspace))
    corpus = sk.load(workspace, tokens=None, config_dir=data, cache=False)
    assert (corpus.loaded_from, corpus.config_dir) == ((workspace,), data)
    assert corpus._origin() == (data, workspace)
    assert _usage(corpus)["session_key"].tolist() == [
        "telegram:alice",
        "telegram:alice",
        "slack:bob",
        "telegram:alice",
    ]


def test_a_named_config_dir_wins_and_calls_of_other_sessions_stay_untied(tmp_path: Path) -> None:
    folder = _data_dir(tmp_path / "data")
    only_bob = sk.Corpus([sk.load(folder, tokens=None, cache=False)["slack:bob"]])
    assert only_bob.loaded_from == () and only_bob._origin() == (None, None)
    frame = _usage(only_bob, config_dir=tmp_path / "data")
    assert tied(frame) == [
        (1, None, None, None, "agent", None),
        (2, None, None, None, "agent", None),
        (3, "slack:bob", 0, 0, "agent", "time"),
        (4, None, None, None, "agent", None),
    ]
    assert frame.summary["outside"] == 3
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    corpus = sk.load(folder, tokens=None, cache=False)
    assert _usage(corpus, config_dir=elsewhere).empty
