"""sessionkit.nanobot.session: nanobot's Session methods, the session before a user message."""

from __future__ import annotations

from datetime import datetime, timedelta
from operator import methodcaller
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sessionkit.nanobot import session as session_module
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import HistorySettings

START = datetime(2026, 1, 2, 3, 4, 5, 123456)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[datetime]:
    """Every ``datetime.now()`` the session module asks for advances one second from START."""
    seen: list[datetime] = []

    class Clock(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:
            seen.append(START + timedelta(seconds=len(seen)))
            return seen[-1]

    monkeypatch.setattr(session_module, "datetime", Clock)
    return seen


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assistant(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


def contents(messages: list[dict[str, Any]]) -> list[Any]:
    return [m["content"] for m in messages]


# --- add_message and clear -------------------------------------------------------------------


@pytest.mark.usefixtures("clock")
def test_add_message_appends_in_nanobots_key_order_and_stamps_now() -> None:
    session = Session("cli:x", created_at=START, updated_at=START, line_numbers=range(2, 2))
    session.add_message("user", "hi", media=["a.png"], _command=True)
    assert session.messages == [
        {
            "role": "user",
            "content": "hi",
            "timestamp": "2026-01-02T03:04:05.123456",
            "media": ["a.png"],
            "_command": True,
        }
    ]
    assert list(session.messages[0]) == ["role", "content", "timestamp", "media", "_command"]
    assert session.updated_at == datetime(2026, 1, 2, 3, 4, 6, 123456)
    assert session.created_at == START
    assert session.line_numbers is None


@pytest.mark.usefixtures("clock")
def test_add_message_timestamp_keyword_replaces_the_value_not_the_place() -> None:
    session = Session("cli:x")
    session.add_message("assistant", "ok", timestamp="then", tool_calls=[])
    assert list(session.messages[0].items()) == [
        ("role", "assistant"),
        ("content", "ok"),
        ("timestamp", "then"),
        ("tool_calls", []),
    ]


def test_add_message_keeps_offset_and_metadata() -> None:
    session = Session("cli:x", [user("a"), assistant("b")], metadata={"_last_summary": "s"})
    session.last_consolidated = 2
    session.add_message("user", "c")
    assert contents(session.messages) == ["a", "b", "c"]
    assert session.last_consolidated == 2
    assert session.metadata == {"_last_summary": "s"}


def test_clear_drops_messages_offset_and_summary(clock: list[datetime]) -> None:
    messages = [user("a"), assistant("b")]
    session = Session(
        "cli:x",
        messages,
        created_at=START,
        updated_at=START,
        metadata={"_last_summary": "s", "title": "T"},
        last_consolidated=2,
        line_numbers=[2, 3],
    )
    session.clear()
    assert session.messages == [] and session.messages is not messages
    assert messages == [user("a"), assistant("b")]
    assert session.last_consolidated == 0
    assert session.metadata == {"title": "T"}
    assert session.updated_at == START and clock == [START]
    assert session.created_at == START
    assert session.line_numbers is None


def test_clear_leaves_metadata_that_is_not_an_object() -> None:
    session = Session("cli:x", [user("a")], metadata=["kept"])  # type: ignore[arg-type]
    session.clear()
    assert session.metadata == ["kept"] and session.messages == []


def test_session_methods_mutate_as_nanobot_does() -> None:
    messages = [user("u0"), assistant("a0"), user("u1"), assistant("a1")]
    session = Session("k", messages=list(messages), last_consolidated=3)
    session.metadata["_last_summary"] = "s"
    new, dropped, already = session.with_history_trimmed(2)
    assert contents(new.messages) == ["u1", "a1"] and new.last_consolidated == 1
    assert (contents(dropped), already) == (["u0", "a0"], 2)
    assert session.messages == messages

    archived_once, archived = session.with_file_cap(limit=3)
    assert archived == [] and len(archived_once.messages) == 2

    chunks: list[list[dict[str, Any]]] = []
    session.last_consolidated = 0
    session.enforce_file_cap(chunks.append, limit=3)
    assert chunks == [messages[:2]] and len(session) == 2

    assert session.retain_recent_legal_suffix(0) == (messages[2:], 0)
    assert session.messages == [] and "_last_summary" not in session.metadata


# --- before_user ---------------------------------------------------------------------------

MESSAGES = [
    assistant("digest"),
    user("u0"),
    assistant("a0"),
    user("u1"),
    assistant("a1"),
    user("u2"),
    assistant("a2"),
]


def stored(last_consolidated: int = 3) -> Session:
    return Session(
        "telegram:1",
        [dict(m) for m in MESSAGES],
        created_at=START,
        updated_at=START + timedelta(hours=1),
        metadata={"title": "Trip", "_last_summary": {"text": "s"}},
        last_consolidated=last_consolidated,
        path=Path("/store/sessions/telegram_1.jsonl"),
        format="nanobot-0.2",
        records=[{"_type": "provider_state"}],
        line_numbers=range(2, 9),
    )


@pytest.mark.parametrize(
    ("index", "kept", "offset"),
    [
        (0, ["digest"], 0),
        (1, ["digest", "u0", "a0"], 3),
        (2, ["digest", "u0", "a0", "u1", "a1"], 3),
        (3, ["digest", "u0", "a0", "u1", "a1", "u2", "a2"], 3),
    ],
)
def test_before_user_keeps_the_messages_before_it_and_an_offset_within_them(
    index: int, kept: list[str], offset: int
) -> None:
    source = stored()
    before = source.before_user(index)
    assert contents(before.messages) == kept
    assert before.last_consolidated == offset
    assert before.line_numbers == range(2, 2 + len(kept))
    assert (before.key, before.created_at, before.updated_at) == (
        "telegram:1",
        START,
        START + timedelta(hours=1),
    )
    assert (before.path, before.format, before.policy) == (
        source.path,
        "nanobot-0.2",
        "nanobot-0.2",
    )
    assert before.metadata == {"title": "Trip", "_last_summary": {"text": "s"}}
    assert before.records == [{"_type": "provider_state"}]


def test_before_user_resets_an_offset_past_the_cut_and_keeps_one_at_its_end() -> None:
    assert stored(last_consolidated=4).before_user(1).last_consolidated == 0
    assert stored(last_consolidated=3).before_user(1).last_consolidated == 3
    assert stored(last_consolidated=7).before_user(3).last_consolidated == 7


def test_before_user_shares_message_dicts_but_not_containers() -> None:
    source = stored()
    before = source.before_user(2)
    assert all(a is b for a, b in zip(before.messages, source.messages, strict=False))
    assert before.messages is not source.messages
    before.messages.append(user("new"))
    before.metadata.pop("title")
    before.records.clear()
    assert len(source.messages) == 7
    assert source.metadata == {"title": "Trip", "_last_summary": {"text": "s"}}
    assert source.records == [{"_type": "provider_state"}]


def test_before_user_deep_copies_when_asked() -> None:
    source = stored()
    before = source.before_user(3, deep=True)
    assert before.messages == source.messages
    assert not any(a is b for a, b in zip(before.messages, source.messages, strict=True))
    before.metadata["_last_summary"]["text"] = "changed"
    before.records[0]["x"] = 1
    assert source.metadata["_last_summary"] == {"text": "s"}
    assert source.records == [{"_type": "provider_state"}]


def test_before_user_of_a_session_without_user_messages_or_line_numbers() -> None:
    session = Session("k", [assistant("a")], last_consolidated=1)
    before = session.before_user(0)
    assert contents(before.messages) == ["a"] and before.last_consolidated == 1
    assert before.line_numbers is None


def test_before_user_takes_numpy_integers() -> None:
    assert contents(stored().before_user(np.int64(1)).messages) == ["digest", "u0", "a0"]


@pytest.mark.parametrize("index", [-1, 4])
def test_before_user_out_of_range(index: int) -> None:
    with pytest.raises(IndexError) as info:
        stored().before_user(index)
    assert str(info.value) == (
        f"user message index {index} is out of range: session 'telegram:1' has 3 user "
        "messages, so it must be between 0 and 3"
    )


@pytest.mark.parametrize(
    ("index", "message"),
    [
        (True, "the user message index must be an integer, not a bool"),
        (1.0, "the user message index must be an integer, got float"),
        ("1", "the user message index must be an integer, got str"),
    ],
)
def test_before_user_rejects_non_integers(index: Any, message: str) -> None:
    with pytest.raises(TypeError) as info:
        stored().before_user(index)
    assert str(info.value) == message


# --- history -------------------------------------------------------------------------------

STAMPED = [
    user("u0", timestamp="2026-01-01T10:00:00"),
    assistant("a0"),
    user("u1", timestamp="2026-01-01T11:00:00"),
    assistant("a1"),
]


def test_held_lines_follow_appends_and_cuts_and_go_with_other_rewrites() -> None:
    held = ((1, "held a"), (3, "held b"))
    messages = [user("a"), assistant("b"), user("c"), assistant("d")]

    def make() -> Session:
        return Session("cli:x", messages=[dict(m) for m in messages], held_lines=held)

    assert [make().before_user(i).held_lines for i in (0, 1, 2)] == [(), ((1, "held a"),), held]
    session = make()
    session.add_message("user", "e")
    assert session.held_lines == held
    for rewrite in (
        methodcaller("clear"),
        methodcaller("enforce_file_cap", limit=2),
        methodcaller("retain_recent_legal_suffix", 2),
    ):
        session = make()
        rewrite(session)
        assert session.held_lines == ()
    session = make()
    session.policy = "nanobot-0.3.5"
    session.commit_summary_checkpoint("summary", insert_at=2)
    assert session.held_lines == ()


def test_history_defaults_are_the_agent_loops() -> None:
    session = Session("k", [dict(m) for m in STAMPED], last_consolidated=2)
    assert session.history() == [
        {"role": "user", "content": "[Message Time: 2026-01-01T11:00:00]\nu1"},
        {"role": "assistant", "content": "a1"},
    ]
    assert session.history() == session.get_history(include_timestamps=True)


def test_history_takes_every_setting() -> None:
    session = Session("k", [dict(m) for m in STAMPED], last_consolidated=2)
    settings = HistorySettings(max_messages=3, include_timestamps=False, last_consolidated="none")
    assert session.history(settings) == [
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
    ]
    assert contents(session.history(settings.replace(max_messages=4))) == ["u0", "a0", "u1", "a1"]
    assert contents(session.history(settings.replace(max_tokens=5))) == ["u1", "a1"]


@pytest.mark.parametrize(("offset", "expected"), [(0, 4), (1, 2), (2, 2), (4, 0), (5, 4), (-1, 4)])
def test_history_with_a_given_offset_uses_it_like_a_recorded_one(
    offset: int, expected: int
) -> None:
    session = Session("k", [dict(m) for m in STAMPED], last_consolidated=2)
    assert len(session.history(HistorySettings(last_consolidated=offset))) == expected


def test_history_rejects_an_unknown_offset() -> None:
    session = Session("k", [dict(m) for m in STAMPED])
    with pytest.raises(ValueError, match="last_consolidated must be 'recorded', 'none' or an int"):
        session.history(HistorySettings(last_consolidated="latest"))  # type: ignore[arg-type]
