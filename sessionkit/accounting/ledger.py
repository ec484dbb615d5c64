"""``usage``: every LLM call nanobot recorded, tied to its session turn and step, priced.

One row per call of 0.3.5's per-call log, plus one row per (day, source) of the daily totals
0.2.2 and 0.3.0 keep, for the days no per-call log covers (a call is never counted twice).
Problems with the files become rows of ``df.problems`` (the rest is still read);
``df.summary`` counts how the calls were attributed (:class:`sessionkit.schema.Reported`).
"""

from __future__ import annotations

import json
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, tzinfo
from os import PathLike
from pathlib import Path
from time import time_ns
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd

from sessionkit.accounting.attribution import (
    ATTRIBUTIONS,
    KINDS,
    Attribution,
    CallTimes,
    attribute,
    zone_key,
)
from sessionkit.accounting.logfile import LogRead, read_log
from sessionkit.accounting.pricing import price_calls
from sessionkit.nanobot.naming import SessionPathError
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.usage_records import (
    DAILY_FILE,
    LOG_FILE,
    DailyTotal,
    RoundUsages,
    config_defaults,
    daily_totals,
    data_dir_of,
    last_usage,
    namespaces,
    round_usages,
)
from sessionkit.nanobot.workspace import config_dir_hint, config_folder, recorded_workspace
from sessionkit.schema import PROBLEMS, USAGE, Reported, frame, string_array
from sessionkit.store import memo
from sessionkit.store.corpus import Corpus
from sessionkit.store.index import IndexedSession, file_identity
from sessionkit.store.loading import load

__all__ = ["ATTRIBUTIONS", "KINDS", "usage"]

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


def _loaded(folder: Path, cache: bool | str | Path | None) -> list[Session]:
    try:
        return list(load(folder, tokens=None, cache=cache))
    except SessionPathError:
        return []


def _groups(
    source: Any, config_dir: Any, workspace: Any, cache: bool | str | Path | None
) -> tuple[Path, list[Group]]:
    """The data dir whose usage records to read and the sessions to tie them to."""
    chosen = Path(workspace).expanduser() if workspace is not None else None
    if isinstance(source, Corpus) or not isinstance(source, str | PathLike):
        return config_folder(config_dir), [(chosen, list(source))]
    path = Path(source).expanduser()
    if not _is_data_dir(path):
        sessions = list(load(path, tokens=None, config_dir=config_dir, cache=cache))
        data = data_dir_of(path) if config_dir is None else None
        if data is not None:  # a 0.3.5 session folder: its own data dir, not ~/.nanobot
            return data, [(chosen or recorded_workspace(path), sessions)]
        return config_folder(config_dir), [(chosen or path, sessions)]
    data = config_folder(path)
    found = [(chosen or recorded_workspace(ns), _loaded(ns, cache)) for ns in namespaces(data)]
    if not found:
        configured = config_defaults(data)[1]
        if (configured / "sessions").is_dir():
            found = [(chosen or configured, _loaded(configured / "sessions", cache))]
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


_LOG_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
_KEPT_LOGS = 4
"""Usage logs whose rows are kept in memory (the least recently read dropped first)."""


@dataclass(frozen=True)
class _Log:
    """The per-call log as arrays (counts -1 where unknown; object arrays where the
    attribution reads values one by one), and the problems met reading it."""

    problems: list[tuple[int | None, str]]
    version: tuple[Any, ...] | None
    """The identity of the files it was read from (None: they changed while read)."""
    ids: np.ndarray
    ms: np.ndarray
    end: np.ndarray
    counts: dict[str, np.ndarray]
    values: dict[str, np.ndarray]
    """source, finish_reason, model and provider (None where unknown)."""
    reported: Any
    texts: dict[str, Any]
    """model and provider as string columns, source as a Categorical (copied before use)."""

    def __len__(self) -> int:
        return len(self.ms)


def _objects(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _arrays(read: LogRead, version: tuple[Any, ...] | None) -> _Log:
    columns, problems = read
    n = len(columns.get("started_at_ms", []))
    ints = {c: _ints(columns.get(c, [None] * n)) for c in (*_LOG_COUNTS, "duration_ms")}
    ints |= {c: _ints(columns.get(c, [None] * n)) for c in ("reported_tokens", "estimated_tokens")}
    known = ints["input_tokens"] >= 0
    reported = ~(ints["estimated_tokens"] > 0) | (ints["reported_tokens"] > 0)
    ms = np.array(columns.get("started_at_ms", []), dtype=np.int64)
    named = ("source", "finish_reason", "model", "provider")
    return _Log(
        problems,
        version,
        np.array(columns.get("id", []), dtype=np.int64),
        ms,
        ms + np.maximum(ints["duration_ms"], 0),
        {c: ints[c] for c in _LOG_COUNTS},
        {c: _objects(columns.get(c, [None] * n)) for c in named},
        pd.arrays.BooleanArray(reported & known, ~known),
        {
            "model": string_array(columns.get("model", [])),
            "provider": string_array(columns.get("provider", [])),
            "source": pd.Categorical(columns.get("source", [])),
        },
    )


_LOGS: dict[Path, tuple[tuple[Any, ...], _Log]] = {}


def _versions(db: Path) -> tuple[Any, ...]:
    """The identity (device, inode, size, times) of the log and its WAL files."""
    return tuple(file_identity(Path(f"{db}{suffix}")) for suffix in ("", "-wal", "-shm"))


def _log(data: Path) -> _Log:
    """The per-call log of ``data``: read once per version of its files (the database and its
    WAL files unchanged since: same identity; files changed too recently to tell are read
    again, as the session index does), then kept."""
    db = data / LOG_FILE
    before = _versions(db)
    kept = _LOGS.pop(db, None)
    if kept is not None and kept[0] == before:
        _LOGS[db] = kept
        return kept[1]
    now = time_ns()
    found = read_log(data)
    recent = any(v is not None and v.racy(now) for v in before)
    steady = _versions(db) == before and not recent
    read = _arrays(found, before if steady else None)
    if steady:
        _LOGS[db] = (before, read)
        while len(_LOGS) > _KEPT_LOGS:
            _LOGS.pop(next(iter(_LOGS)))
    return read


_TIED: OrderedDict[Any, Attribution] = OrderedDict()
_KEPT_ATTRIBUTIONS = 8


def _forget() -> None:
    _LOGS.clear()
    _TIED.clear()


memo.on_clear(_forget)


def _attribution(
    log: _Log,
    calls: CallTimes,
    sessions: list[Session],
    rounds: list[RoundUsages],
    zone: tzinfo | None,
) -> Attribution:
    """:func:`attribute`, kept for the same inputs: the same version of the log, sessions read
    back from the index and unchanged (with the same ``_last_usage``), WebUI records and
    zone."""
    key: Any = None
    if log.version is not None and all(
        isinstance(s, IndexedSession) and s.pristine for s in sessions
    ):
        key = (
            log.version,
            tuple((s.identity, s.policy, s.key, last_usage(s.metadata)) for s in sessions),  # type: ignore[attr-defined]  # all IndexedSession: checked above
            tuple(rounds),
            zone_key(zone),
        )
        try:
            found = _TIED.get(key)
        except TypeError:
            key = found = None
        if found is not None:
            _TIED.move_to_end(key)
            return found
    tied = attribute(calls, sessions, rounds, zone)
    if key is not None:
        _TIED[key] = tied
        while len(_TIED) > _KEPT_ATTRIBUTIONS:
            _TIED.popitem(last=False)
    return tied


def _estimates(
    groups: list[Group],
    config: Path | None,
    runtime: Mapping[str, Any] | None,
    problems: list[tuple[str, int | None, str]],
) -> pd.DataFrame:
    """sessionkit's count of each rebuilt agent request and its stored answer: session_key,
    turn, step, total_tokens and answer_tokens (a later group's row replaces an earlier one
    for the same call)."""
    from sessionkit.calls.frame import requests

    found = []
    for workspace, sessions in groups:
        if not sessions:
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                rows = requests(sessions, workspace=workspace, config_dir=config, runtime=runtime)
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
        found.append(
            pd.DataFrame(
                {
                    "session_key": _texts(whole["session_key"]),
                    "turn": whole["turn"].to_numpy(dtype=np.int64),
                    "step": whole["step"].to_numpy(dtype=np.int64),
                    "total_tokens": whole["total_tokens"].to_numpy(dtype=np.int64),
                    "answer_tokens": whole["answer_tokens"].to_numpy(dtype=np.int64),
                }
            )
        )
    if not found:
        columns = ("session_key", "turn", "step", "total_tokens", "answer_tokens")
        return pd.DataFrame({c: [] for c in columns})
    keys = ["session_key", "turn", "step"]
    return pd.concat(found, ignore_index=True).drop_duplicates(keys, keep="last")


def _texts(column: pd.Series) -> np.ndarray:
    """A categorical or string column's values as an object array of str."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        names = np.array([str(c) for c in column.cat.categories], dtype=object)
        return names[column.cat.codes.to_numpy()]
    return column.astype(str).to_numpy(dtype=object)


def _estimated(
    attributed: pd.DataFrame, agent: np.ndarray, found: pd.DataFrame, column: str
) -> Any:
    """Per attributed call (columns session_key, turn, step): the rebuilt request's ``column``
    for ``agent`` calls tied to a step, else <NA> (keys matched as one integer each)."""
    out = np.full(len(attributed), -1, dtype=np.int64)
    wanted = agent & attributed.notna().all(axis=1).to_numpy()
    if wanted.any() and len(found):
        chosen = attributed[wanted]
        codes, _ = pd.factorize(
            np.concatenate(
                [found["session_key"].to_numpy(dtype=object), _texts(chosen["session_key"])]
            )
        )
        turns = np.concatenate(
            [found["turn"].to_numpy(dtype=np.int64), chosen["turn"].to_numpy(dtype=np.int64)]
        )
        steps = np.concatenate(
            [found["step"].to_numpy(dtype=np.int64), chosen["step"].to_numpy(dtype=np.int64)]
        )
        n = len(found)
        if turns.max() < 2**24 and steps.max() < 2**16:
            joined = (codes.astype(np.int64) << 40) | (turns << 16) | steps
            at = pd.Index(joined[:n]).get_indexer(joined[n:])
        else:
            known = pd.MultiIndex.from_arrays([codes[:n], turns[:n], steps[:n]])
            at = known.get_indexer(pd.MultiIndex.from_arrays([codes[n:], turns[n:], steps[n:]]))
        totals = found[column].to_numpy(dtype=np.int64)
        out[np.flatnonzero(wanted)] = np.where(at >= 0, totals[np.maximum(at, 0)], -1)
    return pd.arrays.IntegerArray(out, out < 0)


def usage(
    source: str | PathLike[str] | Corpus | Iterable[Session],
    *,
    config_dir: str | PathLike[str] | None = None,
    workspace: str | PathLike[str] | None = None,
    tz: str | tzinfo | None = None,
    model: str | None = None,
    provider: str | None = None,
    estimate: bool = True,
    runtime: Mapping[str, Any] | None = None,
    cache: bool | str | Path | None = None,
) -> Reported:
    """One row per LLM call nanobot recorded (columns: :data:`sessionkit.schema.USAGE`).

    What is derived from files is kept in this process per file version: the log's rows (the
    database and its WAL files unchanged), each session's turn windows (a session read back
    from the index and unchanged, or the same messages list) and rebuilt requests, so a second
    call on unchanged files reads, parses and replays nothing.

    Parameters
    ----------
    source
        A nanobot data (config) dir — the folder of its ``config.json``, holding
        ``llm_usage.sqlite3`` and, for 0.3.5, ``sessions/<workspace id>/`` — or one such
        0.3.5 session folder (its data dir's records), or a workspace (its usage records
        are then read from ``config_dir``), or a Corpus / sessions.
    config_dir
        The data dir of a workspace or Corpus source (default ``~/.nanobot``; for a 0.3.5
        session folder, the data dir holding it).
    workspace
        The workspace whose prompt files rebuild each request (``estimated_prompt_tokens``):
        a Corpus source's; for a data dir, in place of the one each session folder records
        (a relative ``.workspace`` marker is read against the current folder, as nanobot does).
    tz
        The zone nanobot ran in (an IANA name or tzinfo): session timestamps are naive local
        time of that process, the log UTC.  Default: this machine's local zone.
    model, provider
        What to price the daily totals of 0.2.2 / 0.3.0 with (they record no model); without
        a model they keep ``cost_usd`` NaN.
    estimate
        Rebuild each attributed agent request with :func:`sessionkit.requests` for
        ``estimated_prompt_tokens``, and count its stored answer for
        ``estimated_completion_tokens`` (needs the release installed; else <NA>).
    runtime
        What those requests' prompts take from the machine, as in :func:`sessionkit.requests`
        (``workspace_path``, ``system``, ``python_version``, ``path``, ...); else this one's.
    cache
        The session index, as in :func:`sessionkit.load`.
    """
    if config_dir is not None and not Path(config_dir).expanduser().exists():
        raise SessionPathError(
            f"config_dir {config_dir} does not exist: pass the config file nanobot runs with, "
            "or the folder holding it (its data dir, with llm_usage.sqlite3)"
        )
    zone = _zone(tz)
    data, groups = _groups(source, config_dir, workspace, cache)
    sessions = [s for _, group in groups for s in group]
    problems: list[tuple[str, int | None, str]] = []
    notes: list[tuple[str, int | None, str]] = []
    log = _log(data)
    log_path = str(data / LOG_FILE)
    if not (data / LOG_FILE).exists():
        notes.append(
            (
                log_path,
                None,
                f"no usage log: {LOG_FILE} does not exist in {data} (nanobot 0.3.5 writes one "
                "there; earlier releases record no calls), so no call is listed",
            )
        )
    problems.extend((log_path, row, reason) for row, reason in log.problems)
    n = len(log)
    calls = CallTimes(
        log.ms,
        log.end,
        log.values["source"],
        log.values["finish_reason"],
        log.counts["input_tokens"],
        log.counts["output_tokens"],
    )
    rounds, round_problems = round_usages(data)
    problems.extend((str(p), line or None, r) for p, line, r in round_problems)
    tied = _attribution(log, calls, sessions, rounds, zone)
    problems.extend((log_path, None, r) for r in tied.problems)
    daily = _daily_rows(data, _covered(log.ms, data), problems)
    columns = _call_columns(log, tied)
    if estimate and n:
        config = data / "config.json"
        found = _estimates(groups, config if config.is_file() else None, runtime, problems)
        keys = pd.DataFrame({c: columns[c] for c in ("session_key", "turn", "step")})
        agent = tied.kind == KINDS.index("agent")
        columns["estimated_prompt_tokens"] = _estimated(keys, agent, found, "total_tokens")
        columns["estimated_completion_tokens"] = _estimated(keys, agent, found, "answer_tokens")
    if daily:
        columns = _with_daily(columns, daily, model, provider)
    names = {
        c: pd.Series(columns[c], dtype=object).where(pd.notna, None) for c in ("model", "provider")
    }
    counts = np.stack(
        [
            _minus_one(columns[c])
            for c in ("prompt_tokens", "cached_tokens", "cache_write_tokens", "completion_tokens")
        ],
        axis=1,
    ).reshape(-1, 4)
    times = np.asarray(columns["time"], dtype=np.int64)
    priced = price_calls(names["model"], names["provider"], times, counts)
    problems.extend(("genai-prices", None, p) for p in priced.problems)
    notes.extend(("genai-prices", None, p) for p in priced.notes)
    if daily and model is None:
        problems.append(
            (
                str(data / DAILY_FILE),
                None,
                "daily totals record no model: cost_usd NaN (pass model=)",
            )
        )
    columns["cost_usd"] = priced.cost
    columns["time"] = pd.to_datetime(times, unit="ms", utc=True).astype("datetime64[ns, UTC]")
    columns["kind"] = pd.Categorical.from_codes(np.asarray(columns["kind"], np.int64), KINDS)
    columns["attribution"] = pd.Categorical.from_codes(
        np.asarray(columns["attribution"], np.int64), ATTRIBUTIONS
    )
    if not isinstance(columns["source"], pd.Categorical):
        columns["source"] = pd.Categorical(columns["source"])
    out = frame(USAGE, columns).sort_values("time", kind="stable", ignore_index=True)
    return Reported.of(
        out,
        _problems_frame(problems),
        {**tied.summary, "daily_rows": len(daily), "tz": _zone_name(zone)},
        notes=_problems_frame(notes),
    )


def _problems_frame(rows: list[tuple[str, int | None, str]]) -> pd.DataFrame:
    """``(path, line_no, reason)`` rows as a :data:`~sessionkit.schema.PROBLEMS` frame."""
    return frame(PROBLEMS, {c.name: [p[i] for p in rows] for i, c in enumerate(PROBLEMS)})


def _minus_one(values: Any) -> np.ndarray:
    """Counts as int64, -1 where unknown."""
    return pd.array(values, dtype="Int64").to_numpy(dtype=np.int64, na_value=-1)


def _counted(values: np.ndarray) -> Any:
    """An Int64 column of counts (-1: <NA>), not sharing ``values``."""
    return pd.arrays.IntegerArray(values.copy(), values < 0)


def _call_columns(log: _Log, tied: Any) -> dict[str, Any]:
    """The per-call rows, one array per column (time in UTC epoch milliseconds; kind and
    attribution as codes)."""
    n = len(log)
    return {
        "time": log.ms,
        "session_key": string_array(tied.session_key),
        "turn": _counted(tied.turn),
        "step": _counted(tied.step),
        "source": log.texts["source"].copy(),
        "kind": tied.kind.copy(),
        "model": log.texts["model"].copy(),
        "provider": log.texts["provider"].copy(),
        "prompt_tokens": _counted(log.counts["input_tokens"]),
        "completion_tokens": _counted(log.counts["output_tokens"]),
        "cached_tokens": _counted(log.counts["cache_read_tokens"]),
        "cache_write_tokens": _counted(log.counts["cache_write_tokens"]),
        "cost_usd": [],
        "estimated_prompt_tokens": _counted(np.full(n, -1, dtype=np.int64)),
        "estimated_completion_tokens": _counted(np.full(n, -1, dtype=np.int64)),
        "attribution": tied.how.copy(),
        "reported": log.reported.copy(),
        "calls": _counted(np.ones(n, dtype=np.int64)),
        "call_id": _counted(log.ids),
    }


def _with_daily(
    columns: dict[str, Any],
    daily: list[tuple[datetime, DailyTotal]],
    model: str | None,
    provider: str | None,
) -> dict[str, Any]:
    """The columns with one row per (day, source) of the daily totals added: no session, no
    kind."""
    out = {name: list(values) for name, values in columns.items() if name != "cost_usd"}
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
            "kind": -1,
            "attribution": -1,
        }
        for name, values_list in out.items():
            values_list.append(values.get(name))
    out["cost_usd"] = []
    for name in ("session_key", "model", "provider", "source"):
        out[name] = [v if isinstance(v, str) else None for v in out[name]]
    return out
