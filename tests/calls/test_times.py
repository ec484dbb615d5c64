"""Call times of sk.requests: a turn's first call at its user message's stored time (a naive
local time read in ``tz``), later calls spread over the turn's stored times and marked
inferred, and exact starts from a usage frame where it ties a call to (session, turn, step)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import sessionkit as sk
from sessionkit.calls.times import call_times, logged_times
from sessionkit.nanobot.timestamps import local_moment

KEY = "cli:direct"


@pytest.fixture(scope="module")
def session(data_dir: Path) -> sk.Session:
    return sk.load(data_dir / "sessions")[KEY]


def test_steps_are_spread_over_the_turn() -> None:
    span = np.array([[1000, 4000], [1000, 4000], [1000, 4000], [5000, 2000], [-1, -1]])
    n_steps = np.array([3, 3, 3, 2, 1])
    step = np.array([0, 1, 2, 1, 0])
    assert call_times(span, n_steps, step).tolist() == [1000, 2000, 3000, 5000, -1]


def test_logged_times_take_each_calls_first_try() -> None:
    usage = pd.DataFrame(
        {
            "time": pd.to_datetime([5_000, 3_000, 9_000, 7_000], unit="ms", utc=True),
            "kind": ["agent", "agent", "summary", "agent"],
            "session_key": ["cli:a", "cli:a", "cli:a", None],
            "turn": pd.array([0, 0, 0, 0], dtype="Int64"),
            "step": pd.array([1, 1, 1, 1], dtype="Int64"),
        }
    )
    found = logged_times(
        usage, ["cli:b", "cli:a"], np.array([0, 0, 1]), np.array([1, 1, 1]), np.array([1, 0, 1])
    )
    assert found.tolist() == [3_000, -1, -1]


@pytest.mark.parametrize("tz", ["UTC", "Asia/Tokyo"])
def test_a_turns_first_call_is_its_user_message_s_time(session: sk.Session, tz: str) -> None:
    rows = sk.requests(session, tz=tz)
    users = [m for m in session.messages if m.get("role") == "user"]
    firsts = rows[rows["step"] == 0]
    expected = [
        pd.Timestamp(local_moment(users[t]["timestamp"], pd.Timestamp.now(tz).tzinfo))
        for t in firsts["turn"]
    ]
    assert firsts["time"].tolist() == [e.tz_convert("UTC").floor("ms") for e in expected]
    assert not firsts["time_inferred"].any()
    later = rows[rows["step"] > 0]
    assert later["time_inferred"].all()
    assert (rows.groupby("turn")["time"].diff().dropna() >= pd.Timedelta(0)).all()


def test_a_usage_frame_gives_exact_times(session: sk.Session) -> None:
    rows = sk.requests(session, tz="UTC")
    chosen = rows[rows["step"] == 1].head(2)
    at = pd.to_datetime([1_700_000_000_000, 1_700_000_050_000], unit="ms", utc=True)
    usage = pd.DataFrame(
        {
            "time": at,
            "kind": "agent",
            "session_key": KEY,
            "turn": chosen["turn"].to_numpy(),
            "step": chosen["step"].to_numpy(),
        }
    )
    exact = sk.requests(session, tz="UTC", usage=usage)
    hit = exact.loc[chosen.index]
    assert hit["time"].tolist() == list(at)
    assert not hit["time_inferred"].any()
    rest = exact.drop(chosen.index)
    pd.testing.assert_series_equal(rest["time"], rows.drop(chosen.index)["time"])
