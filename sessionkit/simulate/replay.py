"""Each session's messages rewritten and counted once: the cache windows, states and testing share.

A :class:`Replay` holds what every fast path needs from one session under one release's
policy and the settings its replayed entries depend on (``policy.entry_key(settings)``: 0.2.2's
``include_timestamps``, 0.3.x's ``include_runtime_context``): the replayed entries' source
indices and token counts (that release's estimate), and the per-message flags the window rules
read.  :func:`replay` and :func:`replay_all` compute it (in forked workers for large corpora)
and keep it in :mod:`sessionkit.store.memo`, keyed by ``(policy name, entry key)``, for the
session as it is now (any edit, in place or not, makes them computed again).  Sessions read
back from the persistent index (:class:`~sessionkit.store.index.IndexedSession`) also find
their replays there, kept per store and setting for the file versions indexed, and
:func:`prepared` keeps what is derived from a large store's replays (the windows' stacked
arrays): a new process then replays nothing.

Replaying a session for several releases at once (:func:`replay_jobs`) reads its messages
once and counts each replayed entry once per counting rule: an entry holding its message's
own fields takes the count the load keeps for the message when that count is for the same
rule (:func:`stored_counts`), and releases sharing a rule share the counts of equal entries.
Workers take whole sessions, or ranges of the messages of a long one (``TUNING.split_messages``).

This module holds the entry points; the work is in ``replay_compute`` (one session's replays),
``replay_counts`` (their token counts), ``replay_memo`` (kept in memory), ``replay_store``
(kept in the index) and ``replay_workers`` (here or in forked workers).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar, cast

import numpy as np
from tqdm.auto import tqdm

from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings
from sessionkit.simulate import replay_memo, replay_store, replay_workers
from sessionkit.simulate.replay_compute import (
    UNREPLAYABLE,
    Job,
    Replay,
    policy_for,
    replay_keys,
)
from sessionkit.simulate.replay_counts import STORED_POLICY
from sessionkit.simulate.replay_memo import derived
from sessionkit.store import memo, versions
from sessionkit.store.counting import DEFAULT_CACHE, TokenCache, counts_through, token_cache_of
from sessionkit.store.frames import Entry
from sessionkit.store.index import IndexedSession

__all__ = [
    "STORED_POLICY",
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
    name = policy_for(session, policy).name
    kept = memo.slot(session, "stored counts")
    if name not in kept:
        cache = token_cache_of([session])
        counts = np.array(counts_through(session.messages, cache, policy=name), np.int64)
        counts.flags.writeable = False
        kept[name] = counts
    return kept[name]


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
    home = replay_store.derived_home(sessions, key, kind)
    kept = _kept(home, codec)
    if kept is not None:
        return kept
    replays = replay_all(
        sessions, settings, policy=policy, workers=workers, progress=progress, cache=cache
    )
    value = derived(replays, build)
    if home is not None:
        replay_store.write_derived(home, codec[0](value))
        replay_memo.keep_prepared(home[1:], value)
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
        if _kept(replay_store.derived_home(subset, key, kind), codec) is None:
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
    home: replay_store.DerivedHome | None,
    codec: tuple[Callable[[T], dict[str, np.ndarray]], Callable[[dict[str, np.ndarray]], T]],
) -> T | None:
    """What :func:`prepared` derived and keeps at ``home`` (see
    :func:`~sessionkit.simulate.replay_store.derived_home`), from this process or the index;
    None when nothing is kept there."""
    if home is None:
        return None
    name = home[1:]
    found = replay_memo.kept_prepared(name)
    if found is not None:
        return cast("T", found)
    arrays = replay_store.read_derived(home)
    return None if arrays is None else replay_memo.keep_prepared(name, codec[1](arrays))


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
    keys = [replay_keys(sessions, policy, settings) for policy, settings in jobs]
    found: list[list[Replay | None]] = [
        [replay_memo.cached(s, key) for s, key in zip(sessions, own, strict=True)] for own in keys
    ]
    for own, replays in zip(keys, found, strict=True):
        unknown = [i for i, r in enumerate(replays) if r is None]
        for i, indexed in replay_store.read_replays(sessions, own, unknown).items():
            replays[i] = indexed
            replay_memo.remember(sessions[i], own[i], indexed)
    missing = {
        i: js
        for i in range(len(sessions))
        if (js := [j for j, replays in enumerate(found) if replays[i] is None])
    }
    todo = list(missing)
    sizes = [len(sessions[i]) * len(missing.get(i, ())) for i in range(len(sessions))]
    total = sum(sizes)
    show = total >= _AUTO_PROGRESS_MESSAGES if progress is None else progress
    named = ", ".join(dict.fromkeys(get_policy(name).label for own in keys for name, _ in own))
    with tqdm(
        total=total, unit="msg", desc=f"replaying sessions ({named})", disable=not show or not todo
    ) as bar:
        for indices, batch in replay_workers.compute_missing(
            sessions, jobs, missing, sizes, cache, stored, workers
        ):
            for i, computed in zip(indices, batch, strict=True):
                for j, r in zip(missing[i], computed, strict=True):
                    found[j][i] = r
            bar.update(sum(sizes[i] for i in indices))
    for j, own in enumerate(keys):
        # every replay missing was computed above
        by_session = cast("dict[int, Replay]", {i: found[j][i] for i in todo if j in missing[i]})
        for i, r in by_session.items():
            replay_memo.remember(sessions[i], own[i], r)
        replay_store.write_replays(sessions, own, by_session)
    if cache is not None and todo:
        cache.flush_soon()
    return cast("list[list[Replay]]", found)  # every replay missing was computed above
