"""Candidate history policies: a window no nanobot release has, replayed under a release's rules.

A candidate (:func:`candidate`) is a release object whose count window is replaced by a
*pick*: a function of one session's ``get_history`` calls (:class:`Calls`, arrays over the
calls) returning each call's window start.  The release's own alignment (a user turn, then
past orphan tool results), token budget, entry rewrite and per-call clean-up then apply as to
its own window, so every function taking ``policy=`` takes a candidate.  Two picks ship:
:class:`BlockEviction` and :class:`Hysteresis`.
"""

from __future__ import annotations

import dataclasses
import zlib
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, cast

import numpy as np

from sessionkit.nanobot.history import Message, offset_start
from sessionkit.nanobot.policies import ReplayPolicy, get_policy, register_candidate
from sessionkit.nanobot.release import WindowRefused

__all__ = ["BlockEviction", "Calls", "Hysteresis", "Pick", "Rule", "candidate", "emptied"]

Pick = Callable[["Calls"], Any]
"""A candidate's window rule: one session's calls -> each call's window start (ints)."""

_COLOURS = ("#e377c2", "#17becf", "#bcbd22", "#9467bd", "#8c564b", "#d62728")
"""Plot colours of candidates, picked by name (none is a release's)."""


@dataclass(frozen=True)
class Calls:
    """One session's ``get_history`` calls since its offset last moved, what a pick reads.

    Indices are the session's message indices.  The window of call ``i`` ends before message
    ``at[i]``; a pick returns its start, ``floor <= start <= at[i]``.  A pick's state, if it
    keeps one, starts afresh where the offset moves (a consolidation or a summary checkpoint).
    """

    session: str | None
    """The session's key (None where an exact replay does not know it)."""
    at: np.ndarray
    """Messages stored before each call (the window ends there)."""
    turn: np.ndarray
    """Each call's turn (user turns before it)."""
    start: np.ndarray
    """Where the release's own count window starts at each call (before its alignment)."""
    floor: int
    """The offset in force: no window starts before it."""
    count: int
    """The count window in force (``max_messages`` as the release reads it; 0: none)."""
    prefix: Callable[[], np.ndarray] = field(repr=False, compare=False)

    @cached_property
    def tokens(self) -> np.ndarray:
        """Prefix sums of replayed tokens: ``tokens[i]`` is what ``messages[:i]`` replays to
        (length ``at[-1] + 1``; computed on first use)."""
        return self.prefix()


@dataclass(frozen=True)
class BlockEviction:
    """Block-aligned eviction (nanobot PR #4568, for issue #4222): the count window's start,
    counted from the offset, floored to a multiple of ``k`` messages, so it moves in blocks."""

    k: int

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"BlockEviction(k=...) takes an int >= 1, not {self.k!r}")

    @property
    def name(self) -> str:
        """Its part of the candidate's name."""
        return f"block({self.k})"

    @property
    def identity(self) -> str:
        """What identifies it in any process."""
        return f"sessionkit.BlockEviction(k={self.k})"

    def __call__(self, calls: Calls) -> np.ndarray:
        """Each call's start: the release's, floored to a block."""
        return calls.floor + (calls.start - calls.floor) // self.k * self.k


@dataclass(frozen=True)
class Hysteresis:
    """Hysteresis (sessionkit issue #35): the history grows until it holds more than
    ``ratio`` times the count window N, then is cut back to N (the release's start) in one step."""

    ratio: float

    def __post_init__(self) -> None:
        if isinstance(self.ratio, bool) or not isinstance(self.ratio, int | float):
            raise ValueError(f"Hysteresis(ratio=...) takes a number >= 1, not {self.ratio!r}")
        if not self.ratio >= 1:
            raise ValueError(f"Hysteresis(ratio=...) takes a number >= 1, not {self.ratio!r}")

    @property
    def name(self) -> str:
        """Its part of the candidate's name."""
        return f"hysteresis({self.ratio:g})"

    @property
    def identity(self) -> str:
        """What identifies it in any process."""
        return f"sessionkit.Hysteresis(ratio={self.ratio!r})"

    def __call__(self, calls: Calls) -> np.ndarray:
        """Each call's start: kept until the window exceeds N * ratio, then the release's."""
        starts = np.empty(len(calls.at), dtype=np.int64)
        kept = calls.floor
        limit = calls.count * self.ratio
        for i, (at, own) in enumerate(zip(calls.at.tolist(), calls.start.tolist(), strict=True)):
            if calls.count > 0 and at - kept > limit:
                kept = own
            starts[i] = kept
        return starts


def _described(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of {value.dtype} with shape {value.shape}"
    return f"{type(value).__name__} {value!r:.60}"


@dataclass(frozen=True)
class Rule:
    """A candidate's window: ``pick`` over the calls of ``base``, a release's name."""

    base: str
    pick: Pick
    identity: str | None
    """What identifies the pick in any process (None: it cannot be, e.g. a notebook's
    function given no ``identity=``; nothing of it is kept beyond this process)."""

    def starts(self, name: str, calls: Calls) -> np.ndarray:
        """The pick's starts for ``calls``, checked to be a window each (else
        :class:`~sessionkit.nanobot.release.WindowRefused`)."""
        result = self.pick(calls)
        value = np.asarray(result) if isinstance(result, np.ndarray | list | tuple) else result
        n = len(calls.at)
        first = int(calls.turn[0])
        if (
            not isinstance(value, np.ndarray)
            or value.shape != (n,)
            or not np.issubdtype(value.dtype, np.integer)
        ):
            raise WindowRefused(
                name,
                first,
                f"its pick returned {_described(value)}, not one window start (a message index) "
                f"for each of the {n} calls from that turn on",
                calls.session,
            )
        value = value.astype(np.int64)
        low, high = value < calls.floor, value > calls.at
        if (low | high).any():
            i = int(np.flatnonzero(low | high)[0])
            where = (
                f"before the offset {calls.floor} (consolidated messages are never replayed)"
                if low[i]
                else f"past the {int(calls.at[i])} messages stored before the turn"
            )
            why = f"its window starts at message {int(value[i])}, {where}"
            raise WindowRefused(name, int(calls.turn[i]), why, calls.session)
        return value

    def exact_start(
        self,
        release: ReplayPolicy,
        messages: Sequence[Message],
        offset: int,
        max_messages: int,
        *,
        extend_to_user: bool,
        entry: Callable[[Message], Message | None],
    ) -> int:
        """The legal start of the window of ``messages``: the pick over the session's turns
        since the offset and this call, the release's alignment applied."""
        n = len(messages)
        floor = offset_start(offset, n)
        turns = [i for i, m in enumerate(messages) if release.is_user_turn(m)]
        at = [a for a in turns if a >= floor] + [n]
        own = [
            release.count_start(messages[:a], floor, max_messages, extend_to_user=extend_to_user)
            for a in at
        ]

        def prefix() -> np.ndarray:
            counts = [
                0 if (e := entry(m)) is None else release.estimate_message_tokens(e)
                for m in messages
            ]
            return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

        calls = Calls(
            session=None,
            at=np.array(at, dtype=np.int64),
            turn=np.array([bisect_left(turns, a) for a in at], dtype=np.int64),
            start=np.array(own, dtype=np.int64),
            floor=floor,
            count=release.count_window(max_messages),
            prefix=prefix,
        )
        picked = int(self.starts(release.name, calls)[-1])
        legal = release.aligned_start(messages, picked)
        if picked < n <= legal:
            kept = n - release.aligned_start(messages, own[-1])
            if kept > 0:
                raise WindowRefused(
                    release.name, int(calls.turn[-1]), emptied(self.base, picked, n, kept)
                )
        return legal


def emptied(base: str, start: int, at: int, kept: int) -> str:
    """Why a window the release's alignment empties is refused."""
    return (
        f"its window starts at message {start}, and {base}'s alignment keeps none of its "
        f"{at - start} messages (no user turn, and a tool result whose call lies before it), "
        f"where the release's own window keeps {kept}"
    )


def candidate(
    base: str | ReplayPolicy,
    pick: Pick | None = None,
    *,
    block: int | None = None,
    hysteresis: float | None = None,
    name: str | None = None,
    identity: str | None = None,
    colour: str | None = None,
) -> ReplayPolicy:
    """A history policy no release has: ``base``'s rules with one pick choosing each window's
    start, usable as ``policy=`` everywhere (named ``"<base>+<pick's name>"``).

    The pick is ``pick`` (a function of :class:`Calls`), or ``block=k`` (:class:`BlockEviction`)
    or ``hysteresis=ratio`` (:class:`Hysteresis`).  ``name`` names it (default: the pick's
    ``name``, else its function name); ``identity`` says what it is across processes (the
    shipped picks carry theirs; request snapshots refuse a candidate without one); ``colour``
    is its plot colour.
    """
    given = [p for p in (pick, block, hysteresis) if p is not None]
    if len(given) != 1:
        raise TypeError("candidate() takes one of pick=, block= and hysteresis=")
    if block is not None:
        pick = BlockEviction(block)
    elif hysteresis is not None:
        pick = Hysteresis(hysteresis)
    chosen = cast(Pick, pick)
    release = get_policy(base)
    if release.rule is not None:
        raise ValueError(f"{release.name!r} is a candidate already; give a release as base")
    if not release.windowed:
        raise ValueError(
            f"{release.label}'s get_history is a count slice the window arithmetic does not "
            "reproduce: a candidate needs a release from 0.1.5.post3 on"
        )
    own = name or getattr(chosen, "name", None) or getattr(chosen, "__name__", None)
    if not isinstance(own, str) or not own or own == "<lambda>":
        raise ValueError(f"name the candidate: {chosen!r} has no name (pass name=...)")
    if identity is None and isinstance(getattr(chosen, "identity", None), str):
        identity = chosen.identity  # type: ignore[attr-defined]  # a shipped pick's own
    full = f"{release.name}+{own}"
    made = dataclasses.replace(
        release,
        name=full,
        label=f"{release.label} + {own}",
        colour=colour or _COLOURS[zlib.crc32(full.encode()) % len(_COLOURS)],
        rule=Rule(release.name, chosen, identity),
    )
    return register_candidate(made)
