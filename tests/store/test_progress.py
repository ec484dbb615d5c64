"""A cold load's progress bars (shown when the work is large) and Ctrl-C (prompt, no partial
cache left behind, the next load whole)."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
from tqdm import tqdm

import sessionkit as sk
from sessionkit.store.cachedir import cache_contents
from sessionkit.store.counting import TokenCache, count_tokens
from sessionkit.synthetic import generate_corpus
from sessionkit.synthetic.sessions import FeatureMix
from sessionkit.tuning import TUNING

DATA = Path(__file__).resolve().parents[2] / "data"
BAR = re.compile(r"(reading|counting tokens): +\d+%\|[^|]*\| (\S+)/(\S+) ")


def bars(stderr: str) -> dict[str, tuple[str, str]]:
    """Each bar's last state on ``stderr``: its desc -> (done, total) as tqdm printed them."""
    return {m[1]: (m[2], m[3]) for m in BAR.finditer(stderr.replace("\r", "\n"))}


def store_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.jsonl"))


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated store of 878 messages in 6 files (1.1 MB)."""
    folder = tmp_path_factory.mktemp("small") / "sessions"
    stats = generate_corpus(folder, n_sessions=6, target_messages=1200, seed=5)
    assert (stats.n_sessions, stats.n_messages) == (6, 878)
    return folder


def test_progress_true_shows_both_bars_with_their_exact_totals(small: Path, capsys) -> None:
    corpus = sk.load(small, cache=False, progress=True)
    size = tqdm.format_sizeof(store_bytes(small))
    assert bars(capsys.readouterr().err) == {
        "reading": (size, size),
        "counting tokens": ("878", "878"),
    }
    assert len(corpus.messages) == 878


def test_the_sample_shows_no_bar_by_default_even_cold(tmp_path: Path, capsys) -> None:
    sk.load(DATA, cache=False)
    sk.load(DATA, cache=tmp_path)
    assert capsys.readouterr().err == ""


def test_a_warm_open_has_nothing_to_show(small: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(TUNING, "racy_ns", 0)  # index the files just generated
    sk.load(small, cache=tmp_path, progress=False)
    sk.load(small, cache=tmp_path, progress=True)
    assert capsys.readouterr().err == ""


def test_progress_false_hides_the_bars_of_large_work(small: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(TUNING, "read_progress_bytes", 1)
    monkeypatch.setattr(TUNING, "count_progress_messages", 1)
    sk.load(small, cache=False, progress=False)
    assert capsys.readouterr().err == ""


def test_the_bytes_threshold_shows_both_bars_from_its_value_on(
    small: Path, monkeypatch, capsys
) -> None:
    total = store_bytes(small)
    monkeypatch.setattr(TUNING, "read_progress_bytes", total + 1)
    sk.load(small, cache=False)
    assert bars(capsys.readouterr().err) == {}
    monkeypatch.setattr(TUNING, "read_progress_bytes", total)
    sk.load(small, cache=False)
    assert set(bars(capsys.readouterr().err)) == {"reading", "counting tokens"}


def test_the_messages_threshold_shows_the_counting_bar_only(
    small: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(TUNING, "count_progress_messages", 879)
    sk.load(small, cache=False)
    assert bars(capsys.readouterr().err) == {}
    monkeypatch.setattr(TUNING, "count_progress_messages", 878)
    sk.load(small, cache=False)
    assert bars(capsys.readouterr().err) == {"counting tokens": ("878", "878")}
    sk.load(small, cache=False, tokens="fallback")
    assert capsys.readouterr().err == ""  # nothing exact to count


def test_count_tokens_reports_each_forked_range_then_cache_hits_and_fresh_counts() -> None:
    messages = [{"role": "user", "content": f"message number {i}"} for i in range(20_000)]
    cache, told = TokenCache(), []
    first = count_tokens(messages, cache=cache, workers=2, progress=told.append)
    assert told == [625] * 32  # ranges of len / (workers * 16), keyed in the workers
    told.clear()
    assert count_tokens(messages, cache=cache, workers=1, progress=told.append) == first
    assert told == [20_000]  # all found in the cache at once
    told.clear()
    more = messages[:10] + [{"role": "user", "content": f"new {i}"} for i in range(5)]
    count_tokens(more, cache=cache, workers=1, progress=told.append)
    assert told == [10, 5]  # the hits, then the fresh counts
    told.clear()
    count_tokens(more, cache=False, workers=2, progress=told.append)
    assert told == [15]


_LOADER = """
import sys
from pathlib import Path
import sessionkit as sk
import sessionkit.store.corpus as corpus_module
from sessionkit.tuning import TUNING
TUNING.fork_bytes = int(sys.argv[3])
TUNING.run_bytes = 1 << 30  # one run: read here, then counted by workers forked for it
TUNING.spread_run_bytes = 1 << 30  # not read, built and counted by workers run by run
sk.load(sys.argv[1], cache=Path(sys.argv[2]), progress=True)
print("finished", flush=True)
"""
_COUNTING = re.compile(rb"counting tokens: +\d+%\|[^|]*\| [1-9]\d*/")


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    """A store large enough for forked counting (22,369 messages, 11.8 MB), and its
    messages frame loaded with ``cache=False``."""
    folder = tmp_path_factory.mktemp("large") / "sessions"
    stats = generate_corpus(
        folder, n_sessions=16, target_messages=24_000, seed=3, mix=FeatureMix(verbosity=0.3)
    )
    assert stats.n_messages == 22_369
    return folder, sk.load(folder, cache=False, progress=False).messages


def _wait_for_workers(process: subprocess.Popen, seconds: float) -> None:
    """Once ``process`` has forked two workers (fails after ``seconds``)."""
    deadline = time.monotonic() + seconds
    while len(psutil.Process(process.pid).children()) < 2:
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.01)


def _interruptible() -> None:
    """In the child before it starts: SIGINT back to its default, so Python installs its
    KeyboardInterrupt handler even when the tests run with SIGINT ignored (a background job
    of a shell without job control passes that on)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(process: subprocess.Popen, pattern: re.Pattern[bytes], seconds: float) -> bytes:
    """What ``process`` wrote on stderr up to ``pattern`` (fails after ``seconds``)."""
    seen = b""
    deadline = time.monotonic() + seconds
    while not pattern.search(seen):
        left = deadline - time.monotonic()
        assert left > 0 and process.poll() is None, seen.decode(errors="replace")
        if select.select([process.stderr], [], [], left)[0]:
            seen += os.read(process.stderr.fileno(), 65536)  # type: ignore[union-attr]
    return seen


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT and fork")
@pytest.mark.parametrize("to_group", [False, True], ids=["parent-only", "whole-group"])
@pytest.mark.parametrize(
    ("fork_bytes", "waiting_in"),
    [(10**12, "_forked"), (0, None)],
    ids=["forked-after-reading", "forked-before-reading"],
)
def test_ctrl_c_while_workers_count_stops_at_once_and_leaves_a_clean_cache(
    large: tuple[Path, pd.DataFrame],
    tmp_path: Path,
    monkeypatch,
    to_group: bool,
    fork_bytes: int,
    waiting_in: str | None,
) -> None:
    """Workers forked by ``count_tokens`` once the messages are read (the parent waits for
    them in ``_forked``), or by the load before it reads
    (:data:`~TUNING.fork_bytes`: they count while the parent reads and
    builds columns, so Ctrl-C may find it anywhere)."""
    folder, expected = large
    cache = tmp_path / "cache"
    process = subprocess.Popen(
        [sys.executable, "-c", _LOADER, str(folder), str(cache), str(fork_bytes)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # a process group of its own, as a terminal's foreground job
        preexec_fn=_interruptible,
    )
    try:
        before = _wait_for(process, _COUNTING, 60)
        workers = psutil.Process(process.pid).children()
        assert len(workers) == min(os.cpu_count() or 1, 32) >= 2
        sent = time.monotonic()
        if to_group:  # what a terminal's Ctrl-C does: workers get it too
            os.killpg(process.pid, signal.SIGINT)
        else:
            os.kill(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=10)
        took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
    stderr = (before + err).decode()
    assert process.returncode == -signal.SIGINT, stderr
    assert out == b""
    assert stderr.rstrip().endswith("KeyboardInterrupt")
    if waiting_in is not None:
        assert f", in {waiting_in}\n" in stderr  # interrupted while the workers counted
    assert took < 3, took
    assert psutil.wait_procs(workers, timeout=3)[1] == []
    assert stderr.count("Traceback") == 1  # the workers ignored it
    leftovers = sorted(p.name for p in cache.rglob("*") if p.is_file())
    assert [n for n in leftovers if n.endswith(".tmp")] == []
    assert "temp" not in cache_contents(cache)
    monkeypatch.setattr(TUNING, "racy_ns", 0)  # index the files just generated
    again = sk.load(folder, cache=cache, progress=False)
    pd.testing.assert_frame_equal(again.messages, expected)
    assert cache_contents(cache)["entries"][0] == 16  # a pack per file (fewer than PACK_MIN)
    warm = sk.load(folder, cache=cache, progress=False)
    pd.testing.assert_frame_equal(warm.messages, expected)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT and fork")
def test_ctrl_c_in_the_cli_exits_130_with_one_line(
    large: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    """The command line stops at Ctrl-C with status 130 and one line, not a traceback (sent
    while forked workers read, build and count the store's runs)."""
    folder, _ = large
    process = subprocess.Popen(
        [sys.executable, "-m", "sessionkit", "summary", str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=os.environ | {"SESSIONKIT_CACHE_DIR": str(tmp_path / "cache")},
        start_new_session=True,
        preexec_fn=_interruptible,
    )
    try:
        _wait_for_workers(process, 60)
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert out == b""
    assert err.decode().rstrip().endswith("sessionkit: interrupted")
    assert b"Traceback" not in err
