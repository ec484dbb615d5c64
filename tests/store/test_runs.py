"""A cold load of a large store in runs: one run's parsed messages held at a time."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

import sessionkit as sk
import sessionkit.store.counting as counting_module
import sessionkit.store.loading as loading_module
import sessionkit.store.runs as runs_module
import sessionkit.store.streamed as streamed_module
from sessionkit.nanobot import reader as reader_module
from sessionkit.store.counting import CountingBatches, token_cache_in
from sessionkit.store.index import IndexedSession
from sessionkit.store.runs import cut_runs
from sessionkit.tuning import TUNING


def test_runs_cut_files_by_bytes_and_count_in_order() -> None:
    files = [(0, 40), (1, 30), (2, 100), (3, 10), (4, 10)]
    assert cut_runs(files, 64) == [[(0, 40)], [(1, 30)], [(2, 100)], [(3, 10), (4, 10)]]
    assert cut_runs([], 64) == [[]]
    assert cut_runs(files, 1_000) == [files]
    assert cut_runs(files, 1_000, 2) == [files[:2], files[2:4], files[4:]]


@pytest.mark.parametrize("tokens", ["tiktoken", None])
def test_a_load_in_runs_equals_one_in_a_single_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tokens: str | None
) -> None:
    """Runs of one file each, read, built and counted by forked workers: the frames and
    problems equal an uncached load's, indexed sessions hold no parsed messages (read again
    on first use, equal to the file's), and the next (warm) load equals it too."""
    folder = tmp_path / "sessions"
    shutil.copytree(sk.load().loaded_from[0] / "sessions", folder)
    shutil.copytree(sk.load().loaded_from[0] / "damaged", folder, dirs_exist_ok=True)
    monkeypatch.setattr(TUNING, "racy_ns", 0)  # index the files just copied
    monkeypatch.setattr(TUNING, "run_bytes", 1)
    cache = tmp_path / "cache"
    expected = sk.load(folder, cache=False, tokens=tokens, progress=False)
    apart: list[int] = []
    real = loading_module.built_apart

    def spied(runs, *args):  # type: ignore[no-untyped-def]
        apart.append(len(runs))
        return real(runs, *args)

    monkeypatch.setattr(loading_module, "built_apart", spied)
    ran = sk.load(folder, cache=cache, tokens=tokens, progress=False)
    assert apart == [27]  # forked workers read, build and count the runs (one file each)
    indexed = [s for s in ran if isinstance(s, IndexedSession)]
    assert len(indexed) == len(ran) == len(expected)
    assert all(s._messages is None for s in indexed)
    for name in ("messages", "sessions", "problems"):
        pd.testing.assert_frame_equal(getattr(ran, name), getattr(expected, name))
    assert [s.messages for s in ran] == [s.messages for s in expected]
    warm = sk.load(folder, cache=cache, tokens=tokens, progress=False)
    pd.testing.assert_frame_equal(warm.messages, expected.messages)
    if tokens:  # the workers' counts joined the cache: counting again tokenizes nothing
        monkeypatch.setattr(counting_module, "_uncached_counts", _never)
        messages = [m for s in expected for m in s.messages]
        counts = sk.count_tokens(messages, cache=token_cache_in(cache))
        assert counts == expected.messages["tokens"].astype(object).tolist()


def test_a_run_too_deep_to_send_back_is_built_by_the_load_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs read by forked workers, one holding metadata and tool calls nested 850 levels
    deep (read by nanobot, past what pickle writes): that run is read and built by the
    loading process, the others by the workers, and the frames equal an uncached load's."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    deep = "[" * 850 + "]" * 850
    for name, nested in [("cli_a", "[]"), ("cli_deep", deep), ("cli_z", "[1]")]:
        lines = [
            f'{{"_type": "metadata", "key": "{name}", "metadata": {{"n": {nested}}}}}',
            '{"role": "user", "content": "hi"}',
            f'{{"role": "assistant", "tool_calls": {nested}}}',
        ]
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    expected = {t: sk.load(folder, cache=False, tokens=t) for t in ("tiktoken", None)}
    monkeypatch.setattr(TUNING, "racy_ns", 0)
    monkeypatch.setattr(TUNING, "run_files", 1)
    here: list[list[tuple[int, int]]] = []  # runs read in this process (workers: their own)
    real = runs_module.read_run

    def spied(run: list[tuple[int, int]], *args: object) -> object:
        here.append(run)
        return real(run, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(runs_module, "read_run", spied)
    for tokens, loaded in expected.items():
        ran = sk.load(folder, cache=tmp_path / f"cache-{tokens}", tokens=tokens, progress=False)
        assert [s.messages for s in ran] == [s.messages for s in loaded]
        for name in ("messages", "sessions", "problems"):
            pd.testing.assert_frame_equal(getattr(ran, name), getattr(loaded, name))
    assert expected["tiktoken"].messages["tokens"].tolist() == [5, 4, 5, 855, 5, 7]
    assert [[i for i, _ in run] for run in here] == [[1], [1]]  # the deep file, once per load


@pytest.mark.parametrize(("tokens", "limit"), [("tiktoken", 300_000), (None, 1_000_000)])
def test_a_cold_load_is_spread_in_runs_of_spread_run_bytes_with_exact_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tokens: str | None, limit: int
) -> None:
    """With an index, a load large enough to fork counting workers has forked workers read,
    build and count its runs instead, cut at ``spread_run_bytes`` with exact counts (at
    ``run_bytes`` without): no batch is sent to counting workers, and the frames equal an
    uncached load's."""
    folder = tmp_path / "sessions"
    shutil.copytree(sk.load().loaded_from[0] / "sessions", folder)
    expected = sk.load(folder, cache=False, tokens=tokens, progress=False)
    monkeypatch.setattr(TUNING, "racy_ns", 0)
    monkeypatch.setattr(TUNING, "fork_bytes", 0)
    monkeypatch.setattr(TUNING, "spread_run_bytes", 300_000)
    monkeypatch.setattr(TUNING, "run_bytes", 1_000_000)
    apart: list[list[list[tuple[int, int]]]] = []
    real = loading_module.built_apart

    def spied(runs, *args):  # type: ignore[no-untyped-def]
        apart.append(runs)
        return real(runs, *args)

    monkeypatch.setattr(loading_module, "built_apart", spied)
    sent: list[int] = []
    monkeypatch.setattr(CountingBatches, "_send", _spied(CountingBatches._send, sent))
    ran = sk.load(folder, cache=tmp_path / "cache", tokens=tokens, progress=False)
    [runs] = apart
    assert len(runs) > 1 and sent == []
    assert runs == cut_runs([item for run in runs for item in run], limit)
    for name in ("messages", "sessions", "problems"):
        pd.testing.assert_frame_equal(getattr(ran, name), getattr(expected, name))


@pytest.mark.parametrize("cached", [True, False], ids=["cache", "no-cache"])
def test_workers_forked_before_reading_count_as_one_batch_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: bool
) -> None:
    """Counting workers forked before the first file is read, sent batches of a few messages
    while the next run is read: the frames equal an unforked load's (a message nanobot
    cannot count included), and the counts they made are in the cache (counting again
    tokenizes nothing)."""
    folder = tmp_path / "sessions"
    shutil.copytree(sk.load().loaded_from[0] / "sessions", folder)
    uncountable = b'{"role": "user", "content": [{"type": "text", "text": 5}]}\n'
    (folder / "cli_x.jsonl").write_bytes(b'{"role": "user", "content": "hi"}\n' + uncountable)
    expected = sk.load(folder, cache=False, progress=False)
    monkeypatch.setattr(TUNING, "racy_ns", 0)
    monkeypatch.setattr(TUNING, "fork_bytes", 0)
    monkeypatch.setattr(TUNING, "run_bytes", 500_000)
    monkeypatch.setattr(TUNING, "spread_run_bytes", 1 << 30)  # one run: not spread
    monkeypatch.setattr(TUNING, "batch_chars", 20_000)
    started = []
    monkeypatch.setattr(CountingBatches, "_send", _spied(CountingBatches._send, started))
    cache = tmp_path / "cache"
    ran = sk.load(folder, cache=cache if cached else False, progress=False)
    assert len(started) == 90 and sum(started) == len(expected.messages) == 7_124
    assert expected.messages["tokens"].isna().sum() == 1
    for name in ("messages", "sessions", "problems"):
        pd.testing.assert_frame_equal(getattr(ran, name), getattr(expected, name))
    if cached:
        monkeypatch.setattr(counting_module, "_uncached_counts", _never)
        messages = [m for s in expected for m in s.messages if s.key != "cli:x"]
        counts = sk.count_tokens(messages, cache=token_cache_in(cache))
        frame = expected.messages
        assert counts == frame.loc[frame["session_key"] != "cli:x", "tokens"].tolist()


def _spied(send, sizes: list[int]):  # type: ignore[no-untyped-def]
    """``CountingBatches._send`` noting the size of each batch it sends."""

    def spied(self: CountingBatches) -> None:
        if self._held:
            sizes.append(len(self._held))
        send(self)

    return spied


def _never(*args: object) -> list[int]:
    raise AssertionError("tokenized a message the workers had counted")


def test_a_batch_nested_too_deeply_to_pickle_is_counted_by_the_load_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tool calls nested 850 levels deep (read by nanobot, past what pickle writes): the
    batch holding them is counted in the loading process, the others by the workers, and
    the frames equal an unforked load's."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    deep = "[" * 850 + "]" * 850
    for name, calls in [("cli_deep", deep), ("cli_flat", '[{"id": "c1"}]')]:
        lines = [
            '{"role": "user", "content": "hi"}',
            f'{{"role": "assistant", "tool_calls": {calls}}}',
        ]
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    expected = sk.load(folder, cache=False, progress=False)
    monkeypatch.setattr(TUNING, "fork_bytes", 0)
    monkeypatch.setattr(TUNING, "batch_chars", 1)  # a batch per message
    here: list[int] = []  # batches counted in this process (the workers' calls are theirs)
    real = counting_module._both_counts

    def spied(messages: list[dict], **options: object) -> object:
        here.append(len(messages))
        return real(messages, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(counting_module, "_both_counts", spied)
    for cache in (tmp_path / "cache", False):
        ran = sk.load(folder, cache=cache, progress=False)
        pd.testing.assert_frame_equal(ran.messages, expected.messages)
    assert here == [1, 1]  # the deep message, once per load
    assert expected.messages["tokens"].tolist() == [5, 855, 5, 13]


@pytest.mark.parametrize("tokens", ["tiktoken", None])
@pytest.mark.parametrize("where", ["here", "workers"])
def test_files_streamed_batch_by_batch_equal_files_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tokens: str | None, where: str
) -> None:
    """Every file of the sample store (damaged ones included) streamed in batches of a few
    kilobytes, by the load itself (counting workers sent each batch) or by forked workers:
    the frames and problems equal an uncached load's, each session is restored from the
    index (its messages, parsed on first use, equal the file's), and a warm load equals it."""
    folder = tmp_path / "sessions"
    shutil.copytree(sk.load().loaded_from[0] / "sessions", folder)
    shutil.copytree(sk.load().loaded_from[0] / "damaged", folder, dirs_exist_ok=True)
    expected = sk.load(folder, cache=False, tokens=tokens, progress=False)
    monkeypatch.setattr(TUNING, "racy_ns", 0)
    monkeypatch.setattr(TUNING, "stream_bytes", 0)
    monkeypatch.setattr(TUNING, "run_files", 1)
    monkeypatch.setattr(TUNING, "fork_bytes", 0 if where == "here" else 1 << 40)
    monkeypatch.setattr(reader_module, "_CHUNK_BYTES", 4096)
    streamed: list[str] = []  # files streamed by this process (workers: their own)
    real = streamed_module.streamed_entry

    def spied(file: Path, **options: object) -> object:
        streamed.append(file.name)
        return real(file, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(runs_module, "streamed_entry", spied)
    cache = tmp_path / "cache"
    ran = sk.load(folder, cache=cache, tokens=tokens, progress=False)
    json_files = sum(f.suffix == ".json" for f in folder.iterdir())
    assert len(streamed) == (27 - json_files if where == "here" and tokens else 0)
    assert all(type(s) is IndexedSession and s._messages is None for s in ran)
    for name in ("messages", "sessions", "problems"):
        pd.testing.assert_frame_equal(getattr(ran, name), getattr(expected, name))
    assert [(s.messages, s.line_numbers, s.held_lines) for s in ran] == [
        (s.messages, s.line_numbers, s.held_lines) for s in expected
    ]
    warm = sk.load(folder, cache=cache, tokens=tokens, progress=False)
    for name in ("messages", "sessions", "problems"):
        pd.testing.assert_frame_equal(getattr(warm, name), getattr(expected, name))


@pytest.mark.parametrize("tokens", ["tiktoken", None])
@pytest.mark.parametrize("where", ["here", "workers"])
def test_a_load_without_the_cache_streams_huge_files_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tokens: str | None, where: str
) -> None:
    """``cache=False`` streams a huge JSONL file as the indexed path does (every file of the
    sample store here, in batches of a few kilobytes): the frames, problems and windows equal
    a load that reads them whole, each streamed session parses its file again on first use,
    and nothing is written anywhere."""
    folder = tmp_path / "sessions"
    shutil.copytree(sk.load().loaded_from[0] / "sessions", folder)
    shutil.copytree(sk.load().loaded_from[0] / "damaged", folder, dirs_exist_ok=True)
    expected = sk.load(folder, cache=False, tokens=tokens, progress=False)
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "never"))
    monkeypatch.setattr(TUNING, "racy_ns", 0)
    monkeypatch.setattr(TUNING, "stream_bytes", 0)
    monkeypatch.setattr(TUNING, "run_files", 1)
    monkeypatch.setattr(TUNING, "fork_bytes", 0 if where == "workers" else 1 << 40)
    monkeypatch.setattr(reader_module, "_CHUNK_BYTES", 4096)
    streamed: list[str] = []
    real = streamed_module.streamed_entry

    def spied(file: Path, **options: object) -> object:
        streamed.append(file.name)
        return real(file, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(runs_module, "streamed_entry", spied)
    ran = sk.load(folder, cache=False, tokens=tokens, progress=False)
    jsonl = sorted(f.name for f in folder.iterdir() if f.suffix == ".jsonl")
    assert sorted(streamed) == jsonl
    restored = [s for s in ran if type(s) is IndexedSession]
    assert len(restored) == 27 and all(s._messages is None for s in restored)  # .json: a run
    assert all(s.replay_home is None for s in restored)  # its replays are kept nowhere
    for name in ("messages", "sessions", "problems"):
        pd.testing.assert_frame_equal(getattr(ran, name), getattr(expected, name))
    pd.testing.assert_frame_equal(sk.windows(ran), sk.windows(expected))
    assert [(s.messages, s.line_numbers, s.held_lines) for s in ran] == [
        (s.messages, s.line_numbers, s.held_lines) for s in expected
    ]
    assert not (tmp_path / "never").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sessions"]


def test_a_load_without_the_cache_in_runs_keeps_no_parsed_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cache=False`` in runs of one file each: each settled file's session drops its parsed
    messages as an indexed one does (parsed again on first use), the frames equal a load in
    one run, and nothing is written anywhere."""
    folder = tmp_path / "sessions"
    shutil.copytree(sk.load().loaded_from[0] / "sessions", folder)
    shutil.copytree(sk.load().loaded_from[0] / "damaged", folder, dirs_exist_ok=True)
    expected = sk.load(folder, cache=False, progress=False)
    assert not any(type(s) is IndexedSession for s in expected)  # one run: all kept parsed
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "never"))
    monkeypatch.setattr(TUNING, "racy_ns", 0)
    monkeypatch.setattr(TUNING, "run_bytes", 1)
    ran = sk.load(folder, cache=False, progress=False)
    restored = [s for s in ran if type(s) is IndexedSession]
    assert len(restored) == len(ran) == len(expected) == 27
    assert all(s._messages is None and s.replay_home is None for s in restored)
    for name in ("messages", "sessions", "problems"):
        pd.testing.assert_frame_equal(getattr(ran, name), getattr(expected, name))
    assert [(s.messages, s.line_numbers, s.held_lines) for s in ran] == [
        (s.messages, s.line_numbers, s.held_lines) for s in expected
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sessions"]


@pytest.mark.parametrize(("trim_after", "trims"), [(0.0, 6), (0.5, 4), (1.0, 1)])
def test_freed_heap_pages_are_returned_once_trim_after_of_the_bytes_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trim_after: float, trims: int
) -> None:
    """Six files of equal size, a run each: the heap's freed pages are returned after each
    run once ``trim_after`` of the bytes are read (every run, from the third, after the last
    only), and the frames are the same whichever."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    line = b'{"role": "user", "content": "%s", "timestamp": "2026-01-01T00:00:00"}\n'
    for n in range(6):
        lines = [line % (b"x" * (10 + k)) for k in range(8)]
        (folder / f"cli_{n}.jsonl").write_bytes(b"".join(lines))
    expected = sk.load(folder, cache=False, tokens=None, progress=False)
    returned: list[int] = []
    monkeypatch.setattr(loading_module, "release_freed", lambda: returned.append(1) or True)
    monkeypatch.setattr(TUNING, "run_bytes", 1)
    monkeypatch.setattr(TUNING, "trim_after", trim_after)
    ran = sk.load(folder, cache=False, tokens=None, progress=False)
    assert len(returned) == trims
    for name in ("messages", "sessions", "problems"):
        pd.testing.assert_frame_equal(getattr(ran, name), getattr(expected, name))
