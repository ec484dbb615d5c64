"""Each session's columnar copy (an :class:`Entry`: an Arrow table of its messages plus its own
values), and the documented DataFrames assembled from entries, column by column.

Entries are what the persistent index (:mod:`sessionkit.store.index`) keeps, so a frame is the same
whether its entries were just built or read back from disk.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from itertools import chain, repeat
from operator import attrgetter, is_not
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from tqdm.auto import tqdm

from sessionkit import schema
from sessionkit.nanobot.history import RUNTIME_CONTEXT_KEY
from sessionkit.nanobot.listing import (
    PreviewScan,
    flatten_content,
    session_preview,
    session_title,
)
from sessionkit.nanobot.policies import DEFAULT_POLICY, POLICIES, get_policy, kept_as
from sessionkit.nanobot.reader import (
    CHECKPOINT_SUFFIX,
    Problem,
    parse_timestamp,
    runtime_checkpoint,
)
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.uncountable import counts_or_missing, uncountable_reason
from sessionkit.store.counting import (
    Method,
    PendingCounts,
    ReleaseCounts,
    TokenCache,
    counts_through,
    every_release,
    release_counts,
    token_cache_of,
)
from sessionkit.store.fields import (
    STR_OR_NONE,
    hidden_flags,
    message_field,
    truthy_flags,
    user_turn_flags,
)
from sessionkit.store.text import shown

__all__ = [
    "FRAME_TIMES",
    "MESSAGE_TABLE",
    "REFERENCE",
    "Entry",
    "Rows",
    "SUMS",
    "SessionColumns",
    "SessionValues",
    "build_entries",
    "built_rows",
    "count_column",
    "counted_apart",
    "entries_of",
    "entry_problems",
    "fits_frame",
    "joined_rows",
    "message_rows",
    "messages_frame",
    "problems_frame",
    "session_rows",
    "sessions_frame",
    "sidecar_names",
    "with_counts",
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
    return FRAME_TIMES[0] <= _naive(value) <= FRAME_TIMES[1]


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
    times = {s: _framed(parse_timestamp(s)) for s in dict.fromkeys(strings)}
    parsed = list(map(times.__getitem__, strings))
    return pd.Series(parsed, dtype="datetime64[ns]").to_numpy()


def _is_instance(values: list[Any], kind: type) -> np.ndarray:
    return np.fromiter(map(isinstance, values, repeat(kind)), dtype=bool, count=len(values))


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
        return _utf8_column(values), {}
    except UnicodeEncodeError:
        odd = {i: v for i, v in enumerate(values) if v is not None and not _utf8(v)}
        clean = [None if i in odd else v for i, v in enumerate(values)]
        return _utf8_column(clean), odd


_ENCODED_AT_ONCE = 1 << 14
"""Strings encoded per step of :func:`_utf8_column` (bounds its transient copies)."""


def _utf8_column(values: list[str | None]) -> pa.Array:
    """A large-string array of ``values`` from their UTF-8 bytes, joined once: several times
    faster than ``pa.array`` on strings met for the first time (which also leaves a UTF-8
    copy cached inside every non-ASCII string)."""
    n = len(values)
    lengths = np.zeros(n + 1, dtype=np.int64)
    data = bytearray()  # grown in place: one copy of the text, not a list of bytes plus it
    for start in range(0, n, _ENCODED_AT_ONCE):
        encoded = [
            b"" if v is None else v.encode("utf-8")
            for v in values[start : start + _ENCODED_AT_ONCE]
        ]
        lengths[start + 1 : start + 1 + len(encoded)] = list(map(len, encoded))
        data += b"".join(encoded)
    offsets = np.cumsum(lengths)
    valid = np.fromiter(map(is_not, values, repeat(None)), dtype=bool, count=n)
    nulls = n - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.large_string(), n, buffers, null_count=nulls)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


SUMS: dict[Method, str] = {"tiktoken": "tokens", "fallback": "tokens_fallback"}
"""By method: the value of an entry's ``meta`` holding each release's per-session sums, and
the name of :data:`REFERENCE`'s column of counts."""


REFERENCE = get_policy(DEFAULT_POLICY)
"""The release whose counts the ``tokens`` and ``tokens_fallback`` columns hold (the exact
ones replays reuse); every other release's columns are named after it."""


def count_column(release: str, tokens: Method) -> str:
    """The name of the column holding ``release``'s counts by ``tokens``: ``tokens`` and
    ``tokens_fallback`` for :data:`REFERENCE`, ``"tokens <release>"`` and
    ``"tokens_fallback <release>"`` for the others."""
    kind = SUMS[tokens]
    return kind if release == REFERENCE.name else f"{kind} {release}"


_COUNTS: tuple[tuple[str, Method], ...] = tuple(
    (name, method) for name in POLICIES for method in ("tiktoken", "fallback")
)
"""Every release's exact counts and estimates, in the order of their columns."""

MESSAGE_TABLE = pa.schema(
    [
        ("line_no", pa.int64()),
        ("role", pa.large_string()),
        ("text", pa.large_string()),
        ("timestamp", pa.int64()),
        *((count_column(name, method), pa.int64()) for name, method in _COUNTS),
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
"""One file's messages as the index keeps them, with every release's token counts
(:func:`count_column`): -1 is a missing line number or token count, the minimum int64 a
missing time (nanoseconds)."""

_ESCAPED = ("text", "tool_call_id", "name")
_NAT = np.iinfo(np.int64).min


@dataclass(eq=False)
class Entry:
    """One session's columnar copy: what every frame and window needs without its dicts.

    ``table`` has :data:`MESSAGE_TABLE`'s columns, one row per message; ``meta`` the session's
    own values (see :func:`build_entries`), JSON-ready.  An entry read back from a pack
    holds ``span`` instead (the pack's table and its first row there) and slices it on first
    use: frames join runs of such entries with one slice (:func:`_joined`).
    """

    session: Session
    _table: pa.Table | None
    meta: dict[str, Any]
    span: tuple[pa.Table, int] | None = None

    @property
    def table(self) -> pa.Table:
        """The session's rows."""
        if self._table is None:
            whole, start = cast("tuple[pa.Table, int]", self.span)  # no own table: a span
            self._table = whole.slice(start, self.meta["n_messages"])
        return self._table


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _lines_of(session: Session, n: int) -> Sequence[int] | None:
    """The session's line numbers while they still describe its ``n`` messages (a message
    deleted or inserted in place leaves them behind), else None."""
    lines = session.line_numbers
    return lines if lines is not None and len(lines) == n else None


def _line_numbers(session: Session, n: int) -> np.ndarray:
    """The line numbers of a session's ``n`` messages (-1: none kept)."""
    lines = _lines_of(session, n)
    if isinstance(lines, range):
        return np.arange(lines.start, lines.stop, dtype=np.int64)
    if lines is None:
        return np.full(n, -1, dtype=np.int64)
    return np.asarray(lines, dtype=np.int64)


def _missing_as_minus_one(counts: list[int | None]) -> np.ndarray:
    return np.array([-1 if n is None else n for n in counts], dtype=np.int64)


def _per_session(values: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> list[int]:
    """The sum of ``values`` over each session's rows."""
    total = np.concatenate(([0], np.cumsum(values, dtype=np.int64)))
    return (total[stops] - total[starts]).tolist()


def _sums_or_none(counts: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> list[int | None]:
    """Each session's total of its counted messages (None: none counted)."""
    valid = counts >= 0
    sums = _per_session(np.where(valid, counts, 0), starts, stops)
    found = _per_session(valid, starts, stops)
    return [total if n else None for total, n in zip(sums, found, strict=True)]


def _extremes(
    stamps: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> tuple[list[int | None], list[int | None]]:
    """Each session's earliest and latest message time (None: it has none)."""
    valid = stamps != _NAT
    found = _per_session(valid, starts, starts + lengths)
    low = np.zeros(len(starts), dtype=np.int64)
    high = np.zeros(len(starts), dtype=np.int64)
    rows = lengths > 0
    if rows.any():
        at = starts[rows]
        low[rows] = np.minimum.reduceat(np.where(valid, stamps, np.iinfo(np.int64).max), at)
        high[rows] = np.maximum.reduceat(stamps, at)  # NaT is int64's minimum
    first = [t if n else None for t, n in zip(low.tolist(), found, strict=True)]
    last = [t if n else None for t, n in zip(high.tolist(), found, strict=True)]
    return first, last


def _grouped(rows: Iterable[int], stops: np.ndarray) -> dict[int, list[int]]:
    """Rows of all sessions' messages (ascending) by the session holding them (its
    position): one pass over the rows, however many sessions there are."""
    found = np.fromiter(rows, dtype=np.int64)
    grouped: dict[int, list[int]] = {}
    owners = np.searchsorted(stops, found, side="right").tolist()
    for owner, row in zip(owners, found.tolist(), strict=True):
        grouped.setdefault(owner, []).append(row)
    return grouped


def _outside_rows(values: list[Any]) -> list[int]:
    """The rows whose timestamp is a valid time a frame cannot hold (:func:`_stamp_outside`;
    each distinct value parsed once)."""
    outside: dict[str, bool] = {}
    rows = []
    for row, value in enumerate(values):
        if type(value) is str and not "1678" <= value[:4] <= "2261":
            if value not in outside:
                outside[value] = _stamp_outside(value)
            if outside[value]:
                rows.append(row)
    return rows


def _session_problems(
    session: Session,
    n: int,
    read: list[Problem],
    uncountable: list[tuple[int, str]],
    outside: list[tuple[int, Any]],
) -> list[Problem]:
    """What reading found, then each message nanobot cannot count (``uncountable``: their
    positions, in order, and reasons), then each time a frame cannot hold (``outside``:
    those messages' positions and stored timestamps); ``n`` messages in all."""
    path = str(session.path)
    lines: Sequence[int | None] = _lines_of(session, n) or [None] * n
    found = list(read)
    found += [Problem(path, lines[i], reason) for i, reason in uncountable]
    for field in ("created_at", "updated_at"):
        value = getattr(session, field)
        if value is not None and not fits_frame(value):
            reason = f"metadata {field} {value.isoformat()} " + _OUT_OF_FRAME.format(
                frame="sessions"
            )
            found.append(Problem(path, None, reason))
    found += [
        Problem(
            path,
            lines[i],
            f"timestamp {stored!r} " + _OUT_OF_FRAME.format(frame="messages"),
        )
        for i, stored in outside
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


def _uncountable_rows(
    msgs: list[dict[str, Any]], content_not_str: np.ndarray, calls: list[Any]
) -> dict[int, str]:
    """:func:`uncountable_reason` of each message that may have one (content not a string,
    or tool calls), by row: a plain message, never uncountable, costs no call."""
    suspects = np.flatnonzero(content_not_str | truthy_flags(calls)).tolist()
    return {row: reason for row in suspects if (reason := uncountable_reason(msgs[row]))}


def _first_damaged_line(problems: list[Problem]) -> int | None:
    lines = [p.line_no for p in problems if p.skipped and p.line_no is not None]
    return min(lines, default=None)


@dataclass
class Rows:
    """Messages built into :data:`MESSAGE_TABLE`'s columns, with the per-row facts their
    sessions' own values are made of (a batch of a streamed file, or every message of a
    load's run)."""

    table: pa.Table
    turns: dict[str, np.ndarray]
    """Per policy: whether each row is a user turn under it."""
    counts: dict[tuple[str, Method], np.ndarray]
    """Per release and method (:data:`_COUNTS`): each row's count (-1: none)."""
    stamps: np.ndarray
    outside: dict[int, Any]
    """Rows whose timestamp is a valid time a frame cannot hold: the value stored."""
    uncountable: dict[int, str]
    odd: dict[str, dict[int, str]]
    """Per string column: the rows Arrow cannot hold (see :func:`_arrow_strings`)."""


def build_entries(
    sessions: Sequence[Session],
    problems: dict[str, list[Problem]] | None = None,
    *,
    tokens: Method | None = "tiktoken",
    cache: TokenCache | None = None,
    progress: bool = False,
    pending: PendingCounts | None = None,
    workers: int | None = None,
) -> list[Entry]:
    """Each session's :class:`Entry`, its columns built for all sessions at once.

    ``problems`` maps a file to what reading it found.  Every release's token counts are
    kept (:func:`count_column`): its exact one (only with ``tokens="tiktoken"``; else -1, and
    ``meta["counted"]`` is False) and its no-tiktoken estimate, so each frame counts a session
    with the release it is replayed with, whichever that is.  ``progress`` shows a bar
    (messages) over the exact counting, most of a cold load's time.  ``pending`` waits for
    the counts of the sessions' messages, already under way (:class:`~sessionkit.store.counting.CountingBatches`); ``workers`` are
    the processes exact counting may fork (default: every core).  Each entry
    holds its span of the one table built (sliced on first use), so frames join all of them
    with one slice, not a table per session.
    """
    lengths = np.fromiter((len(s.messages) for s in sessions), dtype=np.int64, count=len(sessions))
    msgs: list[dict[str, Any]] = list(chain.from_iterable(s.messages for s in sessions))
    rows = built_rows(
        msgs, tokens=tokens, cache=cache, progress=progress, pending=pending, workers=workers
    )
    return entries_of(sessions, rows, lengths, problems or {}, tokens=tokens)


def built_rows(
    msgs: list[dict[str, Any]],
    *,
    tokens: Method | None = "tiktoken",
    cache: TokenCache | None = None,
    progress: bool = False,
    pending: PendingCounts | None = None,
    workers: int | None = None,
    counts: bool = True,
) -> Rows:
    """``msgs`` built into columns (:class:`Rows`; options as :func:`build_entries`'s).
    ``counts=False`` leaves every token count -1, for :func:`with_counts` to fill in."""
    total = len(msgs)
    raw_roles = roles = message_field(msgs, "role")
    if not STR_OR_NONE.issuperset(map(type, roles)):
        roles = [v if v is None or type(v) is str else str(v) for v in roles]
    try:
        role_column = pa.array(roles, type=pa.large_string())
    except (UnicodeEncodeError, pa.ArrowException):  # a lone surrogate: shown escaped
        role_column = pa.array(list(map(shown, roles)), type=pa.large_string())
    text = message_field(msgs, "content")
    content_not_str = ~_is_instance(text, str)
    for i in np.flatnonzero(content_not_str):
        text[i] = flatten_content(text[i])
    raw_stamps = message_field(msgs, "timestamp")
    stamps = _to_datetime(raw_stamps).view(np.int64)
    strings = {
        "text": _arrow_strings(text),
        "tool_call_id": _arrow_strings(message_field(msgs, "tool_call_id")),
        "name": _arrow_strings(message_field(msgs, "name")),
    }
    calls = message_field(msgs, "tool_calls")
    hidden = hidden_flags(msgs)
    counted = tokens == "tiktoken" and counts  # last: counts under way come in meanwhile
    with tqdm(
        total=total,
        desc="counting tokens",
        unit="msg",
        disable=not (progress and counted and total),
    ) as bar:

        def count(batch: list[dict[str, Any]]) -> list[int]:
            bar.reset(total=len(batch))  # counts_or_missing may count a second, smaller batch
            return counts_through(
                batch, cache, tokens="tiktoken", workers=workers, progress=bar.update
            )

        found: ReleaseCounts | None = None
        if pending is not None and counts:
            found = pending(bar.update)
        elif counted and workers == 1:  # one payload per message for every release's counts
            found = release_counts(msgs, cache, bar.update)
        elif counts:
            fallback = partial(counts_through, cache=cache, tokens="fallback")
            exact: list[int | None] = counts_or_missing(msgs, count) if counted else [None] * total
            reference = (exact, counts_or_missing(msgs, fallback))
            found = every_release(msgs, reference, cache, exact=counted, workers=workers)
    per_release = _count_arrays(found, total)
    columns = {
        "line_no": np.zeros(total, np.int64),  # each session's own, set by entries_of
        "role": role_column,
        "text": strings["text"][0],
        "timestamp": stamps,
        **{count_column(*which): per_release[which] for which in _COUNTS},
        "is_command": truthy_flags(message_field(msgs, "_command")),
        "is_channel_delivery": truthy_flags(message_field(msgs, "_channel_delivery")),
        "n_tool_calls": _list_lengths(calls),
        "tool_call_id": strings["tool_call_id"][0],
        "name": strings["name"][0],
        "has_media": _list_lengths(message_field(msgs, "media")) > 0,
        "hidden": hidden,
        "runtime_context": _is_instance(message_field(msgs, RUNTIME_CONTEXT_KEY), dict),
    }
    return Rows(
        table=pa.table(columns, schema=MESSAGE_TABLE),
        turns={
            name: user_turn_flags(msgs, raw_roles, hidden, policy)
            for name, policy in POLICIES.items()
        },
        counts=per_release,
        stamps=stamps,
        outside={row: raw_stamps[row] for row in _outside_rows(raw_stamps)},
        uncountable=_uncountable_rows(msgs, content_not_str, calls),
        odd={name: odd for name, (_, odd) in strings.items()},
    )


def joined_rows(parts: list[Rows]) -> Rows:
    """Rows built in batches, as one (each batch's row facts moved past those before it)."""
    if len(parts) == 1:
        return parts[0]
    starts = np.cumsum([0] + [p.table.num_rows for p in parts]).tolist()

    def moved(of: Callable[[Rows], dict[int, Any]]) -> dict[int, Any]:
        """A by-row fact of every part, its rows moved past the parts before."""
        return {
            row + start: value
            for part, start in zip(parts, starts, strict=False)
            for row, value in of(part).items()
        }

    return Rows(
        table=pa.concat_tables([p.table for p in parts]),  # chunks kept: no copy of the text
        turns={name: np.concatenate([p.turns[name] for p in parts]) for name in parts[0].turns},
        counts={which: np.concatenate([p.counts[which] for p in parts]) for which in _COUNTS},
        stamps=np.concatenate([p.stamps for p in parts]),
        outside=moved(attrgetter("outside")),
        uncountable=moved(attrgetter("uncountable")),
        odd={
            # cast: mypy cannot infer a lambda with a default argument
            name: moved(
                cast("Callable[[Rows], dict[int, Any]]", lambda part, name=name: part.odd[name])
            )
            for name in parts[0].odd
        },
    )


def _count_arrays(found: ReleaseCounts | None, total: int) -> dict[tuple[str, Method], np.ndarray]:
    """Every release's counts as columns (-1: none; all -1 when nothing was counted)."""
    if found is None:
        return {which: np.full(total, -1, dtype=np.int64) for which in _COUNTS}
    return {
        (name, method): _missing_as_minus_one(found[name][method == "fallback"])
        for name, method in _COUNTS
    }


def with_counts(rows: Rows, found: ReleaseCounts) -> Rows:
    """``rows`` (built with ``counts=False``) holding every release's token counts."""
    rows.counts = _count_arrays(found, rows.table.num_rows)
    table = rows.table
    for which in _COUNTS:
        name = count_column(*which)
        table = table.set_column(
            table.schema.get_field_index(name), name, pa.array(rows.counts[which])
        )
    rows.table = table
    return rows


def entries_of(
    sessions: Sequence[Session],
    rows: Rows,
    lengths: np.ndarray,
    read: dict[str, list[Problem]],
    *,
    tokens: Method | None = "tiktoken",
    scans: Sequence[PreviewScan | None] | None = None,
) -> list[Entry]:
    """Each session's :class:`Entry` from the rows of all their messages, in order
    (``lengths``: each session's row count; ``read``: what reading each file found).  A
    session's preview comes from its messages, or from its scan in ``scans`` when it was
    streamed (its messages not kept)."""
    starts = np.cumsum(lengths) - lengths
    stops = starts + lengths
    line_numbers = [_line_numbers(s, int(n)) for s, n in zip(sessions, lengths, strict=True)]
    table = rows.table.set_column(
        0, "line_no", pa.array(np.concatenate([*line_numbers, np.zeros(0, np.int64)]))
    )
    turns = {name: _per_session(flags, starts, stops) for name, flags in rows.turns.items()}
    sums = {which: _sums_or_none(rows.counts[which], starts, stops) for which in _COUNTS}
    firsts, lasts = _extremes(rows.stamps, starts, lengths)
    outside = _grouped(rows.outside, stops)
    uncountable_of = _grouped(rows.uncountable, stops)
    odd_rows = {name: _grouped(odd, stops) for name, odd in rows.odd.items()}
    any_odd = any(rows.odd.values())
    names = list(turns)
    own_turns = [
        dict(zip(names, counts, strict=True)) for counts in zip(*turns.values(), strict=True)
    ]
    counted = tokens == "tiktoken"
    entries = []
    for i, (session, start, n) in enumerate(
        zip(sessions, starts.tolist(), lengths.tolist(), strict=True)
    ):
        own = [(row - start, rows.outside[row]) for row in outside.get(i, ())]
        cannot = [(row - start, rows.uncountable[row]) for row in uncountable_of.get(i, ())]
        path = None if session.path is None else str(session.path)
        found = _session_problems(session, n, read.get(str(path), []), cannot, own)
        damaged = _first_damaged_line(found) if found else None
        scan = None if scans is None else scans[i]
        meta = {
            "key": session.key,
            "path": path,
            "format": session.format,
            "created_at": _iso(session.created_at),
            "updated_at": _iso(session.updated_at),
            "metadata": session.metadata,
            "records": session.records,
            "last_consolidated": session.last_consolidated,
            "policy": session.policy,
            "title": session_title(session.metadata),
            "preview": session_preview(
                session.messages, line_numbers=_lines_of(session, n), first_damaged_line=damaged
            )
            if scan is None
            else scan.preview(damaged),
            "n_messages": n,
            "turns": own_turns[i],
            "problems": [[p.line_no, p.reason, p.skipped] for p in found],
            "escapes": {
                name: {str(row - start): odd[row] for row in odd_rows[name].get(i, ())}
                if any_odd
                else {}
                for name, odd in rows.odd.items()
            },
            "counted": counted,
            "tokens": {name: sums[name, "tiktoken"][i] for name in POLICIES},
            "tokens_fallback": {name: sums[name, "fallback"][i] for name in POLICIES},
            "first_message_at": firsts[i],
            "last_message_at": lasts[i],
        }
        entries.append(Entry(session, None, meta, (table, start)))
    return entries


def entry_problems(entry: Entry) -> list[Problem]:
    """The problems an entry records, as :class:`Problem` values."""
    path = entry.meta["path"] or "None"
    return [
        Problem(path, line, reason, skipped) for line, reason, skipped in entry.meta["problems"]
    ]


def _joined(entries: Sequence[Entry]) -> pa.Table:
    """Every entry's table, their chunks side by side (nothing copied): one call gathers
    all columns, where a column at a time per entry costs Python work per entry and column.
    A run of entries that lie one after another in one pack (see :class:`Entry`) is one
    slice of it."""
    tables: list[pa.Table] = []
    run: tuple[pa.Table, int, int] | None = None  # a pack, the run's first row, its end
    for entry in entries:
        if entry._table is None and entry.span is not None:
            whole, start = entry.span
            if run is not None and run[0] is whole and run[2] == start:
                run = (whole, run[1], start + entry.meta["n_messages"])
                continue
            if run is not None:
                tables.append(run[0].slice(run[1], run[2] - run[1]))
            run = (whole, start, start + entry.meta["n_messages"])
            continue
        if run is not None:
            tables.append(run[0].slice(run[1], run[2] - run[1]))
            run = None
        tables.append(entry.table)
    if run is not None:
        tables.append(run[0].slice(run[1], run[2] - run[1]))
    return pa.concat_tables(tables)


def _numbers(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy()


def _nullable(values: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(values, values < 0)


SMALL_ENTRY_ROWS = 64
"""Runs of entries of fewer rows (tiny sessions) are joined into one chunk in a string
column: work on a column costs per chunk, so a store of many tiny files would otherwise
make every string operation on its messages frame slow; larger entries' chunks stay as
they are, uncopied."""


def _gathered(column: pa.ChunkedArray, lengths: np.ndarray) -> pa.ChunkedArray:
    """``column`` (the entries' rows in turn, ``lengths`` each) with each run of entries
    under :data:`SMALL_ENTRY_ROWS` rows joined into one chunk (only their rows are copied):
    work per run, not per entry."""
    small = lengths < SMALL_ENTRY_ROWS
    runs = np.concatenate(([0], np.flatnonzero(np.diff(small)) + 1))  # each run's first entry
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    bounds = offsets[np.append(runs, len(lengths))].tolist()
    chunks: list[pa.Array] = []
    for i, first in enumerate(runs.tolist()):
        rows = column.slice(bounds[i], bounds[i + 1] - bounds[i])
        if small[first] and len(rows):
            chunks.append(rows.combine_chunks())
        else:
            chunks.extend(rows.chunks)
    return pa.chunked_array(chunks, type=column.type)


def _frame_strings(
    escapes: Sequence[dict[str, dict[str, str]]] | None,
    table: pa.Table,
    lengths: np.ndarray,
    name: str,
) -> Any:
    """A string column: Arrow's buffers (tiny entries' joined, see :func:`_gathered`),
    unless an entry's ``escapes`` hold a string Arrow cannot (then Python strings, with
    those put back); ``escapes`` None: no entry has any."""
    column = table.column(name)
    if escapes is None or not any(e[name] for e in escapes):
        return pd.arrays.ArrowStringArray(_gathered(column, lengths))
    values = column.to_numpy(zero_copy_only=False).astype(object)
    for start, escaped in zip((np.cumsum(lengths) - lengths).tolist(), escapes, strict=True):
        for row, value in escaped[name].items():
            values[start + int(row)] = value
    return schema.string_array(list(values))


def _roles(table: pa.Table) -> tuple[np.ndarray, list[str]]:
    """Role codes and categories in order of first appearance (-1: missing)."""
    column = table.column("role")
    categories = [r for r in pc.unique(column).to_pylist() if r is not None]
    codes = pc.index_in(column, value_set=pa.array(categories, type=pa.large_string()))
    return codes.fill_null(-1).to_numpy().astype(np.int64), categories


def _user_index(
    policies: Sequence[str],
    hidden: np.ndarray,
    role_codes: np.ndarray,
    roles: list[str],
    lengths: np.ndarray,
    starts: np.ndarray,
) -> np.ndarray:
    """Each message's user turn under its session's release (``policies``, one per session;
    -1 before the first): user messages, less the hidden ones a release does not count."""
    is_user = role_codes == (roles.index("user") if "user" in roles else -2)
    counted = np.repeat([get_policy(p).hidden_turns for p in policies], lengths)
    turn = is_user & (counted | ~hidden)
    before = np.concatenate(([0], np.cumsum(turn)))
    return before[1:] - np.repeat(before[starts], lengths) - 1


def messages_frame(
    entries: Sequence[Entry],
    *,
    tokens: Method | None = "tiktoken",
    workspaces: Sequence[str | None] | None = None,
) -> pd.DataFrame:
    """One row per message of every entry (columns: :data:`sessionkit.schema.MESSAGES`).

    Numbers are read from the entries' columns, strings stay in Arrow's buffers.  Tokens
    are counted by each session's release; ``tokens=None`` leaves the token column <NA>.
    ``workspaces``: each entry's workspace (None: made in memory, <NA>).
    """
    if not entries:
        return schema.empty_frame(schema.MESSAGES)
    sessions = [e.session for e in entries]
    return message_rows(
        _joined(entries),
        SessionColumns(
            np.array([e.meta["n_messages"] for e in entries], dtype=np.int64),
            [s.key for s in sessions],
            [None] * len(entries) if workspaces is None else list(workspaces),
            [s.last_consolidated for s in sessions],
            [s.policy for s in sessions],
            _counted_apart(sessions, tokens),
        ),
        [e.meta["escapes"] for e in entries],
        tokens=tokens,
    )


def counted_apart(policy: str) -> bool:
    """Whether a session replayed with ``policy`` has its token counts made when a frame is
    built: its release estimates, as no release a load keeps counts of does."""
    return get_policy(policy).estimates and kept_as(policy)[1] is None


def _counted_apart(sessions: Sequence[Session], tokens: Method | None) -> dict[int, np.ndarray]:
    """By position, the counts by ``tokens`` of each session whose release counts as no
    release a load keeps counts of (:func:`~sessionkit.nanobot.policies.kept_as`; 0.1.4.post5),
    made now through the cache it was loaded with (-1: cannot be counted)."""
    found = {}
    for i, session in enumerate(sessions):
        if tokens and counted_apart(session.policy):
            count = partial(
                counts_through,
                cache=token_cache_of([session]),
                policy=session.policy,
                tokens=tokens,
                workers=1,
            )
            found[i] = _missing_as_minus_one(counts_or_missing(session.messages, count))
    return found


@dataclass(frozen=True)
class SessionColumns:
    """What the messages frame takes from each session, in order: its row count, key,
    workspace, ``last_consolidated`` and policy; by position, the counts of those counted
    apart."""

    lengths: np.ndarray
    keys: list[str]
    workspaces: list[str | None]
    last_consolidated: list[int]
    policies: list[str]
    apart: dict[int, np.ndarray]


def message_rows(
    table: pa.Table,
    sessions: SessionColumns,
    escapes: Sequence[dict[str, dict[str, str]]] | None,
    *,
    tokens: Method | None,
) -> pd.DataFrame:
    """The messages frame of ``table`` (every session's rows in turn, :data:`MESSAGE_TABLE`)
    for ``sessions``; ``escapes``: each session's strings Arrow cannot hold (None: none)."""
    lengths = sessions.lengths
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    idx = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    offsets = np.repeat(np.asarray(sessions.last_consolidated, dtype=np.int64), lengths)
    role_codes, roles = _roles(table)
    hidden = _numbers(table, "hidden").astype(bool)
    counts = (
        _counted_by(table, tokens, sessions, starts)
        if tokens
        else np.full(total, -1, dtype=np.int64)
    )
    return schema.frame(
        schema.MESSAGES,
        {
            # keys repeat across workspaces
            "session_key": _repeated(sessions.keys, lengths, object),
            "workspace": _repeated(sessions.workspaces, lengths, None),  # as Parquet keeps it
            "idx": idx,
            "line_no": _nullable(_numbers(table, "line_no")),
            "role": role_codes,
            "text": _frame_strings(escapes, table, lengths, "text"),
            "timestamp": _numbers(table, "timestamp").view("datetime64[ns]"),
            "tokens": _nullable(counts),
            "is_command": _numbers(table, "is_command").astype(bool),
            "is_channel_delivery": _numbers(table, "is_channel_delivery").astype(bool),
            "n_tool_calls": _numbers(table, "n_tool_calls"),
            "tool_call_id": _frame_strings(escapes, table, lengths, "tool_call_id"),
            "name": _frame_strings(escapes, table, lengths, "name"),
            "has_media": _numbers(table, "has_media").astype(bool),
            "hidden": hidden,
            "runtime_context": _numbers(table, "runtime_context").astype(bool),
            "consolidated": idx < offsets,
            "user_index": _user_index(
                sessions.policies, hidden, role_codes, roles, lengths, starts
            ),
        },
        categories={"role": roles},
    )


def _repeated(
    values: Sequence[str | None], lengths: np.ndarray, dtype: type[object] | None
) -> pd.Categorical:
    """Each session's value (None: missing) on each of its ``lengths`` rows, as a category
    (categories in first-seen order, of ``dtype``; None: pandas' own)."""
    seen: dict[str, int] = {}
    codes = [-1 if v is None else seen.setdefault(v, len(seen)) for v in values]
    return pd.Categorical.from_codes(
        np.repeat(np.asarray(codes, dtype=np.int64), lengths),
        categories=pd.Index(list(seen), dtype=dtype),
    )


def _counted_by(
    table: pa.Table, tokens: Method, sessions: SessionColumns, starts: np.ndarray
) -> np.ndarray:
    """Each row's count by ``tokens`` under its session's release: the kept column of the
    release it counts as (one read per such release present; -1 where it has no estimate),
    or the session's counts made apart."""
    kept = [kept_as(p)[1] for p in sessions.policies]
    present = list(dict.fromkeys(kept))
    if len(present) == 1 and present[0] is not None:
        counts = _numbers(table, count_column(present[0], tokens))
    else:
        owners = np.repeat([present.index(k) for k in kept], sessions.lengths)
        counts = np.full(len(owners), -1, dtype=np.int64)
        for code, name in enumerate(present):
            if name is not None:
                column = _numbers(table, count_column(name, tokens))
                np.copyto(counts, column, where=owners == code)
    for i, own in sessions.apart.items():
        counts[starts[i] : starts[i] + len(own)] = own
    return counts


def _split_key(key: str) -> tuple[str, str | None]:
    channel, sep, chat_id = key.partition(":")
    return channel, chat_id if sep else None


def _times_of(values: list[str | None]) -> list[datetime | None]:
    """Times as a frame shows them, from their ISO texts (each distinct value parsed once)."""
    parsed = {
        v: None if v is None else _framed(datetime.fromisoformat(v)) for v in dict.fromkeys(values)
    }
    return list(map(parsed.__getitem__, values))


SESSION_VALUES = (
    "format",
    "created_at",
    "updated_at",
    "title",
    "preview",
    "n_messages",
    "first_message_at",
    "last_message_at",
)
"""The values of an entry's ``meta`` the sessions frame shows as they are kept."""


def sessions_frame(
    entries: Sequence[Entry],
    *,
    tokens: Method | None = "tiktoken",
    workspaces: Sequence[str | None] | None = None,
) -> pd.DataFrame:
    """One row per entry's session, indexed by key (columns: :data:`sessionkit.schema.SESSIONS`).

    Policy-dependent values (``policy``, ``n_user_turns``, ``last_archived``, ``tokens``)
    follow each session's current ``policy``; the 0.3.5 runtime checkpoint sidecar is read now.
    ``workspaces``: each entry's workspace (None: made in memory, <NA>).
    """
    if not entries:
        return schema.empty_frame(schema.SESSIONS)
    sessions = [e.session for e in entries]
    metas = [e.meta for e in entries]
    kept = [kept_as(s.policy) for s in sessions]
    apart = _counted_apart(sessions, tokens)
    return session_rows(
        [s.key for s in sessions],
        [None if s.path is None else os.fspath(s.path) for s in sessions],
        [None] * len(entries) if workspaces is None else workspaces,
        SessionValues(
            {name: [m[name] for m in metas] for name in SESSION_VALUES},
            [m["turns"][turns] for m, (turns, _) in zip(metas, kept, strict=True)],
            [s.last_consolidated for s in sessions],
            [s.policy for s in sessions],
            [bool(m["records"]) for m in metas],
            [None] * len(metas)
            if tokens is None
            else [
                _apart_sum(apart[i])
                if i in apart
                else None
                if name is None
                else m[SUMS[tokens]][name]
                for i, (m, (_, name)) in enumerate(zip(metas, kept, strict=True))
            ],
        ),
    )


def _apart_sum(counts: np.ndarray) -> int | None:
    """A session's total of its counts made apart, as kept sums are (None: none counted)."""
    valid = counts >= 0
    return int(counts[valid].sum()) if valid.any() else None


@dataclass(frozen=True)
class SessionValues:
    """The sessions frame's per-session values, in order: ``kept`` (each of
    :data:`SESSION_VALUES` as the index keeps it), user turns under each session's policy,
    ``last_consolidated``, the policy, whether it holds provider state records, and its
    tokens counted by that policy (None: not counted)."""

    kept: dict[str, list[Any]]
    turns: list[int]
    last_consolidated: list[int]
    policies: list[str]
    has_records: list[bool]
    tokens: list[int | None]


def session_rows(
    keys: list[str],
    paths: Sequence[str | None],
    workspaces: Sequence[str | None],
    values: SessionValues,
    *,
    checkpoints: Sequence[dict[str, Any] | None] | None = None,
) -> pd.DataFrame:
    """The sessions frame of sessions ``keys`` at ``paths`` in ``workspaces`` (``checkpoints``:
    their runtime checkpoints when already known, see :func:`_checkpoints`)."""
    kept = values.kept
    split = [_split_key(k) for k in keys]
    frame = schema.frame(
        schema.SESSIONS,
        {
            "key": keys,
            "channel": [c for c, _ in split],
            "chat_id": [c for _, c in split],
            "path": paths,
            "workspace": workspaces,
            "format": kept["format"],
            "created_at": _times_of(kept["created_at"]),
            "updated_at": _times_of(kept["updated_at"]),
            "title": kept["title"],
            "preview": kept["preview"],
            "n_messages": kept["n_messages"],
            "n_user_turns": values.turns,
            "last_consolidated": values.last_consolidated,
            "policy": values.policies,
            "last_archived": [
                n if get_policy(p).checkpoints else None
                for n, p in zip(values.last_consolidated, values.policies, strict=True)
            ],
            "has_provider_state": values.has_records,
            "runtime_checkpoint": _checkpoints(paths) if checkpoints is None else checkpoints,
            "tokens": values.tokens,
            "first_message_at": _stamps(kept["first_message_at"]),
            "last_message_at": _stamps(kept["last_message_at"]),
        },
    )
    frame.index = pd.Index(keys, dtype=object)
    return frame


def _checkpoints(paths: Sequence[str | None]) -> list[dict[str, Any] | None]:
    """Each path's :func:`runtime_checkpoint`, read only for a file whose folder holds its
    sidecar's name (one listing per folder, not a ``stat`` per file)."""
    listed: dict[str, set[str] | None] = {}
    found: list[dict[str, Any] | None] = []
    for named in paths:
        if named is None:
            found.append(None)
            continue
        cut = named.rfind(os.sep) + 1
        folder = named[:cut] or "."
        if folder not in listed:
            listed[folder] = sidecar_names(folder)
        names = listed[folder]
        if names is not None and not names:  # most folders hold no sidecars
            found.append(None)
            continue
        stem = os.path.splitext(named[cut:])[0]
        has = names is None or stem + CHECKPOINT_SUFFIX in names
        found.append(runtime_checkpoint(Path(named)) if has else None)
    return found


def sidecar_names(folder: str) -> set[str] | None:
    """The names of sidecar checkpoints in ``folder`` (None: it cannot be listed)."""
    try:
        with os.scandir(folder) as listing:
            return {e.name for e in listing if e.name.endswith(CHECKPOINT_SUFFIX)}
    except OSError:
        return None


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
