"""nanobot-ai 0.2.2's own SessionManager driving sessionkit's Session in place of its own.

With ``nanobot.session.manager.Session`` swapped for sessionkit's, nanobot's code creates,
``add_message``s, saves, loads, ``get_history``s, trims, ``clear``s and forks sessions
through sessionkit's class; every file it writes and every value it returns must equal a run
of the same steps with nanobot's own Session, on one fixed clock.
"""

from __future__ import annotations

import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.reference import require
from support.strategies import message_lists

from sessionkit.nanobot import session as session_module
from sessionkit.nanobot.session import Session

nb = require()

pytestmark = pytest.mark.conformance

START = datetime(2026, 3, 1, 9, 0, 0, 250000)
KEY = "telegram:42"
FORK_KEY = "webui:fork"
SCRIPT = [
    ("user", "Plan a trip <think>x</think>", {"media": ["/tmp/a.png"]}),
    ("assistant", "", {"tool_calls": [{"id": "c1", "type": "function"}]}),
    ("tool", "result é", {"tool_call_id": "c1", "name": "exec"}),
    ("assistant", "[Message Time: 2026-01-01T00:00:00]\nDone", {"reasoning_content": "why"}),
    ("user", "again", {"_command": True}),
    ("assistant", "ok", {"_channel_delivery": True}),
    ("user", "and then?", {"timestamp": "kept"}),
    ("assistant", "fine", {}),
]


class Clock(datetime):
    """``datetime`` whose ``now()`` ticks one second from START per call, shared by all users."""

    calls = 0

    @classmethod
    def now(cls, tz: Any = None) -> datetime:
        Clock.calls += 1
        return START + timedelta(seconds=Clock.calls)


def manager(workspace: Path) -> Any:
    """nanobot's SessionManager on ``workspace``; its legacy folder is kept inside it."""
    sessions = nb.SessionManager(workspace)
    sessions.legacy_sessions_dir = workspace / "no-legacy"
    return sessions


def fields(session: Any) -> dict[str, Any]:
    return {
        "key": session.key,
        "messages": session.messages,
        "metadata": session.metadata,
        "last_consolidated": session.last_consolidated,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
    }


def files(workspace: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((workspace / "sessions").iterdir())}


def story(
    workspace: Path,
    script: list[tuple[str, Any, dict[str, Any]]],
    offset: int,
    fork_at: int,
    keep: int,
) -> dict[str, Any]:
    """Every step nanobot's manager and agent take on a session; what each returns or writes."""
    Clock.calls = 0
    out: dict[str, Any] = {}
    sessions = manager(workspace)
    session = sessions.get_or_create(KEY)
    session.created_at = session.updated_at = START
    for role, content, extra in script:
        session.add_message(role, content, **extra)
    session.metadata.update({"title": "Trip", "_last_summary": {"text": "s"}, "goal_state": 1})
    session.last_consolidated = min(offset, len(session.messages))
    out["created"] = fields(session)
    sessions.save(session)
    out["saved"] = files(workspace)
    out["history"] = session.get_history(3, include_timestamps=True)

    sessions.invalidate(KEY)
    loaded = sessions.get_or_create(KEY)
    out["loaded"] = fields(loaded)
    for count, budget, stamps, extend in [(120, 0, True, False), (2, 40, False, True)]:
        out[f"history {count} {budget}"] = loaded.get_history(
            count, max_tokens=budget, include_timestamps=stamps, extend_to_user=extend
        )

    fork = sessions.fork_session_before_user_index(KEY, FORK_KEY, fork_at)
    out["fork"] = None if fork is None else fields(fork)
    out["forked"] = files(workspace)

    out["retained"] = loaded.retain_recent_legal_suffix(keep, extend_to_user=keep % 2 == 1)
    archived: list[list[dict[str, Any]]] = []
    loaded.enforce_file_cap(archived.append, limit=2)
    out["capped"] = (fields(loaded), archived)
    loaded.add_message("user", "after the cap")
    sessions.save(loaded)
    out["capped file"] = files(workspace)

    loaded.clear()
    out["cleared"] = fields(loaded)
    sessions.save(loaded)
    sessions.invalidate(KEY)
    out["reloaded"] = fields(sessions.get_or_create(KEY))
    out["files"] = files(workspace)
    out["clock"] = Clock.calls
    return out


def both(
    script: list[tuple[str, Any, dict[str, Any]]], offset: int, fork_at: int, keep: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The story with nanobot's Session, then with sessionkit's swapped into nanobot's module.

    Both run on :class:`Clock`, patched into nanobot's module and sessionkit's Session module.
    """
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as tmp:
        patch.setattr(nb, "datetime", Clock)
        patch.setattr(session_module, "datetime", Clock)
        theirs = story(Path(tmp, "nanobot"), script, offset, fork_at, keep)
        patch.setattr(nb, "Session", Session)
        ours = story(Path(tmp, "sessionkit"), script, offset, fork_at, keep)
    return theirs, ours


@pytest.mark.parametrize(
    ("offset", "fork_at", "keep"),
    [(0, 0, 3), (2, 1, 0), (5, 2, 4), (8, 3, 5), (4, 4, 1), (3, -1, 120)],
)
def test_nanobots_manager_gets_the_same_from_sessionkits_session(
    offset: int, fork_at: int, keep: int
) -> None:
    theirs, ours = both(SCRIPT, offset, fork_at, keep)
    assert ours["created"]["messages"][0]["timestamp"] == "2026-03-01T09:00:01.250000"
    assert (ours["fork"] is None) == (fork_at not in range(4))
    assert ours == theirs


def test_the_swap_really_runs_sessionkits_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nb, "Session", Session)
    sessions = manager(tmp_path)
    created = sessions.get_or_create(KEY)
    created.add_message("user", "hi")
    sessions.save(created)
    sessions.invalidate(KEY)
    assert type(sessions.get_or_create(KEY)) is Session
    assert type(sessions.fork_session_before_user_index(KEY, FORK_KEY, 1)) is Session


@settings(max_examples=40)  # each example writes, fsyncs and reloads a dozen files
@given(
    messages=message_lists(max_blocks=6),
    offset=st.integers(0, 30),
    fork_at=st.integers(-1, 8),
    keep=st.integers(-1, 12),
)
def test_generated_stories_are_the_same(
    messages: list[dict[str, Any]],
    offset: int,
    fork_at: int,
    keep: int,
) -> None:
    script = [
        (
            m["role"],
            m.get("content", ""),
            {k: v for k, v in m.items() if k not in ("role", "content")},
        )
        for m in messages
    ]
    theirs, ours = both(script, offset, fork_at, keep)
    assert ours == theirs
