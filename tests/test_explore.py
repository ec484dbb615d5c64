"""The explorer without a browser: controls set in Python, what it would send checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sessionkit
from sessionkit.explorer import SCRATCH_FORK_DIR, Explorer, explore
from sessionkit.nanobot.naming import session_path
from sessionkit.nanobot.settings import HistorySettings
from sessionkit.states import message_states
from sessionkit.transcript import transcript_rows
from sessionkit.windowing import windows

KEY = "webui:f00d42"


@pytest.fixture(scope="module")
def corpus(data_dir) -> sessionkit.Corpus:
    return sessionkit.load(data_dir)


@pytest.fixture
def app(corpus, tmp_path: Path) -> Explorer:
    return explore(corpus, key=KEY, sessions_dir=tmp_path)


def _shown(app: Explorer) -> dict:
    """What the app sends: the statuses and the in-window count in its summary."""
    return {
        "status": app.transcript.status,
        "in_window": int(app.summary.value.split("sk-in-window'>")[1].split("<")[0]),
    }


def _expected(session: sessionkit.Session, **options) -> dict:
    states = message_states(session, **options)
    return {
        "status": states.frame["status"].astype(str).tolist(),
        "in_window": states.messages_kept,
    }


def test_initial_view(app: Explorer, corpus) -> None:
    session = corpus[KEY]
    assert app.session is session
    assert app.picker.value == KEY
    assert app.turn.max == app.turn.value == session.n_user_turns
    assert app.settings() == HistorySettings()
    assert _shown(app) == _expected(session)
    assert app.transcript.rows == transcript_rows(session, app.states.frame["tokens"].tolist())
    assert bytes(app.timeline.value).startswith(b"\x89PNG")
    assert app.transcript.focus == app.states.summary()["window"][0]


def test_controls_update_every_view(app: Explorer, corpus) -> None:
    session = corpus[KEY]
    picture = app.timeline.value
    app.max_tokens.value = 3000
    kept = windows(session, max_tokens=3000, include_timestamps=True, at="end")
    assert _shown(app)["in_window"] == kept["messages_kept"].iloc[0]
    assert app.timeline.value != picture
    app.max_messages.value = 30
    app.turn.value = 40
    app.include_timestamps.value = False
    app.extend_to_user.value = True
    app.file_cap.value = 50
    settings = app.settings()
    assert settings == HistorySettings(
        max_messages=30, max_tokens=3000, include_timestamps=False, extend_to_user=True, file_cap=50
    )
    assert _shown(app) == _expected(session, turn=40, settings=settings)
    assert app.transcript.focus == app.states.summary()["window"][0]
    assert "at turn 40" in app.summary.value


def test_picking_and_searching_sessions(app: Explorer, corpus) -> None:
    app.max_tokens.value = 2000
    app.picker.value = "telegram:12345"
    session = corpus["telegram:12345"]
    assert app.session is session
    assert app.turn.value == session.n_user_turns
    assert len(app.transcript.rows) == len(session.messages)
    assert _shown(app) == _expected(session, max_tokens=2000)
    app.search.value = "TELEGRAM 777"
    assert [key for _, key in app.picker.options] == ["telegram:777"]
    assert app.session is session, "filtering keeps the session shown"
    assert app.picker.value is None
    app.picker.value = "telegram:777"
    assert app.session is corpus["telegram:777"]
    app.search.value = "lisbon"
    assert [key for _, key in app.picker.options] == [KEY]
    assert "My Lisbon trip" in app.picker.options[0][0]
    assert app.session is corpus["telegram:777"]
    app.search.value = ""
    assert app.picker.value == "telegram:777" and len(app.picker.options) == len(corpus)


def test_fork_with_an_edit(app: Explorer, corpus, tmp_path: Path) -> None:
    session = corpus[KEY]
    users = [i for i, m in enumerate(session.messages) if m.get("role") == "user"]
    app.transcript.selected = 5
    assert app.fork_text.value == session.messages[users[5]]["content"]
    assert app.fork_target.value == f"{KEY}:fork-5"
    assert app.fork_dir.value == str(tmp_path)
    app.fork_text.value = "Edited question"
    app.fork_target.value = "webui:edited"
    app.fork_button.click()
    assert "Wrote" in app.fork_result.value and "sk-ok" in app.fork_result.value
    lines = session_path("webui:edited", tmp_path).read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert records[1:-1] == session.messages[: users[5]]
    assert records[-1]["content"] == "Edited question"

    app.fork_button.click()
    assert "sk-error" in app.fork_result.value and "already exists" in app.fork_result.value
    app.fork_overwrite.value = True
    app.fork_button.click()
    assert "sk-ok" in app.fork_result.value


def test_fork_without_an_edit_is_nanobots_fork(app: Explorer, corpus, tmp_path: Path) -> None:
    session = corpus[KEY]
    app.transcript.selected = 2
    app.fork_button.click()
    fork = sessionkit.load(session_path(f"{KEY}:fork-2", tmp_path))[f"{KEY}:fork-2"]
    expected = sessionkit.fork(session, "x:y", 2)
    assert fork.messages == expected.messages
    assert "no edit" in app.fork_result.value


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("fork_dir", "  ", "Choose the sessions folder"),
        ("fork_target", "", "UnsafeKeyError"),
        ("fork_target", "..", "UnsafeKeyError"),
    ],
)
def test_fork_errors_are_shown(app: Explorer, field: str, value: str, message: str) -> None:
    app.transcript.selected = 1
    getattr(app, field).value = value
    app.fork_button.click()
    assert "sk-error" in app.fork_result.value and message in app.fork_result.value


def test_fork_needs_a_selected_message(app: Explorer) -> None:
    app.fork_button.click()
    assert "Click a user message" in app.fork_result.value


def test_switching_session_clears_the_fork_panel(app: Explorer) -> None:
    app.transcript.selected = 3
    app.picker.value = "cli:direct"
    assert app.transcript.selected == -1
    assert (app.fork_text.value, app.fork_target.value, app.fork_result.value) == ("", "", "")


def test_explore_one_session(corpus) -> None:
    app = explore(corpus["telegram:42"], max_messages=50)
    assert [key for _, key in app.picker.options] == ["telegram:42"]
    assert _shown(app) == _expected(corpus["telegram:42"], max_messages=50)
    assert app.turn.max == 0
    assert app.fork_dir.value == str(SCRATCH_FORK_DIR)


def test_forks_default_to_the_sessions_own_folder(tmp_path: Path) -> None:
    source = sessionkit.corpus.default_data_dir() / "sessions" / "telegram_42.jsonl"
    (tmp_path / "sessions").mkdir()
    copy = tmp_path / "sessions" / source.name
    copy.write_bytes(source.read_bytes())
    app = explore(sessionkit.load(tmp_path))
    assert app.fork_dir.value == str(copy.parent)


def test_initial_settings_value_and_overrides(corpus, tmp_path: Path) -> None:
    chosen = HistorySettings(max_tokens=3000, include_timestamps=False, last_consolidated="none")
    app = explore(corpus, key=KEY, sessions_dir=tmp_path, settings=chosen, max_messages=60)
    assert (app.max_messages.value, app.max_tokens.value) == (60, 3000)
    assert not app.include_timestamps.value
    assert app.settings() == HistorySettings(
        max_messages=60, max_tokens=3000, include_timestamps=False, last_consolidated="none"
    )
    assert _shown(app) == _expected(corpus[KEY], settings=app.settings())
    assert "consolidated" not in app.transcript.status
