"""Where nanobot releases record LLM usage on disk and what the records mean (read only).

- 0.3.5's gateway logs every provider call in ``<data dir>/llm_usage.sqlite3`` (table
  ``llm_calls``, ``PRAGMA user_version = 1``, WAL mode): UTC epoch milliseconds, provider,
  model, source, input tokens (cache reads and writes included), output and cache tokens,
  and whether the provider reported them (``reported_tokens > 0``) or nanobot estimated them.
  Summary calls of the context governor run as ``dream``, like Dream runs and idle compaction.
- 0.3.5 keeps the last turn's summed agent usage in session metadata ``_last_usage`` and,
  for WebUI sessions (``websocket:<chat id>``), each turn's per-round usage in the
  ``round_usages`` of its ``turn_end`` record in ``<data dir>/webui/<safe key>.jsonl``.
- 0.2.2 and 0.3.0 keep daily totals per source in ``<data dir>/webui/token-usage.json``, the
  day taken in the config's ``agents.defaults.timezone`` (default UTC).

Session timestamps are naive local time of the nanobot process.  Nothing here writes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

__all__ = [
    "DAILY_FILE",
    "FAILED_REASONS",
    "LOG_COLUMNS",
    "LOG_FILE",
    "LOG_SCHEMA_VERSION",
    "LOG_TABLE",
    "SOURCES",
    "DailyTotal",
    "LastUsage",
    "RoundUsages",
    "call_source",
    "config_defaults",
    "daily_totals",
    "data_dir_of",
    "is_checkpoint",
    "last_usage",
    "namespaces",
    "round_usages",
]

LOG_FILE = "llm_usage.sqlite3"
LOG_TABLE = "llm_calls"
LOG_SCHEMA_VERSION = 1
LOG_COLUMNS: dict[str, bool] = {
    "id": True,
    "started_at_ms": True,
    "duration_ms": False,
    "provider": True,
    "model": True,
    "source": True,
    "stream": False,
    "finish_reason": False,
    "input_tokens": False,
    "output_tokens": False,
    "total_tokens": False,
    "cache_read_tokens": False,
    "cache_write_tokens": False,
    "reported_tokens": False,
    "estimated_tokens": False,
    "generation_ms": False,
    "measured_output_tokens": False,
    "ttft_ms": False,
    "timed_requests": False,
    "error_status_code": False,
    "error_kind": False,
}
"""The columns of 0.3.5's ``llm_calls`` table and whether a row means anything without it."""

DAILY_FILE = Path("webui") / "token-usage.json"
SOURCES = ("user", "api", "cron", "dream", "system")
FAILED_REASONS = frozenset({"error", "cancelled"})
"""``finish_reason`` values of a call that produced no reply (a retry repeats its step)."""

_WEBUI_PREFIX = "websocket:"
_NAMESPACE = re.compile(r"[0-9a-f]{32}")
_CHECKPOINT_KEY = "_hidden_history"


def call_source(session_key: str) -> str:
    """The ``source`` 0.3.5 records for a turn of ``session_key`` (absent cron metadata)."""
    if session_key.startswith("dream:"):
        return "dream"
    if session_key == "heartbeat" or session_key.startswith("cron:"):
        return "cron"
    for source in ("api", "system"):
        if session_key.startswith(f"{source}:"):
            return source
    return "user"


def is_checkpoint(message: Mapping[str, Any]) -> bool:
    """A hidden continuation message 0.3.5's governor leaves where it summarised."""
    return message.get("role") == "user" and message.get(_CHECKPOINT_KEY) is True


def _int(value: Any) -> int | None:
    """A non-negative integer count, or None (booleans and other types are no count)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and math.isfinite(value) and value >= 0 and value.is_integer():
        return int(value)
    return None


@dataclass(frozen=True)
class LastUsage:
    """``_last_usage``: the summed agent calls of a session's last turn (summaries excluded)."""

    request_count: int
    input_tokens: int
    output_tokens: int


def last_usage(metadata: Any) -> LastUsage | None:
    """The session's ``_last_usage``, or None when absent or not as 0.3.5 writes it."""
    raw = metadata.get("_last_usage") if isinstance(metadata, Mapping) else None
    if not isinstance(raw, Mapping):
        return None
    values = [_int(raw.get(k)) for k in ("request_count", "input_tokens", "output_tokens")]
    if any(v is None for v in values) or not values[0]:
        return None
    return LastUsage(*values)  # type: ignore[arg-type]  # no None among values: checked above


@dataclass(frozen=True)
class RoundUsages:
    """One WebUI ``turn_end`` record: its session, time and (prompt, completion) per round."""

    session_key: str
    created_at_ms: int
    rounds: tuple[tuple[int, int], ...]
    path: Path
    line_no: int


def _transcripts(data_dir: Path) -> Iterator[Path]:
    webui = data_dir / "webui"
    if not webui.is_dir():
        return
    for path in sorted(webui.glob("*.jsonl")):
        yield path
    for path in sorted(webui.glob("*.segments/*.jsonl")):
        yield path


def round_usages(data_dir: Path) -> tuple[list[RoundUsages], list[tuple[Path, int, str]]]:
    """Every WebUI ``turn_end`` record with ``round_usages`` under ``data_dir``, and the
    problems met (path, line, reason)."""
    found: list[RoundUsages] = []
    problems: list[tuple[Path, int, str]] = []
    for path in _transcripts(data_dir):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeError) as exc:
            problems.append((path, 0, f"WebUI transcript unreadable ({exc}); skipped"))
            continue
        for line_no, line in enumerate(lines, 1):
            if '"turn_end"' not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                problems.append((path, line_no, "turn_end line is no JSON; skipped"))
                continue
            rounds = record.get("round_usages") if isinstance(record, dict) else None
            chat_id, at = record.get("chat_id"), _int(record.get("created_at_ms"))
            if record.get("event") != "turn_end" or not rounds:
                continue
            pairs = [
                (_int(r.get("prompt_tokens")), _int(r.get("completion_tokens")))
                if isinstance(r, dict)
                else (None, None)
                for r in rounds
            ]
            if not isinstance(chat_id, str) or at is None or any(None in p for p in pairs):
                problems.append((path, line_no, "turn_end record not as 0.3.5 writes it; skipped"))
                continue
            key = _WEBUI_PREFIX + chat_id
            found.append(RoundUsages(key, at, tuple(pairs), path, line_no))  # type: ignore[arg-type]  # no None in pairs: checked above
    return found, problems


def namespaces(data_dir: Path) -> list[Path]:
    """0.3.5's per-workspace session folders, ``<data dir>/sessions/<workspace id>/``."""
    root = data_dir / "sessions"
    try:
        return sorted(p for p in root.iterdir() if _NAMESPACE.fullmatch(p.name) and p.is_dir())
    except OSError:
        return []


def data_dir_of(folder: Path) -> Path | None:
    """The data dir holding ``folder`` when it is one of 0.3.5's session folders
    (``<data dir>/sessions/<workspace id>/``), else None."""
    data = folder.parent.parent
    return data if folder.parent.name == "sessions" and folder in namespaces(data) else None


def config_defaults(data_dir: Path) -> tuple[str, Path]:
    """The config's ``agents.defaults`` timezone and workspace (nanobot's defaults when the
    config file is missing or unreadable)."""
    timezone, workspace = "UTC", "~/.nanobot/workspace"
    try:
        raw = json.loads((data_dir / "config.json").read_text(encoding="utf-8"))
        defaults = raw["agents"]["defaults"]
    except (OSError, ValueError, KeyError, TypeError):
        defaults = {}
    if isinstance(defaults, dict):
        if isinstance(defaults.get("timezone"), str) and defaults["timezone"].strip():
            timezone = defaults["timezone"]
        if isinstance(defaults.get("workspace"), str) and defaults["workspace"].strip():
            workspace = defaults["workspace"]
    return timezone, Path(workspace).expanduser()


@dataclass(frozen=True)
class DailyTotal:
    """One (local day, source) entry of ``token-usage.json``; None where not a count."""

    day: date
    source: str
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    requests: int | None
    estimated_requests: int | None


def _daily(day: date, source: str, row: Mapping[str, Any]) -> tuple[DailyTotal, list[str]]:
    keys = ("prompt_tokens", "completion_tokens", "cached_tokens")
    counts = ("requests", "estimated_requests")
    values = {k: _int(row.get(k, 0)) for k in (*keys, *counts)}
    bad = [k for k, v in values.items() if v is None]
    reasons = [f"{day} {source}: {k} is not a count ({row.get(k)!r}); left <NA>" for k in bad]
    return DailyTotal(day, source, **values), reasons


def daily_totals(raw: Any) -> tuple[list[DailyTotal], list[str]]:
    """The entries of a parsed ``token-usage.json`` (a day without ``sources`` counts as
    ``user``, as the releases read it), and the reasons entries were skipped or cut."""
    days = raw.get("days") if isinstance(raw, dict) else None
    if not isinstance(days, dict):
        return [], ["no 'days' mapping: not a token-usage.json as 0.2.2/0.3.0 write it"]
    out: list[DailyTotal] = []
    reasons: list[str] = []
    for key, row in sorted(days.items()):
        try:
            day = date.fromisoformat(key)
        except (TypeError, ValueError):
            reasons.append(f"day {key!r} is no date; skipped")
            continue
        if not isinstance(row, dict):
            reasons.append(f"{key}: entry is no mapping; skipped")
            continue
        sources = row.get("sources")
        named = (
            {s: r for s, r in sources.items() if isinstance(r, dict)}
            if isinstance(sources, dict)
            else {}
        )
        for source, entry in sorted(named.items()) or [("user", row)]:
            total, met = _daily(day, source if source in SOURCES else "system", entry)
            out.append(total)
            reasons.extend(met)
    return out, reasons
