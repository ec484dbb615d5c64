"""Model judges against the stub server: the judge is asked after the answers with its prompt
made from each result, through the same budget (its calls count) and answer store (kept, not
asked again), and its score is the first number of its answer when in [0, 1]."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support.stub_openai import Reply, Usage
from support.stub_rules import RuleServer, stub_workspace

import sessionkit as sk
from sessionkit.experiments.judging import score_of

KEY = "cli:direct"
MODEL = "gpt-4o-mini"
JUDGE = "judge-model"
API_KEY = "sk-test-judge-7d1e"
PROMPT = "Answer: {answer_text}\nBefore: {original_text}\nScore from 0 to 1:"
USAGE = Usage(prompt_tokens=100, completion_tokens=3)


def rule(body: dict[str, Any], seen: int) -> Reply:
    """Answers name how many messages they were sent; the judge scores an answer 0.75."""
    if body["model"] == JUDGE:
        text = body["messages"][0]["content"]
        return Reply(USAGE, text="Score: 0.75" if text.startswith("Answer: answer ") else "great")
    return Reply(USAGE, text=f"answer {len(body['messages'])}")


@pytest.fixture(scope="module")
def stub() -> Iterator[RuleServer]:
    with RuleServer(rule) as server:
        yield server


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, stub: RuleServer) -> sk.Corpus:
    return sk.load(
        stub_workspace(
            tmp_path_factory.mktemp("judging"), data_dir, stub.url, model=MODEL, api_key=API_KEY
        )
    )


@pytest.fixture(scope="module")
def rows(corpus: sk.Corpus) -> pd.DataFrame:
    frame = sk.requests(corpus, KEY, max_messages=4)
    return frame[frame["turn"] < 2]


@pytest.fixture(autouse=True)
def fresh(stub: RuleServer) -> None:
    stub.rule = rule
    stub.reset()


def judged(stub: RuleServer) -> list[dict[str, Any]]:
    """The judge's requests, by their prompt (they arrive in any order)."""
    bodies = [r.body for r in stub.received if r.body["model"] == JUDGE]
    return sorted(bodies, key=lambda b: str(b["messages"][0]["content"]))


def test_a_model_judge_is_asked_under_the_budget_and_kept(
    corpus: sk.Corpus,
    rows: pd.DataFrame,
    stub: RuleServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "cache"))
    judge = sk.ModelJudge(model=JUDGE, prompt=PROMPT)
    out = sk.experiment(rows, corpus, budget_calls=len(rows) + 2, judge=judge)
    assert len(rows) == 3 and list(out["outcome"]) == ["answered"] * 3
    scores = list(out["judge_score"])
    assert scores[:2] == [0.75, 0.75] and math.isnan(scores[2])
    assert list(out.notes["reason"]) == ["1 result(s) not judged (over budget)"]
    results = out.to_dict("records")
    assert judged(stub) == [
        {
            "model": JUDGE,
            "messages": [{"role": "user", "content": PROMPT.format_map(results[i])}],
            "temperature": 0,
            "max_tokens": 16,
        }
        for i in sorted(range(2), key=lambda i: PROMPT.format_map(results[i]))
    ]
    assert judged(stub)[0]["messages"][0]["content"].startswith("Answer: answer ")
    assert {r.authorization for r in stub.received} == {f"Bearer {API_KEY}"}
    resumed = sk.experiment(rows, corpus, budget_calls=1, judge=judge)
    assert len(stub.received) == 6  # the answers are kept; one new judge call
    assert list(resumed["outcome"]) == ["stored"] * 3
    assert list(resumed["judge_score"]) == [0.75] * 3
    again = sk.experiment(rows, corpus, budget_calls=0, judge=judge)
    assert len(stub.received) == 6 and list(again["judge_score"]) == [0.75] * 3
    assert len(list((tmp_path / "cache" / "answers-1").iterdir())) == 6
    planned = sk.experiment(rows, corpus, dry_run=True, judge=judge)
    assert list(planned["judge_score"]) == [0.75] * 3  # a dry run reads kept judgements


def test_a_dict_judge_and_an_answer_without_a_score(
    corpus: sk.Corpus, rows: pd.DataFrame, stub: RuleServer
) -> None:
    judge = {"model": JUDGE, "prompt": "{answer_text}", "params": {"max_tokens": 4}}
    out = sk.experiment(rows, corpus, budget_calls=10, judge=judge, cache=False)
    assert out["judge_score"].isna().all()
    assert [b["max_tokens"] for b in judged(stub)] == [4, 4, 4]
    texts = sorted(out["answer_text"])
    assert [b["messages"][0]["content"] for b in judged(stub)] == texts
    assert [r for r in out.problems["reason"] if r.startswith("judge")] == [
        f"judge gave no score in [0, 1] on result {i}: 'great'" for i in range(3)
    ]


def test_a_judge_that_is_no_judge_is_refused(corpus: sk.Corpus, rows: pd.DataFrame) -> None:
    with pytest.raises(TypeError, match="judge must be a function of a results row"):
        sk.experiment(rows, corpus, dry_run=True, judge=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"a judge dict takes model= and prompt="):
        sk.experiment(rows, corpus, dry_run=True, judge={"model": JUDGE})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.75", 0.75),
        ("Score: 1", 1.0),
        ("score .5 of 1", 0.5),
        ("0", 0.0),
        ("7/10", math.nan),
        ("-0.5", 0.5),
        ("no number", math.nan),
        (None, math.nan),
    ],
)
def test_the_score_is_the_first_number_in_zero_to_one(text: str | None, expected: float) -> None:
    got = score_of(text)
    assert got == expected or (math.isnan(got) and math.isnan(expected))
