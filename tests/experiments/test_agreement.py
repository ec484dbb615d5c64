"""Agreement per setting: counts, rates, tokens and cost of each setting of hand-made results,
labelled by what varies; unanswered and uncompared rows count where they should."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from support.experiment_results import results

from sessionkit.experiments.agreement import agreement_by_setting
from sessionkit.schema import AGREEMENT

NAN = float("nan")


def test_each_setting_counts_its_answers_and_the_share_agreeing() -> None:
    frame = agreement_by_setting(
        results(
            {},
            {"call": 1, "same_action": False},
            {"call": 2, "same_action": None, "original_text": None},
            {"max_messages": 120, "estimated_prompt_tokens": 3000, "cost_usd": 0.0006},
            {
                "max_messages": 120,
                "call": 1,
                "outcome": "failed",
                "same_action": None,
                "prompt_tokens": None,
                "cost_usd": NAN,
            },
            {  # a request that could not be rebuilt: no estimate, left out of tokens per call
                "max_messages": 120,
                "call": 2,
                "outcome": "failed",
                "estimated_prompt_tokens": 0,
                "worst_cost_usd": NAN,
                "same_action": None,
                "prompt_tokens": None,
                "cost_usd": NAN,
            },
        )
    )
    assert {c: str(t) for c, t in frame.dtypes.items()} == {c.name: c.dtype for c in AGREEMENT}
    assert list(frame["setting"]) == ["max_messages 20", "max_messages 120"]
    assert list(frame["max_messages"]) == [20, 120]
    assert list(frame["calls"]) == [3, 3]
    assert list(frame["answered"]) == [3, 1]
    assert list(frame["compared"]) == [2, 1]
    assert list(frame["agreed"]) == [1, 1]
    assert list(frame["agreement_rate"]) == [0.5, 1.0]
    assert list(frame["tokens_per_call"]) == [1000.0, 2000.0]
    assert list(frame["prompt_tokens"]) == [3000, 1000]
    assert frame["cost_usd"].tolist() == pytest.approx([0.0006, 0.0006], rel=1e-12)
    assert frame["cost_per_call"].tolist() == pytest.approx([0.0002, 0.0006], rel=1e-12)
    assert frame["worst_cost_usd"].tolist() == pytest.approx([0.003, 0.002], rel=1e-12)


def test_a_setting_with_no_answer_has_no_rate_tokens_reported_or_cost() -> None:
    frame = agreement_by_setting(
        results({"outcome": "planned", "same_action": None, "prompt_tokens": None, "cost_usd": NAN})
    )
    row = frame.iloc[0]
    assert (row["calls"], row["answered"], row["compared"], row["agreed"]) == (1, 0, 0, 0)
    assert math.isnan(row["agreement_rate"]) and math.isnan(row["cost_usd"])
    assert math.isnan(row["cost_per_call"]) and row["prompt_tokens"] is pd.NA
    assert row["setting"] == "nanobot 0.2.2"


def test_the_label_names_every_column_that_varies_in_order() -> None:
    frame = agreement_by_setting(
        results(
            {"max_messages": 0, "model": "a"},
            {"max_messages": 0, "model": "b", "edit": "terse"},
            {"max_messages": 4, "model": "a"},
        )
    )
    assert list(frame["setting"]) == [
        "max_messages none, model a, edit as stored",
        "max_messages none, model b, edit terse",
        "max_messages 4, model a, edit as stored",
    ]


def test_a_frame_that_is_not_an_experiments_is_refused() -> None:
    with pytest.raises(ValueError, match=r"columns missing: \['call'"):
        agreement_by_setting(results({}).drop(columns=["call"]))
