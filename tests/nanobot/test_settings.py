"""sessionkit.nanobot.settings: one settings value, each None resolved by the release in force."""

from __future__ import annotations

import dataclasses

import pytest

from sessionkit.nanobot.policies import POLICIES, get_policy
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings


def test_every_setting_defaults_to_the_release_in_force() -> None:
    assert set(dataclasses.asdict(DEFAULT_SETTINGS).values()) == {None}
    assert HistorySettings() == DEFAULT_SETTINGS


@pytest.mark.parametrize(
    ("name", "table"),
    [
        ("nanobot-0.2", (120, 0, True, False, True, 2000, "recorded")),
        ("nanobot-0.3.0", (2000, 0, False, False, True, 2000, "recorded")),
        ("nanobot-0.3.5", (0, 0, False, False, True, 0, "recorded")),
    ],
)
def test_each_release_resolves_none_to_its_own_table(name: str, table: tuple) -> None:
    resolved = get_policy(name).resolve(DEFAULT_SETTINGS)
    assert dataclasses.astuple(resolved) == table


def test_a_value_given_means_that_value_under_every_release_that_takes_it() -> None:
    asked = HistorySettings(max_messages=120, max_tokens=500, include_timestamps=True, file_cap=9)
    resolved = {name: get_policy(name).resolve(asked) for name in POLICIES}
    assert {r.max_messages for r in resolved.values()} == {120}
    assert {r.max_tokens for r in resolved.values()} == {500}
    # A setting a release does not take keeps that release's default.
    assert [r.include_timestamps for r in resolved.values()] == [True, False, False]
    assert [r.file_cap for r in resolved.values()] == [9, 9, 0]
    off = HistorySettings(include_runtime_context=False)
    assert [get_policy(n).resolve(off).include_runtime_context for n in POLICIES] == [
        True,
        False,
        False,
    ]


def test_each_release_takes_its_own_get_history_arguments() -> None:
    settings = HistorySettings(max_messages=8, max_tokens=900, extend_to_user=True, file_cap=0)
    assert get_policy("nanobot-0.2").history_kwargs(settings) == {
        "max_messages": 8,
        "max_tokens": 900,
        "include_timestamps": True,
        "extend_to_user": True,
    }
    for name in ("nanobot-0.3.0", "nanobot-0.3.5"):
        assert get_policy(name).history_kwargs(settings) == {
            "max_messages": 8,
            "max_tokens": 900,
            "extend_to_user": True,
            "include_runtime_context": True,
        }


def test_replace_changes_given_fields_and_skips_none() -> None:
    changed = DEFAULT_SETTINGS.replace(max_tokens=500, include_timestamps=None, last_consolidated=3)
    assert changed == HistorySettings(max_tokens=500, last_consolidated=3)
    assert DEFAULT_SETTINGS.max_tokens is None


def test_settings_are_frozen_and_hashable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_SETTINGS.max_messages = 5  # type: ignore[misc]
    assert len({HistorySettings(), HistorySettings(), HistorySettings(max_messages=5)}) == 2
