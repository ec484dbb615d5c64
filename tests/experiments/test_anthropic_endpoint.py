"""sk.experiment against an Anthropic-native endpoint: a nanobot config whose provider is
``anthropic`` sends each call to a Messages API stub on 127.0.0.1 at ``<base>/v1/messages``,
with the key as ``x-api-key`` and the API version; the bodies it receives are what 0.3.5's
Anthropic provider builds from sk.request's loop messages; answers (text, tool calls, stop
reasons, usage with cache reads and writes) and their prices are read from Messages
responses; errors and retries behave as for an OpenAI-compatible endpoint; the key is written
nowhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from genai_prices import Usage as PriceUsage
from genai_prices import calc_price
from support.releases import release
from support.stub_messages import MessagesServer, message_object
from support.stub_openai import Reply, ToolCall, Usage
from support.stub_rules import Misbehave

import sessionkit as sk
from sessionkit.experiments.answers import Failure, read_messages_answer, usage_counts
from sessionkit.experiments.endpoint import target
from sessionkit.nanobot.anthropic_wire_035 import messages_body
from sessionkit.tuning import tuned

DATA = Path(__file__).resolve().parents[2] / "data" / "nanobot-0.3.5"
MODEL = "anthropic/claude-sonnet-4-5"
API_KEY = "sk-ant-test-7d1e-NEVER-WRITTEN-03b9"
USAGE = Usage(prompt_tokens=1000, completion_tokens=20, cached_tokens=200, cache_write_tokens=50)
READ = ToolCall("read_file", {"path": "notes/ideas.txt"})


def answer(body: dict[str, Any]) -> Reply:
    """The stub's rule: after a tool result, "done"; else a call to read_file."""
    last = body["messages"][-1]["content"]
    if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
        return Reply(USAGE, text="done")
    return Reply(USAGE, text="reading", tool_calls=(READ,))


@pytest.fixture(scope="module")
def stub() -> Iterator[MessagesServer]:
    with MessagesServer(lambda body, seen: answer(body)) as server:
        yield server


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory, stub: MessagesServer) -> Path:
    """The bundled 0.3.5 data dir, its config's provider Anthropic's own, at the stub."""
    root = tmp_path_factory.mktemp("anthropic") / "nanobot"
    shutil.copytree(DATA, root)
    config = json.loads((root / "config.json").read_text())
    config["agents"]["defaults"].update(model=MODEL, provider="anthropic")
    config["providers"] = {"anthropic": {"apiKey": API_KEY, "apiBase": stub.url}}
    (root / "config.json").write_text(json.dumps(config))
    return root


@pytest.fixture(scope="module")
def rebuild(data: Path) -> dict[str, Any]:
    """What sk.request and sk.experiment take to rebuild the sessions' 0.3.5 requests."""
    return {"config_dir": data, "nanobot": release("0.3.5").python}


@pytest.fixture(scope="module")
def corpus(data: Path) -> sk.Corpus:
    return sk.load(data / "workspace", config_dir=data, cache=False)


@pytest.fixture(scope="module")
def calls(corpus: sk.Corpus, rebuild: dict[str, Any]) -> pd.DataFrame:
    """A turn's two calls (the second after a tool result) and the next turn's first."""
    return sk.requests(corpus, "slack:C42", **rebuild).iloc[:3]


@pytest.fixture(autouse=True)
def ruled(stub: MessagesServer) -> None:
    stub.rule = lambda body, seen: answer(body)
    stub.reset()


def expected_body(corpus: sk.Corpus, row: Any, rebuild: dict[str, Any]) -> dict[str, Any]:
    """The body 0.3.5's Anthropic provider sends for a row: sk.request's loop messages and
    tools, the config's model and 0.3.5's default temperature and the config's maxTokens."""
    request = sk.request(corpus, row.session_key, turn=int(row.turn), step=int(row.step), **rebuild)
    return messages_body(
        request.loop_messages, request.tools, MODEL, max_tokens=256, temperature=0.1
    )


@pytest.mark.conformance
def test_the_stub_receives_the_releases_messages_bodies_and_answers_are_read(
    corpus: sk.Corpus, calls: pd.DataFrame, stub: MessagesServer, rebuild: dict[str, Any]
) -> None:
    out = sk.experiment(calls, corpus, budget_usd=1.0, cache=False, concurrency=1, **rebuild)
    expected = [expected_body(corpus, row, rebuild) for row in calls.itertuples()]
    assert [r.body for r in stub.received] == expected
    assert [list(r.body) for r in stub.received] == [
        ["model", "messages", "max_tokens", "system", "temperature", "tools", "tool_choice"]
    ] * len(calls)
    assert expected[1]["messages"][-1]["content"][0]["type"] == "tool_result"
    assert [(r.authorization, v) for r, v in zip(stub.received, stub.versions, strict=True)] == [
        (API_KEY, "2023-06-01")
    ] * len(calls)
    replies = [answer(body) for body in expected]
    assert list(out["outcome"]) == ["answered"] * len(calls)
    assert list(out["model"]) == ["claude-sonnet-4-5"] * len(calls)
    assert list(out["answer_text"]) == [r.text for r in replies]
    assert list(out["tool_calls"]) == [
        [{"name": c.name, "arguments": json.dumps(dict(c.arguments))} for c in r.tool_calls]
        for r in replies
    ]
    assert list(out["finish_reason"]) == [r.finish_reason for r in replies]
    assert (set(out["prompt_tokens"]), set(out["cached_tokens"])) == ({1000}, {200})
    assert set(out["cache_write_tokens"]) == {50}
    assert set(out["completion_tokens"]) == {20}
    price = calc_price(
        PriceUsage(
            input_tokens=1000, cache_read_tokens=200, cache_write_tokens=50, output_tokens=20
        ),
        model_ref="claude-sonnet-4-5",
        provider_id="anthropic",
    ).total_price
    assert set(out["cost_usd"]) == {float(price)}
    assert out.summary["host"] == stub.url.removeprefix("http://").removesuffix("/v1")


@pytest.mark.conformance
def test_errors_are_rows_and_retries_behave_as_for_openai(
    corpus: sk.Corpus,
    calls: pd.DataFrame,
    stub: MessagesServer,
    rebuild: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An overloaded endpoint (529) is asked again, a refusal is a row whose text never shows
    the key, an answer without content is a failure; nothing kept holds the key."""
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "cache"))
    bodies = [json.dumps(expected_body(corpus, row, rebuild)) for row in calls.itertuples()]
    echo = f'{{"type": "error", "error": {{"message": "invalid x-api-key {API_KEY}"}}}}'
    cues = {
        bodies[0]: lambda seen: Misbehave(529, headers={"Retry-After": "0"}) if not seen else None,
        bodies[1]: lambda seen: Misbehave(401, echo.encode()),
        bodies[2]: lambda seen: Misbehave(200, b'{"type": "message"}'),
    }

    def rule(body: dict[str, Any], seen: int) -> Reply | Misbehave:
        found = cues[json.dumps(body)](seen)
        return found if found is not None else answer(body)

    stub.rule = rule
    with tuned(experiment_retries=2, experiment_backoff_s=0.0):
        out = sk.experiment(calls, corpus, budget_calls=10, **rebuild)
    sent = [json.dumps(r.body) for r in stub.received]
    assert [sent.count(b) for b in bodies] == [2, 1, 1]
    assert list(out["outcome"]) == ["answered", "failed", "failed"]
    assert list(out["error"].fillna("")) == [
        "",
        'HTTP 401: {"type": "error", "error": {"message": "invalid x-api-key [key]"}}',
        "the answer holds no content list",
    ]
    written = [
        out.to_csv(),
        repr(out.summary),
        out.problems.to_csv(),
        *(p.read_text() for p in (tmp_path / "cache").rglob("*") if p.is_file()),
    ]
    assert len(list((tmp_path / "cache" / "answers-1").iterdir())) == 1
    assert [API_KEY in text for text in written] == [False] * len(written)


_RELEASE_CHAT = """
import asyncio, dataclasses, json, sys
from nanobot.providers.anthropic_provider import AnthropicProvider
case = json.load(sys.stdin)
provider = AnthropicProvider(api_key=case["key"], api_base=case["base"])
got = asyncio.run(provider.chat(**case["chat"]))
calls = [{"name": c.name, "arguments": c.arguments} for c in got.tool_calls]
usage = dataclasses.asdict(got.usage) if got.usage else None
print(json.dumps([got.content, got.finish_reason, calls, usage]))
"""


@pytest.mark.conformance
def test_the_releases_own_provider_sends_and_reads_the_same(
    corpus: sk.Corpus, calls: pd.DataFrame, stub: MessagesServer, rebuild: dict[str, Any]
) -> None:
    """0.3.5's AnthropicProvider, its SDK posting to the stub from the base a config names,
    sends the body sessionkit builds, to the same path with the same headers, and reads the
    answer as sessionkit reads it."""
    row = next(calls.iloc[:1].itertuples())
    request = sk.request(corpus, row.session_key, turn=int(row.turn), step=int(row.step), **rebuild)
    chat = {
        "messages": request.loop_messages,
        "tools": request.tools,
        "model": MODEL,
        "max_tokens": 300,
        "temperature": 0.4,
        "reasoning_effort": "low",
    }
    case = {"key": API_KEY, "base": stub.url + "/", "chat": chat}
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    done = subprocess.run(
        [str(release("0.3.5").python), "-I", "-c", _RELEASE_CHAT],
        input=json.dumps(case),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    text, finish, tool_calls, usage = json.loads(done.stdout.splitlines()[-1])
    built = messages_body(
        request.loop_messages,
        request.tools,
        MODEL,
        max_tokens=300,
        temperature=0.4,
        reasoning_effort="low",
    )
    assert [r.body for r in stub.received] == [built]
    assert [(r.authorization, v) for r, v in zip(stub.received, stub.versions, strict=True)] == [
        (API_KEY, "2023-06-01")
    ]
    reply = answer(built)
    read = read_messages_answer(message_object(0, "stub-model", reply), 0.0)
    assert (read.text, read.finish_reason) == (text, finish) == ("reading", "tool_calls")
    assert read.tool_calls == [
        {"name": c["name"], "arguments": json.dumps(c["arguments"])} for c in tool_calls
    ]
    assert (read.prompt_tokens, read.cached_tokens, read.cache_write_tokens) == (
        usage["input_tokens"],
        usage["cache_read_tokens"],
        usage["cache_write_tokens"],
    )
    assert read.completion_tokens == usage["output_tokens"]


def test_an_anthropic_config_is_asked_at_its_messages_url(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    config = {
        "agents": {"defaults": {"model": MODEL, "maxTokens": 512, "reasoningEffort": "none"}},
        "providers": {"anthropic": {"apiKey": API_KEY, "apiBase": "http://127.0.0.1:9/v1/"}},
    }
    path.write_text(json.dumps(config))
    found = target(path, None, None, {"top_k": 5})
    assert (found.url, found.host, found.wire) == (
        "http://127.0.0.1:9/v1/messages",
        "127.0.0.1:9",
        "anthropic",
    )
    assert (found.provider, found.model) == ("anthropic", MODEL)
    assert found.params == {
        "temperature": 0.1,
        "max_tokens": 512,
        "reasoning_effort": "none",
        "top_k": 5,
    }
    assert found.headers() == {
        "Content-Type": "application/json",
        "x-api-key": API_KEY,
        "anthropic-version": "2023-06-01",
    }
    assert API_KEY not in repr(found)
    config["providers"] = {"anthropic": {"apiKey": API_KEY}}
    path.write_text(json.dumps(config))
    assert target(path, None, None, None).url == "https://api.anthropic.com/v1/messages"
    given = target(path, "http://127.0.0.1:8000/v1", None, None)
    assert (given.url, given.wire) == ("http://127.0.0.1:8000/v1/chat/completions", "openai")
    assert given.params == {"temperature": 0.1, "max_tokens": 512}


def test_a_messages_answer_is_read_as_0_3_5_reads_it() -> None:
    data = {
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "a"},
            {"type": "tool_use", "id": "toolu_1", "name": "exec", "input": {"cmd": "ls é"}},
            {"type": "text", "text": "b"},
        ],
        "stop_reason": "max_tokens",
        "usage": {
            "input_tokens": 10,
            "cache_read_input_tokens": 30,
            "cache_creation_input_tokens": 5,
            "output_tokens": 7,
        },
    }
    read = read_messages_answer(data, 0.5)
    assert read == read_messages_answer(json.loads(json.dumps(data)), 0.5)
    assert (read.text, read.finish_reason, read.model) == ("ab", "length", "claude-sonnet-4-5")
    assert read.tool_calls == [{"name": "exec", "arguments": '{"cmd": "ls é"}'}]
    assert (read.prompt_tokens, read.cached_tokens, read.cache_write_tokens) == (45, 30, 5)
    assert usage_counts(read) == [45, 30, 5, 7]
    bare = read_messages_answer({"content": [], "stop_reason": "pause_turn", "usage": {}}, 0.1)
    assert (bare.text, bare.finish_reason, bare.prompt_tokens) == (None, "pause_turn", None)
    assert usage_counts(bare) == [-1, 0, 0, -1]
    unset = read_messages_answer({"content": [{"type": "text", "text": "x"}]}, 0.1)
    assert unset.finish_reason == "stop"
    assert read_messages_answer({"choices": []}, 0.1) == Failure(
        "the answer holds no content list", billed=True
    )


@pytest.mark.conformance
def test_a_model_judge_without_its_own_endpoint_is_refused_before_any_call(
    corpus: sk.Corpus, calls: pd.DataFrame, stub: MessagesServer, rebuild: dict[str, Any]
) -> None:
    judge = sk.ModelJudge(model="judge", prompt="{answer_text}")
    with pytest.raises(ValueError, match="give the judge its endpoint="):
        sk.experiment(calls, corpus, judge=judge, budget_calls=10, **rebuild)
    assert stub.received == []


def test_rows_of_another_release_cannot_be_sent_in_the_messages_form(
    tmp_path: Path, data_dir: Path
) -> None:
    shutil.copytree(data_dir / "sessions", tmp_path / "workspace" / "sessions")
    config = {
        "agents": {"defaults": {"model": MODEL}},
        "providers": {"anthropic": {"apiKey": API_KEY, "apiBase": "http://127.0.0.1:9"}},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    corpus = sk.load(tmp_path / "workspace", cache=False)
    rows = sk.requests(corpus, "cli:direct").iloc[:2]
    out = sk.experiment(rows, corpus, budget_calls=5, cache=False)
    error = "the request cannot be sent: Anthropic's Messages API body is known for "
    assert list(out["error"]) == [error + "nanobot-0.3.5 only, not nanobot-0.2"] * 2
    assert list(out["outcome"]) == ["failed"] * 2
    assert list(out.problems["reason"]) == [error + "nanobot-0.3.5 only, not nanobot-0.2"]
