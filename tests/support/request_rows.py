"""Requests frames built by hand: every column of ``schema.REQUESTS``, the ones a test names
as given, the others at a plain default (one session, one setting, no time)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from sessionkit.schema import REQUESTS, frame

_DEFAULTS: dict[str, Any] = {
    "session_key": "cli:a",
    "policy": "nanobot-0.2",
    "max_messages": 120,
    "max_tokens": 0,
    "include_timestamps": False,
    "include_runtime_context": True,
    "extend_to_user": False,
    "last_consolidated": "none",
    "context_window": None,
    "max_output": None,
    "time": pd.NaT,
    "time_inferred": True,
    "cache_rules": "openai",
    "cache_break": "none",
    "inferred": False,
    "needs_summary": None,
}


def request_rows(n: int, **columns: Any) -> pd.DataFrame:
    """A requests frame of ``n`` calls: each column a list of ``n`` values or one value for
    all (a column not given: its default, else 0)."""
    values = {}
    for column in REQUESTS:
        given = columns.pop(column.name, _DEFAULTS.get(column.name, 0))
        values[column.name] = list(given) if isinstance(given, list | tuple) else [given] * n
    if columns:
        raise TypeError(f"not request columns: {sorted(columns)}")
    if "time" in values:
        values["time"] = pd.to_datetime(values["time"], utc=True)
    return frame(REQUESTS, values)
