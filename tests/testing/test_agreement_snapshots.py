"""Agreement snapshots: a result within the tolerance matches, one beyond it fails naming each
setting and its rates, settings missing or new fail, SESSIONKIT_UPDATE_SNAPSHOTS rewrites,
and a damaged file says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.experiment_results import results

import sessionkit as sk
from sessionkit.testing import (
    SnapshotMismatch,
    agreement_data,
    assert_agreement_snapshot,
)


def _run(agreeing: dict[int, int], out_of: int = 10) -> object:
    """Results at each max_messages: ``agreeing[m]`` of ``out_of`` answers take the session's
    action."""
    return results(
        *(
            {"max_messages": m, "call": i, "same_action": i < n}
            for m, n in agreeing.items()
            for i in range(out_of)
        )
    )


BEFORE = _run({20: 6, 120: 9})


def test_the_pinned_data_per_setting(tmp_path: Path) -> None:
    data = agreement_data(BEFORE)
    assert [(r["label"], r["compared"], r["agreement_rate"]) for r in data] == [
        ("max_messages 20", 10, 0.6),
        ("max_messages 120", 10, 0.9),
    ]
    assert data[0]["setting"] == {
        "policy": "nanobot-0.2.2",
        "max_messages": 20,
        "max_tokens": 0,
        "include_timestamps": True,
        "include_runtime_context": True,
        "extend_to_user": False,
        "last_consolidated": "stored",
        "context_window": None,
        "max_output": None,
        "model": "gpt-4o-mini",
        "edit": None,
    }


def test_within_the_tolerance_matches_beyond_it_fails_naming_the_setting(tmp_path: Path) -> None:
    path = tmp_path / "agreement.json"
    assert assert_agreement_snapshot(BEFORE, path, update=True).status == "written"
    assert assert_agreement_snapshot(BEFORE, path).status == "matches"
    moved = _run({20: 5, 120: 9})  # a memory policy that makes one setting answer differently
    assert assert_agreement_snapshot(moved, path, tolerance=0.1).status == "matches"
    with pytest.raises(SnapshotMismatch) as caught:
        assert_agreement_snapshot(moved, path, tolerance=0.05)
    assert str(caught.value) == (
        f"agreement differs from snapshot {path.as_posix()} beyond tolerance=0.05 (snapshot -> "
        "result):\n"
        "  max_messages 20: agreement 60.0% of 10 -> 50.0% of 10 (-10.0 points)\n"
        "Accept the new result with update=True or SESSIONKIT_UPDATE_SNAPSHOTS=1."
    )
    with pytest.raises(SnapshotMismatch, match=r"max_messages 120: agreement 90.0% of 10 -> "):
        assert_agreement_snapshot(_run({20: 6, 120: 10}), path, tolerance=0.05)


def test_settings_missing_or_new_fail(tmp_path: Path) -> None:
    path = tmp_path / "agreement.json"
    assert_agreement_snapshot(BEFORE, path, update=True)
    with pytest.raises(SnapshotMismatch) as caught:
        assert_agreement_snapshot(_run({20: 6, 40: 7}), path, tolerance=1.0)
    assert str(caught.value).splitlines()[1:3] == [
        "  1 setting(s) missing from the result: max_messages 120",
        "  1 setting(s) new: max_messages 40",
    ]


def test_the_update_variable_rewrites_and_no_snapshot_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "agreement.json"
    with pytest.raises(SnapshotMismatch, match="no snapshot at .*agreement.json; record it"):
        assert_agreement_snapshot(BEFORE, path)
    assert not path.exists()
    monkeypatch.setenv(sk.testing.UPDATE_ENV, "1")
    assert assert_agreement_snapshot(BEFORE, path).status == "written"
    after = _run({20: 2, 120: 9})
    assert assert_agreement_snapshot(after, path).status == "updated"
    monkeypatch.delenv(sk.testing.UPDATE_ENV)
    assert assert_agreement_snapshot(after, path).status == "matches"
    assert [p.name for p in tmp_path.iterdir()] == ["agreement.json"]
    assert path.read_text(encoding="utf-8").splitlines()[:3] == [
        "{",
        '  "format": "sessionkit agreement snapshot 1",',
        '  "rows": [',
    ]


def test_a_damaged_snapshot_or_wrong_arguments_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "agreement.json"
    path.write_text('{"format": "sessionkit agreement snapshot 1", "rows": [{"label": 1}]}')
    with pytest.raises(SnapshotMismatch, match="row 0 is not a setting, label, compared"):
        assert_agreement_snapshot(BEFORE, path)
    with pytest.raises(ValueError, match="end in .json"):
        assert_agreement_snapshot(BEFORE, tmp_path / "agreement.csv")
    with pytest.raises(ValueError, match="tolerance must be a share of 0 or more, not -0.1"):
        assert_agreement_snapshot(BEFORE, path, tolerance=-0.1)
    with pytest.raises(SnapshotMismatch, match="no snapshot"):
        assert_agreement_snapshot(BEFORE, tmp_path / "missing" / "agreement.json")
    assert not (tmp_path / "missing").exists()
