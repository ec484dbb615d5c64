"""``usage``: every LLM call nanobot recorded, tied to its session turn and step, priced.

One row per call of 0.3.5's per-call log, plus one row per (day, source) of the daily totals
0.2.2 and 0.3.0 keep, for the days no per-call log covers (a call is never counted twice).
Problems with the files become rows of ``df.attrs["problems"]`` (the rest is still read);
``df.attrs["summary"]`` counts how the calls were attributed.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime, time, tzinfo
from os import PathLike
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd

from sessionkit.accounting.attribution import CallTimes, attribute
from sessionkit.accounting.logfile import read_log
from sessionkit.accounting.pricing import price_calls
from sessionkit.nanobot.naming import SessionPathError
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.usage_records import (
    DAILY_FILE,
    LOG_FILE,
    DailyTotal,
    config_defaults,
    daily_totals,
    namespaces,
    round_usages,
)
from sessionkit.nanobot.workspace import config_dir_hint, config_folder, recorded_workspace
from sessionkit.schema import PROBLEMS, USAGE, frame
from sessionkit.store.corpus import Corpus, load

__all__ = ["usage"]

KINDS = ("agent", "summary", "other")
ATTRIBUTIONS = ("exact", "time")

Group = tuple[Path | None, list[Session]]
"""Sessions of one workspace (None: not known)."""


def _zone(tz: str | tzinfo | None) -> tzinfo | None:
    return ZoneInfo(tz) if isinstance(tz, str) else tz


def _zone_name(zone: tzinfo | None) -> str:
    if zone is None:
        return f"local ({datetime.now().astimezone().tzname()})"
    return str(getattr(zone, "key", zone))


def _is_data_dir(path: Path) -> bool:
    """A nanobot data (config) dir: its usage records, config file or 0.3.5 session folders."""
    if path.is_file():
        return path.suffix == ".json" and config_dir_hint(path) is not None
    return (
        (path / LOG_FILE).exists()
        or (path / DAILY_FILE).exists()
        or (path / "config.json").is_file()
        or bool(namespaces(path))
    )


def _loaded(folder: Path, cache: bool | PathLike[str]) -> list[Session]:
    try:
        return list(load(folder, tokens=None, cache=cache))
    except SessionPathError:
        return []


def _groups(
    source: Any, config_dir: Any, workspace: Any, cache: bool | PathLike[str]
) -> tuple[Path, list[Group]]:
    """The data dir whose usage records to read and the sessions to tie them to."""
    chosen = Path(workspace).expanduser() if workspace is not None else None
    if isinstance(source, Corpus) or not isinstance(source, str | PathLike):
        return config_folder(config_dir), [(chosen, list(source))]
    path = Path(source).expanduser()
    if not _is_data_dir(path):
        sessions = list(load(path, tokens=None, config_dir=config_dir, cache=cache))
        return config_folder(config_dir), [(chosen or path, sessions)]
    data = config_folder(path)
    found = [(recorded_workspace(ns), _loaded(ns, cache)) for ns in namespaces(data)]
    if not found:
        configured = config_defaults(data)[1]
        if (configured / "sessions").is_dir():
            found = [(configured, _loaded(configured / "sessions", cache))]
    return data, found


def _daily_rows(
    data: Path, covered: set[date], problems: list[tuple[str, int | None, str]]
) -> list[tuple[datetime, DailyTotal]]:
    """The days of ``token-usage.json`` no per-call log covers, each at its local midnight."""
    path = data / DAILY_FILE
    if not path.exists():
        return []
    where = str(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeError, ValueError) as exc:
        problems.append((where, None, f"unreadable ({exc}): no daily totals"))
        return []
    name = config_defaults(data)[0]
    try:
        zone: tzinfo = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        problems.append((where, None, f"config timezone {name!r} unknown: days read as UTC"))
        zone = UTC
    totals, reasons = daily_totals(raw)
    problems.extend((where, None, r) for r in reasons)
    skipped = sorted({t.day for t in totals if t.day in covered})
    if skipped:
        problems.append(
            (
                where,
                None,
                f"{len(skipped)} day(s) also in the per-call log, daily totals left "
                f"out: {', '.join(map(str, skipped[:5]))}{' ...' if len(skipped) > 5 else ''}",
            )
        )
    return [
        (datetime.combine(t.day, time(), tzinfo=zone).astimezone(UTC), t)
        for t in totals
        if t.day not in covered
    ]


def _covered(ms: np.ndarray, data: Path) -> set[date]:
    """The local days (the config's zone, as the daily totals count them) the log covers."""
    try:
        zone: tzinfo = ZoneInfo(config_defaults(data)[0])
    except (ZoneInfoNotFoundError, ValueError):
        zone = UTC
    days = pd.to_datetime(ms, unit="ms", utc=True).tz_convert(zone).normalize()
    return {d.date() for d in days.unique()}


def _ints(values: Iterable[int | None]) -> np.ndarray:
    return np.array([-1 if v is None else v for v in values], dtype=np.int64)


def _estimates(
    groups: list[Group], config: Path | None, problems: list[tuple[str, int | None, str]]
) -> dict[tuple[str, int, int], int]:
    """sessionkit's count of each rebuilt agent request, by (session, turn, step)."""
    from sessionkit.calls.frame import requests

    out: dict[tuple[str, int, int], int] = {}
    for workspace, sessions in groups:
        if not sessions:
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                rows = requests(sessions, workspace=workspace, config=config)
            except (NotImplementedError, ValueError, RuntimeError, OSError) as exc:
                problems.append(
                    (
                        str(workspace),
                        None,
                        f"requests not rebuilt ({exc}): estimated_prompt_tokens <NA>",
                    )
                )
                continue
        problems.extend((str(workspace), None, str(w.message)) for w in caught)
        whole = rows[(rows["system_tokens"] > 0) | (rows["tools_tokens"] > 0)]
        if len(whole) < len(rows):
            problems.append(
                (
                    str(workspace),
                    None,
                    f"{len(rows) - len(whole)} request(s) rebuilt without "
                    "system prompt and tools: estimated_prompt_tokens <NA> for them",
                )
            )
        keys = zip(whole["session_key"], whole["turn"], whole["step"], strict=True)
        out.update(
            {
                (str(k), int(t), int(s)): int(v)
                for (k, t, s), v in zip(keys, whole["total_tokens"], strict=True)
            }
        )
    return out


def usage(
    source: str | PathLike[str] | Corpus | Iterable[Session],
    *,
    config_dir: str | PathLike[str] | None = None,
    workspace: str | PathLike[str] | None = None,
    tz: str | tzinfo | None = None,
    model: str | None = None,
    provider: str | None = None,
    estimate: bool = True,
    cache: bool | PathLike[str] = True,
) -> pd.DataFrame:
    """One row per LLM call nanobot recorded (columns: :data:`sessionkit.schema.USAGE`).

    Parameters
    ----------
    source
        A nanobot data (config) dir — the folder of its ``config.json``, holding
        ``llm_usage.sqlite3`` and, for 0.3.5, ``sessions/<workspace id>/`` — or a workspace
        (its usage records are then read from ``config_dir``), or a Corpus / sessions.
    config_dir
        The data dir of a workspace or Corpus source (default ``~/.nanobot``).
    workspace
        The workspace of a Corpus source (for ``estimated_prompt_tokens``).
    tz
        The zone nanobot ran in (an IANA name or tzinfo): session timestamps are naive local
        time of that process, the log UTC.  Default: this machine's local zone.
    model, provider
        What to price the daily totals of 0.2.2 / 0.3.0 with (they record no model); without
        a model they keep ``cost_usd`` NaN.
    estimate
        Rebuild each attributed agent request with :func:`sessionkit.requests` for
        ``estimated_prompt_tokens`` (needs the release installed; else <NA>).
    cache
        The session index, as in :func:`sessionkit.load`.
    """
    zone = _zone(tz)
    data, groups = _groups(source, config_dir, workspace, cache)
    sessions = [s for _, group in groups for s in group]
    problems: list[tuple[str, int | None, str]] = []
    log, met = read_log(data)
    log_path = str(data / LOG_FILE)
    problems.extend((log_path, row, reason) for row, reason in met)
    ms = np.array(log.get("started_at_ms", []), dtype=np.int64)
    n = len(ms)
    duration = _ints(log.get("duration_ms", [None] * n))
    calls = CallTimes(
        ms,
        ms + np.maximum(duration, 0),
        log.get("source", []),
        log.get("finish_reason", []),
        log.get("input_tokens", []),
        log.get("output_tokens", []),
    )
    rounds, round_problems = round_usages(data)
    problems.extend((str(p), line or None, r) for p, line, r in round_problems)
    tied = attribute(calls, sessions, rounds, zone)
    problems.extend((log_path, None, r) for r in tied.problems)
    daily = _daily_rows(data, _covered(ms, data), problems)
    columns = _call_columns(log, tied, n)
    _append_daily(columns, daily, model, provider)
    counts = np.stack(
        [
            _ints(columns[c])
            for c in ("prompt_tokens", "cached_tokens", "cache_write_tokens", "completion_tokens")
        ],
        axis=1,
    ).reshape(-1, 4)
    priced = price_calls(
        columns["model"], columns["provider"], np.array(columns["time"], dtype=np.int64), counts
    )
    problems.extend(("genai-prices", None, p) for p in priced.problems)
    if daily and model is None:
        problems.append(
            (
                str(data / DAILY_FILE),
                None,
                "daily totals record no model: cost_usd NaN (pass model=)",
            )
        )
    columns["cost_usd"] = priced.cost
    if estimate and n:
        config = data / "config.json"
        found = _estimates(groups, config if config.is_file() else None, problems)
        columns["estimated_prompt_tokens"] = [
            found.get((k, t, s)) if kind == "agent" and None not in (k, t, s) else None
            for k, t, s, kind in zip(
                columns["session_key"],
                columns["turn"],
                columns["step"],
                columns["kind"],
                strict=True,
            )
        ]
    columns["time"] = pd.to_datetime(
        np.array(columns["time"], dtype=np.int64), unit="ms", utc=True
    ).astype("datetime64[ns, UTC]")
    columns["kind"] = pd.Categorical(columns["kind"], categories=KINDS)
    columns["attribution"] = pd.Categorical(columns["attribution"], categories=ATTRIBUTIONS)
    columns["source"] = pd.Categorical(columns["source"])
    out = frame(USAGE, columns).sort_values("time", kind="stable", ignore_index=True)
    out.attrs["problems"] = frame(
        PROBLEMS, {c.name: [p[i] for p in problems] for i, c in enumerate(PROBLEMS)}
    )
    out.attrs["summary"] = {**tied.summary, "daily_rows": len(daily), "tz": _zone_name(zone)}
    return out


def _reported(log: Mapping[str, list[Any]], i: int) -> bool | None:
    """Whether the provider reported the call's usage (False: nanobot estimated it)."""
    if log["input_tokens"][i] is None:
        return None
    return not (log["estimated_tokens"][i] or 0) > 0 or (log["reported_tokens"][i] or 0) > 0


def _call_columns(log: Mapping[str, list[Any]], tied: Any, n: int) -> dict[str, list[Any]]:
    """The per-call rows, one list per column (time in UTC epoch milliseconds)."""
    return {
        "time": list(log.get("started_at_ms", [])),
        "session_key": tied.session_key,
        "turn": tied.turn,
        "step": tied.step,
        "source": list(log.get("source", [])),
        "kind": tied.kind,
        "model": list(log.get("model", [])),
        "provider": list(log.get("provider", [])),
        "prompt_tokens": list(log.get("input_tokens", [])),
        "completion_tokens": list(log.get("output_tokens", [])),
        "cached_tokens": list(log.get("cache_read_tokens", [])),
        "cache_write_tokens": list(log.get("cache_write_tokens", [])),
        "cost_usd": [],
        "estimated_prompt_tokens": [None] * n,
        "attribution": tied.how,
        "reported": [_reported(log, i) for i in range(n)],
        "calls": [1] * n,
        "call_id": list(log.get("id", [])),
    }


def _append_daily(
    columns: dict[str, list[Any]],
    daily: list[tuple[datetime, DailyTotal]],
    model: str | None,
    provider: str | None,
) -> None:
    """Add one row per (day, source) of the daily totals: no session, no kind."""
    for at, total in daily:
        estimated = total.estimated_requests
        reported = (
            None
            if estimated is None or total.requests is None
            else (True if estimated == 0 else False if estimated == total.requests else None)
        )
        values = {
            "time": int(at.timestamp() * 1000),
            "source": total.source,
            "model": model,
            "provider": provider,
            "prompt_tokens": total.prompt_tokens,
            "completion_tokens": total.completion_tokens,
            "cached_tokens": total.cached_tokens,
            "reported": reported,
            "calls": total.requests,
        }
        for name, values_list in columns.items():
            if name != "cost_usd":
                values_list.append(values.get(name))
