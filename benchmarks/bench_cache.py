"""Benchmark: what the prompt-cache columns and ``sk.cost`` add to a requests frame (issue #35).

``sk.requests`` always fills ``time``, ``time_inferred`` and the cache columns
(``cache_read_tokens``, ``cache_write_tokens``, ``cache_break``), so this times those steps
inside the real build: in the benchmark's process the functions ``sessionkit.calls.frame``
calls for them (``turn_span`` and ``call_times`` for the times, ``_cached`` for the rules,
each session's config and :func:`sessionkit.calls.caching.cache_columns`) are wrapped with
timers, and the frame without them is the whole call less those steps.  ``sk.cost`` (which
works the cache columns out again for its model) is timed on the frame.  The overhead is
(times + cache columns + cost) / (the frame without them).

On a generated corpus (default 1,000 sessions, 400,000 messages, nanobot 0.2.2 sessions),
the 3 x 3 grid of ``bench_requests`` (max_messages 60/120/240 x max_tokens 0/8k/32k) under
``cache_rules="anthropic"`` (breakpoints: the slower family; ``--rules openai`` for the other)
priced with a Claude model:

- cold: a fresh process with an empty cache folder (index, token counts, kits and calls all
  built), load, then ``sk.requests`` and ``sk.cost`` once;
- warm: the same process again, ``--repeats`` times, each with another ``cache_ttl`` (300 s,
  then 299 s, ...: all within Anthropic's 5-minute write price) so no final result could be
  reused; medians.

Wall and CPU seconds (this process and its finished children) are both reported: the machine
is shared, and CPU seconds vary less with its load.

Peak RSS of the process is reported.  nanobot has no counterpart (it computes no cache
columns), so nothing of its is timed.  Run: ``python benchmarks/bench_cache.py`` (``--help``
for options); prints a table and writes JSON to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corpus import add_corpus_options, chosen_corpus, ensure_corpus

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
GRID: dict[str, Any] = {"max_messages": [60, 120, 240], "max_tokens": [0, 8000, 32000]}
MODEL = "claude-sonnet-4-5"
TTL = 300.0
TARGET = 0.20
TIMED = {"turn_span": "times", "call_times": "times", "_cached": "cache"}
"""The functions of ``sessionkit.calls.frame`` timed apart, and the step each belongs to."""


def _peak_rss_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (forked workers, releases)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _instrumented() -> dict[str, float]:
    """Wrap the timed steps of ``sessionkit.calls.frame`` with timers; wall and CPU seconds
    per step."""
    from sessionkit.calls import frame

    spent = {"times": 0.0, "cache": 0.0, "times_cpu": 0.0, "cache_cpu": 0.0}

    def timer(step: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start, cpu = time.perf_counter(), _cpu_s()
            try:
                return function(*args, **kwargs)
            finally:
                spent[step] += time.perf_counter() - start
                spent[f"{step}_cpu"] += _cpu_s() - cpu

        return timed

    for name, step in TIMED.items():
        setattr(frame, name, timer(step, getattr(frame, name)))
    return spent


def _one(
    sk: Any, sessions: list[Any], workspace: Path, rules: str, ttl: float, spent: dict[str, float]
) -> dict[str, Any]:
    """One requests frame under ``rules`` and ``ttl`` and its cost: wall and CPU seconds of
    each step."""
    for step in spent:
        spent[step] = 0.0
    start, cpu = time.perf_counter(), _cpu_s()
    rows = sk.requests(sessions, workspace=workspace, grid=GRID, cache_rules=rules, cache_ttl=ttl)
    whole, whole_cpu = time.perf_counter() - start, _cpu_s() - cpu
    start, cpu = time.perf_counter(), _cpu_s()
    priced = sk.cost(rows, model=MODEL, cache_ttl=ttl)
    cost, cost_cpu = time.perf_counter() - start, _cpu_s() - cpu
    if len(priced.problems) or priced["cost_usd"].isna().any():
        raise RuntimeError(f"{MODEL} left calls unpriced: {priced.problems}")
    return {
        "requests_s": whole,
        "times_s": spent["times"],
        "cache_s": spent["cache"],
        "cost_s": cost,
        "frame_s": whole - spent["times"] - spent["cache"],
        "requests_cpu_s": whole_cpu,
        "times_cpu_s": spent["times_cpu"],
        "cache_cpu_s": spent["cache_cpu"],
        "cost_cpu_s": cost_cpu,
        "frame_cpu_s": whole_cpu - spent["times_cpu"] - spent["cache_cpu"],
        "calls": len(rows),
        "read": int(rows["cache_read_tokens"].sum()),
        "usd": float(priced["cost_usd"].sum()),
    }


def phase_run(folder: Path, workspace: Path, rules: str, repeats: int) -> dict[str, Any]:
    """Cold (empty caches) and warm frames with their cost, each under another TTL."""
    spent = _instrumented()
    import sessionkit as sk

    start = time.perf_counter()
    sessions = list(sk.load(folder))
    load_s = time.perf_counter() - start
    cold = _one(sk, sessions, workspace, rules, TTL, spent)
    warm = [_one(sk, sessions, workspace, rules, TTL - 1 - i, spent) for i in range(repeats)]
    return {
        "sessions": len(sessions),
        "messages": int(sum(len(s) for s in sessions)),
        "load_s": load_s,
        "cold": cold,
        "warm": warm,
        "peak_rss_mib": _peak_rss_mib(),
    }


def _overhead(run: dict[str, float], unit: str = "s") -> float:
    """(times + cache columns + cost) / the frame without them, in wall or CPU seconds."""
    added = run[f"times_{unit}"] + run[f"cache_{unit}"] + run[f"cost_{unit}"]
    return added / run[f"frame_{unit}"]


def _report(result: dict[str, Any]) -> str:
    r = result["run"]
    warm = {k: statistics.median(w[k] for w in r["warm"]) for k in r["cold"]}
    lines = [
        f"corpus: {r['sessions']:,} sessions, {r['messages']:,} messages; 3x3 grid: "
        f"{r['cold']['calls']:,} calls (load {r['load_s']:.1f} s); "
        f"cache_rules={result['rules']!r}, cost with {MODEL!r}",
        "",
        "wall (CPU) seconds | requests | frame without | times | cache columns | sk.cost "
        "| overhead wall (CPU)",
    ]
    for name, run, runs in (
        ("cold", r["cold"], [r["cold"]]),
        (f"warm, median of {len(r['warm'])}", warm, r["warm"]),
    ):
        over = statistics.median(_overhead(x) for x in runs)
        over_cpu = statistics.median(_overhead(x, "cpu_s") for x in runs)
        cells = [
            f"{run[f'{k}_s']:.2f} ({run[f'{k}_cpu_s']:.2f})"
            for k in ("requests", "frame", "times", "cache", "cost")
        ]
        verdict = "ok" if max(over, over_cpu) <= TARGET else "OVER"
        lines.append(
            f"{name} | {' | '.join(cells)} | {over:.1%} ({over_cpu:.1%}) {verdict} "
            f"(target {TARGET:.0%})"
        )
    lines.append(
        "TTLs (s) and cache reads: "
        + ", ".join(
            f"{TTL - i:.0f}: {run['read']:,}" for i, run in enumerate([r["cold"], *r["warm"]])
        )
    )
    lines.append(f"peak RSS {r['peak_rss_mib']:,.0f} MiB")
    load = result["loadavg_before"], os.getloadavg()[0]
    lines.append(
        f"load average before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} cores"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_options(parser)
    parser.add_argument("--repeats", type=int, default=5, help="warm runs, each another TTL")
    parser.add_argument("--rules", choices=["anthropic", "openai"], default="anthropic")
    parser.add_argument("--phase", choices=["run"], help=argparse.SUPPRESS)
    parser.add_argument("--workspace", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    folder = chosen_corpus(args)
    if args.phase == "run":
        print(json.dumps(phase_run(folder, args.workspace, args.rules, args.repeats)))
        return
    ensure_corpus(folder, args.sessions, args.messages, args.seed)
    result: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "corpus": str(folder),
        "rules": args.rules,
    }
    with (
        tempfile.TemporaryDirectory(prefix="sessionkit-bench-cache-") as cache,
        tempfile.TemporaryDirectory(prefix="sessionkit-bench-workspace-") as scratch,
    ):
        workspace = Path(scratch) / "workspace"  # no config.json beside it
        workspace.mkdir()
        command = [sys.executable, __file__, "--phase", "run", "--corpus", str(folder)]
        command += ["--workspace", str(workspace), "--repeats", str(args.repeats)]
        command += ["--rules", args.rules]
        result["loadavg_before"] = os.getloadavg()[0]
        print("cold and warm (fresh process, empty cache folder) ...", flush=True)
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=os.environ | {"SESSIONKIT_CACHE_DIR": cache},
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the run failed:\n{done.stderr[-4000:]}")
        result["run"] = json.loads(done.stdout.strip().splitlines()[-1])
    result["machine"] = {"cpus": os.cpu_count(), "load_average": os.getloadavg()}
    print(_report(result))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"bench_cache-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
