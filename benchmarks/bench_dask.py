"""Benchmark: sessionkit.dask on a 2-worker LocalCluster against one process, on a generated store.

Each phase runs in a fresh interpreter with an empty index folder of its own (cold token,
replay and index caches; later steps of a phase find what earlier ones kept, as a second call
would); cluster start-up is not timed.  Measured, for one process (``sk.load`` and ``sk.windows(workers=1)``) and for Dask:

- load + messages frame (``tokens=None``, as ``bench_load.py`` times loading), the frame
  gathered to the client;
- load + messages counted by role, only the counts gathered (the data stays on the workers);
- the 3 x 3 windows grid (max_messages 60/120/240 x max_tokens 0/8k/32k,
  ``include_timestamps=True``) gathered to the client, cold and again in the same process or
  cluster (token counts cached, sessions read again).

Wall and CPU seconds (the process, or the client plus every worker) are reported.  Run:
``python benchmarks/bench_dask.py --sessions 200 --messages 80000`` (``--help`` for options);
prints a table and writes JSON to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corpus import add_corpus_options, chosen_corpus, ensure_corpus

if TYPE_CHECKING:
    import dask.dataframe as dd
    import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"
GRID: dict[str, Any] = {
    "max_messages": [60, 120, 240],
    "max_tokens": [0, 8000, 32000],
    "include_timestamps": True,
}


def _cpu(client: Any = None) -> float:
    """CPU seconds used so far by this process and, given a client, by every Dask worker."""
    return time.process_time() + (sum(client.run(time.process_time).values()) if client else 0)


def _timed(call: Any, client: Any = None) -> dict[str, Any]:
    """Wall and CPU seconds of ``call()`` (CPU summed over the workers), and its result."""
    cpu, start = _cpu(client), time.perf_counter()
    result = call()
    wall = time.perf_counter() - start
    return {"seconds": wall, "cpu_seconds": _cpu(client) - cpu, "result": result}


def _steps(steps: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The JSON a phase prints: each step's seconds and CPU seconds, and the result sizes."""
    return {
        **{name: {k: v for k, v in step.items() if k != "result"} for name, step in steps.items()},
        "messages": len(steps["load_messages"]["result"]),
        "windows": len(steps["grid_cold"]["result"]),
    }


def phase_one_process(folder: Path, workers: int, npartitions: int) -> dict[str, Any]:
    """sk.load + messages (whole, then counted by role), then the grid cold and warm."""
    import sessionkit as sk

    def roles() -> pd.Series:
        return sk.load(folder, tokens=None).messages.groupby("role", observed=True).size()

    def grid() -> pd.DataFrame:
        return sk.windows(sk.load(folder, tokens=None), **GRID, workers=1, progress=False)

    return _steps(
        {
            "load_messages": _timed(lambda: sk.load(folder, tokens=None).messages),
            "load_roles": _timed(roles),
            "grid_cold": _timed(grid),
            "grid_warm": _timed(grid),
        }
    )


def phase_dask(folder: Path, workers: int, npartitions: int) -> dict[str, Any]:
    """The same through sessionkit.dask on a LocalCluster of ``workers`` processes (sessionkit
    imported on them first, as imports are not timed); frames are gathered to the client, the
    role counts computed on the workers."""
    import importlib

    from distributed import Client, LocalCluster

    from sessionkit import dask as skd

    def messages() -> dd.DataFrame:
        return skd.read_messages(folder, tokens=None, npartitions=npartitions)

    def grid() -> pd.DataFrame:
        return skd.windows(folder, npartitions=npartitions, **GRID).compute()

    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        client.run(importlib.import_module, "sessionkit.dask")
        return _steps(
            {
                "load_messages": _timed(lambda: messages().compute(), client),
                "load_roles": _timed(
                    lambda: messages().groupby("role", observed=True).size().compute(), client
                ),
                "grid_cold": _timed(grid, client),
                "grid_warm": _timed(grid, client),
            }
        )


PHASES = {"one_process": phase_one_process, "dask": phase_dask}


def run_phase(name: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """One phase in a fresh interpreter; returns its JSON result line."""
    command = [sys.executable, __file__, "--phase", name, "--corpus", str(folder)]
    command += ["--workers", str(args.workers), "--npartitions", str(args.npartitions)]
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="sessionkit-bench-dask-") as cache:
        env = os.environ | {"SESSIONKIT_CACHE_DIR": cache}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"phase {name} failed:\n{done.stderr}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "loadavg_before": load}


def report(phases: dict[str, dict[str, Any]]) -> str:
    """The table: seconds (and CPU seconds) per step, one process against Dask, the speed-up."""
    one, dask = phases["one_process"], phases["dask"]
    lines = [f"{'step':<16} {'one process (cpu)':>18} {'dask (cpu)':>18} {'speed-up':>9}"]
    for step in ("load_messages", "load_roles", "grid_cold", "grid_warm"):
        a, b = one[step], dask[step]
        lines.append(
            f"{step:<16} {a['seconds']:>8.2f}s ({a['cpu_seconds']:>5.1f}s) "
            f"{b['seconds']:>8.2f}s ({b['cpu_seconds']:>5.1f}s) "
            f"{a['seconds'] / b['seconds']:>8.2f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse options; either run one phase (internal) or the whole benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_options(parser)
    parser.add_argument("--workers", type=int, default=2, help="Dask worker processes")
    parser.add_argument("--npartitions", type=int, default=8)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_dask.json")
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    folder = chosen_corpus(args)
    if args.phase:
        print(json.dumps(PHASES[args.phase](folder, args.workers, args.npartitions)))
        return

    ensure_corpus(folder, args.sessions, args.messages, args.seed)
    corpus_bytes = sum(p.stat().st_size for p in folder.glob("*.jsonl"))
    print(f"measuring {folder} ({corpus_bytes / 1e6:,.0f} MB) ...", flush=True)
    phases = {name: run_phase(name, args, folder) for name in PHASES}
    for field in ("messages", "windows"):
        if phases["one_process"][field] != phases["dask"][field]:
            raise AssertionError(f"one process and Dask disagree on {field}: {phases}")
    result = {
        "when": datetime.now().isoformat(timespec="seconds"),
        "corpus": {"path": str(folder), "bytes": corpus_bytes},
        "workers": args.workers,
        "npartitions": args.npartitions,
        "cpus": os.cpu_count(),
        "phases": phases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(report(phases))
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
