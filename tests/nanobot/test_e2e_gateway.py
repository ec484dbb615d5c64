"""The end-to-end harness itself: nanobot 0.3.5's gateway loop against the local stub, checked exactly."""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.e2e import SCENARIO_BASIC, SCENARIO_GOVERNOR, GatewayRun, run_gateway
from support.stub_openai import Reply, ScriptedTurn, StubServer

pytestmark = pytest.mark.conformance

SCENARIOS = {"basic": SCENARIO_BASIC, "governor": SCENARIO_GOVERNOR}
Case = tuple[dict[str, Any], GatewayRun]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], GatewayRun]:
    """Each scenario run once per module, on first use."""
    done: dict[str, GatewayRun] = {}

    def get(name: str) -> GatewayRun:
        if name not in done:
            done[name] = run_gateway(tmp_path_factory.mktemp(name), SCENARIOS[name])
        return done[name]

    return get


@pytest.fixture(params=sorted(SCENARIOS))
def case(request: pytest.FixtureRequest, runs: Callable[[str], GatewayRun]) -> Case:
    return SCENARIOS[request.param], runs(request.param)


@pytest.fixture
def governor(runs: Callable[[str], GatewayRun]) -> GatewayRun:
    return runs("governor")


def _rows(db: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        connection.row_factory = sqlite3.Row
        return [dict(r) for r in connection.execute("SELECT * FROM llm_calls ORDER BY id")]


def _typed(message: dict[str, Any]) -> str:
    """A saved user message's text without the runtime context 0.3.5 appended (and marked)."""
    marker = message.get("_runtime_context")
    suffix = "\n\n" + marker["suffix"] if marker else ""
    assert message["content"].endswith(suffix)
    return message["content"][: len(message["content"]) - len(suffix)]


def test_every_turn_made_its_scripted_calls(case: Case) -> None:
    scenario, run = case
    turns = scenario["turns"]
    assert [t["outcome"] for t in run.output["turns"]] == ["completed"] * len(turns)
    per_turn = [
        Counter(kind for kind, turn in zip(run.kinds, run.turns, strict=True) if turn == i)
        for i in range(len(turns))
    ]
    expected = [Counter(scripted=len(t["replies"]), default=len(t["summaries"])) for t in turns]
    assert [+c for c in per_turn] == [+c for c in expected]
    assert run.turns == sorted(run.turns)
    assert [t["replies"][-1]["text"] for t in turns] == [
        t["replies"][-1] for t in run.output["turns"]
    ]


def test_every_call_streams_with_the_same_tools(case: Case) -> None:
    _, run = case
    assert len({json.dumps(b["tools"]) for b in run.requests}) == 1
    assert len(run.requests[0]["tools"]) == 23
    assert {(b["stream"], json.dumps(b["stream_options"])) for b in run.requests} == {
        (True, '{"include_usage": true}')
    }


def test_steps_extend_the_previous_call_of_their_turn(case: Case) -> None:
    """Step k's messages are step k-1's plus its assistant tool-call message and results."""
    scenario, run = case
    replies = [r for t in scenario["turns"] for r in t["replies"]]
    agent = [i for i, kind in enumerate(run.kinds) if kind == "scripted"]
    checked = 0
    for reply, before, after in zip(replies, agent, agent[1:], strict=False):
        if run.turns[before] != run.turns[after] or after != before + 1:
            continue
        previous, current = run.requests[before]["messages"], run.requests[after]["messages"]
        added = current[len(previous) :]
        assert current[: len(previous)] == previous
        assert [m["role"] for m in added] == ["assistant"] + ["tool"] * len(reply["tool_calls"])
        assert [c["function"]["name"] for c in added[0]["tool_calls"]] == [
            c["name"] for c in reply["tool_calls"]
        ]
        assert added[0]["content"] == reply.get("text")
        checked += 1
    assert checked == sum(
        len(t["replies"]) - 1 - sum(1 for step in t["summaries"] if step > 0)
        for t in scenario["turns"]
    )


def test_sessions_are_where_035_writes_them(case: Case) -> None:
    scenario, run = case
    keys = sorted({t["session"] for t in scenario["turns"]})
    files = sorted(p.name for p in run.sessions_dir.glob("*.jsonl"))
    assert files == sorted(run.session_file(k).name for k in keys)
    assert run.sessions_dir.parent == run.data_dir / "sessions"
    for key in keys:
        meta, *messages = run.session_lines(key)
        assert (meta["_type"], meta["key"]) == ("metadata", key)
        visible = [
            _typed(m) for m in messages if m["role"] == "user" and not m.get("_hidden_history")
        ]
        assert visible == [t["text"] for t in scenario["turns"] if t["session"] == key]


def test_last_usage_sums_the_last_turns_agent_calls(case: Case) -> None:
    scenario, run = case
    for key in {t["session"] for t in scenario["turns"]}:
        last = max(i for i, t in enumerate(scenario["turns"]) if t["session"] == key)
        usage = [
            u
            for u, t, k in zip(run.usage, run.turns, run.kinds, strict=True)
            if t == last and k == "scripted"
        ]
        recorded = run.session_lines(key)[0]["metadata"]["_last_usage"]
        assert (
            recorded["input_tokens"],
            recorded["output_tokens"],
            recorded["cache_read_tokens"],
            recorded["request_count"],
        ) == (
            sum(u.prompt_tokens for u in usage),
            sum(u.completion_tokens for u in usage),
            sum(u.cached_tokens for u in usage),
            len(usage),
        )


def test_usage_log_has_one_row_per_stub_call(case: Case) -> None:
    _, run = case
    rows = _rows(run.usage_db)
    assert [
        (r["input_tokens"], r["output_tokens"], r["cache_read_tokens"], r["reported_tokens"])
        for r in rows
    ] == [
        (
            u.prompt_tokens,
            u.completion_tokens,
            u.cached_tokens,
            u.prompt_tokens + u.completion_tokens,
        )
        for u in run.usage
    ]
    assert [(r["source"], r["stream"], r["estimated_tokens"]) for r in rows] == [
        ("user" if kind == "scripted" else "dream", 1, 0) for kind in run.kinds
    ]
    assert {(r["provider"], r["model"]) for r in rows} == {("custom", "stub-model")}
    turns = run.output["turns"]
    assert all(
        turns[t]["started_ns"] // 1_000_000
        <= r["started_at_ms"]
        <= turns[t]["ended_ns"] // 1_000_000
        for r, t in zip(rows, run.turns, strict=True)
    )


def test_summary_calls_come_at_the_scripted_steps(case: Case) -> None:
    """The governor scenario summarises mid-turn (before step 1) and at a turn's start."""
    scenario, run = case
    made = [
        (turn, step)
        for turn, step, kind in zip(run.turns, run.steps, run.kinds, strict=True)
        if kind == "default"
    ]
    assert made == [(i, s) for i, t in enumerate(scenario["turns"]) for s in t["summaries"]]


def test_saved_history_replays_as_sent(runs: Callable[[str], GatewayRun]) -> None:
    """The basic run's last call: its history is the saved transcript, public keys only."""
    run = runs("basic")
    key = "telegram:alice"
    last = max(i for i, t in enumerate(run.turns) if SCENARIO_BASIC["turns"][t]["session"] == key)
    saved = run.session_lines(key)[1:-2]
    public = ("role", "content", "tool_calls", "tool_call_id", "name")
    expected = [
        {
            k: (None if k == "content" and v == "" and "tool_calls" in m else v)
            for k, v in m.items()
            if k in public
        }
        for m in saved
    ]
    assert any(m.get("_runtime_context") for m in saved)
    assert run.requests[last]["messages"][1:-1] == expected


def test_governor_leaves_checkpoints_and_its_last_summary(governor: GatewayRun) -> None:
    meta, *messages = governor.session_lines("telegram:gov")
    hidden = [i for i, m in enumerate(messages) if m.get("_hidden_history")]
    assert len(hidden) == 2
    assert [messages[i]["role"] for i in hidden] == ["user", "user"]
    assert [messages[i - 1]["content"] for i in hidden] == [
        SCENARIO_GOVERNOR["turns"][1]["text"],
        SCENARIO_GOVERNOR["turns"][1]["replies"][-1]["text"],
    ]
    assert messages[hidden[1] + 1]["content"] == SCENARIO_GOVERNOR["turns"][2]["text"]
    assert (meta["last_archived"], meta["last_consolidated"]) == (hidden[1], hidden[1])
    assert meta["metadata"]["_last_summary"]["text"] == SCENARIO_GOVERNOR["summary"]["text"]
    history = [
        json.loads(line)
        for line in (governor.workspace / "memory" / "history.jsonl").read_text().splitlines()
    ]
    assert [(h["cursor"], h["content"], h["session_key"]) for h in history] == [
        (n, SCENARIO_GOVERNOR["summary"]["text"], "telegram:gov") for n in (1, 2)
    ]


def test_governor_continues_after_each_summary_from_the_checkpoint(governor: GatewayRun) -> None:
    """The call after a summary: system prompt + summary, then the checkpoint's text first."""
    checkpoint = next(
        m["content"] for m in governor.session_lines("telegram:gov")[1:] if m.get("_hidden_history")
    )
    summary = SCENARIO_GOVERNOR["summary"]["text"]
    after = [i + 1 for i, kind in enumerate(governor.kinds) if kind == "default"]
    assert [governor.kinds[i] for i in after] == ["scripted", "scripted"]
    for i in after:
        system, first, *_ = governor.requests[i]["messages"]
        assert system["role"] == "system" and system["content"].endswith(summary)
        assert first["role"] == "user" and first["content"].startswith(checkpoint)
    assert all(summary not in b["messages"][0]["content"] for b in governor.requests[:3])


def test_stub_answers_unstreamed_requests_and_lists_its_model() -> None:
    reply = Reply.from_json(
        {
            "text": "Done.",
            "tool_calls": [{"name": "list_dir", "arguments": {"path": "a"}}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 4, "cached_tokens": 16},
        }
    )
    default = Reply.from_json(
        {"text": "Summary.", "usage": {"prompt_tokens": 9, "completion_tokens": 2}}
    )
    local = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    with StubServer([ScriptedTurn("hi (t)", (reply,))], default=default) as stub:
        with local.open(f"{stub.url}/models") as response:
            models = json.load(response)
        bodies = [
            {"model": "m", "messages": [{"role": "user", "content": "summarise"}]},
            {"model": "m", "messages": [{"role": "user", "content": "hi (t)"}]},
        ]
        answers = []
        for body in bodies:
            request = urllib.request.Request(
                f"{stub.url}/chat/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with local.open(request) as response:
                answers.append(json.load(response))
    assert [m["id"] for m in models["data"]] == ["stub-model"]
    assert [c.kind for c in stub.calls] == ["default", "scripted"]
    assert [c.body for c in stub.calls] == bodies
    assert [a["choices"][0]["message"]["content"] for a in answers] == ["Summary.", "Done."]
    assert answers[1]["choices"][0]["message"]["tool_calls"] == [
        {
            "id": "call_1_0",
            "type": "function",
            "function": {"name": "list_dir", "arguments": '{"path": "a"}'},
        }
    ]
    assert [a["usage"] for a in answers] == [
        {
            "prompt_tokens": 9,
            "completion_tokens": 2,
            "total_tokens": 11,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
        {
            "prompt_tokens": 30,
            "completion_tokens": 4,
            "total_tokens": 34,
            "prompt_tokens_details": {"cached_tokens": 16},
        },
    ]
