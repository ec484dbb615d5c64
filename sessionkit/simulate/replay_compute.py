"""Computing replays: one session's :class:`Replay` under several releases and settings at once.

What does not depend on the release is read from the messages once (:func:`part`, for the
whole session or a range of it), and the ranges' parts are joined (:func:`assembled`), so a
long session can be replayed range by range in workers
(:mod:`sessionkit.simulate.replay_workers`).  Entries are counted by
:class:`~sessionkit.simulate.replay_counts.EntryCounter`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from operator import eq, is_
from typing import Any

import numpy as np
import pandas as pd

from sessionkit.nanobot.history import HIDDEN_HISTORY_KEY
from sessionkit.nanobot.policies import ReplayPolicy, get_policy, tool_call_ids, tool_result_id
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import HistorySettings
from sessionkit.simulate.replay_counts import EntryCounter
from sessionkit.simulate.replay_entries import replayed_entries
from sessionkit.store.counting import TokenCache
from sessionkit.store.fields import hidden_flags, message_field, truthy_flags, user_turn_flags

__all__ = [
    "UNREPLAYABLE",
    "Job",
    "Part",
    "Replay",
    "ReplayKey",
    "Target",
    "assembled",
    "compute",
    "part",
    "policy_for",
    "replay_keys",
]

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


def policy_for(session: Session, policy: str | None) -> ReplayPolicy:
    """The release a replay uses: ``policy``, or the session's own when None (a candidate's
    base: its replays are the release's)."""
    return get_policy(get_policy(session.policy if policy is None else policy).release_name)


Target = tuple[ReplayPolicy, HistorySettings]
"""A release and the history settings its replayed entries are rewritten under."""

Job = tuple[str | None, HistorySettings]
"""A replay asked for: the release (None: each session's own) and the history settings."""

ReplayKey = tuple[str, tuple[Any, ...]]
"""What a replay depends on besides the messages: the policy's name and its entry key."""


def _key(session: Session, policy: str | None, settings: HistorySettings) -> ReplayKey:
    chosen = policy_for(session, policy)
    return chosen.name, chosen.entry_key(settings)


def replay_keys(
    sessions: list[Session], policy: str | None, settings: HistorySettings
) -> list[ReplayKey]:
    """Each session's :func:`_key`, resolved once per release: what its replay is kept by."""
    by_release: dict[str, ReplayKey] = {}
    keys = []
    for session in sessions:
        name = session.policy if policy is None else policy
        if name not in by_release:
            by_release[name] = _key(session, policy, settings)
        keys.append(by_release[name])
    return keys


def compute(
    session: Session,
    targets: list[Target],
    cache: TokenCache | None,
    stored: np.ndarray | None = None,
    messages: list[dict[str, Any]] | None = None,
) -> list[Replay]:
    """The session's :class:`Replay` under each target: what does not depend on the release
    is read from the messages once, and each entry is counted once per counting rule
    (``stored``: the messages' own counts by
    :data:`~sessionkit.simulate.replay_counts.STORED_POLICY`, -1 where none; ``messages``:
    the session's, read by the caller, default :attr:`Session.messages`)."""
    own = session.messages if messages is None else messages
    return assembled([part(own, 0, targets, cache, stored)], targets)


@dataclass
class Part:
    """What one range of a session's messages gives its replays (see :func:`assembled`):
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


def part(
    messages: list[dict[str, Any]],
    start: int,
    targets: list[Target],
    cache: TokenCache | None,
    stored: np.ndarray | None,
) -> Part:
    """The :class:`Part` of ``messages``, the session's from index ``start`` on (``stored``:
    their stored counts, see :func:`compute`): one worker's share of a long session."""
    roles = message_field(messages, "role")
    is_user = np.fromiter(map(eq, roles, repeat("user")), dtype=bool, count=len(messages))
    part = Part(
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
    counter = EntryCounter(messages, stored, cache)
    hidden = hidden_flags(messages)
    rewritten = replayed_entries(messages, roles, targets)
    for (policy, _), (entries, raised) in zip(targets, rewritten, strict=True):
        kept = [i for i, entry in enumerate(entries) if entry is not None]
        part.turns.append(user_turn_flags(messages, roles, hidden, policy))
        part.tokens.append(counter.counts(policy, entries, kept))
        part.kept.append([i + start for i in kept] if start else kept)
        part.raised.append([i + start for i in raised] if start else raised)
    return part


def assembled(parts: list[Part], targets: list[Target]) -> list[Replay]:
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
