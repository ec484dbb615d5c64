"""DataFrame snapshots: pin a result in a small CSV or JSON file and compare it on rerun.

The fresh result is rendered as text the same way as the stored one and compared cell by cell;
a mismatch raises :class:`SnapshotMismatch` with a readable diff.  Accept a new result with
``update=True`` or by setting ``SESSIONKIT_UPDATE_SNAPSHOTS=1``.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "FLOAT_DIGITS",
    "UPDATE_ENV",
    "Snapshot",
    "SnapshotMismatch",
    "assert_frame_snapshot",
    "json_value",
    "stored_float",
]

UPDATE_ENV = "SESSIONKIT_UPDATE_SNAPSHOTS"
"""Set to ``1`` to rewrite every snapshot that differs instead of failing."""

FLOAT_DIGITS = 6
_NA = "<NA>"
_MAX_DIFF_LINES = 25


class SnapshotMismatch(AssertionError):
    """A result differs from its recorded snapshot (or none was recorded)."""


@dataclass(frozen=True)
class Snapshot:
    """Outcome of a snapshot check: ``status`` is ``"matches"``, ``"written"`` or ``"updated"``."""

    path: Path
    status: str
    shape: tuple[int, int]

    def __repr__(self) -> str:
        rows, cols = self.shape
        return f"<snapshot {self.path.as_posix()}: {self.status} ({rows} rows x {cols} columns)>"


@dataclass(frozen=True)
class _Table:
    """A frame rendered as text: column names, dtype names and one string per cell."""

    columns: list[str]
    dtypes: list[str]
    rows: list[list[str]]


def json_value(value: Any) -> Any:
    """A setting value as JSON: numbers, booleans and text; missing as None."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, np.bool_ | bool):
        return bool(value)
    if isinstance(value, np.integer | int):
        return int(value)
    return str(value)


def stored_float(value: float) -> float | None:
    """A figure as a snapshot stores it: ``FLOAT_DIGITS`` significant digits, None for NaN."""
    return None if math.isnan(value) else float(format(value, f".{FLOAT_DIGITS}g"))


def update_requested(update: bool | None) -> bool:
    if update is not None:
        return update
    return os.environ.get(UPDATE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def _cell(value: Any, digits: int) -> str:
    """One value as stable text: floats to ``digits`` significant digits, missing as <NA>."""
    if value is None or value is pd.NA or value is pd.NaT:
        return _NA
    if isinstance(value, float | np.floating):
        if math.isnan(value):
            return _NA
        text = format(float(value), f".{digits}g")
        return "0" if text == "-0" else text
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return str(value)


def _kind(column: pd.Series) -> str:
    """The column's dtype family, stable across pandas versions and resolutions."""
    dtype = column.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        return "category"
    for kind, test in (
        ("bool", pd.api.types.is_bool_dtype),
        ("int", pd.api.types.is_integer_dtype),
        ("float", pd.api.types.is_float_dtype),
        ("datetime", pd.api.types.is_datetime64_any_dtype),
        ("timedelta", pd.api.types.is_timedelta64_dtype),
    ):
        if test(dtype):
            return kind
    inferred = pd.api.types.infer_dtype(column, skipna=True)
    return "string" if inferred in {"string", "empty"} else "object"


def _column_name(name: Any) -> str:
    return "/".join(map(str, name)) if isinstance(name, tuple) else str(name)


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with a meaningful index moved into columns."""
    index = frame.index
    default = isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1
    if default and index.name is None:
        return frame
    names = [n if n is not None else f"level_{i}" for i, n in enumerate(index.names)]
    if index.nlevels == 1 and index.names[0] is None:
        names = ["index"]
    return frame.set_axis(index.set_names(names)).reset_index()


def _render(frame: pd.DataFrame, digits: int) -> _Table:
    plain = _plain(frame)
    columns = [_column_name(c) for c in plain.columns]
    if len(set(columns)) != len(columns):
        raise ValueError(f"snapshot columns must have unique names, got {columns}")
    dtypes = [_kind(plain.iloc[:, j]) for j in range(plain.shape[1])]
    cells = [[_cell(v, digits) for v in plain.iloc[:, j].tolist()] for j in range(plain.shape[1])]
    rows = [list(r) for r in zip(*cells, strict=True)] if cells else [[] for _ in range(len(plain))]
    return _Table(columns, dtypes, rows)


def _dump(table: _Table, path: Path) -> str:
    """The snapshot file's text: CSV (names row, dtypes row, cells) or JSON (a row per line)."""
    if path.suffix == ".json":
        rows = ",\n".join(f"    {json.dumps(r, ensure_ascii=False)}" for r in table.rows)
        body = f"[\n{rows}\n  ]" if rows else "[]"
        return (
            "{\n"
            f'  "columns": {json.dumps(table.columns, ensure_ascii=False)},\n'
            f'  "dtypes": {json.dumps(table.dtypes)},\n'
            f'  "rows": {body}\n'
            "}\n"
        )
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerow(table.dtypes)
    writer.writerows(table.rows)
    return out.getvalue()


def _parse(text: str, path: Path) -> _Table:
    if path.suffix == ".json":
        data = json.loads(text)
        return _Table(data["columns"], data["dtypes"], data["rows"])
    lines = list(csv.reader(io.StringIO(text)))
    if len(lines) < 2:
        raise SnapshotMismatch(f"{path.as_posix()} is not a snapshot (no column and dtype rows)")
    return _Table(lines[0], lines[1], lines[2:])


def _check_suffix(path: Path) -> None:
    if path.suffix not in {".csv", ".json"}:
        raise ValueError(f"snapshot files end in .csv or .json, got {path.as_posix()!r}")


def _row_labels(frame: pd.DataFrame) -> list[str]:
    index = frame.index
    if isinstance(index, pd.RangeIndex) and index.name is None:
        return [f"row {i}" for i in range(len(frame))]
    return [f"row {i} ({label})" for i, label in enumerate(index.tolist())]


def _diff(expected: _Table, actual: _Table, labels: list[str], path: Path) -> str:
    """What changed, expected -> actual: columns, dtypes, then cells or lines."""
    out: list[str] = []
    missing = [c for c in expected.columns if c not in actual.columns]
    added = [c for c in actual.columns if c not in expected.columns]
    if missing:
        out.append(f"  columns missing: {', '.join(missing)}")
    if added:
        out.append(f"  columns added: {', '.join(added)}")
    if not missing and not added and expected.columns != actual.columns:
        out.append(f"  column order: {expected.columns} -> {actual.columns}")
    old_types = dict(zip(expected.columns, expected.dtypes, strict=True))
    for name, dtype in zip(actual.columns, actual.dtypes, strict=True):
        if name in old_types and old_types[name] != dtype:
            out.append(f"  dtype of {name!r}: {old_types[name]} -> {dtype}")
    if len(expected.rows) != len(actual.rows) or expected.columns != actual.columns:
        if len(expected.rows) != len(actual.rows):
            out.append(f"  rows: {len(expected.rows)} -> {len(actual.rows)}")
        lines = difflib.unified_diff(
            _dump(expected, Path("x.csv")).splitlines(),
            _dump(actual, Path("x.csv")).splitlines(),
            "snapshot",
            "result",
            n=1,
            lineterm="",
        )
        out.extend(f"    {line}" for line in list(lines)[2:])
    else:
        cells = [
            f"    {labels[i]}, {name}: {old} -> {new}"
            for i, (old_row, new_row) in enumerate(zip(expected.rows, actual.rows, strict=True))
            for name, old, new in zip(actual.columns, old_row, new_row, strict=True)
            if old != new
        ]
        if cells:
            out.append(f"  {len(cells)} {'cell differs' if len(cells) == 1 else 'cells differ'}:")
            out.extend(cells)
    if len(out) > _MAX_DIFF_LINES:
        out = [*out[:_MAX_DIFF_LINES], f"  ... {len(out) - _MAX_DIFF_LINES} more lines"]
    return (
        f"result differs from snapshot {path.as_posix()} (snapshot -> result):\n"
        + "\n".join(out)
        + f"\nAccept the new result with update=True or {UPDATE_ENV}=1."
    )


def assert_frame_snapshot(
    frame: pd.DataFrame,
    path: str | Path,
    *,
    update: bool | None = None,
    float_digits: int = FLOAT_DIGITS,
) -> Snapshot:
    """Compare ``frame`` with the snapshot at ``path`` (``.csv`` or ``.json``).

    Cells are compared as text: floats rounded to ``float_digits`` significant digits, missing
    values as ``<NA>``.  Column names and dtype families (``int``, ``float``, ``bool``,
    ``string``, ``category``, ``datetime``, ``timedelta``, ``object``; nullable or not, any
    width or resolution) must match too.  A named or non-default index
    is stored as leading columns and labels the rows of a diff.

    With ``update`` (default: the :data:`UPDATE_ENV` environment variable) a missing or
    different snapshot is (re)written instead of failing.

    Raises
    ------
    SnapshotMismatch
        When the snapshot is missing or differs, with the differences in the message.
    """
    path = Path(path)
    _check_suffix(path)
    actual = _render(frame, float_digits)
    shape = (len(actual.rows), len(actual.columns))
    text = _dump(actual, path)
    if not path.exists():
        if not update_requested(update):
            raise SnapshotMismatch(
                f"no snapshot at {path.as_posix()}; record it with update=True or {UPDATE_ENV}=1"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return Snapshot(path, "written", shape)
    stored = path.read_text(encoding="utf-8")
    expected = _parse(stored, path)
    if expected == actual:
        return Snapshot(path, "matches", shape)
    if update_requested(update):
        path.write_text(text, encoding="utf-8")
        return Snapshot(path, "updated", shape)
    raise SnapshotMismatch(_diff(expected, actual, _row_labels(frame), path))
