"""sk.experiment against a stub OpenAI-compatible server on 127.0.0.1 whose answers follow a
rule of the request: the bodies it receives are sk.request's, answers and comparisons are
what the rule implies call by call, budgets stop at their limit, a dry run sends nothing,
stored answers are not asked again, errors are rows, and the key is written nowhere."""

from __future__ import annotations

import difflib
import json
import logging
import math
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from genai_prices import Usage as PriceUsage
from genai_prices import calc_price
from support.stub_openai import Reply, ToolCall, Usage
from support.stub_rules import Misbehave, RuleServer, message_text, stub_workspace

import sessionkit as sk
from sessionkit.calls.assembly import count_text
from sessionkit.tuning import tuned

KEY = "cli:direct"
MODEL = "gpt-4o-mini"
API_KEY = "sk-test-4f1b-NEVER-WRITTEN-9c2e"
FACT = "perfect, ship it"
"""The session's first user message: out of a 4-message window by turn 2."""
USAGE = Usage(prompt_tokens=1000, completion_tokens=20, cached_tokens=200)


def _toronto_call(corpus: sk.Corpus) -> ToolCall:
    """The tool call the session made at turn 2, step 0 (it asked about Toronto)."""
    function = corpus[KEY].messages[9]["tool_calls"][0]["function"]
    return ToolCall(function["name"], json.loads(function["arguments"]))


def answer(body: dict[str, Any], toronto: ToolCall) -> Reply:
    """The stub's rule: after a tool result, "done"; asked about Toronto, the session's own
    tool call when the first user message is in the context, else "I do not know"; else
    "hello"."""
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        return Reply(USAGE, text="done")
    if "Toronto" in message_text(last):
        if any(FACT in message_text(m) for m in messages[1:-1]):
            return Reply(USAGE, text=None, tool_calls=(toronto,))
        return Reply(USAGE, text="I do not know")
    return Reply(USAGE, text="hello")


@pytest.fixture(scope="module")
def stub() -> Iterator[RuleServer]:
    with RuleServer(lambda body, seen: Reply(USAGE, text="unset")) as server:
        yield server


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, stub: RuleServer) -> Path:
    return stub_workspace(
        tmp_path_factory.mktemp("experiment"), data_dir, stub.url, model=MODEL, api_key=API_KEY
    )


@pytest.fixture(scope="module")
def corpus(workspace: Path) -> sk.Corpus:
    return sk.load(workspace)


@pytest.fixture(scope="module")
def calls(corpus: sk.Corpus) -> pd.DataFrame:
    """Turns 0 to 3 under a 4-message window and under the release's default."""
    rows = sk.requests(corpus, KEY, grid={"max_messages": [4, 0]})
    return rows[rows["turn"] < 4]


@pytest.fixture(autouse=True)
def ruled(stub: RuleServer, corpus: sk.Corpus) -> None:
    toronto = _toronto_call(corpus)
    stub.rule = lambda body, seen: answer(body, toronto)
    stub.reset()


def expected_body(corpus: sk.Corpus, row: Any) -> dict[str, Any]:
    """The body nanobot's OpenAI-compatible provider sends for a row: sk.request's messages
    and tools, the config's model and 0.3.5's default parameters."""
    request = sk.request(
        corpus, KEY, turn=int(row.turn), step=int(row.step), max_messages=int(row.max_messages)
    )
    return {
        "model": MODEL,
        "messages": request.messages,
        "temperature": 0.1,
        "max_tokens": 8192,
        "tools": request.tools,
        "tool_choice": "auto",
    }


def _canonical(bodies: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(b, sort_keys=True, ensure_ascii=False) for b in bodies)


SAME_ACTION = [True, False, True, False, True, False, False, False, True] + [
    True, False, True, True, True, False, False, False, True
]  # fmt: skip
"""Per row (4-message window, then the default): the rule's action against the session's.
Only turn 2, step 0 differs between them: the default window still holds the first message."""


def test_the_stub_receives_sk_requests_bodies_and_answers_by_its_rule(
    corpus: sk.Corpus, calls: pd.DataFrame, stub: RuleServer
) -> None:
    out = sk.experiment(calls, corpus, budget_calls=100, cache=False)
    expected = [expected_body(corpus, row) for row in calls.itertuples()]
    assert _canonical([r.body for r in stub.received]) == _canonical(expected)
    assert {tuple(r.body) for r in stub.received} == {
        ("model", "messages", "temperature", "max_tokens", "tools", "tool_choice")
    }
    assert {r.authorization for r in stub.received} == {f"Bearer {API_KEY}"}
    toronto = _toronto_call(corpus)
    replies = [answer(body, toronto) for body in expected]
    assert list(out["outcome"]) == ["answered"] * len(calls)
    assert {c: str(t) for c, t in out.dtypes.items()} == {
        c.name: c.dtype for c in sk.schema.EXPERIMENTS
    }
    assert list(out["answer_text"].fillna("<none>")) == [r.text or "<none>" for r in replies]
    assert list(out["same_action"]) == SAME_ACTION
    agreed = out.groupby("max_messages")["same_action"].mean().to_dict()
    assert agreed == {0: 5 / 9, 4: 4 / 9}
    assert list(out["call"]) == list(range(len(calls)))
    assert list(out["turn"]) == list(calls["turn"])
    assert list(out["max_messages"]) == list(calls["max_messages"])
    assert list(out["finish_reason"]) == [r.finish_reason for r in replies]
    assert set(out["prompt_tokens"]) == {1000} and set(out["cached_tokens"]) == {200}
    assert out["cache_write_tokens"].isna().all()  # chat completions report none
    price = calc_price(
        PriceUsage(input_tokens=1000, cache_read_tokens=200, output_tokens=20), MODEL
    ).total_price
    assert set(out["cost_usd"]) == {float(price)}
    assert out.summary["answered"] == len(calls) and out.summary["host"] == stub.url[7:-3]
    first = out.iloc[0]
    assert first["original_text"].startswith("Memory grows because")
    assert first["text_similarity"] == pytest.approx(
        difflib.SequenceMatcher(None, "hello", first["original_text"]).ratio()
    )


def test_a_dry_run_sends_nothing_and_returns_the_plan(
    corpus: sk.Corpus, calls: pd.DataFrame, stub: RuleServer
) -> None:
    plan = sk.experiment(calls, corpus, dry_run=True, cache=False)
    assert stub.received == []
    assert list(plan["outcome"]) == ["planned"] * len(calls)
    assert plan["answer_text"].isna().all() and plan["same_action"].isna().all()
    row = calls.iloc[3]
    body = expected_body(corpus, row)
    estimate = sk.get_policy(row["policy"]).estimate_request(
        body["messages"], body["tools"], count_text
    )
    assert plan["estimated_prompt_tokens"].iloc[3] == estimate
    assert plan["max_completion_tokens"].iloc[3] == 8192
    worst = calc_price(
        PriceUsage(input_tokens=math.ceil(estimate * 1.25), output_tokens=8192), MODEL
    ).total_price
    assert plan["worst_cost_usd"].iloc[3] == float(worst)
    assert plan.summary["planned"] == len(calls)
    assert plan.summary["worst_cost_usd"] == pytest.approx(plan["worst_cost_usd"].sum())


def test_nothing_is_sent_without_a_budget(
    corpus: sk.Corpus, calls: pd.DataFrame, stub: RuleServer
) -> None:
    with pytest.raises(ValueError, match=r"sends requests only under a budget: pass budget_calls="):
        sk.experiment(calls, corpus, cache=False)
    with pytest.raises(ValueError, match=r"budget_usd cannot bound calls to 'stub-model'"):
        sk.experiment(calls, corpus, models=["stub-model"], budget_usd=1.0, cache=False)
    with pytest.raises(ValueError, match=r"columns are missing: \['policy', 'turn'"):
        sk.experiment(calls[["session_key"]], corpus, dry_run=True)
    with pytest.raises(ValueError, match=r"samples must be an int of at least 1, not 0"):
        sk.experiment(calls, corpus, samples=0, dry_run=True)
    assert stub.received == []


@pytest.mark.parametrize("concurrency", [1, 8])
def test_a_budget_of_k_calls_sends_exactly_k(
    corpus: sk.Corpus, calls: pd.DataFrame, stub: RuleServer, concurrency: int
) -> None:
    out = sk.experiment(calls, corpus, budget_calls=5, concurrency=concurrency, cache=False)
    assert len(stub.received) == 5
    assert list(out["outcome"]) == ["answered"] * 5 + ["over budget"] * (len(calls) - 5)
    assert out["answer_text"].iloc[5:].isna().all()


def test_a_dollar_budget_reserves_each_calls_worst_case(
    corpus: sk.Corpus, calls: pd.DataFrame, stub: RuleServer
) -> None:
    """Answers without usage cost their worst case, so exactly the calls whose worst cases
    fit go."""
    plan = sk.experiment(calls, corpus, dry_run=True, cache=False)
    worst = list(plan["worst_cost_usd"])
    unpriced = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
    stub.rule = lambda body, seen: Misbehave(200, json.dumps(unpriced).encode())
    budget = worst[0] + worst[1] + worst[2]
    out = sk.experiment(calls, corpus, budget_usd=budget, cache=False)
    assert len(stub.received) == 3
    assert list(out["outcome"][:4]) == ["answered"] * 3 + ["over budget"]
    assert out["cost_usd"].isna().all()
    stub.reset()
    assert sk.experiment(calls, corpus, budget_usd=worst[0] * 0.99, cache=False).summary[
        "over budget"
    ] == len(calls)
    assert stub.received == []


def test_errors_are_rows_and_retries_never_pay_twice(
    corpus: sk.Corpus, calls: pd.DataFrame, stub: RuleServer
) -> None:
    rows = calls[calls["max_messages"] == 4]
    bodies = [json.dumps(expected_body(corpus, row)) for row in rows.itertuples()]
    toronto = _toronto_call(corpus)
    cues = {
        bodies[0]: lambda seen: Misbehave(500),
        bodies[1]: lambda seen: Misbehave(429, headers={"Retry-After": "0"}) if not seen else None,
        bodies[2]: lambda seen: Misbehave(200, b"not json {"),
        bodies[3]: lambda seen: Misbehave(200, b"{}", delay_s=1.0),
        bodies[4]: lambda seen: Misbehave(200, b'{"choices": []}'),
    }

    def rule(body: dict[str, Any], seen: int) -> Reply | Misbehave:
        cue = cues.get(json.dumps(body))
        found = cue(seen) if cue else None
        return found if found is not None else answer(body, toronto)

    stub.rule = rule
    with tuned(experiment_retries=2, experiment_backoff_s=0.0, experiment_timeout_s=0.3):
        out = sk.experiment(rows, corpus, budget_calls=len(rows) - 1, cache=False)
    sent = [json.dumps(r.body) for r in stub.received]
    assert [sent.count(b) for b in bodies] == [3, 2, 1, 1, 1, 1, 1, 1, 1]
    assert (
        list(out["outcome"])
        == ["failed", "answered", "failed", "failed", "failed"] + ["answered"] * 4
    )
    errors = list(out["error"].fillna(""))
    assert errors[:5] == [
        'HTTP 500 after 3 attempts: {"error": {"message": "stub failure"}}',
        "",
        "the answer is not JSON: 'not json {'",
        "no answer within 0.3 s",
        "the answer holds no choices[0].message",
    ]
    assert out["same_action"][[0, 2, 3, 4]].isna().all()


def test_answers_are_kept_and_not_asked_again(
    corpus: sk.Corpus,
    calls: pd.DataFrame,
    stub: RuleServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "cache"))
    rows = calls[(calls["max_messages"] == 4) & (calls["turn"] < 2)]
    first = sk.experiment(rows, corpus, budget_calls=1)
    assert len(stub.received) == 1 and first.summary["persisted"] is True
    resumed = sk.experiment(rows, corpus, budget_calls=10)
    assert len(stub.received) == 3
    assert list(resumed["outcome"]) == ["stored", "answered", "answered"]
    again = sk.experiment(rows, corpus, budget_calls=0)
    assert len(stub.received) == 3
    assert list(again["outcome"]) == ["stored"] * 3
    assert list(again["answer_text"]) == list(resumed["answer_text"])
    assert list(again["latency_s"]) == list(resumed["latency_s"])
    folder = tmp_path / "cache" / "answers-1"
    files = sorted(folder.iterdir())
    assert len(files) == 3
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
    other = sk.experiment(rows, corpus, budget_calls=10, samples=2)
    assert len(stub.received) == 6  # a second sample is another answer
    assert list(other["outcome"]) == ["stored", "answered"] * 3


def test_with_persistence_off_nothing_is_written(
    corpus: sk.Corpus,
    calls: pd.DataFrame,
    stub: RuleServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = calls[(calls["max_messages"] == 4) & (calls["turn"] < 1)]
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SESSIONKIT_CACHE", "off")
    for _ in range(2):
        out = sk.experiment(rows, corpus, budget_calls=10)
        assert list(out["outcome"]) == ["answered"]
    assert len(stub.received) == 2
    assert not (tmp_path / "cache" / "answers-1").exists()
    assert out.summary["persisted"] is False
    assert list(out.notes["reason"]) == [
        "answers are kept in this frame only (persistence is off (cache=False or "
        "SESSIONKIT_CACHE=off)): an interrupted run cannot resume"
    ]


def test_the_key_is_written_nowhere(
    corpus: sk.Corpus,
    calls: pd.DataFrame,
    stub: RuleServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Not in the frame, its repr, its problems, notes or summary, the kept answers, the
    logs or the output, even when the endpoint echoes it in an error."""
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "cache"))
    rows = calls[calls["max_messages"] == 4].iloc[:3]
    echo = f'{{"error": "invalid api key {API_KEY}"}}'.encode()
    toronto = _toronto_call(corpus)
    stub.rule = lambda body, seen: (
        Misbehave(401, echo) if body["messages"][-1]["role"] == "tool" else answer(body, toronto)
    )
    with caplog.at_level(logging.DEBUG):
        out = sk.experiment(rows, corpus, budget_calls=10, progress=True)
    assert {r.authorization for r in stub.received} == {f"Bearer {API_KEY}"}
    assert out["error"].iloc[2] == 'HTTP 401: {"error": "invalid api key [key]"}'
    written = [
        repr(out),
        out.to_csv(),
        out.to_json(),
        repr(out.summary),
        out.problems.to_csv(),
        out.notes.to_csv(),
        caplog.text,
        *capsys.readouterr(),
        *(p.read_text() for p in (tmp_path / "cache").rglob("*") if p.is_file()),
    ]
    assert len(list((tmp_path / "cache" / "answers-1").iterdir())) == 2
    assert [API_KEY in text for text in written] == [False] * len(written)


def test_samples_agree_as_often_as_they_take_the_same_action(
    corpus: sk.Corpus, calls: pd.DataFrame, stub: RuleServer
) -> None:
    rows = calls[calls["max_messages"] == 4].iloc[:2]
    stub.rule = lambda body, seen: (
        Reply(USAGE, tool_calls=(ToolCall("grep", {"pattern": "x"}),))
        if seen == 2
        else Reply(USAGE, text=f"sample {seen}")
    )
    scores = iter([0.5, 1.0, 0.25, 0.0, 1.0, 0.75])

    def judge(row: Any) -> float:
        score = next(scores)
        if score == 0.25:
            raise RuntimeError("judge down")
        return score

    out = sk.experiment(
        rows, corpus, budget_calls=10, samples=3, concurrency=1, judge=judge, cache=False
    )
    assert list(out["sample"]) == [0, 1, 2, 0, 1, 2]
    assert list(out["agreement"]) == [2 / 3] * 6
    assert list(out["judge_score"].fillna(-1)) == [0.5, 1.0, -1, 0.0, 1.0, 0.75]
    assert list(out.problems["reason"]) == ["judge failed on result 2: RuntimeError: judge down"]


def test_edits_and_models_multiply_the_calls(
    corpus: sk.Corpus, calls: pd.DataFrame, stub: RuleServer
) -> None:
    row = calls[calls["max_messages"] == 4].iloc[:1]
    question = "Look through ~/notes and tell me what I planned for Toronto."
    edits = {"as stored": None, "toronto": question, "alone": lambda m: [m[0], m[-1]]}
    out = sk.experiment(
        row,
        corpus,
        models=[MODEL, "gpt-4o"],
        edits=edits,
        budget_calls=10,
        concurrency=1,
        cache=False,
    )
    assert list(out["edit"]) == ["as stored", "toronto", "alone"] * 2
    assert list(out["model"]) == [MODEL] * 3 + ["gpt-4o"] * 3
    stored = expected_body(corpus, row.iloc[0])
    as_stored, toronto, alone = (r.body for r in stub.received[:3])
    assert as_stored == stored
    assert toronto["messages"][:-1] == stored["messages"][:-1]
    assert toronto["messages"][-1] == {**stored["messages"][-1], "content": question}
    assert alone["messages"] == [stored["messages"][0], stored["messages"][-1]]
    assert [r.body["model"] for r in stub.received] == [MODEL] * 3 + ["gpt-4o"] * 3
    assert list(out["answer_text"]) == ["hello", "I do not know", "hello"] * 2
