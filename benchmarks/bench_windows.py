"""Benchmark: every-user-turn replay windows, sessionkit's sweep against each release's get_history.

On a generated corpus (default 1,000 sessions, 400,000 messages; ``--sessions``/``--messages``
for a smaller one) this measures, for each release (nanobot-0.2, nanobot-0.3.0, nanobot-0.3.5,
each with its own default count window: 120, 2000, none) and max_tokens 0/8k/32k:

- the whole grid (3 releases x 3 budgets) over the whole corpus, in a fresh process: cold
  (empty token cache), warm (prepared sessions cached) and with only the token cache warm
  (sessions prepared again, as after reloading them), with peak memory;
- windows per second for each release and budget: sessionkit over the whole corpus (prepared
  sessions cached) and, on the same sampled sessions, the release's own
  ``Session.get_history`` called once per user turn: nanobot-ai 0.2.2 in this process, 0.3.0
  and 0.3.5 in their own environments (``tests/support/releases.py``, timed inside that
  subprocess), plus sessionkit's exact policy for 0.3.x as an in-process stand-in.  Every
  window size is checked to agree with sessionkit's.

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

import sessionkit

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
RELEASES = ("nanobot-0.2", "nanobot-0.3.0", "nanobot-0.3.5")
VERSIONS = {"nanobot-0.3.0": "0.3.0", "nanobot-0.3.5": "0.3.5"}
MAX_TOKENS = (0, 8000, 32000)
TARGET = {0: 100, 8000: 1000, 32000: 1000}


def history_kwargs(policy: str, budget: int) -> dict[str, Any]:
    """The ``get_history`` arguments timed for ``policy``: its own defaults (its count window)
    and the budget, as the release object resolves them."""
    release = sessionkit.get_policy(policy)
    return release.history_kwargs(sessionkit.HistorySettings(max_tokens=budget))


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
    from sessionkit.simulate.windowing import windows
    from sessionkit.store.memo import clear

    load_s, sessions = _timed(lambda: _load(folder))
    rss_loaded = _peak_rss_mib()["process"]

    def full() -> Any:
        return windows(
            sessions,
            grid={"policy": list(RELEASES), "max_tokens": list(MAX_TOKENS)},
            workers=workers,
        )

    cpu = _cpu_s()
    cold_s, frame = _timed(full)
    cold_cpu_s = _cpu_s() - cpu
    warm_s = min(_timed(full)[0] for _ in range(repeats))
    clear()
    cpu = _cpu_s()
    token_warm_s, _ = _timed(full)
    token_warm_cpu_s = _cpu_s() - cpu
    per_setting = {}
    for policy in RELEASES:
        for budget in MAX_TOKENS:
            times = []
            for _ in range(repeats):
                seconds, rows = _timed(
                    lambda p=policy, b=budget: windows(sessions, policy=p, max_tokens=b)
                )
                times.append(seconds)
            per_setting[f"{policy}/{budget}"] = len(rows) / statistics.median(times)
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


def _turns(sample: list[Any], frame: Any, policy: str) -> dict[str, list[tuple[int, int]]]:
    """Per session, every user turn's ``(at, offset in force)`` as sessionkit replays it."""
    rows = frame[(frame["policy"] == policy) & (frame["max_tokens"] == MAX_TOKENS[0])]
    return {
        s.key: list(
            zip(
                *(rows.loc[rows["session_key"] == s.key, c] for c in ("at", "consolidated")),
                strict=True,
            )
        )
        for s in sample
    }


def _nanobot_022(sample: list[Any], turns: dict[str, list[tuple[int, int]]]) -> dict[str, Any]:
    """nanobot-ai 0.2.2's own get_history per turn, in this process (it is in the venv)."""
    from nanobot.session.manager import Session as NanobotSession

    results = {}
    for budget in MAX_TOKENS:
        seconds, sizes = 0.0, []
        for session in sample:
            nb = NanobotSession(key=session.key, messages=[])
            for at, offset in turns[session.key]:
                nb.messages = session.messages[:at]
                nb.last_consolidated = int(offset)
                start = time.perf_counter()
                history = nb.get_history(**history_kwargs("nanobot-0.2", budget))
                seconds += time.perf_counter() - start
                sizes.append(len(history))
        results[str(budget)] = {"seconds": seconds, "sizes": sizes}
    return results


def _exact_policy(
    sample: list[Any], turns: dict[str, list[tuple[int, int]]], policy: str
) -> dict[str, Any]:
    """sessionkit's exact policy per turn: the in-process stand-in for a release."""
    from sessionkit.nanobot.policies import get_policy

    exact = get_policy(policy)
    results = {}
    for budget in MAX_TOKENS:
        seconds, sizes = 0.0, []
        for session in sample:
            for at, offset in turns[session.key]:
                start = time.perf_counter()
                history = exact.get_history(
                    session.messages[:at], int(offset), **history_kwargs(policy, budget)
                )
                seconds += time.perf_counter() - start
                sizes.append(len(history))
        results[str(budget)] = {"seconds": seconds, "sizes": sizes}
    return results


def _release_own(
    sample: list[Any], turns: dict[str, list[tuple[int, int]]], policy: str
) -> dict[str, Any] | str:
    """The release's own get_history per turn, timed inside its own environment (or why not)."""
    sys.path.insert(0, str(HERE.parent / "tests"))  # the tests' support package
    from support.releases import ReleaseUnavailable, build_release

    try:
        python = build_release(VERSIONS[policy]).python
    except (ReleaseUnavailable, subprocess.CalledProcessError, OSError) as error:
        return f"{policy} environment unavailable: {error}"
    request = {
        "sessions": [
            {
                "key": s.key,
                "messages": s.messages,
                "offsets": [[int(a), int(o)] for a, o in turns[s.key]],
            }
            for s in sample
        ],
        "calls": [{"label": str(b), "kwargs": history_kwargs(policy, b)} for b in MAX_TOKENS],
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    done = subprocess.run(
        [str(python), "-I", str(HERE / "release_timer.py")],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    reply = json.loads(done.stdout)
    if reply["nanobot"] != VERSIONS[policy]:
        raise RuntimeError(f"{policy}: the timer imported nanobot {reply['nanobot']}")
    return reply["results"]


def _rates(results: dict[str, Any] | str, expected: dict[str, list[int]]) -> dict[str, Any]:
    """Windows per second per budget, after checking every window size against sessionkit's."""
    if isinstance(results, str):
        return {"unavailable": results}
    for label, result in results.items():
        assert result["sizes"] == expected[label], f"window sizes differ at max_tokens={label}"
    return {label: len(r["sizes"]) / r["seconds"] for label, r in results.items()}


def versus_nanobot(folder: Path, n_sample: int, seed: int) -> dict[str, Any]:
    """Per-turn get_history by each release and by sessionkit on the same sampled sessions."""
    _offline_tiktoken_for_nanobot()
    from sessionkit.simulate.windowing import windows

    sessions = _load(folder)
    turns = np.array([s.n_user_turns for s in sessions], dtype=float)
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(sessions), size=n_sample, replace=False, p=turns / turns.sum())
    sample = [sessions[i] for i in sorted(picked)]
    frame = windows(
        sample, grid={"policy": list(RELEASES), "max_tokens": list(MAX_TOKENS)}, workers=1
    )
    out: dict[str, Any] = {
        "sample_sessions": len(sample),
        "sample_turns": int(sum(s.n_user_turns for s in sample)),
    }
    for policy in RELEASES:
        by_turn = _turns(sample, frame, policy)
        rows = frame[frame["policy"] == policy]
        expected = {
            str(b): rows.loc[rows["max_tokens"] == b, "messages_kept"].tolist() for b in MAX_TOKENS
        }
        ours = {}
        for budget in MAX_TOKENS:
            seconds, got = _timed(
                lambda p=policy, b=budget: windows(sample, policy=p, max_tokens=b)
            )
            ours[str(budget)] = len(got) / seconds
        entry: dict[str, Any] = {"sessionkit_windows_per_s_on_sample": ours}
        if policy == "nanobot-0.2":
            entry["nanobot_windows_per_s"] = _rates(_nanobot_022(sample, by_turn), expected)
        else:
            entry["exact_policy_windows_per_s"] = _rates(
                _exact_policy(sample, by_turn, policy), expected
            )
            entry["nanobot_windows_per_s"] = _rates(_release_own(sample, by_turn, policy), expected)
        out[policy] = entry
    return out


def _report(result: dict[str, Any]) -> str:
    s, v = result["sweep"], result["nanobot"]
    lines = [
        f"corpus: {s['sessions']:,} sessions, {s['messages']:,} messages, "
        f"{s['user_turns']:,} user turns (load {s['load_s']:.1f} s); "
        f"sample: {v['sample_sessions']} sessions, {v['sample_turns']:,} turns",
        "",
        "release/max_tokens | sessionkit w/s (corpus) | sessionkit w/s (sample) | "
        "exact policy w/s (sample) | nanobot w/s (sample) | ratio | target",
    ]
    for key, rate in s["windows_per_s"].items():
        policy, budget = key.split("/")
        entry = v[policy]
        nb = entry["nanobot_windows_per_s"].get(budget)
        exact = entry.get("exact_policy_windows_per_s", {}).get(budget)
        verdict = "-"
        if nb:
            verdict = f"{rate / nb:>7,.0f}x | >= {TARGET[int(budget)]}x " + (
                "ok" if rate / nb >= TARGET[int(budget)] else "MISSED"
            )
        lines.append(
            f"{key:>22} | {rate:>23,.0f} | {entry['sessionkit_windows_per_s_on_sample'][budget]:>23,.0f}"
            f" | {exact or 0:>25,.0f} | {nb or 0:>20,.0f} | {verdict}"
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
    print("each release's per-turn get_history on the sample ...", flush=True)
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
