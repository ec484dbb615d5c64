"""The bundled 0.3.5 data dir (``data/nanobot-0.3.5``, written by nanobot 0.3.5's own gateway
loop against the stub: ``scripts/generate_usage_workspace.py``): every logged call attributed
to the turn and step the scenario ran it in, tokens as the stub reported them, costs as
genai-prices calculates them; nanobot 0.3.5 loads its files; a fresh generation equals it.
``data/nanobot-0.3.5-claude`` (the stub with a prompt cache): its logged reads and writes, the
cache calibration on them, a fresh generation."""

from __future__ import annotations

import json
import os
import runpy
import shutil
import sqlite3
import subprocess
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from genai_prices import Usage, calc_price

import sessionkit as sk
from sessionkit.accounting.ledger import usage
from sessionkit.store.loading import load

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "data" / "nanobot-0.3.5"
SCRIPT = runpy.run_path(str(REPO / "scripts" / "generate_usage_workspace.py"))
NAMESPACE = f"sessions/{SCRIPT['WORKSPACE_ID']}"

from support.releases import release  # noqa: E402

FILES = [
    "config.json",
    "llm_usage.sqlite3",
    f"{NAMESPACE}/.workspace",
    f"{NAMESPACE}/c2xhY2s6QzQy.jsonl",
    f"{NAMESPACE}/dGVsZWdyYW06YWxpY2U.jsonl",
    f"{NAMESPACE}/dGVsZWdyYW06Z292.jsonl",
    "workspace/.nanobot/workspace-id",
    "workspace/docs/alpha.md",
    "workspace/docs/beta.md",
    "workspace/memory/.cursor",
    "workspace/memory/history.jsonl",
    "workspace/notes/ideas.txt",
    "workspace/notes/todo.md",
]


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _log(db: Path) -> list[tuple[Any, ...]]:
    """Every row of the log, read without creating anything beside the file."""
    with closing(sqlite3.connect(f"file:{db}?immutable=1", uri=True)) as conn:
        return conn.execute("SELECT * FROM llm_calls ORDER BY id").fetchall()


def _expected() -> list[tuple[Any, ...]]:
    """Per call, in the order the scenario makes them: session, turn, step, kind, tokens."""
    scenario = SCRIPT["SCENARIO"]
    summary = scenario["summary"]["usage"]
    seen: dict[str, int] = {}
    out = []
    for turn in scenario["turns"]:
        key = turn["session"]
        number = seen.get(key, 0)
        seen[key] = number + 1
        for step, reply in enumerate(turn["replies"]):
            for kind, used in (("summary", summary), ("agent", reply["usage"])):
                if kind == "agent" or step in turn.get("summaries", ()):
                    tokens = (used["prompt_tokens"], used["completion_tokens"])
                    out.append((key, number, step, kind, *tokens, used["cached_tokens"]))
    return out


def test_the_folder_holds_what_the_script_writes() -> None:
    assert _files(SAMPLE) == FILES
    config = json.loads((SAMPLE / "config.json").read_text(encoding="utf-8"))
    assert config["agents"]["defaults"] == {
        "workspace": "workspace",
        "model": "gpt-4o-mini",
        "provider": "custom",
        "timezone": "UTC",
        "maxTokens": 256,
        "contextWindowTokens": 10680,
    }
    assert (SAMPLE / NAMESPACE / ".workspace").read_text() == "workspace\n"


def test_the_log_is_one_checkpointed_file() -> None:
    """No -wal/-shm needed: every call is in the main file (nanobot's WAL mode kept)."""
    header = (SAMPLE / "llm_usage.sqlite3").read_bytes()[:20]
    assert header[:16] == b"SQLite format 3\x00" and (header[18], header[19]) == (2, 2)
    rows = _log(SAMPLE / "llm_usage.sqlite3")
    assert [r[0] for r in rows] == list(range(1, 20))
    assert {(r[3], r[4], r[6]) for r in rows} == {("custom", "gpt-4o-mini", 1)}
    assert [r[5] for r in rows].count("dream") == 2


def test_usage_ties_every_call_to_its_turn_and_step() -> None:
    frame = usage(SAMPLE, tz="UTC", estimate=False, cache=False)
    columns = ["session_key", "turn", "step", "kind", "prompt_tokens"]
    columns += ["completion_tokens", "cached_tokens"]
    rows = [tuple(r) for r in frame[columns].astype(object).itertuples(index=False)]
    assert rows == _expected()
    assert frame.summary == {
        "calls": 19,
        "exact": 3,
        "time": 16,
        "ambiguous": 0,
        "outside": 0,
        "unattributed": 0,
        "daily_rows": 0,
        "tz": "UTC",
    }
    assert frame["kind"].value_counts().to_dict() == {"agent": 17, "summary": 2, "other": 0}
    assert frame.groupby("session_key").size().to_dict() == {
        "slack:C42": 5,
        "telegram:alice": 6,
        "telegram:gov": 8,
    }
    sums = frame[["prompt_tokens", "completion_tokens", "cached_tokens"]].sum().tolist()
    assert sums == [160_551, 255, 100_544]
    assert frame["time"].min() == datetime(2025, 6, 2, 9, 0, 2, tzinfo=UTC)
    assert frame["time"].max() == datetime(2025, 6, 2, 10, 11, 18, tzinfo=UTC)


def test_costs_are_what_genai_prices_calculates() -> None:
    frame = usage(SAMPLE, tz="UTC", estimate=False, cache=False)
    expected = [
        float(
            calc_price(
                Usage(input_tokens=p, output_tokens=c, cache_read_tokens=r),
                "gpt-4o-mini",
                genai_request_timestamp=t.to_pydatetime(),
            ).total_price
        )
        for p, c, r, t in zip(
            frame["prompt_tokens"],
            frame["completion_tokens"],
            frame["cached_tokens"],
            frame["time"],
            strict=True,
        )
    ]
    assert frame["cost_usd"].tolist() == expected
    assert round(frame["cost_usd"].sum(), 8) == 0.01669485
    assert frame.notes["reason"].tolist() == [
        "provider 'custom' is unknown to genai-prices: 'gpt-4o-mini' priced at openai's prices"
    ]
    assert frame.problems.empty


def test_sessionkit_loads_the_workspace_with_its_config_dir() -> None:
    corpus = load(SAMPLE / "workspace", config_dir=SAMPLE / "config.json", cache=False)
    assert corpus.sessions["n_messages"].to_dict() == {
        "slack:C42": 11,
        "telegram:alice": 12,
        "telegram:gov": 14,
    }
    assert corpus.problems.empty


_NANOBOT_LOADS = """
import json, sys
from pathlib import Path
from nanobot.config.loader import load_config
from nanobot.session.manager import SessionManager
config = load_config(Path("config.json"))
manager = SessionManager(config.workspace_path, sessions_root=Path("sessions"))
keys = sorted(info["key"] for info in manager.list_sessions())
sessions = {k: manager.get_or_create(k) for k in keys}
json.dump({
    "namespace": manager.sessions_dir.name,
    "sessions": {k: {"messages": s.messages, "metadata": s.metadata,
                     "last_archived": s.last_archived} for k, s in sessions.items()},
}, sys.stdout)
"""


@pytest.mark.conformance
def test_nanobot_0_3_5_loads_the_copy(tmp_path: Path) -> None:
    """0.3.5's own config loader and SessionManager, started in (a copy of) the folder."""
    python = release("0.3.5").python
    copy = tmp_path / "data"
    shutil.copytree(SAMPLE, copy)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "TZ": "UTC"}
    proc = subprocess.run(
        [str(python), "-I", "-c", _NANOBOT_LOADS],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout)
    assert seen["namespace"] == SCRIPT["WORKSPACE_ID"]
    ours = load(SAMPLE / "workspace", config_dir=SAMPLE, cache=False)
    assert sorted(seen["sessions"]) == sorted(ours.sessions.index)
    for key, session in seen["sessions"].items():
        assert session["messages"] == ours[key].messages
        assert session["metadata"] == ours[key].metadata
    hidden = [i for i, m in enumerate(ours["telegram:gov"].messages) if m.get("_hidden_history")]
    assert hidden == [5, 9]
    assert seen["sessions"]["telegram:gov"]["last_archived"] == 9


@pytest.mark.sampled
@pytest.mark.conformance
def test_a_fresh_generation_equals_the_folder(tmp_path: Path) -> None:
    """The script run again: the same files, byte for byte, and the same log rows."""
    release("0.3.5")
    out = tmp_path / "out"
    SCRIPT["generate"](out, tmp_path / "scratch")
    assert _files(out) == FILES
    for name in FILES:
        if name != "llm_usage.sqlite3":
            assert (out / name).read_bytes() == (SAMPLE / name).read_bytes(), name
    assert _log(out / "llm_usage.sqlite3") == _log(SAMPLE / "llm_usage.sqlite3")


def test_usage_of_a_session_folder_reads_its_own_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 0.3.5 session folder as the source: its data dir's records, never ``~/.nanobot``."""
    monkeypatch.setenv("HOME", str(tmp_path))  # an empty ~/.nanobot
    (folder,) = (SAMPLE / "sessions").iterdir()
    own = usage(folder, tz="UTC", estimate=False, cache=False)
    whole = usage(SAMPLE, tz="UTC", estimate=False, cache=False)
    pd.testing.assert_frame_equal(own, whole)
    assert own.summary["calls"] == 19


CLAUDE = REPO / "data" / "nanobot-0.3.5-claude"
CLAUDE_NAMESPACE = f"sessions/{SCRIPT['CLAUDE'].workspace_id}"
CLAUDE_FILES = [
    "config.json",
    "llm_usage.sqlite3",
    f"{CLAUDE_NAMESPACE}/.workspace",
    f"{CLAUDE_NAMESPACE}/c2xhY2s6Qzc3.jsonl",
    f"{CLAUDE_NAMESPACE}/dGVsZWdyYW06Ym9i.jsonl",
    "workspace/.nanobot/workspace-id",
    "workspace/memory/history.jsonl",
    "workspace/notes/ideas.txt",
    "workspace/notes/todo.md",
]


def test_the_claude_run_logged_its_stub_cache_s_reads_and_writes() -> None:
    """``data/nanobot-0.3.5-claude``: a Claude model behind OpenRouter (0.3.5 sends its
    cache_control markers), the stub's Anthropic-style cache reporting reads and writes."""
    assert _files(CLAUDE) == CLAUDE_FILES
    config = json.loads((CLAUDE / "config.json").read_text(encoding="utf-8"))
    assert config["agents"]["defaults"] == {
        "workspace": "workspace",
        "model": "anthropic/claude-sonnet-4.5",
        "provider": "openrouter",
        "timezone": "UTC",
    }
    frame = usage(CLAUDE, tz="UTC", estimate=False, cache=False)
    assert (frame.summary["calls"], frame.summary["unattributed"]) == (11, 0)
    columns = ["session_key", "turn", "step", "prompt_tokens", "cached_tokens"]
    rows = [tuple(r) for r in frame[[*columns, "cache_write_tokens"]].itertuples(index=False)]
    assert rows == [
        ("telegram:bob", 0, 0, 7806, 0, 7785),
        ("telegram:bob", 1, 0, 7834, 7785, 32),
        ("telegram:bob", 1, 1, 7902, 7785, 0),
        ("slack:C77", 0, 0, 7768, 5834, 1914),
        ("slack:C77", 0, 1, 7872, 7748, 68),
        ("telegram:bob", 2, 0, 7926, 7817, 92),
        ("telegram:bob", 2, 1, 8008, 7909, 66),
        ("slack:C77", 1, 0, 7897, 0, 7881),
        ("telegram:bob", 3, 0, 8033, 5834, 2184),
        ("slack:C77", 2, 0, 7920, 7881, 25),
        ("telegram:bob", 4, 0, 8058, 0, 8043),
    ]
    assert frame["time"].min() == datetime(2025, 6, 3, 9, 0, 2, tzinfo=UTC)
    assert frame["time"].max() == datetime(2025, 6, 3, 9, 21, 54, tzinfo=UTC)
    assert round(frame["cost_usd"].sum(), 7) == 0.1251684
    assert frame.problems.empty and frame.notes.empty


@pytest.mark.conformance
def test_the_claude_run_calibrates_the_cache() -> None:
    """Predicted against reported cached tokens on the log 0.3.5 wrote: the 300 s the stub
    kept entries lies in the fitted range; the errors are what the frame cannot see (the
    template files' 103 tokens of system prompt not shipped, and per session the tools
    another session cached, which the deployment scope reads)."""
    runtime = SCRIPT["CLAUDE_RUNTIME"]  # what the prompts named: the same on any machine
    calls = usage(CLAUDE, tz="UTC", cache=False, runtime=runtime)
    corpus = load(CLAUDE / "workspace", config_dir=CLAUDE, cache=False)
    frame = sk.requests(corpus, config_dir=CLAUDE, usage=calls, tz="UTC", runtime=runtime)
    calibration = sk.calibrate(calls, frame)
    assert calibration.cache_report.iloc[0].to_dict() == {
        "model": "anthropic/claude-sonnet-4.5",
        "cache_rules": "openai-marked",
        "calls": 11,
        "reported_read": 58593,
        "predicted_read": 46307,
        "read_median": 103.0,
        "read_p90": 5834.0,
        "write_calls": 11,
        "reported_write": 28090,
        "predicted_write": 39243,
        "write_median": 0.0,
        "write_p90": 5731.0,
        "ttl": 300.0,
        "ttl_low": 218.0,
        "ttl_high": 504.0,
    }
    assert calibration.report.iloc[0]["intercept"] == pytest.approx(103.0)
    shared = sk.requests(
        corpus, config_dir=CLAUDE, usage=calls, tz="UTC", runtime=runtime, cache_scope="deployment"
    )
    keys = ["session_key", "turn", "step"]
    agent = calls[calls["kind"] == "agent"].astype({"session_key": str}).set_index(keys)
    side = shared.astype({"session_key": str}).set_index(keys).join(agent["cached_tokens"])
    tools_only = side[side["cached_tokens"] == side["tools_tokens"]]  # another session's tools
    assert tools_only.index.tolist() == [("slack:C77", 0, 0), ("telegram:bob", 3, 0)]
    assert (tools_only["cache_read_tokens"] == tools_only["tools_tokens"]).all()


@pytest.mark.sampled
@pytest.mark.conformance
def test_a_fresh_generation_equals_the_claude_folder(tmp_path: Path) -> None:
    """The Claude run again, in a private folder of its own: the same files and log rows."""
    release("0.3.5")
    out = tmp_path / "out"
    SCRIPT["generate"](out, tmp_path / "scratch", SCRIPT["CLAUDE"])
    assert _files(out) == CLAUDE_FILES
    for name in CLAUDE_FILES:
        if name != "llm_usage.sqlite3":
            assert (out / name).read_bytes() == (CLAUDE / name).read_bytes(), name
    assert _log(out / "llm_usage.sqlite3") == _log(CLAUDE / "llm_usage.sqlite3")
