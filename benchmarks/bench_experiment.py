"""Benchmark: ``sk.experiment`` planning and sending, on the generated 400k-message store.

Each phase runs in a fresh process with one cache folder (imports not timed):

- ``prepare``: load (writes the index), ``sk.requests`` for the release's default setting
  (kits and token counts kept), so later phases start warm;
- ``plan``: load (warm index), ``sk.requests``, ``--calls`` rows picked at random (seeded),
  then ``sk.experiment(dry_run=True)`` of them timed ``--repeats`` times: the first is cold
  (no plan kept: every request rebuilt, then kept in the cache folder), the others warm in
  the same process (a cProfile of one more run says where the time goes);
- ``replan``: the same in another fresh process, so its first dry run is what a user who
  plans the same calls again (a re-run notebook, another budget) waits for: warm, the plans
  read from the cache folder (the target is on this one);
- ``send``: against a local server (its own process, asyncio) that answers every request
  after a fixed ``--delay-ms``, ``--send`` of those rows at concurrency ``--concurrency``:
  ``sk.experiment`` with ``budget_calls`` and answers kept in the cache folder (emptied
  before each run), its dry run timed just before it, after one more that loads what every
  call loads once (so its sending time is the run minus the plan), against a bare ``httpx.AsyncClient`` loop with a semaphore of the same size
  sending the very bodies the server received from sessionkit; sending is timed by the
  server, from the first request read to the last answer written, the same for both; the
  two alternate ``--pairs`` times and the ratio is of their medians.

Run: ``python benchmarks/bench_experiment.py`` (``--help`` for options).  Prints a summary
with the load average and writes JSON to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from corpus import add_corpus_options, chosen_corpus, ensure_corpus

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MODEL = "gpt-4o-mini"
TARGET_PLAN_S = 5.0
TARGET_RATIO = 1.1
ANSWER = json.dumps(
    {
        "id": "bench",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": 1000,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }
).encode()


def _rows(folder: Path, workspace: Path, calls: int, seed: int) -> tuple[Any, Any]:
    """The corpus and ``calls`` rows of its requests frame, picked at random, in frame order."""
    import sessionkit as sk

    corpus = sk.load(folder, progress=False)
    frame = sk.requests(corpus, workspace=workspace, progress=False)
    picked = frame.sample(min(calls, len(frame)), random_state=seed).sort_index()
    return corpus, picked


def phase_prepare(folder: Path, workspace: Path) -> dict[str, Any]:
    """Write the index, token counts and kits the later phases read."""
    import sessionkit as sk

    start = time.perf_counter()
    corpus = sk.load(folder, progress=False)
    frame = sk.requests(corpus, workspace=workspace, progress=False)
    return {"calls": len(frame), "prepare_s": time.perf_counter() - start}


def phase_plan(args: argparse.Namespace) -> dict[str, Any]:
    """Dry runs of ``--calls`` picked rows (warm index), and a profile of one."""
    import sessionkit as sk

    start = time.perf_counter()
    corpus, picked = _rows(args.corpus, args.workspace, args.calls, args.seed)
    ready_s = time.perf_counter() - start

    def dry() -> Any:
        return sk.experiment(
            picked,
            corpus,
            models=MODEL,
            endpoint="http://127.0.0.1:9/v1",
            dry_run=True,
            workspace=args.workspace,
            progress=False,
        )

    times = []
    for _ in range(args.repeats):
        begun = time.perf_counter()
        out = dry()
        times.append(time.perf_counter() - begun)
    profiler = cProfile.Profile()
    profiler.runcall(dry)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(18)
    return {
        "rows": len(picked),
        "sessions": int(picked["session_key"].nunique()),
        "planned": int((out["outcome"] == "planned").sum()),
        "failed": int((out["outcome"] == "failed").sum()),
        "ready_s": ready_s,
        "dry_run_s": times,
        "profile": text.getvalue().splitlines()[:60],
        "loadavg": os.getloadavg()[0],
    }


class _Server:
    """An HTTP/1.1 server on 127.0.0.1 answering every POST with one chat completion after a
        fixed delay (asyncio: any number at once), keeping the first bodies it receives (one JSON
    text a line) and when each request was read and answered (``<record>.times``)."""

    def __init__(self, delay_s: float, keep: int, record: Path | None) -> None:
        self.delay_s, self.keep, self.record = delay_s, keep, record
        self.kept = 0
        self.times = Path(f"{record}.times")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readline():
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                started = time.time()
                await asyncio.sleep(self.delay_s)
                head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(ANSWER)}\r\n\r\n"
                writer.write(head.encode() + ANSWER)
                await writer.drain()
                with self.times.open("a") as sink:
                    sink.write(f"{started} {time.time()}\n")
                if self.record is not None and self.kept < self.keep:
                    self.kept += 1
                    with self.record.open("ab") as sink:
                        sink.write(body + b"\n")
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        writer.close()

    async def serve(self) -> None:
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0, backlog=256)
        print(server.sockets[0].getsockname()[1], flush=True)
        async with server:
            await server.serve_forever()


def phase_server(args: argparse.Namespace) -> None:
    """Serve until killed (prints the port first)."""
    asyncio.run(_Server(args.delay_ms / 1000, args.send, args.record).serve())


def phase_sessionkit(args: argparse.Namespace) -> dict[str, Any]:
    """Dry runs of ``--send`` rows (the second timed), then sk.experiment sending them."""
    import sessionkit as sk

    corpus, picked = _rows(args.corpus, args.workspace, args.calls, args.seed)
    picked = picked.iloc[: args.send]
    options = {
        "models": MODEL,
        "endpoint": args.url,
        "api_key": "sk-bench",
        "workspace": args.workspace,
        "concurrency": args.concurrency,
        "progress": False,
    }
    sk.experiment(picked, corpus, dry_run=True, **options)  # kits, prices, encoder: loaded once
    begun = time.perf_counter()
    sk.experiment(picked, corpus, dry_run=True, **options)
    plan_s = time.perf_counter() - begun
    begun = time.perf_counter()
    out = sk.experiment(picked, corpus, budget_calls=args.send, **options)
    run_s = time.perf_counter() - begun
    return {
        "plan_s": plan_s,
        "run_s": run_s,
        "answered": int((out["outcome"] == "answered").sum()),
        "persisted": bool(out.summary["persisted"]),
        "loadavg": os.getloadavg()[0],
    }


async def _bare(url: str, bodies: list[bytes], concurrency: int) -> float:
    import httpx

    gate = asyncio.Semaphore(concurrency)
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:

        async def one(body: bytes) -> Any:
            async with gate:
                response = await client.post(url, content=body, headers=headers)
                return response.json()

        begun = time.perf_counter()
        answers = await asyncio.gather(*(one(body) for body in bodies))
        elapsed = time.perf_counter() - begun
    if len(answers) != len(bodies):
        raise RuntimeError("the bare loop lost answers")
    return elapsed


def phase_bare(args: argparse.Namespace) -> dict[str, Any]:
    """A bare httpx.AsyncClient loop sending the recorded bodies."""
    bodies = args.record.read_bytes().splitlines()
    return {
        "send_s": asyncio.run(_bare(args.url, bodies, args.concurrency)),
        "bodies": len(bodies),
        "loadavg": os.getloadavg()[0],
    }


def _run(name: str, args: argparse.Namespace, cache: Path, *extra: str) -> dict[str, Any]:
    """One phase in a fresh interpreter with ``cache`` as its cache folder."""
    command = [sys.executable, __file__, "--phase", name, "--corpus", str(args.corpus)]
    command += ["--workspace", str(args.workspace), "--calls", str(args.calls)]
    command += ["--seed", str(args.seed), "--repeats", str(args.repeats), "--send", str(args.send)]
    command += ["--concurrency", str(args.concurrency), *extra]
    env = os.environ | {"SESSIONKIT_CACHE_DIR": str(cache)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"phase {name} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _sending(args: argparse.Namespace, cache: Path, scratch: Path) -> dict[str, Any]:
    """Alternate sessionkit and the bare loop against one server, ``--pairs`` times."""
    record = scratch / "bodies.jsonl"
    command = [sys.executable, __file__, "--phase", "server", "--corpus", str(args.corpus)]
    command += ["--delay-ms", str(args.delay_ms), "--send", str(args.send)]
    command += ["--record", str(record)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{int(server.stdout.readline())}/v1"
        runs: dict[str, list[dict[str, Any]]] = {"sessionkit": [], "bare": []}
        times = Path(f"{record}.times")
        for _ in range(args.pairs):
            shutil.rmtree(cache / "answers-1", ignore_errors=True)
            for name, extra in (("sessionkit", ()), ("bare", ("--record", str(record)))):
                seen = len(times.read_text().splitlines()) if times.exists() else 0
                run = _run(name, args, cache, "--url", url, *extra)
                spans = [tuple(map(float, line.split())) for line in times.read_text().splitlines()]
                mine = spans[seen:]
                run["served"] = len(mine)
                run["span_s"] = max(e for _, e in mine) - min(s for s, _ in mine)
                runs[name].append(run)
    finally:
        server.kill()
        server.wait()
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_options(parser)
    parser.add_argument("--calls", type=int, default=10_000, help="rows the dry run plans")
    parser.add_argument("--send", type=int, default=1_000, help="calls sent (the first rows)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--repeats", type=int, default=2, help="dry runs timed")
    parser.add_argument("--pairs", type=int, default=3, help="sessionkit / bare alternations")
    parser.add_argument("--cache", type=Path, help="a cache folder to reuse (default: a new one)")
    parser.add_argument("--skip", choices=["plan", "send"], help="leave one part out")
    parser.add_argument(
        "--phase",
        choices=["prepare", "plan", "server", "sessionkit", "bare"],
        help=argparse.SUPPRESS,
    )
    parser.add_argument("--workspace", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.corpus = chosen_corpus(args)
    phases = {
        "plan": phase_plan,
        "sessionkit": phase_sessionkit,
        "bare": phase_bare,
    }
    if args.phase == "server":
        phase_server(args)
        return
    if args.phase == "prepare":
        print(json.dumps(phase_prepare(args.corpus, args.workspace)))
        return
    if args.phase is not None:
        print(json.dumps(phases[args.phase](args)))
        return
    ensure_corpus(args.corpus, args.sessions, args.messages, args.seed)
    result: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "corpus": str(args.corpus),
    }
    result["loadavg_before"] = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="sessionkit-bench-experiment-") as scratch:
        root = Path(scratch)
        args.workspace = root / "workspace"  # no config.json beside it
        args.workspace.mkdir()
        cache = args.cache or root / "cache"
        print("prepare (fresh process) ...", flush=True)
        result["prepare"] = _run("prepare", args, cache)
        if args.skip != "plan":
            print("plan (fresh process, cold) ...", flush=True)
            result["plan"] = _run("plan", args, cache)
            print("replan (fresh process, warm) ...", flush=True)
            result["replan"] = _run("plan", args, cache)
        if args.skip != "send":
            print("send (server + alternating fresh processes) ...", flush=True)
            result["send"] = _sending(args, cache, root)
    result["loadavg_after"] = os.getloadavg()
    print(_report(result, args))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"bench_experiment-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"results: {out}")


def _report(result: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [f"load average before {'/'.join(f'{x:.2f}' for x in result['loadavg_before'])}"]
    if "plan" in result:
        p, again = result["plan"], result["replan"]
        first = again["dry_run_s"][0]
        lines += [
            f"dry run of {p['rows']:,} calls ({p['sessions']} sessions; {p['planned']:,} planned, "
            f"{p['failed']} failed): cold {p['dry_run_s'][0]:.2f} s (load {p['loadavg']:.2f}), "
            f"then in a fresh process {first:.2f} s (warm: plans kept), then "
            + ", ".join(f"{t:.2f} s" for t in again["dry_run_s"][1:])
            + f" (load {again['loadavg']:.2f}); target < {TARGET_PLAN_S:.0f} s warm "
            + ("ok" if first < TARGET_PLAN_S else "MISSED"),
            *again["profile"][6:40],
        ]
    if "send" in result:
        ours, bare = result["send"]["sessionkit"], result["send"]["bare"]
        span = statistics.median(r["span_s"] for r in ours)
        run = statistics.median(r["run_s"] for r in ours)
        floor = statistics.median(r["span_s"] for r in bare)
        lines += [
            f"{args.send:,} calls at concurrency {args.concurrency}, server delay "
            f"{args.delay_ms:g} ms (ideal {args.send / args.concurrency * args.delay_ms / 1000:.2f} s), "
            f"{len(ours)} alternating pairs; sending = the server's first request to its last answer:",
            "  sk.experiment sending:   " + ", ".join(f"{r['span_s']:.2f}" for r in ours) + " s",
            "  bare httpx.AsyncClient:  " + ", ".join(f"{r['span_s']:.2f}" for r in bare) + " s",
            "  sk.experiment whole run: " + ", ".join(f"{r['run_s']:.2f}" for r in ours) + " s",
            "  its plan (a dry run):    " + ", ".join(f"{r['plan_s']:.2f}" for r in ours) + " s",
            f"  sending / bare = {span / floor:.3f}x (target <= {TARGET_RATIO}x: "
            + ("ok" if span / floor <= TARGET_RATIO else "MISSED")
            + f"); whole run / bare = {run / floor:.3f}x; load "
            + ", ".join(f"{r['loadavg']:.2f}" for r in ours + bare),
        ]
    lines.append(f"load average after {'/'.join(f'{x:.2f}' for x in result['loadavg_after'])}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
