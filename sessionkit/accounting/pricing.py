"""Dated, provider-aware prices from the ``genai-prices`` package, applied to whole columns.

``genai-prices`` ships its price data (nothing is downloaded; its update functions are never
called).  Asking it once per call is too slow for a log of 100,000 calls, so for each model,
provider and price in force (a dated or time-of-day price, a token tier) this module asks it
for the price of a few small usages and reads off the exact price per input, cache-read,
cache-write and output token; every call is then priced with integer arithmetic and rounded
once, which gives the same float as ``float(calc_price(...).total_price)``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from sessionkit.calls.caching import (
    DEFAULT_TTL,
    cache_columns,
    checked,
    minimum_tokens,
    resolve_rules,
    write_premium,
)
from sessionkit.schema import PROBLEMS, REQUEST_COSTS, Reported, frame

if TYPE_CHECKING:
    from sessionkit.accounting.calibration import Calibration

__all__ = ["COST_MODEL_CHANGES", "COST_MODEL_VERSION", "Priced", "cost", "price_calls"]

COST_MODEL_CHANGES = {
    1: "every shared prefix a cache read forever, no output unless completion_tokens=",
    2: "cache reads and writes as the cache model finds them (rules, 5-minute lifetime), "
    "each call's stored answer as output",
}
"""What each version of :func:`cost`'s model changed; a new entry when figures change meaning."""

COST_MODEL_VERSION = max(COST_MODEL_CHANGES)
"""The cost model figures are priced under now (request snapshots record it)."""

_EXACT = 2**53
"""Integers up to here convert to float64 exactly."""


@dataclass(frozen=True)
class Priced:
    """Costs in USD (NaN where no price applies), the problems met (calls left unpriced) and
    notes on how calls were priced (a recorded provider genai-prices does not know)."""

    cost: np.ndarray
    problems: list[str]
    notes: list[str]


def _calc(model: str, provider: str | None, when: datetime, **usage: int) -> Any:
    from genai_prices import Usage, calc_price

    return calc_price(Usage(**usage), model, provider_id=provider, genai_request_timestamp=when)


def _tier_starts(model_price: Any) -> list[int]:
    from genai_prices.types import TieredPrices

    starts = {
        tier.start
        for value in vars(model_price).values()
        if isinstance(value, TieredPrices)
        for tier in value.tiers
    }
    return sorted(starts)


def _rates(model: str, provider: str | None, when: datetime, t: int) -> tuple[Decimal, ...]:
    """Exact USD per input, cache-read, cache-write and output token (input ``t + 1`` lies
    in the same tier as ``t``), checked on one mixed usage."""

    def price(**usage: int) -> Decimal:
        return _calc(model, provider, when, **usage).total_price

    base = price(input_tokens=t)
    above = price(input_tokens=t + 1)
    rates = (
        above - base,
        price(input_tokens=t + 1, cache_read_tokens=1) - above,
        price(input_tokens=t + 1, cache_write_tokens=1) - above,
        price(input_tokens=t, output_tokens=1) - base,
    )
    mixed = price(input_tokens=t + 1, cache_read_tokens=1, cache_write_tokens=0, output_tokens=2)
    expected = rates[0] * (t + 1) + rates[1] + 2 * rates[3]
    if mixed != expected:
        raise ArithmeticError(f"genai-prices does not price {model!r} linearly")
    return rates


def _apply(rates: tuple[Decimal, ...], counts: np.ndarray) -> np.ndarray:
    """``counts`` (rows of input, cache read, cache write, output) priced at ``rates``."""
    scale = max(0, *(-r.as_tuple().exponent for r in rates))  # type: ignore[operator]  # finite rates: an int exponent
    factor = 10**scale
    ints = [int(r * factor) for r in rates]
    largest = max(abs(i) for i in ints) * int(counts.max(initial=0)) * len(ints)
    if factor <= 10**22 and largest < 2**62:  # no sum of products overflows, in any order
        columns = counts.astype(np.int64, copy=False)
        totals = np.zeros(len(counts), dtype=np.int64)
        product = np.empty(len(counts), dtype=np.int64)
        for k, rate in enumerate(ints):
            if rate:  # a column at a time: a column-major ``counts`` is read straight
                np.multiply(columns[:, k], rate, out=product)
                totals += product
        if max(int(totals.max(initial=0)), -int(totals.min(initial=0))) < _EXACT:
            return totals.astype(np.float64) / float(factor)
    return np.array(
        [float(sum(int(c) * r for c, r in zip(row, rates, strict=True))) for row in counts]
    )


def _known(provider: str) -> bool:
    from genai_prices.data_snapshot import get_snapshot

    try:
        get_snapshot().find_provider(None, provider, None)
    except LookupError:
        return False
    return True


def _provider(model: str, provider: str | None, when: datetime) -> tuple[Any, str | None]:
    """The price calculation of a one-token call, and a note when the recorded provider is
    unknown to genai-prices (the model is then priced at the provider it finds for it)."""
    if provider and _known(provider):
        return _calc(model, provider, when, input_tokens=1), None
    found = _calc(model, None, when, input_tokens=1)
    note = None
    if provider:
        note = (
            f"provider {provider!r} is unknown to genai-prices: {model!r} priced at "
            f"{found.provider.id}'s prices"
        )
    return found, note


def _moments(model_info: Any, ms: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Rows grouped by the price in force at their time: group per row, a time per group."""
    if not isinstance(model_info.prices, list):
        return np.zeros(len(ms), dtype=np.int64), [int(ms[0])]
    where, seconds = pd.factorize(ms // 1000, sort=True)
    by_price: dict[int, int] = {}
    groups = np.empty(len(seconds), dtype=np.int64)
    times: list[int] = []
    for i, second in enumerate(seconds):
        chosen = model_info.get_prices(datetime.fromtimestamp(int(second), UTC))
        groups[i] = by_price.setdefault(id(chosen), len(by_price))
        if groups[i] == len(times):
            times.append(int(second) * 1000)
    return groups[where], times


def _price_group(
    model: str, provider: str | None, ms: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, list[str]]:
    """One model and provider's rows: their costs, and notes on how they were priced."""
    first = datetime.fromtimestamp(int(ms[0]) / 1000, UTC)
    found, note = _provider(model, provider, first)
    provider_id = found.provider.id
    groups, times = _moments(found.model, ms)
    out = np.empty(len(ms), dtype=np.float64)
    for g, at in enumerate(times):
        when = datetime.fromtimestamp(at / 1000, UTC)
        rows = np.flatnonzero(groups == g) if len(times) > 1 else None  # None: every row
        starts = _tier_starts(found.model.get_prices(when))
        inputs = counts[:, 0] if rows is None else counts[rows, 0]
        if not starts or int(inputs.max(initial=0)) <= starts[0]:  # every call in the first
            segment, present = None, np.arange(min(len(inputs), 1))
        else:
            segment = np.searchsorted(np.array(starts, dtype=np.int64), inputs)
            present = np.flatnonzero(np.bincount(segment))
        for s in present:
            t = 1 if s == 0 else starts[s - 1] + 1
            part: np.ndarray | slice = slice(None)  # one tier: every row, no copy of them
            if segment is not None and len(present) > 1:
                part = np.flatnonzero(segment == s)
            if rows is not None:
                part = rows[part]
            out[part] = _apply(_rates(model, provider_id, when, t), counts[part])
    return out, [note] if note else []


def _factorized(values: Iterable[str | None]) -> tuple[np.ndarray, pd.Index]:
    """Codes (-1: None) and names of per-call ``values``; a Categorical's own, not re-read."""
    if isinstance(values, pd.Categorical):
        return values.codes, values.categories
    return pd.factorize(pd.Series(list(values), dtype=object))


def _uniform(value: str | None, n: int) -> pd.Categorical:
    """``value`` for each of ``n`` calls (a Categorical: :func:`price_calls` reads no list)."""
    if value is None:
        return pd.Categorical.from_codes(np.full(n, -1, dtype=np.int8), pd.Index([], dtype=object))
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), [value])


def price_calls(
    model: Iterable[str | None],
    provider: Iterable[str | None],
    ms: np.ndarray,
    counts: np.ndarray,
) -> Priced:
    """Price calls: ``ms`` UTC epoch milliseconds, ``counts`` rows of (input incl. cache
    reads and writes, cache read, cache write, output) tokens, -1 where unknown (an unknown
    input or output count leaves the cost NaN; unknown cache counts are taken as 0)."""
    models, model_names = _factorized(model)
    providers, provider_names = _factorized(provider)
    cost = np.full(len(ms), np.nan)
    problems: list[str] = []
    noted: list[str] = []
    known = counts[:, 0] >= 0
    known &= counts[:, 3] >= 0
    known &= models >= 0
    if counts.min(initial=0) < 0:
        counts = np.maximum(counts, 0)
    every = bool(known.all())
    n_known = len(ms) if every else int(known.sum())
    where: np.ndarray | None = None  # None: one model and provider (sk.cost's) for every row
    if len(model_names) <= 1 and (len(providers) == 0 or providers.min() == providers.max()):
        pairs = np.full(min(n_known, 1), int(providers[0]) + 1 if n_known else 0)
    else:
        rows_known = np.flatnonzero(known)
        pair = models.astype(np.int64) * (len(provider_names) + 1) + providers + 1
        where, pairs = pd.factorize(pair[rows_known])
    named = []
    for i, code in enumerate(pairs):
        slot = int(code % (len(provider_names) + 1)) - 1
        name = str(model_names[int(code // (len(provider_names) + 1))])
        named.append((name, None if slot < 0 else str(provider_names[slot]), i))
    for name, recorded, i in sorted(named, key=lambda p: (p[0], str(p[1]))):
        index: np.ndarray | slice = slice(None)  # every row: no copy of them
        if where is not None and len(pairs) > 1:
            index = rows_known[where == i]
        elif not every:
            index = np.flatnonzero(known)
        chosen = len(ms) if isinstance(index, slice) else len(index)
        try:
            cost[index], notes = _price_group(name, recorded, ms[index], counts[index])
        except (LookupError, ArithmeticError, ValueError) as exc:
            problems.append(
                f"no price for model {name!r} (provider {recorded!r}) in genai-prices: "
                f"cost_usd NaN for {chosen} call(s) ({exc})"
            )
            continue
        noted.extend(notes)
    return Priced(cost, problems, noted)


def price_moment(date: datetime | dt.date | str | None) -> datetime:
    """A price date as a UTC moment (None: now; a date: its UTC midnight)."""
    if date is None:
        return datetime.now(UTC)
    if isinstance(date, str):
        date = datetime.fromisoformat(date)
    if not isinstance(date, datetime):
        date = datetime.combine(date, dt.time())
    return date if date.tzinfo is not None else date.replace(tzinfo=UTC)


def cost(
    requests_frame: pd.DataFrame,
    *,
    model: str,
    provider: str | None = None,
    calibration: Calibration | None = None,
    date: datetime | dt.date | str | None = None,
    completion_tokens: int | None = None,
    cache_rules: str | None = None,
    cache_ttl: float | str | None = DEFAULT_TTL,
    cache_scope: str = "session",
) -> Reported:
    """What each request of a :func:`sessionkit.requests` frame (any settings grid) would
    cost with ``model`` at the prices of ``date`` (default now): its ``total_tokens`` as input
    (through ``calibration`` when given), of which the provider's cache reads and writes
    (scaled alike) at their prices, and its stored answer (``answer_tokens``, through
    ``calibration``'s answer line for the model when it has one) as output.

    The cache columns are worked out again for ``model`` (its minimum cacheable prefix) under
    ``cache_rules`` (None: each row's own ``cache_rules``), ``cache_ttl`` (seconds, default
    300; None: nothing expires; ``"fitted"``: ``calibration``'s lifetime for ``model``, fitted
    to the cached tokens a usage log reported, :meth:`~sessionkit.Calibration.cache_ttl`) and
    ``cache_scope`` (:mod:`sessionkit.calls.caching`), and replace the frame's; writes for a
    lifetime over 5 minutes cost the 1-hour premium (2x the base input price instead of 1.25x).  ``completion_tokens``: the same output for every call
    instead of its answer.  Adds the columns of :data:`sessionkit.schema.REQUEST_COSTS`; an
    unknown model gives NaN costs and a row in ``.problems``, a recorded provider genai-prices
    does not know a row in ``.notes`` (a :class:`sessionkit.schema.Reported` frame)."""
    if cache_ttl == "fitted":
        if calibration is None:
            raise ValueError('cache_ttl="fitted" needs calibration= (sessionkit.calibrate)')
        cache_ttl = calibration.cache_ttl(model)
    if isinstance(cache_ttl, str):
        raise ValueError(f'cache_ttl must be seconds > 0, None or "fitted", not {cache_ttl!r}')
    checked(cache_ttl, cache_scope)
    rows = requests_frame.reset_index(drop=True)
    total = rows["total_tokens"].to_numpy(dtype=np.int64)
    if cache_rules is None:
        family = _named(rows["cache_rules"])
    else:
        family = pd.Categorical.from_codes(
            np.zeros(len(rows), np.int8), [resolve_rules(cache_rules, None)[0]]
        ).remove_unused_categories()
    minimums = [minimum_tokens(f, model) for f in family.categories]
    least: int | np.ndarray = minimums[0] if len(set(minimums)) == 1 else 0
    if len(set(minimums)) > 1:  # one per row, by its family
        least = np.array(minimums, dtype=np.int64)[np.maximum(family.codes, 0)]
    cached = cache_columns(rows, family, least, cache_ttl, cache_scope)
    prompt = total
    if calibration is not None:
        prompt = np.rint(calibration.predict(total, model)).astype(np.int64)

    def scaled(tokens: np.ndarray) -> np.ndarray:
        return tokens if calibration is None else (tokens * prompt) // np.maximum(total, 1)

    read, write = scaled(cached["cache_read_tokens"]), scaled(cached["cache_write_tokens"])
    if completion_tokens is not None:
        completion = np.full(len(total), completion_tokens, dtype=np.int64)
    else:
        completion = rows["answer_tokens"].to_numpy(dtype=np.int64)
        if calibration is not None:
            found = calibration.predict_output(completion, model)
            completion = np.maximum(np.rint(found), 0).astype(np.int64)
    n = len(total)
    at = np.full(n, int(price_moment(date).timestamp() * 1000), dtype=np.int64)
    counts = np.empty((n, 4), dtype=np.int64, order="F")  # columns read one at a time
    for k, column in enumerate((prompt, read, write, completion)):
        counts[:, k] = column
    priced = price_calls(_uniform(model, n), _uniform(provider, n), at, counts)
    premium = write_premium(cache_ttl) / write_premium(None) - 1
    total_cost = priced.cost
    wrote = np.flatnonzero(write)  # a call that writes nothing pays no premium
    if premium and len(wrote):
        m, none = len(wrote), np.zeros(len(wrote), dtype=np.int64)
        writes = np.stack([write[wrote], none, write[wrote], none], axis=1)
        extra = price_calls(_uniform(model, m), _uniform(provider, m), at[wrote], writes).cost
        total_cost[wrote] += premium * extra
    added = frame(
        REQUEST_COSTS,
        {
            "prompt_tokens": prompt,
            "cached_tokens": read,
            "written_tokens": write,
            "completion_tokens": completion,
            "cost_usd": total_cost,
        },
    )
    rows = rows.assign(cache_rules=family, **_columns(cached, rows.index))
    out = pd.concat([rows, added], axis=1)
    return Reported.of(out, _from_prices(priced.problems), notes=_from_prices(priced.notes))


def _columns(arrays: dict[str, Any], index: pd.Index) -> dict[str, pd.Series]:
    """``arrays`` (made for the frame alone) as columns on ``index``, not copied again."""
    return {name: pd.Series(values, index=index, copy=False) for name, values in arrays.items()}


def _named(rules: pd.Series) -> pd.Categorical:
    """A ``cache_rules`` column as a Categorical of its values' names (missing: ``"nan"``),
    read off its categories rather than row by row."""
    found = pd.Categorical(rules)
    labels = list(found.categories)
    if (
        all(isinstance(c, str) and c != "nan" for c in labels)
        and labels == sorted(set(labels))
        and len(found)
        and found.codes.min() >= 0
        and (len(labels) == 1 or np.bincount(found.codes, minlength=len(labels)).all())
    ):  # already sorted names, each used, none missing: the codes as they are
        return pd.Categorical.from_codes(found.codes, labels)
    names = np.array([*(str(c) for c in found.categories), "nan"], dtype=object)
    unique, code = np.unique(names, return_inverse=True)
    codes = code[np.where(found.codes >= 0, found.codes, len(names) - 1)]
    used = np.bincount(codes, minlength=len(unique)) > 0
    return pd.Categorical.from_codes((np.cumsum(used) - 1)[codes], unique[used].tolist())


def _from_prices(reasons: list[str]) -> pd.DataFrame:
    """genai-prices' reasons as a :data:`~sessionkit.schema.PROBLEMS` frame."""
    n = len(reasons)
    return frame(PROBLEMS, {"path": ["genai-prices"] * n, "line_no": [None] * n, "reason": reasons})
