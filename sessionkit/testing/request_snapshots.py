"""Request snapshots: pin each call's size and cost under a history policy in a small JSON
file, and fail when a change makes calls larger or dearer (or smaller or cheaper) than the
recorded ones beyond a stated tolerance.

The pinned numbers per (session, turn, step) of a :func:`sessionkit.requests` frame are the
whole request, its history part (what a history policy moves), the prefix a provider's cache
could reuse, and its price with a stated model at a stated date (:func:`sessionkit.cost`).
Accept a new result with ``update=True`` or by setting ``SESSIONKIT_UPDATE_SNAPSHOTS=1``.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sessionkit.accounting.pricing import COST_MODEL_CHANGES, COST_MODEL_VERSION, cost
from sessionkit.nanobot.policies import get_policy
from sessionkit.schema import REQUEST_SETTINGS
from sessionkit.testing.snapshots import (
    UPDATE_ENV,
    Snapshot,
    SnapshotMismatch,
    json_value,
    stored_float,
    update_requested,
)

__all__ = ["CHECKED", "KEYS", "MEASURES", "assert_requests_snapshot", "requests_data"]

KEYS = ("session_key", "turn", "step")
"""What names a call in a request snapshot."""

MEASURES = ("total_tokens", "history_tokens", "prefix_tokens", "cost_usd")
"""The numbers pinned per call: the request, its history part, its cacheable prefix, its cost."""

CHECKED = ("total_tokens", "cost_usd")
"""The pinned numbers held to the tolerance (how large, how dear); the parts explain them."""

_FORMAT = "sessionkit requests snapshot 1"
_SETTINGS = ("policy", *REQUEST_SETTINGS)
_LISTED = 12


@dataclass(frozen=True)
class _Recorded:
    """A snapshot's content: how it was priced, the settings it ran, one row per call."""

    priced: dict[str, Any]
    settings: dict[str, Any]
    table: pd.DataFrame


def _price_date(date: dt.datetime | dt.date | str) -> str:
    """The price date as stable text in UTC, as :func:`sessionkit.cost` reads it (a date, its
    midnight and the same moment in another zone read the same); never "now"."""
    if date is None:
        raise ValueError("a request snapshot needs a price date: pass date=")
    moment = pd.Timestamp(date)
    if moment.tzinfo is not None:
        moment = moment.tz_convert("UTC").tz_localize(None)
    return moment.isoformat()


def requests_data(
    frame: pd.DataFrame,
    *,
    model: str,
    date: dt.datetime | dt.date | str,
    provider: str | None = None,
    completion_tokens: int = 0,
) -> pd.DataFrame:
    """What a request snapshot pins: per (session, turn, step) of a :func:`sessionkit.requests`
    frame of one setting, the :data:`MEASURES`, priced by :func:`sessionkit.cost` with
    ``model`` at ``date``; sorted, costs to ``FLOAT_DIGITS`` significant digits (None: no
    price)."""
    if frame.duplicated(list(KEYS)).any():
        settings = [c for c in _SETTINGS[1:] if c in frame and frame[c].nunique(dropna=False) > 1]
        raise ValueError(
            "a request snapshot holds one call per (session_key, turn, step); the frame has "
            f"several (a grid over {', '.join(settings) or 'releases'}): pass one setting"
        )
    priced = cost(
        frame, model=model, provider=provider, date=date, completion_tokens=completion_tokens
    )
    table = pd.DataFrame(
        {
            "session_key": priced["session_key"].astype(str).astype(object),
            "turn": priced["turn"].astype("int64"),
            "step": priced["step"].astype("int64"),
            **{m: priced[m].astype("int64") for m in MEASURES[:-1]},
            "cost_usd": [stored_float(float(v)) for v in priced["cost_usd"]],
        }
    )
    return table.sort_values(list(KEYS), ignore_index=True)


def _settings(frame: pd.DataFrame) -> dict[str, Any]:
    """The release and settings of the frame: a value each, or the sorted list of them; each
    candidate policy's identity under ``candidates``."""
    out: dict[str, Any] = {}
    for name in _SETTINGS:
        if name in frame:
            values = sorted({json_value(v) for v in frame[name].tolist()}, key=repr)
            out[name] = values[0] if len(values) == 1 else values
    candidates = _candidates(frame)
    return out | ({"candidates": candidates} if candidates else {})


def _candidates(frame: pd.DataFrame) -> dict[str, str]:
    """Each candidate policy of the frame and its identity; refused for one without (another
    process could not tell what it was)."""
    found: dict[str, str] = {}
    for name in sorted(map(str, frame["policy"].unique())) if "policy" in frame else ():
        rule = get_policy(name).rule
        if rule is None:
            continue
        if rule.identity is None:
            raise ValueError(
                f"candidate {name!r} has no identity (a function no other process can tell "
                "apart), so no snapshot keeps it: make it with sk.candidate(..., "
                "identity='<what it is>')"
            )
        found[name] = rule.identity
    return found


def _dump(recorded: _Recorded) -> str:
    """The snapshot file's text: the statement, then one call per line."""
    rows = ",\n".join(
        f"    {json.dumps(list(r), ensure_ascii=False)}"
        for r in recorded.table.itertuples(index=False)
    )
    body = f"[\n{rows}\n  ]" if rows else "[]"
    return (
        "{\n"
        f'  "format": {json.dumps(_FORMAT)},\n'
        f'  "priced": {json.dumps(recorded.priced)},\n'
        f'  "settings": {json.dumps(recorded.settings, ensure_ascii=False)},\n'
        f'  "columns": {json.dumps([*KEYS, *MEASURES])},\n'
        f'  "rows": {body}\n'
        "}\n"
    )


def _damaged(path: Path, reason: str) -> SnapshotMismatch:
    return SnapshotMismatch(
        f"{path.as_posix()} is not a requests snapshot ({reason}); re-record it with "
        f"update=True or {UPDATE_ENV}=1"
    )


def _number(value: Any, integer: bool) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) if integer else value is None or isinstance(value, int | float)


def _parse(text: str, path: Path) -> _Recorded:
    """The stored snapshot, checked field by field (a damaged file says what is wrong)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _damaged(path, f"not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise _damaged(path, f'no "format": {json.dumps(_FORMAT)}')
    for field, kind in (("priced", dict), ("settings", dict), ("columns", list), ("rows", list)):
        if not isinstance(data.get(field), kind):
            raise _damaged(path, f"{field!r} missing or not a {kind.__name__}")
    if data["columns"] != [*KEYS, *MEASURES]:
        raise _damaged(path, f"columns {data['columns']}, expected {[*KEYS, *MEASURES]}")
    for i, row in enumerate(data["rows"]):
        ok = isinstance(row, list) and len(row) == len(KEYS) + len(MEASURES)
        ok = ok and isinstance(row[0], str)
        ok = ok and all(_number(v, integer=j < len(row) - 1) for j, v in enumerate(row[1:], 1))
        if not ok:
            raise _damaged(path, f"row {i} is not [session_key, turn, step, 3 token counts, cost]")
    table = pd.DataFrame(data["rows"], columns=[*KEYS, *MEASURES]).astype(
        {c: "int64" for c in ("turn", "step", *MEASURES[:-1])}
    )
    table["session_key"] = table["session_key"].astype(object)
    table["cost_usd"] = table["cost_usd"].astype(object).where(table["cost_usd"].notna(), None)
    if table.duplicated(list(KEYS)).any():
        raise _damaged(path, "a (session_key, turn, step) appears twice")
    return _Recorded(data["priced"], data["settings"], table)


@dataclass(frozen=True)
class _Tolerance:
    rel_tol: float
    abs_tol: float
    abs_usd: float

    def allowed(self, measure: str, recorded: np.ndarray) -> np.ndarray:
        floor = self.abs_usd if measure == "cost_usd" else self.abs_tol
        return np.maximum(floor, self.rel_tol * np.abs(recorded))

    def __str__(self) -> str:
        return (
            f"rel_tol={self.rel_tol:g}, abs_tol={self.abs_tol:g} tokens, abs_usd={self.abs_usd:g}"
        )


def _label(row: Any) -> str:
    return f"{row.session_key} turn {row.turn} step {row.step}"


def _change(measure: str, old: Any, new: Any) -> str:
    """``old -> new`` with the relative change: token counts as integers, costs as stored."""
    if old is None or new is None or pd.isna(old) or pd.isna(new):
        return f"{_shown(old)} -> {_shown(new)}"
    if measure != "cost_usd":
        old, new = int(old), int(new)
    shift = f" ({(new - old) / old:+.1%})" if old else ""
    return f"{old} -> {new}{shift}"


def _shown(value: Any) -> str:
    return "no price" if value is None or pd.isna(value) else str(value)


def _call_change(row: Any, beyond: pd.DataFrame) -> str:
    """One call's line: the checked numbers beyond the tolerance, then the parts that moved."""
    values = {m: (getattr(row, f"{m}_old"), getattr(row, f"{m}_new")) for m in MEASURES}
    checked = [f"{m} {_change(m, *values[m])}" for m in CHECKED if beyond.at[row.Index, m]]
    moved = [
        f"{m} {_change(m, *values[m])}"
        for m in MEASURES
        if m not in CHECKED and values[m][0] != values[m][1]
    ]
    line = f"{_label(row)}: {', '.join(checked)}"
    return f"{line}; {', '.join(moved)}" if moved else line


def _compare(
    expected: _Recorded, actual: _Recorded, tolerance: _Tolerance
) -> tuple[list[str], list[str]]:
    """What differs beyond the tolerance (failures), and the settings that changed (context)."""
    out: list[str] = []
    old = expected.priced.get("cost_model")
    if old != actual.priced["cost_model"]:
        out.append(
            f"  priced under cost model {old if old is not None else '1 or older (unrecorded)'}, "
            f"now {COST_MODEL_VERSION} ({COST_MODEL_CHANGES[COST_MODEL_VERSION]}): the costs "
            "cannot be compared"
        )
    for name in ("model", "provider", "date", "completion_tokens"):
        old, new = expected.priced.get(name), actual.priced.get(name)
        if old != new:
            out.append(f"  priced with {name} {old!r}, now {new!r}: the costs cannot be compared")
    context = [
        f"  settings: {name} {expected.settings.get(name)!r} -> {actual.settings.get(name)!r}"
        for name in dict.fromkeys([*expected.settings, *actual.settings])
        if expected.settings.get(name) != actual.settings.get(name)
    ]
    both = expected.table.merge(
        actual.table, on=list(KEYS), how="outer", suffixes=("_old", "_new"), indicator=True
    ).sort_values(list(KEYS), ignore_index=True)
    common = both[both["_merge"] == "both"]
    beyond = pd.DataFrame(index=common.index)
    rose = np.zeros(len(common), dtype=bool)
    for m in CHECKED:
        old = pd.to_numeric(common[f"{m}_old"], errors="coerce").to_numpy(dtype=float)
        new = pd.to_numeric(common[f"{m}_new"], errors="coerce").to_numpy(dtype=float)
        gap = np.where(np.isnan(old) & np.isnan(new), 0.0, new - old)
        far = np.isnan(gap) | (np.abs(gap) > tolerance.allowed(m, np.nan_to_num(old)))
        beyond[m] = far
        rose |= far & (np.nan_to_num(gap) > 0)
    changed = beyond.any(axis=1).to_numpy()
    for title, rows in (
        ("larger or dearer", common[rose]),
        ("smaller or cheaper", common[changed & ~rose]),
    ):
        if len(rows):
            out.append(f"  {len(rows)} of {len(common)} calls {title}:")
            out.extend(
                f"    {_call_change(row, beyond)}" for row in rows.head(_LISTED).itertuples()
            )
            if len(rows) > _LISTED:
                out.append(f"    ... {len(rows) - _LISTED} more")
    for side, title in (("left_only", "missing from the result"), ("right_only", "new")):
        rows = both[both["_merge"] == side]
        if len(rows):
            labels = [_label(r) for r in rows.head(_LISTED).itertuples()]
            more = f", ... {len(rows) - _LISTED} more" if len(rows) > _LISTED else ""
            out.append(f"  {len(rows)} calls {title}: {', '.join(labels)}{more}")
    return out, context


def assert_requests_snapshot(
    frame: pd.DataFrame,
    path: str | Path,
    *,
    model: str,
    date: dt.datetime | dt.date | str,
    provider: str | None = None,
    completion_tokens: int = 0,
    rel_tol: float = 0.0,
    abs_tol: float = 0,
    abs_usd: float = 0.0,
    update: bool | None = None,
) -> Snapshot:
    """Compare the calls of a :func:`sessionkit.requests` frame (one setting) with the request
    snapshot at ``path`` (``.json``), priced with ``model`` (``provider``) at ``date``.

    Each call's size and cost (:data:`CHECKED`) must stay within the tolerance of the
    recorded ones: ``|result - recorded| <= max(rel_tol * |recorded|, abs_tol)``, with
    ``abs_usd`` instead of ``abs_tol`` (tokens) for ``cost_usd``; defaults: exact.  Its
    history and cacheable prefix, pinned beside them, explain a change in the message.  As with
    :func:`assert_frame_snapshot`, a change either way is a failure: a call that shrank or
    got cheaper beyond the tolerance is a change to re-record too.  The same calls must be
    there, priced the same way; changed settings are named in the message but fail nothing
    by themselves.

    With ``update`` (default: the :data:`UPDATE_ENV` environment variable) a missing,
    damaged or differing snapshot is (re)written; one within the tolerance is left as it is.

    Raises
    ------
    SnapshotMismatch
        When the snapshot is missing, damaged or differs, listing the calls beyond the
        tolerance (larger or dearer first).
    """
    path = Path(path)
    if path.suffix != ".json":
        raise ValueError(f"request snapshot files end in .json, got {path.as_posix()!r}")
    when = _price_date(date)
    table = requests_data(
        frame, model=model, date=when, provider=provider, completion_tokens=completion_tokens
    )
    priced = {
        "model": model,
        "provider": provider,
        "date": when,
        "completion_tokens": completion_tokens,
        "cost_model": COST_MODEL_VERSION,
    }
    actual = _Recorded(priced, _settings(frame), table)
    shape = table.shape
    rewrite = update_requested(update)
    if not path.exists():
        if not rewrite:
            raise SnapshotMismatch(
                f"no snapshot at {path.as_posix()}; record it with update=True or {UPDATE_ENV}=1"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_dump(actual), encoding="utf-8")
        return Snapshot(path, "written", shape)
    try:
        expected = _parse(path.read_text(encoding="utf-8"), path)
    except SnapshotMismatch:
        if not rewrite:
            raise
        path.write_text(_dump(actual), encoding="utf-8")
        return Snapshot(path, "updated", shape)
    tolerance = _Tolerance(rel_tol, abs_tol, abs_usd)
    failures, context = _compare(expected, actual, tolerance)
    if not failures and not (rewrite and context):
        return Snapshot(path, "matches", shape)
    if rewrite:
        path.write_text(_dump(actual), encoding="utf-8")
        return Snapshot(path, "updated", shape)
    raise SnapshotMismatch(
        f"requests differ from snapshot {path.as_posix()} beyond {tolerance} (snapshot -> "
        "result):\n"
        + "\n".join([*context, *failures])
        + "\nA call that shrank or got cheaper beyond the tolerance is a change too: accept "
        f"the new result with update=True or {UPDATE_ENV}=1."
    )
