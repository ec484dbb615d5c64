"""Entries' hidden column, user turns and uncountable-message problems equal the per-message
rules (``is_hidden_history``, each release's ``is_user_turn``, ``uncountable_reason``), though
build_entries asks them only of the messages that may answer differently from a plain one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from sessionkit.nanobot.history import is_hidden_history
from sessionkit.nanobot.policies import POLICIES
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.uncountable import uncountable_reason
from sessionkit.store.frames import build_entries

DEEP = orjson.loads(b"[" * 1020 + b"]" * 1020)

MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "plain"},
    {"role": "user", "content": "h", "_hidden_history": True},
    {"role": "user", "content": "h", "_hidden_history": {"from": 3}},
    {"role": "user", "content": "h", "_hidden_history": 1},
    {"role": "user", "content": "h", "_hidden_history": None},
    {"role": "user", "content": "a", "_automation_turn": True},
    {"role": "user", "content": "a", "_automation_turn": "yes"},
    {"role": "user", "content": "c", "_cron_turn": True},
    {"role": "user", "content": "c", "_cron_turn": {"job": 1}},
    {"role": "user", "content": "c", "_cron_turn": False},
    {"role": "assistant", "content": "x", "_hidden_history": True},
    {"role": ["user"], "content": "odd role"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": DEEP}]},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "2", "function": {}}]},
    {"role": "user", "content": [{"type": "text", "text": 5}]},
    {"role": "assistant", "content": DEEP},
    {"role": "user", "content": 7},
]


def _sessions() -> list[Session]:
    halves = (MESSAGES[:9], MESSAGES[9:])
    return [
        Session(key=f"cli:{n}", messages=list(part), path=Path(f"/s/cli_{n}.jsonl"))
        for n, part in enumerate(halves)
    ]


def test_hidden_turns_and_uncountable_problems_follow_the_per_message_rules() -> None:
    sessions = _sessions()
    entries = build_entries(sessions, tokens=None)
    for session, entry in zip(sessions, entries, strict=True):
        hidden = entry.table.column("hidden").to_pylist()
        assert hidden == [is_hidden_history(m) for m in session.messages]
        assert entry.meta["turns"] == {
            name: sum(map(policy.is_user_turn, session.messages))
            for name, policy in POLICIES.items()
        }
        reasons = [uncountable_reason(m) for m in session.messages]
        assert [p[1] for p in entry.meta["problems"]] == [r for r in reasons if r]
    assert [e.table.column("hidden").to_pylist() for e in entries] == [
        [False, True, True, False, False, True, False, True, False],
        [False, True, False, False, False, False, False, False],
    ]
    assert [e.meta["turns"] for e in entries] == [
        {"nanobot-0.2": 9, "nanobot-0.3.0": 9, "nanobot-0.3.5": 5},
        {"nanobot-0.2": 3, "nanobot-0.3.0": 3, "nanobot-0.3.5": 3},
    ]
    assert [
        [(p[0], p[1].split(" raises ")[1][:14]) for p in e.meta["problems"]] for e in entries
    ] == [
        [],
        [(None, "RecursionError"), (None, "TypeError (seq"), (None, "RecursionError")],
    ]
