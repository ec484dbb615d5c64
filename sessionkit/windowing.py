"""Replay windows as data: what nanobot 0.2 sends the model at each turn, for a grid of settings.

The window "at" message index ``e`` is ``get_history`` of the session cut to ``messages[:e]``,
which is what nanobot's agent loop computes when the message at ``e`` arrives (it reads the
history before storing the new message).  Computing it by calling the exact policy once per
turn and setting re-tokenizes every window.  Here each message is rewritten and counted once;
windows then come from index arithmetic on whole-corpus arrays:

- count window, user-turn alignment and the ``extend_to_user`` recovery: next/previous
  user-message indices by ``searchsorted``;
- the orphan-tool rule: for each window start, the next tool result that would be an orphan
  (a sparse-table search), then jump tables over those orphan chains, so the legal start of
  any slice is a few array lookups;
- the token budget: prefix sums of the rewritten entries' counts, searched from the tail,
  then the same user-turn and orphan rules on the replayed entries.

:mod:`sessionkit.nanobot.policies` is the ground truth; the tests check every window against it.
"""

from __future__ import annotations

import itertools
import multiprocessing
import operator
import os
import weakref
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from sessionkit.counting import DEFAULT_CACHE, TokenCache, count_tokens
from sessionkit.nanobot.policies import DEFAULT_POLICY, get_policy, tool_call_ids, tool_result_id
from sessionkit.nanobot.session import Session
from sessionkit.schema import WINDOWS

__all__ = ["WINDOWS", "clear_cache", "prepared_cache_size", "windows"]

At = Literal["every_user_turn", "end"] | Sequence[int]
Offset = Literal["recorded", "none"] | int


_CUTS = ["none", "consolidation", "count", "orphan", "tokens"]
_AUTO_PARALLEL_MESSAGES = 50_000
_AUTO_PROGRESS_MESSAGES = 20_000
_CHUNK_MESSAGES = 5_000


@dataclass(frozen=True)
class _Prepared:
    """One session's per-message facts for one ``include_timestamps`` value.

    ``declared`` (per message) and ``entry_declared`` (per replayed entry) hold, for a tool
    result naming a call, the index of the latest assistant message declaring it (-1: none);
    -2 for every other message.  ``command`` flags user messages marked ``_command``.
    ``kept`` are the source indices of replayed entries and ``tokens`` their counts.
    """

    is_user: np.ndarray
    delivery: np.ndarray
    command: np.ndarray
    declared: np.ndarray
    kept: np.ndarray
    entry_declared: np.ndarray
    tokens: np.ndarray


class _DeltaCache(TokenCache):
    """A token cache that reads through to ``base`` and keeps its own new counts apart."""

    def __init__(self, base: TokenCache | None) -> None:
        super().__init__()
        self.base = base
        self.fresh: list[tuple[int, int]] = []

    def get(self, key: int) -> int | None:
        hit = self.base.get(key) if self.base is not None else None
        return hit if hit is not None else super().get(key)

    def update(self, keys: Iterable[int], counts: Iterable[int]) -> None:
        pairs = list(zip(keys, counts, strict=True))
        super().update((d for d, _ in pairs), (c for _, c in pairs))
        self.fresh.extend(pairs)


def _prepare(messages: list[dict[str, Any]], stamps: bool, cache: TokenCache | None) -> _Prepared:
    """Rewrite and count every message once; record what the window rules need."""
    policy = get_policy(DEFAULT_POLICY)
    declared = [-2] * len(messages)
    kept: list[int] = []
    entry_declared: list[int] = []
    entries: list[dict[str, Any]] = []
    last_declared: dict[str, int] = {}
    last_entry_declared: dict[str, int] = {}
    for i, message in enumerate(messages):
        entry = policy.replay_entry(message, stamps)
        role = message.get("role")
        answered = tool_result_id(message) if role == "tool" else None
        if answered is not None:
            declared[i] = last_declared.get(answered, -1)
        if entry is not None:
            entry_declared.append(-2 if answered is None else last_entry_declared.get(answered, -1))
            kept.append(i)
            entries.append(entry)
        if role == "assistant":
            for call in tool_call_ids(message):
                last_declared[call] = i
                if entry is not None:
                    last_entry_declared[call] = len(entries) - 1
    is_user = np.array([m.get("role") == "user" for m in messages], dtype=bool)
    return _Prepared(
        is_user=is_user,
        delivery=np.array([bool(m.get("_channel_delivery")) for m in messages], dtype=bool),
        command=is_user & np.array([bool(m.get("_command")) for m in messages], dtype=bool),
        declared=np.array(declared, dtype=np.int32),
        kept=np.array(kept, dtype=np.int32),
        entry_declared=np.array(entry_declared, dtype=np.int32),
        tokens=np.array(count_tokens(entries, cache=cache, workers=1), dtype=np.int64),
    )


# Prepared arrays by (id(session), include_timestamps).  An entry is valid while the session
# object is alive and still holds the same messages list (kept here, so its id cannot be
# reused) with the same length; it is dropped when the session is garbage-collected.
_PREPARED: dict[tuple[int, bool], tuple[weakref.ref, list, int, _Prepared]] = {}


def clear_cache() -> None:
    """Forget every session's prepared arrays (needed after editing messages in place)."""
    _PREPARED.clear()
    _LAST_STACK.clear()


def prepared_cache_size() -> int:
    """How many (session, include_timestamps) preparations are cached."""
    return len(_PREPARED)


def _cached(session: Session, stamps: bool) -> _Prepared | None:
    hit = _PREPARED.get((id(session), stamps))
    if hit is None:
        return None
    ref, messages, length, prepared = hit
    if ref() is session and messages is session.messages and length == len(messages):
        return prepared
    return None


def _remember(session: Session, stamps: bool, prepared: _Prepared) -> None:
    key = (id(session), stamps)

    def forget(_: weakref.ref, key: tuple[int, bool] = key) -> None:
        _PREPARED.pop(key, None)

    ref = weakref.ref(session, forget)
    _PREPARED[key] = (ref, session.messages, len(session.messages), prepared)


# Shared with forked workers: the sessions, include_timestamps and the parent's token cache.
_SHARED: dict[str, Any] = {}


def _prepare_chunk(indices: list[int]) -> tuple[list[int], list[_Prepared], list]:
    sessions, stamps, base = _SHARED["sessions"], _SHARED["stamps"], _SHARED["cache"]
    delta = _DeltaCache(base)
    prepared = [_prepare(sessions[i].messages, stamps, delta) for i in indices]
    return indices, prepared, delta.fresh


def _chunks(sizes: list[int], todo: list[int], n_chunks: int) -> list[list[int]]:
    """Split ``todo`` into about ``n_chunks`` groups of similar message counts."""
    order = sorted(todo, key=lambda i: -sizes[i])
    groups: list[list[int]] = [[] for _ in range(max(1, n_chunks))]
    loads = [0] * len(groups)
    for i in order:
        lightest = loads.index(min(loads))
        groups[lightest].append(i)
        loads[lightest] += sizes[i] + 1
    return [g for g in groups if g]


def _fork_context() -> multiprocessing.context.BaseContext | None:
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return None


def _prepare_in_workers(
    sessions: list[Session],
    stamps: bool,
    cache: TokenCache | None,
    chunks: list[list[int]],
    workers: int,
    context: multiprocessing.context.BaseContext,
) -> Iterator[tuple[list[int], list[_Prepared]]]:
    """Prepare chunks of sessions in forked workers; their new token counts join ``cache``."""
    _SHARED.update(sessions=sessions, stamps=stamps, cache=cache)
    try:
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            jobs = [pool.submit(_prepare_chunk, chunk) for chunk in chunks]
            for job in as_completed(jobs):
                indices, prepared, fresh = job.result()
                if cache is not None and fresh:
                    cache.update(*zip(*fresh, strict=True))
                yield indices, prepared
    finally:
        _SHARED.clear()


def _prepare_all(
    sessions: list[Session],
    stamps: bool,
    *,
    workers: int | None,
    progress: bool | None,
    cache: TokenCache | None,
) -> list[_Prepared]:
    """Prepared arrays for every session: cached ones reused, the rest computed (in parallel)."""
    found = [_cached(s, stamps) for s in sessions]
    todo = [i for i, p in enumerate(found) if p is None]
    sizes = [len(s.messages) for s in sessions]
    total = sum(sizes[i] for i in todo)
    if workers is None:
        workers = (os.cpu_count() or 1) if total >= _AUTO_PARALLEL_MESSAGES else 1
    context = _fork_context()
    show = total >= _AUTO_PROGRESS_MESSAGES if progress is None else progress
    label = f"preparing (include_timestamps={stamps})"
    with tqdm(total=total, unit="msg", desc=label, disable=not show or not todo) as bar:
        if workers <= 1 or context is None or len(todo) < 2:
            for i in todo:
                found[i] = _prepare(sessions[i].messages, stamps, cache)
                bar.update(sizes[i])
        else:
            chunks = _chunks(sizes, todo, max(4 * workers, total // _CHUNK_MESSAGES))
            for indices, prepared in _prepare_in_workers(
                sessions, stamps, cache, chunks, workers, context
            ):
                for i, p in zip(indices, prepared, strict=True):
                    found[i] = p
                bar.update(sum(sizes[i] for i in indices))
    for i in todo:
        _remember(sessions[i], stamps, found[i])
    return found  # type: ignore[return-value]


def _orphan_jumps(tools: np.ndarray, lowest: np.ndarray, size: int) -> list[np.ndarray]:
    """Jump tables over window starts ``0..size`` for the orphan-tool rule.

    A tool result at ``tools[i]`` is an orphan for a window whose declarations start at
    ``w`` when ``lowest[i] <= w <= tools[i]`` (its call was declared before ``w``, or never).
    Level 0 maps ``w`` to the start after the first such orphan (``size + 1`` when there is
    none); level ``k`` jumps ``2**k`` orphans.
    """
    end = size + 1
    starts = np.arange(size + 1)
    step0 = np.full(size + 2, end, dtype=np.int64)
    if len(tools):
        # First candidate at or after w whose `lowest` is <= w: skip runs of candidates whose
        # `lowest` exceeds w, using a sparse table of range minima.
        minima = [lowest]
        span = 1
        while 2 * span <= len(tools):
            minima.append(np.minimum(minima[-1][:-span], minima[-1][span:]))
            span *= 2
        pos = np.searchsorted(tools, starts)
        for level in range(len(minima) - 1, -1, -1):
            width = 1 << level
            fits = pos + width <= len(tools)
            block_min = minima[level][np.where(fits, pos, 0)]
            pos = pos + width * (fits & (block_min > starts))
        found = pos < len(tools)
        step0[: size + 1] = np.where(found, tools[np.minimum(pos, len(tools) - 1)] + 1, end)
    jumps = [step0]
    while (jumps[-1][: size + 1] != end).any() and len(jumps) <= size.bit_length():
        jumps.append(jumps[-1][jumps[-1]])
    return jumps


def _legal_start(jumps: list[np.ndarray], start: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """``start + find_legal_message_start(seq[start:stop])`` for arrays of slices."""
    at = start
    for table in reversed(jumps):
        ahead = table[at]
        at = np.where(ahead <= stop, ahead, at)
    return at


@dataclass(frozen=True)
class _Stack:
    """Every session's prepared arrays laid end to end, indexed globally."""

    offsets: np.ndarray  # first message of each session (length n_sessions + 1)
    is_user: np.ndarray
    delivery: np.ndarray  # padded with two False entries
    command: np.ndarray  # user message flagged _command, padded with one False entry
    users: np.ndarray  # global indices of user messages
    raw_jumps: list[np.ndarray]
    rank: np.ndarray  # replayed entries before each message (length n + 1)
    kept: np.ndarray  # source index of each entry, then one sentinel
    entry_user: np.ndarray  # per entry, then one False sentinel
    entry_users: np.ndarray  # entry indices of user entries
    entry_jumps: list[np.ndarray]
    prefix: np.ndarray  # token prefix sums over entries (length n_entries + 1)


# The last stack built, with the prepared arrays it was built from (reused while identical).
_LAST_STACK: list[tuple[list[_Prepared], _Stack]] = []


def _stacked(prepared: list[_Prepared]) -> _Stack:
    """``_stack(prepared)``, reusing the previous result for the same prepared arrays."""
    if _LAST_STACK:
        before, stack = _LAST_STACK[0]
        if len(before) == len(prepared) and all(map(operator.is_, before, prepared)):
            return stack
    stack = _stack(prepared)
    _LAST_STACK[:] = [(prepared, stack)]
    return stack


def _global_declared(declared: np.ndarray, owner_start: np.ndarray) -> np.ndarray:
    """Per-session declaration indices made global; 'never declared' becomes start - 1."""
    return np.where(declared >= 0, declared + owner_start, owner_start - 1)


def _stack(prepared: list[_Prepared]) -> _Stack:
    sizes = np.array([len(p.is_user) for p in prepared], dtype=np.int64)
    entry_sizes = np.array([len(p.kept) for p in prepared], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    entry_offsets = np.concatenate([[0], np.cumsum(entry_sizes)])
    n, n_entries = int(offsets[-1]), int(entry_offsets[-1])

    def cat(name: str, dtype: type) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in prepared] + [np.zeros(0, dtype)])

    is_user = cat("is_user", bool)
    declared = cat("declared", np.int64)
    kept = cat("kept", np.int64) + np.repeat(offsets[:-1], entry_sizes)
    entry_declared = cat("entry_declared", np.int64)
    tools = np.flatnonzero(declared != -2)
    lowest = _global_declared(declared[tools], np.repeat(offsets[:-1], sizes)[tools]) + 1
    entry_tools = np.flatnonzero(entry_declared != -2)
    entry_lowest = (
        _global_declared(
            entry_declared[entry_tools], np.repeat(entry_offsets[:-1], entry_sizes)[entry_tools]
        )
        + 1
    )
    keep_mask = np.zeros(n, dtype=np.int64)
    keep_mask[kept] = 1
    entry_user = np.append(is_user[kept], False)
    return _Stack(
        offsets=offsets,
        is_user=is_user,
        delivery=np.append(cat("delivery", bool), [False, False]),
        command=np.append(cat("command", bool), False),
        users=np.flatnonzero(is_user),
        raw_jumps=_orphan_jumps(tools, lowest, n),
        rank=np.concatenate([[0], np.cumsum(keep_mask)]),
        kept=np.append(kept, n),
        entry_user=entry_user,
        entry_users=np.flatnonzero(entry_user[:-1]),
        entry_jumps=_orphan_jumps(entry_tools, entry_lowest, n_entries),
        prefix=np.concatenate([[0], np.cumsum(cat("tokens", np.int64))]),
    )


def _next(positions: np.ndarray, at: np.ndarray, none: int) -> np.ndarray:
    """First of ``positions`` at or after each ``at`` (``none`` when there is none)."""
    return np.append(positions, none)[np.searchsorted(positions, at)]


def _previous(positions: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Last of ``positions`` before each ``at`` (-1 when there is none)."""
    return np.concatenate([[-1], positions])[np.searchsorted(positions, at)]


@dataclass(frozen=True)
class _Queries:
    """The windows to compute for one offset setting: where, and from which offset."""

    at: np.ndarray  # global message index
    first: np.ndarray  # global index of the session's first message
    consolidated: np.ndarray  # global index where the unconsolidated tail starts


def _positions(sessions: list[Session], stack: _Stack, at: At) -> tuple[np.ndarray, np.ndarray]:
    """(session number, global message index) of every window asked for by ``at``."""
    sizes = np.diff(stack.offsets)
    if isinstance(at, str) and at == "every_user_turn":
        owner = np.searchsorted(stack.offsets, stack.users, side="right") - 1
        return owner, stack.users
    if isinstance(at, str) and at == "end":
        return np.arange(len(sessions)), stack.offsets[1:]
    if isinstance(at, str):
        raise ValueError(f"at must be 'every_user_turn', 'end' or message indices, not {at!r}")
    wanted = np.unique(np.asarray(list(at), dtype=np.int64))
    inside = (wanted[None, :] >= 0) & (wanted[None, :] <= sizes[:, None])
    owner, column = np.nonzero(inside)
    return owner, stack.offsets[owner] + wanted[column]


def _offset_label(offset: Offset) -> str:
    return offset if isinstance(offset, str) else str(offset)


def _queries(
    sessions: list[Session], stack: _Stack, owner: np.ndarray, at: np.ndarray, offset: Offset
) -> _Queries:
    """Per window, the offset in force, as nanobot would hold it for ``messages[:at]``.

    ``"recorded"`` uses the session's stored ``last_consolidated`` while it lies within the
    prefix and 0 beyond it (nanobot resets an offset past the end of the messages, as a fork
    before that turn would); ``"none"`` is 0; an int is used the same way as a recorded one.
    """
    first = stack.offsets[owner]
    if offset == "recorded":
        wanted = np.array([s.last_consolidated for s in sessions], dtype=np.int64)[owner]
    elif offset == "none":
        wanted = np.zeros(len(owner), dtype=np.int64)
    elif isinstance(offset, int) and not isinstance(offset, bool):
        wanted = np.full(len(owner), offset, dtype=np.int64)
    else:
        raise ValueError(f"last_consolidated must be 'recorded', 'none' or an int, not {offset!r}")
    valid = (wanted >= 0) & (wanted <= at - first)
    return _Queries(at, first, first + np.where(valid, wanted, 0))


def _count_window(
    stack: _Stack, q: _Queries, max_messages: int, extend: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start of the count window (after ``extend_to_user``), its user-aligned start, and the
    legal start (past any orphan tool result)."""
    count = max_messages if max_messages > 0 else get_policy(DEFAULT_POLICY).default_max_messages
    start = np.maximum(q.consolidated, q.at - count)
    if extend:
        beyond = len(stack.is_user) + 1
        no_user = _next(stack.users, start, beyond) >= q.at
        earlier = _previous(stack.users, start)
        recover = no_user & (earlier >= q.consolidated)
        via_delivery = (earlier > q.consolidated) & stack.delivery[np.maximum(earlier - 1, 0)]
        start = np.where(recover, earlier - via_delivery, start)
    first_user = _next(stack.users, start, len(stack.is_user) + 1)
    has_user = first_user < q.at
    via_delivery = (first_user > start) & stack.delivery[np.maximum(first_user - 1, 0)]
    aligned = np.where(has_user, first_user - via_delivery, start)
    return start, aligned, _legal_start(stack.raw_jumps, aligned, q.at)


def _budget(
    stack: _Stack, lo: np.ndarray, hi: np.ndarray, max_tokens: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """First kept entry under a token budget, whether the budget cut, whether it recovered."""
    any_entry = hi > lo
    if max_tokens <= 0:
        no = np.zeros(len(lo), dtype=bool)
        return lo, no, no
    fits = np.searchsorted(stack.prefix, stack.prefix[hi] - max_tokens)
    fits = np.clip(fits, lo, np.maximum(hi - 1, lo))
    user_after = _next(stack.entry_users, fits, len(stack.entry_user) + 1)
    has_user = user_after < hi
    user_before = _previous(stack.entry_users, fits)
    recovered = any_entry & ~has_user & (user_before >= lo)
    start = np.where(has_user, user_after, np.where(recovered, user_before, fits))
    first = np.where(any_entry, _legal_start(stack.entry_jumps, start, hi), lo)
    return first, (fits > lo) & (first > lo), recovered


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _as_sessions(source: Session | Iterable[Session]) -> list[Session]:
    sessions = [source] if isinstance(source, Session) else list(source)
    for session in sessions:
        if session.policy != DEFAULT_POLICY:
            raise ValueError(
                f"windows() reproduces {DEFAULT_POLICY!r}; session {session.key!r} uses "
                f"{session.policy!r} (use its get_history instead)"
            )
    return sessions


def windows(
    source: Session | Iterable[Session],
    *,
    max_messages: int | Sequence[int] = 120,
    max_tokens: int | Sequence[int] = 0,
    include_timestamps: bool | Sequence[bool] = False,
    extend_to_user: bool | Sequence[bool] = False,
    at: At = "every_user_turn",
    last_consolidated: Offset | Sequence[Offset] = "recorded",
    workers: int | None = None,
    progress: bool | None = None,
    cache: TokenCache | None = DEFAULT_CACHE,
) -> pd.DataFrame:
    """One row per (session, turn, setting): the history nanobot replays there, and why.

    nanobot 0.2.2's agent calls ``get_history(120, max_tokens=context_window -
    max_output_tokens - 1024, include_timestamps=True)``; the defaults here are
    ``get_history``'s own.  Every setting accepts a list and the frame covers the whole grid
    (columns: :data:`sessionkit.schema.WINDOWS`).  Each window equals
    ``Session.get_history`` of the session cut at ``at``; windows of one setting form one
    block of rows.  The file cap is not applied here (sessions as stored); see
    :func:`sessionkit.file_cap` for what it would trim and :func:`sessionkit.message_states`
    for one turn with the cap applied.

    Parameters
    ----------
    source
        A Session, a Corpus or any iterable of Sessions.
    max_messages, max_tokens, include_timestamps, extend_to_user
        ``get_history``'s settings, each a value or a list of values.
    at
        ``"every_user_turn"`` (before each user message is stored), ``"end"`` (the history
        the next message would get) or a list of message indices (beyond a session's length:
        skipped).
    last_consolidated
        ``"recorded"`` (the stored offset where it lies within the prefix, else 0),
        ``"none"`` (0) or an int used the same way; or a list of these.
    workers
        Processes preparing the sessions (default: every core for large sweeps, needs the
        ``fork`` start method).  Prepared sessions are cached and not prepared again.
    progress
        Show a progress bar (default: for large sweeps).
    cache
        Token-count cache shared with :func:`sessionkit.count_tokens`.
    """
    sessions = _as_sessions(source)
    stamps_grid = [bool(v) for v in _as_list(include_timestamps)]
    offsets = _as_list(last_consolidated)
    labels = list(dict.fromkeys(_offset_label(o) for o in offsets))
    settings = list(itertools.product(_as_list(max_messages), _as_list(extend_to_user)))
    budgets = [int(b) for b in _as_list(max_tokens)]
    keys = [s.key for s in sessions]
    categories = list(dict.fromkeys(keys))
    code_of = {key: i for i, key in enumerate(categories)}
    session_codes = np.array([code_of[k] for k in keys], dtype=np.int64)
    blocks: list[dict[str, Any]] = []
    for stamps in dict.fromkeys(stamps_grid):
        prepared = _prepare_all(sessions, stamps, workers=workers, progress=progress, cache=cache)
        stack = _stacked(prepared)
        owner, at_index = _positions(sessions, stack, at)
        fixed = {
            "session_key": session_codes[owner],
            "turn": np.searchsorted(stack.users, at_index)
            - np.searchsorted(stack.users, stack.offsets[owner]),
            "at": at_index - stack.offsets[owner],
            "command": stack.command[at_index],
            "include_timestamps": stamps,
        }
        for offset in offsets:
            q = _queries(sessions, stack, owner, at_index, offset)
            for count, extend in settings:
                count_start, aligned, legal = _count_window(stack, q, int(count), bool(extend))
                for budget in budgets:
                    blocks.append(
                        fixed
                        | _rows(stack, q, count_start, aligned, legal, budget)
                        | {
                            "max_messages": count,
                            "max_tokens": budget,
                            "extend_to_user": bool(extend),
                            "last_consolidated": labels.index(_offset_label(offset)),
                        }
                    )
    codes = {"session_key": categories, "cut": _CUTS, "last_consolidated": labels}
    return _frame(blocks, codes)


def _rows(
    stack: _Stack,
    q: _Queries,
    count_start: np.ndarray,
    aligned: np.ndarray,
    legal: np.ndarray,
    max_tokens: int,
) -> dict[str, np.ndarray]:
    """The result columns for one setting's windows."""
    lo, hi = stack.rank[legal], stack.rank[q.at]
    first, token_cut, recovered = _budget(stack, lo, hi, max_tokens)
    kept = hi - first
    start = np.where(kept > 0, stack.kept[first], q.at)
    stop = np.where(kept > 0, stack.kept[np.maximum(hi - 1, 0)] + 1, q.at)
    cut = np.select(
        [token_cut, legal > aligned, count_start > q.consolidated, q.consolidated > q.first],
        [_CUTS.index(c) for c in ("tokens", "orphan", "count", "consolidation")],
        _CUTS.index("none"),
    )
    return {
        "consolidated": q.consolidated - q.first,
        "start": start - q.first,
        "stop": stop - q.first,
        "messages_kept": kept,
        "tokens_kept": stack.prefix[hi] - stack.prefix[first],
        "cut": cut,
        "messages_hidden": start - q.first,
        "tokens_hidden": stack.prefix[stack.rank[start]] - stack.prefix[stack.rank[q.first]],
        "starts_with_user": (kept > 0) & stack.entry_user[first],
        "recovered": recovered,
    }


def _frame(blocks: list[dict[str, Any]], categories: dict[str, list[str]]) -> pd.DataFrame:
    """Concatenate per-setting blocks into the documented columns and dtypes.

    Categorical columns arrive as codes into ``categories[name]``.
    """
    lengths = [len(b["turn"]) for b in blocks]
    columns: dict[str, Any] = {}
    for column in WINDOWS:
        parts = [
            np.broadcast_to(b[column.name], (n,)) for b, n in zip(blocks, lengths, strict=True)
        ]
        values = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        if column.name in categories:
            codes = values.astype(np.int64)
            columns[column.name] = pd.Categorical.from_codes(codes, categories[column.name])
        else:
            columns[column.name] = values.astype(column.dtype)
    return pd.DataFrame(columns)
