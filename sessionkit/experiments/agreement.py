"""An experiment's agreement per setting: how often each release, setting, model and edit made
the agent do what the session did, beside the tokens and dollars it sends per call (the
frontier a researcher tunes on)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from sessionkit.nanobot.policies import get_policy
from sessionkit.schema import AGREEMENT, EXPERIMENTS, REQUEST_SETTINGS, frame

__all__ = ["SETTING_KEYS", "agreement_by_setting", "setting_label"]

SETTING_KEYS = ("policy", *REQUEST_SETTINGS, "model", "edit")
"""What tells one setting of an experiment from another."""

_NONE_AT_ZERO = ("max_messages", "max_tokens")
"""Settings whose 0 means no limit."""


def _value(column: str, value: Any) -> str:
    """A setting's value as text: no limit as 'none', <NA> as 'default' (as stored for edits)."""
    if pd.isna(value):
        return "as stored" if column == "edit" else "none"
    if column in _NONE_AT_ZERO and value == 0:
        return "none"
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    return str(value)


def setting_label(row: pd.Series, varying: list[str]) -> str:
    """One setting as text: each of ``varying`` (the columns that differ across the results)
    named with its value, the release by its label; the release's label when none vary."""
    if not varying:
        return get_policy(str(row["policy"])).label
    return ", ".join(
        get_policy(str(row[c])).label if c == "policy" else f"{c} {_value(c, row[c])}"
        for c in varying
    )


def agreement_by_setting(results: pd.DataFrame) -> pd.DataFrame:
    """The :data:`~sessionkit.schema.AGREEMENT` frame of an experiment's results (a
    :func:`sessionkit.experiment` frame): per release, setting, model and edit, the share of
    compared answers taking the session's action, and the tokens and cost per call."""
    missing = [c.name for c in EXPERIMENTS if c.name not in results]
    if missing:
        raise ValueError(
            f"results must be a sessionkit.experiment frame; columns missing: {missing}"
        )
    rows = results.reset_index(drop=True)
    keys = list(SETTING_KEYS)
    groups = rows.groupby(keys, sort=False, dropna=False, observed=True).indices
    first = [int(at[0]) for at in groups.values()]
    settings = rows.loc[first, keys].reset_index(drop=True)
    varying = [c for c in keys if settings[c].nunique(dropna=False) > 1]
    answered_rows = rows["outcome"].isin(["answered", "stored"]).to_numpy()
    same = rows["same_action"]
    counts: dict[str, list[Any]] = {
        name: []
        for name in (
            "calls",
            "answered",
            "compared",
            "agreed",
            "tokens_per_call",
            "prompt_tokens",
            "cost_usd",
            "worst_cost_usd",
        )
    }
    for at in groups.values():
        answered = at[answered_rows[at]]
        compared = same.iloc[answered].dropna()
        reported = rows["prompt_tokens"].iloc[answered].dropna()
        costs = rows["cost_usd"].to_numpy()[answered]
        counts["calls"].append(len(at))
        counts["answered"].append(len(answered))
        counts["compared"].append(len(compared))
        counts["agreed"].append(int(compared.astype(bool).sum()))
        estimates = rows["estimated_prompt_tokens"].to_numpy()[at]
        rebuilt = estimates[estimates > 0]
        counts["tokens_per_call"].append(float(rebuilt.mean()) if len(rebuilt) else np.nan)
        counts["prompt_tokens"].append(int(reported.sum()) if len(reported) else None)
        counts["cost_usd"].append(float(costs.sum()) if len(costs) else np.nan)
        worst = rows["worst_cost_usd"].to_numpy()[at][estimates > 0]
        counts["worst_cost_usd"].append(float(worst.sum()))
    compared_n = np.array(counts["compared"], dtype=np.float64)
    answered_n = np.array(counts["answered"], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(compared_n > 0, np.array(counts["agreed"]) / compared_n, np.nan)
        per_call = np.where(answered_n > 0, np.array(counts["cost_usd"]) / answered_n, np.nan)
    values = {
        **{c: settings[c].array for c in keys},
        "setting": [setting_label(row, varying) for _, row in settings.iterrows()],
        **counts,
        "agreement_rate": rate,
        "cost_per_call": per_call,
    }
    return frame(AGREEMENT, values)
