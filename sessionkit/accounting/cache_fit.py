"""How sessionkit's prompt-cache columns compare with the cached tokens a provider reported, and
the cache lifetime that fits the reports best.

nanobot 0.3.5's usage log holds each call's ``cache_read_tokens`` (and ``cache_write_tokens``
where the provider reports writes).  Matched to a requests frame's rows by (session, turn,
step), per model: how far the predicted reads and writes are from the reported ones (median
and 90th percentile of the absolute error, in tokens, per call), and the TTL under which the
predictions are closest.  The predictions only change where the TTL crosses the gap before a
call, so the candidates are those gaps (at most :data:`CANDIDATES` of them, evenly spread by
rank), the default and one hour; the fitted TTL lies in ``[ttl_low, ttl_high)``, every value
of which predicts the same (when every gap was tried): the default when it lies there, else
``ttl_low``.  Of several such ranges, the one holding the default, else the shortest TTLs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sessionkit.calls.caching import DEFAULT_TTL, cache_columns, checked, minimum_tokens
from sessionkit.schema import REQUEST_SETTINGS

__all__ = ["CANDIDATES", "CacheFit", "fit_caches"]

CANDIDATES = 64
"""At most this many gaps are tried as the TTL (with the default and one hour)."""
_HOUR = 3600.0
_KEYS = ["session_key", "turn", "step"]


@dataclass(frozen=True)
class CacheFit:
    """One model's cached tokens, predicted at the fitted TTL against reported."""

    cache_rules: str
    calls: int
    reported_read: int
    predicted_read: int
    read_median: float
    read_p90: float
    write_calls: int
    reported_write: int
    predicted_write: int
    write_median: float
    write_p90: float
    ttl: float
    ttl_low: float
    ttl_high: float


def _errors(predicted: np.ndarray, reported: np.ndarray) -> tuple[float, float]:
    """Median and 90th percentile of |predicted - reported| (NaN without calls)."""
    if not len(reported):
        return float("nan"), float("nan")
    error = np.abs(predicted - reported)
    return float(np.median(error)), float(np.quantile(error, 0.9))


def _gaps(rows: pd.DataFrame) -> np.ndarray:
    """Seconds between each call and the one before it in its session (NaN: none)."""
    keys = ["session_key", "policy", *REQUEST_SETTINGS]
    ordered = rows.sort_values([*keys, "turn", "step"], kind="stable")
    times = ordered["time"].dt.tz_convert("UTC").dt.as_unit("ms")
    ms = pd.Series(times.array.asi8, index=ordered.index).where(times.notna())
    gaps = ms.groupby([ordered[k] for k in keys], observed=True, sort=False, dropna=False).diff()
    return gaps.dropna().to_numpy(dtype=np.float64) / 1000


def _candidates(gaps: np.ndarray) -> np.ndarray:
    """The TTLs tried: the gaps (spread by rank when many), the default, one hour."""
    found = np.unique(gaps[gaps > 0])
    if len(found) > CANDIDATES:
        found = found[np.linspace(0, len(found) - 1, CANDIDATES).round().astype(np.int64)]
    return np.unique(np.concatenate([found, [DEFAULT_TTL, _HOUR]]))


def _matched(usage: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """The reported agent calls with cached tokens, each with its requests row (``row``)."""
    if requests.duplicated(_KEYS).any():
        raise ValueError(
            "requests holds several rows per call: pass the requests of one release and "
            "setting (the one nanobot ran with)"
        )
    calls = usage[
        (usage["kind"] == "agent")
        & usage["reported"].fillna(False).astype(bool)
        & usage["cached_tokens"].notna()
        & usage["model"].notna()
        & usage["session_key"].notna()
    ]
    index = pd.DataFrame(
        {
            "session_key": requests["session_key"].astype(str).to_numpy(),
            "turn": requests["turn"].to_numpy(np.int64),
            "step": requests["step"].to_numpy(np.int64),
            "row": np.arange(len(requests)),
        }
    )
    keyed = pd.DataFrame(
        {
            "session_key": calls["session_key"].astype(str).to_numpy(),
            "turn": calls["turn"].to_numpy(np.int64),
            "step": calls["step"].to_numpy(np.int64),
            "model": calls["model"].astype(str).to_numpy(),
            "read": calls["cached_tokens"].to_numpy(np.int64),
            "write": calls["cache_write_tokens"].to_numpy(np.float64, na_value=np.nan),
        }
    )
    return keyed.merge(index, on=_KEYS, how="inner", sort=False)


def _fit(
    rows: pd.DataFrame, calls: pd.DataFrame, model: str, scope: str, candidates: np.ndarray
) -> CacheFit:
    family = rows["cache_rules"].astype(str).to_numpy(dtype=object)
    least = np.array([minimum_tokens(f, model) for f in family], dtype=np.int64)
    at = calls["row"].to_numpy(np.int64)
    read = calls["read"].to_numpy(np.int64)
    written = calls["write"].to_numpy(np.float64)
    wrote = ~np.isnan(written)
    predictions = []
    for ttl in candidates:
        cached = cache_columns(rows, family, least, float(ttl), scope, breaks=False)
        predictions.append((cached["cache_read_tokens"][at], cached["cache_write_tokens"][at]))
    missed = [
        np.abs(r - read).sum() + np.abs(w[wrote] - written[wrote]).sum() for r, w in predictions
    ]
    best = np.flatnonzero(np.asarray(missed) == min(missed))
    runs = np.split(best, np.flatnonzero(np.diff(best) > 1) + 1)
    chosen = next(
        (r for r in runs if candidates[r[0]] <= DEFAULT_TTL <= candidates[r[-1]]), runs[0]
    )
    low = float(candidates[chosen[0]])
    high = float(candidates[chosen[-1] + 1]) if chosen[-1] + 1 < len(candidates) else np.inf
    ttl = DEFAULT_TTL if low <= DEFAULT_TTL < high else low
    predicted_read, predicted_write = predictions[chosen[0]]
    return CacheFit(
        cache_rules=str(pd.Series(family[at]).mode().iloc[0]),
        calls=len(at),
        reported_read=int(read.sum()),
        predicted_read=int(predicted_read.sum()),
        read_median=_errors(predicted_read, read)[0],
        read_p90=_errors(predicted_read, read)[1],
        write_calls=int(wrote.sum()),
        reported_write=int(written[wrote].sum()),
        predicted_write=int(predicted_write[wrote].sum()),
        write_median=_errors(predicted_write[wrote], written[wrote])[0],
        write_p90=_errors(predicted_write[wrote], written[wrote])[1],
        ttl=float(ttl),
        ttl_low=low,
        ttl_high=float(high),
    )


def fit_caches(
    usage: pd.DataFrame, requests: pd.DataFrame, cache_scope: str = "session"
) -> dict[str, CacheFit]:
    """Per model, the reported agent calls of a :func:`sessionkit.usage` frame with cached
    tokens, against the :func:`sessionkit.requests` rows of the same calls (one release and
    setting, timed by that usage: ``requests(..., usage=usage)``) under their ``cache_rules``."""
    checked(DEFAULT_TTL, cache_scope)
    rows = requests.reset_index(drop=True)
    matched = _matched(usage, rows)
    candidates = _candidates(_gaps(rows))
    return {
        str(model): _fit(rows, calls, str(model), cache_scope, candidates)
        for model, calls in matched.groupby("model", sort=True)
    }
