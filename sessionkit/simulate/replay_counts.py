"""Counting replayed entries (:class:`EntryCounter`): a replay's tokens for every release asked at
once, reusing the counts a load keeps and counting each entry once per counting rule."""

from __future__ import annotations

from collections.abc import Callable
from itertools import compress, repeat
from operator import is_, is_not
from typing import Any, cast

import numpy as np
import orjson

from sessionkit.nanobot.policies import DEFAULT_POLICY, ReplayPolicy, get_policy
from sessionkit.nanobot.tokens import SPLITS_BY_RULE, has_marker
from sessionkit.store.counting import KEY_FIELDS, TokenCache, counts_through, text_tokens
from sessionkit.store.fields import message_field

__all__ = ["STORED_POLICY", "EntryCounter"]

STORED_POLICY = DEFAULT_POLICY
"""The release whose exact counts of the stored messages a load keeps (the index's ``tokens``
column: 0.2.2's), which replays reuse for entries that equal their message."""
_KEY_FIELDS = tuple(name for name in KEY_FIELDS if name != "content")
"""The fields besides ``content`` a message's token count depends on (tool calls first)."""


class EntryCounter:
    """Token counts of one session's replayed entries under several releases, each entry
    counted once per counting rule.

    A count depends on the release and the entry's key fields (content and
    :data:`_KEY_FIELDS`), and for a plain entry (text content, no ``<|`` in any field) only
    on the release's :attr:`~sessionkit.nanobot.release.ReplayPolicy.plain_count` rule.  An
    entry holding its message's own key fields, with text content, is known by its rule and
    content: it takes the message's stored count when that is for the same rule and content,
    or the count of an entry with the same rule and content counted for an earlier release;
    an entry whose text only puts a line before its message's is counted as that line plus
    the stored count (:meth:`_prefixed`); only the rest are counted.
    """

    def __init__(
        self, messages: list[dict[str, Any]], stored: np.ndarray | None, cache: TokenCache | None
    ) -> None:
        self.cache = cache
        self.messages = messages
        n = len(messages)
        self.stored = np.full(n, -1, np.int64) if stored is None else stored.astype(np.int64)
        self.contents = message_field(messages, "content")
        self.fields = [message_field(messages, key) for key in _KEY_FIELDS]
        self.plain = _plain_fields(messages, self.fields)
        self.plain_messages = np.fromiter(
            (
                p and type(c) is str and not has_marker(c)
                for p, c in zip(self.plain, self.contents, strict=True)
            ),
            dtype=bool,
            count=n,
        )
        self.known: dict[tuple[int, str, str], int] = {}
        self.stored_policy = get_policy(STORED_POLICY)

    def counts(
        self, policy: ReplayPolicy, entries: list[dict[str, Any] | None], kept: list[int]
    ) -> np.ndarray:
        """Counts of ``entries[i]`` for each ``i`` in ``kept``, under ``policy``: the stored
        ones found at once for all entries, the rest by label (:meth:`_counted`)."""
        # ``kept`` are the entries that are not None (see replay_compute.part)
        replayed = cast("list[dict[str, Any]]", list(map(entries.__getitem__, kept)))
        contents = message_field(replayed, "content")
        at = np.array(kept, dtype=np.int64)
        # a message standing for its own entry (replay_entries) holds its own fields and text
        own = np.fromiter(map(is_, replayed, map(self.messages.__getitem__, kept)), bool, len(kept))
        same_text = own.copy()
        others = np.flatnonzero(~own).tolist()
        if others:
            at_others = [kept[j] for j in others]
            own[others] = self._own_fields([replayed[j] for j in others], at_others)
            ours = map(self.contents.__getitem__, at_others)
            same_text[others] = np.fromiter(
                (
                    c is m or (type(c) is str and type(m) is str and c == m)
                    for c, m in zip(map(contents.__getitem__, others), ours, strict=True)
                ),
                dtype=bool,
                count=len(others),
            )
        same_rule = np.where(
            self.plain_messages[at],
            policy.plain_count == self.stored_policy.plain_count,
            policy.name == self.stored_policy.name,
        )
        stored = self.stored[at]
        found = own & same_text & same_rule & (stored >= 0)
        counts = np.where(found, stored, -1)
        rest = np.flatnonzero(~found).tolist()
        rule = policy.plain_count
        if rest and rule == self.stored_policy.plain_count and rule in SPLITS_BY_RULE:
            rest = self._prefixed(SPLITS_BY_RULE[rule], contents, kept, rest, own, stored, counts)
        if rest:
            batch = [replayed[j] for j in rest]
            counts[rest] = self._counted(policy, batch, [kept[j] for j in rest], own[rest])
        return counts

    def _prefixed(
        self,
        splits: Callable[[str, str], bool],
        contents: list[Any],
        kept: list[int],
        rest: list[int],
        own: np.ndarray,
        stored: np.ndarray,
        counts: np.ndarray,
    ) -> list[int]:
        """Count the entries of ``rest`` whose payload is a text put before their message's own
        plain payload where the counting rule's pre-tokenizer ``splits`` (0.2.2's
        ``[Message Time: …]`` line): that text's tokens plus the message's stored count, which
        is for the same rule.  Returns the others."""
        others, at, prefixes = [], [], []
        for j in rest:
            i, text, mine = kept[j], contents[j], self.contents[kept[j]]
            if (
                own[j]
                and stored[j] >= 0
                and self.plain_messages[i]
                and type(text) is str
                and mine
                and len(text) > len(mine)
                and text.endswith(mine)
            ):
                prefix = text[: len(text) - len(mine)]
                if not has_marker(prefix) and splits(prefix, mine):
                    at.append(j)
                    prefixes.append(prefix)
                    continue
            others.append(j)
        if at:
            counts[at] = np.array(text_tokens(prefixes), np.int64) + stored[at]
        return others

    def _counted(
        self,
        policy: ReplayPolicy,
        entries: list[dict[str, Any]],
        kept: list[int],
        own: np.ndarray,
    ) -> list[int]:
        """Counts of entries (of messages ``kept``) no stored count serves: one holding its
        message's own fields (``own``) with text content is labelled by rule and content and
        takes the count of an entry so labelled for an earlier release; the rest are counted
        (and the labelled ones remembered)."""
        counts = [-1] * len(entries)
        todo: list[int] = []
        labels: list[tuple[int, str, str] | None] = []
        for j, (i, entry, mine) in enumerate(zip(kept, entries, own.tolist(), strict=True)):
            content = entry.get("content")
            label = None
            if mine and type(content) is str:
                plain = self.plain[i] and not has_marker(content)
                label = (i, f"*{policy.plain_count}" if plain else policy.name, content)
                found = self.known.get(label)
                if found is not None:
                    counts[j] = found
                    continue
            todo.append(j)
            labels.append(label)
        if todo:
            batch = [entries[j] for j in todo]
            fresh = counts_through(batch, self.cache, workers=1, policy=policy.name)
            for j, label, n in zip(todo, labels, fresh, strict=True):
                counts[j] = n
                if label is not None:
                    self.known[label] = n
        return counts

    def _own_fields(self, replayed: list[dict[str, Any]], kept: list[int]) -> np.ndarray:
        """Per entry: whether it holds its message's own objects in :data:`_KEY_FIELDS`."""
        same = np.ones(len(kept), dtype=bool)
        for key, values in zip(_KEY_FIELDS, self.fields, strict=True):
            ours = map(values.__getitem__, kept)
            same &= np.fromiter(map(is_, message_field(replayed, key), ours), bool, len(kept))
        return same


def _plain_fields(messages: list[dict[str, Any]], fields: list[list[Any]]) -> list[bool]:
    """Per message: whether its key fields other than content (``fields``, in the order of
    :data:`_KEY_FIELDS`) are missing or hold no ``<|``: names, call ids and reasoning text,
    tool calls as JSON without null (the payload joins its parts with newlines, so no
    ``<|`` is in the payload of an entry holding them with ``<|``-free text)."""
    plain = [True] * len(messages)
    calls, *texts = fields
    for values in texts:
        for i in compress(range(len(values)), map(is_not, values, repeat(None))):
            value = values[i]
            plain[i] = plain[i] and type(value) is str and not has_marker(value)
    for i in compress(range(len(calls)), calls):
        try:
            dumped = orjson.dumps(calls[i])
        except (orjson.JSONEncodeError, TypeError):
            plain[i] = False
            continue
        plain[i] = plain[i] and b"<|" not in dumped and b"null" not in dumped  # null: NaN too
    return plain
