"""sessionkit.dask on a real 2-process LocalCluster, equal to the pandas results of sk.load."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import dask.dataframe as dd
import pandas as pd
import pytest
from distributed import Client, LocalCluster
from support.releases import release  # noqa: E402

import sessionkit as sk
from sessionkit import dask as skd
from sessionkit import synthetic
from sessionkit.nanobot.reader import find_session_files
from sessionkit.store.cachedir import default_cache_dir
from sessionkit.tuning import TUNING

GRID = {"max_messages": [20, 120], "max_tokens": [0, 4000], "last_consolidated": ["recorded", 0]}


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    """Two worker processes of one thread each: every partition crosses a process boundary."""
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """21 generated sessions of a few to 904 messages in both namings, one with a damaged line, and
    a leftover temp file."""
    folder = tmp_path_factory.mktemp("store") / "sessions"
    synthetic.generate_corpus(folder, n_sessions=18, target_messages=3000, seed=13)
    consolidated = synthetic.generate_session(1, "slack:C9", 60, last_consolidated=40)
    synthetic.write_store(folder, [consolidated])
    synthetic.write_store(
        folder, [synthetic.generate_session(2, "webui:x1", 30)], naming="nanobot-0.3"
    )
    (damaged,) = synthetic.write_store(folder, [synthetic.generate_session(3, "telegram:9", 4)])
    with damaged.open("a", encoding="utf-8") as file:
        file.write("{not json\n")
    (folder / "telegram_9.jsonl.tmp").write_text("{}", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def generated(store: Path) -> sk.Corpus:
    """The generated store as pandas sees it."""
    return sk.load(store)


@pytest.fixture(scope="module", params=["generated", "bundled"])
def source(request: pytest.FixtureRequest, store: Path, data_dir: Path) -> Path:
    return store if request.param == "generated" else data_dir / "sessions"


@pytest.fixture(scope="module")
def expected(source: Path, store: Path, generated: sk.Corpus) -> sk.Corpus:
    """``sk.load(source)``: the pandas results every Dask one must equal."""
    return generated if source == store else sk.load(source)


def _canonical(frame: pd.DataFrame, *, sort: bool = False) -> pd.DataFrame:
    """A fresh index and each categorical's categories sorted (partitions' union orders them by
    first appearance); rows sorted by every column when ``sort``."""
    out = frame.reset_index(drop=True)
    for name, dtype in out.dtypes.items():
        if isinstance(dtype, pd.CategoricalDtype):
            out[name] = out[name].cat.set_categories(sorted(dtype.categories))
    return out.sort_values(list(out.columns), ignore_index=True) if sort else out


def test_balanced_groups_are_contiguous_and_even() -> None:
    assert skd._balanced([10, 10, 10, 10], 2) == [slice(0, 2), slice(2, 4)]
    assert skd._balanced([100, 1, 1, 1], 3) == [slice(0, 1), slice(1, 4)]
    assert skd._balanced([1, 1, 1, 1, 1, 1, 100], 3) == [slice(0, 6), slice(6, 7)]
    assert skd._balanced([0, 0, 0], 3) == [slice(0, 3)]
    assert skd._balanced([5], 4) == [slice(0, 1)]


def test_partition_files_keeps_the_listing_order(store: Path) -> None:
    groups = skd.partition_files(store, npartitions=4)
    assert [f for group in groups for f in group] == find_session_files(store)
    assert len(groups) == 4
    assert len(skd.partition_files(store)) == 1  # the store is far below PARTITION_BYTES


def test_messages_equal_pandas(client: Client, source: Path, expected: sk.Corpus) -> None:
    frame = skd.read_messages(source, npartitions=4)
    assert frame.npartitions == 4
    got = frame.compute()
    assert len(got) == len(expected.messages)
    pd.testing.assert_frame_equal(_canonical(got), _canonical(expected.messages))
    # session_key and role keep pandas' category order: first appearance, file by file
    assert list(got.session_key.cat.categories) == list(
        expected.messages.session_key.cat.categories
    )
    assert list(got.role.cat.categories) == list(expected.messages.role.cat.categories)


def test_sessions_equal_pandas(client: Client, source: Path, expected: sk.Corpus) -> None:
    got = skd.read_sessions(source, npartitions=3).compute()
    pd.testing.assert_frame_equal(_canonical(got), _canonical(expected.sessions))


def test_problems_equal_pandas(client: Client, store: Path, generated: sk.Corpus) -> None:
    got = skd.read_problems(store, npartitions=3).compute()
    want = generated.problems
    assert len(want) == 2  # the damaged line and the temp file
    pd.testing.assert_frame_equal(_canonical(got, sort=True), _canonical(want, sort=True))


def test_windows_equal_pandas(client: Client, source: Path, expected: sk.Corpus) -> None:
    got = skd.windows(source, npartitions=3, grid=GRID).compute()
    want = sk.windows(expected, grid=GRID)
    assert len(got) == len(want)
    pd.testing.assert_frame_equal(_canonical(got, sort=True), _canonical(want, sort=True))


def test_windows_of_a_corpus_in_memory(client: Client, generated: sk.Corpus) -> None:
    """A Corpus is shipped to the workers in groups of sessions instead of files."""
    got = skd.windows(generated, npartitions=2, grid=GRID).compute()
    want = sk.windows(generated, grid=GRID)
    pd.testing.assert_frame_equal(_canonical(got, sort=True), _canonical(want, sort=True))


@pytest.mark.parametrize("replay", ["final", "growth"])
def test_file_cap_equal_pandas(
    client: Client, source: Path, expected: sk.Corpus, replay: str
) -> None:
    got = skd.file_cap(source, npartitions=3, grid={"file_cap": [50, 400]}, replay=replay).compute()
    want = sk.file_cap(expected, grid={"file_cap": [50, 400]}, replay=replay)
    assert len(got) == len(want) > 0
    pd.testing.assert_frame_equal(_canonical(got, sort=True), _canonical(want, sort=True))


def test_a_key_in_two_partitions_is_read_twice(client: Client, tmp_path: Path) -> None:
    """The documented difference: sk.load keeps the first file of a duplicated key."""
    record, messages = synthetic.generate_session(4, "telegram:1", 3)
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text(synthetic.to_jsonl([record, *messages]), encoding="utf-8")
    assert sk.load(tmp_path).sessions["key"].tolist() == ["telegram:1"]
    got = skd.read_sessions(tmp_path, npartitions=2).compute()
    assert got["key"].tolist() == ["telegram:1", "telegram:1"]
    assert skd.read_sessions(tmp_path, npartitions=1).compute()["key"].tolist() == ["telegram:1"]


def _pool_from(messages: int, *, forget: str | None) -> bool:
    """On a worker: count_tokens forks a pool from ``messages`` uncached messages (and, with
    ``forget``, forgets every count by keeping them in that empty folder from now on);
    whether this process is a daemon, which may not fork."""
    import multiprocessing
    import os

    import sessionkit.store.counting
    from sessionkit.tuning import TUNING as tuning  # this worker's own

    tuning.parallel_count_messages = messages
    if forget:
        os.environ["SESSIONKIT_CACHE_DIR"] = forget
        sessionkit.store.counting.DEFAULT_CACHE.clear()
    return multiprocessing.current_process().daemon


def test_workers_fork_no_pool(
    client: Client, store: Path, generated: sk.Corpus, tmp_path: Path
) -> None:
    """Counting in a Dask worker stays in the worker, whatever the batch size."""

    assert all(client.run(_pool_from, 1, forget=str(tmp_path / "counts")).values())
    try:
        got = skd.read_messages(store, npartitions=2, cache=False).compute()
    finally:
        client.run(_pool_from, TUNING.parallel_count_messages, forget=None)
    assert got["tokens"].notna().all()
    pd.testing.assert_series_equal(
        got["tokens"].reset_index(drop=True), generated.messages["tokens"]
    )


def test_parquet_round_trip(
    client: Client, store: Path, generated: sk.Corpus, tmp_path: Path
) -> None:
    """Every dtype survives Parquet (categoricals, nullable integers, strings, datetimes)."""
    frame = skd.read_messages(store, npartitions=3)
    skd.to_parquet(frame, tmp_path / "messages")
    assert sorted(p.name for p in (tmp_path / "messages").iterdir()) == [
        "part.0.parquet",
        "part.1.parquet",
        "part.2.parquet",
    ]
    back = dd.read_parquet(tmp_path / "messages")
    assert back.npartitions == 3
    strings = {c: pd.StringDtype("pyarrow") for c in ("text", "tool_call_id", "name")}
    pd.testing.assert_frame_equal(back.compute().astype(strings), frame.compute())
    pd.testing.assert_frame_equal(
        _canonical(pd.read_parquet(tmp_path / "messages").astype(strings)),
        _canonical(generated.messages),
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """A workspace holding four bundled sessions of two channels (one kit per release): three
    of nanobot 0.2.2 (one of notifications only, no call) and one of 0.3.5."""
    folder = tmp_path_factory.mktemp("workspace")
    (folder / "sessions").mkdir()
    for name in ("telegram_12345", "telegram_777", "telegram_42", "d2VidWk6ZGVmNDU2"):
        shutil.copyfile(
            data_dir / "sessions" / f"{name}.jsonl", folder / "sessions" / f"{name}.jsonl"
        )
    return folder


def _kits_kept() -> list[Path]:
    """The kit files in this run's cache folder (the workers inherit the same folder)."""
    return sorted(default_cache_dir().glob("kits-*/*.json"))


@pytest.mark.conformance
def test_requests_equal_pandas(client: Client, workspace: Path) -> None:
    """Workers read the kits this process asked the releases for (none asked again, none
    made with other inputs) and give pandas' rows, system prompt and tools included."""
    release("0.3.5")  # where sessionkit finds it (the suite's releases folder), else skip
    grid = {"grid": {"max_messages": [20, 120]}, "block": 64}
    want = sk.requests(sk.load(workspace / "sessions"), **grid)
    kits = _kits_kept()
    got = skd.requests(workspace / "sessions", npartitions=3, **grid).compute()
    assert _kits_kept() == kits != []
    assert len(got) == len(want) > 0
    assert want["session_key"].nunique() == 3
    assert (want["system_tokens"] > 0).all() and (want["tools_tokens"] > 0).all()
    pd.testing.assert_frame_equal(_canonical(got, sort=True), _canonical(want, sort=True))


@pytest.mark.conformance
def test_requests_with_one_release_named(client: Client, workspace: Path) -> None:
    """``nanobot`` naming 0.3.5's interpreter: the 0.2.2 sessions get no kit on any worker
    (system prompt and tools 0, as sk.requests gives them), the 0.3.5 one gets its kit."""
    python = release("0.3.5").python
    with pytest.warns(UserWarning, match="has nanobot-ai 0.3.5, not nanobot-ai 0.2.2"):
        want = sk.requests(sk.load(workspace / "sessions"), nanobot=python)
    got = skd.requests(workspace / "sessions", npartitions=2, nanobot=python).compute()
    fixed = want.set_index("policy")[["system_tokens", "tools_tokens"]]
    assert (fixed.loc["nanobot-0.3.5"] > 0).all(axis=None)
    assert (fixed.loc["nanobot-0.2"] == 0).all(axis=None)
    pd.testing.assert_frame_equal(_canonical(got, sort=True), _canonical(want, sort=True))
