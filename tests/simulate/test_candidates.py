"""Candidate policies: the shipped picks against a plain loop over turns, every entry point
taking a candidate as ``policy=``, and the exact refusals."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import sessions

import sessionkit as sk
from sessionkit import dask as skd
from sessionkit.nanobot.history import (
    align_to_user,
    find_legal_message_start,
    recent_message_start_index,
)
from sessionkit.nanobot.policies import get_policy
from sessionkit.simulate.candidates import Calls
from sessionkit.testing import assert_frame_snapshot, assert_requests_snapshot, figure_data
from sessionkit.views.explorer import explore

KEY = "telegram:777"
RUNTIME = {
    "system": "Linux",
    "machine": "x86_64",
    "python_version": "3.11.0",
    "timezone": "UTC",
    "path": "",
}
PRICED = {"model": "gpt-4o-mini", "provider": "openai", "date": "2026-01-01"}


def reference_starts(
    session: sk.Session,
    base: str,
    frame: pd.DataFrame,
    setting: tuple[int, bool],
    pick: tuple[str, float],
) -> list[tuple[int, int]]:
    """(start, messages kept) per turn, by a plain loop over the turns: the release's count
    window, the candidate's rule, then the release's alignment (floors read from the frame)."""
    release = get_policy(base)
    messages = session.messages
    (max_messages, extend), (kind, value) = setting, pick
    count = release.count_window(max_messages)
    entry = release.entry_function(release.resolve(sk.HistorySettings()))
    found = []
    kept, floor_before = 0, None
    for row in frame.itertuples(index=False):
        at, floor = int(row.at), int(row.consolidated)
        before = messages[:at]
        own = floor
        if count > 0:
            own += recent_message_start_index(before[floor:], count, extend_to_user=extend)
        if kind == "block":
            start = floor + (own - floor) // int(value) * int(value)
        else:
            if floor != floor_before:
                kept, floor_before = floor, floor
            if count > 0 and at - kept > count * value:
                kept = own
            start = kept
        start = align_to_user(before, start)
        start += find_legal_message_start(before[start:])
        replayed = [i for i in range(start, at) if entry(before[i]) is not None]
        found.append((replayed[0] if replayed else at, len(replayed)))
    return found


@settings(max_examples=60, deadline=None)
@given(
    session=sessions(),
    base=st.sampled_from(["nanobot-0.2", "nanobot-0.3.0", "nanobot-0.3.5"]),
    max_messages=st.sampled_from([1, 2, 3, 5, 8]),
    extend=st.booleans(),
    pick=st.sampled_from(
        [
            ("block", 1),
            ("block", 2),
            ("block", 5),
            ("hysteresis", 1.0),
            ("hysteresis", 1.5),
            ("hysteresis", 3.0),
        ]
    ),
)
def test_shipped_candidates_equal_a_loop_over_turns(
    session: sk.Session, base: str, max_messages: int, extend: bool, pick: tuple[str, float]
) -> None:
    kind, value = pick
    made = sk.candidate(base, **{kind: value})
    frame = sk.windows(
        session, policy=made, max_messages=max_messages, extend_to_user=extend, cache=False
    )
    got = list(zip(frame["start"].tolist(), frame["messages_kept"].tolist(), strict=True))
    assert got == reference_starts(session, base, frame, (max_messages, extend), pick)
    mine = dataclasses.replace(session, policy=made.name)
    settings_ = sk.HistorySettings(max_messages=max_messages, extend_to_user=extend)
    for turn, (_start, kept) in enumerate(got):
        exact = mine.before_user(turn).history(settings_)
        assert len(exact) == kept


def keep_tokens(calls: Calls) -> np.ndarray:
    """A token target: the latest start whose window holds at most 3,000 tokens."""
    wanted = np.searchsorted(calls.tokens, calls.tokens[calls.at] - 3_000)
    return np.clip(wanted, calls.floor, calls.at)


@pytest.fixture(scope="module")
def corpus(data_dir: Path) -> sk.Corpus:
    return sk.load(data_dir / "sessions")


@pytest.fixture(scope="module")
def made() -> dict[str, Any]:
    return {
        "block": sk.candidate("nanobot-0.2", block=4),
        "hysteresis": sk.candidate("nanobot-0.2", hysteresis=2),
        "mine": sk.candidate("nanobot-0.2", keep_tokens, identity="keep_tokens v1"),
        "same": sk.candidate("nanobot-0.2", block=1),
    }


def test_windows_of_a_candidate_are_its_exact_replays(corpus: sk.Corpus, made: dict) -> None:
    session = corpus[KEY]
    names = [c.name for c in made.values()]
    frame = sk.windows(session, grid={"policy": names}, max_messages=12)
    assert list(frame["policy"].cat.categories) == names
    for candidate in made.values():
        rows = frame[frame["policy"] == candidate.name]
        mine = dataclasses.replace(session, policy=candidate.name)
        for row in rows.itertuples(index=False):
            history = mine.before_user(int(row.turn)).history(sk.HistorySettings(max_messages=12))
            assert len(history) == row.messages_kept
    own = sk.windows(session, max_messages=12)
    same = frame[frame["policy"] == made["same"].name]
    pd.testing.assert_frame_equal(
        same.drop(columns="policy").reset_index(drop=True),
        own.drop(columns="policy").reset_index(drop=True),
    )
    assert made["block"].release_name == "nanobot-0.2"
    assert made["block"].name == "nanobot-0.2+block(4)"
    assert made["mine"].label == "nanobot 0.2.2 + keep_tokens"


def test_requests_cost_and_snapshots_take_a_candidate(
    corpus: sk.Corpus, made: dict, tmp_path: Path
) -> None:
    session = corpus[KEY]
    own = sk.requests(session, max_messages=12, runtime=RUNTIME)
    same = sk.requests(session, policy=made["same"], max_messages=12, runtime=RUNTIME)
    assert (same["policy"] == made["same"].name).all()
    pd.testing.assert_frame_equal(
        same.drop(columns="policy"), own.drop(columns="policy"), check_categorical=False
    )
    priced = {
        name: sk.cost(sk.requests(session, policy=c, max_messages=12, runtime=RUNTIME), **PRICED)
        for name, c in made.items()
    }
    assert priced["same"]["cost_usd"].sum() == pytest.approx(
        sk.cost(own, **PRICED)["cost_usd"].sum()
    )
    assert priced["block"]["history_tokens"].sum() >= priced["same"]["history_tokens"].sum()
    for name in ("block", "hysteresis", "mine"):
        frame = sk.requests(session, policy=made[name], max_messages=12, runtime=RUNTIME)
        path = tmp_path / f"{name}.json"
        assert assert_requests_snapshot(frame, path, update=True, **PRICED).status == "written"
        assert assert_requests_snapshot(frame, path, **PRICED).status == "matches"
        recorded = json.loads(path.read_text())["settings"]
        assert recorded["policy"] == made[name].name
        assert recorded["candidates"] == {made[name].name: made[name].rule.identity}
        assert_frame_snapshot(
            sk.windows(session, policy=made[name], max_messages=12),
            tmp_path / f"{name}.csv",
            update=True,
        )
    nameless = sk.candidate("nanobot-0.2", keep_tokens, name="keep_tokens_again")
    frame = sk.requests(session, policy=nameless, max_messages=12, runtime=RUNTIME)
    with pytest.raises(ValueError) as refused:
        assert_requests_snapshot(frame, tmp_path / "nameless.json", update=True, **PRICED)
    assert str(refused.value) == (
        "candidate 'nanobot-0.2+keep_tokens_again' has no identity (a function no other process "
        "can tell apart), so no snapshot keeps it: make it with sk.candidate(..., "
        "identity='<what it is>')"
    )


def test_plots_explorer_and_dask_take_a_candidate(
    corpus: sk.Corpus, made: dict, tmp_path: Path
) -> None:
    session = corpus[KEY]
    names = ["nanobot-0.2", made["block"].name, made["hysteresis"].name, made["mine"].name]
    ax = sk.plot.release_comparison(session, policies=names)
    labels = set(figure_data(ax)["label"].dropna())
    assert {f"policy:{name}" for name in names} <= labels
    for candidate in (made["block"], made["hysteresis"], made["mine"]):
        app = explore(corpus, key=KEY, policy=candidate, max_messages=12, sessions_dir=tmp_path)
        assert app.policy.value == candidate.name
        states = sk.message_states(corpus, KEY, policy=candidate, max_messages=12)
        shown = int(app.summary.value.split("sk-in-window'>")[1].split("<")[0])
        assert shown == states.messages_kept
        lazy = skd.windows(corpus, policy=candidate, max_messages=12)
        got = lazy.compute(scheduler="sync").reset_index(drop=True)
        expected = sk.windows(corpus, policy=candidate, max_messages=12)
        pd.testing.assert_frame_equal(
            got.sort_values(["session_key", "turn"], ignore_index=True)[["turn", "start"]],
            expected.sort_values(["session_key", "turn"], ignore_index=True)[["turn", "start"]],
        )


def _turned() -> sk.Session:
    """Turn 1 follows a turn that ended on a tool result."""
    messages = [
        {"role": "user", "content": "look"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "name": "ls", "content": "x"},
        {"role": "user", "content": "and?"},
    ]
    return sk.Session(key="cli:x", messages=messages)


@pytest.mark.parametrize(
    ("pick", "why"),
    [
        (
            lambda c: None,
            "turn 0: its pick returned NoneType None, not one window start (a "
            "message index) for each of the 2 calls from that turn on",
        ),
        (
            lambda c: c.at + 1,
            "turn 0: its window starts at message 1, past the 0 messages stored before the turn",
        ),
        (
            lambda c: c.at * 0 - 1,
            "turn 0: its window starts at message -1, before the offset "
            "0 (consolidated messages are never replayed)",
        ),
        (
            lambda c: np.maximum(c.at - 1, 0),
            "turn 1: its window starts at message 2, and "
            "nanobot-0.2's alignment keeps none of its 1 messages (no user turn, and a tool "
            "result whose call lies before it), where the release's own window keeps 3",
        ),
    ],
)
def test_a_window_the_release_cannot_replay_is_refused(pick: Any, why: str) -> None:
    session = _turned()
    made = sk.candidate("nanobot-0.2", pick, name="bad")
    expected = f"candidate 'nanobot-0.2+bad' refused at session 'cli:x', {why}"
    with pytest.raises(ValueError) as refused:
        sk.windows(session, policy=made, cache=False)
    assert str(refused.value) == expected
    turn = int(why.split(":")[0].split()[1])
    with pytest.raises(ValueError) as exact:
        dataclasses.replace(session, policy=made.name).before_user(turn).history()
    if "calls from" not in why:  # the exact replay sees the calls up to its own
        assert str(exact.value) == expected


def test_a_candidate_needs_one_named_pick_on_a_windowed_release() -> None:
    with pytest.raises(TypeError, match="takes one of pick=, block= and hysteresis="):
        sk.candidate("nanobot-0.2", block=2, hysteresis=2)
    with pytest.raises(ValueError, match="name the candidate"):
        sk.candidate("nanobot-0.2", lambda c: c.start)
    with pytest.raises(ValueError, match="count slice"):
        sk.candidate("nanobot-0.1.4", block=2)
    with pytest.raises(ValueError, match="BlockEviction\\(k=...\\) takes an int >= 1"):
        sk.candidate("nanobot-0.2", block=0)
    with pytest.raises(ValueError, match="a candidate already"):
        sk.candidate(sk.candidate("nanobot-0.2", block=2), block=3)
