"""Every DataFrame column sessionkit produces: its name, dtype and meaning, in one place.

Plots, widgets and notebooks use these names; nothing re-derives them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

__all__ = ["MESSAGES", "PROBLEMS", "SESSIONS", "Column", "empty_frame", "describe"]


@dataclass(frozen=True)
class Column:
    """One documented column: ``name``, pandas ``dtype`` string and what it holds."""

    name: str
    dtype: str
    doc: str


SESSIONS: tuple[Column, ...] = (
    Column("key", "string", "session key, e.g. 'telegram:12345'"),
    Column("channel", "category", "part of the key before the first ':'"),
    Column("chat_id", "string", "part of the key after the first ':'"),
    Column("path", "string", "file the session was read from"),
    Column("format", "category", "'nanobot-0.2', 'nanobot-0.3' or 'legacy-json'"),
    Column("created_at", "datetime64[ns]", "metadata created_at (NaT when not recorded)"),
    Column("updated_at", "datetime64[ns]", "metadata updated_at (NaT when not recorded)"),
    Column("title", "string", "title as nanobot lists it (generated <think> text hidden)"),
    Column("preview", "string", "first user message's 120-char preview, else first assistant's"),
    Column("n_messages", "Int64", "number of messages"),
    Column("n_user_turns", "Int64", "number of user messages"),
    Column("last_consolidated", "Int64", "messages already consolidated (valid offset)"),
    Column("tokens", "Int64", "sum of per-message tokens (<NA> when not counted)"),
    Column("first_message_at", "datetime64[ns]", "earliest message timestamp"),
    Column("last_message_at", "datetime64[ns]", "latest message timestamp"),
)

MESSAGES: tuple[Column, ...] = (
    Column("session_key", "category", "key of the session the message belongs to"),
    Column("idx", "Int64", "zero-based position in the session's messages"),
    Column("line_no", "Int64", "1-based line in the file (<NA> for legacy JSON / in memory)"),
    Column("role", "category", "user / assistant / tool / system"),
    Column("text", "string", "content flattened to text as nanobot previews it"),
    Column("timestamp", "datetime64[ns]", "message timestamp (NaT when absent or invalid)"),
    Column("tokens", "Int64", "nanobot's estimate_message_tokens (<NA> when not counted)"),
    Column("is_command", "bool", "flagged _command: skipped by get_history"),
    Column("is_channel_delivery", "bool", "flagged _channel_delivery: proactive delivery"),
    Column("n_tool_calls", "Int64", "number of tool_calls on an assistant message"),
    Column("tool_call_id", "string", "id a tool result answers"),
    Column("name", "string", "tool name of a tool result"),
    Column("has_media", "bool", "user message carries a non-empty media list"),
    Column("consolidated", "bool", "idx < last_consolidated: already summarised"),
    Column(
        "user_index",
        "Int64",
        "zero-based user turn the message belongs to (-1 before the first user message); "
        "fork(before_user_index=k) keeps exactly the rows with user_index < k",
    ),
)

PROBLEMS: tuple[Column, ...] = (
    Column("path", "string", "file with the problem"),
    Column("line_no", "Int64", "1-based line (<NA> when the whole file is concerned)"),
    Column("reason", "string", "what was wrong and what sessionkit did"),
)


def empty_frame(columns: tuple[Column, ...]) -> pd.DataFrame:
    """A zero-row frame with the documented columns and dtypes."""
    return pd.DataFrame({c.name: pd.Series(dtype=c.dtype) for c in columns})


def describe(columns: tuple[Column, ...]) -> pd.DataFrame:
    """The column documentation as a frame (name, dtype, doc), for notebooks and docs."""
    return pd.DataFrame(
        [(c.name, c.dtype, c.doc) for c in columns], columns=["name", "dtype", "doc"]
    )
