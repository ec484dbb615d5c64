"""The declarations: one frame builder for every documented frame, one status table."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pandas as pd
import pytest

from sessionkit import schema
from sessionkit.schema import PROBLEMS, Reported, empty_frame, frame

ALL_COLUMNS = [
    schema.SESSIONS,
    schema.MESSAGES,
    schema.PROBLEMS,
    schema.NOTES,
    schema.WINDOWS,
    schema.FILE_CAP,
    schema.STATES,
    schema.VIOLATIONS,
    schema.FIGURE_DATA,
]


def _dtypes(frame: pd.DataFrame) -> dict[str, str]:
    return {name: str(dtype) for name, dtype in frame.dtypes.items()}


@pytest.mark.parametrize("columns", ALL_COLUMNS)
def test_empty_frame_has_every_declared_column_and_dtype(columns) -> None:
    frame = schema.empty_frame(columns)
    assert len(frame) == 0
    assert _dtypes(frame) == {c.name: c.dtype for c in columns}


def test_frame_casts_values_to_the_declared_dtypes_in_declared_order() -> None:
    frame = schema.frame(
        schema.PROBLEMS,
        {"reason": ["bad json", None], "line_no": [3, None], "path": ["a.jsonl", "b.jsonl"]},
    )
    assert list(frame.columns) == ["path", "line_no", "reason"]
    assert _dtypes(frame) == {"path": "string", "line_no": "Int64", "reason": "string"}
    assert frame["line_no"].tolist() == [3, pd.NA]
    assert frame["reason"].tolist() == ["bad json", pd.NA]


def test_frame_takes_codes_and_keeps_arrays_of_the_declared_dtype() -> None:
    idx = np.arange(3, dtype=np.int64)
    role = pd.Categorical(["user", "tool", "user"], categories=["user", "tool"])
    values = {c.name: [None, None, None] for c in schema.STATES} | {
        "idx": idx,
        "role": role,
        "user_index": [0, 0, 1],
        "tokens": [5, 7, 9],
        "status": [0, 7, 1],
    }
    frame = schema.frame(schema.STATES, values, categories={"status": schema.STATUS_NAMES})
    assert frame["role"].cat.categories.tolist() == ["user", "tool"]
    assert frame["status"].tolist() == ["in_window", "later", "trimmed_count"]
    assert frame["status"].cat.categories.tolist() == list(schema.STATUS_NAMES)
    assert frame["idx"].tolist() == [0, 1, 2]
    assert _dtypes(frame) == {c.name: c.dtype for c in schema.STATES}


def test_frame_categories_from_labels_and_datetimes() -> None:
    values = {c.name: [None] for c in schema.SESSIONS} | {
        "key": ["telegram:1"],
        "channel": ["telegram"],
        "format": ["nanobot-0.2"],
        "created_at": [datetime(2026, 1, 2, 3, 4, 5)],
        "n_messages": [4],
    }
    frame = schema.frame(schema.SESSIONS, values)
    assert frame["channel"].cat.categories.tolist() == ["telegram"]
    assert frame["created_at"].tolist() == [pd.Timestamp("2026-01-02 03:04:05")]
    assert frame["updated_at"].isna().tolist() == [True]
    assert _dtypes(frame) == {c.name: c.dtype for c in schema.SESSIONS}


def test_frame_rejects_missing_and_undeclared_columns() -> None:
    with pytest.raises(ValueError, match=r"missing: \['reason'\], not declared: \['extra'\]"):
        schema.frame(schema.PROBLEMS, {"path": ["a"], "line_no": [1], "extra": [2]})


def test_status_table() -> None:
    assert schema.STATUS_NAMES == (
        "in_window",
        "trimmed_count",
        "trimmed_tokens",
        "consolidated",
        "command",
        "skipped",
        "file_cap",
        "later",
    )
    assert [s.label for s in schema.STATUSES] == [
        "in window",
        "trimmed: count",
        "trimmed: tokens",
        "consolidated",
        "command",
        "skipped",
        "file cap",
        "after turn",
    ]
    assert len({s.color for s in schema.STATUSES}) == len(schema.STATUSES)
    assert all(len(s.color) == 7 and s.color.startswith("#") for s in schema.STATUSES)
    status = {c.name: c.doc for c in schema.STATES}["status"]
    assert status == "one of " + ", ".join(schema.STATUS_NAMES)


def test_describe() -> None:
    table = schema.describe(schema.STATUSES)
    assert list(table.columns) == ["name", "label", "color", "doc"]
    assert table.iloc[-1].tolist() == [
        "later",
        "after turn",
        "#c7c7c7",
        "stored at or after the turn",
    ]
    columns = schema.describe(schema.PROBLEMS)
    assert columns.to_dict("list") == {
        "name": ["path", "line_no", "reason"],
        "dtype": ["string", "Int64", "string"],
        "doc": [c.doc for c in schema.PROBLEMS],
    }


def test_string_columns_are_arrow_backed_unless_a_value_is_no_valid_unicode() -> None:
    plain = schema.string_array(["a", None, 3])
    assert plain.dtype == pd.StringDtype("pyarrow")
    assert plain.tolist() == ["a", pd.NA, pd.NA]
    odd = schema.string_array(["a", "b\udc80", None])
    assert odd.dtype == pd.StringDtype("python")
    assert odd.tolist() == ["a", "b\udc80", pd.NA]


def test_the_request_settings_are_request_columns_in_their_order() -> None:
    names = [c.name for c in schema.REQUESTS]
    assert [n for n in names if n in schema.REQUEST_SETTINGS] == list(schema.REQUEST_SETTINGS)
    assert len(schema.REQUEST_SETTINGS) == 8


def test_a_reported_frames_problems_stay_with_it_alone() -> None:
    rows = pd.DataFrame({"a": [1, 2, 3]})
    problems = frame(PROBLEMS, {"path": ["x"], "line_no": [1], "reason": ["bad"]})
    reported = Reported.of(rows, problems, {"calls": 3})
    assert reported.problems["reason"].tolist() == ["bad"]
    assert reported.summary == {"calls": 3}
    assert reported.attrs == {}
    derived = reported[reported["a"] > 1]
    assert type(derived) is pd.DataFrame and not hasattr(derived, "problems")
    assert type(reported.copy()) is pd.DataFrame
    pd.testing.assert_frame_equal(pd.DataFrame(reported), rows)
    assert Reported.of(rows, empty_frame(PROBLEMS)).summary == {}
