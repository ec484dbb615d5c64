"""Benchmark: opening a store through the persistent index, against nanobot and the orjson floor.

On a copy of the generated corpus (default 1,000 sessions, about 400,000 messages) with an
index folder of its own, each phase in a fresh process (imports not timed):

- ``cold``: ``sk.load`` with an empty index, then the sessions and messages frames (tokens
  counted): reads, counts and writes the index;
- ``warm``: the same with the index written (peak RSS against the store's bytes);
- ``changed``: the same after one message was appended to one file (only it is read);
- ``recount``: ``count_tokens`` of every message with the persisted counts (nothing may be
  tokenized);
- ``grid_cold`` then ``grid``: load plus the 3 x 3 windows grid (three releases x max_tokens
  0/8k/32k); the first keeps the replays, the second is the fresh-process time; then two
  grids of other entry settings (``grid_stamps``: 0.2.2 with and without time stamps;
  ``grid_context``: 0.3.x without runtime context), after which the index holds what three
  different grids keep;
- ``cold_none``: ``sk.load(tokens=None)`` plus the frames with an empty index folder of its
  own (the first open without token counts);
- ``uncached``: ``sk.load(cache=False)`` plus the frames (tokens counted; nothing read from
  or kept on disk);
- ``nanobot`` (0.2.2's own ``SessionManager._load`` of every key plus one DataFrame),
  ``orjson`` (every line parsed, nothing kept), ``tokens`` (cold ``count_tokens`` on all
  cores, empty cache), ``tiktoken`` (single-threaded ``encode_ordinary``) and ``floor``
  (every line parsed with orjson and every message's payload counted with bpe-openai, the
  fastest exact tokenizer, in one forked process per core over pieces of the files, nothing
  else: no first open with exact tokens can do less), from ``bench_load``; the floor runs
  just before ``cold`` and must count the same tokens;
- then ``--pairs - 1`` more runs of ``floor`` and ``cold`` (each in an empty index folder),
  alternating: the ratio of the first open to the floor is of their medians.

Run: ``python benchmarks/bench_index.py`` (``--help`` for options).  Prints the targets and
writes JSON to ``benchmarks/results/bench_index.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from bench_load import (
    _clock,
    _peak_rss,
    _since,
    phase_floor,
    phase_nanobot,
    phase_orjson,
    phase_tiktoken,
    phase_tokens,
)
from corpus import add_corpus_options, chosen_corpus, ensure_corpus

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MIB = 1024 * 1024
RELEASES = ["nanobot-0.2", "nanobot-0.3.0", "nanobot-0.3.5"]
MAX_TOKENS = [0, 8000, 32000]


def _imported() -> Any:
    """sessionkit with the modules a phase uses imported (its public names load their
    modules lazily, and pandas alone takes most of a second: imports are not timed)."""
    import sessionkit
    import sessionkit.simulate.windowing
    import sessionkit.store.loading

    return sessionkit


def phase_open(folder: Path) -> dict[str, Any]:
    """``sk.load`` plus the sessions and messages frames, tokens included (their sum taken
    after the clock stops, to check against the floor's)."""
    sessionkit = _imported()
    start = _clock()
    corpus = sessionkit.load(folder)
    messages, sessions = corpus.messages, corpus.sessions
    timed = _since(start)
    return {
        **timed,
        "messages": len(messages),
        "sessions": len(sessions),
        "tokens": int(messages["tokens"].sum()),
        **_peak_rss(),
    }


def phase_open_none(folder: Path) -> dict[str, Any]:
    """``sk.load`` plus the sessions and messages frames without token counts
    (``tokens=None``), in an index folder of its own."""
    sessionkit = _imported()
    start = _clock()
    corpus = sessionkit.load(folder, tokens=None)
    messages, sessions = corpus.messages, corpus.sessions
    timed = _since(start)
    return {**timed, "messages": len(messages), "sessions": len(sessions), **_peak_rss()}


def phase_uncached(folder: Path) -> dict[str, Any]:
    """``sk.load(cache=False)`` plus the sessions and messages frames, tokens counted: no
    index read or written (a huge file is streamed all the same)."""
    sessionkit = _imported()
    start = _clock()
    corpus = sessionkit.load(folder, cache=False)
    messages, sessions = corpus.messages, corpus.sessions
    timed = _since(start)
    return {
        **timed,
        "messages": len(messages),
        "sessions": len(sessions),
        "tokens": int(messages["tokens"].sum()),
        **_peak_rss(),
    }


def phase_recount(folder: Path) -> dict[str, Any]:
    """``count_tokens`` of every message, from the counts persisted by earlier processes."""
    import sessionkit
    import sessionkit.store.counting as counting

    messages = [m for s in sessionkit.load(folder, tokens=None) for m in s.messages]
    tokenized = []
    real = counting._uncached_counts

    def watched(batch: list[Any], workers: int, policy: str) -> list[int]:
        tokenized.append(len(batch))
        return real(batch, workers, policy)

    counting._uncached_counts = watched
    start = _clock()
    counts = sessionkit.count_tokens(messages)
    return {**_since(start), "messages": len(counts), "tokenized": sum(tokenized)}


def phase_grid(folder: Path) -> dict[str, Any]:
    """Load plus the 3 x 3 windows grid."""
    sessionkit = _imported()
    start = _clock()
    corpus = sessionkit.load(folder)
    frame = sessionkit.windows(corpus, policy=RELEASES, max_tokens=MAX_TOKENS)
    parsed = sum(s._messages is not None for s in corpus)  # type: ignore[attr-defined]
    return {**_since(start), "windows": len(frame), "sessions_parsed": parsed, **_peak_rss()}


OTHER_GRIDS: dict[str, dict[str, Any]] = {
    "grid_stamps": {
        "policy": RELEASES[0],
        "include_timestamps": [True, False],
        "max_tokens": [0, 8000],
    },
    "grid_context": {
        "policy": RELEASES[1:],
        "include_runtime_context": [False],
        "max_messages": [50, 500],
    },
}
"""Grids whose entry settings the 3 x 3 grid does not replay, so each keeps replays of its own."""


def phase_other_grid(folder: Path, name: str) -> dict[str, Any]:
    """Load plus one of :data:`OTHER_GRIDS`."""
    sessionkit = _imported()
    start = _clock()
    frame = sessionkit.windows(sessionkit.load(folder), **OTHER_GRIDS[name])
    return {**_since(start), "windows": len(frame), **_peak_rss()}


PHASES = {
    "cold": phase_open,
    "warm": phase_open,
    "changed": phase_open,
    "cold_none": phase_open_none,
    "uncached": phase_uncached,
    "recount": phase_recount,
    "grid_cold": phase_grid,
    "grid": phase_grid,
    "nanobot": lambda folder: {**phase_nanobot(folder, 1), **_peak_rss()},
    "orjson": lambda folder: phase_orjson(folder, 1),
    "tokens": lambda folder: phase_tokens(folder, os.cpu_count() or 1),
    "tiktoken": lambda folder: phase_tiktoken(folder, 1),
    "floor": lambda folder: {**phase_floor(folder, os.cpu_count() or 1), **_peak_rss()},
    **{name: partial(phase_other_grid, name=name) for name in OTHER_GRIDS},
}


def run_phase(name: str, folder: Path, cache: Path) -> dict[str, Any]:
    """One phase in a fresh interpreter with the benchmark's own index folder."""
    env = os.environ | {"SESSIONKIT_CACHE_DIR": str(cache)}
    command = [sys.executable, __file__, "--phase", name, "--corpus", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"phase {name} failed:\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"  {name:<10} {result['seconds']:8.2f} s", flush=True)
    return result


def _append_one_message(folder: Path) -> str:
    target = sorted(folder.glob("*.jsonl"))[len(list(folder.glob("*.jsonl"))) // 2]
    with target.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"role": "user", "content": "one more", "timestamp": "2026-11-30"}))
        f.write("\n")
    return target.name


def measure(source: Path, work: Path, pairs: int = 1) -> dict[str, Any]:
    """Every phase once, in order, on a settled copy of the store; then ``pairs - 1`` more
    runs of the floor and a first open with exact tokens (each in an empty index folder of
    its own), alternating, so their ratio is a median on a shared machine."""
    folder, cache = work / "sessions", work / "cache"
    shutil.copytree(source, folder)
    time.sleep(3.5)  # files changed within 3 s of a load are not indexed (TUNING.racy_ns)
    results = {}
    for name in ("nanobot", "orjson", "tiktoken", "tokens", "floor"):
        results[name] = run_phase(name, folder, work / "unused-cache")
    for name in ("cold", "warm", "recount", "grid_cold", "grid"):
        results[name] = run_phase(name, folder, cache)
        if name == "warm":  # the index of an open, before any grid adds replays
            results["index_bytes_open"] = _bytes_under(cache)
    results["index_bytes_grid"] = _bytes_under(cache)
    for name in OTHER_GRIDS:
        results[name] = run_phase(name, folder, cache)
    results["index_bytes_grids"] = _bytes_under(cache)
    results["cold_none"] = run_phase("cold_none", folder, work / "cache-none")
    results["uncached"] = run_phase("uncached", folder, work / "unused-cache")
    pair_runs = [(results["floor"], results["cold"])]
    for n in range(1, pairs):
        again = work / f"cache-pair-{n}"
        pair_runs.append((run_phase("floor", folder, again), run_phase("cold", folder, again)))
        shutil.rmtree(again, ignore_errors=True)
    for floor, cold in pair_runs:
        if floor["floor_tokens"] != cold["tokens"]:
            raise AssertionError(
                f"the floor counted {floor['floor_tokens']:,} tokens, the first open "
                f"{cold['tokens']:,}: not the same payloads"
            )
    results["vs_floor"] = _vs_floor(pair_runs)
    results["changed_file"] = _append_one_message(folder)
    results["changed"] = run_phase("changed", folder, cache)
    results["store_bytes"] = sum(p.stat().st_size for p in folder.glob("*.jsonl"))
    results["index_bytes"] = _bytes_under(cache)
    return results


def _vs_floor(pair_runs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """The floor and the first open with exact tokens, run after run: seconds, CPU seconds
    (their workers' included: both join them), peak RSS (parent + largest worker), each
    pair's ratio, medians."""
    floors = [f["seconds"] for f, _ in pair_runs]
    colds = [c["seconds"] for _, c in pair_runs]
    floor_cpu = [f["cpu_seconds"] for f, _ in pair_runs]
    cold_cpu = [c["cpu_seconds"] for _, c in pair_runs]
    return {
        "floor_seconds": floors,
        "cold_seconds": colds,
        "floor_cpu_seconds": floor_cpu,
        "cold_cpu_seconds": cold_cpu,
        "cpu_ratio_of_medians": statistics.median(cold_cpu) / statistics.median(floor_cpu),
        "floor_peak_rss": [(f["peak_rss"], f["peak_rss_worker"]) for f, _ in pair_runs],
        "cold_peak_rss": [(c["peak_rss"], c["peak_rss_worker"]) for _, c in pair_runs],
        "ratios": [c / f for f, c in zip(floors, colds, strict=True)],
        "median_floor": statistics.median(floors),
        "median_cold": statistics.median(colds),
        "ratio_of_medians": statistics.median(colds) / statistics.median(floors),
        "tokens": pair_runs[0][1]["tokens"],
    }


def _bytes_under(folder: Path) -> int:
    """Bytes of every file under ``folder``."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of the issue: measured value, goal, met."""

    def row(what: str, value: float, goal: float, higher: bool) -> dict[str, Any]:
        met = value >= goal if higher else value <= goal
        return {"target": what, "value": round(value, 3), "goal": goal, "met": met}

    warm = r["warm"]["seconds"]
    return [
        row(
            "warm open speed-up vs nanobot load + DataFrame",
            r["nanobot"]["seconds"] / warm,
            10,
            True,
        ),
        row("warm open / orjson parse", warm / r["orjson"]["seconds"], 0.5, False),
        row(
            "one changed file: open minus warm open (s)", r["changed"]["seconds"] - warm, 0.2, False
        ),
        row("payloads tokenized by a new process's recount", r["recount"]["tokenized"], 0, False),
        row(
            "cold count speed-up vs 1-thread tiktoken",
            r["tiktoken"]["seconds"] / r["tokens"]["seconds"],
            3,
            True,
        ),
        row("3x3 windows grid, fresh process, warm index (s)", r["grid"]["seconds"], 2, False),
        row(
            "warm open peak RSS / store bytes", r["warm"]["peak_rss"] / r["store_bytes"], 1.5, False
        ),
        *cold_targets(r),
    ]


def cold_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 23's targets for a first open, as ratios to nanobot's own load in the same run."""

    def row(what: str, value: float, goal: float | None) -> dict[str, Any]:
        met = None if goal is None else value <= goal
        return {"target": what, "value": round(value, 3), "goal": goal, "met": met}

    nanobot, cold = r["nanobot"], r["cold"]
    rss = (cold["peak_rss"] + cold["peak_rss_worker"]) / nanobot["peak_rss"]
    return [
        row("first open, exact tokens / nanobot's load", cold["seconds"] / nanobot["seconds"], 1.5),
        row(
            "first open / (nanobot's load + 1-thread tiktoken)",
            cold["seconds"] / (nanobot["seconds"] + r["tiktoken"]["seconds"]),
            0.25,
        ),
        row(
            "first open, tokens=None / nanobot's load",
            r["cold_none"]["seconds"] / nanobot["seconds"],
            1.0,
        ),
        row("first open peak RSS (parent + worker) / nanobot's", rss, 1.0),
        row(
            "cache=False load peak RSS (parent + worker) / nanobot's",
            (r["uncached"]["peak_rss"] + r["uncached"]["peak_rss_worker"]) / nanobot["peak_rss"],
            1.0,
        ),
        row("index after an open / store bytes", r["index_bytes_open"] / r["store_bytes"], 0.5),
        row("first 3x3 windows grid (s)", r["grid_cold"]["seconds"], 5.0),
        row(
            "index after three grids / store bytes", r["index_bytes_grids"] / r["store_bytes"], 1.0
        ),
        row(
            "first open, exact tokens / the floor (medians)",
            r["vs_floor"]["ratio_of_medians"],
            None,
        ),
        row(
            "the floor (s, median): orjson + bpe-openai, all cores",
            r["vs_floor"]["median_floor"],
            None,
        ),
    ]


def against_floor(r: dict[str, Any]) -> str:
    """The first opens beside the floor: seconds, CPU seconds, peak RSS (parent + largest
    worker), and the machine's load average before and after the run."""
    floor_s = r["vs_floor"]["median_floor"]
    lines = [
        f"store: {r['cold']['sessions']:,} sessions, {r['cold']['messages']:,} messages, "
        f"{r['store_bytes'] / 1e6:,.0f} MB; {r['cpus']} CPUs; load average (1/5/15 min) "
        f"before {'/'.join(f'{x:.2f}' for x in r['loadavg_before'])}, "
        f"after {'/'.join(f'{x:.2f}' for x in r['loadavg_after'])}"
    ]
    for name, label in (
        ("floor", "the floor: orjson + bpe-openai, all cores"),
        ("cold", "first open, exact tokens"),
        ("cold_none", "first open, tokens=None"),
        ("uncached", "cache=False load, exact tokens"),
        ("nanobot", "nanobot's load + DataFrame"),
    ):
        p = r[name]
        lines.append(
            f"{label:<42} {p['seconds']:7.2f} s {p['cpu_seconds']:7.2f} CPU-s "
            f"{p['peak_rss'] / MIB:6,.0f} + {p['peak_rss_worker'] / MIB:4,.0f} MiB "
            f"{p['seconds'] / floor_s:6.2f}x the floor's median"
        )
    v = r["vs_floor"]
    pairs = zip(v["floor_seconds"], v["cold_seconds"], v["ratios"], strict=True)
    for n, (f, c, ratio) in enumerate(pairs):
        fc, cc = v["floor_cpu_seconds"][n], v["cold_cpu_seconds"][n]
        lines.append(
            f"pair {n + 1}: the floor {f:.2f} s ({fc:.2f} CPU-s), first open {c:.2f} s "
            f"({cc:.2f} CPU-s): {ratio:.2f}x"
        )
    lines.append(
        f"medians: the floor {v['median_floor']:.2f} s, first open with exact tokens "
        f"{v['median_cold']:.2f} s: {v['ratio_of_medians']:.2f}x the floor; in CPU seconds "
        f"{statistics.median(v['floor_cpu_seconds']):.2f} and "
        f"{statistics.median(v['cold_cpu_seconds']):.2f}: {v['cpu_ratio_of_medians']:.2f}x"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_corpus_options(parser)
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_index.json")
    parser.add_argument(
        "--pairs", type=int, default=3, help="runs of the floor and a first open, alternating"
    )
    args = parser.parse_args()
    folder = chosen_corpus(args)
    if args.phase:
        print(json.dumps(PHASES[args.phase](folder)))
        return
    ensure_corpus(folder, args.sessions, args.messages, args.seed)
    loadavg_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="sessionkit-bench-index-") as work:
        results = measure(folder, Path(work), args.pairs)
    results["corpus"] = str(folder)
    results["cpus"] = os.cpu_count()
    results["loadavg_before"], results["loadavg_after"] = loadavg_before, os.getloadavg()
    results["targets"] = targets(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    for t in results["targets"]:
        met = {True: "met ", False: "MISS", None: "    "}[t["met"]]
        goal = "" if t["goal"] is None else f" (goal {t['goal']})"
        print(f"{met} {t['target']:<52} {t['value']:>10}{goal}")
    print(against_floor(results))
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
