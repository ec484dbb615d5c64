"""Replays kept in the index: each distinct column once per store, shared by the settings
that replay alike; an older layout is replayed again without a warning."""

from __future__ import annotations

import json
import warnings
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import sessionkit
from sessionkit.simulate.replay_compute import Replay
from sessionkit.store import memo
from sessionkit.store.cachedir import write_ipc
from sessionkit.store.index import FORMAT, Index, Item, file_identity
from sessionkit.store.integrity import read_sealed
from sessionkit.tuning import TUNING

COLUMNS = {
    "is_user": np.array([True, False, True]),
    "delivery": np.zeros(3, dtype=bool),
    "command": np.zeros(3, dtype=bool),
    "checkpoint": np.zeros(3, dtype=bool),
    "turn": np.array([True, False, True]),
    "declared": np.full(3, -2, dtype=np.int32),
    "kept": np.array([0, 1, 0], dtype=np.int32),
    "entry_declared": np.full(3, -2, dtype=np.int32),
    "tokens": np.array([5, 7, 9], dtype=np.int32),
}
"""Two replays end to end: a file's 2 messages (both replayed), another's 1."""


def _items(folder: Path) -> list[Item]:
    paths = [folder / "a.jsonl", folder / "b.jsonl"]
    for path in paths:
        path.write_text("{}\n")
    found = [file_identity(p) for p in paths]
    assert found[0] is not None and found[1] is not None
    return [
        Item(str(paths[0]), found[0], {"entries": 2}, None, 0, 2),
        Item(str(paths[1]), found[1], {"entries": 1}, None, 0, 1),
    ]


def _columns_files(root: Path) -> int:
    return len(list(root.glob("index-*/derived/s=*.arrow")))


def test_replays_of_two_settings_share_their_equal_columns(tmp_path: Path) -> None:
    index = Index(tmp_path / "cache")
    items = _items(tmp_path)
    index.write_replays("s", "plain", items, COLUMNS)
    assert _columns_files(tmp_path / "cache") == 7  # 9 columns: 3 alike, 2 and 2; 2 lists
    stamped = COLUMNS | {"tokens": np.array([6, 8, 10], dtype=np.int32)}
    index.write_replays("s", "stamped", items, stamped)
    assert _columns_files(tmp_path / "cache") == 8  # only the token counts differ
    columns, read = index.read_replays("s", "stamped")
    assert {k: v.tolist() for k, v in columns.items()} == {
        k: v.tolist() for k, v in stamped.items()
    }
    assert [(i.start, i.rows, i.extra) for i in read] == [
        (0, 2, {"entries": 2, "entry_start": 0}),
        (2, 1, {"entries": 1, "entry_start": 2}),
    ]
    assert not columns["tokens"].flags.writeable
    again = {"tokens": np.array([1], dtype=np.int32), "kept": np.array([0], dtype=np.int32)}
    index.write_replays("s", "stamped", items[1:], {k: v[2:] for k, v in stamped.items()} | again)
    columns, read = index.read_replays("s", "stamped")  # b's replaced, a's kept first
    assert [Path(i.path).name for i in read] == ["a.jsonl", "b.jsonl"]
    assert columns["tokens"].tolist() == [6, 8, 1]
    assert _columns_files(tmp_path / "cache") == 8  # the old tokens of stamped removed


def test_replays_of_files_changed_since_are_dropped_on_the_next_write(tmp_path: Path) -> None:
    index = Index(tmp_path / "cache")
    items = _items(tmp_path)
    index.write_replays("s", "plain", items[:1], {k: v[:2] for k, v in COLUMNS.items()})
    Path(items[0].path).write_text("{}\n{}\n")
    index.write_replays("s", "plain", items[1:], {k: v[2:] for k, v in COLUMNS.items()})
    columns, read = index.read_replays("s", "plain")
    assert [Path(i.path).name for i in read] == ["b.jsonl"]
    assert columns["tokens"].tolist() == [9]


def test_replays_whose_columns_disagree_with_their_files_are_removed(tmp_path: Path) -> None:
    index = Index(tmp_path / "cache")
    items = _items(tmp_path)
    index.write_replays("s", "plain", items, {k: v[:2] for k, v in COLUMNS.items()})
    (target,) = (tmp_path / "cache").glob("index-*/replays/*.arrow")
    table, _ = read_sealed(target)
    index.write_replays("s", "other", items, COLUMNS)  # 3 rows: its lists differ
    other = next(p for p in target.parent.glob("*.arrow") if p != target)
    described = json.loads(read_sealed(other)[0].schema.metadata[b"sessionkit"])
    listed = {row[0]: row for row in described["shared"]}
    mixed = json.loads(table.schema.metadata[b"sessionkit"])
    mixed["shared"] = [listed["items"] if row[0] == "items" else row for row in mixed["shared"]]
    write_ipc(target, table.schema.with_metadata({"sessionkit": json.dumps(mixed)}), [])
    with pytest.warns(UserWarning, match="another length"):
        assert index.read_replays("s", "plain") == ({}, [])
    assert not target.exists()


def test_replays_of_the_layout_before_are_replayed_again_silently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replays' file of the layout that held its columns (an Arrow pack without the
    names of shared columns) is not read: the windows are replayed again and kept anew."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    lines = [{"_type": "metadata", "key": "k:1"}, {"role": "user", "content": "hi"}]
    (folder / "k_1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(TUNING, "racy_ns", 0)
    first = sessionkit.windows(sessionkit.load(folder), at="end")
    (target,) = (tmp_path / "cache").glob("index-*/replays/*.arrow")
    old = pa.schema([("is_user", pa.bool_()), ("tokens", pa.int64())])
    described = pa.RecordBatch.from_pylist([], schema=old)
    meta = {b"sessionkit": json.dumps({"format": FORMAT, "paths": []})}
    write_ipc(target, old, [], last=(described, meta))
    memo.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = sessionkit.windows(sessionkit.load(folder), at="end")
    pd.testing.assert_frame_equal(again, first)
    table, _ = read_sealed(target)
    assert "shared" in json.loads(table.schema.metadata[b"sessionkit"])


def test_a_kept_replay_reads_back_as_computed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay read from the index equals the one computed, its token counts int64."""
    import sessionkit.simulate.replay as replay

    folder = tmp_path / "sessions"
    folder.mkdir()
    lines = [
        {"_type": "metadata", "key": "k:1"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello there"},
        {"role": "user", "content": "/new", "_command": True},
    ]
    (folder / "k_1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(TUNING, "racy_ns", 0)
    (computed,) = replay.replay_all(list(sessionkit.load(folder)), progress=False)
    memo.clear()
    (read,) = replay.replay_all(list(sessionkit.load(folder)), progress=False)
    assert read is not computed
    for field in fields(Replay):
        np.testing.assert_array_equal(getattr(read, field.name), getattr(computed, field.name))
    assert read.tokens.dtype == np.int64 and read.tokens.tolist() == [5, 6]
