"""``windows`` under nanobot-ai 0.1.5.post3 to 0.2.1, checked against each release's exact
``get_history``; 0.1.4 to 0.1.5.post2, whose count slices it does not reproduce, are refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.sampling import examples
from support.strategies import message_lists

from sessionkit import Session
from sessionkit.nanobot.policies import RELEASE_TABLE, get_policy
from sessionkit.simulate.windowing import windows
from sessionkit.store.counting import count_tokens

BUDGET = ["nanobot-0.1.5.post3", "nanobot-0.2.0", "nanobot-0.2.1"]
GRID = {
    "max_messages": [0, 2, 5],
    "max_tokens": [0, 1, 30, 400],
    "include_timestamps": [False, True],
}


@st.composite
def _sessions(draw: st.DrawFn) -> Session:
    items = draw(message_lists(max_blocks=10))
    return Session("k", messages=items, last_consolidated=draw(st.integers(0, len(items))))


@pytest.mark.sampled
@settings(max_examples=examples(40, 10), deadline=None)
@given(_sessions())
def test_windows_equal_each_releases_get_history(session: Session) -> None:
    at = list(range(len(session.messages) + 1))
    frame = windows(session, at=at, grid=GRID | {"policy": BUDGET}, progress=False)
    assert len(frame) == len(BUDGET) * 3 * 4 * 2 * len(at)
    for row in frame.itertuples(index=False):
        policy = get_policy(row.policy)
        replayed = policy.replay(
            session.messages[: row.at],
            row.consolidated,
            row.max_messages,
            max_tokens=row.max_tokens,
            include_timestamps=row.include_timestamps,
        )
        entries = [entry for _, entry in replayed]
        tokens = sum(count_tokens(entries, policy=row.policy)) if entries else 0
        start, stop = (replayed[0][0], replayed[-1][0] + 1) if replayed else (row.at, row.at)
        assert (row.start, row.stop, row.messages_kept, row.tokens_kept) == (
            start,
            stop,
            len(replayed),
            tokens,
        ), row


def test_count_slice_releases_are_refused() -> None:
    slices = sorted({n for n in RELEASE_TABLE.values() if not get_policy(n).windowed})
    assert slices == [
        "nanobot-0.1.4",
        "nanobot-0.1.4.post2",
        "nanobot-0.1.4.post5",
        "nanobot-0.1.4.post6",
        "nanobot-0.1.5",
        "nanobot-0.1.5.post2",
    ]
    session = Session("k", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match=r"nanobot 0\.1\.5's get_history is a count slice"):
        windows(session, policy="nanobot-0.1.5.post1", progress=False)
