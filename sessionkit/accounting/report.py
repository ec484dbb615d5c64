"""Usage totals by session, day or model: what ``sessionkit usage`` prints."""

from __future__ import annotations

from datetime import tzinfo

import pandas as pd
from dateutil.tz import tzlocal

__all__ = ["BY", "usage_table", "with_total"]

BY = ("session", "day", "model")
_COLUMNS = {"session": "session_key", "day": "day", "model": "model"}
_COUNTS = (
    "calls",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "unpriced",
    "unattributed",
)
_NONE = {"session": "(unattributed)", "day": "(no time)", "model": "(not recorded)"}


def usage_table(usage: pd.DataFrame, by: str = "session", tz: tzinfo | None = None) -> pd.DataFrame:
    """Per session, day (local to ``tz``, default this machine's zone) or model: calls,
    prompt / completion / cached tokens, the cached share of the prompt tokens, cost (and
    calls without a price), and calls tied to no session."""
    if by not in BY:
        raise ValueError(f"by must be one of {', '.join(BY)}, not {by!r}")
    rows = usage.assign(
        day=usage["time"].dt.tz_convert(tz or tzlocal()).dt.strftime("%Y-%m-%d"),
        unpriced=usage["cost_usd"].isna() * usage["calls"].fillna(0),
        unattributed=usage["session_key"].isna() * usage["calls"].fillna(0),
    )
    key = _COLUMNS[by]
    rows[key] = rows[key].astype("string").fillna(_NONE[by])
    sums = ["calls", "prompt_tokens", "completion_tokens", "cached_tokens", "unattributed"]
    table = rows.groupby(key, sort=True, observed=True).agg(
        **{c: (c, "sum") for c in sums},
        cost_usd=("cost_usd", lambda s: s.sum(min_count=1)),
        unpriced=("unpriced", "sum"),
    )
    table = table.reset_index().rename(columns={key: by})
    table.insert(
        5,
        "cache_share",
        table["cached_tokens"] / table["prompt_tokens"].where(table["prompt_tokens"] > 0),
    )
    order = [by, "calls", "prompt_tokens", "completion_tokens", "cached_tokens", "cache_share"]
    return table[[*order, "cost_usd", "unpriced", "unattributed"]].astype(
        dict.fromkeys(_COUNTS, "int64")
    )


def with_total(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` and a ``TOTAL`` row."""
    by = table.columns[0]
    total: dict[str, object] = {c: int(table[c].sum()) for c in _COUNTS}
    prompt = total["prompt_tokens"]
    total["cache_share"] = total["cached_tokens"] / prompt if prompt else float("nan")  # type: ignore[operator]  # both are the ints summed above
    total["cost_usd"] = float(table["cost_usd"].sum(min_count=1))
    return pd.concat([table, pd.DataFrame([{by: "TOTAL", **total}])], ignore_index=True)
