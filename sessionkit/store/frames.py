"""Each session's columnar copy (an :class:`Entry`: an Arrow table of its messages plus its own
values), and the documented DataFrames assembled from entries, column by column.

Entries are what the persistent index (:mod:`sessionkit.store.index`) keeps, so a frame is the same
whether its entries were just built or read back from disk.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from itertools import chain, repeat
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sessionkit import schema
from sessionkit.nanobot.history import RUNTIME_CONTEXT_KEY, is_hidden_history
from sessionkit.nanobot.listing import flatten_content, session_preview, session_title
from sessionkit.nanobot.policies import POLICIES, get_policy
from sessionkit.nanobot.reader import Problem, parse_timestamp, runtime_checkpoint
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.uncountable import counts_or_missing, uncountable_reason
from sessionkit.store.counting import Method, TokenCache, count_tokens
from sessionkit.store.fields import STR_OR_NONE, message_field
from sessionkit.store.text import shown

__all__ = [
    "FRAME_TIMES",
    "MESSAGE_TABLE",
    "Entry",
    "build_entries",
    "entry_problems",
    "fits_frame",
    "messages_frame",
    "problems_frame",
    "sessions_frame",
]

FRAME_TIMES = (
    pd.Timestamp.min.ceil("us").to_pydatetime(),
    pd.Timestamp.max.floor("us").to_pydatetime(),
)
"""The earliest and latest wall-clock times a ``datetime64[ns]`` column holds."""


def _naive(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=None) if value is not None and value.tzinfo else value


def fits_frame(value: datetime) -> bool:
    """Whether a time (wall clock, offset dropped) fits a frame's ``datetime64[ns]`` column."""
    return FRAME_TIMES[0] <= _naive(value) <= FRAME_TIMES[1]  # type: ignore[operator]


def _framed(value: datetime | None) -> datetime | None:
    """``value`` as a frame shows it: wall clock, missing when out of the column's range."""
    return _naive(value) if value is not None and fits_frame(value) else None


def _to_datetime(values: list[Any]) -> np.ndarray:
    """ISO strings to naive wall-clock datetimes; anything else becomes NaT.

    numpy parses plain ISO strings in C; offsets, words numpy accepts ("now") and anything
    unparsable take the exact per-value path (``datetime.fromisoformat``, offset dropped).
    A time outside :data:`FRAME_TIMES` is NaT, never wrapped around.
    """
    strings = [v if type(v) is str else None for v in values]
    # numpy also reads "now" and "today"; no ISO date is shorter than 10 characters.
    if min(map(len, filter(None, strings)), default=10) >= 10:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                stamps = np.array(strings, dtype="datetime64[us]")
            except (ValueError, TypeError, OverflowError, UserWarning, DeprecationWarning):
                pass
            else:
                low, high = (np.datetime64(t, "us") for t in FRAME_TIMES)
                stamps[(stamps < low) | (stamps > high)] = np.datetime64("NaT")
                return stamps.astype("datetime64[ns]")
    parsed = [_framed(parse_timestamp(s)) for s in strings]
    return pd.Series(parsed, dtype="datetime64[ns]").to_numpy()


def _is_instance(values: list[Any], kind: type) -> np.ndarray:
    return np.fromiter(map(isinstance, values, repeat(kind)), dtype=bool, count=len(values))


def _truthy(values: list[Any]) -> np.ndarray:
    return np.fromiter(map(bool, values), dtype=bool, count=len(values))


def _list_lengths(values: list[Any]) -> np.ndarray:
    """``len`` of each value that is a list, else 0."""
    lengths = np.zeros(len(values), dtype=np.int64)
    lists = np.flatnonzero(_is_instance(values, list))
    lengths[lists] = [len(values[i]) for i in lists]
    return lengths


def _arrow_strings(values: list[Any]) -> tuple[pa.Array, dict[int, str]]:
    """A string column for the table: non-strings become null.  Strings Arrow cannot hold (a
    lone surrogate: a key, file name or text that is not valid Unicode) are null there and
    returned by row, so the frame can put them back."""
    if not STR_OR_NONE.issuperset(map(type, values)):
        values = [v if type(v) is str else None for v in values]
    try:
        return pa.array(values, type=pa.large_string()), {}
    except (UnicodeEncodeError, pa.ArrowException):
        odd = {i: v for i, v in enumerate(values) if v is not None and not _utf8(v)}
        clean = [None if i in odd else v for i, v in enumerate(values)]
        return pa.array(clean, type=pa.large_string()), odd


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


MESSAGE_TABLE = pa.schema(
    [
        ("line_no", pa.int64()),
        ("role", pa.large_string()),
        ("text", pa.large_string()),
        ("timestamp", pa.int64()),
        ("tokens", pa.int64()),
        ("tokens_fallback", pa.int64()),
        ("is_command", pa.bool_()),
        ("is_channel_delivery", pa.bool_()),
        ("n_tool_calls", pa.int64()),
        ("tool_call_id", pa.large_string()),
        ("name", pa.large_string()),
        ("has_media", pa.bool_()),
        ("hidden", pa.bool_()),
        ("runtime_context", pa.bool_()),
    ]
)
"""One file's messages as the index keeps them: -1 is a missing line number or token count,
the minimum int64 a missing time (nanoseconds)."""

_ESCAPED = ("text", "tool_call_id", "name")
_NAT = np.iinfo(np.int64).min


@dataclass(eq=False)
class Entry:
    """One session's columnar copy: what every frame and window needs without its dicts.

    ``table`` has :data:`MESSAGE_TABLE`'s columns, one row per message; ``meta`` the session's
    own values (see :func:`build_entries`), JSON-ready.
    """

    session: Session
    table: pa.Table
    meta: dict[str, Any]


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _line_numbers(session: Session) -> np.ndarray:
    lines = session.line_numbers
    if isinstance(lines, range):
        return np.arange(lines.start, lines.stop, dtype=np.int64)
    if lines is None:
        return np.full(len(session.messages), -1, dtype=np.int64)
    return np.asarray(lines, dtype=np.int64)


def _token_counts(
    msgs: list[dict[str, Any]], method: Method, cache: TokenCache | None
) -> np.ndarray:
    """0.2.2's count of every message (-1 where nanobot cannot count it)."""
    counts = counts_or_missing(msgs, partial(count_tokens, method=method, cache=cache))
    return np.array([-1 if n is None else n for n in counts], dtype=np.int64)


def _sum_or_none(counts: np.ndarray) -> int | None:
    valid = counts[counts >= 0]
    return int(valid.sum()) if len(valid) else None


def _session_problems(session: Session, read: list[Problem]) -> list[Problem]:
    """What reading found, then each message nanobot cannot count, then each time a frame
    cannot hold."""
    path = str(session.path)
    lines = session.line_numbers or [None] * len(session.messages)
    found = list(read)
    found += [
        Problem(path, line_no, reason)
        for message, line_no in zip(session.messages, lines, strict=True)
        if (reason := uncountable_reason(message))
    ]
    for field in ("created_at", "updated_at"):
        value = getattr(session, field)
        if value is not None and not fits_frame(value):
            reason = f"metadata {field} {value.isoformat()} " + _OUT_OF_FRAME.format(
                frame="sessions"
            )
            found.append(Problem(path, None, reason))
    stamps = message_field(session.messages, "timestamp")
    found += [
        Problem(path, line_no, f"timestamp {stamp!r} " + _OUT_OF_FRAME.format(frame="messages"))
        for stamp, line_no in zip(stamps, lines, strict=True)
        if _stamp_outside(stamp)
    ]
    return found


_OUT_OF_FRAME = (
    f"is outside what a frame's time column holds ({FRAME_TIMES[0]:%Y-%m-%d} .. "
    f"{FRAME_TIMES[1]:%Y-%m-%d}): missing (NaT) in corpus.{{frame}}, kept as stored in the Session"
)


def _stamp_outside(value: object) -> bool:
    """Whether a message timestamp is a valid time a frame cannot hold (only years outside
    1678..2261 are parsed to find out)."""
    if type(value) is not str or "1678" <= value[:4] <= "2261":
        return False
    parsed = parse_timestamp(value)
    return parsed is not None and not fits_frame(parsed)


def _first_damaged_line(problems: list[Problem]) -> int | None:
    lines = [p.line_no for p in problems if p.skipped and p.line_no is not None]
    return min(lines, default=None)


def build_entries(
    sessions: Sequence[Session],
    problems: dict[str, list[Problem]] | None = None,
    *,
    tokens: Method | None = "tiktoken",
    cache: TokenCache | None = None,
) -> list[Entry]:
    """Each session's :class:`Entry`, its columns built for all sessions at once.

    ``problems`` maps a file to what reading it found.  Both token counts are kept: 0.2.2's
    exact one (only with ``tokens="tiktoken"``; else -1, and ``meta["counted"]`` is False) and
    its no-tiktoken estimate.
    """
    read = problems or {}
    lengths = np.fromiter((len(s.messages) for s in sessions), dtype=np.int64, count=len(sessions))
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    msgs: list[dict[str, Any]] = list(chain.from_iterable(s.messages for s in sessions))
    roles = message_field(msgs, "role")
    if not STR_OR_NONE.issuperset(map(type, roles)):
        roles = [v if v is None or type(v) is str else str(v) for v in roles]
    try:
        role_column = pa.array(roles, type=pa.large_string())
    except (UnicodeEncodeError, pa.ArrowException):  # a lone surrogate: shown escaped
        role_column = pa.array(list(map(shown, roles)), type=pa.large_string())
    text = message_field(msgs, "content")
    for i in np.flatnonzero(~_is_instance(text, str)):
        text[i] = flatten_content(text[i])
    counted = tokens == "tiktoken"
    exact = _token_counts(msgs, "tiktoken", cache) if counted else np.full(total, -1, np.int64)
    estimate = _token_counts(msgs, "fallback", cache)
    stamps = _to_datetime(message_field(msgs, "timestamp")).view(np.int64)
    strings = {
        "text": _arrow_strings(text),
        "tool_call_id": _arrow_strings(message_field(msgs, "tool_call_id")),
        "name": _arrow_strings(message_field(msgs, "name")),
    }
    columns = {
        "line_no": np.concatenate([_line_numbers(s) for s in sessions] + [np.zeros(0, np.int64)]),
        "role": role_column,
        "text": strings["text"][0],
        "timestamp": stamps,
        "tokens": exact,
        "tokens_fallback": estimate,
        "is_command": _truthy(message_field(msgs, "_command")),
        "is_channel_delivery": _truthy(message_field(msgs, "_channel_delivery")),
        "n_tool_calls": _list_lengths(message_field(msgs, "tool_calls")),
        "tool_call_id": strings["tool_call_id"][0],
        "name": strings["name"][0],
        "has_media": _list_lengths(message_field(msgs, "media")) > 0,
        "hidden": np.fromiter(map(is_hidden_history, msgs), dtype=bool, count=total),
        "runtime_context": _is_instance(message_field(msgs, RUNTIME_CONTEXT_KEY), dict),
    }
    table = pa.table(columns, schema=MESSAGE_TABLE)
    entries = []
    for session, start, n in zip(sessions, starts.tolist(), lengths.tolist(), strict=True):
        stop = start + n
        found = _session_problems(session, read.get(str(session.path), []))
        times = stamps[start:stop][stamps[start:stop] != _NAT]
        meta = {
            "key": session.key,
            "path": None if session.path is None else str(session.path),
            "format": session.format,
            "created_at": _iso(session.created_at),
            "updated_at": _iso(session.updated_at),
            "metadata": session.metadata,
            "records": session.records,
            "last_consolidated": session.last_consolidated,
            "policy": session.policy,
            "title": session_title(session.metadata),
            "preview": session_preview(
                session.messages,
                line_numbers=session.line_numbers,
                first_damaged_line=_first_damaged_line(found),
            ),
            "n_messages": n,
            "turns": {
                name: sum(map(policy.is_user_turn, session.messages))
                for name, policy in POLICIES.items()
            },
            "problems": [[p.line_no, p.reason, p.skipped] for p in found],
            "escapes": {
                name: {str(row - start): value for row, value in odd.items() if start <= row < stop}
                for name, (_, odd) in strings.items()
            },
            "counted": counted,
            "tokens": _sum_or_none(exact[start:stop]),
            "tokens_fallback": _sum_or_none(estimate[start:stop]),
            "first_message_at": int(times.min()) if len(times) else None,
            "last_message_at": int(times.max()) if len(times) else None,
        }
        entries.append(Entry(session, table.slice(start, n), meta))
    return entries


def entry_problems(entry: Entry) -> list[Problem]:
    """The problems an entry records, as :class:`Problem` values."""
    path = entry.meta["path"] or "None"
    return [
        Problem(path, line, reason, skipped) for line, reason, skipped in entry.meta["problems"]
    ]


def _column(entries: Sequence[Entry], name: str) -> pa.ChunkedArray:
    """One column of every entry, their chunks side by side (nothing copied)."""
    chunks = [chunk for e in entries for chunk in e.table.column(name).chunks]
    return pa.chunked_array(chunks, type=MESSAGE_TABLE.field(name).type)


def _numbers(entries: Sequence[Entry], name: str) -> np.ndarray:
    return _column(entries, name).to_numpy()


def _nullable(values: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(values, values < 0)


def _frame_strings(entries: Sequence[Entry], name: str) -> Any:
    """A string column: Arrow's buffers as they are, unless an entry holds a string Arrow
    cannot (then Python strings, with those put back)."""
    column = _column(entries, name)
    if not any(e.meta["escapes"][name] for e in entries):
        return pd.arrays.ArrowStringArray(column)
    values = column.to_numpy(zero_copy_only=False).astype(object)
    start = 0
    for entry in entries:
        for row, value in entry.meta["escapes"][name].items():
            values[start + int(row)] = value
        start += entry.meta["n_messages"]
    return schema.string_array(list(values))


def _roles(entries: Sequence[Entry]) -> tuple[np.ndarray, list[str]]:
    """Role codes and categories in order of first appearance (-1: missing)."""
    column = _column(entries, "role")
    categories = [r for r in pc.unique(column).to_pylist() if r is not None]
    codes = pc.index_in(column, value_set=pa.array(categories, type=pa.large_string()))
    return codes.fill_null(-1).to_numpy().astype(np.int64), categories


def _user_index(
    entries: Sequence[Entry],
    role_codes: np.ndarray,
    roles: list[str],
    lengths: np.ndarray,
    starts: np.ndarray,
) -> np.ndarray:
    """Each message's user turn under its session's release (-1 before the first): user
    messages, less the hidden ones a release does not count as turns."""
    is_user = role_codes == (roles.index("user") if "user" in roles else -2)
    counted = np.repeat([get_policy(e.session.policy).hidden_turns for e in entries], lengths)
    turn = is_user & (counted | ~_numbers(entries, "hidden").astype(bool))
    before = np.concatenate(([0], np.cumsum(turn)))
    return before[1:] - np.repeat(before[starts], lengths) - 1


def messages_frame(entries: Sequence[Entry], *, tokens: Method | None = "tiktoken") -> pd.DataFrame:
    """One row per message of every entry (columns: :data:`sessionkit.schema.MESSAGES`).

    Numbers are read from the entries' columns, strings stay in Arrow's buffers.
    ``tokens=None`` leaves the token column <NA>.
    """
    if not entries:
        return schema.empty_frame(schema.MESSAGES)
    lengths = np.array([e.meta["n_messages"] for e in entries], dtype=np.int64)
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    idx = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    offsets = np.repeat([e.session.last_consolidated for e in entries], lengths)
    keys = [e.session.key for e in entries]
    role_codes, roles = _roles(entries)
    counts = (
        _numbers(entries, "tokens" if tokens == "tiktoken" else "tokens_fallback")
        if tokens
        else np.full(total, -1, dtype=np.int64)
    )
    return schema.frame(
        schema.MESSAGES,
        {
            "session_key": pd.Categorical.from_codes(
                np.repeat(np.arange(len(entries)), lengths),
                categories=pd.Index(keys, dtype=object),
            ),
            "idx": idx,
            "line_no": _nullable(_numbers(entries, "line_no")),
            "role": role_codes,
            "text": _frame_strings(entries, "text"),
            "timestamp": _numbers(entries, "timestamp").view("datetime64[ns]"),
            "tokens": _nullable(counts),
            "is_command": _numbers(entries, "is_command").astype(bool),
            "is_channel_delivery": _numbers(entries, "is_channel_delivery").astype(bool),
            "n_tool_calls": _numbers(entries, "n_tool_calls"),
            "tool_call_id": _frame_strings(entries, "tool_call_id"),
            "name": _frame_strings(entries, "name"),
            "has_media": _numbers(entries, "has_media").astype(bool),
            "hidden": _numbers(entries, "hidden").astype(bool),
            "runtime_context": _numbers(entries, "runtime_context").astype(bool),
            "consolidated": idx < offsets,
            "user_index": _user_index(entries, role_codes, roles, lengths, starts),
        },
        categories={"role": roles},
    )


def _split_key(key: str) -> tuple[str, str | None]:
    channel, sep, chat_id = key.partition(":")
    return channel, chat_id if sep else None


def _time_of(meta: dict[str, Any], field: str) -> datetime | None:
    value = meta[field]
    return None if value is None else _framed(datetime.fromisoformat(value))


def sessions_frame(entries: Sequence[Entry], *, tokens: Method | None = "tiktoken") -> pd.DataFrame:
    """One row per entry's session, indexed by key (columns: :data:`sessionkit.schema.SESSIONS`).

    Policy-dependent values (``policy``, ``n_user_turns``, ``last_archived``) follow each
    session's current ``policy``; the 0.3.5 runtime checkpoint sidecar is read now.
    """
    if not entries:
        return schema.empty_frame(schema.SESSIONS)
    sessions = [e.session for e in entries]
    metas = [e.meta for e in entries]
    keys = [s.key for s in sessions]
    split = [_split_key(k) for k in keys]
    total = None if tokens is None else "tokens" if tokens == "tiktoken" else "tokens_fallback"
    frame = schema.frame(
        schema.SESSIONS,
        {
            "key": keys,
            "channel": [c for c, _ in split],
            "chat_id": [c for _, c in split],
            "path": [str(s.path) if s.path else None for s in sessions],
            "format": [m["format"] for m in metas],
            "created_at": [_time_of(m, "created_at") for m in metas],
            "updated_at": [_time_of(m, "updated_at") for m in metas],
            "title": [m["title"] for m in metas],
            "preview": [m["preview"] for m in metas],
            "n_messages": [m["n_messages"] for m in metas],
            "n_user_turns": [m["turns"][s.policy] for s, m in zip(sessions, metas, strict=True)],
            "last_consolidated": [s.last_consolidated for s in sessions],
            "policy": [s.policy for s in sessions],
            "last_archived": [
                s.last_consolidated if get_policy(s.policy).checkpoints else None for s in sessions
            ],
            "has_provider_state": [bool(m["records"]) for m in metas],
            "runtime_checkpoint": [runtime_checkpoint(s.path) for s in sessions],
            "tokens": [None if total is None else m[total] for m in metas],
            "first_message_at": _stamps([m["first_message_at"] for m in metas]),
            "last_message_at": _stamps([m["last_message_at"] for m in metas]),
        },
    )
    frame.index = pd.Index(keys, dtype=object)
    return frame


def _stamps(values: list[int | None]) -> np.ndarray:
    return np.array([_NAT if v is None else v for v in values], dtype=np.int64).view(
        "datetime64[ns]"
    )


def problems_frame(problems: Sequence[Problem]) -> pd.DataFrame:
    """One row per recorded problem (columns: :data:`sessionkit.schema.PROBLEMS`)."""
    return schema.frame(
        schema.PROBLEMS,
        {
            "path": [p.path for p in problems],
            "line_no": [p.line_no for p in problems],
            "reason": [p.reason for p in problems],
        },
    )
