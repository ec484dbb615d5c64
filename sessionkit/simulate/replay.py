"""Each session's messages rewritten and counted once: the cache windows, states and testing share.

A :class:`Replay` holds what every fast path needs from one session under one release's
policy and the settings its replayed entries depend on (``policy.entry_key(settings)``: 0.2.2's
``include_timestamps``, 0.3.x's ``include_runtime_context``): the replayed entries' source
indices and token counts (that release's estimate), and the per-message flags the window rules
read.  :func:`replay` and :func:`replay_all` compute it (in forked workers for large corpora)
and keep it in :mod:`sessionkit.store.memo`, keyed by ``(policy name, entry key)``, for the
session as it is now (any edit, in place or not, makes them computed again).  Sessions read
back from the persistent index (:class:`~sessionkit.store.index.IndexedSession`) also find
their replays there, kept per store and setting for the file versions indexed, and :func:`prepared` keeps what is derived from a large
store's replays (the windows' stacked arrays): a new process then replays nothing.

Replaying a session for several releases at once (:func:`replay_jobs`) reads its messages
once and counts each replayed entry once per counting rule: an entry holding its message's
own fields takes the count the load keeps for the message when that count is for the same
rule (:func:`stored_counts`), and releases sharing a rule share the counts of equal entries.
Workers take whole sessions, or ranges of the messages of a long one (``TUNING.split_messages``).
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import as_completed
from contextlib import suppress
from dataclasses import dataclass
from itertools import compress, repeat
from operator import eq, is_, is_not
from typing import Any, TypeVar, cast

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
from tqdm.auto import tqdm

from sessionkit.nanobot.history import HIDDEN_HISTORY_KEY
from sessionkit.nanobot.policies import (
    DEFAULT_POLICY,
    ReplayPolicy,
    get_policy,
    tool_call_ids,
    tool_result_id,
)
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings
from sessionkit.nanobot.tokens import SPLITS_BY_RULE, has_marker
from sessionkit.store import memo, versions
from sessionkit.store.cachedir import name_digest
from sessionkit.store.counting import (
    DEFAULT_CACHE,
    KEY_FIELDS,
    ReadThroughCache,
    TokenCache,
    counts_through,
    text_tokens,
    token_cache_of,
)
from sessionkit.store.fields import hidden_flags, message_field, truthy_flags, user_turn_flags
from sessionkit.store.forked import SHARED, can_fork, forked_pool
from sessionkit.store.frames import Entry
from sessionkit.store.index import REPLAY_TABLE, Index, IndexedSession, Item
from sessionkit.store.nogc import no_gc
from sessionkit.tuning import TUNING

__all__ = [
    "UNREPLAYABLE",
    "Replay",
    "derived",
    "prepared",
    "prepared_each",
    "replay",
    "replay_all",
    "replay_jobs",
    "stored_counts",
    "stored_tokens",
]

T = TypeVar("T")

_AUTO_PROGRESS_MESSAGES = 20_000
_DERIVED_KEPT = 6
UNREPLAYABLE = -3
"""``Replay.declared`` of a message the release's entry rewrite raises on."""


@dataclass(frozen=True, eq=False)
class Replay:
    """One session's messages as one release replays them under one entry setting.

    ``declared`` (per message) and ``entry_declared`` (per replayed entry) hold, for a tool
    result naming a call, the index of the latest assistant message declaring it (-1: none);
    -2 for every other message, :data:`UNREPLAYABLE` (-3) for one the release cannot rewrite
    (a line without a role: its ``get_history`` raises ``KeyError`` for a window holding it).
    ``command`` flags user messages marked ``_command``,
    ``checkpoint`` 0.3.5's hidden summary-checkpoint messages (``_hidden_history: true``),
    ``turn`` the user turns the release counts (0.3.5 skips hidden messages).
    ``kept`` are the source indices of replayed entries and ``tokens`` their counts.
    """

    is_user: np.ndarray
    delivery: np.ndarray
    command: np.ndarray
    checkpoint: np.ndarray
    turn: np.ndarray
    declared: np.ndarray
    kept: np.ndarray
    entry_declared: np.ndarray
    tokens: np.ndarray

    def sent(self) -> np.ndarray:
        """Per message: whether it is replayed at all (False: skipped, or a command)."""
        mask = np.zeros(len(self.is_user), dtype=bool)
        mask[self.kept] = True
        return mask

    def sent_tokens(self) -> pd.arrays.IntegerArray:
        """Per message: its tokens as replayed, ``<NA>`` where it never is."""
        counts = np.zeros(len(self.is_user), dtype=np.int64)
        counts[self.kept] = self.tokens
        return pd.arrays.IntegerArray(counts, ~self.sent())


def _policy(session: Session, policy: str | None) -> ReplayPolicy:
    """``policy``, or the session's own release when None."""
    return get_policy(session.policy if policy is None else policy)


Target = tuple[ReplayPolicy, HistorySettings]
"""A release and the history settings its replayed entries are rewritten under."""

STORED_POLICY = DEFAULT_POLICY
"""The release whose exact counts of the stored messages a load keeps (the index's ``tokens``
column: 0.2.2's), which replays reuse for entries that equal their message."""
_KEY_FIELDS = tuple(name for name in KEY_FIELDS if name != "content")
"""The fields besides ``content`` a message's token count depends on (tool calls first)."""


def _compute(
    session: Session,
    targets: list[Target],
    cache: TokenCache | None,
    stored: np.ndarray | None = None,
) -> list[Replay]:
    """The session's :class:`Replay` under each target: what does not depend on the release
    is read from the messages once, and each entry is counted once per counting rule
    (``stored``: the messages' own counts by :data:`STORED_POLICY`, -1 where none)."""
    return _assembled([_part(session.messages, 0, targets, cache, stored)], targets)


@dataclass
class _Part:
    """What one range of a session's messages gives its replays (see :func:`_assembled`):
    what each message tells alone, and per target the range's turn flags, replayed entries
    (``kept``, source indices from the session's start), their counts, and the messages the
    rewrite raised on (``raised``, from the session's start too)."""

    answered: list[str | None]
    declares: list[tuple[str, ...]]
    shared: dict[str, np.ndarray]
    turns: list[np.ndarray]
    kept: list[list[int]]
    raised: list[list[int]]
    tokens: list[np.ndarray]


def _part(
    messages: list[dict[str, Any]],
    start: int,
    targets: list[Target],
    cache: TokenCache | None,
    stored: np.ndarray | None,
) -> _Part:
    """The :class:`_Part` of ``messages``, the session's from index ``start`` on (``stored``:
    their stored counts, see :func:`_compute`)."""
    roles = message_field(messages, "role")
    is_user = np.fromiter(map(eq, roles, repeat("user")), dtype=bool, count=len(messages))
    part = _Part(
        answered=[
            tool_result_id(m) if r == "tool" else None for m, r in zip(messages, roles, strict=True)
        ],
        declares=[
            tuple(tool_call_ids(m)) if r == "assistant" else ()
            for m, r in zip(messages, roles, strict=True)
        ],
        shared={
            "is_user": is_user,
            "delivery": truthy_flags(message_field(messages, "_channel_delivery")),
            "command": is_user & truthy_flags(message_field(messages, "_command")),
            "checkpoint": np.fromiter(
                map(is_, message_field(messages, HIDDEN_HISTORY_KEY), repeat(True)),
                dtype=bool,
                count=len(messages),
            ),
        },
        turns=[],
        kept=[],
        raised=[],
        tokens=[],
    )
    counter = _Counter(messages, stored, cache)
    hidden = hidden_flags(messages)
    for policy, settings in targets:
        entries, raised = _rewritten(messages, policy.entry_function(settings))
        kept = [i for i, entry in enumerate(entries) if entry is not None]
        part.turns.append(user_turn_flags(messages, roles, hidden, policy))
        part.tokens.append(counter.counts(policy, entries, kept))
        part.kept.append([i + start for i in kept] if start else kept)
        part.raised.append([i + start for i in raised] if start else raised)
    return part


def _assembled(parts: list[_Part], targets: list[Target]) -> list[Replay]:
    """The :class:`Replay` under each target of a session whose messages ``parts`` cover in
    order: their per-message facts joined, and who declared each answered call found over
    the whole session."""
    answered = [a for part in parts for a in part.answered]
    declares = [d for part in parts for d in part.declares]
    declared = _declared(answered, declares)
    shared = {name: _joined([p.shared[name] for p in parts]) for name in parts[0].shared}
    replays: list[Replay] = []
    for t in range(len(targets)):
        kept = [i for part in parts for i in part.kept[t]]
        same = next((r for r in replays if r.kept.tolist() == kept), None)
        unreplayable = [i for part in parts for i in part.raised[t] if answered[i] is None]
        own = declared  # shared by the targets, so their stacks can share its jump tables
        if unreplayable:
            own = declared.copy()
            own[unreplayable] = UNREPLAYABLE
        replays.append(
            Replay(
                **shared,
                turn=_joined([part.turns[t] for part in parts]),
                declared=own,
                kept=np.array(kept, dtype=np.int32) if same is None else same.kept,
                entry_declared=(
                    _entry_declared(kept, answered, declares)
                    if same is None
                    else same.entry_declared
                ),
                tokens=_joined([part.tokens[t] for part in parts]),
            )
        )
    return replays


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays end to end (the one array itself when there is one)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _rewritten(
    messages: list[dict[str, Any]], rewrite: Callable[[dict[str, Any]], dict[str, Any] | None]
) -> tuple[list[dict[str, Any] | None], list[int]]:
    """Each message's replayed entry (None: skipped, or unreplayable) and the messages the
    rewrite raised ``KeyError`` on (no role: the release's ``get_history`` raises there)."""
    try:
        return list(map(rewrite, messages)), []
    except KeyError:
        pass
    entries: list[dict[str, Any] | None] = []
    raised = []
    for i, message in enumerate(messages):
        try:
            entries.append(rewrite(message))
        except KeyError:
            entries.append(None)
            raised.append(i)
    return entries, raised


def _declared(answered: list[str | None], declares: list[tuple[str, ...]]) -> np.ndarray:
    """Per message: for a tool result naming a call, the latest earlier message declaring it
    (-1: none), else -2."""
    declared = np.full(len(answered), -2, dtype=np.int32)
    last: dict[str, int] = {}
    for i, (call, calls) in enumerate(zip(answered, declares, strict=True)):
        if call is not None:
            declared[i] = last.get(call, -1)
        for declared_call in calls:
            last[declared_call] = i
    return declared


def _entry_declared(
    kept: list[int], answered: list[str | None], declares: list[tuple[str, ...]]
) -> np.ndarray:
    """:func:`_declared` over the replayed entries alone (``kept``: their messages)."""
    declared = np.full(len(kept), -2, dtype=np.int32)
    last: dict[str, int] = {}
    for j, i in enumerate(kept):
        call = answered[i]
        if call is not None:
            declared[j] = last.get(call, -1)
        for declared_call in declares[i]:
            last[declared_call] = j
    return declared


class _Counter:
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
        # ``kept`` are the entries that are not None (see _compute)
        replayed = cast("list[dict[str, Any]]", list(map(entries.__getitem__, kept)))
        contents = message_field(replayed, "content")
        at = np.array(kept, dtype=np.int64)
        own = self._own_fields(replayed, kept)
        ours = map(self.contents.__getitem__, kept)
        same_text = np.fromiter(
            (
                c is m or (type(c) is str and type(m) is str and c == m)
                for c, m in zip(contents, ours, strict=True)
            ),
            dtype=bool,
            count=len(kept),
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


ReplayKey = tuple[str, tuple[Any, ...]]
"""What a replay depends on besides the messages: the policy's name and its entry key."""


def _key(session: Session, policy: str | None, settings: HistorySettings) -> ReplayKey:
    chosen = _policy(session, policy)
    return chosen.name, chosen.entry_key(settings)


def _keys(
    sessions: list[Session], policy: str | None, settings: HistorySettings
) -> list[ReplayKey]:
    """Each session's :func:`_key`, resolved once per release."""
    by_release: dict[str, ReplayKey] = {}
    keys = []
    for session in sessions:
        name = session.policy if policy is None else policy
        if name not in by_release:
            by_release[name] = _key(session, policy, settings)
        keys.append(by_release[name])
    return keys


_SPACE = "replays"
"""This module's space in :mod:`sessionkit.store.memo` (replays by key; the stored counts of
:func:`stored_tokens` by release are in ``"stored counts"``)."""


def _replays(session: Session) -> dict[Any, Any]:
    return memo.slot(session, _SPACE)


# The latest values derived from lists of replays, with those lists (see `derived`).
_DERIVED: list[tuple[list[Replay], Any]] = []


def _forget() -> None:
    _DERIVED.clear()
    _PREPARED.clear()


def _cached(session: Session, key: ReplayKey) -> Replay | None:
    return _replays(session).get(key)


def replay(
    session: Session,
    settings: HistorySettings = DEFAULT_SETTINGS,
    cache: TokenCache | None = DEFAULT_CACHE,
    *,
    policy: str | None = None,
) -> Replay:
    """The session's :class:`Replay` under ``policy`` (default: its own release) and
    ``settings``, from the cache or computed (and cached) now."""
    return replay_all([session], settings, policy=policy, workers=1, progress=False, cache=cache)[0]


def stored_tokens(session: Session, policy: str | None = None) -> np.ndarray:
    """Tokens of each message as stored (what nanobot's file holds) by ``policy``'s estimate
    (default: the session's own release), cached like replays.

    The array is read-only: it is the cached one.
    """
    name = _policy(session, policy).name
    kept = memo.slot(session, "stored counts")
    if name not in kept:
        cache = token_cache_of([session])
        counts = np.array(counts_through(session.messages, cache, policy=name), np.int64)
        counts.flags.writeable = False
        kept[name] = counts
    return kept[name]


def derived(replays: list[Replay], build: Callable[[list[Replay]], T]) -> T:
    """``build(replays)``, reused while asked again for the same replays (the latest few
    lists, so comparing releases does not rebuild each one's)."""
    for before, value in _DERIVED:
        if len(before) == len(replays) and all(map(operator.is_, before, replays)):
            return value
    value = build(replays)
    _DERIVED[:] = [(replays, value), *_DERIVED[: _DERIVED_KEPT - 1]]
    return value


def _derived_name(
    sessions: list[Session], key: ReplayKey, kind: str
) -> tuple[Index, str, str] | None:
    """Where, under which name and for which file versions the index keeps what ``kind``
    derives from these sessions' replays: only for many messages, all in indexed sessions of
    one store, still as indexed.  The name covers the files, the stamp their versions, so a
    change replaces the kept arrays instead of adding more."""
    homes = {s.replay_home if isinstance(s, IndexedSession) else None for s in sessions}
    if len(homes) != 1 or None in homes or sum(map(len, sessions)) < TUNING.persist_min_messages:
        return None
    (index, store) = cast("tuple[Index, str]", homes.pop())  # None is ruled out above
    paths = [os.fsdecode(s.path) for s in sessions]  # type: ignore[arg-type]  # one home: all indexed, each from its file
    versions = [list(s.identity) for s in sessions]  # type: ignore[attr-defined]  # one home: all IndexedSessions, identity set
    name = f"{store}-{kind}-{name_digest(repr((key, paths)))}"
    return index, name, name_digest(repr(versions))


def prepared(
    sessions: list[Session],
    settings: HistorySettings,
    build: Callable[[list[Replay]], T],
    codec: tuple[Callable[[T], dict[str, np.ndarray]], Callable[[dict[str, np.ndarray]], T]],
    *,
    kind: str,
    policy: str,
    workers: int | None = None,
    progress: bool | None = None,
    cache: TokenCache | None = DEFAULT_CACHE,
) -> T:
    """``build`` of the sessions' replays under ``policy`` (see :func:`replay_all`), kept in
    memory and, for indexed sessions of one store, in the index as arrays (``codec``: to and
    from them), so a new process reads it instead of replaying anything."""
    key = (policy, get_policy(policy).entry_key(settings))
    home = _derived_name(sessions, key, kind)
    kept = _kept(home, codec)
    if kept is not None:
        return kept
    replays = replay_all(
        sessions, settings, policy=policy, workers=workers, progress=progress, cache=cache
    )
    value = derived(replays, build)
    if home is not None:
        index, name, stamp = home
        with suppress(OSError, pa.ArrowException):
            index.write_arrays(name, stamp, codec[0](value))
        _remember((name, stamp), value)
    return value


def prepared_each(
    requests: list[tuple[list[Session], HistorySettings, str]],
    build: Callable[[list[Replay]], T],
    codec: tuple[Callable[[T], dict[str, np.ndarray]], Callable[[dict[str, np.ndarray]], T]],
    *,
    kind: str,
    workers: int | None = None,
    progress: bool | None = None,
    cache: TokenCache | None = DEFAULT_CACHE,
    stored: dict[int, np.ndarray] | None = None,
) -> list[T]:
    """:func:`prepared` of each request (sessions, settings, policy), in order; the replays
    none of them keeps yet are computed first in one pass per set of sessions
    (:func:`replay_jobs`), so a grid over releases parses each session once (``stored``: the
    sessions' stored counts by id of the session, see :func:`stored_counts`)."""
    pending: dict[int, list[int]] = {}  # by id of the request's sessions list
    for r, (subset, settings, policy) in enumerate(requests):
        key = (policy, get_policy(policy).entry_key(settings))
        if _kept(_derived_name(subset, key, kind), codec) is None:
            pending.setdefault(id(subset), []).append(r)
    for group in pending.values():
        subset = requests[group[0]][0]
        jobs: list[Job] = [(requests[r][2], requests[r][1]) for r in group]
        own = [stored.get(id(s)) for s in subset] if stored else None
        replay_jobs(subset, jobs, workers=workers, progress=progress, cache=cache, stored=own)
    return [
        prepared(
            subset,
            settings,
            build,
            codec,
            kind=kind,
            policy=policy,
            workers=workers,
            progress=progress,
            cache=cache,
        )
        for subset, settings, policy in requests
    ]


def stored_counts(entries: list[Entry] | None) -> dict[int, np.ndarray]:
    """The exact counts by :data:`STORED_POLICY` a load keeps of each indexed session's
    messages (its entry's ``tokens``, -1: none), by id of the session: only for sessions
    still as indexed, so the counts are those of their messages."""
    found: dict[int, np.ndarray] = {}
    columns: dict[int, np.ndarray] = {}
    for entry in entries or ():
        session = entry.session
        if not isinstance(session, IndexedSession) or not session.pristine:
            continue
        n = entry.meta["n_messages"]
        if entry.span is None:
            counts = entry.table.column("tokens").to_numpy()
        else:
            whole, start = entry.span
            if id(whole) not in columns:
                columns[id(whole)] = whole.column("tokens").to_numpy()
            counts = columns[id(whole)][start : start + n]
        if len(counts) == n == len(session):
            found[id(session)] = counts
    return found


def _kept(
    home: tuple[Index, str, str] | None,
    codec: tuple[Callable[[T], dict[str, np.ndarray]], Callable[[dict[str, np.ndarray]], T]],
) -> T | None:
    """What :func:`prepared` derived and keeps at ``home`` (see :func:`_derived_name`), from
    this process or the index; None when nothing is kept there."""
    if home is None:
        return None
    index, name, stamp = home
    if (name, stamp) in _PREPARED:
        return _PREPARED[name, stamp]
    arrays = index.read_arrays(name, stamp)
    return None if arrays is None else _remember((name, stamp), codec[1](arrays))


_PREPARED: dict[tuple[str, str], Any] = {}
"""What :func:`prepared` derived for indexed sessions, by its name and stamp in the index
(the latest few)."""


memo.on_clear(_forget)


def _remember(name: tuple[str, str], value: T) -> T:
    _PREPARED[name] = value
    while len(_PREPARED) > _DERIVED_KEPT:
        del _PREPARED[next(iter(_PREPARED))]
    return value


def _compute_chunk(indices: list[int]) -> tuple[list[int], list[list[Replay]], list]:
    """In a worker: each session's missing replays, one per job it lacks (its messages
    parsed once for all of them)."""
    sessions, jobs, missing = SHARED["sessions"], SHARED["jobs"], SHARED["missing"]
    delta = ReadThroughCache(SHARED["cache"])
    with no_gc(kept=True):  # the sessions keep their parsed messages
        replays = [
            _compute(
                sessions[i], _targets(sessions[i], jobs, missing[i]), delta, SHARED["stored"][i]
            )
            for i in indices
        ]
    return indices, replays, delta.fresh


def _compute_split(
    session: Session,
    targets: list[Target],
    cache: TokenCache | None,
    stored: np.ndarray | None,
    workers: int,
) -> list[Replay]:
    """:func:`_compute` of one long session by forked workers, each replaying a range of its
    messages: read from the file by each worker when not read yet (the messages then never
    all in memory), else inherited.  Their new token counts join ``cache``."""
    n = len(session)
    if isinstance(session, IndexedSession) and session.streamable:
        bounds = _streamed_bounds(n, workers, len(targets))
        task: Callable[[int, int], tuple[list[_Part], list]] = _compute_streamed
        shared: dict[str, Any] = {"session": session}
    else:
        step = max(1, -(-n // (4 * workers)))
        bounds = [*range(0, n, step), n]
        task = _compute_range
        shared = {"messages": session.messages}
    shared |= {"targets": targets, "cache": cache, "stored": stored}
    parts: list[_Part] = []
    with forked_pool(workers, **shared) as pool:
        futures = [pool.submit(task, a, b) for a, b in zip(bounds, bounds[1:], strict=False)]
        for future in futures:
            found, fresh = future.result()
            if cache is not None and fresh:
                cache.update(*zip(*fresh, strict=True))
            parts.extend(found)
    return _assembled(parts, targets)


def _streamed_bounds(n: int, workers: int, targets: int) -> list[int]:
    """Where the workers' ranges of ``n`` messages start (and the last ends) when each reads
    the file from its start: a range ending further in is shorter, by what reading up to it
    costs.  Replaying a message for one release costs about what parsing it does, so with
    ``r = targets`` and ``q = r / (1 + r)`` range ``j`` ends at ``n (1 - q^j) / (1 - q^w)``,
    which gives every worker the same work."""
    q = targets / (1 + targets)
    ends = [round(n * (1 - q**j) / (1 - q**workers)) for j in range(workers + 1)]
    return sorted(set(ends))


class _RangeRead(Exception):
    """Raised by a worker's sink once it has the messages of its range."""


def _compute_streamed(start: int, stop: int) -> tuple[list[_Part], list]:
    """In a worker: the :class:`_Part` of each batch of messages ``start:stop`` of the
    session shared, read from its file (up to ``stop``) and dropped batch by batch."""
    targets, stored = SHARED["targets"], SHARED["stored"]
    delta = ReadThroughCache(SHARED["cache"])
    parts: list[_Part] = []
    seen = 0

    def sink(messages: list[dict[str, Any]]) -> None:
        nonlocal seen
        low, high = max(start, seen), min(stop, seen + len(messages))
        if low < high:
            ours = None if stored is None else stored[low:high]
            parts.append(_part(messages[low - seen : high - seen], low, targets, delta, ours))
        seen += len(messages)
        if seen >= stop and stop < len(SHARED["session"]):
            raise _RangeRead

    with no_gc(kept=True), suppress(_RangeRead):
        SHARED["session"].stream(sink)
    return parts, delta.fresh


def _compute_range(start: int, stop: int) -> tuple[list[_Part], list]:
    """In a worker: the :class:`_Part` of messages ``start:stop`` of the messages shared."""
    stored = SHARED["stored"]
    delta = ReadThroughCache(SHARED["cache"])
    with no_gc(kept=True):
        part = _part(
            SHARED["messages"][start:stop],
            start,
            SHARED["targets"],
            delta,
            None if stored is None else stored[start:stop],
        )
    return [part], delta.fresh


def _targets(session: Session, jobs: list[Job], wanted: list[int]) -> list[Target]:
    """The release and settings of each job in ``wanted`` for ``session``."""
    return [(_policy(session, jobs[j][0]), jobs[j][1]) for j in wanted]


def _chunks(sizes: list[int], todo: list[int], n_chunks: int) -> list[list[int]]:
    """Split ``todo`` into about ``n_chunks`` groups of similar work (``sizes``)."""
    order = sorted(todo, key=lambda i: -sizes[i])
    groups: list[list[int]] = [[] for _ in range(max(1, n_chunks))]
    loads = [0] * len(groups)
    for i in order:
        lightest = loads.index(min(loads))
        groups[lightest].append(i)
        loads[lightest] += sizes[i] + 1
    return [g for g in groups if g]


def _compute_in_workers(
    sessions: list[Session],
    jobs: list[Job],
    missing: dict[int, list[int]],
    cache: TokenCache | None,
    stored: Sequence[np.ndarray | None],
    chunks: list[list[int]],
    workers: int,
) -> Iterator[tuple[list[int], list[list[Replay]]]]:
    """Replay chunks of sessions in forked workers; their new token counts join ``cache``."""
    shared: dict[str, Any] = {
        "sessions": sessions,
        "jobs": jobs,
        "missing": missing,
        "cache": cache,
        "stored": stored,
    }
    with forked_pool(workers, **shared) as pool:
        futures = [pool.submit(_compute_chunk, chunk) for chunk in chunks]
        for future in as_completed(futures):
            indices, replays, fresh = future.result()
            if cache is not None and fresh:
                cache.update(*zip(*fresh, strict=True))
            yield indices, replays


_PER_MESSAGE = ("is_user", "delivery", "command", "checkpoint", "turn", "declared")
_PER_ENTRY = ("kept", "entry_declared", "tokens")


def _index_name(key: ReplayKey) -> str:
    return f"{key[0]}|{key[1]!r}"


def _homes(sessions: list[Session], todo: list[int]) -> dict[tuple[Index, str], list[int]]:
    """The sessions (by position) whose replays the persistent index keeps, by index and store."""
    homes: dict[tuple[Index, str], list[int]] = {}
    for i in todo:
        session = sessions[i]
        home = session.replay_home if isinstance(session, IndexedSession) else None
        if home is not None:
            homes.setdefault(home, []).append(i)
    return homes


def _stored(sessions: list[Session], keys: list[ReplayKey], todo: list[int]) -> dict[int, Replay]:
    """Replays the persistent index keeps for indexed sessions still as indexed: each pack's
    columns read once, each replay a view into them."""
    found: dict[int, Replay] = {}
    for (index, store), members in _homes(sessions, todo).items():
        by_name: dict[str, list[int]] = {}
        for i in members:
            by_name.setdefault(_index_name(keys[i]), []).append(i)
        for name, group in by_name.items():
            table, items = index.read_replays(store, name)
            columns = {c: table.column(c).to_numpy() for c in (*_PER_MESSAGE, *_PER_ENTRY)}
            for i in group:
                item = items.get(os.fsdecode(sessions[i].path))  # type: ignore[arg-type]  # _homes: indexed sessions only, each from its file
                if item is None or item.identity != sessions[i].identity:  # type: ignore[attr-defined]  # _homes: IndexedSessions only
                    continue
                start, stop = item.start, item.start + item.n_rows
                arrays = {c: columns[c][start:stop] for c in _PER_MESSAGE}
                end = start + item.extra["entries"]
                arrays |= {c: columns[c][start:end] for c in _PER_ENTRY}
                found[i] = Replay(**arrays)
    return found


def _keep(sessions: list[Session], keys: list[ReplayKey], computed: dict[int, Replay]) -> None:
    """Keep computed replays of indexed sessions in the persistent index, one write per store
    and setting (all its replays joined into one table); a cache that cannot be written
    costs speed only."""
    for (index, store), members in _homes(sessions, list(computed)).items():
        by_name: dict[str, list[int]] = {}
        for i in members:
            by_name.setdefault(_index_name(keys[i]), []).append(i)
        for name, group in by_name.items():
            table = _replay_table([computed[i] for i in group])
            items, start = [], 0
            for i in group:
                n, entries = len(computed[i].is_user), len(computed[i].kept)
                path = os.fsdecode(sessions[i].path)  # type: ignore[arg-type]  # _homes: indexed sessions only, each from its file
                identity = sessions[i].identity  # type: ignore[attr-defined]  # _homes: IndexedSessions only, identity set
                items.append(Item(path, identity, {"entries": entries}, None, start, n, table))
                start += n
            with suppress(OSError, pa.ArrowException):
                index.write_replays(store, name, items)


def _replay_table(replays: list[Replay]) -> pa.Table:
    """Replays end to end as :data:`REPLAY_TABLE` rows: each one's per-message columns, and
    its per-entry ones padded with zeros to its message count."""
    sizes = [len(r.is_user) for r in replays]
    starts = np.cumsum([0, *sizes])
    columns = {}
    for column in REPLAY_TABLE:
        dtype = column.type.to_pandas_dtype()
        if column.name in _PER_MESSAGE:
            parts = [getattr(r, column.name) for r in replays]
            columns[column.name] = np.concatenate([*parts, np.zeros(0, dtype)]).astype(
                dtype, copy=False
            )
            continue
        values = np.zeros(int(starts[-1]), dtype=dtype)
        for r, start in zip(replays, starts.tolist(), strict=False):
            part = getattr(r, column.name)
            values[start : start + len(part)] = part
        columns[column.name] = values
    return pa.table(columns, schema=REPLAY_TABLE)


def replay_all(
    sessions: list[Session],
    settings: HistorySettings = DEFAULT_SETTINGS,
    *,
    policy: str | None = None,
    workers: int | None = None,
    progress: bool | None = None,
    cache: TokenCache | None = DEFAULT_CACHE,
) -> list[Replay]:
    """Every session's :class:`Replay`: cached ones reused, the rest computed and cached.

    Parameters
    ----------
    sessions
        The sessions, in the order of the result.
    settings
        The history settings; only those the policy's entries depend on matter
        (``policy.entry_key(settings)``).
    policy
        The release to replay with (default: each session's own).
    workers
        Processes computing the missing replays (default: every core for large batches;
        needs the ``fork`` start method).
    progress
        Show a progress bar (default: for large batches).
    cache
        Token-count cache shared with :func:`sessionkit.count_tokens` (by default that of
        the load the sessions came from: none for ``cache=False``, see
        :func:`~sessionkit.store.counting.token_cache_of`).
    """
    return replay_jobs(
        sessions, [(policy, settings)], workers=workers, progress=progress, cache=cache
    )[0]


Job = tuple[str | None, HistorySettings]
"""A replay asked for: the release (None: each session's own) and the history settings."""


@versions.consistent
def replay_jobs(
    sessions: list[Session],
    jobs: list[Job],
    *,
    workers: int | None = None,
    progress: bool | None = None,
    cache: TokenCache | None = DEFAULT_CACHE,
    stored: Sequence[np.ndarray | None] | None = None,
) -> list[list[Replay]]:
    """:func:`replay_all` of the sessions under each job, in order: what is missing is
    computed in one pass over the sessions, so each session's messages are parsed once for
    every release and setting (a session read back from the index is parsed on first use; a
    long one by each worker, up to the end of its range of messages, keeping none),
    and each replayed entry is counted once per counting rule.  ``stored`` may give each
    session's exact counts of its messages as stored, by :data:`STORED_POLICY` (-1: none;
    None: not known), as its load keeps them; entries equal to their message reuse them."""
    if cache is DEFAULT_CACHE:
        cache = token_cache_of(sessions)
    if stored is None:
        stored = [None] * len(sessions)
    keys = [_keys(sessions, policy, settings) for policy, settings in jobs]
    found: list[list[Replay | None]] = [
        [_cached(s, key) for s, key in zip(sessions, own, strict=True)] for own in keys
    ]
    for own, replays in zip(keys, found, strict=True):
        unknown = [i for i, r in enumerate(replays) if r is None]
        for i, indexed in _stored(sessions, own, unknown).items():
            replays[i] = indexed
            _replays(sessions[i])[own[i]] = indexed
    missing = {
        i: js
        for i in range(len(sessions))
        if (js := [j for j, replays in enumerate(found) if replays[i] is None])
    }
    todo = list(missing)
    sizes = [len(sessions[i]) * len(missing.get(i, ())) for i in range(len(sessions))]
    total = sum(sizes)
    if workers is None:
        workers = (os.cpu_count() or 1) if total >= TUNING.parallel_replay_messages else 1
    show = total >= _AUTO_PROGRESS_MESSAGES if progress is None else progress
    named = ", ".join(dict.fromkeys(get_policy(name).label for own in keys for name, _ in own))
    with tqdm(
        total=total, unit="msg", desc=f"replaying sessions ({named})", disable=not show or not todo
    ) as bar:
        parallel = workers > 1 and can_fork()
        rest = todo
        if parallel:  # a long session is replayed in ranges of messages by every worker
            rest = [i for i in todo if len(sessions[i]) < TUNING.split_messages]
            for i in sorted(set(todo) - set(rest)):
                targets = _targets(sessions[i], jobs, missing[i])
                computed = _compute_split(sessions[i], targets, cache, stored[i], workers)
                for j, r in zip(missing[i], computed, strict=True):
                    found[j][i] = r
                bar.update(sizes[i])
        if not parallel or len(rest) < 2:
            for i in rest:
                targets = _targets(sessions[i], jobs, missing[i])
                with no_gc():
                    computed = _compute(sessions[i], targets, cache, stored[i])
                for j, r in zip(missing[i], computed, strict=True):
                    found[j][i] = r
                bar.update(sizes[i])
        else:
            chunks = _chunks(sizes, rest, max(4 * workers, total // TUNING.replay_chunk_messages))
            for indices, chunk_replays in _compute_in_workers(
                sessions, jobs, missing, cache, stored, chunks, workers
            ):
                for i, computed in zip(indices, chunk_replays, strict=True):
                    for j, r in zip(missing[i], computed, strict=True):
                        found[j][i] = r
                bar.update(sum(sizes[i] for i in indices))
    for j, own in enumerate(keys):
        # every replay missing was computed above
        by_session = cast("dict[int, Replay]", {i: found[j][i] for i in todo if j in missing[i]})
        for i, r in by_session.items():
            _replays(sessions[i])[own[i]] = r
        _keep(sessions, own, by_session)
    if cache is not None and todo:
        cache.flush_soon()
    return cast("list[list[Replay]]", found)  # every replay missing was computed above
