"""A damaged cache never changes an answer: every cache file is sealed with a checksum that
is checked before pyarrow reads it, and whatever fails is rebuilt from the session files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import xxhash

from sessionkit.store import integrity
from sessionkit.store.cachedir import write_ipc

TEXTS = ["plan a trip ✈", "Where to? " * 7, "Lisbon, then Porto 🚆", "ok", "長い旅"]


def _store(folder: Path) -> Path:
    """Three small sessions, with text worth damaging."""
    folder.mkdir()
    for n in range(3):
        lines = [{"_type": "metadata", "key": f"telegram:{n}", "last_consolidated": 0}]
        for i in range(4 + n):
            role = "user" if i % 2 == 0 else "assistant"
            stamp = f"2026-03-0{n + 1}T09:00:{i:02d}"
            lines.append({"role": role, "content": TEXTS[(i + n) % 5], "timestamp": stamp})
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines)
        (folder / f"telegram_{n}.jsonl").write_text(text, encoding="utf-8")
    return folder


# Runs in a child process, so a crash (SIGSEGV, SIGABRT) fails the test instead of pytest.
DAMAGES = r"""
import random, shutil, sys, warnings
from pathlib import Path
import pandas as pd, pyarrow as pa
import sessionkit as sk
import sessionkit.store.corpus
import sessionkit.store.memo as memo
import sessionkit.simulate.replay as replay
import sessionkit.store.index as index
from sessionkit.store.counting import DEFAULT_CACHE
from sessionkit.store.integrity import read_sealed
from sessionkit.tuning import TUNING

TUNING.racy_ns = 0
TUNING.persist_min_messages = 0
TUNING.pack_min = 2  # the store's pack, then one file's own pack beside it
store, cache, seed, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
grid = {"policy": ["nanobot-0.2", "nanobot-0.3.5"], "max_tokens": [0, 40]}

def forget():
    memo.clear()
    DEFAULT_CACHE.clear()

def answers(corpus, cache=DEFAULT_CACHE):
    frames = [corpus.messages, corpus.sessions, corpus.problems]
    return frames + [sk.windows(corpus, cache=cache, grid=grid)]

def same(got, want, what):
    for a, b in zip(got, want, strict=True):
        pd.testing.assert_frame_equal(a, b, obj=what)

sk.load(store)
with (store / "telegram_2.jsonl").open("a") as f:
    f.write('{"role": "user", "content": "one more"}\n')
want = answers(sk.load(store, cache=False), cache=None)
answers(sk.load(store))
DEFAULT_CACHE.flush()
forget()
pristine = {p: p.read_bytes() for p in sorted(cache.rglob("*.arrow"))}
kinds = {p.relative_to(cache).parts[1] if p.parts[-3].startswith("index") else "tokens" for p in pristine}
assert kinds == {"stores", "catalogs", "files", "replays", "derived", "tokens"}, kinds

def crafted(path, data, rng):
    # a valid Arrow file whose strings (or numbers) differ, with the old seal or none
    table, _ = read_sealed(path)
    columns = []
    for column in table.columns:
        if pa.types.is_large_string(column.type) or pa.types.is_string(column.type):
            column = pa.array([None if v is None else v[::-1] + "!" for v in column.to_pylist()], column.type)
        elif pa.types.is_integer(column.type):
            column = pa.array([None if v is None else v + 1000 for v in column.to_pylist()], column.type)
        columns.append(column)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(pa.Table.from_arrays(columns, schema=table.schema))
    body = sink.getvalue().to_pybytes()
    return body + (data[-16:] if rng.random() < 0.5 else b"")

rng = random.Random(seed)
paths = list(pristine)
for n in range(rounds):
    shutil.rmtree(cache)
    for p, data in pristine.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    path = paths[n % len(paths)]
    data = bytearray(pristine[path])
    kind = ("flip", "flip", "truncate", "craft", "swap")[n % 5]
    if kind == "flip":
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del data[rng.randrange(len(data)):]
    elif kind == "craft":
        data = crafted(path, bytes(data), rng)
    else:
        others = [p for p in paths if p != path and p.parent == path.parent]
        data = pristine[rng.choice(others)] if others else b""
    path.write_bytes(bytes(data))
    what = f"round {n}: {kind} {path.relative_to(cache)}"
    print(what, flush=True)
    forget()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same(answers(sk.load(store)), want, what)
    DEFAULT_CACHE.flush()
    forget()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the next load is right, and silent
        same(answers(sk.load(store)), want, what + " (next load)")
print("done", flush=True)
"""


def test_damaged_cache_files_never_change_an_answer(tmp_path: Path) -> None:
    """40 damages (bit flips, truncation, crafted valid Arrow files with other text or
    counts, another file's bytes) to entry packs, replay packs, derived window stacks and
    token counts: no crash, every frame and window equal to a ``cache=False`` load, and the
    next load right without a warning."""
    store = _store(tmp_path / "sessions")
    cache = tmp_path / "cache"
    env = os.environ | {"SESSIONKIT_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", DAMAGES, str(store), str(cache), "7", "40"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert done.stdout.rstrip().endswith("done")


def test_a_seal_is_checked_before_pyarrow_reads_a_byte(tmp_path: Path) -> None:
    target = tmp_path / "one.arrow"
    table = pa.table({"s": pa.array(["ab", "cd"], pa.large_string())})
    write_ipc(target, table.schema, [table])
    assert integrity.read_sealed(target)[0].column("s").to_pylist() == ["ab", "cd"]
    raw = target.read_bytes()
    body, tail = raw[: -integrity.SEAL], raw[-integrity.SEAL :]
    assert pa.ipc.open_file(pa.py_buffer(body)).read_all().num_rows == 2
    for damaged in (raw[:-1], body, raw + b"\0", bytes([raw[0] ^ 1]) + raw[1:], b""):
        target.write_bytes(damaged)
        with pytest.raises(integrity.IntegrityError):
            integrity.read_sealed(target)
    target.write_bytes(body + tail)
    assert int.from_bytes(tail[4:12], "little") == xxhash.xxh3_64_intdigest(body)


def test_a_damaged_file_is_removed_with_one_warning(tmp_path: Path) -> None:
    target = tmp_path / "one.arrow"
    target.write_bytes(b"not sealed")
    with pytest.warns(UserWarning, match=r"damaged cache file .*one\.arrow .*rebuilt") as seen:
        integrity.discard(target, "no seal")
    assert len(seen) == 1 and "\n" not in str(seen[0].message)
    assert not target.exists()


def test_a_file_checked_once_is_checked_again_only_when_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "one.arrow"
    table = pa.table({"n": pa.array(range(100), pa.int64())})
    write_ipc(target, table.schema, [table])
    later = integrity.time.time_ns() + 10**10  # the file's stamps have settled by then
    monkeypatch.setattr(integrity.time, "time_ns", lambda: later)
    computed = []
    real = xxhash.xxh3_64_intdigest
    monkeypatch.setattr(
        integrity.xxhash, "xxh3_64_intdigest", lambda b: computed.append(1) or real(b)
    )
    for _ in range(3):
        assert integrity.read_sealed(target)[0].equals(table)
    assert len(computed) == 1
    with open(target, "r+b") as file:  # damaged in place: same inode, same size
        file.seek(200)
        byte = file.read(1)
        file.seek(200)
        file.write(bytes([byte[0] ^ 1]))
    os.utime(target, ns=(1, 1))
    with pytest.raises(integrity.IntegrityError, match="checksum"):
        integrity.read_sealed(target)
