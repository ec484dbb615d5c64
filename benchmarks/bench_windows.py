"""Benchmark: every-user-turn replay windows, sessionkit's sweep against nanobot's get_history.

On a generated corpus (default 1,000 sessions, 400,000 messages) this measures:

- the full 3 x 3 grid (max_messages 60/120/240 x max_tokens 0/8k/32k, include_timestamps=True
  as nanobot's agent loop passes it) over the whole corpus, in a fresh process: cold (empty
  token cache), warm (prepared sessions cached) and with only the token cache warm (sessions
  prepared again, as after reloading them), with peak memory;
- windows per second for each setting: sessionkit over the whole corpus (prepared sessions
  cached) and, on the same sampled sessions, nanobot 0.2.2's own ``Session.get_history``
  called once per user turn (checked to agree with sessionkit's window sizes).

Run: ``python benchmarks/bench_windows.py`` (``--help`` for options).  Prints a table and
writes JSON to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from corpus import add_corpus_options, chosen_corpus, ensure_corpus

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MAX_MESSAGES = (60, 120, 240)
MAX_TOKENS = (0, 8000, 32000)
TARGET = {0: 100, 8000: 1000, 32000: 1000}


def _peak_rss_mib() -> dict[str, float]:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"process": round(own, 1), "largest_worker": round(children, 1)}


def _load(folder: Path) -> list[Any]:
    import sessionkit

    return list(sessionkit.load(folder, tokens=None))


def _timed(call: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def _cpu_s() -> float:
    """CPU seconds used so far by this process and its finished workers."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def sweep(folder: Path, workers: int, repeats: int) -> dict[str, Any]:
    """The whole-corpus measurements (run in a fresh process for a cold token cache)."""
    from sessionkit.replay import clear_cache
    from sessionkit.windowing import windows

    load_s, sessions = _timed(lambda: _load(folder))
    rss_loaded = _peak_rss_mib()["process"]
    grid = {"max_messages": list(MAX_MESSAGES), "max_tokens": list(MAX_TOKENS)}

    def full() -> Any:
        return windows(sessions, **grid, include_timestamps=True, workers=workers)

    cpu = _cpu_s()
    cold_s, frame = _timed(full)
    cold_cpu_s = _cpu_s() - cpu
    warm_s = min(_timed(full)[0] for _ in range(repeats))
    clear_cache()
    cpu = _cpu_s()
    token_warm_s, _ = _timed(full)
    token_warm_cpu_s = _cpu_s() - cpu
    per_setting = {}
    for count in MAX_MESSAGES:
        for budget in MAX_TOKENS:
            times = []
            for _ in range(repeats):
                seconds, rows = _timed(
                    lambda c=count, b=budget: windows(
                        sessions, max_messages=c, max_tokens=b, include_timestamps=True
                    )
                )
                times.append(seconds)
            per_setting[f"{count}/{budget}"] = len(rows) / statistics.median(times)
    return {
        "sessions": len(sessions),
        "messages": sum(len(s.messages) for s in sessions),
        "user_turns": int(sum(s.n_user_turns for s in sessions)),
        "load_s": load_s,
        "grid_windows": len(frame),
        "grid_cold_s": cold_s,
        "grid_cold_cpu_s": cold_cpu_s,
        "grid_warm_s": warm_s,
        "grid_token_cache_warm_s": token_warm_s,
        "grid_token_cache_warm_cpu_s": token_warm_cpu_s,
        "windows_per_s": per_setting,
        "peak_rss_mib": _peak_rss_mib() | {"after_load": rss_loaded},
    }


def _offline_tiktoken_for_nanobot() -> None:
    """nanobot downloads cl100k on first use; seed tiktoken's cache from the offline copy."""
    cache = Path(tempfile.mkdtemp(prefix="sessionkit-bench-tiktoken-"))
    bpe = resources.files("tiktoken_ext").joinpath("data").joinpath("cl100k_base.tiktoken")
    with resources.as_file(bpe) as path:
        shutil.copyfile(path, cache / "9b5ad71b2ce5302211f9c61530b329a4922fc6a4")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)


def versus_nanobot(folder: Path, n_sample: int, seed: int) -> dict[str, Any]:
    """Per-turn get_history by nanobot and by sessionkit on the same sampled sessions."""
    _offline_tiktoken_for_nanobot()
    from nanobot.session.manager import Session as NanobotSession

    from sessionkit.windowing import windows

    sessions = _load(folder)
    turns = np.array([s.n_user_turns for s in sessions], dtype=float)
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(sessions), size=n_sample, replace=False, p=turns / turns.sum())
    sample = [sessions[i] for i in sorted(picked)]
    frame = windows(
        sample,
        max_messages=list(MAX_MESSAGES),
        max_tokens=list(MAX_TOKENS),
        include_timestamps=True,
        workers=1,
    )
    sizes = frame.set_index(["session_key", "at", "max_messages", "max_tokens"])["messages_kept"]
    ours: dict[str, float] = {}
    theirs: dict[str, float] = {}
    for count in MAX_MESSAGES:
        for budget in MAX_TOKENS:
            seconds, n_windows = 0.0, 0
            for session in sample:
                nb = NanobotSession(key=session.key, messages=[])
                users = [i for i, m in enumerate(session.messages) if m.get("role") == "user"]
                for at in users:
                    offset = session.last_consolidated
                    nb.messages = session.messages[:at]
                    nb.last_consolidated = offset if offset <= at else 0
                    start = time.perf_counter()
                    history = nb.get_history(count, max_tokens=budget, include_timestamps=True)
                    seconds += time.perf_counter() - start
                    n_windows += 1
                    assert len(history) == sizes[(session.key, at, count, budget)]
            theirs[f"{count}/{budget}"] = n_windows / seconds
            ours_s, rows = _timed(
                lambda c=count, b=budget: windows(
                    sample, max_messages=c, max_tokens=b, include_timestamps=True
                )
            )
            ours[f"{count}/{budget}"] = len(rows) / ours_s
    return {
        "sample_sessions": len(sample),
        "sample_turns": int(sum(s.n_user_turns for s in sample)),
        "nanobot_windows_per_s": theirs,
        "sessionkit_windows_per_s_on_sample": ours,
    }


def _report(result: dict[str, Any]) -> str:
    s, v = result["sweep"], result["nanobot"]
    lines = [
        f"corpus: {s['sessions']:,} sessions, {s['messages']:,} messages, "
        f"{s['user_turns']:,} user turns (load {s['load_s']:.1f} s); "
        f"nanobot sample: {v['sample_sessions']} sessions, {v['sample_turns']:,} turns",
        "",
        "max_messages/max_tokens | sessionkit w/s (corpus) | sessionkit w/s (sample) | "
        "nanobot w/s (sample) | ratio | target",
    ]
    for key, rate in s["windows_per_s"].items():
        budget = int(key.split("/")[1])
        nb = v["nanobot_windows_per_s"][key]
        ratio = rate / nb
        verdict = "ok" if ratio >= TARGET[budget] else "MISSED"
        lines.append(
            f"{key:>23} | {rate:>23,.0f} | {v['sessionkit_windows_per_s_on_sample'][key]:>23,.0f}"
            f" | {nb:>20,.0f} | {ratio:>7,.0f}x | >= {TARGET[budget]}x {verdict}"
        )
    rss = s["peak_rss_mib"]
    lines += [
        "",
        f"full grid ({s['grid_windows']:,} windows): cold {s['grid_cold_s']:.1f} s "
        f"({s['grid_cold_cpu_s']:.0f} CPU s), warm {s['grid_warm_s']:.2f} s, token cache warm "
        f"only {s['grid_token_cache_warm_s']:.1f} s ({s['grid_token_cache_warm_cpu_s']:.0f} CPU s)",
        f"peak RSS: {rss['process']:,.0f} MiB (sweep process; {rss['after_load']:,.0f} MiB once "
        f"the corpus was loaded), {rss['largest_worker']:,.0f} MiB (largest forked worker)",
        f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_options(parser)
    parser.add_argument("--sample", type=int, default=12, help="sessions timed with nanobot")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--phase", choices=["all", "sweep"], default="all", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    folder = chosen_corpus(args)
    if args.phase == "sweep":
        print(json.dumps(sweep(folder, args.workers, args.repeats)))
        return
    ensure_corpus(folder, args.sessions, args.messages, args.seed)
    command = [sys.executable, __file__, "--phase", "sweep", "--corpus", str(folder)]
    command += ["--workers", str(args.workers), "--repeats", str(args.repeats)]
    print("whole-corpus sweep (fresh process, cold token cache) ...", flush=True)
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result = {"sweep": json.loads(done.stdout.strip().splitlines()[-1])}
    print("nanobot per-turn get_history on the sample ...", flush=True)
    result["nanobot"] = versus_nanobot(folder, args.sample, args.seed)
    result["machine"] = {"cpus": os.cpu_count(), "load_average": os.getloadavg()}
    report = _report(result)
    print(report)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"bench_windows-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
