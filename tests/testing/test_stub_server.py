"""The bundled stub endpoint: its rule answers as the session did while the request holds the
session's first user message, forgets otherwise, and cannot place an unknown request; over
HTTP on 127.0.0.1 it answers chat completions with usage counted from the request, and an
experiment against it agrees more with more history."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
import pytest

import sessionkit as sk
from sessionkit.experiments.agreement import agreement_by_setting
from sessionkit.experiments.compare import stored_answers
from sessionkit.testing.stub_server import FORGOT, UNPLACED, Recall, stub_server

KEY = "cli:direct"


@pytest.fixture(scope="module")
def corpus(data_dir: Path) -> sk.Corpus:
    return sk.load(data_dir)


def test_the_rule_answers_as_stored_while_the_request_holds_enough_before(
    corpus: sk.Corpus,
) -> None:
    session = corpus[KEY]
    rule = Recall([session])
    stored = stored_answers(session)
    # Turn 2 holds all 4 user and tool messages before it; under a 4-message window, 2.
    assert rule(sk.request(session, turn=2).messages) == stored[(2, 0)]
    assert rule(sk.request(session, turn=2, max_messages=4).messages) == (FORGOT, [])
    # The release's history of turn 3 starts at its own user message (history_start 13):
    # 1 of the 13 before it, fewer than NEED (10); a rule needing 1 answers as stored.
    assert rule(sk.request(session, turn=3).messages) == (FORGOT, [])
    assert Recall([session], need=1)(sk.request(session, turn=3).messages) == stored[(3, 0)]
    assert rule([{"role": "user", "content": "a message no session holds"}]) == (UNPLACED, [])
    assert rule([]) == (UNPLACED, [])


def test_the_server_answers_chat_completions_on_127_0_0_1(corpus: sk.Corpus) -> None:
    messages = sk.request(corpus[KEY], turn=2).messages
    with stub_server(corpus[KEY], model="recall") as stub:
        assert stub.url.startswith("http://127.0.0.1:")
        body = {"model": "x", "messages": messages}
        answer = httpx.post(f"{stub.url}/chat/completions", json=body).json()
        missing = httpx.post(f"{stub.url}/models", json=body)
        bad = httpx.post(f"{stub.url}/chat/completions", content=b"[1]")
        assert stub.received == 1
        port = int(stub.url.rsplit(":", 1)[1].split("/")[0])
    sent = len(json.dumps(messages, ensure_ascii=False)) // 4
    text, calls = stored_answers(corpus[KEY])[(2, 0)]
    assert answer["model"] == "recall"
    assert answer["choices"][0]["message"]["content"] == text
    assert [c["function"] for c in answer["choices"][0]["message"]["tool_calls"]] == calls
    assert answer["choices"][0]["finish_reason"] == "tool_calls"
    said = (len(text) + len(json.dumps(calls))) // 4 + 1
    assert answer["usage"] == {
        "prompt_tokens": sent,
        "completion_tokens": said,
        "total_tokens": sent + said,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert (missing.status_code, bad.status_code) == (404, 400)
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))


def test_an_experiment_against_it_agrees_more_with_more_history(corpus: sk.Corpus) -> None:
    calls = sk.requests(corpus, KEY, grid={"max_messages": [4, 0]}).query("turn < 4")
    with stub_server(corpus) as stub:
        out = sk.experiment(
            calls, corpus, endpoint=stub.url, models="gpt-4o-mini", budget_calls=50, cache=False
        )
    table = agreement_by_setting(out)
    # 9 calls each: the tool calls of turn 3 (steps 0 to 2) are forgotten under both (see
    # above), and under 4 messages so is turn 2's (step 0): one fewer agrees.
    assert list(zip(table["setting"], table["compared"], table["agreed"], strict=True)) == [
        ("max_messages 4", 9, 5),
        ("max_messages none", 9, 6),
    ]
