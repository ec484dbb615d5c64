"""One bad file or message costs a problem row, never the load of the whole corpus."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

import sessionkit as sk
from sessionkit import corpus as corpus_module
from sessionkit.nanobot.reader import read_session_file

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

    monkeypatch.setattr(corpus_module, "read_session_file", fragile)
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
        ("sessions/pipe.jsonl", None, "a FIFO (named pipe), not a regular file; not read"),
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
    assert rows(corpus, tmp_path) == [
        ("pipe.jsonl", None, "a FIFO (named pipe), not a regular file; not read")
    ]


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
