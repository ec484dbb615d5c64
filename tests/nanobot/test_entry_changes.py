"""Which messages a release's rewrite may change: every other message's entry holds its own
role, content and replayed fields, under each release and entry setting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import message_lists

from sessionkit.nanobot.entry_changes import EntryFacts
from sessionkit.nanobot.history import REPLAY_FIELDS, RUNTIME_CONTEXT_KEY
from sessionkit.nanobot.policies import POLICIES
from sessionkit.nanobot.policy_030 import Policy030
from sessionkit.nanobot.settings import HistorySettings

SETTINGS = [
    HistorySettings(include_timestamps=True),
    HistorySettings(include_timestamps=False),
    HistorySettings(include_runtime_context=False),
]


@st.composite
def marked_lists(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Stored messages, some carrying a runtime context marker (with a suffix their text may
    end with)."""
    messages = draw(message_lists())
    for message in messages:
        if draw(st.integers(0, 3)) == 0:
            suffix = draw(st.sampled_from(["ctx", "", "hello"]))
            message[RUNTIME_CONTEXT_KEY] = draw(
                st.sampled_from([{"version": 1, "suffix": suffix}, {"version": 2}, None, True])
            )
            if draw(st.booleans()) and isinstance(message.get("content"), str):
                message["content"] += "\n\n" + suffix
    return messages


def holds_its_own(entry: dict[str, Any] | None, message: dict[str, Any]) -> bool:
    """Whether a release's entry holds the message's own role, content and replayed fields."""
    return (
        entry is not None
        and set(entry) <= {"role", "content", *REPLAY_FIELDS}
        and entry["role"] == message["role"]
        and entry["content"] == message["content"]
        and all(entry.get(key) == message.get(key) for key in REPLAY_FIELDS)
        and all((key in entry) == (key in message) for key in REPLAY_FIELDS)
    )


@settings(max_examples=150)
@given(marked_lists())
def test_every_message_left_out_holds_its_own_fields_in_its_entry(
    messages: list[dict[str, Any]],
) -> None:
    facts = EntryFacts(messages, [m.get("role") for m in messages])
    for release in POLICIES.values():
        for setting in SETTINGS:
            changed = release.changed_entries(facts, setting)
            assert changed is not None
            rewrite = release.entry_function(setting)
            for i in set(range(len(messages))) - changed:
                assert holds_its_own(rewrite(messages[i]), messages[i]), (release.name, setting)


def test_the_changes_each_release_names() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "q", "timestamp": "2026-01-01T10:00:00"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "r"},
        {"role": "assistant", "content": "[Message Time: 2026-01-01]\nb"},
        {"role": "user", "content": "/new", "_command": True},
        {"role": "assistant", "content": ""},
        {"content": "no role"},
        {"role": "user", "content": "see", "media": ["/a.png"]},
        {"role": "user", "content": "x", "mcp_presets": [{"name": "git"}]},
        {"role": "assistant", "content": "ok", RUNTIME_CONTEXT_KEY: {"version": 1}},
    ]
    facts = EntryFacts(messages, [m.get("role") for m in messages])
    found = {
        (release.name, n): sorted(release.changed_entries(facts, SETTINGS[n]) or [])
        for release in POLICIES.values()
        for n in (0, 2)
    }
    assert found == {
        ("nanobot-0.2", 0): [0, 3, 4, 5, 6, 7, 8],
        ("nanobot-0.2", 2): [0, 3, 4, 5, 6, 7, 8],
        ("nanobot-0.3.0", 0): [3, 4, 5, 6, 7],
        ("nanobot-0.3.0", 2): [3, 4, 5, 6, 7, 9],
        ("nanobot-0.3.5", 0): [3, 4, 5, 6, 7],
        ("nanobot-0.3.5", 2): [3, 4, 5, 6, 7, 9],
    }


@dataclass(frozen=True, repr=False)
class _Shouting(Policy030):
    """A release whose own rewrite changes every entry."""

    name: str = "shouting"

    def replay_entry(
        self, message: dict[str, Any], *, include_runtime_context: bool = True
    ) -> dict[str, Any] | None:
        entry = super().replay_entry(message, include_runtime_context=include_runtime_context)
        return None if entry is None else {**entry, "content": str(entry["content"]).upper()}


def test_a_release_with_a_rewrite_of_its_own_names_no_message_left_alone() -> None:
    facts = EntryFacts([{"role": "tool", "content": "r"}], ["tool"])
    assert Policy030().changed_entries(facts, SETTINGS[0]) == set()
    assert _Shouting().changed_entries(facts, SETTINGS[0]) is None
