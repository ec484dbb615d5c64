"""Where the cache folder is, and the one atomic writer of what is kept there."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pyarrow as pa
import pytest

import sessionkit
import sessionkit.simulate.replay
import sessionkit.store.index
import sessionkit.store.runs
from sessionkit import load
from sessionkit.store import cachedir, counting, memo
from sessionkit.store.frames import MESSAGE_TABLE
from sessionkit.store.integrity import read_sealed
from sessionkit.tuning import TUNING


def test_the_cache_folder_follows_sessionkit_cache_dir_then_xdg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cachedir.sys, "platform", "linux")
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "chosen"))
    assert cachedir.default_cache_dir() == tmp_path / "chosen"
    monkeypatch.delenv("SESSIONKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cachedir.default_cache_dir() == tmp_path / "xdg" / "sessionkit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cachedir.default_cache_dir() == tmp_path / "home" / ".cache" / "sessionkit"


def test_write_ipc_replaces_the_file_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "kept" / "one.arrow"
    schema = pa.schema([("n", pa.int64())])
    cachedir.write_ipc(target, schema, [pa.table({"n": [1, 2]})])
    assert read_sealed(target)[0].column("n").to_pylist() == [1, 2]

    def broken():  # type: ignore[no-untyped-def]
        yield pa.table({"n": [3]})
        raise RuntimeError("the writer died halfway")

    with pytest.raises(RuntimeError, match="halfway"):
        cachedir.write_ipc(target, schema, broken())
    assert read_sealed(target)[0].column("n").to_pylist() == [1, 2]
    assert [p.name for p in target.parent.iterdir()] == ["one.arrow"]


def _store(folder: Path, n_files: int = 3) -> Path:
    folder.mkdir(parents=True)
    for n in range(n_files):
        lines = [{"_type": "metadata", "key": f"cli:{n}"}]
        lines += [{"role": "user", "content": f"private {n} {i}"} for i in range(3)]
        text = "".join(json.dumps(r) + "\n" for r in lines)
        (folder / f"cli_{n}.jsonl").write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files count as settled as soon as they are written (they are indexed at once)."""
    monkeypatch.setattr(TUNING, "racy_ns", 0)


def test_the_cache_is_the_users_alone_whatever_the_umask(tmp_path: Path, settled: None) -> None:
    store = _store(tmp_path / "sessions")
    folder = tmp_path / "made" / "cache"
    old = os.umask(0)
    try:
        corpus = load(store, cache=folder)
        sessionkit.windows(corpus, grid={"max_tokens": [0, 20]})
        corpus.token_cache.flush()
    finally:
        os.umask(old)
    found = [tmp_path / "made", *folder.rglob("*")]
    assert len(found) > 5
    modes = {p.relative_to(tmp_path): stat.S_IMODE(p.stat().st_mode) for p in found}
    assert modes == {p: 0o700 if (tmp_path / p).is_dir() else 0o600 for p in modes}


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757])
def test_a_cache_folder_others_can_write_to_is_refused(
    tmp_path: Path, settled: None, mode: int
) -> None:
    store = _store(tmp_path / "sessions")
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.warns(UserWarning, match="writable by other users.*without the index"):
        corpus = load(store, cache=folder)
    assert corpus.token_cache is None
    assert list(folder.iterdir()) == []
    folder.chmod(mode | stat.S_ISVTX)  # as /tmp: others cannot replace what is ours
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(store, cache=folder)
    assert list(folder.iterdir())


def test_a_cache_folder_of_another_user_is_refused(
    tmp_path: Path, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path / "sessions")
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    owner = folder.stat().st_uid
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)
    with pytest.warns(UserWarning, match=r"owned by another user .*without the index"):
        load(store, cache=folder)
    assert list(folder.iterdir()) == []


def test_a_cache_folder_linked_into_the_sessions_folder_is_refused(
    tmp_path: Path, settled: None
) -> None:
    store = _store(tmp_path / "sessions")
    (store / ".index").mkdir(mode=0o700)
    link = tmp_path / "cache-link"
    link.symlink_to(store / ".index")
    with pytest.warns(UserWarning, match="lies inside a workspace or sessions folder"):
        load(store, cache=link)
    assert list((store / ".index").iterdir()) == []


def test_temp_files_of_dead_writers_are_removed_on_the_next_open(
    tmp_path: Path, settled: None
) -> None:
    store = _store(tmp_path / "sessions")
    folder = tmp_path / "cache"
    load(store, cache=folder).token_cache.flush()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], **_OUT)
    pid = int(dead.stdout)
    kinds = [p.parent for p in folder.rglob("*.arrow")]
    assert {p.name for p in kinds} >= {"files", f"tokens-{counting.TOKENS_FORMAT}"}
    left = [k / f".x.arrow.{pid}.123.tmp" for k in set(kinds)]
    live = kinds[0] / f".y.arrow.{os.getpid()}.456.tmp"
    for path in [*left, live]:
        path.write_bytes(b"half a file")
    load(store, cache=folder)
    assert [p for p in left if p.exists()] == []
    assert live.exists()
    assert cachedir.remove_dead_temp_files(live.parent) == 0


_OUT = {"capture_output": True, "text": True, "check": True}


def test_edit_and_reload_cycles_keep_the_cache_bounded(
    tmp_path: Path, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries, replays and token counts of files that changed are replaced, not added to:
    20 cycles of (append a message to one file, reload, the windows at the end) leave the
    cache at most twice its size after the first cycle."""
    store = _store(tmp_path / "sessions")
    folder = tmp_path / "cache"
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(folder))
    monkeypatch.setattr(TUNING, "persist_min_messages", 0)
    sizes = []
    for n in range(20):
        with (store / "cli_1.jsonl").open("a") as f:
            f.write(json.dumps({"role": "assistant", "content": f"reply {n}"}) + "\n")
        corpus = load(store)
        sessionkit.windows(corpus, at="end", grid={"max_tokens": [0, 20]})
        corpus.token_cache.flush()
        memo.clear()
        sizes.append(sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()))
    print(f"cache bytes after 1 / 20 cycles: {sizes[0]} / {sizes[-1]}")
    assert sizes[-1] <= 2 * sizes[0], sizes


def test_entries_and_replays_of_a_deleted_file_are_dropped(
    tmp_path: Path, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path / "sessions")
    folder = tmp_path / "cache"
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(folder))
    sessionkit.windows(load(store), grid={"max_tokens": [0, 20]})
    (own,) = {p.parent for p in folder.glob("index-*/files/*.arrow")}
    assert len(list(own.iterdir())) == 3
    (store / "cli_2.jsonl").unlink()
    with (store / "cli_0.jsonl").open("a") as f:
        f.write(json.dumps({"role": "user", "content": "later"}) + "\n")
    memo.clear()
    sessionkit.windows(load(store), grid={"max_tokens": [0, 20]})
    assert len(list(own.iterdir())) == 2
    (replays,) = folder.glob("index-*/replays/*.arrow")
    table, _ = read_sealed(replays)
    name = json.loads(table.schema.metadata[b"sessionkit"])["name"]
    index = sessionkit.store.index.Index(folder)
    _, items = index.read_replays(replays.name.partition("-")[0], name)
    kept = [Path(item.path).name for item in items]
    assert sorted(kept) == ["cli_0.jsonl", "cli_1.jsonl"]


def test_the_store_pack_drops_gone_files_but_not_those_a_smaller_load_left_out(
    tmp_path: Path, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TUNING, "pack_min", 2)
    store = _store(tmp_path / "sessions", n_files=4)
    folder = tmp_path / "cache"
    load(store, cache=folder)
    read: list[str] = []
    real = sessionkit.store.runs.read_session_file

    def counted(path: Path):  # type: ignore[no-untyped-def]
        read.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(sessionkit.store.runs, "read_session_file", counted)
    load(store / "cli_0.jsonl", cache=folder)  # one file of the folder: the pack stays whole
    load(store, cache=folder)
    assert read == []
    (pack,) = folder.glob("index-*/stores/*.arrow")

    def packed() -> list[str]:
        _, items = sessionkit.store.index._read_pack(pack, MESSAGE_TABLE)
        return sorted(Path(path).name for path in items)

    assert packed() == ["cli_0.jsonl", "cli_1.jsonl", "cli_2.jsonl", "cli_3.jsonl"]
    for n in (1, 2, 3):
        (store / f"cli_{n}.jsonl").unlink()
    load(store, cache=folder)
    assert packed() == ["cli_0.jsonl"]


def test_cache_info_reports_the_index_bytes(
    tmp_path: Path, settled: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """``sessionkit cache info`` names the bytes of the index (entries, replays, derived
    window stacks) apart from the token counts."""
    from sessionkit.cli import main

    monkeypatch.setattr(TUNING, "persist_min_messages", 0)
    store = _store(tmp_path / "sessions")
    folder = tmp_path / "cache"
    corpus = load(store, cache=folder)
    sessionkit.windows(corpus, grid={"max_tokens": [0, 20]})
    corpus.token_cache.flush()
    index = [p for p in folder.glob("index-*/*/*") if p.is_file()]
    assert {p.parent.name for p in index} == {"files", "replays", "derived"}
    assert main(["cache", "info", "--cache-dir", str(folder)]) == 0
    shown = capsys.readouterr().out.splitlines()
    size = sum(p.stat().st_size for p in index)
    assert shown[2] == (
        f"index:  {size:,} bytes in {len(index)} file(s) (entries, replays, derived window stacks)"
    )
    tokens = [p for p in folder.glob("tokens-*/*") if p.is_file()]
    counted = sum(p.stat().st_size for p in tokens)
    assert shown[-2] == f"  tokens   {len(tokens):>7} file(s) {counted:>15,} bytes"
    assert shown[-1].startswith("releases: ")


def test_a_process_with_its_own_cache_folder_or_none_leaves_the_default_untouched(
    tmp_path: Path,
) -> None:
    """``cache=<folder>`` keeps the index and the token counts there, ``cache=False`` keeps
    nothing anywhere: the default cache folder stays absent through the process's exit
    (when pending token counts are flushed)."""
    store = _store(tmp_path / "sessions")
    chosen = tmp_path / "chosen"
    code = (
        "import sessionkit as sk\n"
        "from sessionkit.tuning import TUNING\n"
        "TUNING.racy_ns = 0\n"
        f"for cache in ({str(chosen)!r}, False):\n"
        f"    corpus = sk.load({str(store)!r}, cache=cache)\n"
        "    print(corpus.messages['tokens'].sum())\n"
        "    sk.windows(corpus, grid={'max_tokens': [0, 20]})\n"
    )
    default = tmp_path / "default"
    env = os.environ | {"SESSIONKIT_CACHE_DIR": str(default)}
    done = subprocess.run([sys.executable, "-c", code], env=env, **_OUT)
    first, second = done.stdout.split()
    assert first == second
    assert not default.exists()
    assert sorted(p.name.split("-")[0] for p in chosen.iterdir()) == ["index", "tokens"]
    assert list(chosen.glob("tokens-*/*.arrow"))
