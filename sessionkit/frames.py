"""Build the documented DataFrames from loaded sessions, column by column, without row loops."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd

from sessionkit import schema
from sessionkit.preview import flatten_content, session_preview, session_title
from sessionkit.session import Session
from sessionkit.store import Problem
from sessionkit.tokens import Method, TokenCache, count_tokens

__all__ = ["messages_frame", "problems_frame", "sessions_frame"]


def _naive(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=None) if value is not None and value.tzinfo else value


def _to_datetime(values: list[Any]) -> pd.Series:
    """ISO strings (or datetimes) to naive wall-clock datetimes; anything else becomes NaT."""
    strings = pd.Series([v if isinstance(v, str) else None for v in values], dtype=object)
    try:
        parsed = pd.to_datetime(strings, format="ISO8601", errors="coerce")
    except (ValueError, TypeError):
        parsed = None
    if parsed is None or not isinstance(parsed.dtype, np.dtypes.DateTime64DType):
        parsed = pd.Series([_naive(_iso(v)) for v in values], dtype="datetime64[ns]")
    return parsed.astype("datetime64[ns]")


def _iso(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _category(values: list[Any]) -> pd.Categorical:
    return pd.Categorical([v if v is None or isinstance(v, str) else str(v) for v in values])


def _strings(values: list[Any]) -> pd.Series:
    return pd.Series([v if isinstance(v, str) else None for v in values], dtype="string")


def _session_codes(sessions: Sequence[Session], lengths: np.ndarray) -> pd.Categorical:
    keys = [s.key for s in sessions]
    if len(set(keys)) == len(keys):
        codes = np.repeat(np.arange(len(keys)), lengths)
        return pd.Categorical.from_codes(codes, categories=pd.Index(keys, dtype=object))
    return pd.Categorical(np.repeat(np.array(keys, dtype=object), lengths))


def messages_frame(
    sessions: Sequence[Session],
    *,
    tokens: Method | None = "tiktoken",
    cache: TokenCache | None = None,
) -> pd.DataFrame:
    """One row per message of every session (columns: :data:`sessionkit.schema.MESSAGES`).

    ``tokens=None`` skips token counting (the column is then all <NA>).
    """
    if not sessions:
        return schema.empty_frame(schema.MESSAGES)
    lengths = np.fromiter((len(s.messages) for s in sessions), dtype=np.int64, count=len(sessions))
    total = int(lengths.sum())
    session_starts = np.cumsum(lengths) - lengths
    idx = np.arange(total, dtype=np.int64) - np.repeat(session_starts, lengths)
    msgs: list[dict[str, Any]] = list(chain.from_iterable(s.messages for s in sessions))
    roles = [m.get("role") for m in msgs]
    is_user = np.fromiter((r == "user" for r in roles), dtype=bool, count=total)
    users_before = np.concatenate(([0], np.cumsum(is_user)))
    user_index = users_before[1:] - np.repeat(users_before[session_starts], lengths) - 1
    offsets = np.repeat([s.last_consolidated for s in sessions], lengths)
    line_no = list(
        chain.from_iterable(
            s.line_numbers if s.line_numbers is not None else [None] * len(s.messages)
            for s in sessions
        )
    )
    counts = count_tokens(msgs, method=tokens, cache=cache) if tokens else [None] * total
    tool_calls = [m.get("tool_calls") for m in msgs]
    media = [m.get("media") for m in msgs]
    return pd.DataFrame(
        {
            "session_key": _session_codes(sessions, lengths),
            "idx": pd.array(idx, dtype="Int64"),
            "line_no": pd.array(line_no, dtype="Int64"),
            "role": _category(roles),
            "text": pd.array(
                [
                    c if type(c) is str else flatten_content(c)
                    for c in (m.get("content") for m in msgs)
                ],
                dtype="string",
            ),
            "timestamp": _to_datetime([m.get("timestamp") for m in msgs]).to_numpy(),
            "tokens": pd.array(counts, dtype="Int64"),
            "is_command": np.fromiter((bool(m.get("_command")) for m in msgs), bool, total),
            "is_channel_delivery": np.fromiter(
                (bool(m.get("_channel_delivery")) for m in msgs), bool, total
            ),
            "n_tool_calls": pd.array(
                [len(t) if isinstance(t, list) else 0 for t in tool_calls], dtype="Int64"
            ),
            "tool_call_id": _strings([m.get("tool_call_id") for m in msgs]),
            "name": _strings([m.get("name") for m in msgs]),
            "has_media": np.fromiter((isinstance(x, list) and bool(x) for x in media), bool, total),
            "consolidated": idx < offsets,
            "user_index": pd.array(user_index, dtype="Int64"),
        }
    )


def _split_key(key: str) -> tuple[str, str | None]:
    channel, sep, chat_id = key.partition(":")
    return channel, chat_id if sep else None


def sessions_frame(
    sessions: Sequence[Session],
    messages: pd.DataFrame,
    *,
    repaired_paths: frozenset[str] = frozenset(),
) -> pd.DataFrame:
    """One row per session (columns: :data:`sessionkit.schema.SESSIONS`).

    ``repaired_paths`` are files with damaged lines, whose preview nanobot takes from its
    repair pass.
    """
    if not sessions:
        return schema.empty_frame(schema.SESSIONS)
    keys = [s.key for s in sessions]
    by_key = messages.groupby("session_key", observed=False, sort=False)
    tokens = by_key["tokens"].sum(min_count=1)
    first = by_key["timestamp"].min()
    last = by_key["timestamp"].max()
    index = pd.Index(keys, dtype=object)
    split = [_split_key(k) for k in keys]
    frame = pd.DataFrame(
        {
            "key": pd.array(keys, dtype="string"),
            "channel": pd.Categorical([c for c, _ in split]),
            "chat_id": pd.array([c for _, c in split], dtype="string"),
            "path": pd.array([str(s.path) if s.path else None for s in sessions], dtype="string"),
            "format": pd.Categorical([s.format for s in sessions]),
            "created_at": pd.Series(
                [_naive(s.created_at) for s in sessions], dtype="datetime64[ns]"
            ),
            "updated_at": pd.Series(
                [_naive(s.updated_at) for s in sessions], dtype="datetime64[ns]"
            ),
            "title": pd.array([session_title(s.metadata) for s in sessions], dtype="string"),
            "preview": pd.array(
                [
                    session_preview(s.messages, repaired=str(s.path) in repaired_paths)
                    for s in sessions
                ],
                dtype="string",
            ),
            "n_messages": pd.array([len(s.messages) for s in sessions], dtype="Int64"),
            "n_user_turns": pd.array([s.n_user_turns for s in sessions], dtype="Int64"),
            "last_consolidated": pd.array([s.last_consolidated for s in sessions], dtype="Int64"),
            "tokens": pd.array(tokens.reindex(index).to_numpy(), dtype="Int64"),
            "first_message_at": first.reindex(index).to_numpy(),
            "last_message_at": last.reindex(index).to_numpy(),
        }
    )
    return frame


def problems_frame(problems: Sequence[Problem]) -> pd.DataFrame:
    """One row per recorded problem (columns: :data:`sessionkit.schema.PROBLEMS`)."""
    if not problems:
        return schema.empty_frame(schema.PROBLEMS)
    return pd.DataFrame(
        {
            "path": pd.array([p.path for p in problems], dtype="string"),
            "line_no": pd.array([p.line_no for p in problems], dtype="Int64"),
            "reason": pd.array([p.reason for p in problems], dtype="string"),
        }
    )
