"""nanobot 0.3.5's Messages API body: what sessionkit builds is byte for byte (keys in order)
what the release's own ``AnthropicProvider._build_kwargs`` returns, on hand-made edge cases
and generated message lists; what the release would make up or fail on is refused."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
from support.releases import release

from sessionkit.nanobot.anthropic_wire_035 import messages_body, model_name

Case = dict[str, Any]

_MODELS = [
    "anthropic/claude-sonnet-4-5",
    "claude-opus-4-7",
    "claude-opus-4-1-20250805",
    "claude-sonnet-5",
    "claude-opus-5-0",
    "claude-mythos-preview",
    "claude-3-5-haiku-20241022",
    "kimi-for-coding",
]
_EFFORTS = [None, "", "none", "low", "medium", "high", "HIGH", "adaptive", "max"]
_CHOICES: list[Any] = [
    None,
    "auto",
    "required",
    "none",
    {"type": "function", "function": {"name": "exec"}},
    {"type": "function", "function": {}},
    "other",
]
_TOOLS: list[list[Any]] = [
    [],
    [{"type": "function", "function": {"name": "exec", "description": "run", "parameters": {}}}],
    [
        {"type": "function", "function": {"name": "read_file"}},
        {"type": "function", "function": {"name": "mcp_fs_list", "description": ""}},
    ],
    [{"name": "mcp_a", "cache_control": {"type": "ephemeral"}}, {"name": "mcp_b"}],
]
_TEXTS = ["", "hello", " ", "résumé 🙂", "lone \ud83d surrogate", "line\nbreak"]
_IDS: list[Any] = ["call_a", "call_a", "call|bad.id", "toolu_01", "x" * 60 + "!", 7, "ok\n"]


def _content(rng: random.Random) -> Any:
    """A message content of any shape the loop may hand the provider."""
    blocks: list[Any] = [
        {"type": "text", "text": rng.choice(_TEXTS)},
        {"type": "text"},
        {"type": "input_text", "text": ""},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}},
        {"type": "image_url", "image_url": {}},
        {"type": "text", "text": "meta", "_meta": {"k": 1}},
        {"name": "typeless", "value": [1, 2]},
        "bare string",
        3,
    ]
    shapes = [
        lambda: rng.choice(_TEXTS),
        lambda: rng.sample(blocks, rng.randint(0, 3)),
        lambda: None,
        lambda: {"type": "text", "text": "a dict"},
    ]
    return rng.choice(shapes)()


def _assistant(rng: random.Random, calls: list[Any]) -> Case:
    message: Case = {"role": "assistant", "content": _content(rng)}
    if calls:
        message["tool_calls"] = [
            {
                "id": call,
                "type": "function",
                "function": {
                    "name": rng.choice(["exec", "read_file"]),
                    "arguments": rng.choice(['{"a": 1}', "", "[1]", {"b": 2}, None, "  "]),
                },
            }
            for call in calls
        ] + rng.choice([[], ["not a call"]])
    if rng.random() < 0.2:
        message["thinking_blocks"] = [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "redacted_thinking", "data": "x"},
            {"type": "thinking"},
        ]
    if rng.random() < 0.1:
        message["_meta"] = {"runtime_context": True}
    return message


def _generated(rng: random.Random) -> list[Case]:
    """A loop's message list: a system prompt, then user turns, assistant turns with tool
    calls (repeated and invalid ids), their results (some orphaned, some twice) in any order."""
    messages: list[Case] = []
    if rng.random() < 0.9:
        messages.append({"role": "system", "content": rng.choice(["You are nanobot.", ""])})
    for _ in range(rng.randint(0, 7)):
        kind = rng.choice(["user", "user", "assistant", "exchange", "exchange", "tool", "other"])
        if kind == "user":
            messages.append({"role": "user", "content": _content(rng)})
        elif kind == "assistant":
            messages.append(_assistant(rng, []))
        elif kind == "exchange":
            calls = rng.sample(_IDS, rng.randint(1, 3))
            messages.append(_assistant(rng, calls))
            for call in rng.sample(calls, rng.randint(0, len(calls))) + rng.choice([[], calls]):
                messages.append(
                    {"role": "tool", "tool_call_id": call, "name": "exec", "content": _content(rng)}
                )
        elif kind == "tool":
            call = rng.choice([*_IDS, "", None, "unknown"])
            messages.append({"role": "tool", "tool_call_id": call, "content": _content(rng)})
        else:
            messages.append({"role": "developer", "content": "dropped"})
    return messages


def _case(messages: list[Case], rng: random.Random) -> Case:
    return {
        "messages": messages,
        "tools": rng.choice(_TOOLS),
        "model": rng.choice(_MODELS),
        "max_tokens": rng.choice([0, 512, 8192, 20000]),
        "temperature": rng.choice([0.1, 0.7, 0]),
        "reasoning_effort": rng.choice(_EFFORTS),
        "tool_choice": rng.choice(_CHOICES),
    }


def _hand_made() -> list[Case]:
    """Edge cases: what the merges, the alternation repairs and the ids do at their limits."""
    call = {"id": "call_a", "function": {"name": "exec", "arguments": "{}"}}
    lists: list[list[Case]] = [
        [],
        [{"role": "system", "content": "only a system prompt"}],
        [{"role": "system", "content": [{"type": "text", "text": "s"}]}, {"role": "user"}],
        [{"role": "system", "content": 5}, {"role": "user", "content": 5}],
        [{"role": "assistant", "content": "prefill only"}],
        [{"role": "assistant", "content": None, "tool_calls": [call]}],
        [{"role": "assistant", "content": "leading"}, {"role": "user", "content": "u"}],
        [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_a", "content": "r"},
        ],
        [
            {"role": "user", "content": "u1"},
            {"role": "user", "content": [{"type": "text", "text": "u2"}]},
            {"role": "tool", "tool_call_id": "orphan", "content": "r"},
            {"role": "assistant", "content": "a1"},
            {"role": "assistant", "content": "a2"},
        ],
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "x", "tool_calls": [call, call, call]},
            {"role": "tool", "tool_call_id": "call_a", "content": ["listed", 1]},
            {"role": "tool", "tool_call_id": "call_a", "content": 0},
            {"role": "tool", "tool_call_id": "call_a", "content": 12},
            {"role": "tool", "tool_call_id": "call_a", "content": []},
            {"role": "assistant", "content": "done"},
        ],
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [{**call, "id": "a.b|c"}]},
            {"role": "tool", "tool_call_id": "a.b|c", "content": ""},
            {"role": "user", "content": ""},
        ],
    ]
    cases = []
    for messages in lists:
        for model, effort in [("claude-sonnet-4-5", None), ("claude-opus-4-7", "high")]:
            cases.append(
                {
                    "messages": messages,
                    "tools": _TOOLS[2],
                    "model": model,
                    "max_tokens": 4096,
                    "temperature": 0.2,
                    "reasoning_effort": effort,
                    "tool_choice": None,
                }
            )
    return cases


def _ours(case: Case) -> Any:
    try:
        return {"returned": messages_body(**case)}
    except ValueError as error:
        return {"refused": str(error)}


def _releases(cases: list[Case]) -> list[dict[str, Any]]:
    keys = ("messages", "tools", "model", "max_tokens", "temperature", "reasoning_effort")
    return release("0.3.5").run(
        "nanobot.providers.anthropic_provider:AnthropicProvider._build_kwargs",
        [
            {
                "init": {"api_key": "sk-test"},
                "args": [*(c[k] for k in keys), c["tool_choice"]],
                "state": False,
            }
            for c in cases
        ],
    )


def _generated_ids(body: Any) -> bool:
    """Whether the release made up a tool id (``toolu_`` and 22 letters or digits)."""
    text = json.dumps(body)
    return bool(re.search(r'"toolu_[A-Za-z0-9]{22}(__dedupe_\d+)?"', text))


def _compared(cases: list[Case]) -> int:
    """Compare every case with the release; the number refused (each for a known reason)."""
    refused = 0
    for case, theirs in zip(cases, _releases(cases), strict=True):
        ours = _ours(case)
        if "refused" in ours:
            refused += 1
            assert (
                "raised" in theirs
                or _generated_ids(theirs["returned"])
                or "json_repair" in ours["refused"]
            ), (case, ours, theirs)
            continue
        assert "returned" in theirs, (case, theirs)
        assert json.dumps(ours["returned"]) == json.dumps(theirs["returned"]), case
    return refused


@pytest.mark.conformance
def test_hand_made_bodies_are_the_releases() -> None:
    assert _compared(_hand_made()) == 0


@pytest.mark.conformance
def test_generated_bodies_are_the_releases() -> None:
    rng = random.Random(35)
    cases = [_case(_generated(rng), rng) for _ in range(600)]
    refused = _compared(cases)
    assert refused < len(cases) // 4


@pytest.mark.conformance
def test_what_the_release_makes_up_or_repairs_is_refused() -> None:
    made_up = {"role": "assistant", "content": "x", "tool_calls": [{"function": {"name": "e"}}]}
    repaired = {
        "role": "assistant",
        "content": "x",
        "tool_calls": [{"id": "c", "function": {"name": "e", "arguments": "{'a': 1"}}],
    }
    cases = [
        {
            "messages": [{"role": "user", "content": "u"}, message, {"role": "user"}],
            "tools": [],
            "model": "claude-sonnet-4-5",
            "max_tokens": 100,
            "temperature": 0.1,
            "reasoning_effort": None,
            "tool_choice": None,
        }
        for message in (made_up, repaired)
    ]
    theirs = _releases(cases)
    with pytest.raises(ValueError, match="without an id: 0.3.5 sends a random one"):
        messages_body(**cases[0])
    assert _generated_ids(theirs[0]["returned"])
    dropped = {**cases[0], "messages": cases[0]["messages"][:2]}
    assert messages_body(**dropped) == _releases([dropped])[0]["returned"]
    with pytest.raises(ValueError, match="repairs them with json_repair"):
        messages_body(**cases[1])
    assert theirs[1]["returned"]["messages"][1]["content"][1]["input"] == {"a": 1}


def test_a_body_keeps_the_releases_key_order_and_markers() -> None:
    body = messages_body(
        [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "again"},
        ],
        [{"type": "function", "function": {"name": "exec", "parameters": {"type": "object"}}}],
        "anthropic/claude-sonnet-4-5",
        max_tokens=2000,
        temperature=0.1,
        reasoning_effort="medium",
    )
    assert list(body) == [
        "model",
        "messages",
        "max_tokens",
        "system",
        "thinking",
        "temperature",
    ] + [
        "tools",
        "tool_choice",
    ]
    assert body["model"] == model_name("anthropic/claude-sonnet-4-5") == "claude-sonnet-4-5"
    assert body["system"] == [
        {"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}],
    }
    assert (body["max_tokens"], body["thinking"], body["temperature"]) == (
        8192,
        {"type": "enabled", "budget_tokens": 4096},
        1.0,
    )
    assert body["tools"] == [
        {
            "name": "exec",
            "input_schema": {"type": "object"},
            "cache_control": {"type": "ephemeral"},
        }
    ]
    assert body["tool_choice"] == {"type": "auto"}
