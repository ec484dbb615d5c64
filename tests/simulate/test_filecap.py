"""file_cap() against Session.enforce_file_cap (itself checked against nanobot 0.2.2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import sessions

import sessionkit
from sessionkit import Session
from sessionkit.nanobot.settings import HistorySettings
from sessionkit.schema import FILE_CAP
from sessionkit.simulate.filecap import file_cap


def user(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str = "ok") -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def grown_by_hand(session: Session, limit: int) -> list[tuple[int, int, int, int]]:
    """(at, dropped, archived, kept) per trim, growing a Session and calling its own method."""
    grown = Session(session.key)
    users = [i for i, m in enumerate(session.messages) if m.get("role") == "user"]
    ends = sorted({i for i in users if i > 0} | {len(session.messages)})
    trims = []
    done = 0
    for end in ends:
        grown.messages = grown.messages + session.messages[done:end]
        done = end
        before = len(grown.messages)
        archived: list[dict[str, Any]] = []
        grown.enforce_file_cap(archived.extend, limit=limit)
        if len(grown.messages) != before:
            trims.append((end, before - len(grown.messages), len(archived), len(grown.messages)))
    return trims


@pytest.fixture(scope="module")
def sample() -> list[Session]:
    return list(sessionkit.load(Path(__file__).resolve().parents[2] / "data" / "sessions"))


def test_final_matches_session_method_on_the_sample(sample: list[Session]) -> None:
    frame = file_cap(sample, grid={"file_cap": [2000, 300, 50]})
    assert list(frame.columns) == [c.name for c in FILE_CAP]
    for column in FILE_CAP:
        assert str(frame[column.name].dtype) == column.dtype, column.name
    assert len(frame) == 3 * len(sample)
    for row in frame.itertuples(index=False):
        session = next(s for s in sample if s.key == row.session_key)
        if session.policy == "nanobot-0.3.5":  # no file cap in that release
            assert (row.tripped, row.kept, row.dropped) == (False, row.messages, 0)
            continue
        capped, archived = session.with_file_cap(row.limit)
        assert row.messages == len(session.messages) == row.at
        assert row.tripped == (len(session.messages) > row.limit)
        assert (row.kept, row.archived) == (len(capped.messages), len(archived))
        assert row.dropped == len(session.messages) - len(capped.messages)
        assert row.last_consolidated == capped.last_consolidated
        assert row.last_consolidated_before == session.last_consolidated
    tripped = frame[(frame["limit"] == 2000) & frame["tripped"]]
    assert tripped["session_key"].tolist() == ["telegram:12345"]


def test_growth_matches_growing_a_session(sample: list[Session]) -> None:
    frame = file_cap(sample, grid={"file_cap": [2000, 120]}, replay="growth")
    for (key, limit), trims in frame.groupby(["session_key", "limit"], observed=True):
        session = next(s for s in sample if s.key == key)
        got = list(trims[["at", "dropped", "archived", "kept"]].itertuples(index=False, name=None))
        assert got == grown_by_hand(session, limit)
    assert frame["tripped"].all() and (frame["last_consolidated"] == 0).all()
    assert set(frame.loc[frame["limit"] == 2000, "session_key"]) == {"telegram:12345"}


@settings(max_examples=80)
@given(sessions(), st.sampled_from([1, 2, 3, 5, 8]))
def test_generated_sessions(session: Session, limit: int) -> None:
    final = file_cap(session, file_cap=limit)
    capped, archived = session.with_file_cap(limit)
    (row,) = final.itertuples(index=False)
    assert (row.kept, row.archived, row.last_consolidated) == (
        len(capped.messages),
        len(archived),
        capped.last_consolidated,
    )
    growth = file_cap(session, grid={"file_cap": [limit]}, replay="growth")
    got = list(growth[["at", "dropped", "archived", "kept"]].itertuples(index=False, name=None))
    assert got == grown_by_hand(session, limit)
    assert (
        growth["turn"]
        == [sum(m.get("role") == "user" for m in session.messages[:at]) for at in growth["at"]]
    ).all()


def test_newest_messages_can_be_dropped() -> None:
    session = Session("k", messages=[user(), assistant("a0"), assistant("a1"), assistant("a2")])
    (row,) = file_cap(session, file_cap=2).itertuples(index=False)
    assert (row.tripped, row.dropped, row.kept, row.archived) == (True, 2, 2, 2)


def test_empty_results_keep_the_columns() -> None:
    frame = file_cap([Session("k", messages=[user()])], grid={"file_cap": [5]}, replay="growth")
    assert frame.empty and list(frame.columns) == [c.name for c in FILE_CAP]
    pd.testing.assert_index_equal(frame.columns, file_cap([], grid={"file_cap": [5]}).columns)
    with pytest.raises(ValueError, match="replay"):
        file_cap([], replay="later")


def test_the_default_limit_is_the_settings_file_cap() -> None:
    session = Session("k", messages=[user(), assistant("a0"), user(), assistant("a1")])
    assert file_cap(session)["limit"].tolist() == [2000]
    small = HistorySettings(file_cap=2)
    pd.testing.assert_frame_equal(file_cap(session, settings=small), file_cap(session, file_cap=2))
