"""What :func:`sessionkit.requests` adds to each session's calls, per session and kit: the
archived-summary part of each call's system prompt, and the release's per-call clean-up as
per-message arrays (the release's ``call_forms``), counted once per session.

Kept as long as the session's calls (:mod:`sessionkit.calls.turns`) are: keyed by that
object, so a session whose messages change gets both rebuilt.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sessionkit.calls.assembly import count_text, workspace_of
from sessionkit.calls.turns import SessionCalls
from sessionkit.nanobot.kit import Kit
from sessionkit.nanobot.release import ReplayPolicy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS
from sessionkit.simulate import replay
from sessionkit.store.counting import counts_through, token_cache_of

__all__ = ["SessionExtras", "session_extras"]


@dataclass(frozen=True, eq=False)
class SessionExtras:
    """One session's per-message clean-up arrays (length ``n + 1`` prefix sums over its
    stored messages) and per-call system additions (aligned with ``SessionCalls.steps``).

    ``weight``: results of compactable tools each message puts in a request; ``history`` /
    ``steps``: tokens its plain cleaned form adds to the replayed entry / the stored step
    (backfilled results included); ``history_compacted`` / ``steps_compacted``: what its
    compacted form adds to the plain one; ``fillers``: backfilled results after it;
    ``long``: position of the next message with a compacted form (``n`` when none);
    ``run_start[p]``: where the run of tool results ending before message ``p`` begins;
    ``assistant``: which messages are the model's answers (assistant messages);
    ``entry_tokens[value]``: prefix sums of the replayed entries' tokens under that entry
    setting; ``step_raw``: prefix sums of the stored messages' tokens as steps.  Where the
    model cannot say (``regular`` False, a ``user`` message last in a history, a request near
    ``budget``) the frame rebuilds the call (:mod:`sessionkit.calls.rebuilt`).
    """

    weight: np.ndarray
    history: np.ndarray
    history_compacted: np.ndarray
    steps: np.ndarray
    steps_compacted: np.ndarray
    fillers: np.ndarray
    next_long: np.ndarray
    run_start: np.ndarray
    assistant: np.ndarray
    entry_tokens: dict[bool, np.ndarray]
    step_raw: np.ndarray
    step_length: np.ndarray
    summary: np.ndarray
    summary_inferred: np.ndarray
    user: np.ndarray
    """Per stored message, whether the release would merge a current message into it were it
    the history's last (a user message under a modelled clean-up; never without one)."""
    blank: np.ndarray
    """Per stored message, whether its text is empty (an assistant tool call without text, sent
    with null content): 0.3.5's cache marker on it does not reach an OpenAI-compatible wire."""
    keep: int
    budget: int
    regular: bool


_KEPT: weakref.WeakKeyDictionary[SessionCalls, SessionExtras] = weakref.WeakKeyDictionary()
_TEXT_TOKENS: dict[str, int] = {}


def _text_tokens(text: str) -> int:
    if text not in _TEXT_TOKENS:
        _TEXT_TOKENS[text] = count_text(text) if text else 0
    return _TEXT_TOKENS[text]


def _prefix(values: Sequence[int] | np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.asarray(values, dtype=np.int64))]).astype(np.int64)


def _per_call(
    policy: ReplayPolicy, kit: Kit | None, session: Session, root: Path | None
) -> tuple[list[int], list[bool], list[int]]:
    """Per call (turn by turn, step by step): tokens of the system prompt beyond the kit's own
    (the archived summary the release adds), whether that summary is inferred, and the
    stored messages the call's steps hold."""
    messages = session.messages
    positions = [i for i, m in enumerate(messages) if policy.is_user_turn(m)]
    ends = [*positions[1:], len(messages)]
    metadata = session.metadata if isinstance(session.metadata, dict) else {}
    texts = policy.summary_journal(root, session.key) if root is not None else None
    plain: int | None = None
    tokens: list[int] = []
    inferred: list[bool] = []
    lengths: list[int] = []
    for at, stop in zip(positions, ends, strict=True):
        steps = policy.turn_steps(messages[at + 1 : stop])
        lengths += map(len, steps)
        n_steps = len(steps)
        if kit is None or not n_steps:
            tokens += [0] * n_steps
            inferred += [False] * n_steps
            continue
        plan = policy.governed_turn(messages, at, stop, metadata, texts=texts)
        if plan is None:
            if plain is None:  # the prompt reads the session's key and metadata only
                plain = _text_tokens(policy.system_prompt(kit, session)[len(kit.system_text) :])
            tokens += [plain] * n_steps
            inferred += [False] * n_steps
            continue
        start = policy.summary_system_prompt(kit, plan.last_summary, session.updated_at)
        before = _text_tokens(start[len(kit.system_text) :])
        after, after_inferred = before, bool(plan.last_summary_inferred)
        if plan.summary_step is not None and plan.summary is not None:
            held = plan.summary.as_metadata()
            text = policy.summary_system_prompt(kit, held, session.updated_at)
            after, after_inferred = _text_tokens(text[len(kit.system_text) :]), True
        for step in range(n_steps):
            summarised = plan.summary_step is not None and step >= plan.summary_step
            tokens.append(after if summarised else before)
            inferred.append(after_inferred if summarised else bool(plan.last_summary_inferred))
    return tokens, inferred, lengths


_TEXT_BLOCKS = ("text", "input_text", "output_text")


def _blank(message: dict[str, Any]) -> bool:
    """Whether 0.3.5's marker on ``message`` is dropped before it is sent: its content is empty
    or null, or ends with an empty text block (``_sanitize_empty_content`` removes it, the
    marker with it; ``providers/openai_compat_provider.py``)."""
    content = message.get("content")
    if isinstance(content, str) or content is None:
        return not content
    if not isinstance(content, list) or not content:
        return True
    last = content[-1]
    return isinstance(last, dict) and last.get("type") in _TEXT_BLOCKS and not last.get("text")


def _run_start(messages: Sequence[dict[str, Any]]) -> np.ndarray:
    """Per position ``p`` (0 to n): the first of the tool results that end right before it."""
    out = np.arange(len(messages) + 1, dtype=np.int64)
    for p, message in enumerate(messages, start=1):
        if message.get("role") == "tool":
            out[p] = out[p - 1]
    return out


def _build(
    policy: ReplayPolicy,
    session: Session,
    kit: Kit | None,
    entries: Sequence[bool],
    root: Path | None,
) -> SessionExtras:
    messages = session.messages
    n = len(messages)
    cache = token_cache_of([session])
    entry = policy.entry_function(DEFAULT_SETTINGS)
    forms = None if kit is None else policy.call_forms(kit, messages, entry, session.key)
    changed = forms.changed if forms is not None else {}
    raw_steps = replay.stored_tokens(session, policy.name)  # a step's payload is the stored one's
    entry_tokens = {}
    for value in entries:
        variant = DEFAULT_SETTINGS.replace(**{policy.entry_setting: value})
        replayed = replay.replay(session, variant, cache, policy=policy.name)
        tokens = np.zeros(n, dtype=np.int64)
        tokens[replayed.kept] = replayed.tokens
        entry_tokens[value] = _prefix(tokens)
    own = np.diff(next(iter(entry_tokens.values()))) if entry_tokens else np.zeros(n, np.int64)
    batch: list[dict[str, Any]] = []
    spans: list[tuple[int, int]] = []
    for _, *shapes in changed.values():
        for form in shapes:
            spans.append((len(batch), len(batch) + len(form or [])))
            batch += form or []
    counts = _prefix(counts_through(batch, cache, workers=1, policy=policy.name))
    weight, fillers, long = (np.zeros(n, np.int64) for _ in range(3))
    h_plain, h_comp, s_plain, s_comp = (np.zeros(n, np.int64) for _ in range(4))
    parts = iter(spans)
    for i, (w, history, history_compacted, step, step_compacted) in changed.items():
        hist_t, hist_c, step_t, step_c = (
            int(counts[b] - counts[a]) for a, b in (next(parts) for _ in range(4))
        )
        hist_t = int(own[i]) if history is None else hist_t  # entries of other kinds: none
        step_t = int(raw_steps[i]) if step is None else step_t
        weight[i] = w
        fillers[i] = 0 if history is None else len(history) - (entry(messages[i]) is not None)
        h_plain[i] = hist_t - int(own[i])
        s_plain[i] = step_t - int(raw_steps[i])
        h_comp[i] = hist_c - hist_t if history_compacted is not None else 0
        s_comp[i] = step_c - step_t if step_compacted is not None else 0
        long[i] = history_compacted is not None or step_compacted is not None
    at_long = np.flatnonzero(long)
    next_long = np.append(at_long, n)[np.searchsorted(at_long, np.arange(n + 1))]
    summary, summary_inferred, lengths = _per_call(policy, kit, session, root)
    return SessionExtras(
        weight=_prefix(weight),
        history=_prefix(h_plain),
        history_compacted=_prefix(h_comp),
        steps=_prefix(s_plain),
        steps_compacted=_prefix(s_comp),
        fillers=_prefix(fillers),
        next_long=next_long.astype(np.int64),
        run_start=_run_start(messages),
        assistant=np.array([m.get("role") == "assistant" for m in messages] + [False], dtype=bool),
        entry_tokens=entry_tokens,
        step_raw=_prefix(raw_steps),
        step_length=np.array(lengths, dtype=np.int64),
        summary=np.array(summary, dtype=np.int64),
        summary_inferred=np.array(summary_inferred, dtype=bool),
        user=np.array(
            [forms is not None and m.get("role") == "user" for m in messages] + [False], dtype=bool
        ),
        blank=np.array([_blank(m) for m in messages] + [False], dtype=bool),
        keep=forms.keep if forms is not None else 0,
        budget=(forms.budget or 0) if forms is not None else 0,
        regular=forms.regular if forms is not None else True,
    )


def session_extras(
    calls: SessionCalls,
    policy: ReplayPolicy,
    session: Session,
    kit: Kit | None,
    entries: Sequence[bool],
    workspace: Path | None,
) -> SessionExtras:
    """The session's extras, built once per calls object (``workspace``: where the release
    keeps its summary journal; default: the session's own)."""
    kept = _KEPT.get(calls)
    if kept is None or any(e not in kept.entry_tokens for e in entries):
        root = workspace if workspace is not None else workspace_of(session)
        kept = _build(policy, session, kit, entries, root)
        _KEPT[calls] = kept
    return kept
