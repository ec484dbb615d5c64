"""sessionkit's loader against nanobot-ai 0.2.2's SessionManager on the same files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.reference import require

from sessionkit.nanobot.reader import read_session_file

nb = require()

pytestmark = pytest.mark.conformance

DATA = Path(__file__).resolve().parents[2] / "data"


def nanobot_load(file: Path, workspace: Path):
    """Load ``file`` with nanobot's own SessionManager (None when nanobot gives up)."""
    sessions = workspace / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    stem = file.stem
    shutil.copyfile(file, sessions / f"{stem}.jsonl")
    manager = nb.SessionManager(workspace)
    manager.legacy_sessions_dir = workspace / "no-legacy"
    return manager._load(stem)


def assert_same_load(file: Path, workspace: Path) -> None:
    ours, problems = read_session_file(file)
    theirs = nanobot_load(file, workspace)
    if theirs is None:
        assert problems, f"nanobot could not load {file.name}; sessionkit must say why"
        return
    assert ours is not None
    assert ours.messages == theirs.messages + ours.records
    assert ours.metadata == theirs.metadata
    assert ours.last_consolidated == theirs.last_consolidated
    for field in ("created_at", "updated_at"):
        if getattr(ours, field) is not None:
            assert getattr(ours, field) == getattr(theirs, field)


def sample_files() -> list[Path]:
    return sorted(DATA.glob("*/*.jsonl"))


@pytest.mark.parametrize("file", sample_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_sample_data_loads_as_nanobot_loads(file: Path, tmp_path: Path) -> None:
    if any(r.get("_type") == "provider_state" for r in read_session_file(file)[0].records):
        pytest.skip("provider_state records are a later nanobot's; 0.2.2 reads them as messages")
    assert_same_load(file, tmp_path)


texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": texts},
    optional={
        "timestamp": st.sampled_from(["2026-01-01T10:00:00", "2026-01-01T10:00:00.5"]),
        "_command": st.booleans(),
    },
)
metadata = st.fixed_dictionaries(
    {"_type": st.just("metadata")},
    optional={
        "key": st.sampled_from(["cli:x", "telegram:1"]),
        "created_at": st.sampled_from(["2026-01-01T10:00:00", "not a time", "", None, 3]),
        "updated_at": st.sampled_from(["2026-02-01T00:00:00+01:00", None]),
        "metadata": st.one_of(st.just({}), st.dictionaries(texts, texts, max_size=2), st.none()),
        "last_consolidated": st.one_of(
            st.integers(-2, 8), st.just("2"), st.booleans(), st.none(), st.just(2.0)
        ),
    },
)


def encode(record: object) -> bytes:
    return json.dumps(record, ensure_ascii=False).encode()


damaged = st.sampled_from(
    [b"", b"   ", b"{oops", b"[1, 2]", b'"text"', b"null", b"42", b"\xff\xfe", b"NaN"]
)
line = st.one_of(message.map(encode), metadata.map(encode), damaged)
ending = st.sampled_from([b"\n", b"\r\n"])


@given(lines=st.lists(st.tuples(line, ending), max_size=10), head=st.one_of(st.none(), metadata))
def test_generated_files_load_as_nanobot_loads(
    lines: list[tuple[bytes, bytes]], head: dict | None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp("gen")
    body = b"".join(text + end for text, end in lines)
    file = tmp / "cli_x.jsonl"
    file.write_bytes((encode(head) + b"\n" if head else b"") + body)
    assert_same_load(file, tmp / "ws")


EXACT = (
    b'{"role": "user", "content": "x", "big": 18446744073709551617, '
    b'"low": -9223372036854775809, "s": "\\ud800", "nan": NaN, "inf": -Infinity}'
)


def test_exact_values_load_as_nanobot_loads(tmp_path: Path) -> None:
    file = tmp_path / "cli_x.jsonl"
    file.write_bytes(EXACT + b"\n")
    ours, problems = read_session_file(file)
    assert problems == []
    assert repr(ours.messages) == repr(nanobot_load(file, tmp_path / "ws").messages)


@pytest.mark.parametrize(
    "line",
    [
        b'{"role": "user", "n": 1' + b"0" * 4300 + b"}",
        b'{"c": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    ],
    ids=["huge-int", "deep"],
)
def test_lines_that_make_nanobot_lose_the_session_are_reported(line: bytes, tmp_path: Path) -> None:
    file = tmp_path / "cli_x.jsonl"
    file.write_bytes(b'{"role": "user", "content": "kept"}\n' + line + b"\n")
    ours, problems = read_session_file(file)
    assert nanobot_load(file, tmp_path / "ws") is None
    assert ours.messages == [{"role": "user", "content": "kept"}]
    assert ours.held_lines == ((1, line.decode()),)
    held = "loses the whole session; sessionkit holds the line as it is"
    assert [(p.line_no, held in p.reason) for p in problems] == [(2, True)]
