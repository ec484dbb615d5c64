"""Finding and parsing session files: every format, damaged input recorded, never written."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sessionkit.nanobot import reader
from sessionkit.nanobot.reader import (
    CHECKPOINT_SUFFIX,
    SESSION_SUFFIXES,
    SIDECAR_NAMES,
    Problem,
    SessionPathError,
    find_session_files,
    leftover_temp_files,
    named_like_session,
    read_session_file,
)
from sessionkit.tuning import TUNING

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


def make_kinds(folder: Path) -> dict[str, str]:
    """Things named like sessions that are not regular files, with the reason each gets."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dir.jsonl").mkdir()
    os.mkfifo(folder / "fifo.jsonl")
    (folder / "dangling.jsonl").symlink_to("nowhere.jsonl")
    (folder / "loop.jsonl").symlink_to("loop.jsonl")
    (folder / "null.jsonl").symlink_to(os.devnull)
    return {
        "dangling.jsonl": "a dangling symlink (to 'nowhere.jsonl'); not read",
        "dir.jsonl": "a folder, not a regular file; not read",
        "fifo.jsonl": "a FIFO, not a regular file; not read",
        "loop.jsonl": "a symlink loop; not read",
        "null.jsonl": "a character device, not a regular file; not read",
    }


def test_only_regular_files_are_opened(tmp_path: Path) -> None:
    for name, reason in make_kinds(tmp_path).items():
        assert read_session_file(tmp_path / name) == (
            None,
            [Problem(str(tmp_path / name), None, reason)],
        )


def test_a_symlink_to_a_session_file_is_read(tmp_path: Path) -> None:
    target = write(tmp_path / "real" / "telegram_42.jsonl", jsonl(META, USER))
    (tmp_path / "link.jsonl").symlink_to(target)
    session, problems = read_session_file(tmp_path / "link.jsonl")
    assert (session.key, session.messages, problems) == ("telegram:42", [USER], [])


def test_special_files_are_listed_so_reading_reports_them(tmp_path: Path) -> None:
    good = write(tmp_path / "a.jsonl", jsonl(USER))
    make_kinds(tmp_path)
    names = [p.name for p in find_session_files(tmp_path)]
    assert names == [
        "a.jsonl",
        "dangling.jsonl",
        "dir.jsonl",
        "fifo.jsonl",
        "loop.jsonl",
        "null.jsonl",
    ]
    assert find_session_files(tmp_path / "fifo.jsonl") == [tmp_path / "fifo.jsonl"]
    assert find_session_files(good) == [good]


def test_a_folder_lists_each_kind_in_name_order_as_it_is_read(tmp_path: Path) -> None:
    real = tmp_path / "real"
    write(real / "b.jsonl", jsonl(USER))
    write(real / "a.json", b"{}")
    write(real / "c.jsonl.tmp", b"")
    write(real / ".c.0123456789ab.tmp", b"")
    write(real / "c.checkpoint.json", b"{}")
    write(real / "notes.txt", b"")
    os.mkfifo(real / "0fifo.jsonl")
    (real / "z-link.jsonl").symlink_to(real / "b.jsonl")
    (real / "y-gone.jsonl").symlink_to("nowhere.jsonl")
    (tmp_path / "alias").symlink_to(real)
    resolved = real.resolve()
    expected = [
        (tmp_path / "alias" / "0fifo.jsonl").absolute(),
        resolved / "a.json",
        resolved / "b.jsonl",
        (tmp_path / "alias" / "y-gone.jsonl").absolute(),
    ]
    assert find_session_files(tmp_path / "alias") == expected
    assert find_session_files([real / "b.jsonl", tmp_path / "alias", real]) == [
        resolved / "b.jsonl",
        expected[0],
        resolved / "a.json",
        expected[3],
        real / "0fifo.jsonl",
        real / "y-gone.jsonl",
    ]
    assert [p.reason for p in leftover_temp_files(tmp_path / "alias")] == [
        "leftover temp file of an interrupted save (0 bytes); not read"
    ] * 2
    assert [p.path for p in leftover_temp_files(real)] == [
        str(real / ".c.0123456789ab.tmp"),
        str(real / "c.jsonl.tmp"),
    ]


def test_leftover_temp_files_are_problems(tmp_path: Path) -> None:
    write(tmp_path / "sessions" / "cli_x.jsonl", jsonl(USER))
    ours = write(tmp_path / "sessions" / ".cli_x.0123456789ab.tmp", b"12345")
    theirs = write(tmp_path / "sessions" / "cli_x.jsonl.tmp", b"")
    write(tmp_path / "sessions" / ".cli_x.not-hex.tmp", b"")
    expected = [
        Problem(str(p), None, f"leftover temp file of an interrupted save ({n} bytes); not read")
        for p, n in ((ours, 5), (theirs, 0))
    ]
    assert leftover_temp_files(tmp_path) == expected
    assert leftover_temp_files([tmp_path / "sessions"]) == expected
    assert leftover_temp_files(tmp_path / "sessions" / "cli_x.jsonl") == []


def test_integers_of_any_size_and_lone_surrogates_stay_exact(tmp_path: Path) -> None:
    line = (
        b'{"role": "user", "big": 18446744073709551617, "low": -9223372036854775809, '
        b'"max": 18446744073709551615, "f": 1.5, "s": "\\ud800x", "id": "12345678901234567890"}'
    )
    session, problems = read_session_file(write(tmp_path / "t.jsonl", line + b"\n"))
    assert problems == []
    assert repr(session.messages) == repr([json.loads(line)])
    assert [type(v) for v in session.messages[0].values()] == [str, int, int, int, float, str, str]


LOSES = (
    ": nanobot 0.2.2 cannot parse this line, and its repair fails on it too and loses the "
    "whole session"
)
BIG = "valid JSON, but an integer of more than 4,300 digits, past Python's int-string limit"


HELD = (
    "; sessionkit holds the line as it is: replays leave it out, and forks write it back unchanged"
)


def test_a_line_nanobots_json_refuses_is_reported_and_held_as_it_is(tmp_path: Path) -> None:
    huge = b' {"role": "user", "n": 1' + b"0" * 4300 + b"}\t"
    deep = b'{"content": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    data = jsonl(META) + huge + b"\n" + deep + b"\r\n" + jsonl(USER) + huge + b"\n"
    session, problems = read_session_file(write(tmp_path / "t.jsonl", data))
    assert session.messages == [USER]
    assert list(session.line_numbers) == [4]
    assert session.held_lines == ((0, huge.decode()), (0, deep.decode()), (1, huge.decode()))
    deeper = "valid JSON, but nested over 900 levels deep, deeper than Python's json reads"
    assert [(p.line_no, p.reason, p.skipped) for p in problems] == [
        (2, f"{BIG}{LOSES}{HELD}", True),
        (3, f"{deeper} on nanobot's stack{LOSES}{HELD}", True),
        (5, f"{BIG}{LOSES}{HELD}", True),
    ]


def test_a_line_cut_after_a_huge_integer_is_not_json_and_not_held(tmp_path: Path) -> None:
    cut = b'{"role": "user", "n": 1' + b"0" * 4300 + b', "x": '
    session, problems = read_session_file(write(tmp_path / "t.jsonl", jsonl(USER) + cut))
    assert (session.messages, session.held_lines) == ([USER], ())
    assert [(p.line_no, p.reason, p.skipped) for p in problems] == [
        (
            2,
            "not JSON: Expecting value (column 4330), and before that an integer of more "
            "than 4,300 digits, past Python's int-string limit: nanobot 0.2.2 fails on the "
            "integer, which its repair does not skip, and loses the whole session",
            True,
        )
    ]


def test_replays_leave_held_lines_out(tmp_path: Path) -> None:
    import sessionkit as sk
    from sessionkit.nanobot.policies import POLICIES

    huge = b'{"role": "user", "content": "lost", "n": 1' + b"0" * 5000 + b"}"
    messages = [USER, REPLY, {**USER, "content": "again"}, {**REPLY, "content": "fine"}]
    lines = [json.dumps(m).encode() for m in messages]
    held = write(tmp_path / "a" / "cli_x.jsonl", b"\n".join([*lines[:2], huge, *lines[2:], huge]))
    plain = write(tmp_path / "b" / "cli_x.jsonl", b"\n".join(lines))
    session, _ = read_session_file(held)
    assert session.held_lines == ((2, huge.decode()), (4, huge.decode()))
    without, _ = read_session_file(plain)
    public = [{"role": m["role"], "content": m["content"]} for m in messages]
    for name in POLICIES:
        session.policy = without.policy = name
        assert session.n_user_turns == 2
        assert session.get_history() == public
        assert session.get_history(max_tokens=16) == public[2:]
        assert session.history() == without.history()
    frames = [
        sk.windows(
            sk.load(path, cache=False),
            grid={"policy": list(POLICIES), "max_tokens": [16, 0]},
            at="end",
        )
        for path in (held, plain)
    ]
    pd.testing.assert_frame_equal(frames[0], frames[1])
    assert frames[0].messages_kept.tolist() == [2, 4] * 3


def _at_depth(depth: int, call: Any) -> Any:
    return call() if depth <= 0 else _at_depth(depth - 1, call)


def _nested(levels: int) -> bytes:
    return b'{"role": "user", "content": ' + b"[" * levels + b"]" * levels + b"}\n"


def test_a_deep_line_reads_the_same_whatever_the_callers_stack_depth(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", jsonl(META) + _nested(850) + _nested(990) + jsonl(USER))
    read = [_at_depth(d, lambda: read_session_file(path)) for d in (0, 400, 880)]
    assert all(r == read[0] for r in read)
    session, problems = read[0]
    assert len(session.messages) == 2 and session.messages[1] == USER
    assert [(p.line_no, p.reason[:46], p.skipped) for p in problems] == [
        (3, "valid JSON, but nested 991 levels deep, deeper", True)
    ]


def test_a_deep_line_indexed_then_read_lazily_from_deep_in_the_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sessionkit as sk

    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "sessions"
    folder.mkdir()
    write(folder / "telegram_42.jsonl", jsonl(META) + _nested(850) + jsonl(USER))
    monkeypatch.setattr(TUNING, "racy_ns", 0)  # index a file just written
    assert len(sk.load(folder)["telegram:42"].messages) == 2  # indexed
    corpus = sk.load(folder)  # from the index: messages read on first use
    assert type(corpus["telegram:42"]).__name__ == "IndexedSession"
    assert corpus["telegram:42"]._messages is None  # not read yet
    assert _at_depth(900, lambda: len(corpus["telegram:42"].messages)) == 2


def test_a_metadata_line_past_jsons_limits_is_kept(tmp_path: Path) -> None:
    import sessionkit as sk

    meta = {**META, "metadata": {"title": "Trip", "topic": "kept"}}
    huge = json.dumps(meta).replace(
        '"last_consolidated": 1', '"last_consolidated": 1, "n": 1' + "0" * 5000
    )
    path = write(tmp_path / "matrix_!room33_example.org.jsonl", huge.encode() + b"\n" + jsonl(USER))
    session, problems = read_session_file(path)
    assert (session.key, session.last_consolidated, session.metadata) == (
        META["key"],
        1,
        meta["metadata"],
    )
    assert session.created_at == datetime.fromisoformat(META["created_at"])
    assert [(p.line_no, p.reason, p.skipped) for p in problems] == [
        (1, f"{BIG}{LOSES}; sessionkit keeps its metadata", False)
    ]
    # A fork keeps the metadata as it was (nanobot's save writes no other field of the line);
    # one whose metadata itself holds such an integer is refused, never written changed.
    fork = sk.fork(session, "t:fork", 1, sessions_dir=tmp_path / "forks", create=True)
    assert read_session_file(fork.path)[0].metadata == {"topic": "kept"}  # title: volatile
    session.metadata["n"] = 10**5000
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        sk.fork(session, "t:fork2", 1, sessions_dir=tmp_path / "forks", create=True)
    assert sorted(p.name for p in (tmp_path / "forks").iterdir()) == ["t_fork.jsonl"]


def test_a_metadata_key_that_is_not_a_string_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path / "cli_x.jsonl", jsonl({**META, "key": 7}, USER))
    session, problems = read_session_file(path)
    assert session.key == "cli:x"
    assert problems == [
        Problem(
            str(path), 1, "metadata key 7 is not a non-empty string; using the file name ('cli:x')"
        )
    ]


def test_keys_and_file_names_that_are_not_utf8_load(tmp_path: Path) -> None:
    stored = write(
        tmp_path / "a.jsonl", jsonl(META).replace(b"telegram:42", b"t:\\ud800") + jsonl(USER)
    )
    named = write(tmp_path / os.fsdecode(b"t_\xff.jsonl"), jsonl(USER))
    assert (read_session_file(stored)[0].key, read_session_file(stored)[0].format) == (
        "t:\ud800",
        "nanobot-0.2",
    )
    session, problems = read_session_file(named)
    assert session.key == "t:\udcff"  # kept as nanobot keeps it; shown escaped, with a problem
    assert [(p.line_no, p.reason) for p in problems] == [
        (
            None,
            "session key 't:\\udcff' is not valid Unicode (lone surrogate); kept, shown as t:\\udcff",
        )
    ]
    assert [p.reason[:29] for p in read_session_file(stored)[1]] == [
        "session key 't:\\ud800' is not"
    ]


def test_a_line_over_the_limit_is_reported_without_being_read(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 100)
    monkeypatch.setattr(reader, "_CHUNK_BYTES", 16)
    path = write(
        tmp_path / "t.jsonl",
        jsonl(META) + jsonl(USER) + b"\r\n" + b" " * 150 + b"\n" + jsonl(REPLY),
    )
    session, problems = read_session_file(path)
    assert session.messages == [USER, REPLY]
    assert [(p.line_no, p.reason) for p in problems] == [
        (
            1,
            "line of 179 bytes is over 100; not read; no metadata record survives, so the key falls back to the file name ('t'), last_consolidated is unknown (0 used), and the title and other metadata are lost",
        ),
        (4, "line of 150 bytes is over 100; not read"),
    ]


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 64])
def test_chunk_boundaries_never_change_the_lines(tmp_path: Path, monkeypatch, chunk: int) -> None:
    data = jsonl(META).replace(b"\n", b"\r\n") + jsonl(USER).replace(b"\n", b"\r") + b"\r\n\n"
    data += jsonl(REPLY) + b"[1]\r" + jsonl(USER)[:-1]
    path = write(tmp_path / "t.jsonl", data)
    expected = read_session_file(path)
    monkeypatch.setattr(reader, "_CHUNK_BYTES", chunk)
    session, problems = read_session_file(path)
    assert (session.messages, list(session.line_numbers), problems) == (
        [USER, REPLY, USER],
        [2, 5, 7],
        [Problem(str(path), 6, "JSON array, not an object", skipped=True)],
    )
    assert (session.messages, problems) == (expected[0].messages, expected[1])


def test_a_huge_sparse_file_is_reported_not_read_into_memory(tmp_path: Path) -> None:
    path = write(tmp_path / "x_1.jsonl", jsonl(USER))
    os.truncate(path, 40 << 30)
    session, problems = read_session_file(path)
    size = (40 << 30) - len(jsonl(USER))
    assert session.messages == [USER]
    assert problems == [
        Problem(str(path), 2, f"line of {size:,} bytes is over 268,435,456; not read", skipped=True)
    ]


def test_find_files_in_workspace_folder_file_glob_and_list(tmp_path: Path) -> None:
    a = write(tmp_path / "ws" / "sessions" / "a.jsonl", jsonl(USER))
    b = write(tmp_path / "ws" / "sessions" / "b.json", b"{}")
    write(tmp_path / "ws" / "sessions" / ".a.jsonl.tmp", b"")
    write(tmp_path / "ws" / "sessions" / "notes.txt", b"")
    write(tmp_path / "ws" / "sessions" / "a.checkpoint.json", b"{}")  # 0.3.5's sidecars
    write(tmp_path / "ws" / "sessions" / ".webui_session_index.json", b"{}")
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


@given(st.text(alphabet=".jsonlcheckpoint_webuidx", max_size=24))
@example("..jsonl")
@example(".a.json")
@example("a.checkpoint.json")
@example(".webui_session_index.json")
def test_a_session_name_is_told_as_splitext_tells_its_suffix(name: str) -> None:
    """The suffix rule without splitting a folder entry's name equals ``os.path.splitext``'s."""
    told = (
        os.path.splitext(name)[1] in SESSION_SUFFIXES
        and not name.endswith(CHECKPOINT_SUFFIX)
        and name not in SIDECAR_NAMES
    )
    assert named_like_session(name) is told


AGENT_STEPS = [  # another agent's trace: JSONL of objects, none a nanobot message
    {"type": "thought", "text": "look up the forecast", "ts": 1767225600},
    {"type": "tool", "name": "weather", "input": {"city": "Oslo"}},
    {"type": "answer", "text": "rain until noon"},
]
FOREIGN = (
    "not a nanobot session: no metadata record, and none of its 3 records has a nanobot role "
    "(assistant, system, tool, user); kept as messages"
)


def test_jsonl_another_program_wrote_is_kept_and_said_not_to_be_nanobots(tmp_path: Path) -> None:
    path = write(tmp_path / "agent-trace.jsonl", jsonl(*AGENT_STEPS))
    session, problems = read_session_file(path)
    assert session.messages == AGENT_STEPS
    assert problems == [Problem(str(path), None, FOREIGN)]


def test_jsonl_another_program_wrote_is_told_when_streamed_too(tmp_path: Path) -> None:
    path = write(tmp_path / "agent-trace.jsonl", jsonl(*AGENT_STEPS))
    seen: list[dict[str, Any]] = []
    session, problems = read_session_file(path, sink=lambda batch, _: seen.extend(batch))
    assert seen == AGENT_STEPS
    assert problems == [Problem(str(path), None, FOREIGN)]


@pytest.mark.parametrize(
    "records",
    [
        [{**META, "last_consolidated": 0}],  # only a metadata line: a session not begun
        [{"role": "tool", "content": "ok"}, {"note": "scratch"}],  # one nanobot role is enough
        [{"_type": "metadata", "key": "cli:x"}, {"type": "answer"}],
    ],
    ids=["metadata-only", "one-role", "metadata-and-foreign"],
)
def test_a_nanobot_mark_makes_a_file_nanobots(tmp_path: Path, records: list[Any]) -> None:
    path = write(tmp_path / "cli_x.jsonl", jsonl(*records))
    assert [p.reason for p in read_session_file(path)[1]] == []


@pytest.mark.parametrize(
    ("body", "kept", "reason"),
    [
        (
            {"name": "settings", "theme": "dark"},
            None,
            "not a nanobot session: a JSON object with no 'history' list, which a legacy "
            "session holds",
        ),
        (
            [{"role": "user", "content": "hi"}],
            None,
            "not a nanobot session: JSON array, where a legacy JSON session is an object",
        ),
        (
            {"messages": [{"speaker": "ana", "said": "hi"}, {"speaker": "bo", "said": "yo"}]},
            2,
            "not a nanobot session: none of its 2 history entries has a nanobot role "
            "(assistant, system, tool, user)",
        ),
    ],
    ids=["settings", "array", "chat-export"],
)
def test_json_shapes_no_release_wrote_are_not_nanobot_sessions(
    tmp_path: Path, body: Any, kept: int | None, reason: str
) -> None:
    path = write(tmp_path / "export.json", json.dumps(body).encode())
    session, problems = read_session_file(path)
    assert (None if session is None else len(session.messages)) == kept
    assert problems == [Problem(str(path), None, reason)]


def _exec_lines() -> list[dict[str, Any]]:
    """A session 0.3.1 left: a ``write_stdin`` call and its result, then provider state."""
    arguments = json.dumps({"session_id": 1, "chars": "yes\n", "yield_time_ms": 250})
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "write_stdin", "arguments": arguments},
    }
    return [
        {"_type": "metadata", "key": "cli:direct", "metadata": {}, "last_consolidated": 0},
        {"_type": "provider_state", "state": {"response_id": "resp_1"}},
        {"role": "user", "content": "confirm the install"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "write_stdin", "content": "installed"},
        {"role": "assistant", "content": "Done."},
    ]


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("folder", ["0" * 32, "elsewhere"])
def test_a_0_3_5_session_is_loaded_as_0_3_5_rewrites_it(
    tmp_path: Path, folder: str, streamed: bool
) -> None:
    """Legacy exec records of a 0.3.5 session (in a 0.3.5 folder, or anywhere by its provider
    state) read as 0.3.5 loads them (``exec_session``, ``input``, ``timeout_ms``; provider
    state forgotten), streamed or not; the file is untouched."""
    where = tmp_path / "sessions" / folder
    where.mkdir(parents=True)
    path = where / "Y2xpOmRpcmVjdA.jsonl"
    text = "".join(json.dumps(r) + "\n" for r in _exec_lines())
    path.write_text(text, encoding="utf-8")
    batches: list[dict[str, Any]] = []
    session, _ = read_session_file(path, (lambda ms, _: batches.extend(ms)) if streamed else None)
    assert session is not None and session.policy == "nanobot-0.3.5"
    messages = batches if streamed else session.messages
    call = messages[1]["tool_calls"][0]["function"]
    assert (call["name"], call["arguments"], messages[2]["name"]) == (
        "exec_session",
        '{"session_id":1,"input":"yes\\n","timeout_ms":250}',
        "exec_session",
    )
    assert session.records == []
    assert path.read_text(encoding="utf-8") == text


def test_a_0_3_0_session_keeps_its_legacy_exec_records(tmp_path: Path) -> None:
    lines = [r for r in _exec_lines() if r.get("_type") != "provider_state"]
    path = tmp_path / "Y2xpOmRpcmVjdA.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    session, _ = read_session_file(path)
    assert session is not None and session.policy == "nanobot-0.3.0"
    assert session.messages == lines[1:]
