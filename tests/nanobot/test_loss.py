"""sessionkit.nanobot.loss: nanobot 0.2.2's loader rule, exactly, without importing nanobot."""

from __future__ import annotations

import io
import itertools
import json
import random
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from sessionkit.nanobot import loss
from sessionkit.nanobot.loss import LongLine, nanobot_load, read_line, split_lines

DAMAGED = Path(__file__).resolve().parents[2] / "data" / "damaged"

META = b'{"_type": "metadata", "key": "t:1", "created_at": "2025-01-01T00:00:00", '
META += b'"updated_at": "2025-01-01T00:01:00", "metadata": {"title": "x"}, "last_consolidated": 1}'
USER = b'{"role": "user", "content": "hi"}'
REPLY = b'{"role": "assistant", "content": "caf\xc3\xa9"}'

BAD_LINES = [
    b'{"role": "user", "content": "cut',  # truncated: skipped
    b"<<<<<<< HEAD",  # not JSON: skipped
    b"\xef\xbb\xbf{}",  # BOM: skipped
    b"[1, 2]",  # not an object: fatal
    b'"text"',  # fatal
    b"null",  # fatal
    b'{"role": "user", "content": "caf\xe9"}',  # Latin-1: fatal
    b'{"n": ' + b"7" * 5000 + b"}",  # over Python's digit limit: fatal
    b"[" * 5000 + b"]" * 5000,  # too deep: fatal
    b'{"_type": "metadata", "created_at": "yesterday", "metadata": {}}',  # bad time: repair
    b'{"_type": "metadata", "updated_at": 5, "metadata": {}}',  # TypeError: repair
    b'{"_type": "metadata", "last_consolidated": "7"}',  # offset reset
    b"   \t ",  # blank
]


def _lines(data: bytes) -> list[bytes]:
    return list(split_lines(io.BytesIO(data)))


@pytest.mark.parametrize(
    ("data", "lines"),
    [
        (b"a\nb\n", [b"a", b"b"]),
        (b"a\r\nb", [b"a", b"b"]),
        (b"a\rb\r", [b"a", b"b"]),
        (b"a\r\r\n", [b"a", b""]),
        (b"\n\n", [b"", b""]),
        (b"", []),
    ],
)
def test_split_lines_like_text_mode(data, lines):
    assert _lines(data) == lines
    assert [s.encode() for s in io.StringIO(data.decode(), newline=None)] == [
        x + b"\n" if i < len(lines) - 1 or data.endswith((b"\n", b"\r")) else x
        for i, x in enumerate(lines)
    ]


@pytest.mark.parametrize("block", [1, 2, 3, 7])
def test_split_lines_across_blocks(monkeypatch, block):
    monkeypatch.setattr(loss, "_BLOCK", block)
    rng = random.Random(block)
    for _ in range(300):
        data = bytes(rng.choice(b"ab\r\n") for _ in range(rng.randint(0, 12)))
        text = data.decode()
        expected = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        if expected[-1] == "":
            expected.pop()
        assert [x.decode() for x in _lines(data)] == expected, data


def test_a_line_over_the_limit_is_counted_not_kept(monkeypatch):
    monkeypatch.setattr(loss, "_BLOCK", 4)
    lines = list(split_lines(io.BytesIO(b"ab\n" + b"x" * 25 + b"\r\ncd"), limit=10))
    assert lines == [b"ab", b"", b"cd"]
    assert isinstance(lines[1], LongLine) and lines[1].size == 25
    assert read_line(lines[1]).reason == "a line of 25 bytes, too long to read"
    assert nanobot_load(lines).fatal == ((2, "a line of 25 bytes, too long to read"),)


@pytest.mark.parametrize(
    ("raw", "status", "reason"),
    [
        (b"  ", "blank", None),
        (b"{}", "record", None),
        (b"[1]", "fatal", "JSON array, not an object"),
        (b"caf\xe9", "fatal", "not valid UTF-8 (byte 3)"),
        (b"{", "skipped", "not JSON: Expecting property name enclosed in double quotes (column 2)"),
    ],
)
def test_read_line(raw, status, reason):
    verdict = read_line(raw)
    assert (verdict.status, verdict.reason) == (status, reason)


def _at_depth(depth: int, call):
    return call() if depth <= 0 else _at_depth(depth - 1, call)


def _nested(levels: int) -> bytes:
    return b'{"role": "user", "content": ' + b"[" * levels + b"]" * levels + b"}"


def test_a_deep_line_is_judged_the_same_whatever_the_callers_stack_depth():
    lines = [META, _nested(850), _nested(950), USER]
    loads = [_at_depth(d, lambda: nanobot_load(lines)) for d in (0, 400, 880)]
    assert all(load == loads[0] for load in loads)
    assert loads[0].fatal == ((3, "JSON nested too deeply for Python's json"),)
    assert (loads[0].lost, loads[0].message_lines) == (True, ())
    verdicts = [_at_depth(d, lambda: read_line(_nested(850))) for d in (0, 400, 880)]
    assert [v.status for v in verdicts] == ["record"] * 3
    assert all(v.value == verdicts[0].value for v in verdicts)


def test_a_clean_file_keeps_everything():
    load = nanobot_load([META, USER, REPLY])
    assert (load.lost, load.repaired) == (False, False)
    assert (load.message_lines, load.metadata_lines) == ((2, 3), (1,))
    assert (load.skipped, load.fatal, load.last_consolidated, load.replaced) == ((), (), 1, ())


def test_a_skipped_line_is_lost_alone():
    load = nanobot_load([META, b"{oops", USER])
    assert (load.lost, load.repaired, load.message_lines) == (False, True, (3,))
    assert load.skipped == (
        (2, "not JSON: Expecting property name enclosed in double quotes (column 2)"),
    )
    assert load.damaged_lines == (2,)


def test_a_non_object_line_loses_the_whole_session():
    load = nanobot_load([META, USER, b"[1, 2]", REPLY])
    assert load.lost and load.message_lines == () and load.last_consolidated == 0
    assert load.fatal == ((3, "JSON array, not an object"),)


def test_repair_with_nothing_in_it_is_lost():
    load = nanobot_load([b'{"_type": "metadata", "created_at": "x", "metadata": {}}'])
    assert load.lost and load.fatal == ()
    assert load.replaced == ("created_at 'x' (not ISO)",)


def test_a_bad_offset_is_replaced():
    load = nanobot_load([b'{"_type": "metadata", "last_consolidated": "7"}', USER])
    assert load.replaced == ("last_consolidated '7' (reset to 0)",)


def _generated() -> list[bytes]:
    """Seeded damaged files: a clean session with one to three bad lines spliced in."""
    rng = random.Random(20261130)
    base = [META, USER, REPLY, USER, REPLY]
    files = [b"\n".join(base[:1] + [bad] + base[1:]) + b"\n" for bad in BAD_LINES]
    files += [b"\n".join([bad] + base[1:]) for bad in BAD_LINES]
    for a, b in itertools.combinations(BAD_LINES, 2):
        files.append(b"\r\n".join([META, a, USER, b]))
    for _ in range(60):
        lines = base + rng.sample(BAD_LINES, rng.randint(1, 3))
        rng.shuffle(lines)
        files.append(b"\n".join(lines) + rng.choice([b"", b"\n", b"\r"]))
    return files


def _nanobot(nanobot: ModuleType, file: Path, workspace: Path):
    sessions = workspace / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(file, sessions / "probe.jsonl")
    manager = nanobot.SessionManager(workspace)
    manager.legacy_sessions_dir = workspace / "no-legacy"
    return manager._load("probe")


def _assert_same(nanobot: ModuleType, file: Path, workspace: Path) -> None:
    theirs = _nanobot(nanobot, file, workspace)
    with open(file, "rb") as stream:
        ours = nanobot_load(split_lines(stream))
    assert ours.lost == (theirs is None), file.name
    if theirs is None:
        return
    lines = _lines(file.read_bytes())
    assert theirs.messages == [json.loads(lines[n - 1]) for n in ours.message_lines]
    assert theirs.last_consolidated == ours.last_consolidated


@pytest.mark.conformance
@pytest.mark.parametrize("name", sorted(p.name for p in DAMAGED.glob("*.jsonl")))
def test_bundled_damaged_files_match_nanobot(nanobot, tmp_path, name):
    _assert_same(nanobot, DAMAGED / name, tmp_path)


@pytest.mark.conformance
def test_generated_damaged_files_match_nanobot(nanobot, tmp_path):
    files = _generated()
    assert len(files) == 164
    for n, data in enumerate(files):
        file = tmp_path / f"f{n}.jsonl"
        file.write_bytes(data)
        _assert_same(nanobot, file, tmp_path / f"ws{n}")
