"""The usage log read from a private copy: nanobot's data dir untouched, a locked, damaged,
foreign or newer log a recorded problem and the rest of the ledger."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from support.releases import release  # noqa: E402
from support.usage_fixtures import DDL_035, call, ledger, write_log

OLD_DAY = {
    "schema_version": 1,
    "days": {
        "2025-06-01": {
            "date": "2025-06-01",
            "prompt_tokens": 500,
            "completion_tokens": 50,
            "cached_tokens": 0,
            "total_tokens": 550,
            "provider_tokens": 550,
            "estimated_tokens": 0,
            "requests": 2,
            "provider_requests": 2,
            "sources": {
                "user": {
                    "prompt_tokens": 500,
                    "completion_tokens": 50,
                    "cached_tokens": 0,
                    "total_tokens": 550,
                    "provider_tokens": 550,
                    "estimated_tokens": 0,
                    "requests": 2,
                    "provider_requests": 2,
                }
            },
        }
    },
    "updated_at": "2025-06-01T12:00:00Z",
}


def _with_old_day(data: Path) -> None:
    (data / "webui").mkdir(parents=True)
    (data / "webui" / "token-usage.json").write_text(json.dumps(OLD_DAY, indent=2, sort_keys=True))


def _table(data: Path, ddl: str, rows: list[tuple], version: int = 1) -> None:
    data.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(data / "llm_usage.sqlite3", isolation_level=None)
    connection.executescript(ddl)
    connection.execute(f"PRAGMA user_version = {version}")
    for row in rows:
        connection.execute(f"INSERT INTO llm_calls VALUES (NULL, {', '.join('?' * len(row))})", row)
    connection.close()


def _listing(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under ``folder``: bytes, mode and modification time."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mode, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _words(rows: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Schema rows with each statement's white space collapsed (indentation differs)."""
    return [(kind, name, " ".join(sql.split())) for kind, name, sql in rows]


def _reasons(frame) -> list[str]:
    return frame.problems["reason"].tolist()


@pytest.mark.conformance
def test_the_fixture_table_is_the_one_0_3_5_creates(tmp_path: Path) -> None:
    theirs, ours = tmp_path / "release.sqlite3", tmp_path / "ours.sqlite3"
    code = (
        "import sys; from pathlib import Path; from nanobot.llm_usage.store import LLMUsageStore;"
        "s = LLMUsageStore(Path(sys.argv[1])); s.count(); s.close()"
    )
    subprocess.run([str(release("0.3.5").python), "-I", "-c", code, str(theirs)], check=True)
    write_log(ours.parent / "ours", [])
    schema = "SELECT type, name, sql FROM sqlite_master ORDER BY name"
    with (
        sqlite3.connect(theirs) as a,
        sqlite3.connect(ours.parent / "ours" / "llm_usage.sqlite3") as b,
    ):
        assert _words(a.execute(schema).fetchall()) == _words(b.execute(schema).fetchall())
        assert a.execute("PRAGMA user_version").fetchone() == (1,)
        assert a.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_a_live_log_is_read_from_a_copy_and_the_data_dir_is_left_as_it_was(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    write_log(data, [call(1), call(2)])
    writer = sqlite3.connect(data / "llm_usage.sqlite3", isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute(
        "INSERT INTO llm_calls SELECT NULL, started_at_ms + 5000, duration_ms, provider, "
        "model, source, stream, finish_reason, input_tokens, output_tokens, total_tokens, "
        "cache_read_tokens, cache_write_tokens, reported_tokens, estimated_tokens, "
        "generation_ms, measured_output_tokens, ttft_ms, timed_requests, "
        "error_status_code, error_kind FROM llm_calls WHERE id = 1"
    )
    try:
        before = _listing(data)
        assert sorted(before) == [
            "llm_usage.sqlite3",
            "llm_usage.sqlite3-shm",
            "llm_usage.sqlite3-wal",
        ]
        frame = ledger(data)
        assert _listing(data) == before
        assert frame["call_id"].tolist() == [1, 2, 3]
        assert _reasons(frame) == []
    finally:
        writer.close()


def test_a_locked_log_gives_its_committed_rows_at_once(tmp_path: Path) -> None:
    write_log(tmp_path, [call(1), call(2)])
    writer = sqlite3.connect(tmp_path / "llm_usage.sqlite3", isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute("DELETE FROM llm_calls")
    try:
        started = time.monotonic()
        frame = ledger(tmp_path)
        assert time.monotonic() - started < 5
        assert frame["call_id"].tolist() == [1, 2]
    finally:
        writer.rollback()
        writer.close()


def test_a_truncated_log_is_a_problem_and_the_daily_totals_remain(tmp_path: Path) -> None:
    db = write_log(tmp_path, [call(i, 1000 + i) for i in range(400)])
    db.write_bytes(db.read_bytes()[:4096])
    _with_old_day(tmp_path)
    frame = ledger(tmp_path)
    assert _reasons(frame)[0] == (
        "usage log unreadable (database disk image is malformed): no per-call rows"
    )
    assert frame[["source", "prompt_tokens", "calls"]].astype(object).values.tolist() == [
        ["user", 500, 2]
    ]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (
            b"not a database at all " * 200,
            "usage log unreadable (file is not a database): no per-call rows",
        ),
        (None, "no llm_calls table: not a nanobot 0.3.5 usage log"),
    ],
)
def test_a_foreign_file_is_a_problem(tmp_path: Path, content: bytes | None, reason: str) -> None:
    if content is None:
        with sqlite3.connect(tmp_path / "llm_usage.sqlite3") as connection:
            connection.execute("CREATE TABLE notes (text TEXT)")
        connection.close()
    else:
        (tmp_path / "llm_usage.sqlite3").write_bytes(content)
    frame = ledger(tmp_path)
    assert (len(frame), _reasons(frame)) == (0, [reason])


def test_a_newer_schema_is_read_for_the_columns_it_shares(tmp_path: Path) -> None:
    ddl = DDL_035.replace("error_kind TEXT\n", "error_kind TEXT,\n    tenant TEXT\n")
    _table(tmp_path, ddl, [(*call(1), "acme")], version=2)
    frame = ledger(tmp_path)
    assert _reasons(frame)[:2] == [
        "schema version 2 is newer than 1: the columns it shares with version 1 are read",
        "unknown columns ignored: tenant",
    ]
    assert frame[["call_id", "prompt_tokens", "completion_tokens"]].values.tolist() == [
        [1, 1000, 10]
    ]


def test_missing_columns_are_left_na_or_the_log_is_skipped(tmp_path: Path) -> None:
    no_cache = DDL_035.replace("    cache_write_tokens INTEGER,\n", "")
    _table(tmp_path / "a", no_cache, [call(1, written=7)[:11] + call(1)[12:]])
    frame = ledger(tmp_path / "a")
    assert _reasons(frame)[0] == "columns missing, left <NA>: cache_write_tokens"
    assert frame["cache_write_tokens"].isna().tolist() == [True]
    assert frame["cached_tokens"].tolist() == [0]
    no_model = DDL_035.split("CREATE INDEX")[0].replace("    model TEXT NOT NULL,\n", "")
    row = call(1)
    _table(tmp_path / "b", no_model, [row[:3] + row[4:]])
    _with_old_day(tmp_path / "b")
    frame = ledger(tmp_path / "b")
    assert _reasons(frame)[0] == "required columns missing: model"
    assert frame["calls"].tolist() == [2]


def test_values_that_are_no_counts_are_cut_and_named(tmp_path: Path) -> None:
    db = write_log(tmp_path, [call(1), call(2), call(3), call(4)])
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE llm_calls SET input_tokens = 'lots' WHERE id IN (2, 3)")
        connection.execute("UPDATE llm_calls SET output_tokens = -5 WHERE id = 4")
        connection.execute("UPDATE llm_calls SET started_at_ms = 'soon' WHERE id = 1")
    connection.close()
    frame = ledger(tmp_path)
    assert _reasons(frame)[:3] == [
        "1 row(s) with started_at_ms not a non-negative integer (first id 1): row left out",
        "2 row(s) with input_tokens not a non-negative integer (first id 2): input_tokens left <NA>",
        "1 row(s) with output_tokens not a non-negative integer (first id 4): output_tokens left <NA>",
    ]
    assert frame["call_id"].tolist() == [2, 3, 4]
    assert frame["prompt_tokens"].astype(object).where(
        frame["prompt_tokens"].notna(), None
    ).tolist() == [None, None, 1000]
    assert frame["cost_usd"].isna().tolist() == [True, True, True]
