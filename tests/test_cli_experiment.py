"""``sessionkit experiment``: the plan of a dry run, agreement per setting after a run against
a stub on 127.0.0.1 whose answers follow a rule, the budget it refuses to run without, usage
errors (exit 2), and the API key printed and written nowhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.stub_openai import Reply, Usage
from support.stub_rules import RuleServer, stub_workspace

import sessionkit as sk
from sessionkit.cli import main
from sessionkit.experiments.compare import stored_answers

KEY = "cli:direct"
MODEL = "gpt-4o-mini"
API_KEY = "sk-test-cli-7d3a-NEVER-PRINTED"
USAGE = Usage(prompt_tokens=1000, completion_tokens=20)
SETTINGS = ["--key", KEY, "--turns", "0-3", "--max-messages", "4,none"]


@pytest.fixture(scope="module")
def stub() -> Iterator[RuleServer]:
    with RuleServer(lambda body, seen: Reply(USAGE, text="hello")) as server:
        yield server


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, stub: RuleServer) -> Path:
    return stub_workspace(
        tmp_path_factory.mktemp("cli-experiment"), data_dir, stub.url, model=MODEL, api_key=API_KEY
    )


@pytest.fixture(autouse=True)
def fresh(stub: RuleServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stub that has received nothing, and an empty cache folder of this test's own."""
    stub.reset()
    cache = tmp_path / "cache"
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(cache))
    return cache


def _texts(workspace: Path) -> dict[int, int]:
    """Per max_messages, the calls of turns 0-3 whose stored answer calls no tool: the ones a
    stub answering "hello" agrees with (the window changes the request, not the answer)."""
    session = sk.load(workspace)[KEY]
    found = stored_answers(session)
    rows = sk.requests(session, grid={"max_messages": [4, 0]})
    rows = rows[rows["turn"] < 4]
    return {
        m: sum(not found[(t, s)][1] for t, s in zip(part["turn"], part["step"], strict=True))
        for m, part in rows.groupby("max_messages")
    }


def test_a_dry_run_prints_the_plan_and_sends_nothing(
    workspace: Path, stub: RuleServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["experiment", str(workspace), *SETTINGS, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert stub.received == []
    lines = out.splitlines()
    assert lines[0].split() == ["setting", "calls", "tokens_per_call", "worst_cost_usd"]
    plan = sk.experiment(
        sk.requests(sk.load(workspace), KEY, grid={"max_messages": [4, 0]}).query("turn < 4"),
        sk.load(workspace),
        dry_run=True,
        cache=False,
    )
    tokens = plan.groupby("max_messages", sort=False)["estimated_prompt_tokens"].sum()
    assert [line.split()[:4] for line in lines[1:]] == [
        ["max_messages", "4", "9", f"{tokens[4] / 9:.6f}"],
        ["max_messages", "none", "9", f"{tokens[0] / 9:.6f}"],
    ]
    host = stub.url.split("/")[2]
    assert err == (
        f"plan: 18 call(s), {tokens.sum():,} prompt tokens (estimated), worst case "
        f"${plan.summary['worst_cost_usd']:.4f}, to {host}; 0 answer(s) already kept; nothing "
        "sent\n"
    )
    assert API_KEY not in out + err


def test_a_run_prints_agreement_per_setting_and_writes_no_key(
    workspace: Path, stub: RuleServer, fresh: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(
        ["experiment", str(workspace), *SETTINGS, "--budget-calls", "100", "--format", "json"]
    )
    out, err = capsys.readouterr()
    assert status == 0
    assert len(stub.received) == 18
    assert {r.authorization for r in stub.received} == {f"Bearer {API_KEY}"}
    agreed = _texts(workspace)
    rows = json.loads(out)
    assert [(r["setting"], r["calls"], r["answered"], r["compared"]) for r in rows] == [
        ("max_messages 4", 9, 9, 9),
        ("max_messages none", 9, 9, 9),
    ]
    assert [r["agreed"] for r in rows] == [agreed[4], agreed[0]]
    rates = [agreed[4] / 9, agreed[0] / 9]  # JSON holds 10 decimals
    assert [r["agreement_rate"] for r in rows] == pytest.approx(rates, abs=1e-10)
    assert [r["prompt_tokens"] for r in rows] == [9000, 9000]
    assert err.startswith("18 answered, 0 stored, 0 failed, 0 over budget; spent $")
    assert API_KEY not in out + err
    kept = [p for p in fresh.rglob("*") if p.is_file()]
    assert kept and not any(API_KEY.encode() in p.read_bytes() for p in kept)
    assert main(["experiment", str(workspace), *SETTINGS, "--budget-calls", "0"]) == 0
    assert capsys.readouterr().err.startswith("0 answered, 18 stored, 0 failed")
    assert len(stub.received) == 18


def test_a_budget_stops_the_run_and_is_told(
    workspace: Path, stub: RuleServer, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [*SETTINGS, "--budget-calls", "5", "--no-cache", "--format", "csv"]
    assert main(["experiment", str(workspace), *args]) == 0
    out, err = capsys.readouterr()
    assert len(stub.received) == 5
    assert out.splitlines()[1].startswith("max_messages 4,9,5,5,")
    assert out.splitlines()[2].startswith("max_messages none,9,0,0,0,,")
    assert err.startswith("5 answered, 0 stored, 0 failed, 13 over budget; spent $")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [],
            "experiment sends requests only under a budget: pass --budget-calls N and/or "
            "--budget-usd X, or --dry-run for the plan",
        ),
        (
            ["--dry-run", "--max-messages", "20,many"],
            "--max-messages takes counts separated by commas (none: no limit, default: the "
            "release's), e.g. 20,120; not '20,many'",
        ),
        (["--dry-run", "--turns", "3-"], "--turns takes turns and ranges such as 0-3,7; not '3-'"),
        (["--dry-run", "--key", "cli:nobody"], "no session with key cli:nobody in WORKSPACE"),
        (
            ["--dry-run", "--api-key-env", "SK_TEST_NO_SUCH_VARIABLE"],
            "--api-key-env names SK_TEST_NO_SUCH_VARIABLE, which is not set in the environment",
        ),
        (
            ["--dry-run", "--budget-usd", "1", "--models", "no-such-model-anywhere"],
            None,
        ),
    ],
)
def test_usage_errors_say_what_to_pass(
    workspace: Path,
    stub: RuleServer,
    args: list[str],
    message: str | None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["experiment", str(workspace), "--key", KEY, "--turns", "0", *args])
    err = capsys.readouterr().err
    assert stub.received == []
    if message is None:  # a dry run of a model with no price: planned, its price a problem
        assert status == 1
        assert "no-such-model-anywhere" in err
    else:
        assert status == 2
        assert err == f"sessionkit: error: {message.replace('WORKSPACE', str(workspace))}\n"


def test_the_key_from_the_environment_goes_in_the_header_only(
    workspace: Path, stub: RuleServer, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("SK_TEST_KEY", "sk-from-env-51c0")
    args = ["--key", KEY, "--turns", "0", "--budget-calls", "1", "--no-cache"]
    assert main(["experiment", str(workspace), *args, "--api-key-env", "SK_TEST_KEY"]) == 0
    out, err = capsys.readouterr()
    assert [r.authorization for r in stub.received] == ["Bearer sk-from-env-51c0"]
    assert "sk-from-env-51c0" not in out + err
