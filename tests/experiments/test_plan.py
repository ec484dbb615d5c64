"""A plan rebuilt in forked workers equals one rebuilt in this process: the same calls,
estimates and digests, and a real run sends the same bodies."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from support.stub_rules import RuleServer

import sessionkit as sk
from sessionkit.tuning import tuned

KEY = "cli:direct"


@pytest.fixture(scope="module")
def rows(ok_corpus: sk.Corpus) -> pd.DataFrame:
    calls = sk.requests(ok_corpus, grid={"max_messages": [4, 0]})
    return calls[calls["turn"] < 3]


def test_workers_plan_what_this_process_plans(ok_corpus: sk.Corpus, rows: pd.DataFrame) -> None:
    edits = {"as stored": None, "short": "in short?", "alone": lambda m: [m[0], m[-1]]}
    options = {"dry_run": True, "cache": False, "edits": edits, "samples": 2}
    with tuned(parallel_plan_rows=10**9):
        here = sk.experiment(rows, ok_corpus, **options)
    with tuned(parallel_plan_rows=1):
        forked = sk.experiment(rows, ok_corpus, **options)
    assert len(here) == len(rows) * 3 * 2 and rows["session_key"].nunique() > 3
    pd.testing.assert_frame_equal(forked, here)
    assert forked.summary == here.summary


def test_a_real_run_planned_by_workers_sends_the_same_bodies(
    ok_corpus: sk.Corpus, rows: pd.DataFrame, ok_stub: RuleServer
) -> None:
    picked = rows[rows["session_key"] == KEY]
    sent = []
    for threshold in (10**9, 1):
        ok_stub.reset()
        with tuned(parallel_plan_rows=threshold):
            out = sk.experiment(picked, ok_corpus, budget_calls=100, cache=False)
        assert list(out["outcome"]) == ["answered"] * len(picked)
        sent.append(sorted(json.dumps(r.body, sort_keys=True) for r in ok_stub.received))
    assert sent[0] == sent[1] and len(sent[0]) == len(picked)
