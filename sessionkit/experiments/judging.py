"""Model judges: a model asked, with a prompt made from each results row, how good an answer
is; its calls go through the experiment's budget and answer store like any other, and its
score is read from its answer by one fixed rule (:func:`score_of`)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import pandas as pd

from sessionkit.calls.assembly import count_text
from sessionkit.experiments.answers import answer_key
from sessionkit.experiments.endpoint import Target, target
from sessionkit.experiments.plan import Planned
from sessionkit.nanobot.tokens import byte_fallback_estimate, has_special_tokens

__all__ = ["JUDGE_PARAMS", "ModelJudge", "judge_calls", "judge_target", "model_judge", "score_of"]

JUDGE_PARAMS: dict[str, Any] = {"temperature": 0, "max_tokens": 16}
"""A model judge's request parameters unless it names its own: deterministic and short (a
score needs a few tokens, and its worst case stays small)."""

_NUMBER = re.compile(r"\d+(?:\.\d+)?|\.\d+")


@dataclass(frozen=True)
class ModelJudge:
    """A judge that is a model: ``prompt`` (a :meth:`str.format` template of the results
    row's columns, such as ``{answer_text}`` and ``{original_text}``) sent as one user
    message to ``model`` at ``endpoint`` (an OpenAI-compatible base URL; None: the
    experiment's endpoint and key) with ``params``; the score is :func:`score_of` its answer.
    A dict of these fields (``{"model": ..., "prompt": ...}``) is the same judge."""

    model: str
    prompt: str
    endpoint: str | None = None
    api_key: str | None = field(default=None, repr=False)
    params: Mapping[str, Any] = field(default_factory=lambda: dict(JUDGE_PARAMS))


def model_judge(judge: object) -> ModelJudge | None:
    """``judge`` as a :class:`ModelJudge` (None: a function, or no judge); anything else is
    refused, naming what a judge may be."""
    if judge is None or (callable(judge) and not isinstance(judge, ModelJudge)):
        return None
    if isinstance(judge, Mapping):
        known = {f.name for f in dataclasses.fields(ModelJudge)}
        unknown = sorted(set(map(str, judge)) - known)
        if unknown or "model" not in judge or "prompt" not in judge:
            raise ValueError(
                f"a judge dict takes model= and prompt= (and endpoint=, api_key=, params=), "
                f"not {sorted(map(str, judge))}"
            )
        judge = ModelJudge(**judge)
    if not isinstance(judge, ModelJudge):
        raise TypeError(
            "judge must be a function of a results row, a sk.ModelJudge or a dict of its "
            f"fields, not {type(judge).__name__}"
        )
    if not (isinstance(judge.model, str) and judge.model and isinstance(judge.prompt, str)):
        raise ValueError("a model judge needs a model name and a prompt text")
    return judge


def score_of(text: str | None) -> float:
    """The score in a judge's answer: the first number written in it (``1``, ``0.75``,
    ``.5``; a sign is not read) when it lies in [0, 1], else NaN (no score)."""
    found = _NUMBER.search(text or "")
    value = float(found.group()) if found else math.nan
    return value if 0.0 <= value <= 1.0 else math.nan


def judge_target(judge: ModelJudge, chosen: Target) -> Target:
    """Where the judge is asked: its own endpoint and key, else the experiment's (its
    provider's prices), with the judge's model and parameters; a judge is asked in the
    OpenAI-compatible form, so one without an endpoint of its own is refused where the
    experiment's target speaks Anthropic's API."""
    if judge.endpoint is None:
        if chosen.wire != "openai":
            raise ValueError(
                "a model judge is asked at an OpenAI-compatible endpoint, and the experiment's "
                "speaks Anthropic's own API: give the judge its endpoint="
            )
        return dataclasses.replace(chosen, model=judge.model, params=dict(judge.params))
    return target(None, judge.endpoint, judge.api_key, judge.params)


def judge_calls(
    judge: ModelJudge, out: pd.DataFrame, chosen: Target
) -> tuple[list[Planned], list[str]]:
    """One judge call per answered or stored result (``call``: the result's position), and
    the results whose prompt could not be made (a column the template names is not one)."""
    planned, problems = [], []
    for at, row in enumerate(out.to_dict("records")):
        if row["outcome"] not in ("answered", "stored"):
            continue
        try:
            text = judge.prompt.format_map(row)
        except (KeyError, IndexError, ValueError) as exc:
            problems.append(f"judge prompt cannot be made for result {at}: {exc!r}")
            continue
        body = {"model": judge.model, "messages": [{"role": "user", "content": text}]}
        body.update(chosen.params)
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        planned.append(
            Planned(
                at,
                judge.model,
                None,
                0,
                orjson.dumps(body),
                answer_key(chosen.url, body, 0),
                byte_fallback_estimate(text) if has_special_tokens(text) else count_text(text),
                int(limit) if isinstance(limit, int) else -1,
            )
        )
    return planned, problems
