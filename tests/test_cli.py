"""The ``sessionkit summary`` command on a tiny store: exact table, CSV and JSON output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sessionkit.cli import main

TELEGRAM = [
    {
        "_type": "metadata",
        "key": "telegram:42",
        "created_at": "2026-03-01T09:00:00",
        "updated_at": "2026-03-01T09:05:00",
        "metadata": {"title": "<think>naming</think>Weekend trip"},
        "last_consolidated": 1,
    },
    {"role": "user", "content": "plan a trip", "timestamp": "2026-03-01T09:00:00"},
    {"role": "assistant", "content": "Sure, where to?", "timestamp": "2026-03-01T09:00:05"},
    {"role": "user", "content": "Lisbon", "timestamp": "2026-03-01T09:01:00"},
]
CLI = [
    {
        "_type": "metadata",
        "key": "cli:direct",
        "created_at": "2026-03-02T10:00:00",
        "updated_at": "2026-03-02T10:00:00",
        "metadata": {},
        "last_consolidated": 0,
    },
    {"role": "user", "content": "hello world"},
    {"role": "assistant", "content": "hi"},
]


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws" / "sessions"
    folder.mkdir(parents=True)
    _write(folder / "telegram_42.jsonl", TELEGRAM)
    _write(folder / "cli_direct.jsonl", CLI)
    return tmp_path / "ws"


def test_table(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(workspace)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "        key      format  n_messages  n_user_turns  last_consolidated  tokens"
        "    first_message_at     last_message_at        title",
        " cli:direct nanobot-0.2           2             1                  0      11"
        "                   -                   -             ",
        "telegram:42 nanobot-0.2           3             2                  1      23"
        " 2026-03-01 09:00:00 2026-03-01 09:01:00 Weekend trip",
        "      TOTAL        <NA>           5             3                  1      34"
        " 2026-03-01 09:00:00 2026-03-01 09:01:00         <NA>",
    ]
    assert err == ""


def test_csv(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(workspace), "--format", "csv"]) == 0
    assert capsys.readouterr().out == (
        "key,format,n_messages,n_user_turns,last_consolidated,tokens,first_message_at,"
        "last_message_at,title\n"
        "cli:direct,nanobot-0.2,2,1,0,11,,,\n"
        "telegram:42,nanobot-0.2,3,2,1,23,2026-03-01 09:00:00,2026-03-01 09:01:00,Weekend trip\n"
        "TOTAL,,5,3,1,34,2026-03-01 09:00:00,2026-03-01 09:01:00,\n"
    )


def test_csv_with_fallback_tokens(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(workspace), "--format", "csv", "--tokens", "fallback"]) == 0
    rows = [line.split(",") for line in capsys.readouterr().out.splitlines()]
    # chars // 4 + 4 per message: cli 6 + 4, telegram 6 + 7 + 5.
    assert [(row[0], row[5]) for row in rows[1:]] == [
        ("cli:direct", "10"),
        ("telegram:42", "18"),
        ("TOTAL", "28"),
    ]


def test_json(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(workspace), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {
            "key": "cli:direct",
            "format": "nanobot-0.2",
            "n_messages": 2,
            "n_user_turns": 1,
            "last_consolidated": 0,
            "tokens": 11,
            "first_message_at": None,
            "last_message_at": None,
            "title": "",
        },
        {
            "key": "telegram:42",
            "format": "nanobot-0.2",
            "n_messages": 3,
            "n_user_turns": 2,
            "last_consolidated": 1,
            "tokens": 23,
            "first_message_at": "2026-03-01T09:00:00.000",
            "last_message_at": "2026-03-01T09:01:00.000",
            "title": "Weekend trip",
        },
        {
            "key": "TOTAL",
            "format": None,
            "n_messages": 5,
            "n_user_turns": 3,
            "last_consolidated": 1,
            "tokens": 34,
            "first_message_at": "2026-03-01T09:00:00.000",
            "last_message_at": "2026-03-01T09:01:00.000",
            "title": None,
        },
    ]


def test_single_file_and_problems_note(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    damaged = workspace / "sessions" / "cli_direct.jsonl"
    damaged.write_text(damaged.read_text(encoding="utf-8") + "not json\n", encoding="utf-8")
    assert main(["summary", str(damaged), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[1:] == ["cli:direct,nanobot-0.2,2,1,0,11,,,", "TOTAL,,2,1,0,11,,,"]
    assert err == "1 problem(s) found; see Corpus.problems\n"


def test_missing_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    assert main(["summary", str(missing)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"sessionkit: error: no such file or folder: {missing}\n"


def test_empty_folder_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"sessionkit: error: {tmp_path} holds no session files (*.jsonl or *.json)\n"


def test_workspace_with_empty_sessions_folder_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sessions").mkdir()
    assert main(["summary", str(tmp_path)]) == 2
    expected = f"sessionkit: error: {tmp_path / 'sessions'} holds no session files"
    assert capsys.readouterr().err.startswith(expected)


def test_bad_option_is_an_argparse_error(workspace: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["summary", str(workspace), "--format", "xml"])
    assert exit_info.value.code == 2
