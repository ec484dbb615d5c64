"""Which stored messages a release's replay rewrite may change, found for many messages at once.

An entry that holds its message's own role, content and replayed fields tells nothing the
message does not (a count reads only those fields), so a caller rewriting many messages need
rewrite only the others (``ReplayPolicy.changed_entries``).  :class:`EntryFacts` holds what
every release's rewrite changes alike; :func:`changed_022` and :func:`changed_03x` add each
release's own.
"""

from __future__ import annotations

from functools import cached_property
from itertools import compress, repeat
from operator import eq, is_, is_not
from typing import Any

from sessionkit.nanobot.history import (
    NON_TEXT_FIELDS,
    RUNTIME_CONTEXT_KEY,
    Message,
    sanitize_assistant_text,
)

__all__ = ["EntryFacts", "changed_022", "changed_03x"]


class EntryFacts:
    """One session's messages (``roles``: each one's ``role``) as the releases' rewrites
    read them, each fact found once for every release asking."""

    def __init__(self, messages: list[Message], roles: list[Any]) -> None:
        self.messages, self.roles = messages, roles

    @cached_property
    def contents(self) -> list[Any]:
        """Each message's ``content`` (None where absent)."""
        return self._field("content")

    @cached_property
    def changed(self) -> set[int]:
        """The messages whose entry may not hold their own role, content and fields under
        any of the releases' own rewrites: a command (skipped), a message without a role or
        without content (the entry's content is then ``""``), and assistant text that
        sanitizing changes or leaves empty (skipped unless it carries a non-text field)."""
        messages, roles, contents = self.messages, self.roles, self.contents
        every = range(len(messages))
        found = set(compress(every, self._field("_command")))
        found.update(compress(every, map(is_not, map(type, roles), repeat(str))))
        for i in compress(every, map(is_, contents, repeat(None))):
            if "content" not in messages[i]:
                found.add(i)
        for i in compress(every, map(eq, roles, repeat("assistant"))):
            content = contents[i]
            if isinstance(content, str) and (
                sanitize_assistant_text(content) != content
                or (not content and not any(key in messages[i] for key in NON_TEXT_FIELDS))
            ):
                found.add(i)
        return found

    def user_text_with(self, fields: list[str]) -> set[int]:
        """The user messages with text content holding any of ``fields`` (not null)."""
        holding: set[int] = set()
        for name in fields:
            holding |= self.holding(name)
        return {i for i in holding if self.roles[i] == "user" and isinstance(self.contents[i], str)}

    def holding(self, name: str) -> set[int]:
        """The messages holding ``name`` (not null)."""
        values = self._field(name)
        return set(compress(range(len(values)), map(is_not, values, repeat(None))))

    def _field(self, name: str) -> list[Any]:
        """``name`` of every message (None where absent), by a C-level map over dicts."""
        try:
            return list(map(dict.get, self.messages, repeat(name)))
        except TypeError:  # a mapping that is not a dict
            return [m.get(name) for m in self.messages]


def changed_022(facts: EntryFacts, include_timestamps: bool) -> set[int]:
    """What 0.2.2's rewrite may change: :attr:`EntryFacts.changed`, and user text with a
    media, CLI-app or MCP-preset field, or with a time stamp when ``include_timestamps``."""
    fields = ["media", "cli_apps", "mcp_presets"]
    return facts.changed | facts.user_text_with(
        [*fields, "timestamp"] if include_timestamps else fields
    )


def changed_03x(facts: EntryFacts, include_runtime_context: bool) -> set[int]:
    """What 0.3.0's or 0.3.5's rewrite may change: :attr:`EntryFacts.changed`, user text
    with a media or CLI-app field, and without ``include_runtime_context`` any message
    holding the runtime context marker (its public copy may lose a suffix)."""
    found = facts.changed | facts.user_text_with(["media", "cli_apps"])
    return found if include_runtime_context else found | facts.holding(RUNTIME_CONTEXT_KEY)
