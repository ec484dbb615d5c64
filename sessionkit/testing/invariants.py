"""History-window invariants: properties every window of nanobot 0.2.2's policy has.

They hold for any corpus and any setting; they are properties of the exact policy's output,
not a second implementation of it, so they check :func:`sessionkit.windows` and the policy
alike (see :data:`sessionkit.schema.INVARIANTS`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from sessionkit import schema
from sessionkit.conventions import is_many
from sessionkit.nanobot.policies import get_policy, tool_call_ids, tool_result_id
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings
from sessionkit.schema import VIOLATIONS
from sessionkit.simulate import replay
from sessionkit.simulate.windowing import windows

if TYPE_CHECKING:
    from sessionkit.store.corpus import Corpus

Message = dict[str, Any]

__all__ = ["InvariantViolation", "assert_window_invariants", "check_window_invariants"]

_FRAME_COLUMNS = (
    "session_key",
    "at",
    "turn",
    "consolidated",
    "start",
    "stop",
    "max_messages",
    "max_tokens",
    "include_timestamps",
    "extend_to_user",
)


class InvariantViolation(AssertionError):
    """A history window breaks one of :data:`sessionkit.schema.INVARIANTS`."""


@dataclass(frozen=True)
class _Window:
    """One window to check: where it was taken, under which setting, and its source indices."""

    session: Session
    at: int
    turn: int
    consolidated: int
    max_messages: int
    max_tokens: int
    include_timestamps: bool
    extend_to_user: bool
    indices: list[int]


@dataclass(frozen=True)
class _Replayed:
    """A session's messages as replayed: whether each is sent, and its tokens (0: never)."""

    sent: np.ndarray
    tokens: np.ndarray


_Memo = dict[tuple[int, bool], _Replayed]
"""One check's replays by (id(session), include_timestamps): each made once per check."""


def _replayed(memo: _Memo, session: Session, stamps: bool) -> _Replayed:
    key = (id(session), stamps)
    if key not in memo:
        replayed = replay.replay(session, HistorySettings(include_timestamps=stamps))
        tokens = replayed.sent_tokens().to_numpy(dtype=np.int64, na_value=0)
        memo[key] = _Replayed(replayed.sent(), tokens)
    return memo[key]


def _own_turn_calls(messages: Sequence[Message], tool_at: int) -> set[str]:
    """Call ids declared since the latest user message before ``messages[tool_at]``."""
    ids: set[str] = set()
    for i in range(tool_at - 1, -1, -1):
        role = messages[i].get("role")
        if role == "user":
            break
        if role == "assistant":
            ids.update(tool_call_ids(messages[i]))
    return ids


def _user_start_ok(messages: Sequence[Message], sent: np.ndarray, start: int, at: int) -> bool:
    first = messages[start]
    if first.get("role") == "user":
        return True
    following = messages[start + 1] if start + 1 < at else {}
    if first.get("_channel_delivery") and following.get("role") == "user":
        return True
    earlier = np.flatnonzero(sent[:start])
    if not len(earlier) or messages[earlier[-1]].get("role") != "tool":
        return False
    before = int(earlier[-1])
    answered = tool_result_id(messages[before])
    return answered is not None and answered not in _own_turn_calls(messages, before)


def _over_budget(roles: Sequence[Any], tokens: Sequence[int], max_tokens: int) -> str | None:
    """Why the window breaks its budget, or None (within it, or nanobot's recovery)."""
    total = sum(tokens)
    if total <= max_tokens or len(tokens) == 1:
        return None
    first, used = len(tokens) - 1, tokens[-1]
    while first > 0 and used + tokens[first - 1] <= max_tokens:
        first -= 1
        used += tokens[first]
    if "user" not in roles[first:]:
        return None
    return f"{total} tokens > max_tokens={max_tokens}"


def _violations(window: _Window, replayed: _Replayed) -> Iterable[tuple[str, int | None, str]]:
    """``(invariant, source index, detail)`` for each invariant ``window`` breaks.

    A replayed entry keeps its message's role, ``tool_calls`` and ``tool_call_id``, so the
    stored messages stand for the entries here.
    """
    indices, at = window.indices, window.at
    if not indices:
        return
    messages = window.session.messages
    start = indices[0]
    tail = (np.flatnonzero(replayed.sent[start:at]) + start).tolist()
    if indices != tail or start < window.consolidated:
        yield "tail", start, f"window of {len(indices)} entries is not the replayable tail"
    limit = get_policy(window.session.policy).count_window(window.max_messages)
    if limit > 0 and not window.extend_to_user and at - start > limit:
        yield "max_messages", start, f"spans {at - start} messages > {limit}"
    kept = [messages[i] for i in indices]
    roles = [m.get("role") for m in kept]
    if "user" in roles and not _user_start_ok(messages, replayed.sent, start, at):
        yield "user_start", start, f"starts on a {roles[0]} message"
    declared: set[str] = set()
    for i, message in zip(indices, kept, strict=True):
        if message.get("role") == "assistant":
            declared.update(tool_call_ids(message))
        elif message.get("role") == "tool":
            answered = tool_result_id(message)
            if answered is not None and answered not in declared:
                yield "orphan_tool_result", i, f"answers undeclared call {answered!r}"
    if window.max_tokens > 0:
        over = _over_budget(roles, replayed.tokens[indices].tolist(), window.max_tokens)
        if over:
            yield "token_budget", None, over


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _exact_windows(
    sessions: Iterable[Session],
    settings: HistorySettings,
    max_messages: list[int | None],
    max_tokens: list[int | None],
) -> Iterable[_Window]:
    """The exact policy's window before every user message, for every setting."""
    grid = [(m, t) for m in max_messages for t in max_tokens]
    for session in sessions:
        policy = get_policy(session.policy)
        own = policy.resolve(settings)
        stamps, extend = bool(own.include_timestamps), bool(own.extend_to_user)
        for turn in range(session.n_user_turns):
            before = session.before_user(turn)
            at = len(before.messages)
            offset = before.replay_offset(own.last_consolidated)
            for count, budget in grid:
                chosen = own.replace(max_messages=count, max_tokens=budget)
                replayed = policy.replay(before.messages, offset, **policy.history_kwargs(chosen))
                indices = [i for i, _ in replayed]
                yield _Window(
                    session,
                    at,
                    turn,
                    offset,
                    int(chosen.max_messages),  # type: ignore[arg-type]  # resolved settings: set
                    int(chosen.max_tokens),  # type: ignore[arg-type]  # resolved settings: set
                    stamps,
                    extend,
                    indices,
                )


def _frame_windows(
    frame: pd.DataFrame, sessions: Iterable[Session], memo: _Memo
) -> Iterable[_Window]:
    """The windows a :func:`sessionkit.windows` frame claims: replayable ``[start, stop)``."""
    missing = [c for c in _FRAME_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"not a sessionkit.windows() frame: columns {missing} are missing")
    by_key = {s.key: s for s in sessions}
    rows = frame[list(_FRAME_COLUMNS)].astype({"session_key": "string[python]"})
    for row in rows.itertuples(index=False):
        session = by_key[row.session_key]
        stamps = bool(row.include_timestamps)
        sent = _replayed(memo, session, stamps).sent
        start, stop = int(row.start), int(row.stop)
        yield _Window(
            session,
            int(row.at),
            int(row.turn),
            int(row.consolidated),
            int(row.max_messages),
            int(row.max_tokens),
            stamps,
            bool(row.extend_to_user),
            (np.flatnonzero(sent[start:stop]) + start).tolist(),
        )


def check_window_invariants(
    source: Corpus | Session | Iterable[Session] | pd.DataFrame,
    *,
    corpus: Corpus | Iterable[Session] | None = None,
    exact: bool = False,
    settings: HistorySettings = DEFAULT_SETTINGS,
    max_messages: int | Sequence[int] | None = None,
    max_tokens: int | Sequence[int] | None = None,
    include_timestamps: bool | None = None,
    extend_to_user: bool | None = None,
) -> pd.DataFrame:
    """Every :data:`~sessionkit.schema.INVARIANTS` violation among history windows, one row each.

    Parameters
    ----------
    source
        A corpus (or sessions): its window before every user message is checked for each
        ``max_messages`` x ``max_tokens`` combination, as computed by
        :func:`sessionkit.windows` or, with ``exact=True``, by the exact policy (slower, the
        ground truth).  Or a frame from :func:`sessionkit.windows` with the ``corpus`` it was
        computed on; its rows carry their own settings.
    corpus
        The sessions a ``source`` frame covers.
    exact
        Take the windows from the exact policy instead of :func:`sessionkit.windows`.
    settings
        The history settings (default: what nanobot 0.2.2's agent loop passes).
    max_messages, max_tokens, include_timestamps, extend_to_user
        Overrides of ``settings`` (None: the setting's); ``max_messages`` and ``max_tokens``
        may be lists.

    Returns a frame with :data:`~sessionkit.schema.VIOLATIONS`; empty when every window is
    sound.
    """
    memo: _Memo = {}
    settings = settings.replace(
        include_timestamps=include_timestamps, extend_to_user=extend_to_user
    )
    counts = [None] if max_messages is None else _as_list(max_messages)
    budgets = [None] if max_tokens is None else _as_list(max_tokens)
    if isinstance(source, pd.DataFrame):
        if corpus is None:
            raise TypeError("checking a windows frame needs corpus=..., the sessions it covers")
        candidates: Iterable[_Window] = _frame_windows(source, corpus, memo)
    else:
        sessions = [source] if isinstance(source, Session) else list(source)
        if exact:
            candidates = _exact_windows(sessions, settings, counts, budgets)
        else:
            swept: dict[str, Any] = {"max_messages": max_messages, "max_tokens": max_tokens}
            frame = windows(
                sessions,
                settings=settings,
                grid={k: list(v) for k, v in swept.items() if is_many(v)} or None,
                **{k: v for k, v in swept.items() if not is_many(v)},
            )
            candidates = _frame_windows(frame, sessions, memo)
    rows = [
        (w.session.key, w.at, w.turn, w.max_messages, w.max_tokens, name, idx, detail)
        for w in candidates
        for name, idx, detail in _violations(w, _replayed(memo, w.session, w.include_timestamps))
    ]
    columns = list(zip(*rows, strict=True)) or [()] * len(VIOLATIONS)
    return schema.frame(
        VIOLATIONS, {c.name: list(v) for c, v in zip(VIOLATIONS, columns, strict=True)}
    )


def assert_window_invariants(
    source: Corpus | Session | Iterable[Session] | pd.DataFrame, **options: Any
) -> None:
    """Raise :class:`InvariantViolation` when :func:`check_window_invariants` finds any."""
    found = check_window_invariants(source, **options)
    if found.empty:
        return
    counts = found["invariant"].value_counts().to_dict()
    summary = ", ".join(f"{name}: {n}" for name, n in counts.items())
    with pd.option_context("display.width", 200, "display.max_colwidth", 80):
        head = found.head(10).to_string(index=False)
    raise InvariantViolation(f"{len(found)} window invariant violations ({summary}):\n{head}")
