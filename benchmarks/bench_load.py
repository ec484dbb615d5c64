"""Benchmark: loading a generated store into a messages DataFrame, and counting its tokens.

On a generated corpus (default 1,000 sessions, about 400,000 messages, about 485 MB) this
measures, each run in a fresh process (clean peak RSS) and reported as the median of
``--repeats`` runs:

- ``sessionkit``: ``sessionkit.load(path, tokens=None)`` then ``Corpus.messages``;
- ``nanobot``: nanobot 0.2.2's own ``SessionManager._load`` for every key, then one pandas
  DataFrame of all messages (with a ``session_key`` column);
- ``read_json``: ``pandas.read_json(lines=True)`` per file, then ``pandas.concat``;
- ``orjson``: ``orjson.loads`` of every line, nothing kept (the floor for any JSONL loader);
- ``tokens``: ``count_tokens`` over every message with an empty cache on all cores (cold),
  then twice from the filled cache (warm: the first recount, which also pays for re-arming
  the memory pages the forked workers shared; again: the second);
- ``tiktoken``: single-threaded ``encoding().encode_ordinary`` per payload (payloads are
  built before the clock starts, so only tokenizing is timed);
- ``tiktoken_split``: the same in ``--workers`` forked processes, an interleaved share each;
- ``floor``: the floor of a first open with exact tokens: every line parsed with orjson and
  every message's payload counted with bpe-openai (the fastest exact tokenizer the project
  depends on), in ``--workers`` forked processes over pieces of the files, nothing else.

Targets: sessionkit >= 2.5x faster than nanobot's path and within 1.5x of the orjson floor,
peak RSS <= 3x the corpus bytes, cold counting >= 1.7x faster than single-threaded tiktoken,
cached recount >= 50x faster than cold.

Run: ``python benchmarks/bench_load.py`` (``--help`` for options).  The corpus is generated
once into ``benchmarks/.corpus/``; results go to ``benchmarks/results/bench_load.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from corpus import add_corpus_options, chosen_corpus, ensure_corpus

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MIB = 1024 * 1024


# --- phases (each runs in its own process) ---------------------------------------------------


def _peak_rss() -> dict[str, int]:
    """Peak resident memory in bytes of this process and of its largest child (Linux KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {"peak_rss": own, "peak_rss_worker": children}


def _clock() -> tuple[float, float]:
    """Wall time and CPU time (this process and its finished children)."""
    t = os.times()
    return time.perf_counter(), t.user + t.system + t.children_user + t.children_system


def _since(start: tuple[float, float], prefix: str = "") -> dict[str, float]:
    wall, cpu = _clock()
    return {f"{prefix}seconds": wall - start[0], f"{prefix}cpu_seconds": cpu - start[1]}


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.jsonl"))


def phase_sessionkit(folder: Path, workers: int) -> dict[str, Any]:
    """sessionkit's load plus its messages frame."""
    import sessionkit

    start = _clock()
    frame = sessionkit.load(folder, tokens=None).messages
    return {**_since(start), "messages": len(frame)}


def phase_nanobot(folder: Path, workers: int) -> dict[str, Any]:
    """nanobot 0.2.2's ``SessionManager._load`` for every key, then one DataFrame."""
    import pandas as pd
    from nanobot.session.manager import SessionManager

    manager = SessionManager(folder.parent)
    manager.legacy_sessions_dir = folder.parent / "no-legacy-sessions"
    keys = [path.stem.replace("_", ":", 1) for path in _files(folder)]
    start = _clock()
    sessions = [manager._load(key) for key in keys]
    rows = [message for session in sessions for message in session.messages]
    frame = pd.DataFrame(rows)
    frame.insert(0, "session_key", [s.key for s in sessions for _ in s.messages])
    return {**_since(start), "messages": len(frame)}


def phase_read_json(folder: Path, workers: int) -> dict[str, Any]:
    """``pandas.read_json(lines=True)`` per file and one concat (metadata rows included)."""
    import pandas as pd

    start = _clock()
    frame = pd.concat([pd.read_json(path, lines=True) for path in _files(folder)])
    messages = int(frame["_type"].isna().sum())
    return {**_since(start), "messages": messages}


def phase_orjson(folder: Path, workers: int) -> dict[str, Any]:
    """Every line parsed with orjson and dropped: no loader can do less."""
    import orjson

    start = _clock()
    messages = 0
    for path in _files(folder):
        lines = path.read_bytes().splitlines()
        for line in lines:
            orjson.loads(line)
        messages += len(lines) - 1
    return {**_since(start), "messages": messages}


def _all_messages(folder: Path) -> list[dict[str, Any]]:
    import sessionkit

    return [m for session in sessionkit.load(folder, tokens=None) for m in session.messages]


def phase_tokens(folder: Path, workers: int) -> dict[str, Any]:
    """``count_tokens`` cold (empty cache, all workers), then warm from the filled cache."""
    from sessionkit.store.counting import TokenCache, count_tokens

    messages = _all_messages(folder)
    cache = TokenCache()
    start = _clock()
    cold = count_tokens(messages, cache=cache, workers=workers)
    cold_time = _since(start)
    start = _clock()
    warm = count_tokens(messages, cache=cache, workers=workers)
    warm_time = _since(start, "warm_")
    start = _clock()
    again = count_tokens(messages, cache=cache, workers=workers)
    again_time = _since(start, "again_")
    if warm != cold or again != cold:
        raise AssertionError("cached recount differs from the cold count")
    return {
        **cold_time,
        **warm_time,
        **again_time,
        "messages": len(messages),
        "tokens": sum(cold),
        "cached_payloads": len(cache),
    }


def phase_tiktoken(folder: Path, workers: int) -> dict[str, Any]:
    """Single-threaded ``encode_ordinary`` over every payload; payload building not timed."""
    from sessionkit.nanobot.tokens import encoding, message_payload

    messages = _all_messages(folder)
    start = _clock()
    payloads = [message_payload(m) for m in messages]
    payload_time = _since(start, "payload_")
    enc = encoding()
    start = _clock()
    lengths = [len(enc.encode_ordinary(p)) for p in payloads]
    return {
        **_since(start),
        **payload_time,
        "messages": len(messages),
        "encoded_tokens": sum(lengths),
    }


_PAYLOADS: list[str] = []
"""Payloads the forked ``tiktoken_split`` workers inherit."""


def _encode_share(index: int, workers: int) -> int:
    from sessionkit.nanobot.tokens import encoding

    enc = encoding()
    return sum(len(enc.encode_ordinary(p)) for p in _PAYLOADS[index::workers])


def phase_tiktoken_split(folder: Path, workers: int) -> dict[str, Any]:
    """``encode_ordinary`` in ``workers`` forked processes, an interleaved share each: the
    ceiling of any process split here (the tokenizers slow each other down)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from sessionkit.nanobot.tokens import encoding, message_payload

    global _PAYLOADS
    _PAYLOADS = [message_payload(m) for m in _all_messages(folder)]
    encoding()
    start = _clock()
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        tokens = sum(pool.map(_encode_share, range(workers), [workers] * workers))
    return {**_since(start), "messages": len(_PAYLOADS), "encoded_tokens": tokens}


# --- the floor of a first open with exact tokens ---------------------------------------------

FLOOR_PIECE_BYTES = 8 * MIB
"""At most this many bytes of lines per task of the floor (a file longer is cut at line ends)."""
FLOOR_TASKS_PER_WORKER = 8
"""At least this many tasks per worker where the store allows, so the cores finish together."""

_FLOOR_COUNT: list[Callable[[str], int]] = []
"""bpe-openai's cl100k_base ``count``, made before the floor's clock starts (workers fork
with it)."""


def _bpe_count() -> Callable[[str], int]:
    """bpe-openai's exact cl100k_base count (GitHub's Rust ``bpe`` crate), the fastest exact
    tokenizer the project depends on; equal to tiktoken's ``encode_ordinary`` lengths."""
    from bpe_openai import _bindings

    return _bindings.tokenizer_for_encoding("cl100k_base").count


def _floor_tasks(files: list[Path], workers: int) -> list[list[tuple[str, int, int]]]:
    """The store as tasks of whole lines: byte ranges of at most ``FLOOR_PIECE_BYTES`` ending
    at line ends (a file longer is cut), small files grouped, largest task first."""
    sizes = [path.stat().st_size for path in files]
    piece = max(1, min(FLOOR_PIECE_BYTES, sum(sizes) // (workers * FLOOR_TASKS_PER_WORKER)))
    ranges = []
    for path, size in zip(files, sizes, strict=True):
        if size <= piece:  # whole (most files: not opened here)
            ranges.append((str(path), 0, size))
            continue
        with path.open("rb") as f:
            start = 0
            while start < size:
                stop = start + piece
                if stop < size:
                    f.seek(stop - 1)
                    stop += len(f.readline()) - 1  # to the end of the line ``stop - 1`` is in
                stop = min(stop, size)
                ranges.append((str(path), start, stop))
                start = stop
    tasks: list[list[tuple[str, int, int]]] = [[]]
    held = 0
    for path_name, start, stop in ranges:
        if held and held + stop - start > piece:
            tasks.append([])
            held = 0
        tasks[-1].append((path_name, start, stop))
        held += stop - start
    tasks.sort(key=lambda task: sum(stop - start for _, start, stop in task), reverse=True)
    return tasks


def _floor_task(task: list[tuple[str, int, int]]) -> tuple[int, int]:
    """Messages and tokens of one task: every line parsed with orjson, each message's payload
    (nanobot 0.2.2's, as sessionkit counts these stores) counted exactly, nothing kept."""
    import orjson

    from sessionkit.nanobot.tokens import (
        FRAMING_TOKENS,
        fallback_payload_tokens,
        has_special_tokens,
        message_payload,
    )

    count = _FLOOR_COUNT[0]
    messages = tokens = 0
    for path_name, start, stop in task:
        with open(path_name, "rb") as f:
            f.seek(start)
            lines = f.read(stop - start).splitlines()
        for line in lines:
            record = orjson.loads(line)
            if "_type" in record:  # the metadata line (and 0.3.x provider state)
                continue
            messages += 1
            payload = message_payload(record)
            if not payload:
                tokens += FRAMING_TOKENS
            elif has_special_tokens(payload):  # nanobot's fallback: no BPE at all
                tokens += fallback_payload_tokens(payload)
            else:
                try:
                    n = count(payload)
                except UnicodeEncodeError:  # a lone surrogate: tiktoken's repair, then count
                    n = count(payload.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))
                tokens += max(FRAMING_TOKENS, n + FRAMING_TOKENS)
    return messages, tokens


def phase_floor(folder: Path, workers: int) -> dict[str, Any]:
    """The floor of a first open with exact tokens: every line parsed with orjson and every
    message's payload counted with bpe-openai, in ``workers`` forked processes over pieces of
    the files, nothing else (no frames, no index, no cache, no repeated payload skipped)."""
    import multiprocessing

    import orjson  # noqa: F401  (imported before the clock, as every phase's imports)

    import sessionkit.nanobot.tokens  # noqa: F401

    _FLOOR_COUNT[:] = [_bpe_count()]
    _FLOOR_COUNT[0]("warm up")
    start = _clock()
    tasks = _floor_tasks(_files(folder), workers)
    context = multiprocessing.get_context("fork")
    with context.Pool(workers) as pool:
        done = list(pool.imap_unordered(_floor_task, tasks, chunksize=1))
        pool.close()
        pool.join()  # workers reaped: their CPU time counts
    timed = _since(start)
    return {
        **timed,
        "messages": sum(m for m, _ in done),
        "floor_tokens": sum(t for _, t in done),
        "tasks": len(tasks),
        "workers": workers,
    }


PHASES: dict[str, Callable[[Path, int], dict[str, Any]]] = {
    "sessionkit": phase_sessionkit,
    "nanobot": phase_nanobot,
    "read_json": phase_read_json,
    "orjson": phase_orjson,
    "tokens": phase_tokens,
    "tiktoken": phase_tiktoken,
    "tiktoken_split": phase_tiktoken_split,
    "floor": phase_floor,
}


# --- driver ------------------------------------------------------------------------------------


def run_phase(name: str, folder: Path, workers: int) -> dict[str, Any]:
    """One measurement in a fresh interpreter; returns its JSON result line."""
    command = [sys.executable, __file__, "--phase", name, "--corpus", str(folder)]
    command += ["--workers", str(workers)]
    load = os.getloadavg()[0]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"phase {name} failed:\n{done.stderr}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "loadavg_before": load}


def _median(runs: list[dict[str, Any]], field: str) -> float:
    return statistics.median(run[field] for run in runs)


def measure(folder: Path, workers: int, repeats: int) -> dict[str, Any]:
    """Every phase ``repeats`` times, interleaved so machine noise spreads over all of them."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in PHASES}
    for repeat in range(repeats):
        for name in PHASES:
            print(f"  [{repeat + 1}/{repeats}] {name} ...", end=" ", flush=True)
            result = run_phase(name, folder, workers)
            print(f"{result['seconds']:.2f} s, {result['peak_rss'] / MIB:,.0f} MiB", flush=True)
            runs[name].append(result)
    summary: dict[str, Any] = {}
    for name, results in runs.items():
        counts = {r["messages"] for r in results}
        if len(counts) != 1:
            raise AssertionError(f"{name} saw different message counts: {counts}")
        entry = {
            "seconds": _median(results, "seconds"),
            "cpu_seconds": _median(results, "cpu_seconds"),
            "peak_rss": _median(results, "peak_rss"),
            "peak_rss_worker": _median(results, "peak_rss_worker"),
            "messages": counts.pop(),
            "runs": results,
        }
        entry["messages_per_s"] = entry["messages"] / entry["seconds"]
        if name == "tokens":
            entry["warm_seconds"] = _median(results, "warm_seconds")
            entry["warm_cpu_seconds"] = _median(results, "warm_cpu_seconds")
            entry["again_seconds"] = _median(results, "again_seconds")
            entry["tokens"] = results[0]["tokens"]
        if name == "tiktoken":
            entry["payload_seconds"] = _median(results, "payload_seconds")
        summary[name] = entry
    return summary


def targets(phases: dict[str, Any], corpus_bytes: int) -> list[dict[str, Any]]:
    """The five targets: measured ratio, goal, and whether it is met."""
    sk = phases["sessionkit"]

    def row(
        what: str, value: float, goal: float, higher_is_better: bool, cpu: float | None = None
    ) -> dict[str, Any]:
        met = value >= goal if higher_is_better else value <= goal
        sign = ">=" if higher_is_better else "<="
        entry = {"target": what, "value": round(value, 2), "goal": f"{sign} {goal}", "met": met}
        if cpu is not None:
            entry["value_cpu"] = round(cpu, 2)
        return entry

    nanobot, floor = phases["nanobot"], phases["orjson"]
    return [
        row(
            "sessionkit speed-up vs nanobot",
            nanobot["seconds"] / sk["seconds"],
            2.5,
            True,
            nanobot["cpu_seconds"] / sk["cpu_seconds"],
        ),
        row(
            "sessionkit time / orjson floor",
            sk["seconds"] / floor["seconds"],
            1.5,
            False,
            sk["cpu_seconds"] / floor["cpu_seconds"],
        ),
        row("sessionkit peak RSS / corpus bytes", sk["peak_rss"] / corpus_bytes, 3.0, False),
        row(
            "cold count speed-up vs 1-thread tiktoken",
            phases["tiktoken"]["seconds"] / phases["tokens"]["seconds"],
            1.7,
            True,
        ),
        row(
            "cached recount speed-up vs cold",
            phases["tokens"]["seconds"] / phases["tokens"]["warm_seconds"],
            50.0,
            True,
        ),
    ]


def report(result: dict[str, Any]) -> str:
    """The printed summary table."""
    corpus = result["corpus"]
    lines = [
        f"corpus: {corpus['sessions']:,} sessions, {corpus['messages']:,} messages, "
        f"{corpus['bytes'] / 1e6:,.0f} MB ({corpus['path']})",
        f"{result['repeats']} runs each, medians; {result['workers']} workers; "
        f"{result['machine']['cpus']} CPUs; 1-min load average before runs: "
        f"{result['loadavg_before']['min']:.1f}-{result['loadavg_before']['max']:.1f}",
        "",
        f"{'phase':<34} {'seconds':>8} {'CPU s':>7} {'msgs/s':>11} {'peak RSS':>10} "
        f"{'RSS/bytes':>9}",
    ]
    labels = {
        "sessionkit": "sessionkit load + messages",
        "nanobot": "nanobot _load all + DataFrame",
        "read_json": "pandas read_json per file + concat",
        "orjson": "orjson.loads every line (floor)",
        "tokens": "count_tokens cold (empty cache)",
        "tiktoken": "encode_ordinary, 1 thread",
        "tiktoken_split": "encode_ordinary, forked split",
        "floor": "orjson + bpe-openai, all cores",
    }
    for name, label in labels.items():
        phase = result["phases"][name]
        rss = phase["peak_rss"]
        lines.append(
            f"{label:<34} {phase['seconds']:>8.2f} {phase['cpu_seconds']:>7.2f} "
            f"{phase['messages_per_s']:>11,.0f} {rss / MIB:>7,.0f} MiB {rss / corpus['bytes']:>9.2f}"
        )
    tokens = result["phases"]["tokens"]
    lines.append(
        f"{'count_tokens warm (cached)':<34} {tokens['warm_seconds']:>8.2f} "
        f"{tokens['warm_cpu_seconds']:>7.2f} {tokens['messages'] / tokens['warm_seconds']:>11,.0f}"
    )
    lines.append(
        f"{'count_tokens warm again':<34} {tokens['again_seconds']:>8.2f} "
        f"{'':>7} {tokens['messages'] / tokens['again_seconds']:>11,.0f}"
    )
    worker = tokens["peak_rss_worker"]
    lines.append(
        f"{'count_tokens largest worker':<34} {'':>8} {'':>7} {'':>11} {worker / MIB:>7,.0f} MiB"
    )
    single, split = result["phases"]["tiktoken"], result["phases"]["tiktoken_split"]
    ceiling = single["seconds"] / split["seconds"]
    lines.append(
        f"two-process tokenizing ceiling: {ceiling:.2f}x single-threaded; the cold count "
        f"reaches {single['seconds'] / tokens['seconds'] / ceiling:.0%} of it"
    )
    lines += ["", f"{'target':<42} {'value':>8} {'on CPU s':>8} {'goal':>8}  met"]
    for row in result["targets"]:
        mark = "yes" if row["met"] else "NO"
        cpu = f"{row['value_cpu']:.2f}" if "value_cpu" in row else ""
        lines.append(f"{row['target']:<42} {row['value']:>8.2f} {cpu:>8} {row['goal']:>8}  {mark}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse options; either run one phase (internal) or the whole benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_options(parser)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_load.json")
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    folder = chosen_corpus(args)
    if args.phase:
        result = PHASES[args.phase](folder, args.workers)
        print(json.dumps({**result, **_peak_rss()}))
        return

    ensure_corpus(folder, args.sessions, args.messages, args.seed)
    files = _files(folder)
    corpus_bytes = sum(path.stat().st_size for path in files)
    print(f"measuring {len(files):,} files, {corpus_bytes / 1e6:,.0f} MB ...", flush=True)
    phases = measure(folder, args.workers, args.repeats)
    counts = {phases[name]["messages"] for name in PHASES}
    if len(counts) != 1:
        raise AssertionError(f"phases disagree on the number of messages: {counts}")
    import nanobot
    import pandas
    import tiktoken

    result = {
        "when": datetime.now().isoformat(timespec="seconds"),
        "corpus": {
            "path": str(folder),
            "sessions": len(files),
            "messages": counts.pop(),
            "bytes": corpus_bytes,
        },
        "repeats": args.repeats,
        "workers": args.workers,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "pandas": pandas.__version__,
            "tiktoken": tiktoken.__version__,
            "nanobot": getattr(nanobot, "__version__", "0.2.2"),
        },
        "loadavg_before": {
            "min": min(r["loadavg_before"] for p in phases.values() for r in p["runs"]),
            "max": max(r["loadavg_before"] for p in phases.values() for r in p["runs"]),
        },
        "phases": phases,
        "targets": targets(phases, corpus_bytes),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print()
    print(report(result))
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
