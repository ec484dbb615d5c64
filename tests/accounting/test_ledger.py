"""The ledger's shape, and the daily totals of 0.2.2 / 0.3.0 (written by 0.2.2's own writer;
0.3.0's ``webui/token_usage.py`` is the same file) for the days no per-call log covers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
from support.usage_fixtures import T0, call, ledger, reply, user, write_log, write_session

from sessionkit.schema import USAGE


@pytest.fixture
def record(nanobot, tmp_path: Path) -> Iterator:
    """0.2.2's ``record_token_usage`` writing into ``tmp_path`` as its data dir."""
    from nanobot.config import loader
    from nanobot.webui.token_usage import record_token_usage

    previous = loader._current_config_path
    loader.set_config_path(tmp_path / "config.json")
    try:
        yield record_token_usage
    finally:
        loader._current_config_path = previous


def _config(data: Path, timezone: str) -> None:
    config = {"agents": {"defaults": {"timezone": timezone, "model": "gpt-4o-mini"}}}
    (data / "config.json").write_text(json.dumps(config))


def test_columns_and_dtypes_are_the_declared_ones(tmp_path: Path) -> None:
    write_session(tmp_path, "telegram:a", [user("x", 0), reply("y", 2)])
    write_log(tmp_path, [call(1, 1200, 40, cached=1000)])
    frame = ledger(tmp_path)
    assert {c: str(t) for c, t in frame.dtypes.items()} == {c.name: c.dtype for c in USAGE}
    row = frame.iloc[0]
    assert row["time"] == pd.Timestamp(T0 + 1000, unit="ms", tz="UTC")
    assert (row["model"], row["provider"], row["source"]) == ("gpt-4o-mini", "openai", "user")
    assert (row["prompt_tokens"], row["completion_tokens"], row["cached_tokens"]) == (
        1200,
        40,
        1000,
    )
    assert (row["reported"], row["calls"], row["call_id"]) == (True, 1, 1)


def test_a_call_nanobot_estimated_is_marked_not_reported(tmp_path: Path) -> None:
    write_log(tmp_path, [call(1, estimated=True), call(2)])
    assert ledger(tmp_path)["reported"].tolist() == [False, True]


def test_daily_totals_become_rows_per_day_and_source(record, tmp_path: Path) -> None:
    _config(tmp_path, "Asia/Shanghai")
    when = datetime(2026, 1, 1, 20, 0, tzinfo=UTC)  # 2026-01-02 in Shanghai
    usage = {"prompt_tokens": 1200, "completion_tokens": 40, "cached_tokens": 1000}
    for source in ("user", "user", "dream"):
        record(usage, source=source, timezone_name="Asia/Shanghai", now=when)
    estimated = {"prompt_tokens": 300, "completion_tokens": 5, "estimated_tokens": 305}
    record(estimated, source="cron", timezone_name="Asia/Shanghai", now=when)
    frame = ledger(tmp_path)
    day = pd.Timestamp("2026-01-01 16:00", tz="UTC")
    columns = ["time", "source", "prompt_tokens", "completion_tokens", "cached_tokens", "calls"]
    assert frame[columns].astype(object).values.tolist() == [
        [day, "cron", 300, 5, 0, 1],
        [day, "dream", 1200, 40, 1000, 1],
        [day, "user", 2400, 80, 2000, 2],
    ]
    assert frame["reported"].tolist() == [False, True, True]
    assert frame[["session_key", "turn", "kind", "model", "call_id"]].isna().all().all()
    assert frame["cost_usd"].isna().all()
    assert frame.problems["reason"].tolist() == [
        "daily totals record no model: cost_usd NaN (pass model=)"
    ]
    priced = ledger(tmp_path, model="gpt-4o-mini", provider="openai")
    assert priced["cost_usd"].notna().all() and priced.problems.empty


def test_a_day_the_per_call_log_covers_is_not_counted_twice(record, tmp_path: Path) -> None:
    _config(tmp_path, "Asia/Shanghai")
    usage = {"prompt_tokens": 1200, "completion_tokens": 40}
    for now in (datetime(2025, 12, 31, 4, tzinfo=UTC), datetime(2026, 1, 1, 4, tzinfo=UTC)):
        record(usage, source="user", timezone_name="Asia/Shanghai", now=now)
    write_log(tmp_path, [call(1, 900, 9)])  # T0: 2026-01-01 18:00 in Shanghai
    frame = ledger(tmp_path)
    assert frame[["call_id", "prompt_tokens", "calls"]].astype(object).values.tolist() == [
        [pd.NA, 1200, 1],
        [1, 900, 1],
    ]
    assert frame["time"].tolist()[0] == pd.Timestamp("2025-12-30 16:00", tz="UTC")
    assert frame.problems["reason"].tolist()[0] == (
        "1 day(s) also in the per-call log, daily totals left out: 2026-01-01"
    )
    assert frame.summary["daily_rows"] == 1


def test_a_workspace_source_reads_the_usage_records_of_its_config_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_session(data, "telegram:a", [user("x", 0), reply("y", 2)])
    write_log(data, [call(1)])
    folder = next((data / "sessions").iterdir())
    frame = ledger(folder, config_dir=data)
    assert frame[["call_id", "session_key", "turn", "step"]].values.tolist() == [
        [1, "telegram:a", 0, 0]
    ]


def test_a_workspace_given_for_a_data_dir_replaces_the_recorded_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundled data dir records its workspace as a relative marker (read against the
    current folder, as nanobot does); ``workspace=`` names the right one from anywhere."""
    from sessionkit.accounting import ledger as ledger_module

    sample = Path(__file__).resolve().parents[2] / "data" / "nanobot-0.3.5"
    monkeypatch.chdir(tmp_path)
    _, recorded = ledger_module._groups(sample, None, None, False)
    assert [(where, len(sessions)) for where, sessions in recorded] == [(tmp_path / "workspace", 3)]
    _, given = ledger_module._groups(sample, None, sample / "workspace", False)
    assert [(where, len(sessions)) for where, sessions in given] == [(sample / "workspace", 3)]
