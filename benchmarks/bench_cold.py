"""Benchmark: many tiny session files, cold and warm, against nanobot 0.2.2's own load of them.

For stores of 2,500 / 5,000 / 10,000 / 20,000 tiny sessions (4 messages each, generated once
into ``benchmarks/.corpus/tiny-<n>/sessions``), each phase in a fresh process (imports not
timed) with a cache folder of its own:

- ``nanobot``: 0.2.2's ``SessionManager._load`` of every key plus one DataFrame (from
  ``bench_load``), the reference every ratio divides by;
- ``floor``: the floor of a cold open with exact tokens (from ``bench_load``): every line
  parsed with orjson and every message's payload counted with bpe-openai, the fastest exact
  tokenizer, in one forked process per core, nothing else; it must count the tokens ``cold``
  counts;
- ``cold`` then ``warm``: ``sk.load`` plus the messages and sessions frames with exact token
  counts, first with an empty cache folder (index and token counts), then with what it kept;
- ``cold_none`` then ``warm_none``: the same with ``tokens=None``, in another empty folder;
- ``uncached``: ``cache=False, tokens=None`` (reads every file, keeps nothing).

Each phase reports wall seconds and the peak RSS of its process and of its largest worker
(``ru_maxrss`` of the children); ratios are against nanobot's time and its peak RSS (parent
plus workers against nanobot's single process), and each phase's time against the floor's.  A phase that runs past ``--timeout`` is
recorded as timed out.  Targets (issue 23): time growth per doubling of files <= 2.2x cold
and warm; the largest store cold < 2x nanobot's load, warm < 0.25x.

Run: ``python benchmarks/bench_cold.py`` (``--quick``: 1,250 / 2,500 / 5,000 files, one run
each, a couple of minutes; ``--help`` for options).  Writes JSON to
``benchmarks/results/bench_cold-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench_load import _clock, _peak_rss, _since, phase_floor, phase_nanobot
from corpus import CORPORA

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MIB = 1024 * 1024
SIZES = (2_500, 5_000, 10_000, 20_000)
QUICK_SIZES = (1_250, 2_500, 5_000)
SETTLED_S = 3.5
"""Seconds a new store waits before it is measured: files changed within 3 s of a load are
not indexed (``TUNING.racy_ns``)."""


def tiny_store(n_files: int) -> Path:
    """The sessions folder of ``n_files`` tiny sessions (4 messages each), made once."""
    folder = CORPORA / f"tiny-{n_files}" / "sessions"
    if folder.is_dir() and len(list(folder.glob("*.jsonl"))) == n_files:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(n_files):
        lines = [
            {
                "_type": "metadata",
                "key": f"cli:{n}",
                "created_at": "2026-01-01T10:00:00",
                "updated_at": "2026-01-01T10:01:00",
                "metadata": {},
                "last_consolidated": 0,
            },
            {"role": "user", "content": f"question {n}: what is {n} + 1?", "timestamp": "t1"},
            {"role": "assistant", "content": f"{n} + 1 is {n + 1}.", "timestamp": "t2"},
            {"role": "user", "content": "thanks", "timestamp": "t3"},
            {"role": "assistant", "content": "you are welcome", "timestamp": "t4"},
        ]
        text = "".join(json.dumps(line) + "\n" for line in lines)
        (folder / f"cli_{n}.jsonl").write_text(text, encoding="utf-8")
    time.sleep(SETTLED_S)
    return folder


# --- phases (each runs in its own process) ---------------------------------------------------


def _open(folder: Path, tokens: str | None, cache: bool) -> dict[str, Any]:
    """``sk.load`` plus the messages and sessions frames (sessionkit's lazy imports done
    before the clock starts)."""
    import sessionkit
    import sessionkit.store.loading

    load = sessionkit.load
    start = _clock()
    corpus = load(folder, tokens=tokens, cache=cache)  # type: ignore[arg-type]
    messages, sessions = corpus.messages, corpus.sessions
    timed = _since(start)
    counted = {"tokens": int(messages["tokens"].sum())} if tokens == "tiktoken" else {}
    return {**timed, "messages": len(messages), "sessions": len(sessions), **counted}


PHASES = {
    "nanobot": lambda folder: phase_nanobot(folder, 1),
    "floor": lambda folder: phase_floor(folder, os.cpu_count() or 1),
    "cold": lambda folder: _open(folder, "tiktoken", True),
    "warm": lambda folder: _open(folder, "tiktoken", True),
    "cold_none": lambda folder: _open(folder, None, True),
    "warm_none": lambda folder: _open(folder, None, True),
    "uncached": lambda folder: _open(folder, None, False),
}
CACHES = {"cold": "tokens", "warm": "tokens", "cold_none": "none", "warm_none": "none"}
"""The cache folder each phase uses (a warm phase follows its cold one in the same folder)."""


# --- driver ------------------------------------------------------------------------------------


def run_phase(name: str, folder: Path, cache: Path, timeout: float) -> dict[str, Any]:
    """One phase in a fresh interpreter with cache folder ``cache``; timed out: ``seconds``
    is None."""
    env = os.environ | {"SESSIONKIT_CACHE_DIR": str(cache)}
    command = [sys.executable, __file__, "--phase", name, "--store", str(folder)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=env, check=False, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"seconds": None, "timeout": timeout}
    if done.returncode != 0:
        raise RuntimeError(f"phase {name} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_size(n_files: int, repeats: int, timeout: float) -> dict[str, Any]:
    """Every phase on the store of ``n_files``, ``repeats`` times; medians per phase."""
    folder = tiny_store(n_files)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in PHASES}
    for repeat in range(repeats):
        with tempfile.TemporaryDirectory(prefix="sessionkit-bench-cold-") as work:
            for name in PHASES:
                cache = Path(work) / CACHES.get(name, f"unused-{name}")
                result = run_phase(name, folder, cache, timeout)
                runs[name].append(result)
                shown = "timed out" if result["seconds"] is None else f"{result['seconds']:.2f} s"
                print(f"  {n_files:>6} [{repeat + 1}/{repeats}] {name:<10} {shown}", flush=True)
    for floor, cold in zip(runs["floor"], runs["cold"], strict=True):
        if (
            None not in (floor["seconds"], cold["seconds"])
            and floor["floor_tokens"] != cold["tokens"]
        ):
            raise AssertionError(
                f"{n_files} files: the floor counted {floor['floor_tokens']:,} tokens, the cold "
                f"open {cold['tokens']:,}: not the same payloads"
            )
    store_bytes = sum(p.stat().st_size for p in folder.glob("*.jsonl"))
    return {"files": n_files, "store_bytes": store_bytes, "phases": _medians(runs)}


def _medians(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per phase: median seconds and peak RSS over runs (None when any run timed out)."""
    summary = {}
    for name, results in runs.items():
        if any(r["seconds"] is None for r in results):
            summary[name] = {"seconds": None, "timeout": results[0].get("timeout"), "runs": results}
            continue
        summary[name] = {
            "seconds": statistics.median(r["seconds"] for r in results),
            "cpu_seconds": statistics.median(r["cpu_seconds"] for r in results),
            "peak_rss": statistics.median(r["peak_rss"] for r in results),
            "peak_rss_worker": statistics.median(r["peak_rss_worker"] for r in results),
            "messages": results[0]["messages"],
            "runs": results,
        }
    return summary


def ratios(size: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Each phase's time and peak RSS (parent plus largest worker) over nanobot's, and its
    time over the floor's."""
    phases = size["phases"]
    nanobot, floor = phases["nanobot"], phases["floor"]
    found = {}
    for name, phase in phases.items():
        if phase["seconds"] is None or nanobot["seconds"] is None:
            found[name] = {"time": None, "cpu": None, "rss": None, "floor": None}
            continue
        rss = (phase["peak_rss"] + phase["peak_rss_worker"]) / nanobot["peak_rss"]
        found[name] = {
            "time": phase["seconds"] / nanobot["seconds"],
            "cpu": phase["cpu_seconds"] / nanobot["cpu_seconds"],
            "rss": 1.0 if name == "nanobot" else rss,
            "floor": None if floor["seconds"] is None else phase["seconds"] / floor["seconds"],
        }
    return found


def growth(sizes: list[dict[str, Any]], phase: str, field: str = "seconds") -> list[float | None]:
    """Time (or ``field``) at each size over that at the size before (one per doubling)."""
    times = [s["phases"][phase].get(field) for s in sizes]
    return [b / a if a and b else None for a, b in zip(times, times[1:], strict=False)]


def targets(sizes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 23's targets for many tiny files: measured value, goal, met."""

    def row(what: str, value: float | None, goal: float) -> dict[str, Any]:
        met = value is not None and value <= goal
        shown = None if value is None else round(value, 3)
        return {"target": what, "value": shown, "goal": goal, "met": met}

    largest = sizes[-1]
    last = ratios(largest)
    rows = []
    for phase in ("cold", "warm"):
        steps = growth(sizes, phase)
        worst = None if None in steps or not steps else max(steps)  # type: ignore[type-var]
        rows.append(row(f"{phase}: worst time growth per doubling of files", worst, 2.2))
    n = f"{largest['files']:,}"
    rows.append(row(f"{n} files cold / nanobot's load", last["cold"]["time"], 2.0))
    rows.append(row(f"{n} files warm / nanobot's load", last["warm"]["time"], 0.25))
    return rows


def report(result: dict[str, Any]) -> str:
    """The printed table: per size and phase, seconds, ratio to nanobot, peak RSS."""
    lines = [
        f"{result['repeats']} run(s) each, medians; {result['cpus']} CPUs; "
        f"1-min load average before: {result['loadavg_before']:.1f}",
        "",
        f"{'files':>7} {'phase':<10} {'seconds':>8} {'x nanobot':>9} {'CPU s':>7} {'CPU x nb':>8} "
        f"{'parent MiB':>10} {'worker MiB':>10} {'RSS x nb':>8} {'x floor':>7}",
    ]
    for size in result["sizes"]:
        found = ratios(size)
        for name, phase in size["phases"].items():
            if phase["seconds"] is None:
                lines.append(f"{size['files']:>7} {name:<10} {'> ' + str(phase['timeout']):>8}")
                continue
            r = found.get(name, {})
            time_x, cpu_x, rss_x, floor_x = (
                f"{r[k]:.2f}" if r.get(k) is not None else "-"
                for k in ("time", "cpu", "rss", "floor")
            )
            lines.append(
                f"{size['files']:>7} {name:<10} {phase['seconds']:>8.2f} {time_x:>9} "
                f"{phase['cpu_seconds']:>7.2f} {cpu_x:>8} "
                f"{phase['peak_rss'] / MIB:>10.0f} {phase['peak_rss_worker'] / MIB:>10.0f} "
                f"{rss_x:>8} {floor_x:>7}"
            )
    lines.append("")
    for phase in ("cold", "warm", "cold_none", "warm_none", "uncached", "nanobot", "floor"):
        for field in ("seconds", "cpu_seconds"):
            found = growth(result["sizes"], phase, field)
            steps = ", ".join("-" if g is None else f"{g:.2f}" for g in found)
            lines.append(f"growth per doubling, {phase:<10} {field:<11} {steps}")
    lines += ["", f"{'target':<48} {'value':>8} {'goal':>6}  met"]
    for t in result["targets"]:
        value = "-" if t["value"] is None else f"{t['value']:.3f}"
        lines.append(f"{t['target']:<48} {value:>8} {t['goal']:>6}  {'yes' if t['met'] else 'NO'}")
    lines.append("")
    for size in result["sizes"]:
        cold, floor = size["phases"]["cold"], size["phases"]["floor"]
        if cold["seconds"] is not None and floor["seconds"] is not None:
            lines.append(
                f"{size['files']:>7} files: cold open with exact tokens {cold['seconds']:.2f} s, "
                f"the floor {floor['seconds']:.2f} s: {cold['seconds'] / floor['seconds']:.2f}x"
            )
    after = ", ".join(f"{x:.2f}" for x in result["loadavg_after"])
    lines.append(f"load average (1, 5, 15 min) after the run: {after}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", help="store sizes in files")
    parser.add_argument("--quick", action="store_true", help="1,250 / 2,500 / 5,000 files, once")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per phase")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--store", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps({**PHASES[args.phase](args.store), **_peak_rss()}))
        return
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    repeats = 1 if args.quick else args.repeats
    load = os.getloadavg()[0]
    measured = [measure_size(n, repeats, args.timeout) for n in sorted(sizes)]
    result = {
        "when": datetime.now().isoformat(timespec="seconds"),
        "repeats": repeats,
        "cpus": os.cpu_count(),
        "loadavg_before": load,
        "loadavg_after": os.getloadavg(),
        "sizes": measured,
        "targets": targets(measured),
    }
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    out = args.out or RESULTS / f"bench_cold-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print()
    print(report(result))
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
