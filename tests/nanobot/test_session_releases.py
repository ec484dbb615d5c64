"""``Session(policy=...)`` against each later release's own ``Session``, call for call.

Each case builds the same session on both sides, runs the same sequence of method calls, and
compares what every call returns (or which exception class it raises) and the session's
messages, offset and metadata afterwards, dict key order included.  Timestamps that the
release stamps with the wall clock are compared by shape, not value.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from support.releases import Release, release

from sessionkit.nanobot.session import Session

pytestmark = pytest.mark.conformance

LAST_ACTIVE = datetime(2026, 1, 2, 3, 4, 5)
ENCODED_LAST_ACTIVE = {"__datetime__": LAST_ACTIVE.isoformat()}

MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "first question", "timestamp": "2026-01-01T10:00:00"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "name": "ls", "content": "a.txt"},
    {"role": "assistant", "content": "[Message Time: 2026-01-01 10:00]\nfound a.txt"},
    {
        "role": "user",
        "content": "second\n\n[Runtime context]\nchannel: cli",
        "_runtime_context": {"version": 1, "suffix": "[Runtime context]\nchannel: cli"},
        "media": ["/tmp/x.png", 3],
    },
    {"role": "assistant", "content": "answer two"},
    {"role": "user", "content": "look", "media": ["", None]},
    {"role": "assistant", "content": "nothing to see"},
    {"role": "user", "content": "/status", "_command": True},
    {"role": "assistant", "content": "status ok"},
    {"role": "user", "content": "third", "cli_apps": [{"name": "Jq", "entry_point": "jq"}]},
    {"role": "assistant", "content": "answer three " * 40},
]

HISTORY_CALLS: list[dict[str, Any]] = [
    {"attr": "get_history"},
    {"attr": "get_history", "args": [3]},
    {"attr": "get_history", "args": [0]},
    {"attr": "get_history", "args": [-1]},
    {"attr": "get_history", "kwargs": {"max_tokens": 60}},
    {"attr": "get_history", "kwargs": {"max_tokens": 1}},
    {"attr": "get_history", "args": [2], "kwargs": {"extend_to_user": True}},
    {"attr": "get_history", "kwargs": {"include_runtime_context": False}},
]

SEQUENCES: dict[str, list[list[dict[str, Any]]]] = {
    "0.3.0": [
        HISTORY_CALLS,
        [{"attr": "get_history", "kwargs": {"include_timestamps": True}}],
        [{"attr": "retain_recent_legal_suffix", "args": [4]}, {"attr": "get_history"}],
        [{"attr": "retain_recent_legal_suffix", "args": [3], "kwargs": {"extend_to_user": True}}],
        [{"attr": "retain_recent_legal_suffix", "args": [0]}],
        [{"attr": "enforce_file_cap", "kwargs": {"limit": 5}}, {"attr": "get_history"}],
        [{"attr": "clear"}, {"attr": "get_history"}],
        [{"attr": "add_message", "args": ["user", "hi"], "kwargs": {"media": ["/m.png"]}}],
    ],
    "0.3.5": [
        HISTORY_CALLS,
        [{"attr": "get_history", "kwargs": {"include_timestamps": True}}],
        [{"attr": "last_archived"}],
        [
            {
                "attr": "commit_summary_checkpoint",
                "args": ["the summary"],
                "kwargs": {"insert_at": 4, "last_active": ENCODED_LAST_ACTIVE},
            },
            {"attr": "last_archived"},
            {"attr": "get_history"},
            {"attr": "get_history", "kwargs": {"max_tokens": 30}},
        ],
        [
            {"attr": "commit_summary_checkpoint", "args": ["s"], "kwargs": {"insert_at": 99}},
            {"attr": "last_archived"},
            {"attr": "get_history"},
        ],
        [{"attr": "clear"}, {"attr": "last_archived"}, {"attr": "get_history"}],
        [{"attr": "add_message", "args": ["assistant", "ok"], "kwargs": {"name": "x"}}],
        [{"attr": "retain_recent_legal_suffix", "args": [3]}],
        [{"attr": "enforce_file_cap"}],
    ],
}

_STAMP = "<now>"


def _stamped(value: Any) -> Any:
    """``value`` with ISO timestamps made now replaced by a marker (they differ per run)."""
    if isinstance(value, dict):
        return {k: _stamped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stamped(v) for v in value]
    if isinstance(value, str) and value.startswith(str(datetime.now().year)):
        try:
            datetime.fromisoformat(value)
        except ValueError:
            return value
        return _STAMP if value[:10] == datetime.now().date().isoformat() else value
    return value


def _state(messages: Any, offset: Any, metadata: Any) -> str:
    return json.dumps(_stamped({"m": messages, "o": offset, "md": metadata}))


def _plain(value: Any) -> Any:
    """A sessionkit return value in the harness's JSON form (dataclasses by type name)."""
    if hasattr(value, "__dataclass_fields__"):
        fields = {name: getattr(value, name) for name in value.__dataclass_fields__}
        return {"__type__": type(value).__name__, **{k: _plain(v) for k, v in fields.items()}}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return json.loads(json.dumps(value))


def _ours(version: str, steps: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    session = Session(
        key="cli:direct",
        messages=json.loads(json.dumps(MESSAGES)),
        metadata={"title": "t", "_last_summary": {"text": "old"}},
        last_consolidated=1,
        updated_at=LAST_ACTIVE,
        policy=f"nanobot-{version}",
    )
    results: list[tuple[Any, ...]] = []
    for step in steps:
        try:
            value = getattr(session, step["attr"])
            if callable(value):
                kwargs = {
                    k: LAST_ACTIVE if v == ENCODED_LAST_ACTIVE else v
                    for k, v in step.get("kwargs", {}).items()
                }
                value = value(*step.get("args", []), **kwargs)
        except Exception as error:
            results.append(("raised", type(error).__name__))
            break
        state = _state(session.messages, session.last_consolidated, session.metadata)
        results.append((json.dumps(_stamped(_plain(value))), state))
    return results


def _theirs(nanobot: Release, sequences: list[list[dict[str, Any]]]) -> list[list[tuple]]:
    init = {
        "key": "cli:direct",
        "messages": MESSAGES,
        "metadata": {"title": "t", "_last_summary": {"text": "old"}},
        "last_consolidated": 1,
        "updated_at": ENCODED_LAST_ACTIVE,
    }
    cases = [{"init": init, "state": False, "then": steps} for steps in sequences]
    out: list[list[tuple]] = []
    for result in nanobot.run("Session.key", cases):
        rows: list[tuple] = []
        for step in result["then"]:
            if "raised" in step:
                rows.append(("raised", step["raised"]))
                break
            state = step["state"]
            rows.append(
                (
                    json.dumps(_stamped(step["returned"])),
                    _state(state["messages"], state["last_consolidated"], state["metadata"]),
                )
            )
        out.append(rows)
    return out


@pytest.mark.parametrize("version", sorted(SEQUENCES))
def test_session_methods_equal_the_release(version: str) -> None:
    nanobot = release(version)
    expected = _theirs(nanobot, SEQUENCES[version])
    actual = [_ours(version, steps) for steps in SEQUENCES[version]]
    assert actual == expected
    assert sum(map(len, expected)) == sum(map(len, SEQUENCES[version]))
