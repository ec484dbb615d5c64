"""One meaning everywhere: the same settings give the same window through ``Session.history``,
``windows`` and ``message_states``, and a turn is the same message in the frames, the
transcript, ``message_states`` and ``fork``, under every release."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path

import pytest

import sessionkit as sk
from sessionkit.nanobot.session import Session
from sessionkit.synthetic import generate_corpus
from sessionkit.views.transcript import transcript_rows

RELEASES = list(sk.POLICIES)
SETTINGS = [
    sk.HistorySettings(),
    sk.HistorySettings(max_messages=120),
    sk.HistorySettings(max_messages=9),
    sk.HistorySettings(max_messages=0),
    sk.HistorySettings(max_tokens=600),
    sk.HistorySettings(max_messages=30, max_tokens=2000, extend_to_user=True),
    sk.HistorySettings(include_timestamps=False, include_runtime_context=False),
    sk.HistorySettings(last_consolidated="none", max_tokens=1500),
]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> list[Session]:
    folder = tmp_path_factory.mktemp("generated") / "sessions"
    generate_corpus(folder, n_sessions=8, target_messages=900, seed=5)
    return list(sk.load(folder, cache=False))


def _roleless(name: str) -> Session:
    """A session with a line that has no role, before the latest turns."""
    messages = [{"role": "user", "content": "first"}, {"content": "no role at all"}]
    for i in range(6):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"})
    return Session("cli:roleless", messages, policy=name)


@pytest.mark.parametrize("name", RELEASES)
def test_same_settings_same_window_everywhere(generated: list[Session], name: str) -> None:
    sessions = [dataclasses.replace(s, policy=name) for s in generated]
    compared = 0
    for settings in SETTINGS:
        frame = sk.windows(sessions, settings=settings, at="end")
        for session, row in zip(sessions, frame.itertuples(), strict=True):
            history = session.history(settings)
            states = sk.message_states(session, settings=settings, file_cap=0)
            assert (row.messages_kept, states.messages_kept) == (len(history), len(history))
            assert row.tokens_kept == states.tokens_kept
            compared += 1
    assert compared == len(SETTINGS) * len(sessions)


@pytest.mark.parametrize("name", RELEASES)
def test_max_messages_120_means_120_under_every_release(
    generated: list[Session], name: str
) -> None:
    longest = dataclasses.replace(max(generated, key=len), policy=name)
    assert len(longest) > 120
    settings = sk.HistorySettings(max_messages=120)
    frame = sk.windows(longest, settings=settings, at="end")
    assert frame["max_messages"].tolist() == [120]
    assert len(longest.history(settings)) == frame["messages_kept"].iloc[0] <= 120


@pytest.mark.parametrize("name", RELEASES)
def test_a_line_without_a_role_outside_the_window_is_answered(name: str) -> None:
    session = _roleless(name)
    settings = sk.HistorySettings(max_messages=3)
    assert len(session.history(settings)) == 2
    assert sk.windows(session, settings=settings, at="end")["messages_kept"].tolist() == [2]
    assert sk.message_states(session, settings=settings).messages_kept == 2
    with pytest.raises(KeyError, match="role"):
        session.history(sk.HistorySettings(max_messages=8))
    with pytest.raises(ValueError, match=r"message 1 has no role.*KeyError\('role'\)"):
        sk.windows(session, settings=sk.HistorySettings(max_messages=8), at="end")


def _checkpointed(path: Path) -> Session:
    """A session written to disk with two summary checkpoints inside its turns."""
    session = Session("cli:checkpoints", [], policy="nanobot-0.3.5")
    for turn in range(8):
        session.add_message("user", f"question {turn}")
        session.add_message("assistant", f"answer {turn}")
        if turn in (2, 5):
            session.commit_summary_checkpoint(f"summary {turn}", last_active=datetime(2026, 1, 1))
    return session


@pytest.mark.parametrize("name", RELEASES)
def test_a_turn_is_the_same_message_in_every_view_and_in_fork(name: str, tmp_path: Path) -> None:
    session = dataclasses.replace(_checkpointed(tmp_path), policy=name)
    states = sk.message_states(session).frame
    rows = transcript_rows(session, states["tokens"].tolist())
    shown = {row["user"]: row["idx"] for row in rows if row["user"] >= 0}
    assert sorted(shown) == list(range(session.n_user_turns))
    hidden_are_turns = sk.get_policy(name).hidden_turns
    assert session.n_user_turns == (10 if hidden_are_turns else 8)
    first_of_turn = states.groupby("user_index")["idx"].min().drop(-1, errors="ignore").to_dict()
    assert first_of_turn == shown
    for turn, idx in shown.items():
        forked = sk.fork(session, f"cli:fork-{turn}", turn)
        assert len(forked.messages) == idx
        assert session.before_user(turn).messages == session.messages[:idx]
    windows = sk.windows(session)
    assert windows["at"].tolist() == list(shown.values())
    assert windows["turn"].tolist() == list(shown)
