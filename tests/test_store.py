"""Finding and parsing session files: every format, damaged input recorded, never written."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pytest

from sessionkit.nanobot.reader import (
    Problem,
    SessionPathError,
    find_session_files,
    read_session_file,
)

META = {
    "_type": "metadata",
    "key": "telegram:42",
    "created_at": "2026-03-01T09:00:00",
    "updated_at": "2026-03-01T09:05:00.250000",
    "metadata": {"title": "Trip"},
    "last_consolidated": 1,
}
USER = {"role": "user", "content": "hello", "timestamp": "2026-03-01T09:00:00"}
REPLY = {"role": "assistant", "content": "hi", "timestamp": "2026-03-01T09:00:01"}


def jsonl(*records: object) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_reads_metadata_and_messages(tmp_path: Path) -> None:
    path = write(tmp_path / "telegram_42.jsonl", jsonl(META, USER, REPLY))
    session, problems = read_session_file(path)
    assert problems == []
    assert session.key == "telegram:42"
    assert session.messages == [USER, REPLY]
    assert session.metadata == {"title": "Trip"}
    assert session.created_at == datetime(2026, 3, 1, 9, 0)
    assert session.updated_at == datetime(2026, 3, 1, 9, 5, 0, 250000)
    assert session.last_consolidated == 1
    assert list(session.line_numbers) == [2, 3]
    assert session.format == "nanobot-0.2"
    assert session.path == path


def test_key_from_file_name_when_metadata_lacks_it(tmp_path: Path) -> None:
    path = write(tmp_path / "discord_99.jsonl", jsonl(USER))
    session, problems = read_session_file(path)
    assert (session.key, session.created_at, session.metadata, problems) == (
        "discord:99",
        None,
        {},
        [],
    )


def test_base64url_name_and_provider_state(tmp_path: Path) -> None:
    state = {"_type": "provider_state", "provider": "openai", "response_id": "r1"}
    meta = {k: v for k, v in META.items() if k != "key"}
    path = write(tmp_path / "d2ViOmFiYw.jsonl", jsonl(meta, state, USER))
    session, problems = read_session_file(path)
    assert session.key == "web:abc"
    assert session.records == [state]
    assert session.messages == [USER]
    assert session.format == "nanobot-0.3"
    assert problems == []


def test_legacy_json_session(tmp_path: Path) -> None:
    body = {"key": "cli:old", "created_at": "2025-01-01T00:00:00", "history": [USER, 7, REPLY]}
    path = write(tmp_path / "old.json", json.dumps(body).encode())
    session, problems = read_session_file(path)
    assert session.key == "cli:old"
    assert session.messages == [USER, REPLY]
    assert session.format == "legacy-json"
    assert problems == [Problem(str(path), None, "history[1] is JSON number, not an object")]


def test_damaged_lines_are_skipped_and_recorded(tmp_path: Path) -> None:
    data = jsonl(META, USER) + b"[1, 2]\n" + b"\xff\xfe oops\n" + b"{not json\n" + jsonl(REPLY)
    data += b'"text"\n   \n{"role": "user", "content": "cut'
    path = write(tmp_path / "telegram_42.jsonl", data)
    session, problems = read_session_file(path)
    assert session.messages == [USER, REPLY]
    assert list(session.line_numbers) == [2, 6]
    assert [(p.line_no, p.reason) for p in problems] == [
        (3, "JSON array, not an object"),
        (4, "not valid UTF-8 (byte 0)"),
        (5, "not JSON: Expecting property name enclosed in double quotes (column 2)"),
        (7, "JSON string, not an object"),
        (9, "not JSON: Unterminated string starting at (column 29)"),
    ]


@pytest.mark.parametrize(
    ("offset", "reason"),
    [
        ("1", "last_consolidated '1' is not an integer; using 0"),
        (True, "last_consolidated True is not an integer; using 0"),
        (5, "last_consolidated 5 is outside 0..2; using 0"),
        (-1, "last_consolidated -1 is outside 0..2; using 0"),
    ],
)
def test_bad_offsets_become_zero(tmp_path: Path, offset: object, reason: str) -> None:
    path = write(tmp_path / "t.jsonl", jsonl({**META, "last_consolidated": offset}, USER, REPLY))
    session, problems = read_session_file(path)
    assert session.last_consolidated == 0
    assert problems == [Problem(str(path), 1, reason)]


def test_bad_timestamp_and_metadata_type(tmp_path: Path) -> None:
    meta = {**META, "created_at": "yesterday", "metadata": None}
    path = write(tmp_path / "t.jsonl", jsonl(meta, USER))
    session, problems = read_session_file(path)
    assert session.created_at is None
    assert session.metadata is None
    assert [p.reason for p in problems] == [
        "metadata is JSON null, not an object",
        "metadata created_at 'yesterday' is not an ISO timestamp",
    ]


def test_crlf_and_lone_cr_line_endings(tmp_path: Path) -> None:
    data = jsonl(META).replace(b"\n", b"\r\n") + jsonl(USER).replace(b"\n", b"\r") + jsonl(REPLY)
    session, problems = read_session_file(write(tmp_path / "t.jsonl", data))
    assert (session.messages, problems) == ([USER, REPLY], [])


def test_non_ascii_whitespace_around_a_line_is_stripped_like_nanobot(tmp_path: Path) -> None:
    data = b"\xc2\xa0" + jsonl(USER)
    session, problems = read_session_file(write(tmp_path / "t.jsonl", data))
    assert (session.messages, problems) == ([USER], [])


def test_empty_file_loads_as_empty_session_with_a_problem(tmp_path: Path) -> None:
    path = write(tmp_path / "cli_x.jsonl", b"\n\n")
    session, problems = read_session_file(path)
    assert (session.key, session.messages) == ("cli:x", [])
    assert problems == [Problem(str(path), None, "empty file: no records")]


def test_unreadable_file_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    folder = tmp_path / "dir.jsonl"
    folder.mkdir()
    session, problems = read_session_file(folder)
    assert session is None
    assert len(problems) == 1 and problems[0].reason.startswith("unreadable: ")


def test_find_files_in_workspace_folder_file_glob_and_list(tmp_path: Path) -> None:
    a = write(tmp_path / "ws" / "sessions" / "a.jsonl", jsonl(USER))
    b = write(tmp_path / "ws" / "sessions" / "b.json", b"{}")
    write(tmp_path / "ws" / "sessions" / ".a.jsonl.tmp", b"")
    write(tmp_path / "ws" / "sessions" / "notes.txt", b"")
    c = write(tmp_path / "other" / "c.jsonl", jsonl(USER))
    assert find_session_files(tmp_path / "ws") == [a, b]
    assert find_session_files(tmp_path / "ws" / "sessions") == [a, b]
    assert find_session_files(str(c)) == [c]
    assert find_session_files(str(tmp_path / "*" / "*.jsonl")) == [c]
    assert find_session_files([tmp_path / "ws", c, a]) == [a, b, c]


def test_missing_and_empty_paths_raise_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SessionPathError, match="no such file or folder: .*missing"):
        find_session_files(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SessionPathError, match="holds no session files"):
        find_session_files(tmp_path / "empty")
    with pytest.raises(SessionPathError, match="matches no session files"):
        find_session_files(str(tmp_path / "*.jsonl"))


def test_reading_never_writes(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", jsonl(META, USER) + b"broken\n")
    before = (path.read_bytes(), os.stat(path).st_mtime_ns, sorted(tmp_path.iterdir()))
    read_session_file(path)
    assert (path.read_bytes(), os.stat(path).st_mtime_ns, sorted(tmp_path.iterdir())) == before
