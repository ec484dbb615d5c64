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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

import numpy as np
import pandas as pd
from dateutil.tz import tzlocal

from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.usage_records import (
    FAILED_REASONS,
    RoundUsages,
    call_source,
    is_checkpoint,
    last_usage,
)

__all__ = ["Attribution", "CallTimes", "attribute", "local_ms"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_NODE_BUDGET = 200_000
_DEPTH = 400
"""Calls of one tangle searched at most (deeper ones stay unattributed)."""
_ANY_SESSION = frozenset({"cron", "system"})
"""Sources a call of any session's turn may carry (a bound cron job, a subagent's report)."""


def local_ms(stamp: Any, zone: tzinfo | None) -> int | None:
    """A stored naive local timestamp as UTC epoch milliseconds (``zone`` None: this machine's
    local time, daylight saving included); None when it is no timestamp."""
    if not isinstance(stamp, str):
        return None
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.astimezone() if zone is None else moment.replace(tzinfo=zone)
    return (moment - _EPOCH) // _MS


@dataclass
class _Turn:
    """One call-making turn: a user message, or an automation run (``turn`` None)."""

    key: str
    turn: int | None
    start: int
    end: int
    source: str
    agent_calls: int
    summaries: int = 0
    rounds: tuple[tuple[int, int], ...] | None = None
    total: tuple[int, int, int] | None = None
    """``_last_usage``: (request count, input tokens, output tokens)."""


def _calls_made(session: Session, region: list[dict[str, Any]], user: dict[str, Any]) -> int:
    """The agent calls a turn made, by what it saved (the release's step rule)."""
    if user.get("_command"):
        return 0
    try:
        return len(get_policy(session.policy).turn_steps(region))
    except NotImplementedError:
        saved = [m for m in region if m.get("role") == "assistant" and not m.get("_command")]
        return len(saved) or (0 if any(m.get("_command") for m in region) else 1)


def _ms(stamps: list[Any], zone: tzinfo | None) -> np.ndarray:
    """Stored naive local timestamps as UTC epoch milliseconds, -1 where none (vectorised
    :func:`local_ms`; an ambiguous hour of a clock change is read as the earlier one)."""
    try:
        parsed = pd.to_datetime(pd.Series(stamps, dtype=object), format="ISO8601", errors="coerce")
        if parsed.dt.tz is None:
            parsed = parsed.dt.tz_localize(
                zone or tzlocal(),
                ambiguous=np.ones(len(parsed), dtype=bool),
                nonexistent="shift_forward",
            )
        values = parsed.dt.tz_convert("UTC").dt.as_unit("ns").astype("int64").to_numpy() // 10**6
        return np.where(parsed.isna().to_numpy(), -1, values)
    except (ValueError, TypeError, OverflowError):
        return np.array([-1 if (t := local_ms(x, zone)) is None else t for x in stamps])


def _session_turns(sessions: Sequence[Session], zone: tzinfo | None) -> tuple[list[_Turn], int]:
    """Every session's call-making turns, and how many user messages had no usable time."""
    turns: list[_Turn] = []
    stamps: list[Any] = []
    first: list[int] = []
    for session in sessions:
        policy = get_policy(session.policy)
        messages = session.messages
        anchors = [
            i for i, m in enumerate(messages) if m.get("role") == "user" and not is_checkpoint(m)
        ]
        visible = 0
        source = call_source(session.key)
        for n, at in enumerate(anchors):
            user = messages[at]
            number = visible if policy.is_user_turn(user) else None
            visible += number is not None
            stop = anchors[n + 1] if n + 1 < len(anchors) else len(messages)
            region = messages[at + 1 : stop]
            first.append(len(stamps))
            stamps.append(user.get("timestamp"))
            stamps.extend(
                m.get("timestamp")
                for m in region
                if not is_checkpoint(m) and not m.get("_channel_delivery")
            )
            made = _calls_made(session, region, user)
            turns.append(_Turn(session.key, number, 0, 0, source, made))
    if not turns:
        return [], 0
    ms = _ms(stamps, zone)
    ends = np.maximum.reduceat(ms, first)
    kept = []
    for turn, at, end in zip(turns, first, ends, strict=True):
        if ms[at] >= 0:
            turn.start, turn.end = int(ms[at]), int(end)
            kept.append(turn)
    _mark(sessions, kept, zone)
    return kept, len(turns) - len(kept)


def _mark(sessions: Sequence[Session], turns: list[_Turn], zone: tzinfo | None) -> None:
    """Give turns their summary checkpoints (by time) and their sessions' ``_last_usage``."""
    by_key: dict[str, list[_Turn]] = {}
    for turn in turns:
        by_key.setdefault(turn.key, []).append(turn)
    for session in sessions:
        own = by_key.get(session.key, [])
        for message in session.messages:
            if is_checkpoint(message) and (at := local_ms(message.get("timestamp"), zone)):
                owner = [t for t in own if t.start <= at]
                if owner:
                    owner[-1].summaries += 1
        recorded = last_usage(session.metadata)
        making = [t for t in own if t.agent_calls]
        if recorded is not None and making:
            counts = (recorded.request_count, recorded.input_tokens, recorded.output_tokens)
            making[-1].total = counts


@dataclass
class CallTimes:
    """The logged calls, sorted by start: times (UTC epoch ms), source, outcome and tokens."""

    start: np.ndarray
    end: np.ndarray
    source: Sequence[str | None]
    finish: Sequence[str | None]
    prompt: Sequence[int | None]
    completion: Sequence[int | None]


@dataclass
class Attribution:
    """Per call: session key, turn, step, kind and how it was tied (None: not tied)."""

    session_key: list[str | None]
    turn: list[int | None]
    step: list[int | None]
    kind: list[str]
    how: list[str | None]
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
        prompt, completion = calls.prompt[c], calls.completion[c]
        if self.level == 0 and prompt is not None and completion is not None:
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
            prompt, completion = calls.prompt[c], calls.completion[c]
            if prompt is not None and completion is not None:
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


def _union(parent: list[int], a: int, b: int) -> None:
    while parent[a] != a:
        a = parent[a]
    while parent[b] != b:
        b = parent[b]
    parent[max(a, b)] = min(a, b)


def _root(parent: list[int], a: int) -> int:
    while parent[a] != a:
        a = parent[a]
    return a


def _fits_source(call: str | None, turn: _Turn) -> bool:
    return call == turn.source or call in _ANY_SESSION


def _candidates(calls: CallTimes, turns: list[_Turn]) -> list[list[int]]:
    """Per call, the turns whose window holds it and whose session its source fits."""
    out: list[list[int]] = [[] for _ in range(len(calls.start))]
    starts = np.array([t.start for t in turns], dtype=np.int64)
    ends = np.array([t.end for t in turns], dtype=np.int64)
    lows = np.searchsorted(calls.start, starts, side="left")
    highs = np.searchsorted(calls.start, ends, side="right")
    for k in np.flatnonzero(highs > lows):
        turn = turns[k]
        for c in range(lows[k], highs[k]):
            source = calls.source[c]
            if (
                source == "dream"
                and turn.summaries
                or source != "dream"
                and _fits_source(source, turn)
            ):
                out[c].append(int(k))
    return out


def _attach_rounds(turns: list[_Turn], rounds: list[RoundUsages]) -> list[str]:
    """Give each WebUI turn_end record's rounds to its turn (the session's latest turn
    started before it was written)."""
    by_key: dict[str, list[_Turn]] = {}
    for turn in turns:
        by_key.setdefault(turn.key, []).append(turn)
    problems = []
    for record in rounds:
        owner = [t for t in by_key.get(record.session_key, []) if t.start <= record.created_at_ms]
        if not owner:
            problems.append(f"{record.path}:{record.line_no}: turn_end of no stored turn; unused")
            continue
        owner[-1].rounds = record.rounds
    return problems


def _offset_hint(times: np.ndarray, turns: list[_Turn], fitted: int) -> str | None:
    """Say so when most agent calls (at ``times``) fall in no turn window but would under
    another whole quarter-hour offset: the session times were read in the wrong zone."""
    wanted = len(times)
    if not turns or wanted < 4 or fitted * 2 > wanted:
        return None
    ordered = sorted(turns, key=lambda t: t.start)
    starts = np.array([t.start for t in ordered], dtype=np.int64)
    reach = np.maximum.accumulate(np.array([t.end for t in ordered], dtype=np.int64))
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
    options = _candidates(calls, turns)
    parent = list(range(len(turns)))
    for opts in options:
        for k in opts[1:]:
            _union(parent, opts[0], k)
    groups: dict[int, list[int]] = {}
    for c, opts in enumerate(options):
        if opts:
            groups.setdefault(_root(parent, opts[0]), []).append(c)
    owner: list[int | None] = [None] * n
    how: list[str | None] = [None] * n
    ambiguous: set[int] = set()
    for members in groups.values():
        local = sorted({k for c in members for k in options[c]})
        index = {k: i for i, k in enumerate(local)}
        cluster = _Cluster(
            calls,
            [turns[k] for k in local],
            members,
            [[index[k] for k in options[c]] for c in members],
        )
        solved = cluster.solve()
        if solved is None:
            problems.append(f"{len(members)} overlapping calls too many to untangle: unattributed")
            ambiguous.update(members)
            continue
        seen, level = solved
        for c, ties in zip(members, seen, strict=True):
            if len(ties) != 1:
                ambiguous.add(c)
                continue
            (k,) = ties
            if k is None:
                continue
            turn = turns[local[k]]
            owner[c] = local[k]
            signed = turn.rounds is not None or turn.total is not None
            how[c] = "exact" if level == 0 and signed and calls.source[c] != "dream" else "time"
    return _finish(calls, turns, options, owner, how, ambiguous, problems)


def _finish(
    calls: CallTimes,
    turns: list[_Turn],
    options: list[list[int]],
    owner: list[int | None],
    how: list[str | None],
    ambiguous: set[int],
    problems: list[str],
) -> Attribution:
    """Steps, kinds and the summary line from the owners found."""
    n = len(calls.start)
    out = Attribution([None] * n, [None] * n, [None] * n, ["agent"] * n, how, problems=problems)
    done = [0] * len(turns)
    unsure = [False] * len(turns)
    for c in range(n):
        source = calls.source[c]
        k = owner[c]
        if k is None:
            if c in ambiguous:
                for t in options[c]:
                    unsure[t] = True
            out.kind[c] = (
                "summary"
                if c in ambiguous and source == "dream"
                else (
                    "other"
                    if source == "dream" or (source == "cron" and not options[c])
                    else "agent"
                )
            )
            continue
        turn = turns[k]
        out.session_key[c], out.turn[c] = turn.key, turn.turn
        out.step[c] = None if unsure[k] else done[k]
        if source == "dream":
            out.kind[c] = "summary"
        elif calls.finish[c] not in FAILED_REASONS:
            done[k] += 1
    tied = sum(k is not None for k in owner)
    agent = [c for c in range(n) if calls.source[c] not in ("dream", "cron")]
    outside = sum(1 for c in agent if not options[c])
    out.summary = {
        "calls": n,
        "exact": sum(h == "exact" for h in how),
        "time": sum(h == "time" for h in how),
        "ambiguous": len(ambiguous),
        "outside": outside,
        "unattributed": n - tied,
    }
    hint = _offset_hint(calls.start[agent], turns, len(agent) - outside)
    if hint:
        out.problems.append(hint)
    return out
