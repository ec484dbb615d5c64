"""Build the documented DataFrames from loaded sessions, column by column, without row loops."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from itertools import chain, repeat
from typing import Any

import numpy as np
import pandas as pd

from sessionkit import schema
from sessionkit.counting import Method, TokenCache, count_tokens
from sessionkit.fields import STR_OR_NONE, message_field
from sessionkit.nanobot import policy_035
from sessionkit.nanobot.listing import flatten_content, session_preview, session_title
from sessionkit.nanobot.policy_035 import RUNTIME_CONTEXT_KEY, is_hidden_history
from sessionkit.nanobot.reader import Problem, parse_timestamp, runtime_checkpoint
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.uncountable import counts_or_missing

__all__ = ["FRAME_TIMES", "fits_frame", "messages_frame", "problems_frame", "sessions_frame"]

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


def _objects(values: list[Any]) -> np.ndarray:
    """A 1-d object array of the values as they are (``np.array`` would descend into lists)."""
    return np.fromiter(values, dtype=object, count=len(values))


def _codes(values: list[Any]) -> tuple[np.ndarray, list[str]]:
    """Category codes (-1 for missing) and categories in order of first appearance, for
    short repeated labels like roles; non-string labels are shown as text."""
    if not STR_OR_NONE.issuperset(map(type, values)):
        values = [v if v is None or type(v) is str else str(v) for v in values]
    codes, uniques = pd.factorize(_objects(values))
    return codes.astype(np.int64, copy=False), list(uniques)


def _strings(values: list[Any]) -> pd.arrays.StringArray:
    """A string column; non-strings become <NA>.  Built directly: pandas' generic
    constructor re-scans and copies every value, and its pyarrow strings cannot hold a
    lone surrogate (a key or file name that is not valid UTF-8)."""
    array = _objects(values)
    array[~_is_instance(values, str)] = pd.NA
    return pd.arrays.StringArray(array)


def _truthy(values: list[Any]) -> np.ndarray:
    return np.fromiter(map(bool, values), dtype=bool, count=len(values))


def _list_lengths(values: list[Any]) -> np.ndarray:
    """``len`` of each value that is a list, else 0."""
    lengths = np.zeros(len(values), dtype=np.int64)
    lists = np.flatnonzero(_is_instance(values, list))
    lengths[lists] = [len(values[i]) for i in lists]
    return lengths


def _session_codes(sessions: Sequence[Session], lengths: np.ndarray) -> pd.Categorical:
    keys = [s.key for s in sessions]
    if len(set(keys)) == len(keys):
        codes = np.repeat(np.arange(len(keys)), lengths)
        return pd.Categorical.from_codes(codes, categories=pd.Index(keys, dtype=object))
    return pd.Categorical(np.repeat(np.array(keys, dtype=object), lengths))


def _line_numbers(sessions: Sequence[Session]) -> pd.arrays.IntegerArray:
    parts = [
        np.arange(s.line_numbers.start, s.line_numbers.stop, dtype=np.int64)
        if isinstance(s.line_numbers, range)
        else np.asarray(s.line_numbers, dtype=np.int64)
        if s.line_numbers is not None
        else np.full(len(s.messages), -1, dtype=np.int64)
        for s in sessions
    ]
    lines = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    return pd.arrays.IntegerArray(lines, lines < 0)


def messages_frame(
    sessions: Sequence[Session],
    *,
    tokens: Method | None = "tiktoken",
    cache: TokenCache | None = None,
) -> pd.DataFrame:
    """One row per message of every session (columns: :data:`sessionkit.schema.MESSAGES`).

    Built column by column from list comprehensions and numpy, never row by row.
    ``tokens=None`` skips token counting (the column is then all <NA>).
    """
    if not sessions:
        return schema.empty_frame(schema.MESSAGES)
    lengths = np.fromiter((len(s.messages) for s in sessions), dtype=np.int64, count=len(sessions))
    total = int(lengths.sum())
    session_starts = np.cumsum(lengths) - lengths
    idx = np.arange(total, dtype=np.int64) - np.repeat(session_starts, lengths)
    msgs: list[dict[str, Any]] = list(chain.from_iterable(s.messages for s in sessions))
    role_codes, roles = _codes(message_field(msgs, "role"))
    is_user = role_codes == roles.index("user") if "user" in roles else np.zeros(total, bool)
    users_before = np.concatenate(([0], np.cumsum(is_user)))
    user_index = users_before[1:] - np.repeat(users_before[session_starts], lengths) - 1
    offsets = np.repeat([s.last_consolidated for s in sessions], lengths)
    text = message_field(msgs, "content")
    for i in np.flatnonzero(~_is_instance(text, str)):
        text[i] = flatten_content(text[i])
    counts = (
        counts_or_missing(msgs, partial(count_tokens, method=tokens, cache=cache))
        if tokens
        else None
    )
    no_tokens = np.zeros(total, dtype=np.int64)
    return schema.frame(
        schema.MESSAGES,
        {
            "session_key": _session_codes(sessions, lengths),
            "idx": idx,
            "line_no": _line_numbers(sessions),
            "role": role_codes,
            "text": _strings(text),
            "timestamp": _to_datetime(message_field(msgs, "timestamp")),
            "tokens": counts
            if counts is not None
            else pd.arrays.IntegerArray(no_tokens, np.ones(total, dtype=bool)),
            "is_command": _truthy(message_field(msgs, "_command")),
            "is_channel_delivery": _truthy(message_field(msgs, "_channel_delivery")),
            "n_tool_calls": _list_lengths(message_field(msgs, "tool_calls")),
            "tool_call_id": _strings(message_field(msgs, "tool_call_id")),
            "name": _strings(message_field(msgs, "name")),
            "has_media": _list_lengths(message_field(msgs, "media")) > 0,
            "hidden": np.fromiter(map(is_hidden_history, msgs), dtype=bool, count=total),
            "runtime_context": _is_instance(message_field(msgs, RUNTIME_CONTEXT_KEY), dict),
            "consolidated": idx < offsets,
            "user_index": user_index,
        },
        categories={"role": roles},
    )


def _split_key(key: str) -> tuple[str, str | None]:
    channel, sep, chat_id = key.partition(":")
    return channel, chat_id if sep else None


def sessions_frame(
    sessions: Sequence[Session],
    messages: pd.DataFrame,
    *,
    first_damaged_lines: dict[str, int] | None = None,
) -> pd.DataFrame:
    """One row per session, indexed by key (columns: :data:`sessionkit.schema.SESSIONS`).

    ``first_damaged_lines`` maps a file to its first damaged line: nanobot lists such a
    file from its repair pass when its preview scan reaches that line.
    """
    if not sessions:
        return schema.empty_frame(schema.SESSIONS)
    keys = [s.key for s in sessions]
    damaged = first_damaged_lines or {}
    by_key = messages.groupby("session_key", observed=False, sort=False)
    tokens = by_key["tokens"].sum(min_count=1)
    first = by_key["timestamp"].min()
    last = by_key["timestamp"].max()
    index = pd.Index(keys, dtype=object)
    split = [_split_key(k) for k in keys]
    frame = schema.frame(
        schema.SESSIONS,
        {
            "key": _strings(keys),
            "channel": _strings([c for c, _ in split]),
            "chat_id": _strings([c for _, c in split]),
            "path": _strings([str(s.path) if s.path else None for s in sessions]),
            "format": [s.format for s in sessions],
            "created_at": [_framed(s.created_at) for s in sessions],
            "updated_at": [_framed(s.updated_at) for s in sessions],
            "title": _strings([session_title(s.metadata) for s in sessions]),
            "preview": _strings(
                [
                    session_preview(
                        s.messages,
                        line_numbers=s.line_numbers,
                        first_damaged_line=damaged.get(str(s.path)),
                    )
                    for s in sessions
                ]
            ),
            "n_messages": [len(s.messages) for s in sessions],
            "n_user_turns": [s.n_user_turns for s in sessions],
            "last_consolidated": [s.last_consolidated for s in sessions],
            "policy": [s.policy for s in sessions],
            "last_archived": [
                s.last_consolidated if s.policy == policy_035.NAME else None for s in sessions
            ],
            "has_provider_state": [bool(s.records) for s in sessions],
            "runtime_checkpoint": [runtime_checkpoint(s.path) for s in sessions],
            "tokens": tokens.reindex(index).to_numpy(),
            "first_message_at": first.reindex(index).to_numpy(),
            "last_message_at": last.reindex(index).to_numpy(),
        },
    )
    frame.index = index
    return frame


def problems_frame(problems: Sequence[Problem]) -> pd.DataFrame:
    """One row per recorded problem (columns: :data:`sessionkit.schema.PROBLEMS`)."""
    return schema.frame(
        schema.PROBLEMS,
        {
            "path": _strings([p.path for p in problems]),
            "line_no": [p.line_no for p in problems],
            "reason": _strings([p.reason for p in problems]),
        },
    )
