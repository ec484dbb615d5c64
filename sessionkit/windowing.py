"""Replay windows as data: what nanobot 0.2 sends the model at each turn, for a grid of settings.

The window "at" message index ``e`` is ``get_history`` of the session cut to ``messages[:e]``,
which is what nanobot's agent loop computes when the message at ``e`` arrives (it reads the
history before storing the new message).  Computing it by calling the exact policy once per
turn and setting re-tokenizes every window.  Here each message is rewritten and counted once
(:mod:`sessionkit.replay`, cached); windows then come from index arithmetic on whole-corpus
arrays:

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from sessionkit import replay
from sessionkit.counting import DEFAULT_CACHE, TokenCache
from sessionkit.nanobot.policies import DEFAULT_POLICY, get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings, Offset
from sessionkit.schema import WINDOWS, frame

__all__ = ["WINDOWS", "replay_offset", "windows"]

At = Literal["every_user_turn", "end"] | Sequence[int]


_CUTS = ["none", "consolidation", "count", "orphan", "tokens"]


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
    """Every session's replay arrays laid end to end, indexed globally."""

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


def _global_declared(declared: np.ndarray, owner_start: np.ndarray) -> np.ndarray:
    """Per-session declaration indices made global; 'never declared' becomes start - 1."""
    return np.where(declared >= 0, declared + owner_start, owner_start - 1)


def _stack(replays: list[replay.Replay]) -> _Stack:
    sizes = np.array([len(p.is_user) for p in replays], dtype=np.int64)
    entry_sizes = np.array([len(p.kept) for p in replays], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    entry_offsets = np.concatenate([[0], np.cumsum(entry_sizes)])
    n, n_entries = int(offsets[-1]), int(entry_offsets[-1])

    def cat(name: str, dtype: type) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in replays] + [np.zeros(0, dtype)])

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


def replay_offset(session: Session, last_consolidated: Offset) -> int:
    """The offset a replay of all of ``session``'s messages starts from: the rule
    :func:`windows` applies to each window, for one session (e.g. ``Session.before_user(k)``)."""
    if last_consolidated == "recorded":
        wanted = session.last_consolidated
    elif last_consolidated == "none":
        wanted = 0
    elif isinstance(last_consolidated, int) and not isinstance(last_consolidated, bool):
        wanted = last_consolidated
    else:
        raise ValueError(
            f"last_consolidated must be 'recorded', 'none' or an int, not {last_consolidated!r}"
        )
    return wanted if 0 <= wanted <= len(session.messages) else 0


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


def _grid(settings: HistorySettings, name: str, override: Any) -> list[Any]:
    """The values of one setting to sweep: the override (a value or a list), else the setting."""
    return [getattr(settings, name)] if override is None else _as_list(override)


def windows(
    source: Session | Iterable[Session],
    *,
    settings: HistorySettings = DEFAULT_SETTINGS,
    max_messages: int | Sequence[int] | None = None,
    max_tokens: int | Sequence[int] | None = None,
    include_timestamps: bool | Sequence[bool] | None = None,
    extend_to_user: bool | Sequence[bool] | None = None,
    last_consolidated: Offset | Sequence[Offset] | None = None,
    at: At = "every_user_turn",
    workers: int | None = None,
    progress: bool | None = None,
    cache: TokenCache | None = DEFAULT_CACHE,
) -> pd.DataFrame:
    """One row per (session, turn, setting): the history nanobot replays there, and why.

    The history settings come from ``settings`` (default: what nanobot 0.2.2's agent loop
    passes, see :class:`~sessionkit.HistorySettings`); each keyword given overrides one of
    them and may be a list, and the frame covers the whole grid (columns:
    :data:`sessionkit.schema.WINDOWS`).  Each window equals ``Session.get_history`` of the
    session cut at ``at``; windows of one setting form one block of rows.  The file cap is
    not applied here (sessions as stored); see :func:`sessionkit.file_cap` for what it would
    trim and :func:`sessionkit.message_states` for one turn with the cap applied.

    Parameters
    ----------
    source
        A Session, a Corpus or any iterable of Sessions.
    settings
        The history settings (``file_cap`` is not used here).
    max_messages, max_tokens, include_timestamps, extend_to_user, last_consolidated
        Overrides of ``settings``, each a value or a list of values (None: the setting's).
    at
        ``"every_user_turn"`` (before each user message is stored), ``"end"`` (the history
        the next message would get) or a list of message indices (beyond a session's length:
        skipped).
    workers
        Processes replaying the sessions (default: every core for large sweeps, needs the
        ``fork`` start method).  Replays are cached (:mod:`sessionkit.replay`).
    progress
        Show a progress bar (default: for large sweeps).
    cache
        Token-count cache shared with :func:`sessionkit.count_tokens`.
    """
    sessions = _as_sessions(source)
    stamps_grid = [bool(v) for v in _grid(settings, "include_timestamps", include_timestamps)]
    offsets = _grid(settings, "last_consolidated", last_consolidated)
    labels = list(dict.fromkeys(_offset_label(o) for o in offsets))
    windowed = list(
        itertools.product(
            _grid(settings, "max_messages", max_messages),
            _grid(settings, "extend_to_user", extend_to_user),
        )
    )
    budgets = [int(b) for b in _grid(settings, "max_tokens", max_tokens)]
    keys = [s.key for s in sessions]
    categories = list(dict.fromkeys(keys))
    code_of = {key: i for i, key in enumerate(categories)}
    session_codes = np.array([code_of[k] for k in keys], dtype=np.int64)
    blocks: list[dict[str, Any]] = []
    for stamps in dict.fromkeys(stamps_grid):
        replays = replay.replay_all(
            sessions, stamps, workers=workers, progress=progress, cache=cache
        )
        stack = replay.derived(replays, _stack)
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
            for count, extend in windowed:
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
    values = {
        column.name: np.concatenate(
            [np.broadcast_to(b[column.name], (n,)) for b, n in zip(blocks, lengths, strict=True)]
        )
        if blocks
        else np.zeros(0, dtype=np.int64)
        for column in WINDOWS
    }
    return frame(WINDOWS, values, categories=categories)
