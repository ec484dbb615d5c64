"""Replayed entries of many messages under several releases: only the messages a release
changes are rewritten.

Replays read from an entry only whether it is kept and the fields its count depends on
(:data:`~sessionkit.store.counting.KEY_FIELDS`).  Under the releases' own rewrites most
entries hold their message's own role, content and fields (tool results, assistant text that
sanitizing leaves alone, user text with no attachments or time stamp line), so the message
itself stands for such an entry and only the others are rewritten
(``ReplayPolicy.changed_entries``): a first grid rewrote every message once per release.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sessionkit.nanobot.entry_changes import EntryFacts
from sessionkit.nanobot.history import Message
from sessionkit.nanobot.policies import ReplayPolicy
from sessionkit.nanobot.settings import HistorySettings

__all__ = ["replayed_entries", "rewritten"]


def replayed_entries(
    messages: list[Message], roles: list[Any], targets: list[tuple[ReplayPolicy, HistorySettings]]
) -> list[tuple[list[Message | None], list[int]]]:
    """Under each target (a release and its settings): each message's replayed entry (None:
    skipped, or unreplayable; the message itself where its entry holds its own role, content
    and fields) and the messages the rewrite raised ``KeyError`` on (see :func:`rewritten`).
    ``roles``: each message's ``role``.  What the releases' rewrites change alike is found
    once for every target."""
    facts = EntryFacts(messages, roles)
    found = []
    for policy, settings in targets:
        rewrite = policy.entry_function(settings)
        changed = policy.changed_entries(facts, settings)
        if changed is None:
            found.append(rewritten(messages, rewrite))
            continue
        todo = sorted(changed)
        entries: list[Message | None] = list(messages)
        fresh, raised = rewritten([messages[i] for i in todo], rewrite)
        for i, entry in zip(todo, fresh, strict=True):
            entries[i] = entry
        found.append((entries, [todo[j] for j in raised]))
    return found


def rewritten(
    messages: list[Message], rewrite: Callable[[Message], Message | None]
) -> tuple[list[Message | None], list[int]]:
    """Each message's replayed entry (None: skipped, or unreplayable) and the messages the
    rewrite raised ``KeyError`` on (no role: the release's ``get_history`` raises there)."""
    try:
        return list(map(rewrite, messages)), []
    except KeyError:
        pass
    entries: list[Message | None] = []
    raised = []
    for i, message in enumerate(messages):
        try:
            entries.append(rewrite(message))
        except KeyError:
            entries.append(None)
            raised.append(i)
    return entries, raised
