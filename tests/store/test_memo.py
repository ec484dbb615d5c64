"""Nothing derived is handed out again after an edit: every entry point, asked again about an
edited session, answers as it does for a fresh load edited the same way."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import sessionkit as sk
from sessionkit.nanobot.session import Session
from sessionkit.store import memo
from sessionkit.store.versions import content_digest, pinned

DATA = Path(__file__).resolve().parents[2] / "data" / "sessions"
KEY = "webui:f00d42"


def _last_plain_user(session: Session) -> int:
    return max(
        i
        for i, m in enumerate(session.messages[:-5])
        if m.get("role") == "user" and isinstance(m.get("content"), str)
    )


def _grow_text(session: Session) -> None:
    """The issue's edit: text appended in place to a stored message dict."""
    session.messages[_last_plain_user(session)]["content"] += " more text" * 400


def _append(session: Session) -> None:
    session.add_message("user", "one more question, " * 50)
    session.messages.append({"role": "assistant", "content": "an answer " * 80})


def _delete(session: Session) -> None:
    del session.messages[_last_plain_user(session)]


def _replace(session: Session) -> None:
    at = _last_plain_user(session)
    session.messages[at] = {**session.messages[at], "content": "short"}


def _nested(session: Session) -> None:
    """An edit deep inside a message: a tool call's arguments."""
    for message in session.messages:
        for call in message.get("tool_calls") or ():
            call["function"]["arguments"] = '{"path": "' + "x" * 3000 + '"}'
            return
    raise AssertionError("no tool call to edit")


EDITS = [_grow_text, _append, _delete, _replace, _nested]


def _answers(session: Session) -> dict[str, Any]:
    """What each entry point says of ``session``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # requests without an installed release warn
        calls = sk.requests(session, max_messages=40)
        explorer = sk.explore(session)
    explorer.max_tokens.value = 3000
    return {
        "windows": sk.windows(session, grid={"max_tokens": [0, 4000]}),
        "requests": calls,
        "states": sk.message_states(session, turn=session.n_user_turns).frame,
        "file_cap": sk.file_cap(session, grid={"file_cap": [10, 50]}),
        "cost": sk.cost(calls, model="gpt-4o", provider="openai"),
        "explorer": explorer.states.frame,
        "history": pd.DataFrame({"n": [len(session.history())]}),
    }


def _loaded(cache: bool | Path) -> Session:
    return sk.load(DATA, cache=cache)[KEY]


@pytest.mark.parametrize("edit", EDITS, ids=lambda e: e.__name__.strip("_"))
@pytest.mark.parametrize("indexed", [False, True], ids=["cache-off", "indexed"])
def test_every_entry_point_follows_an_edit(
    edit: Callable[[Session], None], indexed: bool, tmp_path: Path
) -> None:
    cache: bool | Path = tmp_path / "cache" if indexed else False
    if indexed:
        cache.mkdir(mode=0o700)  # type: ignore[union-attr]
        sk.load(DATA, cache=cache)  # the next loads read the index, replays persisted
        _answers(_loaded(cache))
    session = _loaded(cache)
    before = _answers(session)
    edit(session)
    after = _answers(session)
    memo.clear()
    fresh = _loaded(False)
    edit(fresh)
    expected = _answers(fresh)
    changed = []
    for name, frame in expected.items():
        if name in ("requests", "cost"):  # the times of added messages are stamped now
            frame, got = (
                frame.drop(columns=["time"], errors="ignore"),
                after[name].drop(columns=["time"], errors="ignore"),
            )
        else:
            got = after[name]
        pd.testing.assert_frame_equal(got, frame, check_exact=True, obj=name)
        changed.append(not before[name].equals(after[name]))
    assert any(changed)  # the edits change what is sent


def test_the_issues_edit_changes_the_tokens_kept() -> None:
    """The figures of the foundations issue: 439,928 tokens kept, 441,528 after the edit."""
    session = _loaded(False)
    assert sk.windows(session, grid={"max_tokens": [0]})["tokens_kept"].sum() == 439_928
    _grow_text(session)
    assert sk.windows(session, grid={"max_tokens": [0]})["tokens_kept"].sum() == 441_528


def test_an_edit_in_place_unpins_an_indexed_session(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    sk.load(DATA, cache=cache)
    session = _loaded(cache)
    assert session.pristine
    session.messages[0]["content"] = "edited"
    assert not session.pristine
    assert memo.version(session)[0] == "content"  # type: ignore[index]


def test_digest_is_computed_once_inside_pinned() -> None:
    session = Session("k", [{"role": "user", "content": "a"}])
    with pinned():
        first = content_digest(session)
        session.messages[0]["content"] = "b"
        assert content_digest(session) == first  # taken not to change within one call
    assert content_digest(session) != first


def test_sessions_that_cannot_be_digested_are_never_memoised() -> None:
    session = Session("k", [{"role": "user", "content": "a", "odd": lambda: 0}])
    assert content_digest(session) is None and memo.version(session) is None
    memo.slot(session, "test")["x"] = 1
    assert memo.slot(session, "test") == {}


def test_odd_values_are_digested_by_pickle() -> None:
    """A lone surrogate or an int past 64 bits is no JSON orjson writes, yet still digested."""
    odd = Session("k", [{"role": "user", "content": "\ud800", "n": 2**70}])
    other = Session("k", [{"role": "user", "content": "\ud801", "n": 2**70}])
    assert content_digest(odd) is not None
    assert content_digest(odd) != content_digest(other)


def test_clear_forgets_every_space() -> None:
    memo.clear()
    session = Session("k", [{"role": "user", "content": "a"}])
    sk.windows(session)
    assert memo.size("replays") == 1
    memo.clear()
    assert memo.size("replays") == 0
