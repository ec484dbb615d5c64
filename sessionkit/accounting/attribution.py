"""Tie logged LLM calls to the session, turn and step that made them, from what is on disk.

The usage log has no session column.  A turn's user message is stamped (naive local time)
before its first call and what the turn saves after its last one, so each turn spans a time
window; a call inside exactly one window of a session its ``source`` fits belongs to that
turn.  The gateway runs sessions concurrently, so windows can overlap: then counts decide —
the calls each turn saved (its agent steps), its summary checkpoints, the calls of one turn
never overlapping in time, ``_last_usage`` (count and token sums of a session's last turn) and
WebUI ``round_usages`` (each round's tokens, in order).  Every assignment that explains the
most calls is considered; a call tied to the same turn by all of them is attributed, any
other stays unattributed (``ambiguous``).  ``exact``: the turn's recorded usage confirmed it;
``time``: its window and the counts did.

Windows, candidates and the common case (a turn alone in its window whose calls all fit it)
are array operations; only turns sharing calls, or with recorded usage to match, are searched
call by call.  Each session's turns are derived once per file version (a session read back
from the index and unchanged) or per content (any other session) and kept, as replays
and request calls are (:mod:`sessionkit.store.memo`), so a second :func:`attribute` parses and
replays nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

import numpy as np
import pandas as pd
from dateutil.tz import tzlocal

from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.timestamps import local_moment
from sessionkit.nanobot.usage_records import (
    FAILED_REASONS,
    RoundUsages,
    call_source,
    is_checkpoint,
    last_usage,
)
from sessionkit.store import memo, versions

__all__ = [
    "ATTRIBUTIONS",
    "KINDS",
    "Attribution",
    "CallTimes",
    "attribute",
    "local_ms",
    "parsed_ms",
    "zone_key",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_NODE_BUDGET = 200_000
_DEPTH = 400
"""Calls of one tangle searched at most (deeper ones stay unattributed)."""
_ANY_SESSION = frozenset({"cron", "system"})
"""Sources a call of any session's turn may carry (a bound cron job, a subagent's report)."""
"""File versions whose turns are kept (the least recently used are dropped first)."""
KINDS = ("agent", "summary", "other")
ATTRIBUTIONS = ("exact", "time")


def local_ms(stamp: Any, zone: tzinfo | None) -> int | None:
    """A stored naive local timestamp as UTC epoch milliseconds (``zone`` None: this machine's
    local time, daylight saving included); None when it is no timestamp."""
    moment = local_moment(stamp, zone)
    return None if moment is None else (moment - _EPOCH) // _MS


def _calls_made(session: Session, region: list[dict[str, Any]], user: dict[str, Any]) -> int:
    """The agent calls a turn made, by what it saved (the release's step rule)."""
    if user.get("_command"):
        return 0
    try:
        return len(get_policy(session.policy).turn_steps(region))
    except NotImplementedError:
        saved = [m for m in region if m.get("role") == "assistant" and not m.get("_command")]
        return len(saved) or (0 if any(m.get("_command") for m in region) else 1)


def _pandas_ms(stamps: list[Any], zone: tzinfo | None) -> np.ndarray:
    """Stored naive local timestamps as UTC epoch milliseconds, -1 where none, parsed as one
    column (an ambiguous hour of a clock change is read as the earlier one); raises when they
    cannot be."""
    parsed = pd.to_datetime(pd.Series(stamps, dtype=object), format="ISO8601", errors="coerce")
    if parsed.dt.tz is None:
        parsed = parsed.dt.tz_localize(
            zone or tzlocal(),
            ambiguous=np.ones(len(parsed), dtype=bool),
            nonexistent="shift_forward",
        )
    values = parsed.dt.tz_convert("UTC").dt.as_unit("ns").astype("int64").to_numpy() // 10**6
    return np.where(parsed.isna().to_numpy(), -1, values)


def parsed_ms(stamps: list[Any], zone: tzinfo | None) -> np.ndarray:
    """Vectorised :func:`local_ms` (-1 where none): one column, else stamp by stamp."""
    try:
        return _pandas_ms(stamps, zone)
    except (ValueError, TypeError, OverflowError, AttributeError):
        return np.array([-1 if (t := local_ms(x, zone)) is None else t for x in stamps])


def _ms(stamps: list[Any], bounds: list[int], zone: tzinfo | None) -> np.ndarray:
    """:func:`parsed_ms` of every session's stamps (``bounds``: where each session's
    begin), parsed together; when they cannot be, each session's apart, so a session's
    times never depend on the others'."""
    try:
        return _pandas_ms(stamps, zone)
    except (ValueError, TypeError, OverflowError, AttributeError):
        edges = [*bounds, len(stamps)]
        parts = [parsed_ms(stamps[a:b], zone) for a, b in zip(edges, edges[1:], strict=False)]
        return np.concatenate([*parts, np.empty(0, dtype=np.int64)]).astype(np.int64)


@dataclass(frozen=True)
class _Own:
    """One session's call-making turns that have a usable time, in message order: user-turn
    number (-1: an automation run), window (UTC epoch ms) and agent calls saved; the times of
    its summary checkpoints; how many turns had no usable time."""

    number: np.ndarray
    start: np.ndarray
    end: np.ndarray
    agent_calls: np.ndarray
    checkpoints: np.ndarray
    untimed: int


def _own_turns(sessions: Sequence[Session], zone: tzinfo | None) -> list[_Own]:
    """Each session's :class:`_Own`, every session's timestamps parsed in one go."""
    stamps: list[Any] = []
    bounds: list[int] = []
    firsts: list[list[int]] = []
    numbers: list[list[int]] = []
    made: list[list[int]] = []
    checkpoints: list[list[int]] = []
    for session in sessions:
        policy = get_policy(session.policy)
        messages = session.messages
        anchors = [
            i for i, m in enumerate(messages) if m.get("role") == "user" and not is_checkpoint(m)
        ]
        bounds.append(len(stamps))
        first, number, calls = [], [], []
        visible = 0
        for n, at in enumerate(anchors):
            user = messages[at]
            counted = policy.is_user_turn(user)
            number.append(visible if counted else -1)
            visible += counted
            stop = anchors[n + 1] if n + 1 < len(anchors) else len(messages)
            region = messages[at + 1 : stop]
            first.append(len(stamps))
            stamps.append(user.get("timestamp"))
            stamps.extend(
                m.get("timestamp")
                for m in region
                if not is_checkpoint(m) and not m.get("_channel_delivery")
            )
            calls.append(_calls_made(session, region, user))
        firsts.append(first)
        numbers.append(number)
        made.append(calls)
        checkpoints.append(
            [
                when
                for m in messages
                if is_checkpoint(m) and (when := local_ms(m.get("timestamp"), zone))
            ]
        )
    ms = _ms(stamps, bounds, zone) if stamps else np.empty(0, dtype=np.int64)
    flat = [f for first in firsts for f in first]
    ends = np.maximum.reduceat(ms, flat) if flat else np.empty(0, dtype=np.int64)
    out = []
    done = 0
    for first, number, calls, marks in zip(firsts, numbers, made, checkpoints, strict=True):
        starts = ms[first] if first else np.empty(0, dtype=np.int64)
        kept = starts >= 0
        out.append(
            _Own(
                np.array(number, dtype=np.int64)[kept],
                starts[kept],
                ends[done : done + len(first)][kept],
                np.array(calls, dtype=np.int64)[kept],
                np.array(marks, dtype=np.int64),
                int(len(first) - kept.sum()),
            )
        )
        done += len(first)
    return out


def zone_key(zone: tzinfo | None) -> Any:
    """What the turns' times depend on besides the session: the zone (None: this process's
    local zone as it is set now)."""
    if zone is None:
        return ("local", time.tzname, time.timezone, time.altzone, time.daylight)
    return zone


_SPACE = "turn times"
"""This module's space in :mod:`sessionkit.store.memo` (shared by every load of an indexed file
version)."""


@versions.consistent
def _owns(sessions: Sequence[Session], zone: tzinfo | None) -> list[_Own]:
    """Each session's :class:`_Own`: kept ones reused, the rest derived and kept."""
    try:
        zoned = zone_key(zone)
        hash(zoned)
    except TypeError:
        return _own_turns(sessions, zone)
    kept = [memo.slot(session, _SPACE, shared=True) for session in sessions]
    found: list[_Own | None] = [k.get(zoned) for k in kept]
    todo = [i for i, own in enumerate(found) if own is None]
    for i, own in zip(todo, _own_turns([sessions[i] for i in todo], zone), strict=True):
        found[i] = kept[i][zoned] = own
    return found  # type: ignore[return-value]  # every None was filled in above


@dataclass
class _Turns:
    """Every session's call-making turns, as arrays: session key, user-turn number (-1:
    none), window, source, agent calls saved, summary checkpoints, and per turn the
    recorded usage to match (``total``: ``_last_usage`` as count, input and output tokens,
    -1 where none; ``rounds``: WebUI rounds)."""

    key: np.ndarray
    number: np.ndarray
    start: np.ndarray
    end: np.ndarray
    source: np.ndarray
    agent_calls: np.ndarray
    summaries: np.ndarray
    total: np.ndarray
    by_key: dict[str, np.ndarray]
    rounds: dict[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.start)


def _session_turns(sessions: Sequence[Session], zone: tzinfo | None) -> tuple[_Turns, int]:
    """Every session's call-making turns, and how many user messages had no usable time;
    summary checkpoints and ``_last_usage`` go to the latest turn of the session's key."""
    owns = _owns(sessions, zone)
    sizes = [len(own.start) for own in owns]
    sid = np.repeat(np.arange(len(owns)), sizes)
    keys = np.array([s.key for s in sessions], dtype=object)

    def joined(name: str) -> np.ndarray:
        parts = [getattr(own, name) for own in owns]
        return np.concatenate([*parts, np.empty(0, dtype=np.int64)]).astype(np.int64)

    start, agent = joined("start"), joined("agent_calls")
    sources = np.array([call_source(str(k)) for k in keys], dtype=object)
    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    members: dict[str, list[int]] = {}
    for i, session in enumerate(sessions):
        members.setdefault(session.key, []).append(i)
    by_key = {
        key: np.arange(offsets[group[0]], offsets[group[0] + 1])
        if len(group) == 1
        else np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in group])
        for key, group in members.items()
    }
    summaries = np.zeros(len(start), dtype=np.int64)
    total = np.full((len(start), 3), -1, dtype=np.int64)
    for session, own in zip(sessions, owns, strict=True):
        for at in own.checkpoints:
            pooled = by_key[session.key]
            owner = np.flatnonzero(start[pooled] <= at)
            if len(owner):
                summaries[pooled[owner[-1]]] += 1
        recorded = last_usage(session.metadata)
        if recorded is None:
            continue
        pooled = by_key[session.key]
        making = pooled[agent[pooled] > 0]
        if len(making):
            counts = (recorded.request_count, recorded.input_tokens, recorded.output_tokens)
            total[making[-1]] = counts
    turns = _Turns(
        key=keys[sid],
        number=joined("number"),
        start=start,
        end=joined("end"),
        source=sources[sid],
        agent_calls=agent,
        summaries=summaries,
        total=total,
        by_key=by_key,
    )
    return turns, sum(own.untimed for own in owns)


@dataclass
class _Turn:
    """One turn of a cluster searched call by call."""

    agent_calls: int
    summaries: int
    rounds: tuple[tuple[int, int], ...] | None
    total: tuple[int, int, int] | None


@dataclass
class CallTimes:
    """The logged calls, sorted by start: times (UTC epoch ms), source, outcome and input and
    output tokens (-1 where unknown)."""

    start: np.ndarray
    end: np.ndarray
    source: Sequence[str | None] | np.ndarray
    finish: Sequence[str | None] | np.ndarray
    prompt: np.ndarray
    completion: np.ndarray


@dataclass
class Attribution:
    """Per call: session key (None: not tied), turn and step (-1: none), kind (a code into
    :data:`KINDS`) and how it was tied (a code into :data:`ATTRIBUTIONS`, -1: not tied)."""

    session_key: np.ndarray
    turn: np.ndarray
    step: np.ndarray
    kind: np.ndarray
    how: np.ndarray
    summary: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


@dataclass
class _State:
    """What a partial assignment gave each turn of a cluster."""

    agent: list[int]
    summary: list[int]
    last_end: list[int]
    seq: list[int]
    """Agent calls with usage, in order (the next WebUI round to match)."""
    tokens: list[tuple[int, int]]


class _TooTangled(Exception):
    """The search met its node or depth budget."""


class _Cluster:
    """Turns linked by calls that could belong to more than one of them, solved together.

    ``level`` 0 keeps every constraint, 1 drops the recorded usage (it may belong to
    another turn than the one it was given to), 2 keeps only the windows and that a turn's
    calls never overlap.
    """

    def __init__(
        self, calls: CallTimes, turns: list[_Turn], members: list[int], options: list[list[int]]
    ) -> None:
        self.calls = calls
        self.turns = turns
        self.members = members
        self.options = options
        self.level = 0
        self.nodes = 0

    def _fits(self, state: _State, c: int, k: int) -> bool:
        calls, turn = self.calls, self.turns[k]
        if calls.start[c] < state.last_end[k]:
            return False
        if calls.source[c] == "dream":
            return self.level >= 2 or state.summary[k] < turn.summaries
        if self.level >= 2 or calls.finish[c] in FAILED_REASONS:
            return True
        if state.agent[k] >= turn.agent_calls:
            return False
        prompt, completion = int(calls.prompt[c]), int(calls.completion[c])
        if self.level == 0 and prompt >= 0 and completion >= 0:
            if turn.rounds is not None:
                pos = state.seq[k]
                return pos < len(turn.rounds) and turn.rounds[pos] == (prompt, completion)
            if turn.total is not None:
                (p, o), (count, total_p, total_o) = state.tokens[k], turn.total
                return state.seq[k] < count and p + prompt <= total_p and o + completion <= total_o
        return True

    def _count(self, state: _State, c: int, k: int, sign: int) -> None:
        calls = self.calls
        if calls.source[c] == "dream":
            state.summary[k] += sign
        elif calls.finish[c] not in FAILED_REASONS:
            state.agent[k] += sign
            prompt, completion = int(calls.prompt[c]), int(calls.completion[c])
            if prompt >= 0 and completion >= 0:
                state.seq[k] += sign
                p, o = state.tokens[k]
                state.tokens[k] = (p + sign * prompt, o + sign * completion)

    def _complete(self, state: _State) -> bool:
        if self.level > 0:
            return True
        for k, turn in enumerate(self.turns):
            if turn.rounds is not None and state.seq[k] != len(turn.rounds):
                return False
            counted = (state.seq[k], *state.tokens[k])
            if turn.rounds is None and turn.total is not None and counted != turn.total:
                return False
        return True

    def _all_fit(self) -> bool:
        """One turn whose window holds only these calls, and all of them fit it with every
        constraint kept: the one assignment that ties the most calls."""
        if len(self.turns) != 1:
            return False
        state = _State([0], [0], [-(2**62)], [0], [(0, 0)])
        for c in self.members:
            if not self._fits(state, c, 0):
                return False
            state.last_end[0] = int(self.calls.end[c])
            self._count(state, c, 0, 1)
        return self._complete(state)

    def solve(self) -> tuple[list[set[int | None]], int] | None:
        """Per member call, the turns (None: none) it takes in the assignments that tie the
        most calls, and the level of constraints kept; None when too tangled to search."""
        if self._all_fit():
            return [{0} for _ in self.members], 0
        if len(self.members) > _DEPTH:
            return None
        for level in range(3):
            self.level, self.nodes = level, 0
            try:
                seen = self._search()
            except _TooTangled:
                return None
            if seen is not None:
                return seen, level
        return None

    def _search(self) -> list[set[int | None]] | None:
        n, m = len(self.members), len(self.turns)
        state = _State([0] * m, [0] * m, [-(2**62)] * m, [0] * m, [(0, 0)] * m)
        best = [-1]
        seen: list[set[int | None]] = [set() for _ in range(n)]
        chosen: list[int | None] = [None] * n

        def visit(i: int, tied: int) -> None:
            self.nodes += 1
            if self.nodes > _NODE_BUDGET:
                raise _TooTangled
            if tied + (n - i) < best[0]:
                return
            if i == n:
                if self._complete(state):
                    if tied > best[0]:
                        best[0] = tied
                        for s in seen:
                            s.clear()
                    for s, k in zip(seen, chosen, strict=True):
                        s.add(k)
                return
            c = self.members[i]
            for k in self.options[i]:
                if self._fits(state, c, k):
                    previous = state.last_end[k]
                    state.last_end[k] = int(self.calls.end[c])
                    self._count(state, c, k, 1)
                    chosen[i] = k
                    visit(i + 1, tied + 1)
                    self._count(state, c, k, -1)
                    state.last_end[k] = previous
            chosen[i] = None
            visit(i + 1, tied)

        visit(0, 0)
        return seen if best[0] >= 0 else None


def _union(parent: dict[int, int], a: int, b: int) -> None:
    a, b = _root(parent, a), _root(parent, b)
    parent[max(a, b)] = min(a, b)


def _root(parent: dict[int, int], a: int) -> int:
    while parent.get(a, a) != a:
        a = parent[a]
    return a


@dataclass
class _Calls:
    """The calls as arrays: source codes (see ``names``), dream / cron / failed flags."""

    source: np.ndarray
    names: list[str]
    dream: np.ndarray
    cron: np.ndarray
    failed: np.ndarray

    def codes(self, values: np.ndarray) -> np.ndarray:
        """Source codes of ``values`` (-2 for a source no call has)."""
        index = {name: i for i, name in enumerate(self.names)}
        return np.array([index.get(v, -2) for v in values], dtype=np.int64)


def _call_arrays(calls: CallTimes) -> _Calls:
    codes, names = pd.factorize(pd.Series(calls.source, dtype=object))
    named = [str(n) for n in names]
    finish = pd.Series(calls.finish, dtype=object)
    return _Calls(
        codes.astype(np.int64),
        named,
        codes == (named.index("dream") if "dream" in named else -3),
        codes == (named.index("cron") if "cron" in named else -3),
        finish.isin(list(FAILED_REASONS)).to_numpy(dtype=bool),
    )


def _candidates(calls: CallTimes, coded: _Calls, turns: _Turns) -> tuple[np.ndarray, np.ndarray]:
    """(call, turn) pairs, sorted, of the turns whose window holds a call and whose session
    its source fits (a summary call: a turn with a summary checkpoint)."""
    lows = np.searchsorted(calls.start, turns.start, side="left")
    highs = np.searchsorted(calls.start, turns.end, side="right")
    counts = np.maximum(highs - lows, 0)
    pair_turn = np.repeat(np.arange(len(turns), dtype=np.int64), counts)
    firsts = np.cumsum(counts) - counts
    pair_call = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(lows - firsts, counts)
    source = coded.source[pair_call]
    own = coded.codes(turns.source)[pair_turn]
    any_session = np.isin(source, [coded.names.index(s) for s in _ANY_SESSION if s in coded.names])
    fits = np.where(
        coded.dream[pair_call],
        turns.summaries[pair_turn] > 0,
        (source >= 0) & ((source == own) | any_session),
    )
    pair_call, pair_turn = pair_call[fits], pair_turn[fits]
    order = np.lexsort((pair_turn, pair_call))
    return pair_call[order], pair_turn[order]


def _attach_rounds(turns: _Turns, rounds: list[RoundUsages]) -> list[str]:
    """Give each WebUI turn_end record's rounds to its turn (the session's latest turn
    started before it was written)."""
    problems = []
    for record in rounds:
        pooled = turns.by_key.get(record.session_key, np.empty(0, dtype=np.int64))
        owner = pooled[turns.start[pooled] <= record.created_at_ms]
        if not len(owner):
            problems.append(f"{record.path}:{record.line_no}: turn_end of no stored turn; unused")
            continue
        turns.rounds[int(owner[-1])] = record.rounds
    return problems


def _offset_hint(times: np.ndarray, turns: _Turns, fitted: int) -> str | None:
    """Say so when most agent calls (at ``times``) fall in no turn window but would under
    another whole quarter-hour offset: the session times were read in the wrong zone."""
    wanted = len(times)
    if not len(turns) or wanted < 4 or fitted * 2 > wanted:
        return None
    order = np.argsort(turns.start, kind="stable")
    starts = turns.start[order]
    reach = np.maximum.accumulate(turns.end[order])
    best, best_fit = 0, fitted
    for quarter in range(-14 * 4, 14 * 4 + 1):
        shift = quarter * 15 * 60_000
        at = np.searchsorted(starts + shift, times, side="right") - 1
        inside = int(np.sum((at >= 0) & (times <= reach[np.maximum(at, 0)] + shift)))
        if inside > best_fit:
            best, best_fit = shift, inside
    if best == 0 or best_fit * 2 <= wanted:
        return None
    return (
        f"{wanted - fitted} of {wanted} agent calls fall in no turn window; with session "
        f"times read {best / 3_600_000:+g} h off, {best_fit} would: pass tz= the zone "
        "nanobot ran in"
    )


def _alone_and_fitting(
    calls: CallTimes, coded: _Calls, turns: _Turns, pair_call: np.ndarray, pair_turn: np.ndarray
) -> np.ndarray:
    """The pairs of turns alone in their windows (no call of theirs could be another turn's)
    and without WebUI rounds to match, whose calls all fit them with every constraint kept:
    such a turn takes all its calls, the one assignment that ties the most.  A turn with
    ``_last_usage`` fits when its calls with usage add up to it exactly."""
    m = len(turns)
    options = np.bincount(pair_call, minlength=len(calls.start))
    shared = np.zeros(m, dtype=bool)
    shared[pair_turn[options[pair_call] > 1]] = True
    plain = ~np.isin(np.arange(m), list(turns.rounds))
    chosen = ~shared[pair_turn] & plain[pair_turn]
    c, k = pair_call[chosen], pair_turn[chosen]
    order = np.argsort(k, kind="stable")
    c, k = c[order], k[order]
    follows = np.flatnonzero(k[1:] == k[:-1]) + 1
    overlapping = np.zeros(m, dtype=bool)
    overlapping[k[follows][calls.start[c[follows]] < calls.end[c[follows - 1]]]] = True
    dreams = np.bincount(k[coded.dream[c]], minlength=m)
    agent = ~coded.dream[c] & ~coded.failed[c]
    prompt, completion = calls.prompt[c], calls.completion[c]
    signed = agent & (prompt >= 0) & (completion >= 0)
    counted = np.stack(
        [
            np.bincount(k[signed], minlength=m),
            np.bincount(k[signed], weights=prompt[signed], minlength=m),
            np.bincount(k[signed], weights=completion[signed], minlength=m),
        ],
        axis=1,
    )
    usage = (turns.total[:, 0] < 0) | (counted == turns.total).all(axis=1)
    fits = (dreams <= turns.summaries) & (np.bincount(k[agent], minlength=m) <= turns.agent_calls)
    solved = plain & ~shared & ~overlapping & fits & usage
    return solved[pair_turn] & chosen


def attribute(
    calls: CallTimes,
    sessions: Sequence[Session],
    rounds: list[RoundUsages],
    zone: tzinfo | None,
) -> Attribution:
    """Tie each call to its (session, turn, step), with its kind and how it was tied."""
    turns, untimed = _session_turns(sessions, zone)
    problems = _attach_rounds(turns, rounds)
    if untimed:
        problems.append(f"{untimed} user message(s) without a valid timestamp: no window")
    n = len(calls.start)
    coded = _call_arrays(calls)
    pair_call, pair_turn = _candidates(calls, coded, turns)
    owner = np.full(n, -1, dtype=np.int64)
    how = np.full(n, -1, dtype=np.int64)
    ambiguous = np.zeros(n, dtype=bool)
    done = _alone_and_fitting(calls, coded, turns, pair_call, pair_turn)
    tied_call, tied_turn = pair_call[done], pair_turn[done]
    owner[tied_call] = tied_turn
    exact = (turns.total[tied_turn, 0] >= 0) & ~coded.dream[tied_call]
    how[tied_call] = np.where(exact, ATTRIBUTIONS.index("exact"), ATTRIBUTIONS.index("time"))
    options: dict[int, list[int]] = {}
    for c, k in zip(pair_call[~done].tolist(), pair_turn[~done].tolist(), strict=True):
        options.setdefault(c, []).append(k)
    parent: dict[int, int] = {}
    for opts in options.values():
        for k in opts[1:]:
            _union(parent, opts[0], k)
    groups: dict[int, list[int]] = {}
    for c, opts in options.items():
        groups.setdefault(_root(parent, opts[0]), []).append(c)
    for members in groups.values():
        local = sorted({k for c in members for k in options[c]})
        index = {k: i for i, k in enumerate(local)}
        cluster = _Cluster(
            calls,
            [_searched(turns, k) for k in local],
            members,
            [[index[k] for k in options[c]] for c in members],
        )
        solved = cluster.solve()
        if solved is None:
            problems.append(f"{len(members)} overlapping calls too many to untangle: unattributed")
            ambiguous[members] = True
            continue
        seen, level = solved
        for c, ties in zip(members, seen, strict=True):
            if len(ties) != 1:
                ambiguous[c] = True
                continue
            (k,) = ties
            if k is None:
                continue
            owner[c] = local[k]
            signed = local[k] in turns.rounds or turns.total[local[k], 0] >= 0
            exact = level == 0 and signed and not coded.dream[c]
            how[c] = ATTRIBUTIONS.index("exact" if exact else "time")
    return _finish(calls, coded, turns, pair_call, pair_turn, owner, how, ambiguous, problems)


def _searched(turns: _Turns, k: int) -> _Turn:
    total = turns.total[k]
    return _Turn(
        int(turns.agent_calls[k]),
        int(turns.summaries[k]),
        turns.rounds.get(k),
        None if total[0] < 0 else (int(total[0]), int(total[1]), int(total[2])),
    )


def _finish(
    calls: CallTimes,
    coded: _Calls,
    turns: _Turns,
    pair_call: np.ndarray,
    pair_turn: np.ndarray,
    owner: np.ndarray,
    how: np.ndarray,
    ambiguous: np.ndarray,
    problems: list[str],
) -> Attribution:
    """Steps, kinds and the summary line from the owners found: a call's step is the agent
    calls its turn made before it, unknown once a call that may be the turn's stayed
    ambiguous."""
    n = len(owner)
    options = np.bincount(pair_call, minlength=n)
    tied = np.flatnonzero(owner >= 0)
    kind = np.where(
        ambiguous & coded.dream,
        1,
        np.where(coded.dream | (coded.cron & (options == 0)), 2, 0),
    )
    kind[tied] = np.where(coded.dream[tied], 1, 0)
    by_turn = tied[np.argsort(owner[tied], kind="stable")]
    counted = (~coded.dream[by_turn] & ~coded.failed[by_turn]).astype(np.int64)
    before = np.cumsum(counted) - counted
    group = owner[by_turn]
    heads = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if len(group) else group
    before -= np.repeat(before[heads], np.diff(np.r_[heads, len(group)]))
    first_unsure = np.full(len(turns), n, dtype=np.int64)
    unsure = ambiguous[pair_call]
    np.minimum.at(first_unsure, pair_turn[unsure], pair_call[unsure])
    step = np.full(n, -1, dtype=np.int64)
    known = first_unsure[group] >= by_turn
    step[by_turn[known]] = before[known]
    key = np.full(n, None, dtype=object)
    key[tied] = turns.key[owner[tied]]
    number = np.full(n, -1, dtype=np.int64)
    number[tied] = turns.number[owner[tied]]
    out = Attribution(key, number, step, kind, how, problems=problems)
    agent = np.flatnonzero(~coded.dream & ~coded.cron)
    outside = int(np.sum(options[agent] == 0))
    out.summary = {
        "calls": n,
        "exact": int(np.sum(how == ATTRIBUTIONS.index("exact"))),
        "time": int(np.sum(how == ATTRIBUTIONS.index("time"))),
        "ambiguous": int(ambiguous.sum()),
        "outside": outside,
        "unattributed": n - len(tied),
    }
    hint = _offset_hint(calls.start[agent], turns, len(agent) - outside)
    if hint:
        out.problems.append(hint)
    return out
