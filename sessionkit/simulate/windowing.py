"""Replay windows as data: what each nanobot release sends the model at each turn, for a grid
of settings.

The window "at" message index ``e`` is ``get_history`` of the session cut to ``messages[:e]``,
which is what nanobot's agent loop computes when the message at ``e`` arrives (every release
reads the history before storing the new message).  Computing it by calling the exact policy
once per turn and setting re-tokenizes every window.  Here each message is rewritten and
counted once per release (:mod:`sessionkit.simulate.replay`, cached); windows then come from index
arithmetic on whole-corpus arrays:

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
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import partial
from typing import Any, Literal, cast

import numpy as np
import pandas as pd

from sessionkit.conventions import SWEEPABLE, entry_point, swept
from sessionkit.nanobot.policies import ReplayPolicy, get_policy
from sessionkit.nanobot.release import DEFAULT_MAX_OUTPUT, SAFETY_BUFFER, WindowRefused
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings, Offset, grid_values
from sessionkit.schema import WINDOWS, frame
from sessionkit.simulate import replay
from sessionkit.simulate.candidates import Calls, Rule, emptied
from sessionkit.store.corpus import Corpus, selected
from sessionkit.store.counting import DEFAULT_CACHE, TokenCache

__all__ = ["DEFAULT_MAX_OUTPUT", "SAFETY_BUFFER", "WINDOWS", "windows"]

At = Literal["every_user_turn", "end"] | Sequence[int]


_CUTS = ["none", "consolidation", "count", "orphan", "tokens"]


def _orphan_jumps(
    tools: np.ndarray, lowest: np.ndarray, size: int, bounds: np.ndarray
) -> list[np.ndarray]:
    """Jump tables over window starts ``0..size`` for the orphan-tool rule.

    A tool result at ``tools[i]`` is an orphan for a window whose declarations start at
    ``w`` when ``lowest[i] <= w <= tools[i]`` (its call was declared before ``w``, or never).
    Level 0 maps ``w`` to the start after the first such orphan (``size + 1`` when there is
    none before ``bounds[w]``, the end of ``w``'s session: no window reaches past it, so
    chains stop there and the tables stay as shallow as one session needs); level ``k``
    jumps ``2**k`` orphans.
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
        orphan = tools[np.minimum(pos, len(tools) - 1)]
        found = (pos < len(tools)) & (orphan < bounds)
        step0[: size + 1] = np.where(found, orphan + 1, end)
    return _levels(step0)


def _levels(step0: np.ndarray) -> list[np.ndarray]:
    """Jump tables from level 0 (``size + 2`` long): level ``k + 1`` takes two of level
    ``k``'s jumps, up to the first level that jumps from no start (or ``size``'s bit length)."""
    size = len(step0) - 2
    end = size + 1
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
    """Every session's replay arrays laid end to end, indexed globally."""

    offsets: np.ndarray  # first message of each session (length n_sessions + 1)
    is_user: np.ndarray
    delivery: np.ndarray  # padded with two False entries
    command: np.ndarray  # user message flagged _command, padded with one False entry
    users: np.ndarray  # global indices of user messages
    turns: np.ndarray  # global indices of the user turns the release counts
    checkpoints: np.ndarray  # global indices of 0.3.5's hidden checkpoint messages
    raw_jumps: list[np.ndarray]
    rank: np.ndarray  # replayed entries before each message (length n + 1)
    kept: np.ndarray  # source index of each entry, then one sentinel
    entry_user: np.ndarray  # per entry, then one False sentinel
    entry_users: np.ndarray  # entry indices of user entries
    entry_jumps: list[np.ndarray]
    prefix: np.ndarray  # token prefix sums over entries (length n_entries + 1)
    unreplayable: np.ndarray  # global indices of messages the release cannot rewrite


def _bounds(offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """For each position ``0..n``, the end of the session it starts in (``n`` for ``n``)."""
    return np.append(np.repeat(offsets[1:], sizes), offsets[-1])


def _global_declared(declared: np.ndarray, owner_start: np.ndarray) -> np.ndarray:
    """Per-session declaration indices made global; 'never declared' becomes start - 1."""
    return np.where(declared >= 0, declared + owner_start, owner_start - 1)


_Shared = list[tuple[list[np.ndarray], list[np.ndarray]]]
"""Jump tables a grid's stacks built, with the per-session declaration arrays behind them."""


def _jumps(
    parts: list[np.ndarray],
    declared: np.ndarray,
    tools: np.ndarray,
    sizes: np.ndarray,
    shared: _Shared,
) -> list[np.ndarray]:
    """The orphan jump tables over ``declared``, the concatenated ``parts`` (each session's
    declaration indices; ``tools``: the positions of tool results naming a call).  They depend on the
    parts alone, so stacks whose replays hold the same arrays (releases of one grid that
    rewrite alike, see :func:`replay.replay_jobs`) share one set, kept in ``shared``."""
    for before, jumps in shared:
        if len(before) == len(parts) and all(map(operator.is_, before, parts)):
            return jumps
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    lowest = _global_declared(declared[tools], np.repeat(offsets[:-1], sizes)[tools]) + 1
    jumps = _orphan_jumps(tools, lowest, int(offsets[-1]), _bounds(offsets, sizes))
    shared[:] = [(parts, jumps), *shared[:3]]
    return jumps


def _stack(replays: list[replay.Replay], shared: _Shared | None = None) -> _Stack:
    """Every session's replay laid end to end (``shared``: jump tables the other stacks of
    one grid built, see :func:`_jumps`)."""
    shared = [] if shared is None else shared
    sizes = np.array([len(p.is_user) for p in replays], dtype=np.int64)
    entry_sizes = np.array([len(p.kept) for p in replays], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    n = int(offsets[-1])

    def cat(name: str, dtype: type) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in replays] + [np.zeros(0, dtype)])

    is_user = cat("is_user", bool)
    declared = cat("declared", np.int64)
    kept = cat("kept", np.int64) + np.repeat(offsets[:-1], entry_sizes)
    entry_declared = cat("entry_declared", np.int64)
    keep_mask = np.zeros(n, dtype=np.int64)
    keep_mask[kept] = 1
    entry_user = np.append(is_user[kept], False)
    return _Stack(
        offsets=offsets,
        is_user=is_user,
        delivery=np.append(cat("delivery", bool), [False, False]),
        command=np.append(cat("command", bool), False),
        users=np.flatnonzero(is_user),
        turns=np.flatnonzero(cat("turn", bool)),
        checkpoints=np.flatnonzero(cat("checkpoint", bool)),
        raw_jumps=_jumps(
            [p.declared for p in replays], declared, np.flatnonzero(declared >= -1), sizes, shared
        ),
        rank=np.concatenate([[0], np.cumsum(keep_mask)]),
        kept=np.append(kept, n),
        entry_user=entry_user,
        entry_users=np.flatnonzero(entry_user[:-1]),
        entry_jumps=_jumps(
            [p.entry_declared for p in replays],
            entry_declared,
            np.flatnonzero(entry_declared != -2),
            entry_sizes,
            shared,
        ),
        prefix=np.concatenate([[0], np.cumsum(cat("tokens", np.int64))]),
        unreplayable=np.flatnonzero(declared == replay.UNREPLAYABLE),
    )


_DERIVED = ("users", "rank", "entry_user", "entry_users")
"""Stack fields not kept in the index: each is one pass over the kept ones (:func:`_stack_of`),
as is each jump table past level 0 (:func:`_levels`)."""


def _stack_arrays(stack: _Stack) -> dict[str, np.ndarray]:
    """A stack as named arrays (a jump table's level 0 as ``name.0``), to keep in the index; its
    integer arrays (all int64) as int32 where their values fit, half the bytes to write.
    What one pass rebuilds is left out (:data:`_DERIVED`), and the entries are kept as the
    replays hold them (each session's own indices, the token counts, flags unpadded), so the
    index keeps those bytes once for both (:meth:`~sessionkit.store.index.Index.write_arrays`)."""
    arrays: dict[str, np.ndarray] = {}
    n = int(stack.offsets[-1])
    kept = stack.kept[:-1]
    entry_sizes = np.diff(stack.rank[stack.offsets])
    for field in fields(_Stack):
        value = getattr(stack, field.name)
        if isinstance(value, list):
            arrays[f"{field.name}.0"] = value[0]
        elif field.name not in _DERIVED:
            arrays[field.name] = value
    arrays |= {
        "delivery": stack.delivery[:n],
        "command": stack.command[:n],
        "kept": kept - np.repeat(stack.offsets[:-1], entry_sizes),
        "entry_sizes": entry_sizes,
        "prefix": np.diff(stack.prefix),
    }
    return {name: _narrowed(values) for name, values in arrays.items()}


def _narrowed(values: np.ndarray) -> np.ndarray:
    """An int64 array as int32 when every value fits, else as it is."""
    small = np.iinfo(np.int32)
    if values.dtype != np.int64 or not len(values):
        return values
    if values.min() < small.min or values.max() > small.max:
        return values
    return values.astype(np.int32)


_Levels = list[tuple[np.ndarray, list[np.ndarray]]]
"""Jump tables a grid's stacks made again from their level 0 (:func:`_stack_of`)."""


def _stack_of(arrays: dict[str, np.ndarray], built: _Levels | None = None) -> _Stack:
    """The stack :func:`_stack_arrays` took apart (int32 arrays widened back to int64, what
    it left out made again; ``built``: jump tables the other stacks of one grid made, reused
    for an equal level 0, as the stacks of releases that replay alike have)."""
    built = [] if built is None else built
    arrays = {
        name: values.astype(np.int64) if values.dtype == np.int32 else values
        for name, values in arrays.items()
    }
    offsets, is_user = arrays["offsets"], arrays["is_user"]
    n = int(offsets[-1])
    kept = arrays.pop("kept") + np.repeat(offsets[:-1], arrays.pop("entry_sizes"))
    mask = np.zeros(n, dtype=np.int64)
    mask[kept] = 1
    entry_user = np.append(is_user[kept], False)
    values: dict[str, Any] = {
        "delivery": np.append(arrays.pop("delivery"), [False, False]),
        "command": np.append(arrays.pop("command"), False),
        "prefix": np.concatenate([[0], np.cumsum(arrays.pop("prefix"))]),
        "kept": np.append(kept, n),
        "users": np.flatnonzero(is_user),
        "rank": np.concatenate([[0], np.cumsum(mask)]),
        "entry_user": entry_user,
        "entry_users": np.flatnonzero(entry_user[:-1]),
    }
    for field in fields(_Stack):
        if field.name in values:
            continue
        if field.name in arrays:
            values[field.name] = arrays[field.name]
        else:
            values[field.name] = _levels_of(arrays[f"{field.name}.0"], built)
    return _Stack(**values)


def _levels_of(step0: np.ndarray, built: _Levels) -> list[np.ndarray]:
    """:func:`_levels` of ``step0``, or those ``built`` holds for an equal level 0 (kept there)."""
    for before, levels in built:
        if np.array_equal(before, step0):
            return levels
    levels = _levels(step0)
    built[:] = [(step0, levels), *built[:3]]
    return levels


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
        owner = np.searchsorted(stack.offsets, stack.turns, side="right") - 1
        return owner, stack.turns
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
    sessions: list[Session],
    stack: _Stack,
    owner: np.ndarray,
    at: np.ndarray,
    offset: Offset,
    checkpoints: bool,
) -> _Queries:
    """Per window, the offset in force, as nanobot would hold it for ``messages[:at]``.

    ``"recorded"`` uses the session's stored ``last_consolidated`` while it lies within the
    prefix and 0 beyond it (nanobot resets an offset past the end of the messages, as a fork
    before that turn would); with ``checkpoints`` (0.3.5), the latest hidden checkpoint
    message before ``at`` when that is later (0.3.5 sets ``last_archived`` to the index where
    it inserts one).  ``"none"`` is 0; an int is used the same way as a recorded one.
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
    consolidated = first + np.where(valid, wanted, 0)
    if checkpoints and offset == "recorded":
        consolidated = np.maximum(consolidated, _previous(stack.checkpoints, at))
    return _Queries(at, first, consolidated)


def _count_window(
    stack: _Stack, q: _Queries, count: int, extend: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start of the count window (``count`` messages, 0: none; after ``extend_to_user``), its
    user-aligned start, and the legal start (past any orphan tool result)."""
    start = np.maximum(q.consolidated, q.at - count) if count > 0 else q.consolidated
    if extend and count > 0:
        beyond = len(stack.is_user) + 1
        no_user = _next(stack.users, start, beyond) >= q.at
        earlier = _previous(stack.users, start)
        recover = no_user & (earlier >= q.consolidated)
        via_delivery = (earlier > q.consolidated) & stack.delivery[np.maximum(earlier - 1, 0)]
        start = np.where(recover, earlier - via_delivery, start)
    return (start, *_aligned(stack, q, start))


def _aligned(stack: _Stack, q: _Queries, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Window starts moved to their first user message (or the delivery before it), and
    their legal starts (past any orphan tool result)."""
    first_user = _next(stack.users, start, len(stack.is_user) + 1)
    has_user = first_user < q.at
    via_delivery = (first_user > start) & stack.delivery[np.maximum(first_user - 1, 0)]
    aligned = np.where(has_user, first_user - via_delivery, start)
    return aligned, _legal_start(stack.raw_jumps, aligned, q.at)


def _candidate(
    chosen: ReplayPolicy,
    stack: _Stack,
    sessions: list[Session],
    owner: np.ndarray,
    q: _Queries,
    offset: Offset,
    window: tuple[int, bool],
    own: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A candidate's windows (``own``: its release's): the pick over each session's turns
    since its offset moved (and each asked position past them), the release's alignment
    applied; refused where that empties a window the release's own keeps."""
    rule = cast(Rule, chosen.rule)
    if not len(owner):
        return own
    turn_owner = np.searchsorted(stack.offsets, stack.turns, side="right") - 1
    mine = np.isin(turn_owner, owner)
    wide = len(stack.is_user) + 2
    code = np.unique(np.concatenate([owner * wide + q.at, (turn_owner * wide + stack.turns)[mine]]))
    e_owner, e_at = np.divmod(code, wide)
    e = _queries(sessions, stack, e_owner, e_at, offset, chosen.checkpoints)
    e_own = _count_window(stack, e, *window)[0]
    is_turn = np.isin(e_at, stack.turns) & (e_at < stack.offsets[e_owner + 1])
    e_turn = np.searchsorted(stack.turns, e_at) - np.searchsorted(stack.turns, e.first)
    picked = np.empty(len(e_at), dtype=np.int64)
    cuts = np.flatnonzero((np.diff(e_owner) != 0) | (np.diff(e.consolidated) != 0)) + 1
    for rows in np.split(np.arange(len(e_at)), cuts):
        first = int(e.first[rows[0]])

        def calls(of: np.ndarray, first: int = first) -> Calls:
            last = int(e_at[of[-1]])
            return Calls(
                session=sessions[int(e_owner[of[0]])].key,
                at=e_at[of] - first,
                turn=e_turn[of],
                start=e_own[of] - first,
                floor=int(e.consolidated[of[0]]) - first,
                count=window[0],
                prefix=lambda: (
                    stack.prefix[stack.rank[first : last + 1]] - stack.prefix[stack.rank[first]]
                ),
            )

        turns = rows[is_turn[rows]]
        if len(turns):
            picked[turns] = rule.starts(chosen.name, calls(turns)) + first
        for r in rows[~is_turn[rows]]:
            of = np.append(turns[e_at[turns] < e_at[r]], r)
            picked[r] = rule.starts(chosen.name, calls(of))[-1] + first
    start = picked[np.searchsorted(code, owner * wide + q.at)]
    aligned, legal = _aligned(stack, q, start)
    bad = (start < q.at) & (legal >= q.at) & (own[2] < q.at)
    if bad.any():
        w = int(np.flatnonzero(bad)[0])
        first = int(q.first[w])
        at = int(q.at[w]) - first
        why = emptied(rule.base, int(start[w]) - first, at, int(q.at[w] - own[2][w]))
        turn = int(np.searchsorted(stack.turns, q.at[w]) - np.searchsorted(stack.turns, first))
        raise WindowRefused(chosen.name, turn, why, sessions[int(owner[w])].key)
    return start, aligned, legal


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


def _grid(settings: HistorySettings, name: str, override: Any) -> list[Any]:
    """The values of one setting to sweep: the override (a value or a list, each checked;
    ``None`` in it is the setting), else the setting (``settings`` resolved by the release in
    force)."""
    own = getattr(settings, name)
    values = grid_values(name, override)
    return [own] if values is None else [own if v is None else v for v in values]


def _targets(
    sessions: list[Session], policy: str | Sequence[str] | None
) -> list[tuple[ReplayPolicy, list[int]]]:
    """Each release to replay with and the sessions (by position) it replays: every session
    under each named release, or each session under its own (``policy=None``)."""
    if policy is None:
        groups: dict[str, list[int]] = {}
        for i, session in enumerate(sessions):
            groups.setdefault(session.policy, []).append(i)
        return [(_windowed(name), members) for name, members in groups.items()]
    everyone = list(range(len(sessions)))
    return [(_windowed(name), everyone) for name in dict.fromkeys(_as_list(policy))]


def _windowed(name: str) -> ReplayPolicy:
    """The release called ``name``, refused when the window arithmetic does not reproduce it."""
    release = get_policy(name)
    if not release.windowed:
        raise ValueError(
            f"{release.label}'s get_history is a count slice the window arithmetic does not "
            f"reproduce: replay it with Session(policy={release.name!r}).get_history()"
        )
    return release


def _entry_variants(
    policy: ReplayPolicy, settings: HistorySettings, stamps: list[Any], contexts: list[Any]
) -> list[tuple[HistorySettings, dict[str, bool]]]:
    """The settings giving each distinct replay under ``policy``, with the entry columns they
    fill: the release's own value of each entry setting (a setting it ignores keeps its
    default, e.g. 0.2.2 replays the stored text, runtime context included)."""
    variants: dict[tuple[Any, ...], tuple[HistorySettings, dict[str, bool]]] = {}
    for stamp, context in itertools.product(stamps, contexts):
        chosen = policy.resolve(
            settings.replace(include_timestamps=bool(stamp), include_runtime_context=bool(context))
        )
        columns = {
            "include_timestamps": bool(chosen.include_timestamps),
            "include_runtime_context": bool(chosen.include_runtime_context),
        }
        variants.setdefault(policy.entry_key(chosen), (chosen, columns))
    return list(variants.values())


@dataclass(frozen=True)
class _Call:
    """One ``get_history`` call to simulate: its arguments and the loop setting behind them
    (``context_window`` -1: none given)."""

    max_messages: int
    max_tokens: int
    context_window: int = -1
    max_output: int = -1
    governor_budget: int = 0


def _calls(
    policy: ReplayPolicy,
    settings: HistorySettings,
    max_messages: Any,
    max_tokens: Any,
    context_window: Any,
    max_output: Any,
) -> list[_Call]:
    """The ``get_history`` calls to simulate under ``policy`` (see :func:`windows`)."""
    counts = [int(c) for c in _grid(settings, "max_messages", max_messages)]
    if context_window is None:
        if max_output is not None:
            raise ValueError("max_output needs context_window (the loop derives both together)")
        budgets = [int(b) for b in _grid(settings, "max_tokens", max_tokens)]
        return [_Call(c, b) for c in counts for b in budgets]
    if max_tokens is not None:
        raise ValueError("max_tokens is derived from context_window and max_output; pass one")
    windows_given = grid_values("context_window", context_window) or []
    if None in windows_given:
        raise ValueError("context_window's list cannot hold None: give ints >= 0, or no list")
    outputs = grid_values("max_output", max_output) or [None]
    limits = [
        (ctx, DEFAULT_MAX_OUTPUT if out is None else out)
        for ctx in windows_given
        for out in outputs
    ]
    calls = [
        _Call(call.max_messages, call.max_tokens, ctx, out, call.governor_budget)
        for ctx, out in limits
        for count in counts
        for call in [policy.loop_call(ctx, out, count)]
    ]
    return list(dict.fromkeys(calls))


def _needs_summary(call: _Call, policy: ReplayPolicy, tokens_kept: np.ndarray) -> np.ndarray:
    """A context governor's verdict per window from the history alone (1: over budget, 0:
    not; -1: not applicable: the release has no governor, or no context window was given);
    a lower bound of the exact one :func:`sessionkit.requests` gives."""
    if not policy.governed or call.context_window < 0:
        return np.full(len(tokens_kept), -1, dtype=np.int8)
    if call.context_window == 0:  # the governor measures nothing without a context window
        return np.zeros(len(tokens_kept), dtype=np.int8)
    if call.governor_budget <= 0:
        return np.ones(len(tokens_kept), dtype=np.int8)
    return (tokens_kept >= call.governor_budget).astype(np.int8)


@entry_point()
def windows(
    source: Session | Iterable[Session],
    key: str | None = None,
    *,
    policy: str | None = None,
    settings: HistorySettings | None = None,
    max_messages: int | None = None,
    max_tokens: int | None = None,
    include_timestamps: bool | None = None,
    include_runtime_context: bool | None = None,
    extend_to_user: bool | None = None,
    last_consolidated: Offset | None = None,
    file_cap: int | None = None,
    context_window: int | None = None,
    max_output: int | None = None,
    grid: Mapping[str, Sequence[Any]] | None = None,
    at: At = "every_user_turn",
    workers: int | None = None,
    progress: bool | None = None,
    cache: TokenCache | bool | None = None,
) -> pd.DataFrame:
    """One row per (session, release, turn, setting): the history that release replays there.

    The history settings come from ``settings`` (a field left ``None``: the release's own
    default, see :class:`~sessionkit.HistorySettings`); each keyword given overrides one of
    them, ``grid`` sweeps lists of values, and the frame covers the whole grid (columns:
    :data:`sessionkit.schema.WINDOWS`).  Each window equals the release's ``get_history`` of
    the session cut at ``at``; windows of one release and setting form one block of rows.

    Without ``context_window``, each window is ``get_history`` called with the settings as
    the release resolves them (``ReplayPolicy.resolve``): 0.2.2 takes ``include_timestamps``,
    a 0.3.x release ``include_runtime_context``; ``max_messages`` left ``None`` is the
    release's own count window (120, 2000; 0.3.5: none), a value given is that value under
    every release.  With ``context_window`` (and ``max_output``, default 8192), each window
    is what that release's agent loop asks for at the turn (``ReplayPolicy.loop_call``): 0.2.2 ``max_messages`` and the budget
    ``ctx - max_output - 1024``; 0.3.0 the count window ``min(2000, max(120, ctx // 100))`` and
    the same budget; 0.3.5 no count window and no budget, with ``needs_summary`` marking where
    its context governor would have summarised.  That verdict is a lower bound: 0.3.5 measures
    the whole request (system prompt, tools, the new message, earlier tool steps), and those
    come from the release's kit (its prompt and tool definitions for the workspace), which
    windows neither has nor asks for; here the window's own estimate stands for the request
    (so it can only under-report).  :func:`sessionkit.requests` gives the exact verdict before
    every call (its ``needs_summary``, equal to
    :func:`sessionkit.calls.governor.verdicts`).

    Under 0.3.5, the ``"recorded"`` offset at a turn is the latest hidden checkpoint message
    stored before it (where ``commit_summary_checkpoint`` set ``last_archived``), or the
    recorded offset when later; a checkpoint inserted before messages that already existed
    counts from its position, not from when it was committed.  The file cap (0.2.2, 0.3.0) is
    not applied here (sessions as stored: a file a release capped on every save holds at most
    its limit, so no prefix of it trips the cap); see :func:`sessionkit.file_cap` for what it
    would trim and :func:`sessionkit.message_states` for one turn with the cap applied.
    Consolidation (0.2.2, 0.3.0) and summaries (0.3.5) are not simulated: their offsets are
    read from the session.

    Parameters
    ----------
    source
        A Session, a Corpus or any iterable of Sessions.
    key
        One session of ``source`` (None: every session).
    policy
        The release (``"nanobot-0.2"``, ``"nanobot-0.3.0"``, ``"nanobot-0.3.5"``; default:
        each session's own ``Session.policy``); ``grid={"policy": [...]}`` puts several side
        by side.
    settings
        The history settings (None: every field the release's default; ``file_cap`` is not
        used here).
    max_messages, max_tokens, include_timestamps, include_runtime_context, extend_to_user, \
last_consolidated
        Overrides of ``settings``, one value each (None: the setting's, else the release's
        default); a value of the wrong type or range raises, naming the parameter and what it
        takes.  ``include_timestamps`` reaches 0.2.2 only, ``include_runtime_context`` 0.3.x
        only.
    file_cap
        Refused with ``ValueError`` when given: windows replay sessions as stored (see
        :func:`sessionkit.file_cap` for what a cap trims).
    context_window, max_output
        The model's context window and output reserve: simulate each release's agent loop
        instead of a fixed ``max_tokens``.
    grid
        What to sweep: a mapping from any of the names above (``policy`` included) to a list
        of values (``None`` in it: the release's default), e.g. ``{"max_tokens": [0, 8000],
        "policy": list(sk.POLICIES)}``; the frame covers every combination.
    at
        ``"every_user_turn"`` (before each user turn is stored; under 0.3.5 the hidden
        checkpoint and automation messages are not turns, as in its forks), ``"end"`` (the history the next message would get)
        or a list of message indices (beyond a session's length: skipped).
    workers
        Processes replaying the sessions (default: every core for large sweeps, needs the
        ``fork`` start method).  Replays are cached (:mod:`sessionkit.simulate.replay`).
    progress
        Show a progress bar (default: for large sweeps).
    cache
        Token-count cache shared with :func:`sessionkit.count_tokens` (None: a Corpus's
        own, so one loaded with ``cache=False`` keeps no counts on disk, else the default
        one); ``False`` keeps none.
    """
    given = swept(
        "windows",
        grid,
        SWEEPABLE,
        policy=policy,
        max_messages=max_messages,
        max_tokens=max_tokens,
        include_timestamps=include_timestamps,
        include_runtime_context=include_runtime_context,
        extend_to_user=extend_to_user,
        last_consolidated=last_consolidated,
        file_cap=file_cap,
        context_window=context_window,
        max_output=max_output,
    )
    policy, file_cap = given["policy"], given["file_cap"]
    max_messages, max_tokens = given["max_messages"], given["max_tokens"]
    include_timestamps, extend_to_user = given["include_timestamps"], given["extend_to_user"]
    include_runtime_context = given["include_runtime_context"]
    last_consolidated = given["last_consolidated"]
    context_window, max_output = given["context_window"], given["max_output"]
    source = selected(source, key)
    settings = DEFAULT_SETTINGS if settings is None else settings
    if file_cap is not None:
        raise ValueError(
            "file_cap is not applied to windows or requests, which replay sessions as stored; "
            "sessionkit.file_cap(source, file_cap=...) shows what a cap would trim"
        )
    if cache is None or cache is True:
        cache = DEFAULT_CACHE
    elif cache is False:
        cache = None
    if isinstance(source, Corpus) and cache is DEFAULT_CACHE:
        cache = source.token_cache
    sessions = [source] if isinstance(source, Session) else list(source)
    targets = _targets(sessions, policy)
    labels: list[str] = []
    keys = [s.key for s in sessions]
    categories = list(dict.fromkeys(keys))
    code_of = {key: i for i, key in enumerate(categories)}
    session_codes = np.array([code_of[k] for k in keys], dtype=np.int64)
    names = [chosen.name for chosen, _ in targets]
    subsets = _subsets(sessions, targets)
    resolved: dict[str, HistorySettings] = {}
    variants: dict[str, list[tuple[HistorySettings, dict[str, bool]]]] = {}
    for chosen, _ in targets:
        own = resolved[chosen.name] = chosen.resolve(settings)
        stamps_grid = _grid(own, "include_timestamps", include_timestamps)
        contexts_grid = _grid(own, "include_runtime_context", include_runtime_context)
        variants[chosen.name] = _entry_variants(chosen, own, stamps_grid, contexts_grid)
    requests = [
        (subsets[chosen.name], variant, chosen.release_name)
        for chosen, _ in targets
        for variant, _ in variants[chosen.name]
    ]
    stacks = iter(
        replay.prepared_each(
            requests,
            partial(_stack, shared=[]),
            (_stack_arrays, partial(_stack_of, built=[])),
            kind="windows-stack2",  # 2: what one pass rebuilds is not kept
            workers=workers,
            progress=progress,
            cache=cache,
            stored=_stored(source),
        )
    )
    blocks: list[dict[str, Any]] = []
    for chosen, members in targets:
        subset = subsets[chosen.name]
        own = resolved[chosen.name]
        offsets = _grid(own, "last_consolidated", last_consolidated)
        labels += [o for o in map(_offset_label, offsets) if o not in labels]
        extends = [bool(e) for e in _grid(own, "extend_to_user", extend_to_user)]
        calls = _calls(chosen, own, max_messages, max_tokens, context_window, max_output)
        for _variant, entry_columns in variants[chosen.name]:
            stack = next(stacks)
            owner, at_index = _positions(subset, stack, at)
            fixed = {
                "session_key": session_codes[members][owner],
                "policy": names.index(chosen.name),
                "turn": np.searchsorted(stack.turns, at_index)
                - np.searchsorted(stack.turns, stack.offsets[owner]),
                "at": at_index - stack.offsets[owner],
                "command": stack.command[at_index],
                **entry_columns,
            }
            for offset in offsets:
                q = _queries(subset, stack, owner, at_index, offset, chosen.checkpoints)
                starts: dict[tuple[int, bool], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
                for extend, call in itertools.product(extends, calls):
                    window = (chosen.count_window(call.max_messages), extend)
                    if window not in starts:
                        starts[window] = _count_window(stack, q, *window)
                        if chosen.rule is not None:
                            starts[window] = _candidate(
                                chosen, stack, subset, owner, q, offset, window, starts[window]
                            )
                    rows = _rows(stack, q, *starts[window], call.max_tokens)
                    _refuse_unreplayable(stack, q, starts[window][2], subset, owner)
                    blocks.append(
                        fixed
                        | rows
                        | {
                            "max_messages": call.max_messages,
                            "max_tokens": call.max_tokens,
                            "extend_to_user": extend,
                            "last_consolidated": labels.index(_offset_label(offset)),
                            "context_window": call.context_window,
                            "max_output": call.max_output,
                            "needs_summary": _needs_summary(call, chosen, rows["tokens_kept"]),
                        }
                    )
    codes = {"session_key": categories, "policy": names, "cut": _CUTS, "last_consolidated": labels}
    return _frame(blocks, codes)


def _stored(source: Any) -> dict[int, np.ndarray] | None:
    """The exact message counts a loaded Corpus keeps (:func:`replay.stored_counts`), for
    replays to reuse; None for anything else (nothing is built to find them)."""
    if not isinstance(source, Corpus) or source.token_method != "tiktoken":
        return None
    return replay.stored_counts(source.built_entries)


def _subsets(
    sessions: list[Session], targets: list[tuple[ReplayPolicy, list[int]]]
) -> dict[str, list[Session]]:
    """Each release's sessions; releases given the same members share one list, so their
    replays are computed in one pass (:func:`~sessionkit.simulate.replay.prepared_each`)."""
    lists: dict[tuple[int, ...], list[Session]] = {}
    return {
        chosen.name: lists.setdefault(tuple(members), [sessions[i] for i in members])
        for chosen, members in targets
    }


def _refuse_unreplayable(
    stack: _Stack, q: _Queries, legal: np.ndarray, sessions: list[Session], owner: np.ndarray
) -> None:
    """Raise where the release's ``get_history`` raises: a window whose rewritten range (from
    its legal start) holds a message without a role."""
    if not len(stack.unreplayable):
        return
    bad = np.searchsorted(stack.unreplayable, legal) < np.searchsorted(stack.unreplayable, q.at)
    if bad.any():
        w = int(np.flatnonzero(bad)[0])
        session = sessions[owner[w]]
        first = int(stack.unreplayable[np.searchsorted(stack.unreplayable, legal[w])])
        raise ValueError(
            f"session {session.key!r}: message {first - int(stack.offsets[owner[w]])} has no "
            f"role, and the window at message {int(q.at[w] - stack.offsets[owner[w]])} holds "
            f"it ({int(bad.sum())} windows do): {session.policy}'s get_history raises "
            "KeyError('role') there; pass at= turns before it, or mend the file "
            "(sessionkit doctor)"
        )


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

    Categorical columns arrive as codes into ``categories[name]``; nullable ones with -1
    for missing.
    """
    lengths = [len(b["turn"]) for b in blocks]
    values = {
        column.name: np.concatenate(
            [np.broadcast_to(b[column.name], (n,)) for b, n in zip(blocks, lengths, strict=True)]
        )
        if blocks
        else np.zeros(0, dtype=np.int64)
        for column in WINDOWS
    }
    for name in ("context_window", "max_output"):
        values[name] = pd.arrays.IntegerArray(values[name].astype(np.int64), values[name] < 0)
    summary = values["needs_summary"]
    values["needs_summary"] = pd.arrays.BooleanArray(summary == 1, summary < 0)
    return frame(WINDOWS, values, categories=categories)
