"""The release registry: one object per nanobot release, registered once, asked by name.

Every per-release fact (naming, temp files, settings defaults, token estimate, loop call,
checkpoints, file cap, label and colour) lives on the release object
(:class:`~sessionkit.nanobot.release.ReplayPolicy`); the layers above call
``get_policy(name)`` and ask it, never compare release names.  Adding a release is one
module beside ``policy_022``/``policy_030``/``policy_035`` and one line in :data:`POLICIES`,
or one row of :data:`RELEASE_TABLE` for a release the analyses do not compare by default.
The shared rules are re-exported here (:mod:`sessionkit.nanobot.history`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from functools import cache

from sessionkit.nanobot.history import (
    FORK_VOLATILE_METADATA_KEYS,
    Trim,
    find_legal_message_start,
    fit_budget,
    recent_message_start_index,
    sanitize_assistant_text,
    tool_call_ids,
    tool_result_id,
)
from sessionkit.nanobot.policy_014 import SLICE_RELEASES
from sessionkit.nanobot.policy_020 import BUDGET_RELEASES
from sessionkit.nanobot.policy_022 import Policy
from sessionkit.nanobot.policy_030 import Policy030
from sessionkit.nanobot.policy_035 import Policy035
from sessionkit.nanobot.release import CappedPolicy, LoopCall, ReplayPolicy

__all__ = [
    "CANDIDATES",
    "DEFAULT_POLICY",
    "FORK_VOLATILE_METADATA_KEYS",
    "POLICIES",
    "RELEASES",
    "RELEASE_TABLE",
    "CappedPolicy",
    "LoopCall",
    "Policy",
    "ReplayPolicy",
    "Trim",
    "find_legal_message_start",
    "fit_budget",
    "get_policy",
    "is_temp_file",
    "kept_as",
    "recent_message_start_index",
    "register_candidate",
    "release_of_temp_file",
    "sanitize_assistant_text",
    "temp_file_names",
    "tool_call_ids",
    "tool_result_id",
]

POLICIES: dict[str, ReplayPolicy] = {
    release.name: release for release in (Policy(), Policy030(), Policy035())
}
"""The releases the analyses compare side by side by default (frames' turn counts, plots,
grids), by name, oldest first; :data:`RELEASES` has every other one."""

_OBJECTS = {release.name: release for release in (*SLICE_RELEASES, *BUDGET_RELEASES)} | POLICIES

RELEASE_TABLE: dict[str, str] = {
    "0.1.4": "nanobot-0.1.4",
    "0.1.4.post2": "nanobot-0.1.4.post2",
    "0.1.4.post3": "nanobot-0.1.4.post2",
    "0.1.4.post4": "nanobot-0.1.4.post2",
    "0.1.4.post5": "nanobot-0.1.4.post5",
    "0.1.4.post6": "nanobot-0.1.4.post6",
    "0.1.5": "nanobot-0.1.5",
    "0.1.5.post1": "nanobot-0.1.5",
    "0.1.5.post2": "nanobot-0.1.5.post2",
    "0.1.5.post3": "nanobot-0.1.5.post3",
    "0.2.0": "nanobot-0.2.0",
    "0.2.1": "nanobot-0.2.1",
    "0.2.2": "nanobot-0.2",
    "0.3.0": "nanobot-0.3.0",
    "0.3.5": "nanobot-0.3.5",
}
"""Every ``nanobot-ai`` release on PyPI since 0.1.4 -> the release object with its rules: its
own, or that of an earlier release it behaves exactly as (an alias; a differential test runs
both).  0.1.4.post3 and post4 changed only logging and the legacy folder's lookup; 0.1.5.post1
only reads ``updated_at`` back, which replays never use."""

RELEASES: dict[str, ReplayPolicy] = _OBJECTS | {
    f"nanobot-{version}": _OBJECTS[name] for version, name in RELEASE_TABLE.items()
}
"""Every name :func:`get_policy` knows: each release object's, and ``nanobot-<version>`` for
every version of :data:`RELEASE_TABLE` (``"nanobot-0.1.4.post3"``, ``"nanobot-0.2.2"``)."""

CANDIDATES: dict[str, ReplayPolicy] = {}
"""The candidate policies this process made (``sessionkit.candidate``), by name: the latest of
a name is the one a frame's ``policy`` column means."""

DEFAULT_POLICY = Policy.name
"""The release a session is replayed with when nothing says otherwise (nanobot 0.2.2)."""

SESSIONKIT_TEMP_NAME = re.compile(r"\.(?P<stem>.*)\.[0-9a-f]{12}\.tmp", re.DOTALL)
"""Name of a sessionkit save's temporary file: ``.<first 64 bytes of the stem>.<12 hex>.tmp``."""


def get_policy(name: str | ReplayPolicy = DEFAULT_POLICY) -> ReplayPolicy:
    """The registered release called ``name`` (``"nanobot-0.2"`` reproduces nanobot-ai 0.2.2,
    as does ``"nanobot-0.2.2"``; every version since 0.1.4 is ``"nanobot-<version>"``), or the
    candidate policy of that name; a release or candidate object is itself (a candidate
    registered, so its name finds it)."""
    if isinstance(name, ReplayPolicy):
        return name if name.rule is None else register_candidate(name)
    try:
        return RELEASES[name]
    except (KeyError, TypeError):
        if isinstance(name, str) and name in CANDIDATES:
            return CANDIDATES[name]
        known = ", ".join(POLICIES)
        versions = ", ".join(RELEASE_TABLE)
        raise ValueError(
            f"unknown history policy {name!r}; known: {known}, nanobot-<version> for the "
            f"versions {versions}, and the candidates made by sessionkit.candidate()"
        ) from None


def kept_as(name: str) -> tuple[str, str | None]:
    """The releases of :data:`POLICIES` (whose turns and token counts every load keeps) whose
    user turns and token counts policy ``name``'s equal (a candidate's: its base's); None
    for the counts when none's do (they are made apart, or there are none: ``estimates``)."""
    release = get_policy(get_policy(name).release_name)
    if release.name in POLICIES:
        return release.name, release.name
    turns = next(
        r.name
        for r in POLICIES.values()
        if r.hidden_turns == release.hidden_turns
        and type(r).is_user_turn is type(release).is_user_turn
    )
    return turns, release.counts_as if release.estimates and release.counts_as else None


def register_candidate(candidate: ReplayPolicy) -> ReplayPolicy:
    """Make ``candidate`` the policy its name means in this process; refused for a release's
    name."""
    if candidate.name in RELEASES:
        raise ValueError(f"a candidate cannot take the name of release {candidate.name!r}")
    CANDIDATES[candidate.name] = candidate
    return candidate


def release_of_temp_file(path: str | os.PathLike[str]) -> str | None:
    """Who left the temporary save file ``path``: a release's name, ``"sessionkit"``, or
    ``None`` when its name is no save's temp file."""
    name = os.path.basename(os.fspath(path))
    if SESSIONKIT_TEMP_NAME.fullmatch(name):
        return "sessionkit"
    return next((r.name for r in POLICIES.values() if r.is_temp_file(name)), None)


def is_temp_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is named like a temporary file an interrupted save left behind
    (sessionkit's own, or any release's): one match against every writer's pattern at once,
    as a folder's every name is asked."""
    return _any_temp_name().fullmatch(os.path.basename(os.fspath(path))) is not None


def temp_file_names(names: Iterable[str]) -> list[str]:
    """The names among ``names`` (a folder's) that :func:`is_temp_file` would match."""
    match = _any_temp_name().fullmatch
    return [name for name in names if match(name) is not None]


@cache
def _any_temp_name() -> re.Pattern[str]:
    """One pattern matching sessionkit's temp file names and every release's."""
    names = [SESSIONKIT_TEMP_NAME.pattern, *(r.temp_name for r in POLICIES.values())]
    return re.compile("|".join(f"(?:{n})" for n in names), re.DOTALL)
