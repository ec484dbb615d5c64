"""The explorer without a browser: controls set in Python, what it would send checked."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import stat
from pathlib import Path

import pytest

import sessionkit
from sessionkit.nanobot.naming import session_path
from sessionkit.nanobot.settings import HistorySettings
from sessionkit.schema import STATUSES, contrast_ratio
from sessionkit.simulate.states import message_states
from sessionkit.simulate.windowing import windows
from sessionkit.store.cachedir import default_cache_dir
from sessionkit.views import explorer
from sessionkit.views.explorer import OPTION_CHARS, SCRATCH_FORK_DIR, Explorer, explore
from sessionkit.views.transcript import transcript_rows

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
    assert app.settings() == sessionkit.get_policy("nanobot-0.2").defaults
    assert _shown(app) == _expected(session)
    assert app.transcript.rows == transcript_rows(session, app.states.frame["tokens"].tolist())
    assert bytes(app.timeline.value).startswith(b"\x89PNG")
    png_width = int.from_bytes(bytes(app.timeline.value)[16:20], "big")
    assert app.timeline.layout.max_width == f"{png_width}px", "never stretched past its pixels"
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
    assert settings == sessionkit.get_policy(session.policy).resolve(
        HistorySettings(
            max_messages=30,
            max_tokens=3000,
            include_timestamps=False,
            extend_to_user=True,
            file_cap=50,
        )
    )
    assert (settings.include_runtime_context, settings.last_consolidated) == (True, "recorded")
    assert _shown(app) == _expected(session, turn=40, settings=settings)
    assert app.transcript.focus == app.states.summary()["window"][0]
    assert "at turn 40" in app.summary.value


def test_in_a_kernel_code_changes_show_at_once_and_browser_changes_once(
    corpus, tmp_path: Path
) -> None:
    """In a running event loop (a kernel), a value set in code refreshes before the next line
    runs; values the browser sends refresh once, after the kernel has applied them all."""

    async def drive() -> list[int]:
        app = explore(corpus, key=KEY, sessions_dir=tmp_path)
        app.max_tokens.value = 3000
        seen = [app.states.settings.max_tokens]
        app.max_messages.set_state({"value": 30})
        app.max_tokens.set_state({"value": 0})
        seen.append(app.states.settings.max_tokens)
        await asyncio.sleep(0)
        return [*seen, app.states.settings.max_tokens, app.states.settings.max_messages]

    assert asyncio.run(drive()) == [3000, 3000, 0, 30]


def test_in_a_kernel_the_explorer_warms_up_after_it_shows(
    corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """explore() returns before the warm-up; on the idle ticks after it, the replays the
    first control moves reach and a drawing nobody sees, the explorer's views untouched;
    its layout, laid out once, stays for the next moves."""
    ran: list[str] = []
    steps = Explorer._warm_steps

    def recorded(self: Explorer):
        for step in steps(self):
            ran.append(step)
            yield step

    monkeypatch.setattr(Explorer, "_warm_steps", recorded)
    monkeypatch.setattr(Explorer, "WARM_DELAY", 0.0)

    async def drive() -> Explorer:
        app = explore(corpus, key=KEY, sessions_dir=tmp_path)
        assert ran == [], "explore() returns before the warm-up"
        shown = (app.summary.value, app.timeline.value, app.transcript.status)
        for _ in range(400):
            if "draw" in ran:
                break
            await asyncio.sleep(0.01)
        assert (app.summary.value, app.timeline.value, app.transcript.status) == shown
        for step in range(3):
            app.turn.value -= 1
            app.max_tokens.value = 3000 + 100 * step
        return app

    app = asyncio.run(drive())
    assert ran == ["replay", "replay", "replay", "replay", "plot", "draw"]
    assert _shown(app) == _expected(corpus[KEY], turn=corpus[KEY].n_user_turns - 3, max_tokens=3200)
    assert app._figure.get_layout_engine().layouts == 1


def test_the_transcript_follows_every_window_change(app: Explorer) -> None:
    """Moving any limit scrolls the transcript to the window's first message (issue 14, item 7)."""
    seen = []
    for control, value in [
        (app.max_messages, 30),
        (app.max_messages, 200),
        (app.max_tokens, 3000),
        (app.max_tokens, 0),
    ]:
        control.value = value
        first = app.states.summary()["window"][0]
        assert app.transcript.focus == first
        assert app.transcript.status[first] == "in_window"
        seen.append(first)
    assert all(a != b for a, b in itertools.pairwise(seen)), f"every step moves the window: {seen}"


def test_the_summary_labels_statuses_as_the_transcript_does(app: Explorer) -> None:
    app.max_messages.value = 30
    counts = app.states.summary()
    for status in STATUSES[1:]:
        chip = app.summary.value.split(f"data-status='{status.name}'")[1]
        label, count = chip.split("</span> ", 1)
        assert f"background:{status.color};" in label and label.endswith(f">{status.label}")
        assert count.startswith(f"{counts[status.name]:,}</span>")
    assert "trimmed by count" not in app.summary.value and "by tokens" not in app.summary.value


def test_every_status_chip_reads_at_wcag_aa(app: Explorer) -> None:
    """Each summary chip's label against its colour: a contrast ratio of at least 4.5:1."""
    for status in STATUSES[1:]:
        chip = app.summary.value.split(f"data-status='{status.name}'")[1].split(">", 2)[1]
        style = dict(part.split(":", 1) for part in chip.split("'")[1].split(";"))
        ratio = contrast_ratio(style["color"], style["background"])
        assert ratio >= 4.5, f"{status.name}: {style} has contrast {ratio:.2f}"
    assert [s.name for s in STATUSES if contrast_ratio(s.color, "#ffffff") < 4.5] != [], (
        "some status colour needs black text (else this test checks too little)"
    )


def test_the_summary_explains_a_recovered_user_turn(corpus, tmp_path: Path) -> None:
    """Over budget because nanobot recovered the latest user turn: said in plain words."""
    app = explore(corpus, key=KEY, sessions_dir=tmp_path, max_tokens=3000)
    assert "sk-over-budget" not in app.summary.value
    app.turn.value = 37
    assert app.states.recovered and app.states.tokens_kept > 3000
    assert f"{app.states.tokens_kept:,}</span> of 3,000 tokens" in app.summary.value
    assert "documented recovery of a user turn" in app.summary.value
    assert "recovered=True" in app.summary.value


def test_the_summary_explains_an_oversized_newest_message() -> None:
    session = sessionkit.Session(
        "t:big", [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "w " * 400}]
    )
    app = explore(session, max_tokens=100)
    assert not app.states.recovered and app.states.tokens_kept > 100
    assert "always keeps the newest message" in app.summary.value
    assert "documented recovery" not in app.summary.value


def test_picker_entries_are_short_enough_to_show_whole(corpus) -> None:
    """Long titles are clipped, a CJK character counting twice, so no entry is cut in the picker."""
    long = sessionkit.Session(
        "webui:long", [{"role": "user", "content": "hi"}], metadata={"title": "A very " * 20}
    )
    wide = sessionkit.Session(
        "feishu:wide", [{"role": "user", "content": "hi"}], metadata={"title": "东京天气" * 10}
    )
    app = explore(sessionkit.Corpus([*corpus, long, wide]))
    labels = [label for label, _ in app.picker.options]
    assert max(explorer._columns(label) for label in labels) <= OPTION_CHARS
    assert labels[-2].startswith("webui:long — A very") and labels[-2].endswith("… (1 msgs, 5 tok)")
    assert labels[-1].startswith("feishu:wide — 东京天气") and "…" in labels[-1]
    assert explorer._columns(labels[-1]) >= OPTION_CHARS - 1
    assert "webui:f00d42 — My Lisbon trip (294 msgs, 26,733 tok)" in labels


def test_repr_names_the_session_and_turn(app: Explorer) -> None:
    assert repr(app) == f"Explorer({KEY!r} at turn {app.turn.value}, 15 sessions)"


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
    assert "overwrite=True" not in app.fork_result.value, "a widget names its checkbox"
    assert "tick “overwrite an existing fork”" in app.fork_result.value
    assert app.fork_overwrite.description == "overwrite an existing fork"
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
        ("fork_target", "", "Refused target key"),
        ("fork_target", "..", "Refused target key"),
    ],
)
def test_fork_errors_are_shown(app: Explorer, field: str, value: str, message: str) -> None:
    app.transcript.selected = 1
    getattr(app, field).value = value
    app.fork_button.click()
    assert "sk-error" in app.fork_result.value and message in app.fork_result.value


def test_a_path_like_fork_key_is_refused_and_writes_nothing(app: Explorer, tmp_path: Path) -> None:
    app.transcript.selected = 1
    app.fork_target.value = "../../etc/evil"
    app.fork_button.click()
    assert "sk-error" in app.fork_result.value
    assert "Refused target key" in app.fork_result.value and "path-like" in app.fork_result.value
    assert list(tmp_path.rglob("*")) == []
    assert not (tmp_path.parent.parent / "etc").exists()


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


def test_forks_default_to_a_scratch_folder_not_the_live_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without sessions_dir, a fork never lands in the session's own (live) sessions folder."""
    source = sessionkit.store.sources.default_data_dir() / "sessions" / "webui_f00d42.jsonl"
    live = tmp_path / "workspace" / "sessions"
    live.mkdir(parents=True)
    (live / source.name).write_bytes(source.read_bytes())
    scratch = tmp_path / "scratch"
    monkeypatch.setattr(explorer, "SCRATCH_FORK_DIR", scratch)
    app = explore(sessionkit.load(live))
    assert app.fork_dir.value == str(scratch)
    assert "scratch folder" in app.fork_info.value
    app.transcript.selected = 1
    app.fork_button.click()
    assert "sk-ok" in app.fork_result.value
    assert [p.name for p in live.iterdir()] == [source.name]
    assert session_path(f"{KEY}:fork-1", scratch).is_file()


def test_the_scratch_folder_is_private_to_the_user(
    corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default fork folder is in the user's cache folder, never a fixed shared path: it
    is created 0700 whatever the umask, and one others own or may write to is refused."""
    assert default_cache_dir() / "forks" == SCRATCH_FORK_DIR  # conftest's folder
    scratch = tmp_path / "cache" / "forks"
    monkeypatch.setattr(explorer, "SCRATCH_FORK_DIR", scratch)
    small = min((s for s in corpus if s.n_user_turns >= 2), key=len)
    app = explore(small)
    app.transcript.selected = 1
    old = os.umask(0)
    try:
        app.fork_button.click()
    finally:
        os.umask(old)
    assert "sk-ok" in app.fork_result.value
    assert [stat.S_IMODE(p.stat().st_mode) for p in (scratch.parent, scratch)] == [0o700] * 2
    scratch.chmod(0o1777)
    app.fork_overwrite.value = True
    app.fork_button.click()
    assert "Refused scratch folder" in app.fork_result.value
    assert "writable by other users" in app.fork_result.value
    scratch.chmod(0o700)
    owner = scratch.stat().st_uid
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)
    app.fork_button.click()
    assert "owned by another user" in app.fork_result.value


def test_a_named_folder_is_used(corpus, tmp_path: Path) -> None:
    app = explore(corpus, sessions_dir=tmp_path)
    assert app.fork_dir.value == str(tmp_path)
    assert "scratch" not in app.fork_info.value


def test_initial_settings_value_and_overrides(corpus, tmp_path: Path) -> None:
    chosen = HistorySettings(max_tokens=3000, include_timestamps=False, last_consolidated="none")
    app = explore(corpus, key=KEY, sessions_dir=tmp_path, settings=chosen, max_messages=60)
    assert (app.max_messages.value, app.max_tokens.value) == (60, 3000)
    assert not app.include_timestamps.value
    assert app.settings() == sessionkit.get_policy(corpus[KEY].policy).resolve(
        HistorySettings(
            max_messages=60, max_tokens=3000, include_timestamps=False, last_consolidated="none"
        )
    )
    assert _shown(app) == _expected(corpus[KEY], settings=app.settings())
    assert "consolidated" not in app.transcript.status


def test_the_release_selector_replays_the_session_under_that_release(app: Explorer, corpus) -> None:
    """The selector starts on the session's own release; each release shows what
    ``message_states`` computes for the session under it (issue 11, item 5)."""
    session = corpus[KEY]
    assert app.policy.value == session.policy == "nanobot-0.2"
    assert [value for _, value in app.policy.options] == list(sessionkit.POLICIES)
    app.max_tokens.value = 3000
    app.turn.value = 30
    seen = {}
    for name in ["nanobot-0.3.0", "nanobot-0.3.5", "nanobot-0.2"]:
        app.policy.value = name
        under = sessionkit.Session(
            session.key, session.messages, last_consolidated=session.last_consolidated, policy=name
        )
        expected = message_states(under, turn=30, settings=app.settings())
        assert app.subject().policy == name and app.subject().messages is session.messages
        assert app.states.frame.equals(expected.frame)
        assert (app.states.messages_kept, app.states.tokens_kept, app.states.cut) == (
            expected.messages_kept,
            expected.tokens_kept,
            expected.cut,
        )
        assert _shown(app) == _expected(under, turn=30, settings=app.settings())
        seen[name] = (app.max_messages.value, app.states.tokens_kept)
    # The count slider follows each release's default; the windows differ between releases.
    assert {name: count for name, (count, _) in seen.items()} == {
        "nanobot-0.3.0": 2000,
        "nanobot-0.3.5": 0,
        "nanobot-0.2": 120,
    }
    assert seen["nanobot-0.2"][1] != seen["nanobot-0.3.0"][1]
    assert app.turn.value == 30


def test_a_chosen_count_survives_a_release_change_and_a_session_resets_it(
    app: Explorer, corpus
) -> None:
    app.max_messages.value = 30
    app.policy.value = "nanobot-0.3.0"
    assert app.max_messages.value == 30
    assert app.states.settings.max_messages == 30
    app.picker.value = "cli:direct"
    assert app.policy.value == corpus["cli:direct"].policy
    assert app.subject() is corpus["cli:direct"]
    assert app.turn.value == app.turn.max == corpus["cli:direct"].n_user_turns


def test_a_session_of_another_release_opens_under_its_own(corpus, tmp_path: Path) -> None:
    """Picking a session written by another release selects that release, and a count slider
    at the old release's default moves to the new one's (0.3.5: no count window)."""
    source = corpus[KEY]
    newer = sessionkit.Session("cli:newer", source.messages, policy="nanobot-0.3.5")
    app = explore(sessionkit.Corpus([source, newer]), key=KEY, sessions_dir=tmp_path)
    assert (app.policy.value, app.max_messages.value) == ("nanobot-0.2", 120)
    app.picker.value = "cli:newer"
    assert (app.policy.value, app.max_messages.value) == ("nanobot-0.3.5", 0)
    assert app.subject() is newer
    expected = message_states(newer, settings=app.settings())
    assert app.states.frame.equals(expected.frame)
    assert app.states.tokens_kept == expected.tokens_kept
