"""sessionkit.nanobot.settings: the agent loop's defaults, written down once."""

from __future__ import annotations

import dataclasses

import pytest

from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings


def test_defaults_are_what_nanobot_0_2_2s_agent_loop_passes() -> None:
    assert dataclasses.asdict(DEFAULT_SETTINGS) == {
        "max_messages": 120,
        "max_tokens": 0,
        "include_timestamps": True,
        "extend_to_user": False,
        "include_runtime_context": True,
        "file_cap": 2000,
        "last_consolidated": "recorded",
    }
    assert HistorySettings() == DEFAULT_SETTINGS


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
    assert DEFAULT_SETTINGS.max_tokens == 0


def test_settings_are_frozen_and_hashable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_SETTINGS.max_messages = 5  # type: ignore[misc]
    assert len({HistorySettings(), HistorySettings(), HistorySettings(max_messages=5)}) == 2
