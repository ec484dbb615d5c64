"""Which releases' own agent loops can continue a fork, and how each is driven.

One :class:`LoopRelease` per release behaviour: the release installed to run it, the session
policies it continues, its probe (in :mod:`sessionkit.nanobot.probes`, run with ``-I`` in
the release's interpreter), where it keeps a workspace's sessions, and the config switches
that turn off its tools reaching past a private copy (read from that release's config
schema).  :func:`loop_release` answers for a session's policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["LOOP_RELEASES", "OUTSIDE_SWITCHES", "LoopRelease", "loop_release", "refusal"]

OUTSIDE_SWITCHES = MappingProxyType(
    {
        "exec": ("tools", "exec", "enable"),
        "web": ("tools", "web", "enable"),
        "cli_apps": ("tools", "cliApps", "enable"),
        "image_generation": ("tools", "imageGeneration", "enabled"),
    }
)
"""The switches (camelCase config paths) turning off the shell, web fetch and search, CLI
apps and image generation, as the config schemas of 0.2.2, 0.3.0 and 0.3.5 all name them."""


@dataclass(frozen=True)
class LoopRelease:
    """One release whose loop continues forks.

    ``version`` is the release installed to run it; ``policies`` the session policies it
    continues (:attr:`sessionkit.nanobot.session.Session.policy`); ``probe`` the probe's file
    name; ``sessions_in_config_dir`` whether sessions live under the config dir (0.3.5's
    ``<config dir>/sessions/<workspace id>/``) rather than in ``<workspace>/sessions``;
    ``config_required`` whether a config file must exist (else nanobot's defaults start the
    copy's); ``outside_tools`` each tool reaching past the copy, by the name ``enable=``
    takes, with the config switch (camelCase path) turning it off.
    """

    version: str
    policies: frozenset[str]
    probe: str
    sessions_in_config_dir: bool
    config_required: bool
    outside_tools: Mapping[str, tuple[str, ...]]


def _agent_loop(version: str, policy: str) -> LoopRelease:
    """A release continued by ``nanobot agent``'s loop: sessions in the workspace, no config
    needed (nanobot's defaults)."""
    return LoopRelease(
        version=version,
        policies=frozenset({policy}),
        probe="continue_022.py",
        sessions_in_config_dir=False,
        config_required=False,
        outside_tools=OUTSIDE_SWITCHES,
    )


LOOP_RELEASES = (
    LoopRelease(
        version="0.3.5",
        policies=frozenset({"nanobot-0.3.5"}),
        probe="continue_035.py",
        sessions_in_config_dir=True,
        config_required=True,
        outside_tools=OUTSIDE_SWITCHES,
    ),
    _agent_loop("0.2.2", "nanobot-0.2"),
    _agent_loop("0.3.0", "nanobot-0.3.0"),
)
"""Every release sessionkit continues forks with: nanobot 0.3.5 (its gateway's parts), and
nanobot 0.2.2 and 0.3.0 (``nanobot agent``'s loop, ``AgentLoop.process_direct``, built from
the same parts in both)."""


def loop_release(policy: str) -> LoopRelease | None:
    """The release whose loop continues sessions of ``policy``, or ``None``."""
    return next((r for r in LOOP_RELEASES if policy in r.policies), None)


def refusal(key: str, policy: str) -> str:
    """Why a session of ``policy`` cannot be continued (naming the releases that can)."""
    *others, last = [f"nanobot {r.version}" for r in LOOP_RELEASES]
    names = f"{', '.join(others)} and {last}"
    return f"session {key!r} is a {policy} session; only {names} sessions can be continued"
