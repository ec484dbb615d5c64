"""End to end: nanobot 0.3.5's own gateway loop answered by a stub on 127.0.0.1; every
request body it sent is rebuilt by ``sk.request`` from the files it left behind."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.e2e import SCENARIO_BASIC, GatewayRun, run_gateway  # noqa: E402
from support.releases import release  # noqa: E402

import sessionkit as sk

pytestmark = pytest.mark.conformance


@pytest.fixture(scope="module")
def basic(tmp_path_factory: pytest.TempPathFactory) -> GatewayRun:
    return run_gateway(tmp_path_factory.mktemp("gateway"), SCENARIO_BASIC)


def _session_turns(scenario: dict[str, Any]) -> list[tuple[str, int]]:
    """(session key, zero-based turn of that session) of each scripted turn."""
    seen: dict[str, int] = {}
    out = []
    for turn in scenario["turns"]:
        key = turn["session"]
        out.append((key, seen.get(key, 0)))
        seen[key] = seen.get(key, 0) + 1
    return out


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def test_every_agent_request_is_rebuilt_exactly(basic: GatewayRun) -> None:
    corpus = sk.load(basic.sessions_dir)
    where = _session_turns(SCENARIO_BASIC)
    python = release("0.3.5").python
    checked = 0
    for body, kind, turn, step in zip(
        basic.requests, basic.kinds, basic.turns, basic.steps, strict=True
    ):
        assert kind == "scripted"  # an agent call (no governor summary in this scenario)
        key, session_turn = where[turn]
        built = sk.request(
            corpus[key],
            turn=session_turn,
            step=step,
            workspace=basic.workspace,
            config_dir=basic.config,
            nanobot=python,
        )
        assert _json(built.messages) == body["messages"], (key, session_turn, step)
        assert _json(built.tools) == body["tools"]
        checked += 1
    assert checked == 10


def _message_tokens(messages: list[dict[str, Any]]) -> int:
    policy = sk.get_policy("nanobot-0.3.5")
    return sum(policy.estimate_message_tokens(m) for m in messages)


def test_the_requests_frame_matches_what_was_sent(basic: GatewayRun) -> None:
    """Each row's parts add up to the release's per-message estimates of the request (the
    loop's messages, whose wire form is checked above), and ``prefix_tokens`` is what the body
    sent shares with the previous body of its session: tools, system prompt, then leading
    identical messages."""
    corpus = sk.load(basic.sessions_dir)
    python = release("0.3.5").python
    frame = sk.requests(corpus, workspace=basic.workspace, config_dir=basic.config, nanobot=python)
    where = _session_turns(SCENARIO_BASIC)
    sent: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for body, turn, step in zip(basic.requests, basic.turns, basic.steps, strict=True):
        key, session_turn = where[turn]
        sent[key, session_turn, step] = body["messages"]
    assert len(frame) == len(sent) == 10
    system_and_tools = frame["system_tokens"] + frame["tools_tokens"]
    previous: dict[str, list[dict[str, Any]]] = {}
    for row, fixed in zip(frame.itertuples(), system_and_tools, strict=True):
        loop = sk.request(
            corpus[row.session_key],
            turn=row.turn,
            step=row.step,
            workspace=basic.workspace,
            config_dir=basic.config,
            nanobot=python,
        ).loop_messages
        messages = sent[row.session_key, row.turn, row.step]
        assert len(loop) == len(messages)  # no merges here: wire and loop align one to one
        assert row.total_tokens == fixed + _message_tokens(loop[1:])
        before = previous.get(row.session_key)
        shared = 0
        if before is not None:
            shared = fixed
            for position, (old, new) in enumerate(zip(before, messages, strict=False)):
                if position and old != new:
                    break
                shared += _message_tokens([loop[position]]) if position else 0
        assert row.prefix_tokens == shared, (row.session_key, row.turn, row.step)
        previous[row.session_key] = messages
