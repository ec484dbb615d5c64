"""Plans kept between runs: a second plan of the same calls is read from the cache (an entry
changed on disk shows), equals a fresh plan, and sends the same bodies; a changed session,
another endpoint or a function edit is planned afresh; damaged files are planned again; with
persistence off nothing is written."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pandas as pd
import pytest
from support.stub_rules import Received, RuleServer

import sessionkit as sk
from sessionkit.calls.frame import row_settings
from sessionkit.experiments.plan_store import PLANS_FORMAT, PlanStore, entry_key

KEY = "cli:direct"
MODEL = "gpt-4o-mini"
"""The model the config of ``ok_corpus`` names (``conftest.OK_MODEL``)."""


@pytest.fixture(scope="module")
def rows(ok_corpus: sk.Corpus) -> pd.DataFrame:
    calls = sk.requests(ok_corpus, KEY, grid={"max_messages": [4, 0]})
    return calls[calls["turn"] < 3]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _folder(cache: Path) -> Path:
    (found,) = cache.glob(f"plans-{PLANS_FORMAT}-*")
    return found


def test_a_second_plan_is_read_from_the_cache_and_equals_a_fresh_one(
    ok_corpus: sk.Corpus, rows: pd.DataFrame, cache: Path
) -> None:
    fresh = sk.experiment(rows, ok_corpus, dry_run=True, cache=False)
    first = sk.experiment(rows, ok_corpus, dry_run=True)
    folder = _folder(cache)
    files = sorted(folder.iterdir())
    assert len(files) == 1  # one session, one release, one endpoint
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    kept = json.loads(files[0].read_text())
    assert len(kept) == len(rows)
    second = sk.experiment(rows, ok_corpus, dry_run=True)
    pd.testing.assert_frame_equal(first, fresh)
    pd.testing.assert_frame_equal(second, fresh)
    row = rows.iloc[2]
    name = entry_key(int(row["turn"]), int(row["step"]), row_settings(row), MODEL, None)
    assert kept[name][1] == fresh["estimated_prompt_tokens"].iloc[2]
    kept[name][1] = 7
    files[0].write_text(json.dumps(kept))
    altered = sk.experiment(rows, ok_corpus, dry_run=True)
    assert list(altered["estimated_prompt_tokens"]) == [
        7 if i == 2 else n for i, n in enumerate(fresh["estimated_prompt_tokens"])
    ]


def test_a_run_after_a_kept_plan_sends_the_bodies_a_fresh_run_sends(
    ok_corpus: sk.Corpus, rows: pd.DataFrame, ok_stub: RuleServer, cache: Path
) -> None:
    ok_stub.reset()
    sk.experiment(rows, ok_corpus, budget_calls=100, cache=False)
    fresh = list(ok_stub.received)
    ok_stub.reset()
    sk.experiment(rows, ok_corpus, dry_run=True)
    out = sk.experiment(rows, ok_corpus, budget_calls=100)
    assert sorted(map(_text, ok_stub.received)) == sorted(map(_text, fresh))
    assert list(out["outcome"]) == ["answered"] * len(rows)


def test_another_session_endpoint_or_a_function_edit_is_planned_afresh(
    ok_corpus: sk.Corpus, rows: pd.DataFrame, cache: Path
) -> None:
    sk.experiment(rows, ok_corpus, dry_run=True)
    sk.experiment(rows, ok_corpus, dry_run=True, endpoint="http://127.0.0.1:9/v1")
    assert len(list(_folder(cache).iterdir())) == 2
    sk.experiment(rows, ok_corpus, dry_run=True, edits={"alone": lambda m: [m[0], m[-1]]})
    assert len(list(_folder(cache).iterdir())) == 2
    changed = ok_corpus[KEY].copy()
    changed.messages[0] = {**changed.messages[0], "content": "another first question"}
    out = sk.experiment(rows, changed, dry_run=True)
    assert len(list(_folder(cache).iterdir())) == 3
    fresh = sk.experiment(rows, changed, dry_run=True, cache=False)
    pd.testing.assert_frame_equal(out, fresh)


def test_a_damaged_plan_is_planned_again(
    ok_corpus: sk.Corpus, rows: pd.DataFrame, cache: Path
) -> None:
    fresh = sk.experiment(rows, ok_corpus, dry_run=True, cache=False)
    sk.experiment(rows, ok_corpus, dry_run=True)
    (kept,) = _folder(cache).iterdir()
    for damage in (
        "{not json",
        '{"a": 1}',
        json.dumps({k: [1, 2] for k in json.loads(kept.read_text())}),
    ):
        kept.write_text(damage)
        pd.testing.assert_frame_equal(sk.experiment(rows, ok_corpus, dry_run=True), fresh)


def test_with_persistence_off_no_plan_is_written(
    ok_corpus: sk.Corpus, rows: pd.DataFrame, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sk.experiment(rows, ok_corpus, dry_run=True, cache=False)
    assert not _folder_exists(cache)
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(cache.parent / "off"))
    monkeypatch.setenv("SESSIONKIT_CACHE", "off")
    for _ in range(2):
        sk.experiment(rows, ok_corpus, dry_run=True)
    assert not (cache.parent / "off").exists()
    assert PlanStore(None).folder is None


def test_the_store_keeps_what_it_is_given_by_file_and_key(cache: Path) -> None:
    store = PlanStore(None)
    name = store.file_of(("content", b"x"), "nanobot-0.2.2", "kit", ("url", [], 1))
    assert name != store.file_of(("content", b"y"), "nanobot-0.2.2", "kit", ("url", [], 1))
    store.put(name, "k", [["d"], 3, -1, None])
    assert not _folder_exists(cache)
    store.flush()
    again = PlanStore(None)
    assert again.entries(name) == {"k": [["d"], 3, -1, None]}
    assert again.entries("missing") == {}


def _text(received: Received) -> str:
    return json.dumps(received.body, sort_keys=True)


def _folder_exists(cache: Path) -> bool:
    return any(cache.glob(f"plans-{PLANS_FORMAT}-*"))
