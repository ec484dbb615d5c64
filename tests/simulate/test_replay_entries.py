"""Replayed entries where only the messages a release changes are rewritten: each is the
rewrite's entry or, where the release names it unchanged, the message itself."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from support.strategies import message_lists

from sessionkit.nanobot.entry_changes import EntryFacts
from sessionkit.nanobot.policies import POLICIES, get_policy
from sessionkit.nanobot.settings import HistorySettings
from sessionkit.simulate.replay_entries import replayed_entries, rewritten

SETTINGS = [
    HistorySettings(include_timestamps=True),
    HistorySettings(include_runtime_context=False),
]


@settings(max_examples=60)
@given(message_lists())
def test_each_entry_is_the_rewrites_or_its_message(messages: list[dict[str, Any]]) -> None:
    roles = [m.get("role") for m in messages]
    targets = [(release, s) for release in POLICIES.values() for s in SETTINGS]
    found = replayed_entries(messages, roles, targets)
    facts = EntryFacts(messages, roles)
    for (release, setting), (entries, raised) in zip(targets, found, strict=True):
        expected, expected_raised = rewritten(messages, release.entry_function(setting))
        assert raised == expected_raised
        changed = release.changed_entries(facts, setting)
        assert changed is not None
        for i, (entry, message, real) in enumerate(zip(entries, messages, expected, strict=True)):
            assert entry is message if i not in changed else entry == real


def test_a_release_naming_no_changes_rewrites_every_message() -> None:
    messages = [{"role": "tool", "tool_call_id": "c1", "content": "r"}, {"content": "no role"}]
    older = get_policy("nanobot-0.2.1")
    ((own, _), (all_rewritten, raised)) = replayed_entries(
        messages, ["tool", None], [(get_policy("nanobot-0.3.0"), SETTINGS[0]), (older, SETTINGS[0])]
    )
    assert own[0] is messages[0]
    assert all_rewritten == [{"role": "tool", "content": "r", "tool_call_id": "c1"}, None]
    assert all_rewritten[0] is not messages[0]
    assert raised == [1]
