"""The fast window sweep against the exact policy, plus the frame's shape and settings."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.sampling import examples, sample_rows
from support.strategies import message_lists, sessions

import sessionkit
from sessionkit import Session
from sessionkit.nanobot.policies import find_legal_message_start, get_policy
from sessionkit.nanobot.settings import HistorySettings
from sessionkit.schema import WINDOWS
from sessionkit.simulate.replay import replay
from sessionkit.simulate.windowing import _legal_start, _orphan_jumps, windows
from sessionkit.store import memo
from sessionkit.store.counting import count_tokens

POLICY = get_policy("nanobot-0.2")
GRID = {
    "max_messages": [0, 2, 5, 120],
    "max_tokens": [0, 1, 30, 400],
    "include_timestamps": [False, True],
    "extend_to_user": [False, True],
}


def expected_row(session: Session, row: Any) -> tuple:
    """What the exact policy gives for one window row, in the row's terms."""
    replay = POLICY.replay(
        session.messages[: row.at],
        row.consolidated,
        row.max_messages,
        max_tokens=row.max_tokens,
        include_timestamps=row.include_timestamps,
        extend_to_user=row.extend_to_user,
    )
    if not replay:
        return (row.at, row.at, 0, 0, False)
    entries = [entry for _, entry in replay]
    return (
        replay[0][0],
        replay[-1][0] + 1,
        len(replay),
        sum(count_tokens(entries)),
        entries[0]["role"] == "user",
    )


def assert_rows_match(frame: pd.DataFrame, by_key: dict[str, Session]) -> None:
    for row in frame.itertuples(index=False):
        got = (row.start, row.stop, row.messages_kept, row.tokens_kept, row.starts_with_user)
        assert got == expected_row(by_key[row.session_key], row), row


def user(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assistant(text: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


@pytest.fixture(scope="module")
def sample() -> list[Session]:
    """The sample replayed as 0.2.2 throughout; the release tests below cover the others."""
    folder = Path(__file__).resolve().parents[2] / "data" / "sessions"
    return list(sessionkit.load(folder, policy="nanobot-0.2"))


def test_columns_follow_the_schema(sample: list[Session]) -> None:
    frame = windows(sample[:3], grid={"max_tokens": [0, 500]}, progress=False)
    assert list(frame.columns) == [c.name for c in WINDOWS]
    for column in WINDOWS:
        assert str(frame[column.name].dtype) == column.dtype, column.name
    assert len(frame) == 2 * sum(s.n_user_turns for s in sample[:3])
    assert set(frame["cut"].cat.categories) == {
        "none",
        "consolidation",
        "count",
        "orphan",
        "tokens",
    }


def test_every_sample_session_matches_the_policy(sample: list[Session]) -> None:
    frame = windows(sample, grid=GRID | {"last_consolidated": ["recorded", "none"]}, progress=False)
    assert len(frame) == 4 * 4 * 2 * 2 * 2 * sum(s.n_user_turns for s in sample)
    by_key = {s.key: s for s in sample}
    turns = frame.groupby("session_key", observed=True)["at"].transform(
        lambda at: at.isin(np.unique(at)[:: max(1, at.nunique() // 5)])
    )
    assert_rows_match(frame[turns], by_key)


@pytest.mark.sampled
def test_agent_setting_every_turn_matches_the_policy(sample: list[Session]) -> None:
    frame = windows(sample, max_tokens=8000, include_timestamps=True, progress=False)
    assert_rows_match(sample_rows(frame, share=0.3), {s.key: s for s in sample})
    assert frame["cut"].isin(["tokens", "count"]).any()


@pytest.mark.sampled
@settings(max_examples=examples(60, 20))
@given(sessions())
def test_generated_sessions_match_the_policy(session: Session) -> None:
    grid = GRID | {"max_messages": [0, 2, 5]}
    frame = windows(
        session,
        at=list(range(len(session.messages) + 1)),
        grid=grid | {"last_consolidated": ["recorded", "none"]},
        progress=False,
    )
    assert len(frame) == 3 * 4 * 2 * 2 * 2 * (len(session.messages) + 1)
    settings_ = ["at", "consolidated", *grid]
    assert_rows_match(frame.drop_duplicates(settings_), {session.key: session})


@settings(max_examples=60)
@given(message_lists())
def test_orphan_jumps_give_every_legal_start(messages: list[dict[str, Any]]) -> None:
    replayed = replay(Session("k", messages), HistorySettings(include_timestamps=False), cache=None)
    tools = np.flatnonzero(replayed.declared != -2)
    lowest = np.where(replayed.declared[tools] >= 0, replayed.declared[tools], -1) + 1
    one_session = np.full(len(messages) + 1, len(messages))
    jumps = _orphan_jumps(tools, lowest, len(messages), one_session)
    pairs = list(itertools.combinations_with_replacement(range(len(messages) + 1), 2))
    begin, end = (np.array(side, dtype=np.int64) for side in zip(*pairs, strict=True))
    legal = _legal_start(jumps, begin, end) - begin
    assert legal.tolist() == [find_legal_message_start(messages[b:e]) for b, e in pairs]


def test_recorded_offset_applies_within_the_prefix_only() -> None:
    messages = [user("u0"), assistant(), user("u1"), assistant(), user("u2"), assistant()]
    session = Session("k", messages=messages, last_consolidated=2)
    frame = windows(
        session, at=[0, 1, 2, 4, 6], grid={"last_consolidated": ["recorded", "none", 5, -1]}
    )
    table = frame.pivot(index="at", columns="last_consolidated", values="consolidated")
    assert table.loc[:, "recorded"].tolist() == [0, 0, 2, 2, 2]
    assert table.loc[:, "none"].tolist() == [0] * 5
    assert table.loc[:, "5"].tolist() == [0, 0, 0, 0, 5]
    assert table.loc[:, "-1"].tolist() == [0] * 5
    assert frame.loc[frame["consolidated"] == 2, "cut"].eq("consolidation").all()


def test_cut_recovery_and_commands() -> None:
    long = "word " * 80
    messages = [
        user("/status", _command=True),
        assistant("up", _command=True),
        user("question"),
        assistant(long),
        assistant(long),
        user("next"),
    ]
    frame = windows(
        Session("k", messages=messages), grid={"max_messages": [120, 2], "max_tokens": [0, 60]}
    )
    assert frame["command"].tolist() == [True, False, False] * 4
    end = frame[frame["at"] == 5].set_index(["max_messages", "max_tokens"])
    assert end.loc[(120, 0), "cut"] == "none" and end.loc[(120, 0), "messages_kept"] == 3
    assert end.loc[(2, 0), "cut"] == "count" and end.loc[(2, 0), "start"] == 3
    assert end.loc[(120, 60), "recovered"] and end.loc[(120, 60), "cut"] == "none"
    assert end.loc[(120, 60), "start"] == 2 and end.loc[(120, 60), "tokens_kept"] > 60
    assert end.loc[(2, 0), "messages_hidden"] == 3
    first = frame[frame["at"] == 0]
    assert (first["messages_kept"] == 0).all() and (first["start"] == 0).all()


def test_token_cut_is_reported() -> None:
    messages = [user("a " * 50), assistant("b " * 50), user("c"), assistant("d")]
    frame = windows(Session("k", messages=messages), at="end", max_tokens=30)
    (row,) = frame.itertuples(index=False)
    assert (row.cut, row.start, row.messages_kept, row.messages_hidden) == ("tokens", 2, 2, 2)
    assert row.tokens_hidden == sum(count_tokens([POLICY.replay_entry(m) for m in messages[:2]]))


def test_sessions_without_user_turns_and_empty_sessions() -> None:
    quiet = Session("quiet", messages=[assistant("ping", _channel_delivery=True)] * 3)
    empty = Session("empty")
    assert windows([quiet, empty]).empty
    ends = windows([quiet, empty], at="end").set_index("session_key")
    assert ends.loc["quiet", "messages_kept"] == 3 and not ends.loc["quiet", "starts_with_user"]
    assert ends.loc["empty", "messages_kept"] == 0


def test_workers_give_the_same_frame(sample: list[Session]) -> None:
    memo.clear()
    parallel = windows(sample, grid={"max_tokens": [0, 2000]}, workers=2, progress=False)
    memo.clear()
    serial = windows(sample, grid={"max_tokens": [0, 2000]}, workers=1, progress=False)
    pd.testing.assert_frame_equal(parallel, serial)


def test_unknown_policies_and_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown history policy 'nanobot-0.3'"):
        windows(Session("k", messages=[user()], policy="nanobot-0.3"))
    with pytest.raises(ValueError, match="unknown history policy 'nanobot-9'"):
        windows(Session("k", messages=[user()]), grid={"policy": ["nanobot-0.2", "nanobot-9"]})
    with pytest.raises(ValueError, match="context_window must be an int >= 0, not -1"):
        windows(Session("k", messages=[user()]), context_window=-1)
    with pytest.raises(ValueError, match="at must be"):
        windows(Session("k"), at="start")
    with pytest.raises(ValueError, match="last_consolidated"):
        windows(Session("k", messages=[user()]), last_consolidated="all")


def test_orphan_tool_result_sets_the_cut() -> None:
    session = Session(
        key="t:orphan",
        messages=[
            {"role": "user", "content": "a"},
            {"role": "tool", "tool_call_id": "gone", "content": "late result"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ],
    )
    row = windows(session, at="end").iloc[0]
    assert (row["cut"], row["start"], row["stop"], row["messages_hidden"]) == ("orphan", 2, 4, 2)
    kept = session.get_history()
    assert [m["content"] for m in kept] == ["b", "c"]


def test_settings_give_the_defaults_and_keywords_override_them(sample: list[Session]) -> None:
    session = sample[0]
    agent = POLICY.resolve(HistorySettings())
    assert (agent.max_messages, agent.include_timestamps, agent.last_consolidated) == (
        120,
        True,
        "recorded",
    )
    pd.testing.assert_frame_equal(windows(session), windows(session, settings=agent))
    pd.testing.assert_frame_equal(windows(session), windows(session, settings=HistorySettings()))
    assert windows(session)["include_timestamps"].all()
    tight = HistorySettings(max_messages=20, max_tokens=500, include_timestamps=False)
    pd.testing.assert_frame_equal(
        windows(session, settings=tight),
        windows(session, max_messages=20, max_tokens=500, include_timestamps=False),
    )
    grid = windows(
        session, settings=tight, grid={"max_tokens": [0, 500], "extend_to_user": [False, True]}
    )
    assert grid.groupby(["max_tokens", "extend_to_user"]).size().to_dict() == {
        (0, False): session.n_user_turns,
        (0, True): session.n_user_turns,
        (500, False): session.n_user_turns,
        (500, True): session.n_user_turns,
    }
    assert set(grid["max_messages"]) == {20} and not grid["include_timestamps"].any()
    offsets = windows(session, settings=HistorySettings(last_consolidated="none"))
    assert offsets["last_consolidated"].tolist() == ["none"] * session.n_user_turns
    assert (offsets["consolidated"] == 0).all()


def test_replay_offset_is_the_window_rule_for_one_session() -> None:
    session = Session("k", messages=[user(), assistant(), user(), assistant()], last_consolidated=2)
    assert session.replay_offset("recorded") == 2
    assert session.replay_offset("none") == 0
    assert [session.replay_offset(n) for n in (-1, 0, 3, 4, 5)] == [0, 0, 3, 4, 0]
    assert session.before_user(1).replay_offset("recorded") == 2
    assert session.before_user(0).replay_offset("recorded") == 0
    with pytest.raises(ValueError, match="last_consolidated must be"):
        session.replay_offset("all")


# --- every release ---------------------------------------------------------------------------

RELEASES = ["nanobot-0.2", "nanobot-0.3.0", "nanobot-0.3.5"]
CONTEXT = (
    "[Runtime Context — metadata only, not instructions]\nCurrent Time: 10:00\n[/Runtime Context]"
)


def release_row(session: Session, row: Any) -> tuple:
    """What ``row.policy``'s exact ``get_history`` gives for one window row, in its terms."""
    policy = get_policy(row.policy)
    entry = policy.entry_function(
        HistorySettings(
            include_timestamps=row.include_timestamps,
            include_runtime_context=row.include_runtime_context,
        )
    )
    replayed = policy.replay_from(
        session.messages[: row.at],
        row.consolidated,
        row.max_messages,
        max_tokens=row.max_tokens,
        extend_to_user=row.extend_to_user,
        entry=entry,
    )
    if not replayed:
        return (row.at, row.at, 0, 0, False)
    entries = [e for _, e in replayed]
    return (
        replayed[0][0],
        replayed[-1][0] + 1,
        len(replayed),
        sum(count_tokens(entries, policy=row.policy)),
        entries[0]["role"] == "user",
    )


def assert_release_rows_match(frame: pd.DataFrame, by_key: dict[str, Session]) -> int:
    for row in frame.itertuples(index=False):
        got = (row.start, row.stop, row.messages_kept, row.tokens_kept, row.starts_with_user)
        assert got == release_row(by_key[row.session_key], row), row
    return len(frame)


def checkpoint_offset(session: Session, at: int) -> int:
    """0.3.5's offset in force before ``messages[at]``, computed the slow way."""
    recorded = session.last_consolidated if 0 <= session.last_consolidated <= at else 0
    hidden = [i for i, m in enumerate(session.messages[:at]) if m.get("_hidden_history") is True]
    return max([recorded, *hidden])


@st.composite
def release_sessions(draw: st.DrawFn) -> Session:
    """Sessions in 0.3.x's shape: runtime-context markers, hidden checkpoints, media."""
    items = draw(message_lists(max_blocks=10))
    for _ in range(draw(st.integers(0, 3))):
        text = draw(st.sampled_from(["", "hi", "look <|endoftext|>"]))
        marked = {
            "role": "user",
            "content": f"{text}\n\n{CONTEXT}" if text else CONTEXT,
            "_runtime_context": {"version": 1, "sources": ["clock"], "suffix": CONTEXT},
        }
        if draw(st.booleans()):
            marked["media"] = draw(st.sampled_from([["/a.png"], [3, ""], "p.png"]))
        if draw(st.booleans()):
            marked["cli_apps"] = [{"name": "git", "entry_point": "main.py"}]
        items.insert(draw(st.integers(0, len(items))), marked)
    for _ in range(draw(st.integers(0, 2))):
        hidden = {"role": "user", "content": "Continue.", "_hidden_history": True}
        items.insert(draw(st.integers(0, len(items))), hidden)
    offset = draw(st.integers(0, len(items) + 1))
    return Session(
        "k", messages=items, last_consolidated=offset, policy=draw(st.sampled_from(RELEASES))
    )


@pytest.mark.sampled
@settings(max_examples=examples(40, 15), deadline=None)
@given(release_sessions())
def test_generated_sessions_match_every_release(session: Session) -> None:
    grid = {
        "max_messages": [0, 2, 5],
        "max_tokens": [0, 1, 30, 400],
        "include_timestamps": [False, True],
        "include_runtime_context": [False, True],
        "extend_to_user": [False, True],
    }
    frame = windows(
        session,
        at=list(range(len(session.messages) + 1)),
        grid=grid | {"policy": RELEASES, "last_consolidated": ["recorded", "none"]},
        progress=False,
    )
    # 0.2.2 varies by time stamps, 0.3.x by runtime context: 2 entry settings each.
    assert len(frame) == 3 * 3 * 4 * 2 * 2 * 2 * (len(session.messages) + 1)
    recorded = frame[frame["last_consolidated"] == "recorded"]
    for row in recorded.drop_duplicates(["policy", "at"]).itertuples(index=False):
        expected = (
            checkpoint_offset(session, row.at)
            if row.policy == "nanobot-0.3.5"
            else session.replay_offset("recorded")
            if session.last_consolidated <= row.at
            else 0
        )
        assert row.consolidated == expected, row
    columns = ["policy", "at", "consolidated", *grid]
    assert_release_rows_match(frame.drop_duplicates(columns), {session.key: session})


@pytest.mark.sampled
def test_every_sample_session_matches_every_release_at_every_turn(sample: list[Session]) -> None:
    frame = windows(
        sample,
        grid={
            "policy": RELEASES,
            "context_window": [16_000],
            "max_output": [4096],
            "include_runtime_context": [True, False],
        },
        progress=False,
    )
    n_turns = sum(s.n_user_turns for s in sample)
    counts = frame.groupby("policy", observed=True).size().to_dict()
    assert counts == {
        "nanobot-0.2": n_turns,
        "nanobot-0.3.0": 2 * n_turns,
        "nanobot-0.3.5": 2 * n_turns,
    }
    checked = sample_rows(frame, share=0.3)
    assert assert_release_rows_match(checked, {s.key: s for s in sample}) == len(checked)
    assert set(checked["policy"]) == set(RELEASES)
    assert frame.loc[frame["policy"] == "nanobot-0.3.5", "needs_summary"].any()


def test_own_release_by_default_and_release_defaults_without_a_context_window() -> None:
    messages = [user("q0"), assistant("a0"), user("q1"), assistant("a1"), user("q2")]
    sessions = [Session(f"k{name}", messages=messages, policy=name) for name in RELEASES]
    frame = windows(sessions, at="end")
    assert frame["policy"].tolist() == RELEASES
    assert frame["max_messages"].tolist() == [120, 2000, 0]
    assert frame["include_timestamps"].tolist() == [True, False, False]
    assert frame["include_runtime_context"].tolist() == [True, True, True]
    assert frame["context_window"].isna().all() and frame["needs_summary"].isna().all()
    assert frame["messages_kept"].tolist() == [5, 5, 5]
    for session in sessions:
        kept = frame.loc[frame["session_key"] == session.key, "messages_kept"].item()
        assert kept == len(session.get_history())
    fixed = windows(sessions, at="end", max_messages=2)
    assert fixed["max_messages"].tolist() == [2, 2, 2]
    assert fixed["messages_kept"].tolist() == [1, 1, 1]


def test_context_window_gives_each_releases_loop_call_and_summary_verdict() -> None:
    long = "word " * 400  # 404 tokens
    messages = [user(long), assistant(long), user(long), assistant(long), user("next")]
    session = Session("k", messages=messages)
    frame = windows(
        session,
        grid={"policy": RELEASES, "context_window": [3000, 20_000]},
        max_output=1000,
        at="end",
    ).set_index(["policy", "context_window"])
    assert frame["max_output"].tolist() == [1000] * 6
    assert frame["max_messages"].tolist() == [120, 120, 120, 200, 0, 0]
    assert frame["max_tokens"].tolist() == [976, 17_976, 976, 17_976, 0, 0]
    assert frame.loc[("nanobot-0.2", 3000), "cut"] == "tokens"
    assert frame.loc[("nanobot-0.2", 3000), "messages_kept"] == 3
    assert frame.loc[("nanobot-0.3.5", 3000), "messages_kept"] == 5
    assert frame["needs_summary"].tolist() == [pd.NA, pd.NA, pd.NA, pd.NA, True, False]
    with pytest.raises(ValueError, match="max_tokens is derived"):
        windows(session, context_window=3000, max_tokens=10)
    with pytest.raises(ValueError, match="needs context_window"):
        windows(session, max_output=10)


def test_a_checkpoint_is_in_force_from_the_turn_after_it_was_committed() -> None:
    session = Session("k", policy="nanobot-0.3.5")
    histories = []
    for turn in range(6):
        histories.append((len(session.messages), len(session.get_history())))
        session.add_message("user", f"q{turn}")
        session.add_message("assistant", f"a{turn}")
        if turn in (1, 3):
            session.commit_summary_checkpoint(f"summary {turn}")
    assert histories == [(0, 0), (2, 2), (5, 1), (7, 3), (10, 1), (12, 3)]
    frame = windows(session)  # the hidden messages at 4 and 9 are not turns
    assert frame["at"].tolist() == [0, 2, 5, 7, 10, 12]
    assert frame["turn"].tolist() == [0, 1, 2, 3, 4, 5]
    assert frame["consolidated"].tolist() == [0, 0, 4, 4, 9, 9]
    assert list(zip(frame["at"], frame["messages_kept"], strict=True)) == histories


def test_max_tokens_none_takes_the_settings_budget(data_dir: Path) -> None:
    """``windows(s, max_tokens=None)`` is "the setting's budget", not an int() error."""
    session = sessionkit.load(data_dir)["webui:f00d42"]
    assert windows(session, max_tokens=None).equals(windows(session, max_tokens=0))
    chosen = HistorySettings(max_tokens=3000)
    frame = windows(session, settings=chosen, max_tokens=None)
    assert frame["max_tokens"].unique().tolist() == [3000]
    assert frame.equals(windows(session, max_tokens=3000))


def test_none_in_a_grid_is_the_releases_default() -> None:
    """``include_timestamps=[None, False]``: 0.2.2's default (True) and False, not False twice;
    ``max_messages=[None, 10]``: 120 and 10."""
    session = sessionkit.load(
        Path(__file__).resolve().parents[2] / "data" / "sessions", cache=False
    )["webui:f00d42"]
    grid = sessionkit.windows(
        session, at="end", grid={"include_timestamps": [None, False], "max_messages": [None, 10]}
    )
    assert grid[["include_timestamps", "max_messages"]].values.tolist() == [
        [True, 120],
        [True, 10],
        [False, 120],
        [False, 10],
    ]
    same = sessionkit.windows(
        session, at="end", include_timestamps=True, grid={"max_messages": [120, 10]}
    )
    assert grid["tokens_kept"].tolist()[:2] == same["tokens_kept"].tolist()


@pytest.mark.parametrize(
    ("keywords", "says"),
    [
        ({"grid": {"max_messages": ["10"]}}, "max_messages must be an int"),
        ({"grid": {"include_timestamps": [None, 1]}}, "include_timestamps must be True or False"),
        ({"grid": {"context_window": [None, 8000]}}, "context_window's list cannot hold None"),
        ({"max_messages": "10"}, "max_messages must be an int"),
        ({"context_window": 8000, "max_output": -1}, "max_output must be an int >= 0"),
        ({"file_cap": 100}, "file_cap is not applied to windows or requests"),
    ],
)
def test_a_wrong_grid_is_refused_naming_the_parameter(keywords: dict, says: str) -> None:
    session = Session("k", [{"role": "user", "content": "q"}])
    with pytest.raises((TypeError, ValueError), match=says):
        sessionkit.windows(session, **keywords)
    with pytest.raises((TypeError, ValueError), match=says):
        sessionkit.requests(session, **keywords)
