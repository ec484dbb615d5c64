"""Snapshot helpers (round trips, stable rendering, readable diffs, update switch) and the
window invariants (sound on the exact policy, each one caught when broken)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from matplotlib.figure import Figure
from strategies import sessions

from sessionkit import Session, load
from sessionkit.schema import VIOLATIONS
from sessionkit.testing import (
    UPDATE_ENV,
    InvariantViolation,
    SnapshotMismatch,
    assert_figure_snapshot,
    assert_frame_snapshot,
    assert_window_invariants,
    check_window_invariants,
    figure_data,
)
from sessionkit.windowing import windows


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


# --- snapshots ---------------------------------------------------------------------------


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


def test_figure_data_reads_lines_bars_steps_and_heatmaps() -> None:
    fig = Figure()
    left, right = fig.subplots(1, 2)
    left.plot([0, 1], [2.0, 3.0], label="coverage")
    left.bar([0, 1], [5, 7])
    left.stairs([1, 2], [0, 1, 3]).set_gid("role:user")
    left.set_title("sweep")
    fig.colorbar(right.imshow(np.array([[1.0, 2.0], [3.0, np.nan]])), ax=right)
    data = figure_data(fig)
    assert set(data["axes"]) == {0, 1}
    assert data.loc[data["artist"] == "title", "label"].tolist() == ["sweep"]
    assert "xtick" not in set(data["artist"])
    line = data[data["artist"] == "line"]
    assert line[["x", "y"]].to_numpy().tolist() == [[0, 2], [1, 3]]
    assert data.loc[data["artist"] == "rect", "height"].tolist() == [5, 7]
    step = data[data["artist"] == "step"]
    assert step["label"].unique().tolist() == ["role:user"]
    assert step[["x", "width", "height"]].to_numpy().tolist() == [[0, 1, 1], [1, 2, 2]]
    right.set_xticks([0, 1], ["none", "8,000"])
    ticks = figure_data(fig).query("artist == 'xtick'")
    assert ticks[["axes", "label", "x"]].values.tolist() == [[1, "none", 0], [1, "8,000", 1]]
    image = data[data["artist"] == "image"]
    assert (image["axes"] == 1).all()
    assert image["value"].tolist()[:3] == [1, 2, 3] and np.isnan(image["value"].iloc[3])


def test_figure_snapshot_pins_the_data_not_the_pixels(tmp_path: Path) -> None:
    def draw(y: float, colour: str) -> Figure:
        fig = Figure(figsize=(3, 2))
        fig.add_subplot().plot([0, 1], [1, y], color=colour)
        return fig

    path = tmp_path / "fig.csv"
    assert_figure_snapshot(draw(2, "red"), path, update=True)
    assert assert_figure_snapshot(draw(2, "blue").axes[0], path).status == "matches"
    with pytest.raises(SnapshotMismatch, match="row 1, y: 2 -> 3"):
        assert_figure_snapshot(draw(3, "red"), path)


# --- invariants --------------------------------------------------------------------------


def user(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assistant(text: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


def call(*ids: str) -> dict[str, Any]:
    return assistant("", tool_calls=[{"id": i, "type": "function"} for i in ids])


def tool(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "r"}


def claimed(at: int, start: int, stop: int, **setting: Any) -> pd.DataFrame:
    """A one-row windows frame claiming ``[start, stop)`` is the window of ``messages[:at]``."""
    row = {
        "session_key": "cli:x",
        "at": at,
        "turn": 0,
        "consolidated": 0,
        "start": start,
        "stop": stop,
        "max_messages": 120,
        "max_tokens": 0,
        "include_timestamps": False,
        "extend_to_user": False,
    }
    return pd.DataFrame([row | setting])


def broken(messages: list[dict[str, Any]], frame: pd.DataFrame) -> list[tuple[str, Any]]:
    found = check_window_invariants(frame, corpus=[Session("cli:x", messages)])
    return list(zip(found["invariant"], found["idx"], strict=True))


def starts(session: Session, **setting: Any) -> list[int]:
    frame = windows(session, include_timestamps=True, **setting)
    return frame["start"].tolist()


def test_bundled_store_windows_are_sound() -> None:
    corpus = load()
    found = check_window_invariants(corpus, max_messages=[40, 120], max_tokens=[0, 2000, 32000])
    assert found.empty
    assert found.dtypes.astype(str).tolist() == [c.dtype for c in VIOLATIONS]
    assert check_window_invariants(corpus["discord:987"], exact=True, max_tokens=[0, 500]).empty


def test_delivery_start_and_legal_tool_boundary_are_allowed() -> None:
    delivered = Session("cli:x", [user(), assistant(), assistant("news", _channel_delivery=True)])
    delivered.messages += [user("re"), user("next")]
    assert starts(delivered, max_messages=2)[-1] == 2
    assert check_window_invariants(delivered, max_messages=2).empty
    orphaned = Session("cli:x", [user(), call("a"), tool("a"), tool("zz"), assistant("after")])
    orphaned.messages += [user("next"), user("end")]
    assert starts(orphaned)[-1] == 4
    assert check_window_invariants(orphaned).empty
    assert check_window_invariants(orphaned, exact=True).empty


def test_budget_recovery_is_allowed_but_a_plain_overrun_is_not() -> None:
    recovering = Session("cli:x", [user("q " * 50), assistant("a " * 400), user("end")])
    frame = windows(recovering, max_tokens=50, include_timestamps=True)
    assert frame[["start", "stop", "recovered"]].values.tolist()[-1] == [0, 2, True]
    assert check_window_invariants(recovering, max_tokens=50).empty
    two_users = [user("q " * 400), assistant("a"), user("b"), assistant("c")]
    found = check_window_invariants(
        claimed(4, 0, 4, max_tokens=50), corpus=[Session("cli:x", two_users)]
    )
    assert found["invariant"].tolist() == ["token_budget"]
    assert found["detail"].str.contains("tokens > max_tokens=50").all()


def test_each_broken_rule_is_caught() -> None:
    messages = [user(), call("a"), tool("a"), assistant("x"), user("y"), assistant("z")]
    assert broken(messages, claimed(6, 0, 6)) == []
    assert broken(messages, claimed(6, 0, 5)) == [("tail", 0)]
    assert broken(messages, claimed(6, 0, 6, consolidated=1)) == [("tail", 0)]
    assert broken(messages, claimed(6, 0, 6, max_messages=2)) == [("max_messages", 0)]
    assert broken(messages, claimed(6, 3, 6)) == [("user_start", 3)]
    assert broken(messages, claimed(6, 2, 6)) == [("user_start", 2), ("orphan_tool_result", 2)]


def test_a_frame_needs_its_corpus_and_columns() -> None:
    with pytest.raises(TypeError, match="corpus="):
        check_window_invariants(claimed(1, 0, 1))
    with pytest.raises(ValueError, match=r"\['stop'\] are missing"):
        check_window_invariants(claimed(1, 0, 1).drop(columns="stop"), corpus=[])


def test_assert_form_summarises_the_violations() -> None:
    session = Session("cli:x", [user(), assistant(), user(), assistant(), user()])
    assert_window_invariants(session, max_messages=[1, 2], max_tokens=[0, 5])
    frame = pd.concat([claimed(5, 1, 5), claimed(5, 3, 5)], ignore_index=True)
    with pytest.raises(InvariantViolation, match=r"2 window invariant violations \(user_start: 2"):
        assert_window_invariants(frame, corpus=[session])


@given(
    sessions(),
    st.integers(-1, 12),
    st.sampled_from([0, 1, 8, 30, 200]),
    st.booleans(),
    st.booleans(),
)
def test_no_window_breaks_an_invariant(
    session: Session, max_messages: int, max_tokens: int, extend: bool, exact: bool
) -> None:
    found = check_window_invariants(
        session,
        exact=exact,
        max_messages=max_messages,
        max_tokens=max_tokens,
        extend_to_user=extend,
    )
    assert found.empty, found.to_string()
