"""Benchmark: ``sk.requests`` (every LLM call's whole request, by part) against nanobot 0.2.2
building each request itself.

On a generated corpus (default 1,000 sessions, 400,000 messages, nanobot 0.2.2 sessions) this
measures, each phase in a fresh process with an empty cache folder of its own:

- ``sweep``: load, then ``sk.requests`` for one setting (0.2.2's defaults: 120 messages, no
  token budget) and for a 3 x 3 grid (max_messages 60/120/240 x max_tokens 0/8k/32k), cold
  (kits asked from the release, every message replayed and counted, every session's calls
  rebuilt; the first windows are timed apart) and warm (again in the same process), peak
  memory, and a cProfile of the warm one-setting call: where its time goes;
- ``reopen``: a new process on the same cache folder (index, token counts and kits on disk;
  each session's calls are kept in memory only, so they are rebuilt);
- ``nanobot``: nanobot-ai 0.2.2's own code per call, in this venv: ``Session.get_history``,
  ``ContextBuilder.build_messages`` (system prompt, history, current message with its runtime
  context), the turn's earlier tool rounds appended, ``estimate_prompt_tokens`` with the
  release's tool definitions.  It is timed on a sample of calls for each of the nine
  settings and extrapolated to every call (seconds per call x calls); the history sizes are
  checked against sessionkit's, and the release's whole-request estimate is compared with
  the frame's total (per-part sums of per-message estimates).

Both sides use one temporary workspace (nanobot's ``ContextBuilder`` creates ``memory/`` in
its workspace; the corpus is never written to).  Run: ``python benchmarks/bench_requests.py``
(``--help`` for options); prints a table and writes JSON to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
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
GRID: dict[str, Any] = {"max_messages": [60, 120, 240], "max_tokens": [0, 8000, 32000]}
ONE: dict[str, Any] = {"max_messages": 120, "max_tokens": 0}
TARGET_WARM_S = 2.0
_BPE_CACHE_NAME = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"  # sha1 of cl100k's download URL


def _peak_rss_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (forked workers)."""
    own, workers = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def _timed(call: Any) -> tuple[float, float, Any]:
    """Wall seconds, CPU seconds (with forked workers) and the result of ``call()``."""
    cpu, start = _cpu_s(), time.perf_counter()
    result = call()
    return time.perf_counter() - start, _cpu_s() - cpu, result


def _profile(call: Any, top: int = 14) -> list[dict[str, Any]]:
    """The functions taking most cumulative time in ``call()`` (cProfile, so slower)."""
    profiler = cProfile.Profile()
    profiler.runcall(call)
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = []
    for (path, line, name), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = path.split("site-packages/")[-1].split("/main/")[-1]
        rows.append(
            {
                "function": f"{where}:{line}({name})",
                "calls": calls,
                "own_s": own,
                "cum_s": cumulative,
            }
        )
    rows.sort(key=lambda r: -r["cum_s"])
    return [r for r in rows if not r["function"].startswith("~")][:top]


def phase_sweep(folder: Path, workspace: Path, repeats: int) -> dict[str, Any]:
    """Cold and warm sk.requests for one setting and the grid, and the warm call's profile."""
    import sessionkit as sk

    load_s, load_cpu, corpus = _timed(lambda: sk.load(folder))
    sessions = list(corpus)
    windows_s, windows_cpu, _ = _timed(lambda: sk.windows(sessions, **ONE))

    def one() -> Any:
        return sk.requests(sessions, workspace=workspace, **ONE)

    def grid() -> Any:
        return sk.requests(sessions, workspace=workspace, **GRID)

    cold_s, cold_cpu, frame = _timed(one)
    rss_one = _peak_rss_mib()
    if not (frame["system_tokens"] > 0).all():
        raise RuntimeError("some calls have no kit: is nanobot-ai 0.2.2 installed here?")
    warm = [_timed(one)[0] for _ in range(repeats)]
    grid_cold_s, grid_cold_cpu, grid_frame = _timed(grid)
    grid_warm = [_timed(grid)[0] for _ in range(repeats)]
    return {
        "sessions": len(sessions),
        "messages": int(sum(len(s) for s in sessions)),
        "user_turns": int(sum(s.n_user_turns for s in sessions)),
        "calls_one_setting": len(frame),
        "calls_grid": len(grid_frame),
        "load_s": load_s,
        "load_cpu_s": load_cpu,
        "windows_cold_s": windows_s,
        "windows_cold_cpu_s": windows_cpu,
        "one_cold_s": cold_s,
        "one_cold_cpu_s": cold_cpu,
        "one_warm_s": min(warm),
        "one_warm_median_s": statistics.median(warm),
        "grid_cold_s": grid_cold_s,
        "grid_cold_cpu_s": grid_cold_cpu,
        "grid_warm_s": min(grid_warm),
        "grid_warm_median_s": statistics.median(grid_warm),
        "profile_one_warm": _profile(one),
        "peak_rss_mib": {"after_one_cold": rss_one, "end": _peak_rss_mib()},
        "totals": {
            "one": int(frame["total_tokens"].sum()),
            "grid": int(grid_frame["total_tokens"].sum()),
        },
    }


def phase_reopen(folder: Path, workspace: Path, repeats: int) -> dict[str, Any]:
    """A new process on the caches the sweep left: load, windows, requests, then warm."""
    import sessionkit as sk

    load_s, _, corpus = _timed(lambda: sk.load(folder))
    sessions = list(corpus)
    windows_s, _, _ = _timed(lambda: sk.windows(sessions, **ONE))
    first_s, first_cpu, frame = _timed(lambda: sk.requests(sessions, workspace=workspace, **ONE))
    warm = [
        _timed(lambda: sk.requests(sessions, workspace=workspace, **ONE))[0] for _ in range(repeats)
    ]
    return {
        "load_s": load_s,
        "windows_s": windows_s,
        "one_first_s": first_s,
        "one_first_cpu_s": first_cpu,
        "one_warm_s": min(warm),
        "calls": len(frame),
        "total": int(frame["total_tokens"].sum()),
        "peak_rss_mib": _peak_rss_mib(),
    }


def _nanobot_calls(
    sessions: list[Any], frame: Any, windows: Any, workspace: Path
) -> tuple[float, list[int], list[int]]:
    """nanobot 0.2.2 building and estimating each call of ``frame``: seconds spent in its
    code, the history sizes it replayed, and its whole-request estimates."""
    from nanobot.agent.context import ContextBuilder
    from nanobot.session.manager import Session as NanobotSession
    from nanobot.utils.helpers import estimate_prompt_tokens

    import sessionkit as sk
    from sessionkit.calls.assembly import kit_of, turn_calls

    release = sk.get_policy("nanobot-0.2")
    builder = ContextBuilder(workspace)
    by_key = {s.key: s for s in sessions}
    seconds, sizes, estimates = 0.0, [], []
    for row in frame.itertuples():
        session = by_key[row.session_key]
        window = windows.loc[(row.session_key, row.max_messages, row.max_tokens, row.turn)]
        kit, _ = kit_of(release, session, workspace, None, None, None)
        steps = turn_calls(session, row.turn, kit).steps[row.step]
        tools = [dict(t) for t in kit.tools]
        at = int(window["at"])
        user = session.messages[at]
        kwargs = release.history_kwargs(
            sk.HistorySettings(max_messages=row.max_messages, max_tokens=row.max_tokens)
        )
        channel, _, chat = session.key.partition(":")
        nb = NanobotSession(key=session.key, messages=session.messages[:at])
        nb.last_consolidated = int(window["consolidated"])
        start = time.perf_counter()
        history = nb.get_history(**kwargs)
        messages = builder.build_messages(
            history, user["content"], media=user.get("media"), channel=channel, chat_id=chat
        )
        messages += steps
        estimate = estimate_prompt_tokens(messages, tools)
        seconds += time.perf_counter() - start
        sizes.append(len(history))
        estimates.append(estimate)
    return seconds, sizes, estimates


def _offline_tiktoken(folder: Path) -> None:
    """nanobot downloads cl100k on first use; seed tiktoken's cache in ``folder`` from the
    offline copy sessionkit counts with."""
    bpe = resources.files("tiktoken_ext").joinpath("data").joinpath("cl100k_base.tiktoken")
    with resources.as_file(bpe) as path:
        shutil.copyfile(path, folder / _BPE_CACHE_NAME)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)


def phase_nanobot(
    folder: Path, workspace: Path, n_sessions: int, n_calls: int, seed: int
) -> dict[str, Any]:
    """nanobot 0.2.2's own per-call building on sampled calls, for every grid setting."""
    import sessionkit as sk

    corpus = sk.load(folder)
    sessions = list(corpus)
    turns = np.array([s.n_user_turns for s in sessions], dtype=float)
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(sessions), size=n_sessions, replace=False, p=turns / turns.sum())
    sample = [sessions[i] for i in sorted(picked)]
    frame = sk.requests(sample, workspace=workspace, **GRID)
    windows = sk.windows(sample, **GRID).set_index(
        ["session_key", "max_messages", "max_tokens", "turn"]
    )
    texts = {
        (s.key, t): isinstance(m.get("content"), str)
        for s in sample
        for t, m in enumerate(m for m in s.messages if m.get("role") == "user")
    }
    sendable = frame[
        [texts[(k, t)] for k, t in zip(frame["session_key"], frame["turn"], strict=True)]
    ]
    out: dict[str, Any] = {"sample_sessions": len(sample), "settings": {}}
    for (messages, budget), rows in sendable.groupby(["max_messages", "max_tokens"]):
        chosen = rows.iloc[np.linspace(0, len(rows) - 1, min(n_calls, len(rows))).astype(int)]
        with tempfile.TemporaryDirectory(prefix="sessionkit-bench-tiktoken-") as bpe:
            _offline_tiktoken(Path(bpe))
            seconds, sizes, estimates = _nanobot_calls(sample, chosen, windows, workspace)
        assert sizes == chosen["history_messages"].tolist(), "history sizes differ"
        ratio = np.array(estimates) / chosen["total_tokens"].to_numpy() - 1
        out["settings"][f"{messages}/{budget}"] = {
            "calls": len(chosen),
            "seconds_per_call": seconds / len(chosen),
            "estimate_vs_total": {
                "median": float(np.median(ratio)),
                "min": float(ratio.min()),
                "max": float(ratio.max()),
            },
        }
    return out


def run_phase(
    name: str, args: argparse.Namespace, folder: Path, workspace: Path, cache: Path
) -> dict[str, Any]:
    """One phase in a fresh interpreter with ``cache`` as its cache folder."""
    command = [sys.executable, __file__, "--phase", name, "--corpus", str(folder)]
    command += ["--workspace", str(workspace), "--repeats", str(args.repeats)]
    command += ["--sample", str(args.sample), "--calls", str(args.calls), "--seed", str(args.seed)]
    env = os.environ | {"SESSIONKIT_CACHE_DIR": str(cache)}
    load = os.getloadavg()[0]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"phase {name} failed:\n{done.stderr[-4000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "loadavg_before": load}


def _report(result: dict[str, Any]) -> str:
    s, r, n = result["sweep"], result["reopen"], result["nanobot"]
    per_call = {k: v["seconds_per_call"] for k, v in n["settings"].items()}
    one_call = per_call[f"{ONE['max_messages']}/{ONE['max_tokens']}"]
    nanobot_one = one_call * s["calls_one_setting"]
    nanobot_grid = statistics.mean(per_call.values()) * s["calls_grid"]
    deviations = [v["estimate_vs_total"] for v in n["settings"].values()]
    lines = [
        f"corpus: {s['sessions']:,} sessions, {s['messages']:,} messages, {s['user_turns']:,} "
        f"user turns; {s['calls_one_setting']:,} calls for one setting, {s['calls_grid']:,} for "
        f"the 3x3 grid (load {s['load_s']:.1f} s)",
        "",
        "                         | sessionkit cold (cpu)   | sessionkit warm | nanobot 0.2.2 "
        "(extrapolated) | ratio warm | ratio cold",
        f"one setting             | {s['windows_cold_s'] + s['one_cold_s']:>7.1f} s "
        f"({s['windows_cold_cpu_s'] + s['one_cold_cpu_s']:>6.0f} s) | {s['one_warm_s']:>13.2f} s | "
        f"{nanobot_one:>24,.0f} s | {nanobot_one / s['one_warm_s']:>9,.0f}x | "
        f"{nanobot_one / (s['windows_cold_s'] + s['one_cold_s']):>9,.0f}x",
        f"3x3 grid                | {s['grid_cold_s']:>7.1f} s ({s['grid_cold_cpu_s']:>6.0f} s) | "
        f"{s['grid_warm_s']:>13.2f} s | {nanobot_grid:>24,.0f} s | "
        f"{nanobot_grid / s['grid_warm_s']:>9,.0f}x | {nanobot_grid / s['grid_cold_s']:>9,.0f}x",
        "",
        f"one setting warm {s['one_warm_s']:.2f} s (median {s['one_warm_median_s']:.2f} s): "
        f"target < {TARGET_WARM_S:.0f} s "
        + ("ok" if s["one_warm_s"] < TARGET_WARM_S else "MISSED"),
        f"cold one setting = first windows {s['windows_cold_s']:.1f} s (replay and count every "
        f"message) + requests {s['one_cold_s']:.1f} s (kits, every session's calls rebuilt); "
        f"the grid after it reuses both",
        f"new process on the disk caches: load {r['load_s']:.1f} s, windows {r['windows_s']:.1f} s, "
        f"requests {r['one_first_s']:.1f} s (calls rebuilt), then warm {r['one_warm_s']:.2f} s",
        f"nanobot 0.2.2 per call: {min(per_call.values()) * 1e3:.1f}-"
        f"{max(per_call.values()) * 1e3:.1f} ms ({n['settings'][next(iter(n['settings']))]['calls']} "
        f"sampled calls per setting from {n['sample_sessions']} sessions); its whole-request "
        f"estimate vs the frame's total: median {statistics.median(d['median'] for d in deviations):+.2%}, "
        f"range {min(d['min'] for d in deviations):+.2%} .. {max(d['max'] for d in deviations):+.2%}",
        f"peak RSS: sweep {s['peak_rss_mib']['end']:,.0f} MiB (after the cold one-setting call "
        f"{s['peak_rss_mib']['after_one_cold']:,.0f} MiB), reopen {r['peak_rss_mib']:,.0f} MiB",
        "",
        "where the warm one-setting call spends its time (cProfile, cumulative):",
    ]
    for row in s["profile_one_warm"]:
        lines.append(f"  {row['cum_s']:>6.3f} s  {row['function']}")
    lines.append(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_options(parser)
    parser.add_argument("--sample", type=int, default=8, help="sessions nanobot's calls come from")
    parser.add_argument("--calls", type=int, default=120, help="nanobot calls timed per setting")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--phase", choices=["sweep", "reopen", "nanobot"], help=argparse.SUPPRESS)
    parser.add_argument("--workspace", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    folder = chosen_corpus(args)
    if args.phase == "sweep":
        print(json.dumps(phase_sweep(folder, args.workspace, args.repeats)))
        return
    if args.phase == "reopen":
        print(json.dumps(phase_reopen(folder, args.workspace, args.repeats)))
        return
    if args.phase == "nanobot":
        print(json.dumps(phase_nanobot(folder, args.workspace, args.sample, args.calls, args.seed)))
        return
    ensure_corpus(folder, args.sessions, args.messages, args.seed)
    result: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "corpus": str(folder)}
    with (
        tempfile.TemporaryDirectory(prefix="sessionkit-bench-requests-") as cache,
        tempfile.TemporaryDirectory(prefix="sessionkit-bench-workspace-") as scratch,
    ):
        workspace = Path(scratch) / "workspace"  # no config.json beside it
        workspace.mkdir()
        for name in ("sweep", "reopen", "nanobot"):
            print(f"{name} (fresh process) ...", flush=True)
            result[name] = run_phase(name, args, folder, workspace, Path(cache))
    if result["reopen"]["total"] != result["sweep"]["totals"]["one"]:
        raise AssertionError("the reopened process computed other totals")
    result["machine"] = {"cpus": os.cpu_count(), "load_average": os.getloadavg()}
    print(_report(result))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"bench_requests-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
