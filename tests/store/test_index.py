"""The persistent index: warm opens equal cold ones, only changed files are read again, and a
damaged or foreign index is rebuilt, never trusted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import warnings
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import sessionkit
import sessionkit.nanobot.jsontext
import sessionkit.simulate.replay
import sessionkit.store.index
import sessionkit.store.integrity
import sessionkit.store.runs
from sessionkit import load
from sessionkit.store import memo
from sessionkit.store.index import IndexedSession, SessionChangedError
from sessionkit.tuning import TUNING

META = {"_type": "metadata", "key": "telegram:1", "last_consolidated": 1}
MESSAGES = [
    {"role": "user", "content": "plan a trip", "timestamp": "2026-03-01T09:00:00"},
    {"role": "assistant", "content": "Where to?", "timestamp": "2026-03-01T09:00:05"},
    {"role": "user", "content": "Lisbon \udc80", "timestamp": "2026-03-01T09:01:00"},
]


def _write(path: Path, key: str, messages: list[dict]) -> None:
    lines = [META | {"key": key}, *messages]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    folder = tmp_path / "sessions"
    folder.mkdir()
    for n in range(3):
        _write(folder / f"telegram_{n}.jsonl", f"telegram:{n}", MESSAGES[: n + 1])
    return folder


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An index folder of its own; files count as settled as soon as they are written."""
    folder = tmp_path / "index"
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(folder))
    monkeypatch.setattr(TUNING, "racy_ns", 0)
    return folder


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files loading reads (parses)."""
    seen: list[str] = []
    real = sessionkit.store.runs.read_session_file

    def counted(path: Path):  # type: ignore[no-untyped-def]
        seen.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(sessionkit.store.runs, "read_session_file", counted)
    monkeypatch.setattr(sessionkit.store.index, "read_session_file", counted)
    return seen


def _frames(corpus: sessionkit.Corpus) -> tuple[pd.DataFrame, ...]:
    return corpus.messages, corpus.sessions, corpus.problems


def _assert_same(left: sessionkit.Corpus, right: sessionkit.Corpus) -> None:
    for a, b in zip(_frames(left), _frames(right), strict=True):
        pd.testing.assert_frame_equal(a, b)


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def test_warm_open_reads_no_file_and_equals_a_cold_one(store: Path, cache: Path, reads) -> None:
    before = _tree(store.parent)
    cold = load(store)
    assert sorted(reads) == ["telegram_0.jsonl", "telegram_1.jsonl", "telegram_2.jsonl"]
    reads.clear()
    warm = load(store)
    assert reads == []
    _assert_same(warm, cold)
    _assert_same(warm, load(store, cache=False))
    reads.clear()
    assert all(type(s) is IndexedSession for s in warm)
    assert warm.messages["text"].tolist() == [
        "plan a trip",
        "plan a trip",
        "Where to?",
        "plan a trip",
        "Where to?",
        "Lisbon \udc80",
    ]
    assert reads == []
    assert warm["telegram:2"].messages == MESSAGES
    assert reads == ["telegram_2.jsonl"]
    assert warm["telegram:2"] == load(store, cache=False)["telegram:2"]
    assert {k: v for k, v in _tree(store.parent).items() if "index" not in k} == before


ODD_METADATA = (
    b'{"title": "odd", "n": -1' + b"0" * 5000 + b'7, "m": 18446744073709551617, "x": NaN, '
    b'"y": -Infinity, "z": -0.0, "f": 1e-320, "s": "\\ud800 \\u00e9", "e": {}, '
    b'"deep": ' + b"[" * 880 + b"{}" + b"]" * 880 + b"}"
)


def _at_depth(depth: int, call):  # type: ignore[no-untyped-def]
    return call() if depth <= 0 else _at_depth(depth - 1, call)


@pytest.mark.parametrize("depth", [0, 850])
def test_metadata_past_jsons_limits_is_indexed_exactly(
    store: Path, cache: Path, reads, depth: int
) -> None:
    head = b'{"_type": "metadata", "key": "odd:1", "last_consolidated": 0, "metadata": '
    (store / "odd_1.jsonl").write_bytes(head + ODD_METADATA + b"}\n" + b'{"role": "user"}\n')
    exact = json.loads(ODD_METADATA, parse_int=lambda digits: int(Decimal(digits)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cold = _at_depth(depth, lambda: load(store))
        reads.clear()
        warm = _at_depth(depth, lambda: load(store))
    assert reads == []
    assert all(type(s) is IndexedSession for s in warm)
    _assert_same(warm, cold)
    for metadata in (warm["odd:1"].metadata, cold["odd:1"].metadata):
        assert list(metadata) == list(exact)
        assert [k for k, v in metadata.items() if v != exact[k]] == ["x"]  # NaN != NaN
        assert math.isnan(metadata["x"]) and math.copysign(1.0, metadata["z"]) == -1.0
        assert metadata["n"] == -(10**5001) - 7 and type(metadata["m"]) is int


def test_the_index_lives_in_the_cache_folder_and_cache_false_writes_nothing(
    store: Path, cache: Path
) -> None:
    load(store, cache=False)
    assert not cache.exists()
    load(store)
    assert (
        sorted(p.parent.name for p in cache.rglob("*.arrow") if "files" in p.parts) == ["files"] * 3
    )
    elsewhere = cache.parent / "elsewhere"
    load(store, cache=elsewhere)
    assert len(list(elsewhere.rglob("*.arrow"))) == 3


@pytest.mark.parametrize("change", ["grown", "replaced", "edited in place", "new", "deleted"])
def test_only_a_changed_file_is_read_again(store: Path, cache: Path, reads, change: str) -> None:
    load(store)
    reads.clear()
    target = store / "telegram_1.jsonl"
    if change == "grown":
        with target.open("a") as f:
            f.write(json.dumps({"role": "user", "content": "more"}) + "\n")
    elif change == "replaced":
        _write(store / "new.tmp", "telegram:1", MESSAGES[:1] + [{"role": "user", "content": "x"}])
        os.replace(store / "new.tmp", target)
    elif change == "edited in place":
        stamp = target.stat()
        time.sleep(0.02)
        target.write_text(target.read_text().replace("Where to?", "Where tu?"))
        os.utime(target, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        assert (target.stat().st_size, target.stat().st_mtime_ns) == (
            stamp.st_size,
            stamp.st_mtime_ns,
        )
    elif change == "new":
        target = store / "telegram_9.jsonl"
        _write(target, "telegram:9", MESSAGES)
    else:
        target.unlink()
    corpus = load(store)
    assert reads == ([] if change == "deleted" else [target.name])
    _assert_same(corpus, load(store, cache=False))
    if change == "edited in place":
        assert "Where tu?" in corpus.messages["text"].tolist()


def test_a_damaged_or_foreign_index_is_rebuilt_never_trusted(
    store: Path, cache: Path, reads, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = load(store)
    entries = sorted(cache.rglob("*.arrow"))
    entries[0].write_bytes(entries[0].read_bytes()[:100])
    entries[1].write_bytes(b"not arrow at all")
    reads.clear()
    with pytest.warns(UserWarning, match="damaged cache file") as warned:
        _assert_same(load(store), expected)
    assert len(warned) == 2
    assert len(reads) == 2
    monkeypatch.setattr(sessionkit.store.index, "FORMAT", sessionkit.store.index.FORMAT + 1)
    reads.clear()
    _assert_same(load(store), expected)
    assert len(reads) == 3


def test_a_file_changed_just_before_loading_is_not_indexed(store: Path, tmp_path: Path) -> None:
    folder = tmp_path / "fresh-index"
    load(store, cache=folder)
    assert list(folder.rglob("*.arrow")) == []


@pytest.mark.parametrize("inside", ["sessions", "workspace"])
def test_an_index_inside_what_is_loaded_is_not_used(store: Path, inside: str) -> None:
    folder = store if inside == "sessions" else store.parent
    with pytest.warns(UserWarning, match="lies inside a workspace or sessions folder"):
        corpus = load(folder, cache=folder / ".index")
    assert len(corpus) == 3
    assert not (folder / ".index").exists()


@pytest.mark.parametrize("named", ["~/telegram_1.jsonl", "~/*.jsonl", "~/ws", "~/ws/sessions"])
def test_the_default_index_under_home_serves_stores_under_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: str
) -> None:
    """``~/.cache/sessionkit`` lies under ``$HOME``, not inside a file's folder that is not
    loaded as a folder (``~/chat.jsonl``), nor inside a workspace under ``~``."""
    home = tmp_path / "home"
    (home / "ws" / "sessions").mkdir(parents=True)
    _write(home / "telegram_1.jsonl", "telegram:1", MESSAGES)
    _write(home / "ws" / "sessions" / "telegram_2.jsonl", "telegram:2", MESSAGES)
    monkeypatch.setenv("HOME", str(home))
    for name in ("SESSIONKIT_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(TUNING, "racy_ns", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        corpus = load(named, tokens=None)
    assert len(corpus) == 1
    assert list((home / ".cache" / "sessionkit").rglob("*.arrow"))


def test_messages_of_a_file_changed_since_loading_raise(store: Path, cache: Path) -> None:
    load(store)
    corpus = load(store)
    with (store / "telegram_0.jsonl").open("a") as f:
        f.write(json.dumps({"role": "user", "content": "later"}) + "\n")
    with pytest.raises(SessionChangedError, match="changed since session 'telegram:0' was loaded"):
        _ = corpus["telegram:0"].messages
    assert len(corpus["telegram:1"].messages) == 2


def test_a_big_store_is_kept_as_one_pack_and_changes_beside_it(
    tmp_path: Path, cache: Path, reads
) -> None:
    folder = tmp_path / "big"
    folder.mkdir()
    for n in range(TUNING.pack_min):
        _write(folder / f"s_{n}.jsonl", f"s:{n}", MESSAGES[: 1 + n % 3])
    load(folder)
    assert [p.parent.name for p in cache.glob("index-*/*/*.arrow")] == ["stores"]
    with (folder / "s_5.jsonl").open("a") as f:
        f.write(json.dumps({"role": "assistant", "content": "new"}) + "\n")
    reads.clear()
    corpus = load(folder)
    assert reads == ["s_5.jsonl"]
    assert sorted(p.parent.name for p in cache.glob("index-*/*/*.arrow")) == ["files", "stores"]
    reads.clear()
    _assert_same(load(folder), corpus)
    assert reads == []
    _assert_same(corpus, load(folder, cache=False))


def _small_files(folder: Path) -> Path:
    """A store of :data:`PACK_MIN` files of 1, 2, 3, 1, 2, 3, ... messages, named in order."""
    folder.mkdir()
    for n in range(TUNING.pack_min):
        _write(folder / f"s_{n:02}.jsonl", f"s:{n}", MESSAGES[: 1 + n % 3])
    return folder


def _batches(cache: Path) -> list[int]:
    """The rows of each record batch of the store's pack."""
    (pack,) = cache.glob("index-*/stores/*.arrow")
    body = sessionkit.store.integrity.open_sealed(pack)[0]
    reader = pa.ipc.open_file(body)
    return [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]


def test_small_files_share_record_batches_and_read_back_exactly(
    tmp_path: Path, cache: Path, reads, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows of files smaller than ``BATCH_ROWS`` share batches: a load's entries, adjacent
    spans of one table, are written as one; rows kept in packs of their own are joined
    (1 + 2 + 3 rows reach 4).  A pack's batches grow with its rows, not with its files;
    each entry reads back."""
    monkeypatch.setattr(sessionkit.store.index, "BATCH_ROWS", 4)
    folder = _small_files(tmp_path / "small")
    cold = load(folder)
    assert _batches(cache) == [63, 0]  # the last, empty, describes the items
    who = sessionkit.store.index.Identity(1, 2, 3, 4, 5)
    own = [pa.table({"n": range(1 + n % 3)}) for n in range(32)]
    items = [sessionkit.store.index.Item(f"f{n}", who, {}, t) for n, t in enumerate(own)]
    sessionkit.store.index._write_pack(tmp_path / "own.arrow", items, own[0].schema)
    reader = pa.ipc.open_file(sessionkit.store.integrity.open_sealed(tmp_path / "own.arrow")[0])
    batches = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
    assert batches == [6] * 10 + [3, 0]
    reads.clear()
    warm = load(folder)
    assert reads == []
    _assert_same(warm, cold)
    _assert_same(warm, load(folder, cache=False))


def test_an_entry_whose_rows_span_batches_reads_back_exactly(tmp_path: Path) -> None:
    """A pack item whose rows lie in several batches (a table written as it is, in its
    chunks) and items sharing one batch each read back as their own rows."""
    pack = tmp_path / "pack.arrow"
    schema = pa.schema([("n", pa.int64())])
    tables = [
        pa.concat_tables([pa.table({"n": range(k, k + 3)}) for k in range(0, 9000, 3)]),
        pa.table({"n": [-1]}),
        pa.table({"n": [-2, -3]}),
    ]
    who = sessionkit.store.index.Identity(1, 2, 3, 4, 5)
    items = [sessionkit.store.index.Item(f"f{n}", who, {"n": n}, t) for n, t in enumerate(tables)]
    sessionkit.store.index._write_pack(pack, items, schema)
    table, found = sessionkit.store.index._read_pack(pack, schema)
    assert table.num_rows == 9003
    assert [found[f"f{n}"].table.column("n").to_pylist() for n in range(3)] == [
        list(range(9000)),
        [-1],
        [-2, -3],
    ]
    assert [found[f"f{n}"].start for n in range(3)] == [0, 9000, 9001]
    assert [found[f"f{n}"].extra for n in range(3)] == [{"n": 0}, {"n": 1}, {"n": 2}]


def test_adjacent_spans_of_one_table_are_written_as_one_slice(tmp_path: Path) -> None:
    """Items that are adjacent spans of one table (a load's entries of one run) are sliced
    once; another table, a gap or an item's own rows start a new slice; each reads back."""
    whole, other = pa.table({"n": range(10)}), pa.table({"n": range(100, 103)})
    who = sessionkit.store.index.Identity(1, 2, 3, 4, 5)
    Item = sessionkit.store.index.Item
    items = [
        Item("a", who, {}, None, 0, 2, whole),
        Item("b", who, {}, None, 2, 3, whole),
        Item("c", who, {}, None, 6, 1, whole),  # a gap: row 5 is no item's
        Item("d", who, {}, None, 0, 3, other),
        Item("e", who, {}, pa.table({"n": [-1]})),
        Item("f", who, {}, None, 7, 3, whole),
    ]
    spans = list(sessionkit.store.index._spans(items))
    assert [t.column("n").to_pylist() for t in spans] == [
        [0, 1, 2, 3, 4],
        [6],
        [100, 101, 102],
        [-1],
        [7, 8, 9],
    ]
    pack = tmp_path / "pack.arrow"
    sessionkit.store.index._write_pack(pack, items, whole.schema)
    _, found = sessionkit.store.index._read_pack(pack, whole.schema)
    assert [found[i.path].table.column("n").to_pylist() for i in items] == [
        i.table.column("n").to_pylist() for i in items
    ]


@pytest.mark.parametrize(
    "metadata",
    [
        {"x": math.nan},
        {"deep": [{"y": [1.5, -math.inf]}]},
        {"big": 2**70},
        {"odd": "\ud800"},
        {"plain": [1.5, -0.0, 1e300, None, True, "é"]},
    ],
    ids=["nan", "inf", "big-int", "lone-surrogate", "plain"],
)
def test_a_packs_description_reads_back_every_value_exactly(metadata: dict) -> None:
    """orjson writes the description only where it is exact: NaN and infinity (which it
    would write as null), integers past 64 bits and lone surrogates (which it refuses) go
    through ``json``; in the metadata or in the records, they read back as they were."""
    who = sessionkit.store.index.Identity(1, 2, 3, 4, 5)
    extras = [{"metadata": metadata, "records": []}, {"metadata": {}, "records": [metadata]}]
    items = [sessionkit.store.index.Item(f"f{n}", who, e) for n, e in enumerate(extras)]
    text = sessionkit.store.index._description(items)
    found = sessionkit.nanobot.jsontext.loads_exact(text.encode())
    assert repr(found["extras"]) == repr(extras)
    assert [type(v) for v in found["extras"][0]["metadata"].values()] == [
        type(v) for v in metadata.values()
    ]


def test_a_store_indexed_without_tokens_is_packed_again_with_them(
    tmp_path: Path, cache: Path, reads
) -> None:
    """Entries kept without exact counts are read again when counts are asked for, and
    the store's pack is rewritten whole (not one small pack per file)."""
    folder = _small_files(tmp_path / "small")
    load(folder, tokens=None)
    reads.clear()
    counted = load(folder)
    assert len(reads) == TUNING.pack_min
    assert [p.parent.name for p in cache.glob("index-*/*/*.arrow")] == ["stores"]
    reads.clear()
    _assert_same(load(folder), counted)
    assert reads == []


def test_files_without_a_pack_of_their_own_cost_no_attempt_to_open_one(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    real = sessionkit.store.index._read_pack_checked

    def counted(path: Path, schema: pa.Schema):  # type: ignore[no-untyped-def]
        opened.append(path.parent.name)
        return real(path, schema)

    monkeypatch.setattr(sessionkit.store.index, "_read_pack_checked", counted)
    folder = _small_files(tmp_path / "small")
    load(folder)
    assert opened == ["stores"]
    with (folder / "s_05.jsonl").open("a") as f:
        f.write(json.dumps({"role": "assistant", "content": "new"}) + "\n")
    load(folder)
    opened.clear()
    load(folder)
    assert opened == ["stores", "files"]


def test_a_pack_rewritten_whole_drops_the_own_packs_it_replaces(
    tmp_path: Path, cache: Path, reads, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _small_files(tmp_path / "small")
    load(folder)
    for n in (5, 6):
        with (folder / f"s_{n:02}.jsonl").open("a") as f:
            f.write(json.dumps({"role": "assistant", "content": "new"}) + "\n")
    load(folder)
    assert len(list(cache.glob("index-*/files/*.arrow"))) == 2
    monkeypatch.setattr(TUNING, "pack_min", 3)  # a tenth of 32 files: 3
    with (folder / "s_07.jsonl").open("a") as f:
        f.write(json.dumps({"role": "assistant", "content": "new"}) + "\n")
    reads.clear()
    corpus = load(folder)
    assert reads == ["s_07.jsonl"]
    assert [p.parent.name for p in cache.glob("index-*/*/*.arrow")] == ["stores"]
    reads.clear()
    _assert_same(load(folder), corpus)
    assert reads == []
    _assert_same(corpus, load(folder, cache=False))


def _run(code: str, cache: Path) -> str:
    env = os.environ | {"SESSIONKIT_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


_NO_TOKENIZING = """
import sessionkit.store.counting as counting
def refuse(*args, **kwargs):
    raise AssertionError("tokenized in a warm process")
counting._uncached_counts = refuse
"""


def test_a_new_process_recounts_nothing(store: Path, tmp_path: Path) -> None:
    cache = tmp_path / "counts"
    messages = [{"role": "user", "content": f"message {n} " * n} for n in range(50)]
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(messages))
    count = (
        "import json, sessionkit as sk\n"
        f"print(sk.count_tokens(json.load(open({str(path)!r})), policy='nanobot-0.3.0'))"
    )
    cold = _run(count, cache)
    assert _run(_NO_TOKENIZING + count, cache) == cold


def test_windows_in_a_new_process_replay_nothing(store: Path, tmp_path: Path) -> None:
    cache = tmp_path / "replays"
    grid = (
        "import sessionkit as sk\n"
        "from sessionkit.tuning import TUNING\n"
        "TUNING.racy_ns = 0\n"
        "TUNING.persist_min_messages = 0\n"
        f"c = sk.load({str(store)!r})\n"
        "w = sk.windows(c, grid={'policy': ['nanobot-0.2', 'nanobot-0.3.0', 'nanobot-0.3.5'],"
        " 'max_tokens': [0, 20]})\n"
        "print(w.to_json())\n"
    )
    cold = _run(grid, cache)
    warm = _run(
        _NO_TOKENIZING
        + "import sessionkit.simulate.replay_compute as r\n"
        + "def refuse(*a, **k):\n    raise AssertionError('replayed in a warm process')\n"
        + "r.compute = refuse\n"
        + grid.replace(
            "print(w.to_json())", "assert not any(s._messages for s in c)\nprint(w.to_json())"
        ),
        cache,
    )
    assert warm == cold


def test_two_processes_open_one_store_at_once(store: Path, tmp_path: Path) -> None:
    cache = tmp_path / "shared"
    code = (
        "import sessionkit as sk\n"
        "from sessionkit.tuning import TUNING\n"
        "TUNING.racy_ns = 0\n"
        f"print(sk.load({str(store)!r}).messages['tokens'].sum())"
    )
    env = os.environ | {"SESSIONKIT_CACHE_DIR": str(cache)}
    runs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [run.communicate()[0].strip() for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert outputs[0] == outputs[1] == _run(code, cache)


def test_windows_kept_in_the_index_follow_a_changed_file(
    store: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TUNING, "persist_min_messages", 0)
    grid = {"policy": ["nanobot-0.2", "nanobot-0.3.5"], "max_tokens": [0, 20]}
    sessionkit.windows(load(store), grid=grid)
    memo.clear()
    kept = sorted(p.name for p in cache.glob("index-*/derived/*-*.arrow"))
    assert len(kept) == 2
    with (store / "telegram_1.jsonl").open("a") as f:
        f.write(json.dumps({"role": "user", "content": "and Porto"}) + "\n")
    warm = sessionkit.windows(load(store), grid=grid)
    memo.clear()
    pd.testing.assert_frame_equal(warm, sessionkit.windows(load(store, cache=False), grid=grid))
    assert (warm["session_key"] == "telegram:1").sum() == 2 * 4  # two turns now
    assert sorted(p.name for p in cache.glob("index-*/derived/*-*.arrow")) == kept  # replaced


def test_arrays_equal_across_derived_values_are_kept_once(tmp_path: Path) -> None:
    """Derived values of one store share the file of each array they hold alike; an array
    no kept value names any more is removed, and one that is gone makes its values unkept."""
    import numpy as np

    index = sessionkit.store.index.Index(tmp_path)
    shared = np.arange(10, dtype=np.int32)
    index.write_arrays("s-a", "v1", {"x": shared, "y": np.array([1.5]), "z": shared})
    index.write_arrays("s-b", "v1", {"x": shared, "y": np.array([2.5])})
    index.write_arrays("t-a", "v1", {"x": shared})
    arrays = sorted(p.name.split("=")[0] for p in tmp_path.glob("index-*/derived/*=*.arrow"))
    assert arrays == ["s", "s", "s", "t"]  # x, each y; x again for the other store
    a, b = index.read_arrays("s-a", "v1"), index.read_arrays("s-b", "v1")
    assert a is not None and b is not None
    assert {k: v.tolist() for k, v in a.items()} == {
        "x": list(range(10)),
        "y": [1.5],
        "z": list(range(10)),
    }
    assert {k: v.tolist() for k, v in b.items()} == {"x": list(range(10)), "y": [2.5]}
    assert a["x"].dtype == np.int32 and not a["x"].flags.writeable
    assert index.read_arrays("s-a", "v2") is None
    index.write_arrays("s-b", "v2", {"x": np.zeros(3, dtype=bool)})  # replaces b's v1
    assert len(list(tmp_path.glob("index-*/derived/s=*.arrow"))) == 3  # 2.5 removed
    assert index.read_arrays("s-b", "v1") is None
    again = index.read_arrays("s-a", "v1")
    assert again is not None and again["y"].tolist() == [1.5]
    gone = next(tmp_path.glob("index-*/derived/t=*.arrow"))
    gone.unlink()
    assert index.read_arrays("t-a", "v1") is None


def test_derived_arrays_kept_before_they_were_shared_are_derived_again_silently(
    tmp_path: Path,
) -> None:
    import numpy as np

    from sessionkit.store.cachedir import write_ipc

    index = sessionkit.store.index.Index(tmp_path)
    index.write_arrays("s-a", "v1", {"x": np.arange(3)})
    target = next(tmp_path.glob("index-*/derived/s-*.arrow"))
    described = {"format": sessionkit.store.index.FORMAT, "name": "s-a", "stamp": "v1"}
    described |= {"arrays": [["x", "<i8"]]}  # the layout before: the bytes in the file
    table = pa.table({"data": pa.array([np.arange(3).tobytes()], pa.large_binary())})
    write_ipc(target, table.schema.with_metadata({"sessionkit": json.dumps(described)}), [table])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert index.read_arrays("s-a", "v1") is None
    index.write_arrays("s-a", "v1", {"x": np.arange(3)})
    again = index.read_arrays("s-a", "v1")
    assert again is not None and again["x"].tolist() == [0, 1, 2]


def test_an_index_that_cannot_be_written_costs_speed_only(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TUNING, "racy_ns", 0)
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the index folder would be")
    with pytest.warns(UserWarning, match="could not write the index"):
        corpus = load(store, cache=blocked)
    _assert_same(corpus, load(store, cache=False))
