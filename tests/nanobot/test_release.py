"""sessionkit.nanobot.release and the registry: each release answers every per-release
question (label, colour, temp files, loop call, checkpoints, file cap) itself."""

from __future__ import annotations

import pytest

from sessionkit.nanobot.policies import (
    POLICIES,
    get_policy,
    is_temp_file,
    release_of_temp_file,
)
from sessionkit.nanobot.release import LoopCall


def test_registry_holds_one_object_per_release_oldest_first() -> None:
    assert list(POLICIES) == ["nanobot-0.2", "nanobot-0.3.0", "nanobot-0.3.5"]
    assert [r.label for r in POLICIES.values()] == [
        "nanobot 0.2.2",
        "nanobot 0.3.0",
        "nanobot 0.3.5",
    ]
    assert [r.colour for r in POLICIES.values()] == ["#4c72b0", "#dd8452", "#55a868"]
    assert [r.naming for r in POLICIES.values()] == ["nanobot-0.2", "nanobot-0.3", "nanobot-0.3"]
    assert [r.file_cap is None for r in POLICIES.values()] == [False, False, True]
    assert [r.checkpoints for r in POLICIES.values()] == [False, False, True]
    assert [r.governed for r in POLICIES.values()] == [False, False, True]
    assert [r.loss_rule for r in POLICIES.values()] == [True, False, False]
    assert all(get_policy(name) is release for name, release in POLICIES.items())


@pytest.mark.parametrize("name", ["nanobot-0.4", "", None, ["nanobot-0.2"]])
def test_an_unknown_release_is_refused_naming_the_known_ones(name: object) -> None:
    with pytest.raises(ValueError, match="known: nanobot-0.2, nanobot-0.3.0, nanobot-0.3.5"):
        get_policy(name)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "who"),
    [
        ("telegram_1.jsonl.tmp", "nanobot-0.2"),
        (".dGVsZWdyYW06MQ.jsonl.0123456789abcdef.tmp", "nanobot-0.3.5"),
        (".telegram_1.0123456789ab.tmp", "sessionkit"),
        ("telegram_1.jsonl", None),
        (".dGVsZWdyYW06MQ.jsonl.0123456789abcde.tmp", None),
        ("notes.tmp", None),
    ],
)
def test_temp_files_are_told_by_each_releases_rule(name: str, who: str | None) -> None:
    assert release_of_temp_file(f"/some/folder/{name}") == who
    assert is_temp_file(name) is (who is not None)


def test_hidden_checkpoints_are_turns_only_where_the_release_counts_them() -> None:
    hidden = {"role": "user", "content": "go on", "_hidden_history": True}
    cron = {"role": "user", "content": "tick", "_cron_turn": True}
    plain = {"role": "user", "content": "hi"}
    assert [r.is_user_turn(hidden) for r in POLICIES.values()] == [True, True, False]
    assert [r.is_user_turn(cron) for r in POLICIES.values()] == [True, True, False]
    assert [r.is_user_turn(plain) for r in POLICIES.values()] == [True, True, True]
    assert [r.is_user_turn({"content": "no role"}) for r in POLICIES.values()] == [False] * 3


@pytest.mark.parametrize(
    ("policy", "context_window", "max_output", "expected"),
    [
        ("nanobot-0.2", 128_000, 8192, LoopCall(120, 118_784)),
        ("nanobot-0.2", 4096, 8192, LoopCall(120, 2048)),
        ("nanobot-0.2", 200, 8192, LoopCall(120, 128)),
        ("nanobot-0.2", 0, 8192, LoopCall(120, 0)),
        ("nanobot-0.3.0", 128_000, 8192, LoopCall(1280, 118_784)),
        ("nanobot-0.3.0", 8000, 4096, LoopCall(120, 2880)),
        ("nanobot-0.3.0", 1_000_000, 8192, LoopCall(2000, 990_784)),
        ("nanobot-0.3.0", 0, 8192, LoopCall(2000, 0)),
        ("nanobot-0.3.5", 128_000, 8192, LoopCall(0, 0, 118_784)),
        ("nanobot-0.3.5", 8000, 4096, LoopCall(0, 0, 2880)),
        ("nanobot-0.3.5", 4096, 8192, LoopCall(0, 0, 0)),
    ],
)
def test_agent_loop_calls_per_release(
    policy: str, context_window: int, max_output: int, expected: LoopCall
) -> None:
    assert get_policy(policy).loop_call(context_window, max_output, 120) == expected
