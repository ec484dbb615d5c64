"""An experiment's results frame: each planned call's identity, setting, outcome and answer,
its price, and its comparison with the answer the session stored at that call."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from sessionkit.experiments.answers import Answer, Failure, usage_counts
from sessionkit.experiments.compare import (
    Stored,
    action_of,
    agreement,
    same_action,
    stored_answers,
    text_similarity,
)
from sessionkit.experiments.judging import ModelJudge
from sessionkit.experiments.plan import Planned, priced
from sessionkit.nanobot.session import Session
from sessionkit.schema import EXPERIMENTS, REQUEST_SETTINGS, frame

__all__ = ["OUTCOMES", "Judge", "Scorer", "results_frame"]

OUTCOMES = ("planned", "stored", "answered", "failed", "over budget")
"""The categories of ``outcome``, in this order."""

Scorer = Callable[[Mapping[str, Any]], float]
"""A judge that is a function: a results row (its columns by name) to a score."""

Judge = Scorer | ModelJudge | Mapping[str, Any]
"""A judge: a function of a results row, or a model asked with a prompt (a
:class:`~sessionkit.experiments.judging.ModelJudge` or a dict of its fields)."""

_COPIED = ("session_key", "policy", "turn", "step", *REQUEST_SETTINGS)
"""The columns each result takes from its row of the calls frame."""


def _outcome(item: Planned, result: Answer | Failure | None, stored: bool, dry_run: bool) -> str:
    if item.error is not None or isinstance(result, Failure):
        return "failed"
    if result is None:
        return "planned" if dry_run else "over budget"
    return "stored" if stored else "answered"


def _judged(out: pd.DataFrame, judge: Scorer | None) -> tuple[list[float], list[str]]:
    """Each row's judge score (NaN: no judge, no answer, or the judge failed), and the
    failures."""
    scores, failures = [float("nan")] * len(out), list[str]()
    if judge is None:
        return scores, failures
    for i, row in enumerate(out.to_dict("records")):
        if row["outcome"] not in ("answered", "stored"):
            continue
        try:
            scores[i] = float(judge(row))
        except Exception as exc:  # a user's function: its failure is reported, not raised
            failures.append(f"judge failed on result {i}: {type(exc).__name__}: {exc}")
    return scores, failures


def results_frame(
    rows: pd.DataFrame,
    planned: Sequence[Planned],
    results: Mapping[int, Answer | Failure],
    stored: set[int],
    worst: np.ndarray,
    host: str,
    provider: str | None,
    sessions: Mapping[str, Session],
    judge: Scorer | None,
    dry_run: bool,
) -> tuple[pd.DataFrame, list[str]]:
    """The :data:`~sessionkit.schema.EXPERIMENTS` frame, and the problems met (prices
    unknown, a judge's failures)."""
    at = np.array([p.call for p in planned], dtype=np.int64)
    got = [results.get(i) for i in range(len(planned))]
    answers = [r if isinstance(r, Answer) else None for r in got]
    keys = rows["session_key"].to_numpy()[at]
    turns, steps = rows["turn"].to_numpy()[at], rows["step"].to_numpy()[at]
    wanted: dict[str, set[tuple[int, int]]] = {}
    for key, turn, step in zip(keys, turns, steps, strict=True):
        wanted.setdefault(str(key), set()).add((int(turn), int(step)))
    originals = {key: stored_answers(sessions[key], calls) for key, calls in wanted.items()}
    found: list[Stored | None] = [
        originals[str(key)].get((int(turn), int(step)))
        for key, turn, step in zip(keys, turns, steps, strict=True)
    ]
    counts = np.array([usage_counts(r) for r in got], dtype=np.int64).reshape(-1, 4)
    cost, problems = priced(planned, provider, counts)
    values: dict[str, Any] = {
        "call": at,
        **{name: rows[name].array.take(at) for name in _COPIED},
        "edit": [p.edit for p in planned],
        "model": [p.model for p in planned],
        "sample": [p.sample for p in planned],
        "host": [host] * len(planned),
        "outcome": [
            OUTCOMES.index(_outcome(p, r, i in stored, dry_run))
            for i, (p, r) in enumerate(zip(planned, got, strict=True))
        ],
        "estimated_prompt_tokens": [p.estimate for p in planned],
        "max_completion_tokens": [p.max_output for p in planned],
        "worst_cost_usd": worst,
        "answer_text": [a.text if a else None for a in answers],
        "tool_calls": [a.tool_calls if a else None for a in answers],
        "finish_reason": [a.finish_reason if a else None for a in answers],
        "prompt_tokens": [a.prompt_tokens if a else None for a in answers],
        "cached_tokens": [a.cached_tokens if a else None for a in answers],
        "cache_write_tokens": [a.cache_write_tokens if a else None for a in answers],
        "completion_tokens": [a.completion_tokens if a else None for a in answers],
        "latency_s": [a.latency_s if a else np.nan for a in answers],
        "cost_usd": cost,
        "error": [
            p.error if p.error else (r.error if isinstance(r, Failure) else None)
            for p, r in zip(planned, got, strict=True)
        ],
        "original_text": [o[0] if o else None for o in found],
        "original_tool_calls": [o[1] if o else None for o in found],
        "same_action": [
            same_action(a.tool_calls, o[1]) if a and o else None
            for a, o in zip(answers, found, strict=True)
        ],
        "text_similarity": [
            text_similarity(a.text or "", o[0]) if a and o else np.nan
            for a, o in zip(answers, found, strict=True)
        ],
        "judge_score": np.full(len(planned), np.nan),
        "agreement": np.full(len(planned), np.nan),
    }
    out = frame(EXPERIMENTS, values, categories={"outcome": OUTCOMES})
    scores, failures = _judged(out, judge)
    out["judge_score"] = np.array(scores, dtype=np.float64)
    actions = [action_of(a.tool_calls) if a else None for a in answers]
    groups: dict[tuple[int, str, str | None], list[int]] = {}
    for position, item in enumerate(planned):
        groups.setdefault((item.call, item.model, item.edit), []).append(position)
    shares = np.full(len(out), np.nan)
    for positions in groups.values():
        shares[positions] = agreement([actions[p] for p in positions])
    out["agreement"] = shares
    return out, [*problems, *failures]
