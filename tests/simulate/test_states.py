"""Message states against the exact policy: every status, every turn, the summary numbers."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import sessions

import sessionkit
from sessionkit import Session
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.settings import HistorySettings
from sessionkit.nanobot.tokens import estimate_message_tokens
from sessionkit.schema import STATES as COLUMNS
from sessionkit.schema import STATUS_NAMES
from sessionkit.simulate.states import MessageStates, message_states
from sessionkit.simulate.windowing import windows

POLICY = get_policy("nanobot-0.2")
SETTINGS = [
    {},
    {"max_messages": 20, "max_tokens": 500, "extend_to_user": True, "file_cap": 100},
    {"max_messages": 1, "include_timestamps": False, "file_cap": 0},
    {"max_messages": 60, "max_tokens": 3000, "include_timestamps": False, "file_cap": 300},
    {"max_messages": 0, "max_tokens": 200, "file_cap": 50},
]


def exact(session: Session, turn: int | None, **options: Any) -> tuple[list[int], int, int]:
    """Policy only: (source indices sent, their tokens, messages the file cap dropped)."""
    users = [i for i, m in enumerate(session.messages) if m.get("role") == "user"]
    stop = len(session.messages) if turn is None or turn == len(users) else users[turn]
    prefix = session.messages[:stop]
    offset = session.last_consolidated if session.last_consolidated <= stop else 0
    trim = POLICY.file_cap(prefix, offset, options.get("file_cap", 2000))
    where = {id(m): i for i, m in enumerate(prefix)}
    retained = [where[id(m)] for m in trim.retained]
    replay = POLICY.replay(
        trim.retained,
        trim.last_consolidated,
        options.get("max_messages", 120),
        max_tokens=options.get("max_tokens", 0),
        include_timestamps=options.get("include_timestamps", True),
        extend_to_user=options.get("extend_to_user", False),
    )
    sent = [retained[i] for i, _ in replay]
    return sent, sum(estimate_message_tokens(e) for _, e in replay), len(trim.dropped)


def check(session: Session, turn: int | None, **options: Any) -> MessageStates:
    states = message_states(session, turn=turn, **options)
    sent, tokens, dropped = exact(session, turn, **options)
    status = states.frame["status"].to_numpy()
    assert np.flatnonzero(status == "in_window").tolist() == sent
    counts = states.summary()
    assert (counts["in_window"], counts["sent_tokens"]) == (len(sent), tokens)
    assert counts["file_cap"] == dropped
    assert counts["later"] == len(session.messages) - states.stop
    assert sum(counts[s] for s in STATUS_NAMES) == len(session.messages)
    return states


@pytest.fixture(scope="module")
def corpus(data_dir) -> sessionkit.Corpus:
    """The sample replayed as 0.2.2 throughout (``exact`` is 0.2.2's policy)."""
    return sessionkit.load(data_dir, policy="nanobot-0.2")


def test_bundled_sessions_match_the_policy_at_every_kind_of_turn(corpus) -> None:
    for session in corpus:
        n = session.n_user_turns
        for turn in sorted({0, min(1, n), n // 2, n}):
            for options in SETTINGS:
                check(session, turn, **options)


@settings(max_examples=60)
@given(sessions(), st.data())
def test_generated_sessions_match_the_policy(session: Session, data: st.DataObject) -> None:
    turn = data.draw(st.integers(0, session.n_user_turns))
    options = {
        "max_messages": data.draw(st.sampled_from([0, 1, 3, 120])),
        "max_tokens": data.draw(st.sampled_from([0, 1, 40, 400])),
        "include_timestamps": data.draw(st.booleans()),
        "extend_to_user": data.draw(st.booleans()),
        "file_cap": data.draw(st.sampled_from([0, 2, 5, 2000])),
    }
    check(session, turn, **options)


@settings(max_examples=60)
@given(sessions(), st.booleans(), st.sampled_from([0, 40, 400]), st.booleans())
def test_windows_at_the_end_agree_with_states_on_generated_sessions(
    session: Session, stamps: bool, budget: int, extend: bool
) -> None:
    chosen = HistorySettings(
        max_messages=3, max_tokens=budget, include_timestamps=stamps, extend_to_user=extend
    )
    (row,) = windows(session, settings=chosen, at="end").itertuples(index=False)
    states = message_states(session, settings=chosen)
    sent = states.frame["sent_tokens"][states.frame["status"] == "in_window"].sum()
    assert (states.messages_kept, states.tokens_kept, states.cut, states.recovered) == (
        row.messages_kept,
        row.tokens_kept,
        row.cut,
        row.recovered,
    )
    assert sent == row.tokens_kept


def _message(role: str, content: str = "x", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, "timestamp": "2026-01-01T10:00:00", **extra}


@pytest.fixture
def every_status() -> Session:
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    messages = [
        _message("user", "old question"),  # 0 consolidated
        _message("assistant", "old answer"),  # 1 trimmed by count
        _message("user", "/help", _command=True),  # 2 command
        _message("assistant", "Commands: /new", _command=True),  # 3 command
        _message("user", "q2"),  # 4 trimmed by tokens
        _message("assistant", ""),  # 5 skipped: no text, nothing else to replay
        _message("assistant", "reading", tool_calls=[call]),  # 6 trimmed by tokens
        _message("tool", "word " * 400, tool_call_id="c1", name="read"),  # 7 trimmed by tokens
        _message("assistant", "done"),  # 8 trimmed by tokens
        _message("user", "q3"),  # 9 in window
        _message("assistant", "a3"),  # 10 in window
        _message("user", "q4"),  # 11 later (the turn)
        _message("assistant", "a4"),  # 12 later
    ]
    return Session("test:states", messages, last_consolidated=1)


def test_every_status_on_a_small_session(every_status: Session) -> None:
    states = check(every_status, 4, max_messages=7, max_tokens=100)
    assert states.frame["status"].tolist() == [
        "consolidated",
        "trimmed_count",
        "command",
        "command",
        "trimmed_tokens",
        "skipped",
        "trimmed_tokens",
        "trimmed_tokens",
        "trimmed_tokens",
        "in_window",
        "in_window",
        "later",
        "later",
    ]
    assert states.cut == "tokens"
    assert states.summary()["window"] == (9, 11)


def test_file_cap_status(every_status: Session) -> None:
    states = check(every_status, 4, file_cap=4).frame
    assert states["status"].tolist()[:9] == ["file_cap"] * 9
    assert states["status"].tolist()[9:] == ["in_window", "in_window", "later", "later"]


def test_frame_columns_tokens_and_window_facts(every_status: Session) -> None:
    result = message_states(every_status, max_tokens=100)
    states = result.frame
    assert list(states.columns) == [c.name for c in COLUMNS]
    assert {c.name: str(states[c.name].dtype) for c in COLUMNS} == {
        c.name: c.dtype for c in COLUMNS
    }
    assert states["tokens"].tolist() == [estimate_message_tokens(m) for m in every_status.messages]
    entries = [POLICY.replay_entry(m, True) for m in every_status.messages]
    assert states["sent_tokens"].tolist() == [
        pd.NA if e is None else estimate_message_tokens(e) for e in entries
    ]
    assert states["user_index"].tolist() == [0, 0, 1, 1, 2, 2, 2, 2, 2, 3, 3, 4, 4]
    assert states.attrs == {}
    sent = sum(estimate_message_tokens(e) for e in entries[9:])
    assert (result.key, result.turn, result.stop) == ("test:states", 5, 13)
    assert result.settings == POLICY.resolve(HistorySettings(max_tokens=100))
    assert (result.cut, result.messages_kept, result.tokens_kept, result.recovered) == (
        "tokens",
        4,
        sent,
        False,
    )
    assert repr(result).startswith("MessageStates(key='test:states', turn=5, stop=13, settings=")


def test_settings_value_and_keywords_agree(every_status: Session) -> None:
    tight = HistorySettings(max_messages=7, max_tokens=100, file_cap=0)
    by_value = message_states(every_status, turn=4, settings=tight)
    by_keywords = message_states(every_status, turn=4, max_messages=7, max_tokens=100, file_cap=0)
    pd.testing.assert_frame_equal(by_value.frame, by_keywords.frame)
    release = get_policy(every_status.policy)
    assert by_value.settings == by_keywords.settings == release.resolve(tight)
    assert dataclasses.astuple(by_value.settings) == (7, 100, True, False, True, 0, "recorded")
    assert message_states(every_status).settings == release.defaults
    overridden = message_states(every_status, turn=4, settings=tight, max_messages=120)
    assert overridden.settings == release.resolve(HistorySettings(max_tokens=100, file_cap=0))
    assert overridden.settings.max_messages == 120
    unconsolidated = message_states(
        every_status, settings=HistorySettings(last_consolidated="none")
    )
    assert "consolidated" not in unconsolidated.frame["status"].tolist()


def test_windows_at_the_end_and_states_agree_on_every_bundled_session(corpus) -> None:
    ends = windows(corpus, at="end", progress=False).set_index("session_key")
    for session in corpus:
        states = message_states(session)
        row = ends.loc[session.key]
        in_window = states.frame["status"] == "in_window"
        assert (
            states.tokens_kept == row["tokens_kept"] == states.frame["sent_tokens"][in_window].sum()
        )
        assert states.messages_kept == row["messages_kept"] == int(in_window.sum())
        assert (states.cut, states.recovered) == (row["cut"], row["recovered"])
        assert states.summary()["window"] == (
            (row["start"], row["stop"]) if row["messages_kept"] else None
        )


def test_counts_follow_edited_messages(every_status: Session) -> None:
    before = message_states(every_status).frame["tokens"].tolist()
    every_status.messages = [*every_status.messages, _message("user", "one more " * 50)]
    after = message_states(every_status).frame["tokens"].tolist()
    assert after[:-1] == before and after[-1] == estimate_message_tokens(every_status.messages[-1])


def test_corpus_and_key(corpus) -> None:
    key = corpus.keys()[0]
    by_key, by_session = message_states(corpus, key), message_states(corpus[key])
    pd.testing.assert_frame_equal(by_key.frame, by_session.frame)
    assert repr(by_key) == repr(by_session)
    with pytest.raises(TypeError, match="key="):
        message_states(corpus)
    with pytest.raises(ValueError, match="given with session"):
        message_states(corpus[key], "other:key")


@pytest.mark.parametrize("turn", [-1, 6, 1.0, True])
def test_turn_out_of_range(every_status: Session, turn: Any) -> None:
    with pytest.raises(ValueError, match="turn must be an integer from 0 to 5"):
        message_states(every_status, turn=turn)


def test_empty_session() -> None:
    states = message_states(Session("test:empty"))
    assert len(states.frame) == 0 and list(states.frame.columns) == [c.name for c in COLUMNS]
    assert {c.name: str(states.frame[c.name].dtype) for c in COLUMNS} == {
        c.name: c.dtype for c in COLUMNS
    }
    assert states.summary()["in_window"] == 0 and states.summary()["window"] is None
