"""An experiment's plan: every call to ask (each row, model, edit and sample) with its exact
body, the digest its answer is kept under, and its worst-case price."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pandas as pd

from sessionkit.accounting.pricing import price_calls
from sessionkit.calls.frame import row_settings
from sessionkit.experiments.answers import answer_key
from sessionkit.experiments.bodies import Edit, body_of
from sessionkit.experiments.endpoint import Target
from sessionkit.experiments.piece_counts import piece_counter
from sessionkit.experiments.rebuild import Rebuilder
from sessionkit.nanobot.session import Session
from sessionkit.tuning import TUNING

__all__ = ["Planned", "plan", "priced", "worst_costs"]


@dataclass(frozen=True)
class Planned:
    """One call to ask: the row (its position in the calls frame), model, edit and sample;
    the body's bytes, the answer's digest, the token estimate and allowed output; or why the
    row's request could not be rebuilt (``error``; no body)."""

    call: int
    model: str
    edit: str | None
    sample: int
    payload: bytes = b""
    digest: str = ""
    estimate: int = 0
    max_output: int = -1
    error: str | None = None


def plan(
    rows: pd.DataFrame,
    sessions: Mapping[str, Session],
    chosen: Target,
    models: Sequence[str],
    variants: Sequence[tuple[str | None, Edit]],
    samples: int,
    rebuild: Mapping[str, Any],
) -> list[Planned]:
    """Every call to ask, in order: each row, model, edit and sample (``rebuild``: the
    keywords :func:`sessionkit.request` takes besides the row's own)."""
    planned = []
    count = piece_counter()
    builder = Rebuilder(sessions, rebuild, count)
    for call, row in enumerate(rows.to_dict("records")):
        try:
            built = builder.request(
                str(row["session_key"]),
                str(row["policy"]),
                int(row["turn"]),
                int(row["step"]),
                row_settings(row),
            )
        except (IndexError, ValueError) as exc:
            error = f"the request cannot be rebuilt: {exc}"
            planned += [
                Planned(call, model, name, sample, error=error)
                for model in models
                for name, _ in variants
                for sample in range(samples)
            ]
            continue
        for model in models:
            for name, edit in variants:
                body, estimate = body_of(built, model, chosen.params, edit, count)
                payload = orjson.dumps(body)
                limit = body.get("max_completion_tokens", body.get("max_tokens"))
                allowed = int(limit) if isinstance(limit, int) else -1
                planned += [
                    Planned(
                        call,
                        model,
                        name,
                        sample,
                        payload,
                        answer_key(chosen.url, body, sample),
                        estimate,
                        allowed,
                    )
                    for sample in range(samples)
                ]
    return planned


def priced(
    planned: Sequence[Planned], provider: str | None, counts: np.ndarray
) -> tuple[np.ndarray, list[str]]:
    """genai-prices' price now of each planned call's ``counts`` (rows of input, cache read,
    cache write and output tokens; -1: unknown, NaN cost), and the problems met."""
    if not planned:
        return np.zeros(0), []
    moment = np.full(len(planned), int(time.time() * 1000), dtype=np.int64)
    found = price_calls([p.model for p in planned], [provider] * len(planned), moment, counts)
    return found.cost, found.problems


def worst_costs(planned: Sequence[Planned], provider: str | None) -> tuple[np.ndarray, list[str]]:
    """Each call's worst case: its estimate plus :data:`TUNING`'s margin, and its whole
    allowed output (NaN: no body, no limit or no price)."""
    margin = 1 + TUNING.experiment_prompt_margin
    counts = np.array(
        [
            [math.ceil(p.estimate * margin) if p.payload else -1, 0, 0, p.max_output]
            for p in planned
        ],
        dtype=np.int64,
    ).reshape(-1, 4)
    return priced(planned, provider, counts)
