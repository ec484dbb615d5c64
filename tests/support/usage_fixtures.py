"""Usage records written the way nanobot writes them, for the accounting tests.

``write_log`` creates ``llm_usage.sqlite3`` with 0.3.5's table (the statements below are
checked against the release's own store in ``test_logfile.py``) and inserts rows in the
column order 0.3.5's ``LLMUsageStore.record`` uses; ``write_session`` saves a session with
sessionkit's writer, which writes the bytes 0.3.5's ``SessionManager.save`` writes.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

from sessionkit.nanobot.session import Session
from sessionkit.nanobot.writer import save_session

NAMESPACE = "0123456789abcdef0123456789abcdef"
T0 = 1_767_261_600_000
"""2026-01-01 10:00:00 UTC in epoch milliseconds."""

DDL_035 = """
CREATE TABLE IF NOT EXISTS llm_calls (
    id INTEGER PRIMARY KEY,
    started_at_ms INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    source TEXT NOT NULL,
    stream INTEGER NOT NULL,
    finish_reason TEXT NOT NULL,
    input_tokens INTEGER,
    output_tokens INTEGER,
    total_tokens INTEGER,
    cache_read_tokens INTEGER,
    cache_write_tokens INTEGER,
    reported_tokens INTEGER,
    estimated_tokens INTEGER,
    generation_ms INTEGER,
    measured_output_tokens INTEGER,
    ttft_ms INTEGER,
    timed_requests INTEGER,
    error_status_code INTEGER,
    error_kind TEXT
);
CREATE INDEX IF NOT EXISTS llm_calls_started_at_idx
    ON llm_calls(started_at_ms);
CREATE INDEX IF NOT EXISTS llm_calls_provider_model_time_idx
    ON llm_calls(provider, model, started_at_ms);
"""

_INSERT = """
INSERT INTO llm_calls (
    started_at_ms, duration_ms, provider, model, source, stream,
    finish_reason, input_tokens, output_tokens, total_tokens,
    cache_read_tokens, cache_write_tokens, reported_tokens,
    estimated_tokens, generation_ms, measured_output_tokens,
    ttft_ms, timed_requests, error_status_code, error_kind
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""


def call(
    at: float,
    prompt: int | None = 1000,
    completion: int | None = 10,
    *,
    cached: int | None = 0,
    written: int | None = None,
    source: str = "user",
    duration: float = 0.5,
    finish: str = "stop",
    model: str = "gpt-4o-mini",
    provider: str = "openai",
    estimated: bool = False,
) -> tuple[Any, ...]:
    """One ``llm_calls`` row, ``at`` seconds after :data:`T0`, as 0.3.5 records it
    (``prompt`` None: a failed call with no usage)."""
    total = None if prompt is None else prompt + (completion or 0)
    usage = (
        (None,) * 8
        if prompt is None
        else (
            prompt,
            completion,
            total,
            cached,
            written,
            0 if estimated else total,
            total if estimated else 0,
            0,
        )
    )
    return (
        T0 + int(at * 1000),
        int(duration * 1000),
        provider,
        model,
        source,
        1,
        finish,
        *usage,
        0 if prompt is not None else None,
        0 if prompt is not None else None,
        0 if prompt is not None else None,
        None,
        "server_error" if finish == "error" else None,
    )


def write_log(data: Path, rows: list[tuple[Any, ...]]) -> Path:
    """``<data>/llm_usage.sqlite3`` holding ``rows`` (WAL mode, user_version 1), closed."""
    data.mkdir(parents=True, exist_ok=True)
    path = data / "llm_usage.sqlite3"
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.executescript(DDL_035)
    connection.execute("PRAGMA user_version = 1")
    connection.executemany(_INSERT, rows)
    connection.close()
    return path


def stamp(at: float, zone: tzinfo = UTC) -> str:
    """The naive local timestamp nanobot stores for ``at`` seconds after :data:`T0`."""
    moment = datetime.fromtimestamp(T0 / 1000, UTC) + timedelta(seconds=at)
    return moment.astimezone(zone).replace(tzinfo=None).isoformat()


def user(text: str, at: float, zone: tzinfo = UTC, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": stamp(at, zone), **extra}


def reply(text: str, at: float, zone: tzinfo = UTC) -> dict[str, Any]:
    return {"role": "assistant", "content": text, "timestamp": stamp(at, zone)}


def tool_round(call_id: str, at: float, zone: tzinfo = UTC) -> list[dict[str, Any]]:
    """An assistant tool call and its result, saved at ``at``."""
    return [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.md"}'},
                }
            ],
            "timestamp": stamp(at, zone),
        },
        {
            "role": "tool",
            "tool_call_id": call_id,
            "name": "read_file",
            "content": "1| alpha",
            "timestamp": stamp(at, zone),
        },
    ]


def checkpoint(at: float, zone: tzinfo = UTC) -> dict[str, Any]:
    """0.3.5's hidden continuation message, as its governor commits it."""
    return {
        "role": "user",
        "content": "(continuation)",
        "_hidden_history": True,
        "timestamp": stamp(at, zone),
    }


def write_session(
    data: Path, key: str, messages: list[dict[str, Any]], metadata: dict[str, Any] | None = None
) -> Path:
    """Save a 0.3.5 session in ``<data>/sessions/<namespace>/``."""
    folder = data / "sessions" / NAMESPACE
    folder.mkdir(parents=True, exist_ok=True)
    session = Session(key, list(messages), None, None, dict(metadata or {}), policy="nanobot-0.3.5")
    return save_session(session, folder, overwrite=True, fsync=False)


def last_usage(requests: int, prompt: int, completion: int) -> dict[str, Any]:
    """``_last_usage`` as 0.3.5 saves it for a turn of reported calls."""
    total = prompt + completion
    return {
        "input_tokens": prompt,
        "output_tokens": completion,
        "total_tokens": total,
        "cache_read_tokens": 0,
        "cache_write_tokens": None,
        "reported_tokens": total,
        "estimated_tokens": 0,
        "source": "reported",
        "generation_ms": 0,
        "measured_output_tokens": 0,
        "ttft_ms": 0,
        "timed_requests": 0,
        "context_tokens": prompt,
        "request_count": requests,
    }


def ledger(data: Path, **options: Any) -> Any:
    """``usage`` of a fixture data dir: session times read as UTC unless told, no request
    rebuilding, no index."""
    from sessionkit.accounting.ledger import usage

    return usage(data, **{"tz": "UTC", "estimate": False, "cache": False, **options})


def tied(frame: Any) -> list[tuple[Any, ...]]:
    """Per row: call id, session key, turn, step, kind, attribution (<NA> as None)."""
    columns = ["call_id", "session_key", "turn", "step", "kind", "attribution"]
    rows = frame[columns].astype(object).where(frame[columns].notna(), None)
    return [tuple(r) for r in rows.itertuples(index=False)]


def write_turn_end(data: Path, chat_id: str, at: float, rounds: list[tuple[int, int]]) -> Path:
    """A WebUI transcript holding one turn: its user record and its ``turn_end`` record with
    ``round_usages`` (0.3.5's ``LLMUsage.to_turn_dict`` per round), written ``at`` seconds
    after :data:`T0`."""
    import json

    turn = [
        {
            "prompt_tokens": p,
            "completion_tokens": c,
            "total_tokens": p + c,
            "request_count": 1,
            "estimated_tokens": 0,
            "context_tokens": p,
            "cached_tokens": 0,
        }
        for p, c in rounds
    ]
    summed = {k: sum(r[k] for r in turn) for k in turn[0]} if turn else {}
    records = [
        {
            "event": "user",
            "chat_id": chat_id,
            "text": "hello",
            "turn_id": "t1",
            "turn_phase": "user",
            "turn_seq": 1,
            "created_at_ms": T0,
        },
        {
            "event": "turn_end",
            "chat_id": chat_id,
            "turn_id": "t1",
            "latency_ms": 900,
            "usage": summed,
            "round_usages": turn,
            "created_at_ms": T0 + int(at * 1000),
        },
    ]
    path = data / "webui" / f"websocket_{chat_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return path
