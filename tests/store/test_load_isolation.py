"""One bad file or message costs a problem row, never the load of the whole corpus."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

import sessionkit as sk
from sessionkit.nanobot.reader import read_session_file
from sessionkit.store import runs as runs_module

USER = b'{"role": "user", "content": "hi"}\n'
TEXT_INT = b'{"role": "user", "content": [{"type": "text", "text": 5}]}\n'


def rows(corpus: sk.Corpus, root: Path) -> list[tuple[str, int | None, str]]:
    return [
        (os.path.relpath(r.path, root), None if pd.isna(r.line_no) else int(r.line_no), r.reason)
        for r in corpus.problems.itertuples()
    ]


def test_a_reader_failure_costs_only_its_file(tmp_path: Path, monkeypatch) -> None:
    for name in ("a_1", "b_2"):
        (tmp_path / f"{name}.jsonl").write_bytes(USER)

    def fragile(path: Path):
        if Path(path).name == "a_1.jsonl":
            raise ValueError("boom")
        return read_session_file(path)

    monkeypatch.setattr(runs_module, "read_session_file", fragile)
    corpus = sk.load(tmp_path, tokens=None)
    assert corpus.keys() == ["b:2"]
    assert rows(corpus, tmp_path) == [
        ("a_1.jsonl", None, "not loaded: sessionkit failed reading it (ValueError: boom)")
    ]


def test_odd_entries_and_temp_files_are_rows_beside_the_sessions(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "cli_x.jsonl").write_bytes(USER)
    os.mkfifo(sessions / "pipe.jsonl")
    (sessions / ".cli_x.00112233aabb.tmp").write_bytes(USER)
    corpus = sk.load(tmp_path, tokens=None)
    assert corpus.keys() == ["cli:x"]
    assert rows(corpus, tmp_path) == [
        ("sessions/pipe.jsonl", None, "a FIFO, not a regular file; not read"),
        (
            "sessions/.cli_x.00112233aabb.tmp",
            None,
            "leftover temp file of an interrupted save (34 bytes); not read",
        ),
    ]


def test_a_fifo_named_directly_is_reported_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.jsonl")
    corpus = sk.load(tmp_path / "pipe.jsonl")
    assert len(corpus) == 0
    assert rows(corpus, tmp_path) == [("pipe.jsonl", None, "a FIFO, not a regular file; not read")]


@pytest.mark.parametrize("tokens", [None, "fallback", "tiktoken"])
def test_an_uncountable_message_is_a_row_whatever_the_token_method(
    tmp_path: Path, tokens: str | None
) -> None:
    (tmp_path / "cli_x.jsonl").write_bytes(USER + TEXT_INT)
    corpus = sk.load(tmp_path, tokens=tokens)
    assert [(path, line) for path, line, _ in rows(corpus, tmp_path)] == [("cli_x.jsonl", 2)]
    assert rows(corpus, tmp_path)[0][2].startswith(
        "nanobot 0.2.2's estimate_message_tokens raises TypeError"
    )


def test_times_a_frame_cannot_hold_are_missing_there_and_reported(tmp_path: Path) -> None:
    meta = b'{"_type": "metadata", "key": "t:1", "created_at": "9999-12-31T23:59:59"}\n'
    stamps = ["2300-01-01T00:00:00", "2026-01-01T00:00:00+05:00", "1600-01-01T00:00:00"]
    lines = [f'{{"role": "user", "content": "x", "timestamp": "{t}"}}\n'.encode() for t in stamps]
    (tmp_path / "t_1.jsonl").write_bytes(meta + b"".join(lines))
    corpus = sk.load(tmp_path, tokens=None)
    assert corpus.messages["timestamp"].tolist() == [pd.NaT, pd.Timestamp("2026-01-01"), pd.NaT]
    assert corpus.sessions["created_at"].tolist() == [pd.NaT]
    assert [m["timestamp"] for m in corpus["t:1"].messages] == stamps
    holds = "is outside what a frame's time column holds (1677-09-21 .. 2262-04-11): missing (NaT)"
    assert rows(corpus, tmp_path) == [
        (
            "t_1.jsonl",
            None,
            f"metadata created_at 9999-12-31T23:59:59 {holds} in corpus.sessions, kept as stored in the Session",
        ),
        (
            "t_1.jsonl",
            2,
            f"timestamp '2300-01-01T00:00:00' {holds} in corpus.messages, kept as stored in the Session",
        ),
        (
            "t_1.jsonl",
            4,
            f"timestamp '1600-01-01T00:00:00' {holds} in corpus.messages, kept as stored in the Session",
        ),
    ]


def test_an_uncountable_message_has_a_missing_count_in_the_frame(tmp_path: Path) -> None:
    (tmp_path / "cli_x.jsonl").write_bytes(USER + TEXT_INT)
    frame = sk.load(tmp_path, tokens="fallback").messages
    assert frame["tokens"].tolist() == [4, pd.NA]
