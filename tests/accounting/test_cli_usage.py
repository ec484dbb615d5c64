"""``sessionkit usage PATH``: totals by session, day or model; problems on stderr, exit 1."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from genai_prices import Usage, calc_price
from support.usage_fixtures import T0, call, reply, user, write_log, write_session

from sessionkit.accounting.ledger import usage
from sessionkit.cli import main
from sessionkit.nanobot.naming import SessionPathError


def _price(prompt: int, completion: int, cached: int, at: float) -> float:
    when = datetime.fromtimestamp(T0 / 1000 + at, UTC)
    usage = Usage(input_tokens=prompt, output_tokens=completion, cache_read_tokens=cached)
    return float(
        calc_price(
            usage, "gpt-4o-mini", provider_id="openai", genai_request_timestamp=when
        ).total_price
    )


def _store(data) -> None:
    write_session(data, "telegram:a", [user("x", 0), reply("y", 2)])
    write_session(data, "telegram:b", [user("x", 10), reply("y", 12)])
    write_log(data, [call(1, 1000, 10, cached=800), call(11, 2000, 20), call(30, 500, 5)])


def test_totals_by_session_as_csv(tmp_path, capsys) -> None:
    _store(tmp_path)
    assert main(["usage", str(tmp_path), "--tz", "UTC", "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    costs = [_price(1000, 10, 800, 1), _price(2000, 20, 0, 11), _price(500, 5, 0, 30)]
    assert out.splitlines() == [
        "session,calls,prompt_tokens,completion_tokens,cached_tokens,cache_share,cost_usd,"
        "unpriced,unattributed",
        f"(unattributed),1,500,5,0,0.0,{costs[2]},0,1",
        f"telegram:a,1,1000,10,800,0.8,{costs[0]},0,0",
        f"telegram:b,1,2000,20,0,0.0,{costs[1]},0,0",
    ]
    assert err == (
        "3 logged call(s): 0 tied exactly, 2 by time, 1 unattributed (0 ambiguous); 0 daily "
        "total(s); session times read as UTC\n"
    )


def test_by_model_as_json_and_problems_exit_1(tmp_path, capsys) -> None:
    _store(tmp_path)
    write_log(tmp_path / "other", [call(1, 100, 1, model="stub-model", provider="custom")])
    assert main(["usage", str(tmp_path / "other"), "--by", "model", "--format", "json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == [
        {
            "model": "stub-model",
            "calls": 1,
            "prompt_tokens": 100,
            "completion_tokens": 1,
            "cached_tokens": 0,
            "cache_share": 0.0,
            "cost_usd": None,
            "unpriced": 1,
            "unattributed": 1,
        }
    ]
    assert err.splitlines()[1] == (
        "problem: genai-prices: no price for model 'stub-model' (provider 'custom') in "
        "genai-prices: cost_usd NaN for 1 call(s) (Unable to find provider with model matching "
        "'stub-model')"
    )


def test_by_day_in_the_zone_given_with_a_total(tmp_path, capsys) -> None:
    _store(tmp_path)
    assert main(["usage", str(tmp_path), "--by", "day", "--tz", "Pacific/Kiritimati"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in lines] == [
        ["day", "calls", "prompt_tokens"],
        ["2026-01-02", "3", "3500"],
        ["TOTAL", "3", "3500"],
    ]


def test_a_pricing_note_is_information_not_a_problem(tmp_path, capsys) -> None:
    """A provider genai-prices does not know is priced at the model's own provider: a note on
    stderr, exit 0 (a `set -e` script goes on)."""
    _store(tmp_path)
    write_log(tmp_path / "other", [call(1, 100, 1, model="gpt-4o-mini", provider="custom")])
    assert main(["usage", str(tmp_path / "other")]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[1] == (
        "note: genai-prices: provider 'custom' is unknown to genai-prices: 'gpt-4o-mini' priced "
        "at openai's prices"
    )


def test_no_usage_log_is_said(tmp_path, capsys) -> None:
    """A data dir without a usage log: no call listed, and a note says why (exit 0)."""
    write_session(tmp_path, "telegram:a", [user("x", 0), reply("y", 2)])
    (tmp_path / "llm_usage.sqlite3").unlink(missing_ok=True)
    assert main(["usage", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    log = tmp_path / "llm_usage.sqlite3"
    assert err.splitlines()[1] == (
        f"note: {log}: no usage log: llm_usage.sqlite3 does not exist in {tmp_path} (nanobot "
        "0.3.5 writes one there; earlier releases record no calls), so no call is listed"
    )


def test_a_config_dir_that_is_not_there_is_refused(tmp_path) -> None:
    write_session(tmp_path, "telegram:a", [user("x", 0), reply("y", 2)])
    with pytest.raises(SessionPathError, match="config_dir .*typo does not exist"):
        usage(tmp_path, config_dir=tmp_path / "typo")
