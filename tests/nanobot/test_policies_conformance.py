"""sessionkit's exact policy against nanobot-ai 0.2.2 itself, on the same inputs.

Every comparison runs nanobot's own ``nanobot.session.manager.Session`` and sessionkit's
``Session`` on deep copies of one message list and requires identical results: history
entries, dropped and retained messages, offsets, archive chunks, raised exception types.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.reference import require
from support.strategies import message_lists, sessions

import sessionkit
from sessionkit import Session
from sessionkit.nanobot.policies import find_legal_message_start, recent_message_start_index

nanobot_manager = require()
nanobot_helpers = require("nanobot.utils.helpers")

pytestmark = pytest.mark.conformance

MAX_MESSAGES = (0, -1, 1, 2, 5, 120)
MAX_TOKENS = (0, 1, 5, 50, 500)
BOOLS = (False, True)
HISTORY_GRID = list(itertools.product(MAX_MESSAGES, MAX_TOKENS, BOOLS, BOOLS))
RETAIN_SIZES = (-1, 0, 1, 2, 3, 5, 120)
FILE_LIMITS = (0, 1, 2, 3, 5, 10, 2000)


def _user(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": "2025-01-01T10:00:00", **extra}


def _assistant(text: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


def _call(*ids: Any) -> dict[str, Any]:
    calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    return _assistant("", tool_calls=calls)


def _tool(call_id: Any, text: str = "result") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": "f", "content": text}


LONG = "word " * 60
EDGE_CASES: dict[str, tuple[list[dict[str, Any]], int]] = {
    "empty": ([], 0),
    "no user message": ([_assistant("a"), _call("x"), _tool("x"), _assistant("b")], 0),
    "assistant-only tail": (
        [_user(LONG), _assistant(LONG)] + [_call(f"c{i}") for i in range(3)] + [_assistant(LONG)],
        0,
    ),
    "orphan at the cut": (
        [_user(), _call("a", "b"), _tool("a"), _tool("b"), _user(), _tool("zz"), _assistant()],
        0,
    ),
    "orphan clears declared ids": (
        [_user(), _call("a", "b"), _tool("a"), _tool("nope"), _tool("b"), _assistant(), _user()],
        0,
    ),
    "delivery before user": (
        [
            _user(),
            _assistant("x"),
            _assistant("ping", _channel_delivery=True),
            _user("re"),
            _assistant(),
        ],
        0,
    ),
    "delivery at window start": (
        [_assistant("ping", _channel_delivery=True), _user(), _assistant()],
        0,
    ),
    "commands": (
        [_user("/status", _command=True), _assistant("up", _command=True), _user(), _assistant()],
        0,
    ),
    "command is first user": (
        [_assistant("x"), _user("/help", _command=True), _call("a"), _tool("a"), _user()],
        0,
    ),
    "consolidated at end": ([_user(), _assistant(), _user(), _assistant()], 4),
    "consolidated mid-turn": (
        [_user(), _assistant(), _call("a"), _tool("a"), _user(), _assistant()],
        3,
    ),
    "consolidated beyond": ([_user(), _assistant()], 7),
    "media and attachments": (
        [
            _user("", media=["/a.png", "", 3]),
            _user("look", media=[5]),
            _user("run", cli_apps=[{"name": " Git "}, {"name": ""}, "x"] * 4),
            _user("", mcp_presets=[{"name": "Fs", "transport": " "}]),
            _assistant("[Message Time: 2025-01-01]\nhi\n[image: /tmp/a.png]\nmessage(a)"),
        ],
        0,
    ),
    "empty assistants": (
        [_user(), _assistant("  "), _assistant("", reasoning_content=None), _assistant("\n")],
        0,
    ),
    "long tool chain": ([_user(LONG)] + [m for i in range(8) for m in (_call(i), _tool(i))], 0),
}


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", call()
    except Exception as error:
        return "raises", type(error).__name__


def _pair(messages: list[dict[str, Any]], offset: int) -> tuple[Any, Session]:
    """nanobot's Session and sessionkit's on separate deep copies, messages numbered."""
    numbered = [{**m, "_n": i} for i, m in enumerate(messages)]
    meta = {"_last_summary": "summary", "title": "t"}
    theirs = nanobot_manager.Session(
        key="k", messages=copy.deepcopy(numbered), metadata=dict(meta), last_consolidated=offset
    )
    ours = Session(
        key="k", messages=copy.deepcopy(numbered), metadata=dict(meta), last_consolidated=offset
    )
    return theirs, ours


def _check_history(messages: list[dict[str, Any]], offset: int, grid: list[tuple]) -> None:
    theirs, ours = _pair(messages, offset)
    assert ours.last_consolidated == theirs.last_consolidated
    for max_messages, max_tokens, stamps, extend in grid:
        kwargs = {"max_tokens": max_tokens, "include_timestamps": stamps, "extend_to_user": extend}
        expected = _outcome(lambda: theirs.get_history(max_messages, **kwargs))  # noqa: B023
        got = _outcome(lambda: ours.get_history(max_messages, **kwargs))  # noqa: B023
        assert got == expected, (max_messages, kwargs)
    assert ours.messages == theirs.messages


def _check_retain(messages: list[dict[str, Any]], offset: int, size: int, extend: bool) -> None:
    theirs, ours = _pair(messages, offset)
    expected = _outcome(lambda: theirs.retain_recent_legal_suffix(size, extend_to_user=extend))
    got = _outcome(lambda: ours.retain_recent_legal_suffix(size, extend_to_user=extend))
    assert got == expected
    assert ours.messages == theirs.messages
    assert ours.last_consolidated == theirs.last_consolidated
    assert ours.metadata == theirs.metadata


def _check_file_cap(messages: list[dict[str, Any]], offset: int, limit: int) -> None:
    theirs, ours = _pair(messages, offset)
    their_chunks: list[list[dict[str, Any]]] = []
    our_chunks: list[list[dict[str, Any]]] = []
    theirs.enforce_file_cap(their_chunks.append, limit=limit)
    ours.enforce_file_cap(our_chunks.append, limit=limit)
    assert our_chunks == their_chunks
    assert ours.messages == theirs.messages
    assert ours.last_consolidated == theirs.last_consolidated


@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_history_edge_cases(name: str) -> None:
    messages, offset = EDGE_CASES[name]
    _check_history(messages, offset, HISTORY_GRID)


@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_trimming_edge_cases(name: str) -> None:
    messages, offset = EDGE_CASES[name]
    for size, extend in itertools.product(RETAIN_SIZES, BOOLS):
        _check_retain(messages, offset, size, extend)
    for limit in FILE_LIMITS:
        _check_file_cap(messages, offset, limit)


@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_helpers_edge_cases(name: str) -> None:
    messages, _ = EDGE_CASES[name]
    for start in range(len(messages) + 1):
        tail = messages[start:]
        assert find_legal_message_start(tail) == nanobot_helpers.find_legal_message_start(tail)
        for size, extend in itertools.product((-1, 0, 1, 2, 3, 50), BOOLS):
            expected = nanobot_helpers.recent_message_start_index(tail, size, extend_to_user=extend)
            assert recent_message_start_index(tail, size, extend_to_user=extend) == expected


SAMPLE = sorted((Path(__file__).resolve().parents[2] / "data" / "sessions").glob("*.json*"))


@pytest.fixture(scope="module")
def sample() -> dict[str, Session]:
    return {s.key: s for s in sessionkit.load(SAMPLE)}


def test_sample_store_history_matches_nanobot(sample: dict[str, Session]) -> None:
    grid = list(itertools.product((0, 2, 40), (0, 50, 8000), BOOLS, BOOLS))
    for session in sample.values():
        cuts = sorted({len(session.messages)} | set(range(0, len(session.messages), 97)))
        for cut in cuts:
            offset = session.last_consolidated if session.last_consolidated <= cut else 0
            _check_history(session.messages[:cut], offset, grid if cut == cuts[-1] else grid[::5])


def test_sample_store_trimming_matches_nanobot(sample: dict[str, Session]) -> None:
    for session in sample.values():
        for limit in (2000, 300, 50):
            _check_file_cap(session.messages, session.last_consolidated, limit)
        for size, extend in itertools.product((1, 120), BOOLS):
            _check_retain(session.messages, session.last_consolidated, size, extend)


@given(sessions(), st.lists(st.sampled_from(HISTORY_GRID), min_size=1, max_size=12))
def test_history_matches_nanobot(session: Session, grid: list[tuple]) -> None:
    _check_history(session.messages, session.last_consolidated, grid)


@given(sessions(), st.sampled_from(RETAIN_SIZES), st.booleans(), st.sampled_from(FILE_LIMITS))
def test_trimming_matches_nanobot(session: Session, size: int, extend: bool, limit: int) -> None:
    _check_retain(session.messages, session.last_consolidated, size, extend)
    _check_file_cap(session.messages, session.last_consolidated, limit)


@given(message_lists(), st.integers(-1, 8), st.booleans())
def test_helpers_match_nanobot(messages: list[dict[str, Any]], size: int, extend: bool) -> None:
    assert find_legal_message_start(messages) == nanobot_helpers.find_legal_message_start(messages)
    expected = nanobot_helpers.recent_message_start_index(messages, size, extend_to_user=extend)
    assert recent_message_start_index(messages, size, extend_to_user=extend) == expected
