"""Every DataFrame column sessionkit produces (name, dtype, meaning), the message status table
(name, label, colour), and :func:`frame`, which builds every documented frame from them.

Plots, widgets and notebooks use these names and colours; nothing re-derives them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from sessionkit.conventions import SETTING_NAMES

__all__ = [
    "AGREEMENT",
    "CACHE_BREAKS",
    "CACHE_CALIBRATION",
    "CALIBRATION",
    "CONTINUATION",
    "EXPERIMENTS",
    "FIGURE_DATA",
    "FILE_CAP",
    "INVARIANTS",
    "MESSAGES",
    "NOTES",
    "PROBLEMS",
    "REQUESTS",
    "REQUEST_COSTS",
    "REQUEST_PARTS",
    "REQUEST_SETTINGS",
    "SESSIONS",
    "STATES",
    "STATUSES",
    "STATUS_NAMES",
    "USAGE",
    "VIOLATIONS",
    "WINDOWS",
    "Column",
    "Reported",
    "Status",
    "contrast_ratio",
    "describe",
    "empty_frame",
    "frame",
    "string_array",
]


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
    Column(
        "workspace",
        "category",
        "workspace the session was loaded from, as corpus.workspaces names it: its path below "
        "the parent of the folder loaded ('team/ws03' for team/ loaded with recursive=True), "
        "else its own name ('data' for data/ or data/sessions; without recursive, the folder "
        "given is the workspace), also for a file or glob loaded; missing (NaN) for a session "
        "made in memory",
    ),
    Column("format", "category", "'nanobot-0.2', 'nanobot-0.3' or 'legacy-json'"),
    Column("created_at", "datetime64[ns]", "metadata created_at (NaT when not recorded)"),
    Column("updated_at", "datetime64[ns]", "metadata updated_at (NaT when not recorded)"),
    Column("title", "string", "title as nanobot lists it (generated <think> text hidden)"),
    Column("preview", "string", "first user message's 120-char preview, else first assistant's"),
    Column("n_messages", "Int64", "number of messages"),
    Column("n_user_turns", "Int64", "number of user messages"),
    Column("last_consolidated", "Int64", "messages already consolidated (valid offset)"),
    Column(
        "policy",
        "category",
        "release whose policy replays it: the one that wrote the file ('nanobot-0.3.5': a "
        "last_archived field, provider state or 0.3.5's folder; 'nanobot-0.3.0': a base64url "
        "name; else 'nanobot-0.2'), or load(policy=...)",
    ),
    Column("last_archived", "Int64", "0.3.5's replay offset (<NA> for other releases)"),
    Column("has_provider_state", "bool", "the file holds 0.3.5 provider_state records"),
    Column(
        "runtime_checkpoint",
        "object",
        "0.3.5's <stem>.checkpoint.json sidecar (an unfinished turn's state) as a dict, or None",
    ),
    Column(
        "tokens",
        "Int64",
        "sum of per-message tokens (<NA> when not counted, and under 0.1.4 to 0.1.4.post4, "
        "which have no estimator)",
    ),
    Column("first_message_at", "datetime64[ns]", "earliest message timestamp"),
    Column("last_message_at", "datetime64[ns]", "latest message timestamp"),
)

MESSAGES: tuple[Column, ...] = (
    Column("session_key", "category", "key of the session the message belongs to"),
    Column(
        "workspace",
        "category",
        "workspace of the session the message belongs to, as the sessions frame names it",
    ),
    Column("idx", "Int64", "zero-based position in the session's messages"),
    Column("line_no", "Int64", "1-based line in the file (<NA> for legacy JSON / in memory)"),
    Column("role", "category", "user / assistant / tool / system"),
    Column("text", "string", "content flattened to text as nanobot previews it"),
    Column("timestamp", "datetime64[ns]", "message timestamp (NaT when absent or invalid)"),
    Column(
        "tokens",
        "Int64",
        "the session's release's estimate_message_tokens (<NA> when not counted, and under "
        "0.1.4 to 0.1.4.post4, which have no estimator)",
    ),
    Column("is_command", "bool", "flagged _command: skipped by get_history"),
    Column("is_channel_delivery", "bool", "flagged _channel_delivery: proactive delivery"),
    Column("n_tool_calls", "Int64", "number of tool_calls on an assistant message"),
    Column("tool_call_id", "string", "id a tool result answers"),
    Column("name", "string", "tool name of a tool result"),
    Column("has_media", "bool", "user message carries a non-empty media list"),
    Column(
        "hidden",
        "bool",
        "0.3.5 hidden history: a checkpoint continuation (_hidden_history) or automation record",
    ),
    Column("runtime_context", "bool", "user turn carries a 0.3.x _runtime_context marker"),
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


NOTES: tuple[Column, ...] = (
    Column("path", "string", "file or folder the note is about"),
    Column("line_no", "Int64", "1-based line (<NA> when the whole file or folder is concerned)"),
    Column("reason", "string", "what is worth knowing; nothing was lost"),
)
"""``corpus.notes`` and :attr:`Reported.notes`: a :data:`PROBLEMS` frame's columns and dtypes."""


WINDOWS: tuple[Column, ...] = (
    Column("session_key", "category", "key of the session"),
    Column(
        "policy",
        "category",
        "release whose get_history made the window: 'nanobot-0.2', 'nanobot-0.3.0' or "
        "'nanobot-0.3.5'",
    ),
    Column("turn", "int64", "user messages before `at`: the zero-based turn the window serves"),
    Column("at", "int64", "the window is get_history of messages[:at]"),
    Column("command", "bool", "the message at `at` is a `_command` (answered without the model)"),
    Column(
        "context_window",
        "Int64",
        "setting: the model's context window the agent loop derived the call from "
        "(<NA>: the call's settings were given directly)",
    ),
    Column("max_output", "Int64", "setting: the output tokens reserved from it (<NA>: none)"),
    Column(
        "max_messages",
        "int64",
        "get_history max_messages (<= 0: the release's default, 120 in 0.2.2, 2000 in 0.3.0, "
        "no count window in 0.3.5)",
    ),
    Column("max_tokens", "int64", "get_history max_tokens (0 = no token budget)"),
    Column("include_timestamps", "bool", "setting: user turns replayed with their time (0.2.2)"),
    Column(
        "include_runtime_context",
        "bool",
        "setting: user turns replayed with their _runtime_context suffix (0.3.x; always True "
        "for 0.2.2, which replays stored text as it is)",
    ),
    Column("extend_to_user", "bool", "setting: count window may reach back to a user turn"),
    Column(
        "last_consolidated",
        "category",
        "setting: 'recorded' (0.3.5: the latest checkpoint before the turn), 'none' or an offset",
    ),
    Column("consolidated", "int64", "offset in force: messages below it are never replayed"),
    Column("start", "int64", "source index of the first replayed message (`at` when none)"),
    Column("stop", "int64", "source index after the last replayed message (`at` when none)"),
    Column("messages_kept", "int64", "entries replayed"),
    Column("tokens_kept", "int64", "their tokens (nanobot's estimate of the rewritten entries)"),
    Column(
        "cut",
        "category",
        "what set the start: 'tokens' (budget), 'orphan' (an orphan tool result moved it), "
        "'count' (max_messages), 'consolidation' (last_consolidated) or 'none'",
    ),
    Column("messages_hidden", "int64", "messages before `start`"),
    Column("tokens_hidden", "int64", "what the replayable ones among them would cost"),
    Column("starts_with_user", "bool", "the first replayed entry is a user message"),
    Column("recovered", "bool", "the budget left no user turn, so the latest one was restored"),
    Column(
        "needs_summary",
        "boolean",
        "0.3.5 with a context_window: the window's estimate reaches the governor's budget "
        "(context_window - max_output - 1024), so a real 0.3.5 would have summarised here "
        "(a lower bound from the history alone: 0.3.5 measures the whole request, which "
        "sessionkit.requests' needs_summary does exactly); <NA> otherwise",
    ),
)

FILE_CAP: tuple[Column, ...] = (
    Column("session_key", "category", "key of the session"),
    Column("policy", "category", "release whose enforce_file_cap applied (none: never trims)"),
    Column("limit", "int64", "setting: enforce_file_cap limit"),
    Column("turn", "int64", "user turns stored when the cap was applied"),
    Column("at", "int64", "source messages stored when the cap was applied"),
    Column("messages", "int64", "messages in the session before the cap"),
    Column("tripped", "bool", "the session held more than `limit` messages and was trimmed"),
    Column("dropped", "int64", "messages removed (may include the newest, see Policy)"),
    Column("archived", "int64", "of those, raw-archived: dropped minus already consolidated"),
    Column("kept", "int64", "messages left"),
    Column("last_consolidated_before", "int64", "offset before the cap"),
    Column("last_consolidated", "int64", "offset after the cap"),
)


REQUEST_PARTS: tuple[Column, ...] = (
    Column(
        "part",
        "string",
        "'system: <part>' (identity, bootstrap:<file>, tool contract, memory, active skills, "
        "skills summary, archived summary, ...), 'tools', 'history', 'current' or 'steps'",
    ),
    Column("messages", "int64", "messages of the request in this part (0 for system and tools)"),
    Column(
        "tokens",
        "int64",
        "the part's own estimate (system parts: cl100k tokens of their text; messages: the "
        "release's request estimate of those messages alone); parts do not add up exactly to "
        "the request's tokens, as BPE counts are not additive across joins",
    ),
    Column("inferred", "bool", "the value depends on this process or a stand-in, not on disk"),
)


REQUESTS: tuple[Column, ...] = (
    Column("session_key", "category", "key of the session"),
    Column("policy", "category", "release whose request this is"),
    Column("turn", "int64", "zero-based user message being answered (as in windows)"),
    Column("step", "int64", "zero-based agent call within the turn"),
    Column(
        "time",
        "datetime64[ns, UTC]",
        "when the call was made: the usage log's start where sk.usage ties a call to this "
        "(session, turn, step) (requests(usage=...)), else the user message's stored time for "
        "step 0 and later steps spread evenly over the turn's stored times (NaT: none stored)",
    ),
    Column(
        "time_inferred",
        "bool",
        "`time` is placed, not read: a later step spread over its turn, or no time at all",
    ),
    Column("max_messages", "int64", "setting: get_history max_messages (as in windows)"),
    Column("max_tokens", "int64", "setting: get_history max_tokens"),
    Column("include_timestamps", "bool", "setting (0.2.2)"),
    Column("include_runtime_context", "bool", "setting (0.3.x)"),
    Column("extend_to_user", "bool", "setting"),
    Column("last_consolidated", "category", "setting: offset replayed from"),
    Column("context_window", "Int64", "setting: the model's context window (<NA>: none)"),
    Column("max_output", "Int64", "setting: output tokens reserved (<NA>: none)"),
    Column(
        "system_tokens", "int64", "tokens of the system prompt (0 without an installed release)"
    ),
    Column(
        "summary_tokens",
        "int64",
        "tokens the release adds to the system prompt for this session and call: the archived "
        "summary (_last_summary; 0.3.0 also the session's recent-history part), as "
        "sk.request's 'system: archived summary' part",
    ),
    Column(
        "tools_tokens", "int64", "tokens of the tool definitions (0 without an installed release)"
    ),
    Column(
        "history_tokens",
        "int64",
        "tokens of the replayed history as the release sends it: windows' tokens_kept after "
        "the release's per-call clean-up (0.2.2: results bounded, backfilled, older ones "
        "compacted), each message counted alone",
    ),
    Column("history_messages", "int64", "messages of the history as sent (backfills included)"),
    Column(
        "history_start",
        "int64",
        "source index of the first replayed message (windows' start): where the window begins",
    ),
    Column("current_tokens", "int64", "tokens of the current message as sent"),
    Column(
        "steps_tokens",
        "int64",
        "tokens of the turn's earlier tool rounds in this call, after the same clean-up",
    ),
    Column(
        "last_tokens",
        "int64",
        "tokens of the request's last message (the current message, or a step's last tool "
        "result): what follows a cache marker on its second-to-last message",
    ),
    Column(
        "last_results_tokens",
        "int64",
        "tokens of the step's trailing tool results, the one user message Anthropic's API "
        "merges them into (the current message at a turn's first call)",
    ),
    Column(
        "marker_dropped",
        "bool",
        "the request's second-to-last message has no text (an assistant tool call without "
        "text, sent with null content): nanobot 0.3.5's cache marker on it never reaches an "
        "OpenAI-compatible gateway, so that request has no message breakpoint",
    ),
    Column("total_tokens", "int64", "sum of the parts (per-message estimates, as windows count)"),
    Column(
        "answer_tokens",
        "int64",
        "tokens of the answer this call produced as stored (text and tool calls, the release's "
        "estimate; 0 when none was stored): the output sk.cost prices",
    ),
    Column(
        "prefix_tokens",
        "int64",
        "tokens of the leading part shared exactly with the session's previous request "
        "(tools and system prompt when unchanged, then whole identical messages)",
    ),
    Column("cache_ratio", "float64", "prefix_tokens / total_tokens"),
    Column(
        "cache_rules",
        "category",
        "the provider family whose prompt cache the cache columns follow: 'openai', "
        "'openai-marked' or 'anthropic' (sessionkit.calls.caching)",
    ),
    Column(
        "cache_read_tokens",
        "int64",
        "input tokens the provider's cache serves under cache_rules, cache_ttl and cache_scope",
    ),
    Column(
        "cache_write_tokens",
        "int64",
        "input tokens billed as cache writes (Anthropic-style breakpoints; 0 for 'openai')",
    ),
    Column(
        "cache_break",
        "category",
        "why the call does not reuse the whole previous request of its session: "
        "one of CACHE_BREAKS",
    ),
    Column(
        "inferred",
        "bool",
        "some system part (or the archived summary, or the current message) is not on disk",
    ),
    Column(
        "needs_summary",
        "boolean",
        "the release's context governor summarises before this call (0.3.5: its whole-request "
        "estimate at or over context_window - max_output - 1024, as calls.governor.verdicts "
        "finds it); <NA> for a release without a governor or without a context_window",
    ),
)

CACHE_BREAKS: tuple[str, ...] = (
    "none",
    "first call",
    "idle past the TTL",
    "tools changed",
    "system prompt changed",
    "summary",
    "window slid",
    "clean-up or compaction",
)
"""The categories of ``cache_break``, first match wins: nothing broke, the session's first
call, the gap since its previous call over the TTL, then what the previous request and this
one first differ in (tool definitions, system prompt, archived summary, the history's start,
a message the release rewrote: per-call clean-up, compaction or a replayed form)."""

REQUEST_SETTINGS: tuple[str, ...] = (
    *(name for name in SETTING_NAMES if name != "file_cap"),  # requests replay files as stored
    "context_window",
    "max_output",
)
"""The columns of a requests frame that name its history setting, in order."""


@dataclass(frozen=True)
class Status:
    """One message status: its ``name`` in the ``status`` column, the ``label`` and ``color``
    plots and the transcript show it with, and what it means."""

    name: str
    label: str
    color: str
    doc: str

    @property
    def text_color(self) -> str:
        """The chip text on ``color``: black or white, whichever contrasts more (WCAG 2)."""
        return max(("#000000", "#ffffff"), key=lambda text: contrast_ratio(text, self.color))


def _luminance(color: str) -> float:
    """WCAG 2 relative luminance of a ``#rrggbb`` colour (0 black to 1 white)."""
    channels = [int(color.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two ``#rrggbb`` colours, 1 to 21 (text needs 4.5)."""
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


STATUSES: tuple[Status, ...] = (
    Status("in_window", "in window", "#2ca02c", "sent to the model"),
    Status(
        "trimmed_count",
        "trimmed: count",
        "#ff7f0e",
        "before the max_messages window (or cut to start it on a user turn or a legal tool "
        "boundary)",
    ),
    Status(
        "trimmed_tokens",
        "trimmed: tokens",
        "#d62728",
        "inside the count window but over max_tokens",
    ),
    Status("consolidated", "consolidated", "#7f7f7f", "below last_consolidated"),
    Status("command", "command", "#9467bd", "a _command message, never sent"),
    Status(
        "skipped", "skipped", "#bcbd22", "an assistant message with no text and nothing to replay"
    ),
    Status("file_cap", "file cap", "#8c564b", "removed from the file by enforce_file_cap(limit)"),
    Status("later", "after turn", "#c7c7c7", "stored at or after the turn"),
)
"""Every message status, in display order: the one table plots and the transcript read."""

STATUS_NAMES: tuple[str, ...] = tuple(s.name for s in STATUSES)
"""The status names, in display order: the categories of the ``status`` column."""

STATES: tuple[Column, ...] = (
    Column("idx", "Int64", "zero-based position in the session's messages"),
    Column("role", "category", "user / assistant / tool / system"),
    Column("user_index", "Int64", "user turn the message belongs to (-1 before the first)"),
    Column("tokens", "Int64", "tokens of the stored message (nanobot's estimate)"),
    Column(
        "sent_tokens",
        "Int64",
        "tokens of the message as get_history would send it under these settings "
        "(<NA> for commands and skipped messages, which are never sent)",
    ),
    Column("status", "category", f"one of {', '.join(STATUS_NAMES)}"),
)


INVARIANTS: tuple[str, ...] = (
    "tail",
    "max_messages",
    "user_start",
    "orphan_tool_result",
    "token_budget",
)
"""The window invariants :func:`sessionkit.testing.check_window_invariants` checks, for every window.

``tail``: the window is every replayable message from its first one to the newest, none below
``last_consolidated``.  ``max_messages``: it spans at most ``max_messages`` stored messages
(not checked with ``extend_to_user``).  ``user_start``: a window holding a user message starts
on one, on the ``_channel_delivery`` just before one, or right after a tool result answering no
call of its own turn (nanobot's legal tool boundary).  ``orphan_tool_result``: every tool result
answers a call made earlier in the window.  ``token_budget``: the window's tokens stay within
``max_tokens``, except nanobot's documented recovery: the newest entry is always kept, and when
the newest entries that fit hold no user message the latest user message is recovered anyway.
"""

VIOLATIONS: tuple[Column, ...] = (
    Column("session_key", "string", "session the window belongs to"),
    Column("at", "int64", "the window is get_history of messages[:at]"),
    Column("turn", "int64", "user messages before `at`"),
    Column("max_messages", "int64", "get_history's max_messages"),
    Column("max_tokens", "int64", "get_history's max_tokens (0: no budget)"),
    Column("invariant", "string", f"one of {', '.join(INVARIANTS)}"),
    Column("idx", "Int64", "source index of the offending message (<NA>: the whole window)"),
    Column("detail", "string", "what was found"),
)
"""Columns of :func:`sessionkit.testing.check_window_invariants`."""

FIGURE_DATA: tuple[Column, ...] = (
    Column("axes", "int64", "position of the Axes in the figure"),
    Column("artist", "string", "what is drawn: title, xlabel, xtick, line, bar, image, ..."),
    Column("label", "string", "its text or legend label"),
    Column("i", "int64", "position among the artist's points, bars or cells"),
    Column("x", "float64", "x of a point, left of a bar, column of a cell"),
    Column("y", "float64", "y of a point, bottom of a bar, row of a cell"),
    Column("width", "float64", "bar width"),
    Column("height", "float64", "bar height"),
    Column("value", "float64", "cell value of an image (heatmap)"),
)
"""Columns of :func:`sessionkit.testing.figure_data`: what a figure draws, not its pixels."""


def string_array(values: Any) -> Any:
    """A ``string`` column: Arrow-backed, or Python strings when a value is no valid Unicode
    (a lone surrogate, which nanobot's own json loads and Arrow cannot hold); non-strings
    become <NA>."""
    if isinstance(getattr(values, "dtype", None), pd.StringDtype):
        return values
    items = [v if type(v) is str else None for v in values]
    try:
        return pd.arrays.ArrowStringArray(pa.array(items, type=pa.large_string()))
    except (UnicodeEncodeError, pa.ArrowException):
        return pd.array(items, dtype=pd.StringDtype("python"))


def _array(column: Column, values: Any, categories: Sequence[Any] | None) -> Any:
    """``values`` as ``column``'s dtype; arrays already of that dtype are used as they are."""
    if categories is not None:
        codes = np.asarray(values, dtype=np.int64)
        try:
            return pd.Categorical.from_codes(codes, categories)
        except (UnicodeEncodeError, pa.ArrowException):  # not valid Unicode: shown escaped
            from sessionkit.store.text import shown

            return pd.Categorical.from_codes(codes, [shown(c) for c in categories])
    if column.dtype == "string":
        return string_array(values)
    if getattr(values, "dtype", None) == column.dtype:
        return values
    if column.dtype == "category":
        return pd.Categorical(values)
    return pd.array(values, dtype=column.dtype)


def frame(
    columns: tuple[Column, ...],
    values: Mapping[str, Any],
    *,
    categories: Mapping[str, Sequence[Any]] | None = None,
) -> pd.DataFrame:
    """The frame of ``columns``, in declared order, each column's ``values`` cast to its dtype.

    ``values`` holds exactly the declared names.  A categorical column named in ``categories``
    arrives as codes into those categories; any other one as labels (or a Categorical).
    """
    names = [c.name for c in columns]
    if set(values) != set(names):
        missing, extra = set(names) - set(values), set(values) - set(names)
        raise ValueError(f"columns missing: {sorted(missing)}, not declared: {sorted(extra)}")
    codes = categories or {}
    return pd.DataFrame(
        {c.name: _array(c, values[c.name], codes.get(c.name)) for c in columns}, copy=False
    )


class Reported(pd.DataFrame):
    """A frame that also says what was met making it: ``problems`` (a :data:`PROBLEMS` frame:
    files, lines and prices that could not be used), ``notes`` (a :data:`NOTES` frame: what is
    worth knowing but lost nothing, e.g. a price taken from another provider, no usage log) and
    ``summary`` (a dict of counts), as attributes of this object alone.  A frame derived from
    it (a selection, a copy, a merge) is a plain DataFrame, so no problems travel where they no
    longer describe the rows."""

    _metadata = ["problems", "notes", "summary"]  # noqa: RUF012 (pandas' subclassing hook)

    @property
    def _constructor(self) -> type[pd.DataFrame]:
        return pd.DataFrame

    @classmethod
    def of(
        cls,
        rows: pd.DataFrame,
        problems: pd.DataFrame,
        summary: Mapping[str, Any] | None = None,
        *,
        notes: pd.DataFrame | None = None,
    ) -> Reported:
        """``rows`` reporting ``problems`` (and ``summary`` and ``notes``, default empty)."""
        out = cls(rows, copy=False)
        out.problems = problems
        out.notes = empty_frame(NOTES) if notes is None else notes
        out.summary = dict(summary or {})
        return out


def empty_frame(columns: tuple[Column, ...]) -> pd.DataFrame:
    """A zero-row frame with the documented columns and dtypes."""
    return frame(columns, {c.name: [] for c in columns})


def describe(rows: tuple[Column, ...] | tuple[Status, ...]) -> pd.DataFrame:
    """A declaration as a frame (one row per column or status, one column per field)."""
    return pd.DataFrame([asdict(row) for row in rows])


USAGE: tuple[Column, ...] = (
    Column(
        "time",
        "datetime64[ns, UTC]",
        "when the call started (daily totals: the day's local midnight)",
    ),
    Column("session_key", "string", "session the call served (<NA>: not tied to one)"),
    Column(
        "turn",
        "Int64",
        "zero-based user message it answered, as in windows (<NA>: no user turn, e.g. a cron run)",
    ),
    Column(
        "step",
        "Int64",
        "zero-based agent call within the turn (a summary: the step it preceded; a retry "
        "repeats its step)",
    ),
    Column("source", "category", "as nanobot recorded it: user, api, cron, dream or system"),
    Column(
        "kind",
        "category",
        "agent; summary (a governor summary, tied to its turn); other (Dream, idle "
        "compaction, heartbeat, unbound cron); <NA> for daily totals",
    ),
    Column("model", "string", "model as recorded (<NA> for daily totals)"),
    Column("provider", "string", "provider as recorded (<NA> for daily totals)"),
    Column("prompt_tokens", "Int64", "input tokens, cache reads and writes included"),
    Column("completion_tokens", "Int64", "output tokens"),
    Column("cached_tokens", "Int64", "input tokens read from the provider's prefix cache"),
    Column("cache_write_tokens", "Int64", "input tokens written to the provider's cache"),
    Column(
        "cost_usd",
        "float64",
        "genai-prices' price at the call's date, cache reads priced as cache reads "
        "(NaN: no price known)",
    ),
    Column(
        "estimated_prompt_tokens",
        "Int64",
        "sessionkit's count of the rebuilt request (requests' total_tokens; <NA>: not rebuilt)",
    ),
    Column(
        "estimated_completion_tokens",
        "Int64",
        "the release's count of the answer the session stored for the call (requests' "
        "answer_tokens; <NA>: not rebuilt)",
    ),
    Column(
        "attribution",
        "category",
        "how the call was tied to its turn: exact (its recorded usage confirms it), time "
        "(turn windows and counts), <NA> (not tied)",
    ),
    Column(
        "reported",
        "boolean",
        "the provider reported the usage (False: nanobot estimated it; <NA>: unknown)",
    ),
    Column("calls", "Int64", "LLM calls the row stands for (1; daily totals: the day's)"),
    Column("call_id", "Int64", "the call's id in the usage log (<NA> for daily totals)"),
)
"""Columns of :func:`sessionkit.usage`: one row per recorded LLM call."""

REQUEST_COSTS: tuple[Column, ...] = (
    Column("prompt_tokens", "int64", "the request's tokens (calibrated when asked)"),
    Column(
        "cached_tokens",
        "int64",
        "of those, read from the provider's cache (cache_read_tokens, scaled alike)",
    ),
    Column(
        "written_tokens",
        "int64",
        "of those, billed as cache writes (cache_write_tokens, scaled alike)",
    ),
    Column(
        "completion_tokens",
        "int64",
        "output tokens priced with the request: its stored answer (answer_tokens), or "
        "cost(completion_tokens=) for every call",
    ),
    Column("cost_usd", "float64", "genai-prices' price (NaN: no price known)"),
)
"""Columns :func:`sessionkit.cost` adds to a :func:`sessionkit.requests` frame."""

CALIBRATION: tuple[Column, ...] = (
    Column("model", "string", "model as recorded"),
    Column("slope", "float64", "reported prompt tokens per estimated token"),
    Column("intercept", "float64", "reported prompt tokens at an estimate of 0"),
    Column("calls", "int64", "agent calls the line was fitted on"),
    Column("held_back", "int64", "calls held back to measure the errors (every fifth)"),
    Column("raw_median", "float64", "median |estimate - reported| / reported, held-back calls"),
    Column("raw_p90", "float64", "its 90th percentile"),
    Column("calibrated_median", "float64", "the same for the calibrated estimate"),
    Column("calibrated_p90", "float64", "its 90th percentile"),
    Column(
        "output_slope",
        "float64",
        "reported completion tokens per token of the stored answer (NaN: no answer fitted)",
    ),
    Column("output_intercept", "float64", "reported completion tokens at an answer of 0"),
)
"""Columns of :attr:`sessionkit.Calibration.report`: one row per model."""

CACHE_CALIBRATION: tuple[Column, ...] = (
    Column("model", "string", "model as recorded"),
    Column("cache_rules", "string", "the family the predictions follow (most of its calls')"),
    Column("calls", "int64", "reported agent calls with cached tokens, matched to a request"),
    Column("reported_read", "int64", "cached tokens reported over those calls"),
    Column("predicted_read", "int64", "cache_read_tokens predicted for them, at the fitted TTL"),
    Column("read_median", "float64", "median |predicted - reported| read tokens per call"),
    Column("read_p90", "float64", "its 90th percentile"),
    Column("write_calls", "int64", "of those calls, the ones with cache writes reported"),
    Column("reported_write", "int64", "cache-write tokens reported over them"),
    Column("predicted_write", "int64", "cache_write_tokens predicted for them"),
    Column("write_median", "float64", "median |predicted - reported| written tokens per call"),
    Column("write_p90", "float64", "its 90th percentile (NaN: no writes reported)"),
    Column("ttl", "float64", "the fitted cache lifetime, seconds"),
    Column("ttl_low", "float64", "the least TTL predicting as the fitted one"),
    Column("ttl_high", "float64", "the TTL from which predictions change (inf: none)"),
)
"""Columns of :attr:`sessionkit.Calibration.cache_report`: one row per model."""

EXPERIMENTS: tuple[Column, ...] = (
    Column("call", "int64", "position of the call among the rows of the calls frame given"),
    *(c for c in REQUESTS if c.name in ("session_key", "policy", "turn", "step")),
    *(c for c in REQUESTS if c.name in REQUEST_SETTINGS),
    Column("edit", "string", "name of the edit of the current message (<NA>: as stored)"),
    Column("model", "string", "model asked"),
    Column("sample", "int64", "zero-based sample of this call, model and edit"),
    Column("host", "string", "where the request goes: the endpoint's host (and port)"),
    Column(
        "outcome",
        "category",
        "'planned' (a dry run), 'stored' (an answer kept from an earlier run, not sent "
        "again), 'answered', 'failed' (see error) or 'over budget' (not sent)",
    ),
    Column(
        "estimated_prompt_tokens",
        "int64",
        "the release's estimate of the messages and tools sent (edits included)",
    ),
    Column("max_completion_tokens", "int64", "output tokens the request allows (-1: no limit)"),
    Column(
        "worst_cost_usd",
        "float64",
        "genai-prices' price of the estimate (plus a margin) and the whole allowed output: "
        "what budget_usd reserves before sending (NaN: no price known)",
    ),
    Column("answer_text", "string", "the answer's text (<NA>: none)"),
    Column(
        "tool_calls",
        "object",
        "the answer's tool calls, a list of {'name', 'arguments'} (arguments as the JSON text "
        "sent back); None without an answer",
    ),
    Column("finish_reason", "string", "as the endpoint reported it"),
    Column("prompt_tokens", "Int64", "input tokens the endpoint reported"),
    Column("cached_tokens", "Int64", "of those, read from its prompt cache"),
    Column(
        "cache_write_tokens",
        "Int64",
        "of those, written to its prompt cache (Anthropic's Messages API reports them; <NA>: "
        "not reported)",
    ),
    Column("completion_tokens", "Int64", "output tokens it reported"),
    Column("latency_s", "float64", "seconds from sending to the whole answer (its last attempt)"),
    Column("cost_usd", "float64", "genai-prices' price of the reported usage (NaN: unknown)"),
    Column("error", "string", "why there is no answer (<NA>: none)"),
    Column("original_text", "string", "the answer stored in the session at this call"),
    Column("original_tool_calls", "object", "its tool calls, as tool_calls (None: none stored)"),
    Column(
        "same_action",
        "boolean",
        "the answer does what the session did: the same tool names with JSON-equal "
        "arguments, in order, or both a text answer (<NA>: no answer or none stored)",
    ),
    Column(
        "text_similarity",
        "float64",
        "difflib's SequenceMatcher ratio (autojunk off) of the two texts: 2 * matched "
        "characters / both lengths, 1.0 for two empty texts (NaN: no answer or none stored)",
    ),
    Column("judge_score", "float64", "the score judge= gave (NaN: no judge or no answer)"),
    Column(
        "agreement",
        "float64",
        "share of the answered samples of this call, model and edit taking the most common "
        "action (NaN: none answered)",
    ),
)
"""Columns of :func:`sessionkit.experiment`: one row per call, model, edit and sample."""

CONTINUATION: tuple[Column, ...] = (
    Column("position", "int64", "index of the message in both sessions, from the fork point on"),
    Column("original_role", "string", "role of the original's message there (<NA>: none)"),
    Column(
        "original",
        "string",
        "its text, each tool call after it as '-> name(arguments)' (<NA>: none)",
    ),
    Column("continued_role", "string", "role of the continuation's message there (<NA>: none)"),
    Column("continued", "string", "its text, shown as original (<NA>: none)"),
)
"""Columns of :meth:`sessionkit.experiments.continuation.Continuation.side_by_side`: one row
per message position after the fork point."""

AGREEMENT: tuple[Column, ...] = (
    *(c for c in EXPERIMENTS if c.name in ("policy", *REQUEST_SETTINGS, "model", "edit")),
    Column(
        "setting",
        "string",
        "what sets this row apart from the others: the release, settings, model and edit that "
        "vary across the results, e.g. 'max_messages 20' (the release's label when none vary)",
    ),
    Column("calls", "int64", "results of this setting: calls asked times samples"),
    Column("answered", "int64", "of those, with an answer (answered now or stored earlier)"),
    Column("compared", "int64", "of those, at a call the session stored an answer for"),
    Column("agreed", "int64", "of those, taking the session's action (same_action)"),
    Column("agreement_rate", "float64", "agreed / compared (NaN: none compared)"),
    Column(
        "tokens_per_call",
        "float64",
        "mean of estimated_prompt_tokens over the calls whose request was rebuilt (a call "
        "that could not be, with no estimate, left out): what this setting sends per call",
    ),
    Column("prompt_tokens", "Int64", "input tokens the endpoint reported, summed (<NA>: none)"),
    Column("cost_usd", "float64", "cost_usd of the answers summed (NaN: none, or one not priced)"),
    Column("cost_per_call", "float64", "cost_usd / answered (NaN: as cost_usd)"),
    Column(
        "worst_cost_usd",
        "float64",
        "worst_cost_usd summed over the calls whose request was rebuilt: what budget_usd "
        "reserves to ask them all (NaN: one not priced)",
    ),
)
"""Columns of an experiment's agreement per setting
(:func:`sessionkit.experiments.agreement.agreement_by_setting`): one row per release,
setting, model and edit, in the order the results first name them."""
