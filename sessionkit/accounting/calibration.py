"""How the prompt tokens a provider reports relate to sessionkit's estimate of the request.

nanobot's estimate (cl100k tokens plus a fixed overhead per message) undercounts on models
with another tokenizer or framing by 30-50% (users report it).  ``calibrate`` fits, per
model, ``reported = slope * estimate + intercept`` on the recorded agent calls whose usage
the provider reported, holding back every fifth call (in time order) to say how well the raw
and the calibrated estimates do on calls the fit has not seen; and a second line from the
release's count of each call's stored answer to the completion tokens reported (the answer as
stored drops reasoning and counts tool calls' JSON and message framing).  Given the requests
of those calls, it also holds the prompt cache sessionkit predicts against the cached tokens
reported, per model, and fits the cache lifetime (:mod:`sessionkit.accounting.cache_fit`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sessionkit.accounting.cache_fit import CacheFit, fit_caches
from sessionkit.schema import CACHE_CALIBRATION, CALIBRATION, frame

__all__ = ["Calibration", "calibrate"]

_HOLD_EVERY = 5


@dataclass(frozen=True)
class Fit:
    """One model's line and its errors on the held-back calls (NaN when none were)."""

    slope: float
    intercept: float
    calls: int
    held_back: int
    raw_median: float
    raw_p90: float
    calibrated_median: float
    calibrated_p90: float


def _errors(predicted: np.ndarray, reported: np.ndarray) -> tuple[float, float]:
    """Median and 90th percentile of the relative error |predicted - reported| / reported."""
    if not len(reported):
        return float("nan"), float("nan")
    error = np.abs(predicted - reported) / reported
    return float(np.median(error)), float(np.quantile(error, 0.9))


def _fit(estimated: np.ndarray, reported: np.ndarray) -> Fit:
    held = np.arange(len(reported)) % _HOLD_EVERY == _HOLD_EVERY - 1
    if held.all() or len(reported) < 2:
        held = np.zeros(len(reported), dtype=bool)
    x, y = estimated[~held], reported[~held]
    if len(np.unique(x)) > 1:
        slope, intercept = np.polyfit(x, y, 1)
    else:
        slope, intercept = float(y.sum() / x.sum()), 0.0
    raw = _errors(estimated[held], reported[held])
    calibrated = _errors(slope * estimated[held] + intercept, reported[held])
    return Fit(float(slope), float(intercept), len(x), int(held.sum()), *raw, *calibrated)


class Calibration:
    """Per model, a line from sessionkit's request estimate to the reported prompt tokens."""

    def __init__(
        self,
        fits: dict[str, Fit],
        outputs: dict[str, Fit] | None = None,
        caches: dict[str, CacheFit] | None = None,
    ) -> None:
        self.fits = fits
        self.outputs = outputs or {}
        self.caches = caches or {}

    def cache_ttl(self, model: str) -> float:
        """The cache lifetime (seconds) that fits ``model``'s reported cached tokens best."""
        if model not in self.caches:
            raise KeyError(
                f"no cache lifetime fitted for model {model!r} (calibrate(usage, requests=...) "
                f"fits one per model with cached tokens reported); fitted: {sorted(self.caches)}"
            )
        return self.caches[model].ttl

    def predict(self, tokens: int | np.ndarray | pd.Series, model: str) -> np.ndarray | float:
        """The prompt tokens ``model`` would report for requests estimated at ``tokens``."""
        if model not in self.fits:
            raise KeyError(f"no calibration for model {model!r}; calibrated: {sorted(self.fits)}")
        fit = self.fits[model]
        values = np.asarray(tokens, dtype=np.float64) * fit.slope + fit.intercept
        return float(values) if values.ndim == 0 else values

    def predict_output(self, tokens: np.ndarray, model: str) -> np.ndarray:
        """The completion tokens ``model`` would report for stored answers of ``tokens``
        (unchanged when no answer line was fitted for it)."""
        fit = self.outputs.get(model)
        values = np.asarray(tokens, dtype=np.float64)
        return values if fit is None else values * fit.slope + fit.intercept

    @property
    def report(self) -> pd.DataFrame:
        """One row per model (columns: :data:`sessionkit.schema.CALIBRATION`)."""
        names = sorted(self.fits)
        rows = [self.fits[n] for n in names]
        values = {c.name: [getattr(f, c.name) for f in rows] for c in CALIBRATION[1:-2]}
        outputs = [self.outputs.get(n) for n in names]
        for column in ("slope", "intercept"):
            values[f"output_{column}"] = [
                float("nan") if o is None else getattr(o, column) for o in outputs
            ]
        return frame(CALIBRATION, {"model": names, **values})

    @property
    def cache_report(self) -> pd.DataFrame:
        """Per model, predicted against reported cached tokens and the fitted TTL (columns:
        :data:`sessionkit.schema.CACHE_CALIBRATION`; no row without ``requests``)."""
        names = sorted(self.caches)
        values = {
            c.name: [getattr(self.caches[n], c.name) for n in names] for c in CACHE_CALIBRATION[1:]
        }
        return frame(CACHE_CALIBRATION, {"model": names, **values})

    def __repr__(self) -> str:
        return f"<Calibration: {', '.join(sorted(self.fits)) or 'no model'}>"


def calibrate(
    usage: pd.DataFrame, requests: pd.DataFrame | None = None, *, cache_scope: str = "session"
) -> Calibration:
    """Fit each model's reported prompt tokens against ``estimated_prompt_tokens``, and its
    reported completion tokens against ``estimated_completion_tokens``, over the agent calls of
    a :func:`sessionkit.usage` frame whose usage the provider reported.

    ``requests``: the :func:`sessionkit.requests` frame of those calls (the release and setting
    nanobot ran with, timed by the log: ``requests(..., usage=usage)``); then
    :attr:`Calibration.cache_report` compares its predicted cache reads and writes with the
    reported ones per call under ``cache_scope``, and :meth:`Calibration.cache_ttl` gives the
    fitted lifetime (``sessionkit.cost(..., calibration=, cache_ttl="fitted")`` prices with it).
    """
    rows = usage[
        (usage["kind"] == "agent")
        & usage["reported"].fillna(False).astype(bool)
        & usage["estimated_prompt_tokens"].notna()
        & (usage["prompt_tokens"].fillna(0) > 0)
        & usage["model"].notna()
    ].sort_values("time", kind="stable")
    fits = {}
    for model, group in rows.groupby(rows["model"].astype(str), sort=True):
        estimated = group["estimated_prompt_tokens"].to_numpy(dtype=np.float64)
        reported = group["prompt_tokens"].to_numpy(dtype=np.float64)
        fits[str(model)] = _fit(estimated, reported)
    outputs = {}
    if "estimated_completion_tokens" in rows:
        answered = rows[
            (rows["estimated_completion_tokens"].fillna(0) > 0)
            & (rows["completion_tokens"].fillna(0) > 0)
        ]
        for model, group in answered.groupby(answered["model"].astype(str), sort=True):
            estimated = group["estimated_completion_tokens"].to_numpy(dtype=np.float64)
            reported = group["completion_tokens"].to_numpy(dtype=np.float64)
            outputs[str(model)] = _fit(estimated, reported)
    caches = {} if requests is None else fit_caches(usage, requests, cache_scope)
    return Calibration(fits, outputs, caches)
