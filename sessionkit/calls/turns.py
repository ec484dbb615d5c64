"""Each session's LLM calls apart from the history, as arrays: the current message's and
every call's step tokens per user turn, and what the next turn's history repeats of the last
call.  Rebuilt and counted once per session, release and kit, then kept in
:mod:`sessionkit.store.memo` for the session as it is now — for a session read back from the
index and unchanged, by file version, so a store loaded again finds them — and a second
:func:`sessionkit.requests` is array arithmetic only.

The current message reads attached image files as they are when it is first rebuilt; call
:func:`sessionkit.store.memo.clear` after changing them.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import as_completed
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from sessionkit.nanobot.kit import Kit
from sessionkit.nanobot.release import ReplayPolicy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS
from sessionkit.store import memo, versions
from sessionkit.store.counting import ReadThroughCache, TokenCache, counts_through, token_cache_of
from sessionkit.store.forked import SHARED, can_fork, forked_pool
from sessionkit.tuning import TUNING

__all__ = ["Item", "SessionCalls", "all_calls"]

Message = dict[str, Any]

_AUTO_PROGRESS_MESSAGES = 20_000


@dataclass(frozen=True, eq=False)
class SessionCalls:
    """One session's calls under one release and kit, per user turn (as the release counts
    turns).

    ``n_steps`` is the number of calls a turn made (0: answered without the model); call
    ``k`` of a turn carries ``steps[step_offsets[t] + k]`` tokens of earlier tool rounds.
    ``tail[tail_offsets[t] + j]`` is the tokens of the first ``j`` messages the turn's last
    call ended with (its current message, then that call's steps), stored from message
    ``at[t]`` on; ``matches[entry][t]`` how many of them lead unchanged into a later history
    replayed under that entry setting (equal as the provider sends them).
    """

    at: np.ndarray
    current: np.ndarray
    inferred: np.ndarray
    """The current message could not be rebuilt (no kit, or a stored form the release would
    not have sent): the stored message stands in for it."""
    n_steps: np.ndarray
    steps: np.ndarray
    step_offsets: np.ndarray
    tail: np.ndarray
    tail_offsets: np.ndarray
    matches: dict[bool, np.ndarray] = field(default_factory=dict)


_Turn = tuple[Message, bool, list[list[Message]]]


def _turns(
    policy: ReplayPolicy, session: Session, kit: Kit | None
) -> tuple[list[int], list[_Turn | None]]:
    """The user turns' positions and, per turn, (current message as sent, whether the stored
    one stands in, steps of each call), None for a turn without a call."""
    messages = session.messages
    positions = [i for i, m in enumerate(messages) if policy.is_user_turn(m)]
    ends = [*positions[1:], len(messages)]
    out: list[_Turn | None] = []
    for at, stop in zip(positions, ends, strict=True):
        steps = policy.turn_steps(messages[at + 1 : stop])
        if not steps:
            out.append(None)
            continue
        current = None
        if kit is not None:
            try:
                current = policy.current_message(kit, messages[at], session.key)
            except ValueError:
                current = None
        inferred = current is None
        out.append((dict(messages[at]) if current is None else current, inferred, steps))
    return positions, out


def _is_prefix(part: list[Message], whole: list[Message]) -> bool:
    return part == whole[: len(part)]


def _build(
    policy: ReplayPolicy,
    session: Session,
    kit: Kit | None,
    entries: Sequence[bool],
    cache: TokenCache | None,
) -> SessionCalls:
    positions, turns = _turns(policy, session, kit)
    batch: list[Message] = []
    for turn in turns:
        if turn is not None:
            current, _, steps = turn
            batch += [current, *steps[-1]]
            batch += [m for step in steps if not _is_prefix(step, steps[-1]) for m in step]
    counts = iter(counts_through(batch, cache, workers=1, policy=policy.name))
    current_tokens, inferred, n_steps, steps_tokens, tails = [], [], [], [], []
    for turn in turns:
        if turn is None:
            current_tokens.append(0)
            inferred.append(False)
            n_steps.append(0)
            tails.append([0])
            continue
        _, stands_in, steps = turn
        last = steps[-1]
        sent = [next(counts) for _ in range(1 + len(last))]
        tail = [0, *itertools.accumulate(sent)]
        for step in steps:
            if _is_prefix(step, last):
                steps_tokens.append(tail[1 + len(step)] - tail[1])
            else:
                steps_tokens.append(sum(next(counts) for _ in step))
        current_tokens.append(sent[0])
        inferred.append(stands_in)
        n_steps.append(len(steps))
        tails.append(tail)
    return SessionCalls(
        at=np.array(positions, dtype=np.int64),
        current=np.array(current_tokens, dtype=np.int64),
        inferred=np.array(inferred, dtype=bool),
        n_steps=np.array(n_steps, dtype=np.int64),
        steps=np.array(steps_tokens, dtype=np.int64),
        step_offsets=_offsets(n_steps),
        tail=np.array([t for tail in tails for t in tail], dtype=np.int64),
        tail_offsets=_offsets([len(t) for t in tails]),
        matches={e: _matches(policy, kit, session, positions, turns, e) for e in entries},
    )


def _offsets(sizes: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)


def _matches(
    policy: ReplayPolicy,
    kit: Kit | None,
    session: Session,
    positions: list[int],
    turns: list[_Turn | None],
    entry: bool,
) -> np.ndarray:
    """Per turn: how many leading messages of its last call (current message, then steps),
    each replayed from the stored line at its position under ``entry``, are equal on the
    wire to what was sent (a line the release cannot rewrite or send ends the run)."""
    rewrite = policy.entry_function(DEFAULT_SETTINGS.replace(**{policy.entry_setting: entry}))
    wire: Callable[[Message], Any] = (
        (lambda m: m) if kit is None else (lambda m: policy.wire_messages(kit, [m]))
    )
    messages = session.messages
    out = np.zeros(len(positions), dtype=np.int64)
    for t, (at, turn) in enumerate(zip(positions, turns, strict=True)):
        if turn is None:
            continue
        current, _, steps = turn
        for j, sent in enumerate([current, *steps[-1]]):
            try:
                replayed = rewrite(messages[at + j])
                same = replayed is not None and (replayed == sent or wire(replayed) == wire(sent))
            except (KeyError, ValueError):
                same = False
            if not same:
                break
            out[t] = j + 1
    return out


_SPACE = "calls"
"""This module's space in :mod:`sessionkit.store.memo` (shared by every load of an indexed file
version)."""


def _kept(session: Session) -> dict[tuple[str, str, str | None], SessionCalls]:
    return memo.slot(session, _SPACE, shared=True)


Item = tuple[ReplayPolicy, Session, Kit | None, str | None, Sequence[bool]]
"""What :func:`all_calls` builds for: release, session, kit, the kit's digest (what names its
content) and the entry settings whose ``matches`` are wanted."""


def _key(item: Item) -> tuple[str, str, str | None]:
    return item[0].name, item[1].key, item[3]


def _complete(item: Item, calls: SessionCalls) -> SessionCalls:
    """``calls`` with ``matches`` for every entry setting the item wants."""
    policy, session, kit, _, entries = item
    missing = [e for e in entries if e not in calls.matches]
    if missing:
        positions, turns = _turns(policy, session, kit)
        for entry in missing:
            calls.matches[entry] = _matches(policy, kit, session, positions, turns, entry)
    return calls


def _build_chunk(indices: list[int]) -> tuple[list[int], list[SessionCalls], list]:
    items: list[Item] = SHARED["items"]  # all_calls's items, shared with the forked workers
    delta = ReadThroughCache(SHARED["cache"])
    return indices, [_build(*items[i][:3], items[i][4], delta) for i in indices], delta.fresh


def _chunks(sizes: list[int], todo: list[int], n_chunks: int) -> list[list[int]]:
    """``todo`` in about ``n_chunks`` contiguous groups of similar message counts."""
    bounds = np.cumsum([sizes[i] for i in todo])
    cut = np.searchsorted(bounds, np.linspace(0, bounds[-1], n_chunks + 1)[1:-1], side="right")
    return [g.tolist() for g in np.split(np.array(todo), cut) if len(g)]


@versions.consistent
def all_calls(
    items: list[Item], *, workers: int | None = None, progress: bool | None = None
) -> list[SessionCalls]:
    """Each item's calls: kept ones reused, the rest built and kept, in ``workers`` forked
    processes (default: every core for large batches; none inside a Dask worker), with a
    progress bar (default: for large batches)."""
    found = [_kept(item[1]).get(_key(item)) for item in items]
    todo = [i for i, calls in enumerate(found) if calls is None]
    sizes = [len(item[1]) for item in items]
    total = sum(sizes[i] for i in todo)
    if workers is None:
        workers = (os.cpu_count() or 1) if total >= TUNING.parallel_replay_messages else 1
    cache = token_cache_of([items[i][1] for i in todo])
    show = total >= _AUTO_PROGRESS_MESSAGES if progress is None else progress
    with tqdm(total=total, unit="msg", desc="rebuilding calls", disable=not show) as bar:
        if workers <= 1 or len(todo) < 2 or not can_fork():
            for i in todo:
                found[i] = _build(*items[i][:3], items[i][4], cache)
                bar.update(sizes[i])
        else:
            chunks = _chunks(sizes, todo, 4 * workers)
            with forked_pool(workers, items=items, cache=cache) as pool:
                for job in as_completed([pool.submit(_build_chunk, c) for c in chunks]):
                    indices, built, fresh = job.result()
                    if cache is not None and fresh:
                        cache.update(*zip(*fresh, strict=True))
                    for i, calls in zip(indices, built, strict=True):
                        found[i] = calls
                    bar.update(sum(sizes[i] for i in indices))
    for i in todo:
        _kept(items[i][1])[_key(items[i])] = found[i]  # type: ignore[assignment]  # each todo entry was built above: not None
    if cache is not None and todo:
        cache.flush_soon()
    return [_complete(item, calls) for item, calls in zip(items, found, strict=True)]  # type: ignore[arg-type]  # no None left in found: the todo entries were built
