"""Which releases continue forks: each by the policy its sessions load with, each with a probe
in the package, and a refusal naming them all."""

from __future__ import annotations

from importlib import resources

import pytest

from sessionkit.nanobot.loop_releases import LOOP_RELEASES, OUTSIDE_SWITCHES, loop_release, refusal
from sessionkit.nanobot.policies import RELEASE_TABLE


def test_each_release_continues_the_sessions_its_version_loads_as() -> None:
    assert [(r.version, RELEASE_TABLE[r.version]) for r in LOOP_RELEASES] == [
        ("0.3.5", "nanobot-0.3.5"),
        ("0.2.2", "nanobot-0.2"),
        ("0.3.0", "nanobot-0.3.0"),
    ]
    for found in LOOP_RELEASES:
        assert loop_release(RELEASE_TABLE[found.version]) is found
        assert resources.files("sessionkit.nanobot.probes").joinpath(found.probe).is_file()
        assert found.outside_tools == OUTSIDE_SWITCHES


@pytest.mark.parametrize("policy", ["nanobot-0.2.1", "nanobot-0.2.0", "nanobot-0.1.4.post5"])
def test_other_releases_are_refused_by_name(policy: str) -> None:
    assert loop_release(policy) is None
    assert refusal("cli:direct", policy) == (
        f"session 'cli:direct' is a {policy} session; only nanobot 0.3.5, nanobot 0.2.2 and "
        "nanobot 0.3.0 sessions can be continued"
    )
