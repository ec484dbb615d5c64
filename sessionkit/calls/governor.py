"""A context governor's verdict at each call, exactly: what the release measured before the
call (its whole-request estimate: system prompt, tools, history, current message, earlier
steps, as one newline-joined text) against its budget, and whether the files show that it
summarised there.

The estimate is one cl100k count of the joined text, and counts do not add up across the
joins, so near the budget only the exact count decides.  Far from it, the sum of the
messages' own counts decides (``exact`` False): each join moves the count by at most a few
tokens, and the screen keeps four per join of margin; a request holding anything the sum
does not see the same way (non-text blocks, special-token text) is always counted exactly.

0.3.5 measures the provider's reported input tokens instead when a request repeats the
previous one word for word.  Only a retry after an empty reply does that, and a retry leaves
nothing in the session file: every call rebuilt from the files differs from the one before,
so the estimate is what the release measured at each of them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from sessionkit.calls.assembly import LoopPieces, TurnCalls, count_text, kit_of, turn_calls
from sessionkit.calls.governor_kit import governor_texts
from sessionkit.calls.installs import find_release
from sessionkit.conventions import entry_point
from sessionkit.nanobot.kit import Kit
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.release import DEFAULT_MAX_OUTPUT, ReplayPolicy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings
from sessionkit.nanobot.tokens import has_special_tokens
from sessionkit.nanobot.workspace import config_file
from sessionkit.store.corpus import Corpus, resolve_session

__all__ = ["VERDICT_COLUMNS", "frame_verdicts", "verdicts"]

VERDICT_COLUMNS: dict[str, str] = {
    "session_key": "string",
    "turn": "int64",
    "step": "int64",
    "kind": "string",
    "tokens": "int64",
    "budget": "int64",
    "needs_summary": "boolean",
    "summarised": "boolean",
    "exact": "bool",
    "inferred": "bool",
}
"""The columns of :func:`verdicts` and their dtypes."""

_JOIN_MARGIN = 4
"""Tokens of margin the screen keeps per newline join of the estimate's text."""


def _screenable(message: Mapping[str, Any]) -> bool:
    """Whether a message's own count adds up with the others' (plain text content only)."""
    content = message.get("content")
    if isinstance(content, list):
        return all(
            isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
            for block in content
        )
    return content is None or isinstance(content, str)


def _joins(message: Mapping[str, Any]) -> int:
    """How many texts of one message the estimate joins (an upper bound)."""
    content = message.get("content")
    texts = len(content) if isinstance(content, list) else 1
    extra = ("tool_calls", "reasoning_content", "name", "tool_call_id")
    return texts + sum(1 for key in extra if message.get(key))


class _Meter:
    """Measures requests of one kit as the release does, counting each message text once."""

    def __init__(self, policy: ReplayPolicy, kit: Kit) -> None:
        self.policy = policy
        self.tools = [dict(t) for t in kit.tools]
        text = json.dumps(self.tools, ensure_ascii=False) if self.tools else ""
        self.tool_tokens = count_text("\n" + text) if text else 0
        self.counts: dict[str, int] = {}

    def _count(self, payload: str) -> int:
        if payload not in self.counts:
            self.counts[payload] = count_text(payload) if payload else 0
        return self.counts[payload]

    def exact(self, loop: list[dict[str, Any]]) -> int:
        """The release's own estimate of the request."""
        return self.policy.estimate_request(loop, self.tools, count_text)

    def measure(self, loop: list[dict[str, Any]], budget: int) -> tuple[int, bool]:
        """(tokens, exact): the screen's sum when it is clearly on one side of ``budget``."""
        payloads = [self.policy.message_payload(m) for m in loop]
        if budget <= 0 or not all(map(_screenable, loop)) or any(map(has_special_tokens, payloads)):
            return self.exact(loop), True
        framing = 4 * len(loop)
        screen = sum(map(self._count, payloads)) + len(loop) - 1 + self.tool_tokens + framing
        margin = _JOIN_MARGIN * (sum(map(_joins, loop)) + 1)
        if screen + margin < budget or screen - margin >= budget:
            return screen, False
        return self.exact(loop), True


def _turn_rows(
    policy: ReplayPolicy,
    kit: Kit,
    session: Session,
    turn: int,
    calls: TurnCalls,
    meter: _Meter,
    steps: range,
    limits: tuple[int, int],
    archive: Callable[[], Mapping[str, Any]] | None,
) -> list[dict[str, Any]]:
    """One row per call of one turn: the summary call (when ``archive`` is given) and the
    agent calls in ``steps``."""
    plan = calls.governor
    context_window, max_output = limits
    budget = policy.loop_call(context_window, max_output, 0).governor_budget
    system = policy.summary_system_prompt(kit, plan.last_summary, session.updated_at)
    summary_system = None
    if plan.summary is not None:
        summary_system = policy.summary_system_prompt(
            kit, plan.summary.as_metadata(), session.updated_at
        )
    pieces: LoopPieces = {"system": system, "history": calls.history, "current": calls.current}
    start_inferred = bool(plan.last_summary_inferred)
    rows = []
    for step in steps:
        if archive is not None and step == plan.summary_step:
            loop = policy.summary_loop_messages(
                kit, session.key, archive(), **pieces, steps=calls.steps, step=step
            )
            rows.append(
                {
                    "turn": turn,
                    "step": step,
                    "kind": "summary",
                    "tokens": meter.exact(loop),
                    "budget": context_window - max_output,
                    "needs_summary": pd.NA,
                    "summarised": pd.NA,
                    "exact": True,
                    "inferred": start_inferred,
                }
            )
        loop = policy.governed_loop_messages(
            kit,
            session.key,
            **pieces,
            steps=calls.steps,
            step=step,
            summary_step=plan.summary_step,
            summary_system=summary_system,
            measured=True,
        )
        tokens, exact = meter.measure(loop, budget)
        after = plan.summary_step is not None and step > plan.summary_step
        rows.append(
            {
                "turn": turn,
                "step": step,
                "kind": "agent",
                "tokens": tokens,
                "budget": budget,
                "needs_summary": policy.governor_verdict(tokens, context_window, max_output),
                "summarised": step == plan.summary_step,
                "exact": exact,
                "inferred": after or start_inferred,
            }
        )
    return rows


@entry_point(config="config_dir")
def verdicts(
    source: Session | Corpus,
    *,
    context_window: int,
    max_output: int = DEFAULT_MAX_OUTPUT,
    calls: Literal["first", "all"] = "first",
    key: str | None = None,
    workspace: str | os.PathLike[str] | None = None,
    config_dir: str | os.PathLike[str] | None = None,
    policy: str | None = None,
    settings: HistorySettings = DEFAULT_SETTINGS,
    nanobot: str | os.PathLike[str] | None = None,
    runtime: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """The context governor's verdict before each call of a session (columns:
    :data:`VERDICT_COLUMNS`), from the history each turn actually began with.

    ``calls="first"``: one row per user turn, its first agent call (what
    ``windows(..., context_window=...)["needs_summary"]`` approximates); ``"all"``: every call,
    the summary calls included (those measure the summary request against ``ctx - max_output``:
    over it, the release keeps the raw messages instead of calling).  Agent rows: ``tokens`` is
    the request the release measured (what it would have sent without a summary there),
    ``needs_summary`` its verdict, ``summarised`` whether the files show a summary before that
    call, ``inferred`` whether the request holds a value not on disk.  A command turn makes no
    call and has no row.  The other parameters are :func:`sessionkit.request`'s.
    """
    if calls not in ("first", "all"):
        raise ValueError(f"calls must be 'first' or 'all', not {calls!r}")
    session = resolve_session(source, key)
    chosen = get_policy(policy or session.policy)
    if not chosen.governed:
        raise ValueError(f"{chosen.label} has no context governor")
    config = None if config_dir is None else config_file(config_dir)
    kit, root = kit_of(chosen, session, workspace, config, nanobot, runtime)

    def archive() -> Mapping[str, Any]:
        return governor_texts(chosen, find_release(chosen.version, nanobot))["archive"]

    rows = _session_rows(
        chosen,
        session,
        kit,
        root,
        (context_window, max_output),
        settings,
        first=calls == "first",
        archive=archive if calls == "all" else None,
    )
    frame = pd.DataFrame(rows, columns=list(VERDICT_COLUMNS)[1:])
    frame.insert(0, "session_key", session.key)
    return frame.astype(VERDICT_COLUMNS)


def _session_rows(
    policy: ReplayPolicy,
    session: Session,
    kit: Kit,
    root: Path | None,
    limits: tuple[int, int],
    settings: HistorySettings,
    *,
    first: bool,
    archive: Callable[[], Mapping[str, Any]] | None = None,
    skip: bool = False,
) -> list[dict[str, Any]]:
    """The verdict rows of every turn of one session (``skip``: leave out a turn whose
    request cannot be rebuilt instead of raising)."""
    texts = policy.summary_journal(root, session.key) if root is not None else None
    meter = _Meter(policy, kit)
    rows = []
    for turn in range(session.n_user_turns):
        if session.messages[len(session.before_user(turn).messages)].get("_command"):
            continue  # a command turn: answered without a call
        try:
            found = turn_calls(session, turn, kit, policy=policy, settings=settings, texts=texts)
            steps = range(1) if first else range(len(found.steps))
            rows += _turn_rows(policy, kit, session, turn, found, meter, steps, limits, archive)
        except ValueError:
            if not skip:
                raise
    return rows


def frame_verdicts(
    policy: ReplayPolicy,
    session: Session,
    kit: Kit,
    root: Path | None,
    limits: tuple[int, int],
    settings: HistorySettings,
) -> dict[tuple[int, int], bool]:
    """The verdict before each agent call of a session, by (turn, step), as
    :func:`verdicts` with ``calls="all"`` finds it (turns whose request cannot be rebuilt
    left out): what :func:`sessionkit.requests` reports as ``needs_summary``."""
    rows = _session_rows(policy, session, kit, root, limits, settings, first=False, skip=True)
    return {(row["turn"], row["step"]): bool(row["needs_summary"]) for row in rows}
