"""Agreement snapshots: pin how often an experiment's answers take the session's action, per
setting, in a small JSON file, and fail when a change (a memory policy, a prompt, a model)
moves a setting's agreement rate beyond a stated tolerance.

The pinned numbers per setting (release, history settings, model and edit of
:func:`sessionkit.experiments.agreement.agreement_by_setting`) are the answers compared and
the share agreeing.  Accept a new result with ``update=True`` or by setting
``SESSIONKIT_UPDATE_SNAPSHOTS=1``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from sessionkit.experiments.agreement import SETTING_KEYS, agreement_by_setting
from sessionkit.testing.snapshots import (
    UPDATE_ENV,
    Snapshot,
    SnapshotMismatch,
    json_value,
    stored_float,
    update_requested,
)

__all__ = ["agreement_data", "assert_agreement_snapshot"]

_FORMAT = "sessionkit agreement snapshot 1"


def agreement_data(results: pd.DataFrame) -> list[dict[str, Any]]:
    """What an agreement snapshot pins, per setting of a :func:`sessionkit.experiment` frame:
    the setting (as JSON values), its label, the answers compared and the agreement rate."""
    table = agreement_by_setting(results)
    return [
        {
            "setting": {name: json_value(row[name]) for name in SETTING_KEYS},
            "label": str(row["setting"]),
            "compared": int(row["compared"]),
            "agreement_rate": stored_float(float(row["agreement_rate"])),
        }
        for _, row in table.iterrows()
    ]


def _dump(rows: list[dict[str, Any]]) -> str:
    """The snapshot file's text: the format, then one setting per line."""
    lines = ",\n".join(f"    {json.dumps(r, ensure_ascii=False)}" for r in rows)
    body = f"[\n{lines}\n  ]" if lines else "[]"
    return f'{{\n  "format": {json.dumps(_FORMAT)},\n  "rows": {body}\n}}\n'


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file beside it, then renamed)."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _parse(text: str, path: Path) -> list[dict[str, Any]]:
    """The stored rows, checked (a damaged file says what is wrong)."""

    def damaged(reason: str) -> SnapshotMismatch:
        return SnapshotMismatch(
            f"{path.as_posix()} is not an agreement snapshot ({reason}); re-record it with "
            f"update=True or {UPDATE_ENV}=1"
        )

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise damaged(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise damaged(f'no "format": {json.dumps(_FORMAT)}')
    if not isinstance(data.get("rows"), list):
        raise damaged("'rows' missing or not a list")
    for i, row in enumerate(data["rows"]):
        rate = row.get("agreement_rate") if isinstance(row, dict) else "?"
        ok = isinstance(row, dict) and isinstance(row.get("setting"), dict)
        ok = ok and isinstance(row.get("label"), str) and type(row.get("compared")) is int
        ok = ok and (rate is None or (isinstance(rate, int | float) and not isinstance(rate, bool)))
        if not ok:
            raise damaged(f"row {i} is not a setting, label, compared count and rate")
    return list(data["rows"])


def _key(row: dict[str, Any]) -> str:
    return json.dumps(row["setting"], sort_keys=True)


def _shown(rate: float | None) -> str:
    return "none compared" if rate is None else f"{rate:.1%}"


def _compare(
    expected: list[dict[str, Any]], actual: list[dict[str, Any]], tolerance: float
) -> list[str]:
    """The settings whose rate moved beyond ``tolerance``, then those missing or new."""
    now = {_key(r): r for r in actual}
    before = {_key(r): r for r in expected}
    out = []
    for key, old in before.items():
        new = now.get(key)
        if new is None:
            continue
        a, b = old["agreement_rate"], new["agreement_rate"]
        moved = (a is None) != (b is None) or (
            a is not None and b is not None and abs(b - a) > tolerance
        )
        if moved:
            shift = f" ({(b - a) * 100:+.1f} points)" if a is not None and b is not None else ""
            out.append(
                f"  {new['label']}: agreement {_shown(a)} of {old['compared']} -> {_shown(b)} "
                f"of {new['compared']}{shift}"
            )
    for rows, other, title in ((before, now, "missing from the result"), (now, before, "new")):
        gone = [r["label"] for k, r in rows.items() if k not in other]
        if gone:
            out.append(f"  {len(gone)} setting(s) {title}: {', '.join(gone)}")
    return out


def assert_agreement_snapshot(
    results: pd.DataFrame,
    path: str | Path,
    *,
    tolerance: float = 0.0,
    update: bool | None = None,
) -> Snapshot:
    """Compare the agreement per setting of a :func:`sessionkit.experiment` frame with the
    agreement snapshot at ``path`` (``.json``).

    Each setting's agreement rate (the share of compared answers taking the session's action)
    must stay within ``tolerance`` of the recorded one: ``|result - recorded| <= tolerance``
    (a share: 0.05 is five percentage points; default: exact to ``FLOAT_DIGITS`` digits), and
    the same settings must be there.  A rate that rose beyond the tolerance fails too: it is
    a change to re-record.

    With ``update`` (default: the :data:`UPDATE_ENV` environment variable) a missing,
    damaged or differing snapshot is (re)written, atomically; one within the tolerance is
    left as it is.  The folder must exist.

    Raises
    ------
    SnapshotMismatch
        When the snapshot is missing, damaged or differs, naming each setting beyond the
        tolerance with its rate before and after.
    """
    path = Path(path)
    if path.suffix != ".json":
        raise ValueError(f"agreement snapshot files end in .json, got {path.as_posix()!r}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not tolerance >= 0:
        raise ValueError(f"tolerance must be a share of 0 or more, not {tolerance!r}")
    actual = agreement_data(results)
    shape = (len(actual), 3)
    rewrite = update_requested(update)
    if not path.exists():
        if not rewrite:
            raise SnapshotMismatch(
                f"no snapshot at {path.as_posix()}; record it with update=True or {UPDATE_ENV}=1"
            )
        _write(path, _dump(actual))
        return Snapshot(path, "written", shape)
    try:
        expected = _parse(path.read_text(encoding="utf-8"), path)
    except SnapshotMismatch:
        if not rewrite:
            raise
        _write(path, _dump(actual))
        return Snapshot(path, "updated", shape)
    failures = _compare(expected, actual, float(tolerance))
    if not failures:
        return Snapshot(path, "matches", shape)
    if rewrite:
        _write(path, _dump(actual))
        return Snapshot(path, "updated", shape)
    raise SnapshotMismatch(
        f"agreement differs from snapshot {path.as_posix()} beyond tolerance={tolerance:g} "
        "(snapshot -> result):\n"
        + "\n".join(failures)
        + f"\nAccept the new result with update=True or {UPDATE_ENV}=1."
    )
