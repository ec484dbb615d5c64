"""Regenerate ``data/nanobot-0.3.5`` (and ``data/nanobot-0.3.5-claude``): data dirs and workspaces nanobot 0.3.5 wrote, with their usage logs.

nanobot 0.3.5's own gateway loop (``tests/support/e2e.py`` ``run_gateway``: the loop composed as
``cli/gateway_runtime.py`` composes it, the usage recorder attached) runs :data:`SCENARIO`'s turns
one after another against the local OpenAI-compatible stub (``tests/support/stub_openai.py``),
which answers with scripted text and tool calls and known usage, streamed with the usage in the
final chunk.  The model is named ``gpt-4o-mini`` so genai-prices prices every call; the context
window is small enough that the governor summarises twice.  Needs the 0.3.5 release venv
(``tests/support/releases.py`` builds it under ``.cache/nanobot-releases/`` on first use).

What the release wrote is copied as it is, except what a second run could not reproduce:

- times: every stored time (message ``timestamp``, ``created_at``/``updated_at``,
  ``_last_summary.last_active``, the log's ``started_at_ms`` and call ends) is moved onto a
  fixed clock that keeps their order: the k-th distinct instant of the run becomes
  ``START + k s + 7 min x (turns begun before it)``; ``duration_ms`` and a turn's
  ``latency_ms`` follow from the moved times, ``memory/history.jsonl``'s minute stamps from
  the moved end of the summary call that wrote each entry;
- paths: the run's temporary workspace is written ``workspace`` (relative to the data dir, as
  nanobot resolves it when started in this folder), the stub's port as 8000;
- left out: the files the release copies from its templates unchanged (``AGENTS.md``,
  ``SOUL.md``, ``memory/MEMORY.md``, ...: nanobot's text, which sessionkit never ships; the
  release leaves them out of its prompt, and writes them again where they are missing), the
  workspace's ``.git`` and its ``.gitignore`` (nanobot's own file history; a checkout cannot
  hold a nested ``.git``, and the ``.gitignore`` would hide the workspace from this
  repository), lock files, empty folders, and the namespace's empty WebUI index
  (``.webui_session_index.json``: sessionkit's loader takes it for a session file today).

``data/nanobot-0.3.5-claude`` (``--run claude``, :data:`CLAUDE`) is the same kind of run with a
Claude model behind OpenRouter, so 0.3.5 sends its ``cache_control`` markers, and a stub whose
prompt cache follows Anthropic's documented rule (``tests/support/provider_caches.py``
``BreakpointCache``, 5 minutes, writes reported): its reported reads and writes come from the
requests 0.3.5 sent.  The release's clock and the stub's jump by each turn's idle gap
(``gateway_035.py``), some under the 5 minutes and some over; on the fixed clock a turn then
starts ``START + k s + the gaps so far`` (the default run: 7 minutes before each turn).

The log is checkpointed into ``llm_usage.sqlite3`` (no ``-wal``/``-shm``) and vacuumed; its rows,
not its bytes, are what a second run reproduces (the file header names the SQLite library).
``tests/test_usage_sample.py`` counts the result exactly and compares a fresh generation.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from bisect import bisect_right
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the tests' support package
from support import e2e  # noqa: E402
from support.provider_caches import BreakpointCache  # noqa: E402
from support.stub_openai import Cache  # noqa: E402

OUT = ROOT / "data" / "nanobot-0.3.5"
MODEL = "gpt-4o-mini"
WORKSPACE_ID = "5e551011c0575a3b9d2e7f4a6c8b0d1e"
START = datetime(2025, 6, 2, 9, 0, tzinfo=UTC)
TURN_GAP = timedelta(minutes=7)
STUB_URL = "http://127.0.0.1:8000/v1"
LOG = "llm_usage.sqlite3"
SKIPPED = {".git", ".gitignore", ".webui_session_index.json"}

_u = e2e._usage
_GOV = e2e.SCENARIO_GOVERNOR["turns"]

SCENARIO: dict[str, Any] = {
    "settings": e2e.SCENARIO_GOVERNOR["settings"],
    "files": {
        ".nanobot/workspace-id": f"{WORKSPACE_ID}\n",
        "notes/todo.md": e2e._TODO,
        "notes/ideas.txt": "a garden of herbs\nshelves\n",
        **e2e.SCENARIO_GOVERNOR["files"],
    },
    "summary": e2e.SCENARIO_GOVERNOR["summary"],
    "turns": [
        {
            "session": "telegram:alice",
            "text": "Hello there, who are you? (usage-1)",
            "replies": [{"text": "Hi Alice, I am your assistant.", "usage": _u(8101, 9)}],
        },
        _GOV[0],
        {
            "session": "telegram:alice",
            "text": "What is in my notes folder? (usage-2)",
            "replies": [
                {
                    "tool_calls": [{"name": "list_dir", "arguments": {"path": "notes"}}],
                    "usage": _u(8160, 21, 8064),
                },
                {
                    "text": "Let me open the todo list.",
                    "tool_calls": [{"name": "read_file", "arguments": {"path": "notes/todo.md"}}],
                    "usage": _u(8230, 30, 8128),
                },
                {"text": "Three things to do: plants, bank, train.", "usage": _u(8330, 14, 8192)},
            ],
        },
        _GOV[1],
        {
            "session": "slack:C42",
            "text": "Read notes/ideas.txt and my todo list, please. (usage-3)",
            "replies": [
                {
                    "tool_calls": [
                        {"name": "read_file", "arguments": {"path": "notes/ideas.txt"}},
                        {"name": "read_file", "arguments": {"path": "notes/todo.md"}},
                    ],
                    "usage": _u(8120, 40),
                },
                {
                    "text": "Herbs and shelves; plus your three errands.",
                    "usage": _u(8290, 11, 7936),
                },
            ],
        },
        _GOV[2],
        {
            "session": "telegram:alice",
            "text": "Thanks! Anything else for today? (usage-4)",
            "replies": [{"text": "No, that is all.", "usage": _u(8400, 6, 8320)}],
        },
        {
            "session": "slack:C42",
            "text": "How long is docs/beta.md? (usage-5)",
            "replies": [
                {
                    "tool_calls": [{"name": "read_file", "arguments": {"path": "docs/beta.md"}}],
                    "usage": _u(8350, 18, 8256),
                },
                {"text": "Forty lines of ten words each.", "usage": _u(8950, 8, 8320)},
            ],
        },
        _GOV[3],
        {
            "session": "slack:C42",
            "text": "And which errand comes first? (usage-6)",
            "replies": [{"text": "Watering the plants.", "usage": _u(9010, 5, 8896)}],
        },
        {
            "session": "telegram:alice",
            "text": "Bye for now. (usage-7)",
            "replies": [{"text": "Bye, Alice.", "usage": _u(8460, 4, 8384)}],
        },
    ],
}
"""Three sessions run interleaved, one turn at a time: ``telegram:alice`` (4 turns, one of
three agent calls), ``telegram:gov`` (e2e's governor turns: a summary before step 1 of its
second turn and at the start of its third), ``slack:C42`` (3 turns, parallel tool calls)."""


_CLAUDE_TURNS = [
    ("telegram:bob", "Hi, I am Bob. What can you do? (claude-1)", "I read files and keep notes."),
    ("telegram:bob", "What is in my notes folder? (claude-2)", None),
    ("slack:C77", "Read notes/todo.md for the team, please. (claude-3)", "todo"),
    ("telegram:bob", "Open notes/ideas.txt too. (claude-4)", "ideas"),
    ("slack:C77", "Which errand comes first? (claude-5)", "Watering the plants."),
    ("telegram:bob", "Thanks. Anything else? (claude-6)", "No, that is all."),
    ("slack:C77", "And after that? (claude-7)", "Calling the bank."),
    ("telegram:bob", "Bye for now. (claude-8)", "Bye, Bob."),
]


def _claude_replies(answer: str | None) -> list[dict[str, Any]]:
    """A turn's replies: a text answer, or a tool round first (None: a bare list_dir, no
    text; a file name: "Opening it." with a read_file)."""
    if answer is None:
        call = {"name": "list_dir", "arguments": {"path": "notes"}}
        return [
            {"tool_calls": [call], "usage": _u(1, 12)},
            {"text": "Two notes.", "usage": _u(1, 4)},
        ]
    if answer in ("todo", "ideas"):
        path = {"todo": "notes/todo.md", "ideas": "notes/ideas.txt"}[answer]
        call = {"name": "read_file", "arguments": {"path": path}}
        first = {"text": "Opening it.", "tool_calls": [call], "usage": _u(1, 16)}
        return [first, {"text": f"Read {path}.", "usage": _u(1, 6)}]
    return [{"text": answer, "usage": _u(1, len(answer) // 4)}]


CLAUDE_SCENARIO: dict[str, Any] = {
    "provider": "openrouter",
    "model": "anthropic/claude-sonnet-4.5",
    "files": {
        ".nanobot/workspace-id": "c1a0de035ca0e5e55101c0575a3b9d2e\n",
        "notes/todo.md": e2e._TODO,
        "notes/ideas.txt": "a garden of herbs\nshelves\n",
    },
    "summary": {"text": "Summary.", "usage": _u(1, 2)},
    "gaps": [0, 40, 30, 90, 400, 150, 60, 500],
    "turns": [
        {"session": key, "text": text, "replies": _claude_replies(answer)}
        for key, text, answer in _CLAUDE_TURNS
    ],
}
"""Two sessions interleaved, the clock jumping 40 s to 8 min 20 s between turns (each
session idle at most 10 minutes: nanobot's idle compaction waits 15); the stub's numbers
other than completion tokens are its cache's."""


@dataclasses.dataclass(frozen=True)
class Run:
    """One bundled data dir: where it goes, what runs, and the stub's prompt cache."""

    out: Path
    scenario: dict[str, Any]
    workspace_id: str
    start: datetime
    cache_ttl: float | None = None

    def gaps(self) -> list[float]:
        """Seconds between turns on the fixed clock (the scenario's, else 7 minutes)."""
        n = len(self.scenario["turns"])
        found = self.scenario.get("gaps")
        return [float(g) for g in found] if found else [0.0] + [TURN_GAP.total_seconds()] * (n - 1)


USAGE = Run(OUT, SCENARIO, WORKSPACE_ID, START)
CLAUDE = Run(
    ROOT / "data" / "nanobot-0.3.5-claude",
    CLAUDE_SCENARIO,
    "c1a0de035ca0e5e55101c0575a3b9d2e",
    datetime(2025, 6, 3, 9, 0, tzinfo=UTC),
    cache_ttl=300.0,
)
CLAUDE_RUNTIME = {
    "workspace_path": "/tmp/sessionkit-0.3.5-claude/gateway/workspace",
    "release_path": "/usr/lib/python3/dist-packages/nanobot",
    "system": "Linux",
    "machine": "x86_64",
    "python_version": "3.11.7",
    "path": "/usr/bin:/bin",
}
"""What the Claude run's prompts name, as the stub counted them (``sk.requests(...,
runtime=CLAUDE_RUNTIME)`` rebuilds them so): the run happens with that ``PATH``, the stub reads
the run's private workspace as ``workspace_path`` and the release's install folder as
``release_path``, and the release must run on that system, machine and Python (checked)."""
RUNS = {"usage": USAGE, "claude": CLAUDE}


def _release_facts() -> tuple[str, dict[str, str]]:
    """The release's install folder, and its system, machine and Python version."""
    code = (
        "import json, os, platform, nanobot; print(json.dumps([os.path.dirname(nanobot.__file__),"
        " {'system': platform.system(), 'machine': platform.machine(),"
        " 'python_version': platform.python_version()}]))"
    )
    python = e2e.release("0.3.5").python
    answer = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True)
    folder, facts = json.loads(answer.stdout)
    return folder, facts


def _shown_as_pinned(cache: BreakpointCache, folder: str, workspace: Path) -> Cache:
    """``cache`` counting each body with the release's install folder and the run's workspace
    read as :data:`CLAUDE_RUNTIME`'s ``release_path`` and ``workspace_path`` (as
    ``sk.requests``' runtime shows them), so every run counts the same prompt wherever it runs."""
    shown = {
        folder: CLAUDE_RUNTIME["release_path"],
        str(workspace): CLAUDE_RUNTIME["workspace_path"],
    }

    def counted(body: Any, now: float) -> tuple[int, int, int | None]:
        text = json.dumps(body)
        for real, pinned in shown.items():
            text = text.replace(real, pinned)
        return cache(json.loads(text), now)

    return counted


def _run(run: Run, scratch: Path) -> e2e.GatewayRun:
    """Run the scenario with the priced model name, the release's clock in UTC (a run with a
    cache: on :data:`CLAUDE_RUNTIME`'s ``PATH``, the release's folder shown as pinned)."""
    environment = e2e._environment
    e2e.MODEL = MODEL
    path = {} if run.cache_ttl is None else {"PATH": CLAUDE_RUNTIME["path"]}
    e2e._environment = lambda home: {**environment(home), "TZ": "UTC", **path}
    cache = None
    if run.cache_ttl is not None:
        folder, facts = _release_facts()
        if any(CLAUDE_RUNTIME[k] != v for k, v in facts.items()):
            raise RuntimeError(f"the release runs on {facts}, the data names {CLAUDE_RUNTIME}")
        workspace = scratch / "gateway" / "workspace"  # where run_gateway makes it
        cache = _shown_as_pinned(BreakpointCache(run.cache_ttl), folder, workspace)
    try:
        return e2e.run_gateway(scratch, run.scenario, cache)
    finally:
        e2e._environment = environment


def _naive_us(text: str) -> int:
    """A naive ISO time the release stamped (its zone is UTC) in epoch microseconds."""
    moment = datetime.fromisoformat(text).replace(tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1_000_000, UTC).replace(tzinfo=None).isoformat()


def _clock(
    instants: set[int], turn_starts: list[int], start: datetime, gaps: list[float]
) -> Callable[[int], int]:
    """Order-keeping map of the run's instants (epoch µs) onto the fixed clock: the k-th
    instant at ``start + k s`` plus the gaps before its turn."""
    base = int(start.timestamp()) * 1_000_000
    before = [int(sum(gaps[1 : i + 1]) * 1_000_000) for i in range(len(gaps))]
    moved = {
        t: base + rank * 1_000_000 + before[max(bisect_right(turn_starts, t) - 1, 0)]
        for rank, t in enumerate(sorted(instants))
    }
    return moved.__getitem__


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """A session file's records, checked to be what ``json.dumps(..., ensure_ascii=False)``
    wrote (so writing them back the same way keeps the release's format)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    for line, record in zip(lines, records, strict=True):
        if json.dumps(record, ensure_ascii=False) != line:
            raise RuntimeError(f"{path.name}: a line is not in the format this script writes")
    return records


def _session_instants(records: list[dict[str, Any]]) -> set[int]:
    meta, messages = records[0], records[1:]
    found = {_naive_us(meta[k]) for k in ("created_at", "updated_at")}
    summary = meta["metadata"].get("_last_summary")
    if summary:
        found.add(_naive_us(summary["last_active"]))
    return found | {_naive_us(m["timestamp"]) for m in messages if "timestamp" in m}


def _move_session(records: list[dict[str, Any]], move: Callable[[int], int]) -> None:
    """Put a session's times on the fixed clock; ``latency_ms`` = reply time - turn's user
    message time."""
    meta = records[0]
    for key in ("created_at", "updated_at"):
        meta[key] = _iso(move(_naive_us(meta[key])))
    summary = meta["metadata"].get("_last_summary")
    if summary:
        summary["last_active"] = _iso(move(_naive_us(summary["last_active"])))
    asked = None
    for message in records[1:]:
        message["timestamp"] = _iso(move(_naive_us(message["timestamp"])))
        if message["role"] == "user" and not message.get("_hidden_history"):
            asked = _naive_us(message["timestamp"])
        if "latency_ms" in message and asked is not None:
            message["latency_ms"] = (_naive_us(message["timestamp"]) - asked) // 1000


def _log_rows(db: Path) -> list[tuple[int, int, int, str]]:
    """(id, started_at_ms, duration_ms, source) of every logged call."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return conn.execute(
            "SELECT id, started_at_ms, duration_ms, source FROM llm_calls ORDER BY id"
        ).fetchall()


def _move_log(db: Path, rows: list[tuple[int, int, int, str]], move: Callable[[int], int]) -> None:
    """Rewrite the log's times, checkpoint the WAL into the file and vacuum it."""
    conn = sqlite3.connect(db)
    try:
        for call_id, start, duration, _ in rows:
            begin, end = move(start * 1000) // 1000, move((start + duration) * 1000) // 1000
            conn.execute(
                "UPDATE llm_calls SET started_at_ms = ?, duration_ms = ? WHERE id = ?",
                (begin, end - begin, call_id),
            )
        conn.commit()
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    left = [p.name for p in db.parent.iterdir() if p.name.startswith(f"{db.name}-")]
    if left:
        raise RuntimeError(f"the log left {left} beside it after the checkpoint")


def _templates() -> Path:
    """The release's ``nanobot/templates`` folder (asked from its interpreter)."""
    code = "import nanobot, pathlib; print(pathlib.Path(nanobot.__file__).parent / 'templates')"
    python = e2e.release("0.3.5").python
    answer = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True)
    return Path(answer.stdout.strip())


def _copy_tree(source: Path, target: Path, templates: Path | None = None) -> None:
    """Copy the files under ``source``: not :data:`SKIPPED`, lock files, empty folders, or a
    file equal to the same path under ``templates``."""
    for path in sorted(source.rglob("*")):
        parts = path.relative_to(source).parts
        if not path.is_file() or SKIPPED & set(parts) or path.suffix == ".lock":
            continue
        template = templates.joinpath(*parts) if templates else None
        if template and template.is_file() and template.read_bytes() == path.read_bytes():
            continue
        dest = target.joinpath(*parts)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)


def _replace_paths(path: Path, workspace: Path, url: str) -> None:
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace(str(workspace), "workspace").replace(url, STUB_URL), "utf-8")


def generate(out: Path, scratch: Path, which: Run = USAGE) -> e2e.GatewayRun:
    """Run ``which`` in ``scratch`` and write its data dir to ``out`` (replaced)."""
    run = _run(which, scratch)
    workspace_id = which.workspace_id
    if run.sessions_dir.name != workspace_id:
        raise RuntimeError(f"the release chose workspace id {run.sessions_dir.name}")
    if out.exists():
        shutil.rmtree(out)
    _copy_tree(run.data_dir, out)
    _copy_tree(run.workspace, out / "workspace", _templates())
    provider = which.scenario.get("provider", "custom")
    url = json.loads(run.config.read_text())["providers"][provider]["apiBase"]
    sessions = sorted((out / "sessions" / workspace_id).glob("*.jsonl"))
    records = {p: _read_lines(p) for p in sessions}
    rows = _log_rows(out / LOG)
    instants = set().union(*(_session_instants(r) for r in records.values()))
    instants |= {start * 1000 for _, start, _, _ in rows}
    instants |= {(start + duration) * 1000 for _, start, duration, _ in rows}
    starts = sorted(t["started_ns"] // 1000 for t in run.output["turns"])
    move = _clock(instants, starts, which.start, which.gaps())
    for path, lines in records.items():
        _move_session(lines, move)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), "utf-8")
    _move_log(out / LOG, rows, move)
    summaries = [(start + duration) * 1000 for _, start, duration, s in rows if s == "dream"]
    journal = out / "workspace" / "memory" / "history.jsonl"
    entries = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()]
    if len(entries) != len(summaries):
        raise RuntimeError(f"{len(entries)} summary entries for {len(summaries)} summary calls")
    for entry, end in zip(entries, summaries, strict=True):
        entry["timestamp"] = datetime.fromtimestamp(move(end) / 1e6, UTC).strftime("%Y-%m-%d %H:%M")
    journal.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries), "utf-8")
    for path in [out / "config.json", out / "sessions" / workspace_id / ".workspace", *sessions]:
        _replace_paths(path, run.workspace, url)
    return run


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, generate, print one line per file written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--run", choices=sorted(RUNS), default="usage", help="which data dir (default: usage)"
    )
    parser.add_argument("--out", type=Path, help="target (default: the run's folder in data/)")
    args = parser.parse_args(argv)
    which = RUNS[args.run]
    args.out = args.out or which.out
    with tempfile.TemporaryDirectory(prefix="sk-usage-") as scratch:
        run = generate(args.out, Path(scratch), which)
    print(f"{len(run.requests)} calls ({run.kinds.count('default')} summary calls)")
    for path in sorted(p for p in args.out.rglob("*") if p.is_file()):
        print(f"{path.stat().st_size:>9,}  {path.relative_to(args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
