"""sessionkit.nanobot.legacy_exec: 0.3.5's load-time rewrite of ``write_stdin`` records."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.releases import release
from support.sampling import examples

from sessionkit.nanobot.legacy_exec import migrate_exec_records


def _call(name: str, arguments: Any, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _legacy() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A 0.3.1-era exec round: a ``write_stdin`` call (arguments as JSON text), its result,
    an ``exec_session`` call waiting for exit (arguments as a dict), and an unfinished turn."""
    messages = [
        {"role": "user", "content": "answer the prompt"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                _call(
                    "write_stdin",
                    json.dumps({"session_id": 3, "chars": "y\n", "yield_time_ms": 500}),
                ),
                _call(
                    "exec_session",
                    {"cmd": "make", "until_exit": True, "wait_timeout_ms": 9000},
                    "call_2",
                ),
                _call("read_file", '{"path": "a", "chars": 1}', "call_3"),
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "write_stdin", "content": "ok"},
        {"role": "tool", "tool_call_id": "call_2", "name": "exec_session", "content": "built"},
    ]
    metadata = {
        "runtime_checkpoint": {
            "assistant_message": {"role": "assistant", "tool_calls": [_call("write_stdin", "{}")]},
            "pending_tool_calls": [_call("write_stdin", '{"chars": "q", "max_output_chars": 10}')],
            "completed_tool_results": [{"name": "write_stdin", "content": "x"}, "odd"],
        }
    }
    return messages, metadata


def test_legacy_exec_records_are_rewritten_as_0_3_5_loads_them() -> None:
    messages, metadata = _legacy()
    assert migrate_exec_records(messages, metadata) is True
    calls = messages[1]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["exec_session", "exec_session", "read_file"]
    assert calls[0]["function"]["arguments"] == '{"session_id":3,"input":"y\\n","timeout_ms":500}'
    assert calls[1]["function"]["arguments"] == {
        "cmd": "make",
        "until_exit": True,
        "timeout_ms": 9000,
    }
    assert calls[2]["function"]["arguments"] == '{"path": "a", "chars": 1}'
    assert [m.get("name") for m in messages] == [None, None, "exec_session", "exec_session"]
    checkpoint = metadata["runtime_checkpoint"]
    assert checkpoint["assistant_message"]["tool_calls"][0]["function"] == {
        "name": "exec_session",
        "arguments": "{}",
    }
    assert checkpoint["pending_tool_calls"][0]["function"]["arguments"] == '{"input":"q"}'
    assert checkpoint["completed_tool_results"] == [{"name": "exec_session", "content": "x"}, "odd"]
    again = copy.deepcopy((messages, metadata))
    assert migrate_exec_records(*again) is False
    assert again == (messages, metadata)


def test_records_of_other_tools_are_left_alone() -> None:
    messages = [
        {"role": "assistant", "tool_calls": [_call("exec", '{"chars": "x"}'), "odd", {"name": 3}]},
        {"role": "tool", "name": "exec", "content": "ok"},
    ]
    before = copy.deepcopy(messages)
    assert migrate_exec_records(messages, {"runtime_checkpoint": "not a dict"}) is False
    assert messages == before


_NAMES = st.sampled_from(["write_stdin", "exec_session", "exec", "read_file"])
_KEYS = st.sampled_from(
    [
        "chars",
        "input",
        "yield_time_ms",
        "wait_timeout_ms",
        "timeout_ms",
        "max_output_chars",
        "max_output_tokens",
        "wait_for",
        "until_exit",
        "session_id",
    ]
)
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2, 9000), st.text(max_size=4))
_ARGUMENTS = st.dictionaries(_KEYS, _VALUES, max_size=5)
_CALLS = st.one_of(
    st.builds(
        _call, _NAMES, st.one_of(_ARGUMENTS, _ARGUMENTS.map(json.dumps), st.just("{"), st.none())
    ),
    st.builds(lambda n, a: {"name": n, "arguments": a}, _NAMES, _ARGUMENTS),
    st.just("odd"),
)
_MESSAGES = st.lists(
    st.one_of(
        st.builds(
            lambda calls: {"role": "assistant", "tool_calls": calls}, st.lists(_CALLS, max_size=3)
        ),
        st.builds(lambda name: {"role": "tool", "name": name, "content": "ok"}, _NAMES),
    ),
    max_size=4,
)
_METADATA = st.one_of(
    st.just({}),
    st.builds(
        lambda pending, done: {
            "runtime_checkpoint": {"pending_tool_calls": pending, "completed_tool_results": done}
        },
        st.lists(_CALLS, max_size=2),
        st.lists(st.builds(lambda n: {"name": n}, _NAMES), max_size=2),
    ),
)


@pytest.mark.conformance
@pytest.mark.sampled
@settings(max_examples=examples(20, 4), deadline=None)
@given(st.lists(st.tuples(_MESSAGES, _METADATA), min_size=1, max_size=25))
def test_generated_records_are_rewritten_as_0_3_5_does(
    cases: list[tuple[list[dict[str, Any]], dict[str, Any]]],
) -> None:
    theirs = release("0.3.5").run(
        "release_scenarios:migrate_exec", [{"args": list(case)} for case in cases]
    )
    for (messages, metadata), found in zip(cases, theirs, strict=True):
        mine = copy.deepcopy((messages, metadata))
        changed = migrate_exec_records(*mine)
        assert found["returned"] == {"changed": changed, "messages": mine[0], "metadata": mine[1]}
