"""sessionkit.nanobot.settings: one settings value, each None resolved by the release in force."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sessionkit.nanobot.policies import POLICIES, get_policy
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings, grid_values


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


@pytest.mark.parametrize(
    ("name", "value", "error", "says"),
    [
        ("max_messages", "10", TypeError, "max_messages must be an int"),
        ("max_messages", 10.0, TypeError, "max_messages must be an int"),
        ("max_messages", True, TypeError, "max_messages must be an int"),
        ("max_tokens", -1, ValueError, "max_tokens must be an int >= 0"),
        ("file_cap", -5, ValueError, "file_cap must be an int >= 0"),
        ("include_timestamps", 1, TypeError, "include_timestamps must be True or False"),
        ("extend_to_user", "yes", TypeError, "extend_to_user must be True or False"),
        ("last_consolidated", "latest", ValueError, "'recorded', 'none' or an int"),
        ("last_consolidated", 2.5, TypeError, "'recorded', 'none' or an int"),
    ],
)
def test_a_wrong_value_is_refused_naming_the_setting(
    name: str, value: object, error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        HistorySettings(**{name: value})
    with pytest.raises(error, match=says):
        grid_values(name, [None, value])


def test_numpy_values_are_taken_as_python_ones() -> None:
    settings = HistorySettings(max_messages=np.int64(7), include_timestamps=np.bool_(False))
    assert (type(settings.max_messages), type(settings.include_timestamps)) == (int, bool)
    assert settings == HistorySettings(max_messages=7, include_timestamps=False)


def test_a_grid_keeps_none_for_the_releases_default() -> None:
    assert grid_values("max_messages", None) is None
    assert grid_values("max_messages", 5) == [5]
    assert grid_values("max_messages", (None, 10)) == [None, 10]
    assert grid_values("max_tokens", range(0, 3)) == [0, 1, 2]
    assert grid_values("last_consolidated", "none") == ["none"]
    with pytest.raises(ValueError, match="non-empty list"):
        grid_values("max_tokens", [])
    with pytest.raises(TypeError, match="'max_msgs' is no history setting"):
        grid_values("max_msgs", [1])
    with pytest.raises(ValueError, match="context_window must be an int >= 0"):
        grid_values("context_window", [-1])
