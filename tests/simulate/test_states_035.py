"""A 0.3.5 session's states and token timeline use 0.3.5's settings: no count window
(``max_messages`` 0 means none) and no file cap, whatever the other releases would apply."""

from __future__ import annotations

import matplotlib
import pytest

import sessionkit as sk
from sessionkit.nanobot.session import Session

matplotlib.use("Agg")

N_TURNS = 70  # 140 messages: past 0.2's 120-message count window


def _session(policy: str) -> Session:
    messages = []
    for n in range(N_TURNS):
        messages += [
            {"role": "user", "content": f"question {n}"},
            {"role": "assistant", "content": f"answer {n}"},
        ]
    return Session(key="a:b", messages=messages, policy=policy)


def _gids(ax) -> set[str]:
    return {a.get_gid() for axes in ax.figure.axes for a in axes.get_children() if a.get_gid()}


@pytest.mark.parametrize("file_cap", [None, 10])
def test_a_035_session_has_no_count_window_and_no_file_cap(file_cap: int | None) -> None:
    session = _session("nanobot-0.3.5")
    states = sk.message_states(session, file_cap=file_cap)
    assert (states.settings.max_messages, states.settings.file_cap) == (0, 0)
    assert states.count_window == 0
    assert set(states.frame["status"]) == {"in_window"}
    gids = _gids(sk.plot.token_timeline(session, file_cap=file_cap))
    assert "max_messages" not in gids and "file_cap" not in gids
    assert {"window", "sent_from_here"} <= gids


def test_the_count_window_is_drawn_where_the_release_has_one() -> None:
    session = _session("nanobot-0.2")
    states = sk.message_states(session, max_messages=0)
    assert states.count_window == 120
    ax = sk.plot.token_timeline(states)
    (line,) = [a for a in ax.figure.axes[-1].get_children() if a.get_gid() == "max_messages"]
    assert line.get_label() == "max_messages=120 window"
