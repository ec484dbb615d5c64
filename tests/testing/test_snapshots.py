"""Frame snapshots: round trips, stable rendering, readable diffs, the update switch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sessionkit.testing import UPDATE_ENV, SnapshotMismatch, assert_frame_snapshot


@pytest.fixture(autouse=True)
def _no_update_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UPDATE_ENV, raising=False)


def sweep() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "max_messages": [40, 40, 120],
            "max_tokens": [8000, 32000, 8000],
            "coverage": [0.25, 1 / 3, 0.9],
            "label": pd.array(["a", None, "c"], dtype="string"),
        }
    )


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_snapshot_is_written_on_update_then_matches(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / "snaps" / f"sweep{suffix}"
    written = assert_frame_snapshot(sweep(), path, update=True)
    assert written.status == "written" and path.exists()
    assert repr(written).endswith(f"sweep{suffix}: written (3 rows x 4 columns)>")
    assert assert_frame_snapshot(sweep(), path).status == "matches"


def test_csv_layout_names_then_dtypes_then_stable_cells(tmp_path: Path) -> None:
    path = tmp_path / "sweep.csv"
    assert_frame_snapshot(sweep(), path, update=True)
    assert path.read_text().splitlines() == [
        "max_messages,max_tokens,coverage,label",
        "int,int,float,string",
        "40,8000,0.25,a",
        "40,32000,0.333333,<NA>",
        "120,8000,0.9,c",
    ]


def test_json_layout_has_one_row_per_line(tmp_path: Path) -> None:
    path = tmp_path / "sweep.json"
    assert_frame_snapshot(sweep(), path, update=True)
    lines = path.read_text().splitlines()
    assert lines[1] == '  "columns": ["max_messages", "max_tokens", "coverage", "label"],'
    assert '    ["40", "32000", "0.333333", "<NA>"],' in lines


def test_missing_snapshot_fails_with_how_to_record(tmp_path: Path) -> None:
    with pytest.raises(SnapshotMismatch, match=f"no snapshot at .*missing.csv.*{UPDATE_ENV}=1"):
        assert_frame_snapshot(sweep(), tmp_path / "missing.csv")
    assert not (tmp_path / "missing.csv").exists()


def test_float_noise_below_the_digits_is_equal(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    assert_frame_snapshot(pd.DataFrame({"x": [0.3, -0.0]}), path, update=True)
    assert_frame_snapshot(pd.DataFrame({"x": [0.1 + 0.2, 0.0]}), path)


def test_changed_cells_are_listed_by_index_label(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    keyed = sweep().set_index(["max_messages", "max_tokens"])
    assert_frame_snapshot(keyed, path, update=True)
    changed = keyed.copy()
    changed.loc[(40, 32000), "coverage"] = 0.5
    with pytest.raises(SnapshotMismatch) as info:
        assert_frame_snapshot(changed, path)
    message = str(info.value)
    assert "1 cell differs:" in message
    assert "row 1 ((40, 32000)), coverage: 0.333333 -> 0.5" in message
    assert message.endswith(f"Accept the new result with update=True or {UPDATE_ENV}=1.")


def test_dtype_and_row_changes_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    assert_frame_snapshot(sweep(), path, update=True)
    grown = pd.concat([sweep(), sweep().tail(1)], ignore_index=True)
    grown["max_tokens"] = grown["max_tokens"].astype("float64")
    with pytest.raises(SnapshotMismatch) as info:
        assert_frame_snapshot(grown, path)
    message = str(info.value)
    assert "dtype of 'max_tokens': int -> float" in message
    assert "rows: 3 -> 4" in message
    assert "    +120,8000,0.9,c" in message


def test_column_changes_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    assert_frame_snapshot(sweep(), path, update=True)
    with pytest.raises(SnapshotMismatch, match="columns missing: label\n  columns added: n"):
        assert_frame_snapshot(sweep().drop(columns="label").assign(n=1), path)


def test_env_var_updates_only_what_differs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.csv"
    assert_frame_snapshot(sweep(), path, update=True)
    monkeypatch.setenv(UPDATE_ENV, "1")
    assert assert_frame_snapshot(sweep(), path).status == "matches"
    assert assert_frame_snapshot(sweep().head(2), path).status == "updated"
    monkeypatch.delenv(UPDATE_ENV)
    assert assert_frame_snapshot(sweep().head(2), path).status == "matches"
    with pytest.raises(SnapshotMismatch):
        assert_frame_snapshot(sweep(), path, update=False)


def test_every_kind_of_cell_renders_stably(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "when": pd.to_datetime(["2026-01-02T03:04:05", None]),
            "n": pd.array([1, None], dtype="Int64"),
            "flag": [True, False],
            "role": pd.Categorical(["user", None]),
            "x": [np.inf, np.nan],
        },
        index=pd.Index(["a", "b"], name="key"),
    )
    path = tmp_path / "kinds.csv"
    assert_frame_snapshot(frame, path, update=True)
    assert path.read_text().splitlines()[1:] == [
        "string,datetime,int,bool,category,float",
        "a,2026-01-02T03:04:05,1,True,user,inf",
        "b,<NA>,<NA>,False,<NA>,<NA>",
    ]


def test_bad_suffix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\.csv or \.json"):
        assert_frame_snapshot(sweep(), tmp_path / "s.parquet", update=True)
