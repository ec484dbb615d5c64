"""Regression helpers: DataFrame snapshots and history-policy invariants, for tests and notebooks.

A snapshot pins a result (a window table, a sweep, the data behind a figure) in a small CSV or
JSON file beside the notebook.  On rerun the fresh result is rendered the same way and compared
cell by cell; a mismatch raises :class:`SnapshotMismatch` with a readable diff.  Accept a new
result with ``update=True`` or by setting ``SESSIONKIT_UPDATE_SNAPSHOTS=1``.

The invariant checks hold for any corpus and any setting of nanobot 0.2.2's policy; they are
properties of the exact policy's output, not a second implementation of it.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator

from sessionkit.counting import count_tokens
from sessionkit.nanobot.policies import get_policy, tool_call_ids, tool_result_id
from sessionkit.nanobot.session import Session
from sessionkit.schema import FIGURE_DATA, VIOLATIONS, empty_frame
from sessionkit.windowing import windows

if TYPE_CHECKING:
    from sessionkit.corpus import Corpus

Message = dict[str, Any]

__all__ = [
    "UPDATE_ENV",
    "InvariantViolation",
    "Snapshot",
    "SnapshotMismatch",
    "assert_figure_snapshot",
    "assert_frame_snapshot",
    "assert_window_invariants",
    "check_window_invariants",
    "figure_data",
]

UPDATE_ENV = "SESSIONKIT_UPDATE_SNAPSHOTS"
"""Set to ``1`` to rewrite every snapshot that differs instead of failing."""

FLOAT_DIGITS = 6
_NA = "<NA>"
_MAX_DIFF_LINES = 25


_COLORBAR = "<colorbar>"  # the label matplotlib gives a colorbar's Axes


class SnapshotMismatch(AssertionError):
    """A result differs from its recorded snapshot (or none was recorded)."""


@dataclass(frozen=True)
class Snapshot:
    """Outcome of a snapshot check: ``status`` is ``"matches"``, ``"written"`` or ``"updated"``."""

    path: Path
    status: str
    shape: tuple[int, int]

    def __repr__(self) -> str:
        rows, cols = self.shape
        return f"<snapshot {self.path.as_posix()}: {self.status} ({rows} rows x {cols} columns)>"


@dataclass(frozen=True)
class _Table:
    """A frame rendered as text: column names, dtype names and one string per cell."""

    columns: list[str]
    dtypes: list[str]
    rows: list[list[str]]


def _update_requested(update: bool | None) -> bool:
    if update is not None:
        return update
    return os.environ.get(UPDATE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def _cell(value: Any, digits: int) -> str:
    """One value as stable text: floats to ``digits`` significant digits, missing as <NA>."""
    if value is None or value is pd.NA or value is pd.NaT:
        return _NA
    if isinstance(value, float | np.floating):
        if math.isnan(value):
            return _NA
        text = format(float(value), f".{digits}g")
        return "0" if text == "-0" else text
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return str(value)


def _kind(column: pd.Series) -> str:
    """The column's dtype family, stable across pandas versions and resolutions."""
    dtype = column.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        return "category"
    for kind, test in (
        ("bool", pd.api.types.is_bool_dtype),
        ("int", pd.api.types.is_integer_dtype),
        ("float", pd.api.types.is_float_dtype),
        ("datetime", pd.api.types.is_datetime64_any_dtype),
        ("timedelta", pd.api.types.is_timedelta64_dtype),
    ):
        if test(dtype):
            return kind
    inferred = pd.api.types.infer_dtype(column, skipna=True)
    return "string" if inferred in {"string", "empty"} else "object"


def _column_name(name: Any) -> str:
    return "/".join(map(str, name)) if isinstance(name, tuple) else str(name)


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with a meaningful index moved into columns."""
    index = frame.index
    default = isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1
    if default and index.name is None:
        return frame
    names = [n if n is not None else f"level_{i}" for i, n in enumerate(index.names)]
    if index.nlevels == 1 and index.names[0] is None:
        names = ["index"]
    return frame.set_axis(index.set_names(names)).reset_index()


def _render(frame: pd.DataFrame, digits: int) -> _Table:
    plain = _plain(frame)
    columns = [_column_name(c) for c in plain.columns]
    if len(set(columns)) != len(columns):
        raise ValueError(f"snapshot columns must have unique names, got {columns}")
    dtypes = [_kind(plain.iloc[:, j]) for j in range(plain.shape[1])]
    cells = [[_cell(v, digits) for v in plain.iloc[:, j].tolist()] for j in range(plain.shape[1])]
    rows = [list(r) for r in zip(*cells, strict=True)] if cells else [[] for _ in range(len(plain))]
    return _Table(columns, dtypes, rows)


def _dump(table: _Table, path: Path) -> str:
    """The snapshot file's text: CSV (names row, dtypes row, cells) or JSON (a row per line)."""
    if path.suffix == ".json":
        rows = ",\n".join(f"    {json.dumps(r, ensure_ascii=False)}" for r in table.rows)
        body = f"[\n{rows}\n  ]" if rows else "[]"
        return (
            "{\n"
            f'  "columns": {json.dumps(table.columns, ensure_ascii=False)},\n'
            f'  "dtypes": {json.dumps(table.dtypes)},\n'
            f'  "rows": {body}\n'
            "}\n"
        )
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerow(table.dtypes)
    writer.writerows(table.rows)
    return out.getvalue()


def _parse(text: str, path: Path) -> _Table:
    if path.suffix == ".json":
        data = json.loads(text)
        return _Table(data["columns"], data["dtypes"], data["rows"])
    lines = list(csv.reader(io.StringIO(text)))
    if len(lines) < 2:
        raise SnapshotMismatch(f"{path.as_posix()} is not a snapshot (no column and dtype rows)")
    return _Table(lines[0], lines[1], lines[2:])


def _check_suffix(path: Path) -> None:
    if path.suffix not in {".csv", ".json"}:
        raise ValueError(f"snapshot files end in .csv or .json, got {path.as_posix()!r}")


def _row_labels(frame: pd.DataFrame) -> list[str]:
    index = frame.index
    if isinstance(index, pd.RangeIndex) and index.name is None:
        return [f"row {i}" for i in range(len(frame))]
    return [f"row {i} ({label})" for i, label in enumerate(index.tolist())]


def _diff(expected: _Table, actual: _Table, labels: list[str], path: Path) -> str:
    """What changed, expected -> actual: columns, dtypes, then cells or lines."""
    out: list[str] = []
    missing = [c for c in expected.columns if c not in actual.columns]
    added = [c for c in actual.columns if c not in expected.columns]
    if missing:
        out.append(f"  columns missing: {', '.join(missing)}")
    if added:
        out.append(f"  columns added: {', '.join(added)}")
    if not missing and not added and expected.columns != actual.columns:
        out.append(f"  column order: {expected.columns} -> {actual.columns}")
    old_types = dict(zip(expected.columns, expected.dtypes, strict=True))
    for name, dtype in zip(actual.columns, actual.dtypes, strict=True):
        if name in old_types and old_types[name] != dtype:
            out.append(f"  dtype of {name!r}: {old_types[name]} -> {dtype}")
    if len(expected.rows) != len(actual.rows) or expected.columns != actual.columns:
        if len(expected.rows) != len(actual.rows):
            out.append(f"  rows: {len(expected.rows)} -> {len(actual.rows)}")
        lines = difflib.unified_diff(
            _dump(expected, Path("x.csv")).splitlines(),
            _dump(actual, Path("x.csv")).splitlines(),
            "snapshot",
            "result",
            n=1,
            lineterm="",
        )
        out.extend(f"    {line}" for line in list(lines)[2:])
    else:
        cells = [
            f"    {labels[i]}, {name}: {old} -> {new}"
            for i, (old_row, new_row) in enumerate(zip(expected.rows, actual.rows, strict=True))
            for name, old, new in zip(actual.columns, old_row, new_row, strict=True)
            if old != new
        ]
        if cells:
            out.append(f"  {len(cells)} {'cell differs' if len(cells) == 1 else 'cells differ'}:")
            out.extend(cells)
    if len(out) > _MAX_DIFF_LINES:
        out = [*out[:_MAX_DIFF_LINES], f"  ... {len(out) - _MAX_DIFF_LINES} more lines"]
    return (
        f"result differs from snapshot {path.as_posix()} (snapshot -> result):\n"
        + "\n".join(out)
        + f"\nAccept the new result with update=True or {UPDATE_ENV}=1."
    )


def assert_frame_snapshot(
    frame: pd.DataFrame,
    path: str | Path,
    *,
    update: bool | None = None,
    float_digits: int = FLOAT_DIGITS,
) -> Snapshot:
    """Compare ``frame`` with the snapshot at ``path`` (``.csv`` or ``.json``).

    Cells are compared as text: floats rounded to ``float_digits`` significant digits, missing
    values as ``<NA>``.  Column names and dtype families (``int``, ``float``, ``bool``,
    ``string``, ``category``, ``datetime``, ``timedelta``, ``object``; nullable or not, any
    width or resolution) must match too.  A named or non-default index
    is stored as leading columns and labels the rows of a diff.

    With ``update`` (default: the :data:`UPDATE_ENV` environment variable) a missing or
    different snapshot is (re)written instead of failing.

    Raises
    ------
    SnapshotMismatch
        When the snapshot is missing or differs, with the differences in the message.
    """
    path = Path(path)
    _check_suffix(path)
    actual = _render(frame, float_digits)
    shape = (len(actual.rows), len(actual.columns))
    text = _dump(actual, path)
    if not path.exists():
        if not _update_requested(update):
            raise SnapshotMismatch(
                f"no snapshot at {path.as_posix()}; record it with update=True or {UPDATE_ENV}=1"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return Snapshot(path, "written", shape)
    stored = path.read_text(encoding="utf-8")
    expected = _parse(stored, path)
    if expected == actual:
        return Snapshot(path, "matches", shape)
    if _update_requested(update):
        path.write_text(text, encoding="utf-8")
        return Snapshot(path, "updated", shape)
    raise SnapshotMismatch(_diff(expected, actual, _row_labels(frame), path))


def _figure(source: Figure | Axes) -> Figure:
    return source if isinstance(source, Figure) else source.figure


def _label(artist: Any) -> str | None:
    """An artist's gid, else its label; matplotlib's generated ``_child0``-style labels are
    left out (they only count artists)."""
    label = artist.get_gid() or artist.get_label()
    return None if not label or label.startswith("_") else str(label)


def _values(array: Any) -> np.ndarray:
    return np.ma.filled(np.ma.asarray(array, dtype=float), np.nan)


def _rows_of_axes(n: int, ax: Axes) -> Iterable[tuple[Any, ...]]:
    """:data:`FIGURE_DATA` rows for what ``ax`` draws."""

    def row(artist: str, label: str | None, i: int, *xywhv: float | None) -> tuple[Any, ...]:
        x, y, width, height, value = (*xywhv, None, None, None, None, None)[:5]
        return n, artist, label, i, x, y, width, height, value

    texts = (("title", ax.get_title("left") or ax.get_title()), ("xlabel", ax.get_xlabel()))
    for kind, text in (*texts, ("ylabel", ax.get_ylabel())):
        if text:
            yield row(kind, text, 0)
    for kind, axis in (("xtick", ax.xaxis), ("ytick", ax.yaxis)):
        if isinstance(axis.get_major_locator(), FixedLocator):
            ticks = zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=False)
            for i, (where, text) in enumerate(ticks):
                yield row(
                    kind, text.get_text(), i, *((where, None) if kind == "xtick" else (None, where))
                )
    for line in ax.get_lines():
        points = zip(_values(line.get_xdata()), _values(line.get_ydata()), strict=False)
        yield from (row("line", _label(line), i, x, y) for i, (x, y) in enumerate(points))
    for i, patch in enumerate(ax.patches):
        if hasattr(patch, "get_data"):
            values, edges, _ = patch.get_data()
            for j, value in enumerate(_values(values)):
                width = edges[j + 1] - edges[j]
                yield row("step", _label(patch), j, edges[j], 0.0, width, value)
        elif hasattr(patch, "get_height"):
            x, y = patch.get_x(), patch.get_y()
            yield row("rect", _label(patch), i, x, y, patch.get_width(), patch.get_height())
    for image in ax.get_images():
        cells = enumerate(np.ndenumerate(_values(image.get_array())))
        for i, ((r, c), value) in cells:
            yield row("image", _label(image), i, c, r, None, None, value)
    for collection in ax.collections:
        array = collection.get_array()
        if array is not None:
            values = _values(array).ravel()
            for i, value in enumerate(values):
                yield row("mesh", _label(collection), i, None, None, None, None, value)
        else:
            offsets = _values(collection.get_offsets())
            points = enumerate(offsets)
            yield from (row("points", _label(collection), i, x, y) for i, (x, y) in points)


def figure_data(source: Figure | Axes) -> pd.DataFrame:
    """The data a figure draws, one row per point, bar or cell (see :data:`FIGURE_DATA`).

    ``artist`` is ``title``/``xlabel``/``ylabel`` (text in ``label``), ``xtick``/``ytick``
    (ticks placed explicitly, as on a heatmap: label and position), ``line`` (x, y),
    ``step`` (a stairs bin: x, width, height), ``rect`` (a bar or span), ``image`` (a heatmap
    cell: column x, row y, value), ``mesh`` (a colour-mapped collection's values) or ``points``
    (scatter offsets).  ``label`` is the artist's gid, else its label.  Pixels, colours, fonts
    and colorbars (a colour scale, not data) are left out, so the snapshot of this frame pins
    what a figure says, not its bytes.
    """
    fig = _figure(source)
    rows = [
        row
        for n, ax in enumerate(fig.axes)
        if ax.get_label() != _COLORBAR
        for row in _rows_of_axes(n, ax)
    ]
    frame = pd.DataFrame(rows, columns=[c.name for c in FIGURE_DATA])
    frame = frame.astype({"axes": "int64", "artist": "string", "label": "string", "i": "int64"})
    return frame.astype({c: "float64" for c in ("x", "y", "width", "height", "value")})


def assert_figure_snapshot(
    source: Figure | Axes,
    path: str | Path,
    *,
    update: bool | None = None,
    float_digits: int = FLOAT_DIGITS,
) -> Snapshot:
    """:func:`assert_frame_snapshot` of :func:`figure_data`: pin what a figure shows."""
    return assert_frame_snapshot(
        figure_data(source), path, update=update, float_digits=float_digits
    )


_FRAME_COLUMNS = (
    "session_key",
    "at",
    "turn",
    "consolidated",
    "start",
    "stop",
    "max_messages",
    "max_tokens",
    "include_timestamps",
    "extend_to_user",
)


class InvariantViolation(AssertionError):
    """A history window breaks one of :data:`INVARIANTS`."""


@dataclass(frozen=True)
class _Window:
    """One window to check: where it was taken, under which setting, and its source indices."""

    session: Session
    at: int
    turn: int
    consolidated: int
    max_messages: int
    max_tokens: int
    include_timestamps: bool
    extend_to_user: bool
    indices: list[int]


@dataclass(frozen=True)
class _Replayed:
    """A session's messages as replayed: the entry (None: never sent) and its tokens."""

    entries: list[Message | None]
    tokens: list[int]


def _replay_all(session: Session, stamps: bool) -> _Replayed:
    policy = get_policy(session.policy)
    entries = [policy.replay_entry(m, stamps) for m in session.messages]
    counts = iter(count_tokens([e for e in entries if e is not None]))
    return _Replayed(entries, [0 if e is None else next(counts) for e in entries])


def _own_turn_calls(messages: Sequence[Message], tool_at: int) -> set[str]:
    """Call ids declared since the latest user message before ``messages[tool_at]``."""
    ids: set[str] = set()
    for i in range(tool_at - 1, -1, -1):
        role = messages[i].get("role")
        if role == "user":
            break
        if role == "assistant":
            ids.update(tool_call_ids(messages[i]))
    return ids


def _user_start_ok(messages: Sequence[Message], replayed: _Replayed, start: int, at: int) -> bool:
    first = messages[start]
    if first.get("role") == "user":
        return True
    following = messages[start + 1] if start + 1 < at else {}
    if first.get("_channel_delivery") and following.get("role") == "user":
        return True
    before = next((i for i in range(start - 1, -1, -1) if replayed.entries[i] is not None), None)
    if before is None or messages[before].get("role") != "tool":
        return False
    answered = tool_result_id(messages[before])
    return answered is not None and answered not in _own_turn_calls(messages, before)


def _over_budget(roles: Sequence[Any], tokens: Sequence[int], max_tokens: int) -> str | None:
    """Why the window breaks its budget, or None (within it, or nanobot's recovery)."""
    total = sum(tokens)
    if total <= max_tokens or len(tokens) == 1:
        return None
    first, used = len(tokens) - 1, tokens[-1]
    while first > 0 and used + tokens[first - 1] <= max_tokens:
        first -= 1
        used += tokens[first]
    if "user" not in roles[first:]:
        return None
    return f"{total} tokens > max_tokens={max_tokens}"


def _violations(window: _Window, replayed: _Replayed) -> Iterable[tuple[str, int | None, str]]:
    """``(invariant, source index, detail)`` for each invariant ``window`` breaks."""
    indices, at = window.indices, window.at
    if not indices:
        return
    messages = window.session.messages
    start = indices[0]
    entries = [replayed.entries[i] or {} for i in indices]
    tail = [i for i in range(start, at) if replayed.entries[i] is not None]
    if indices != tail or start < window.consolidated:
        yield "tail", start, f"window of {len(indices)} entries is not the replayable tail"
    limit = window.max_messages
    limit = limit if limit > 0 else get_policy(window.session.policy).default_max_messages
    if not window.extend_to_user and at - start > limit:
        yield "max_messages", start, f"spans {at - start} messages > {limit}"
    roles = [e.get("role") for e in entries]
    if "user" in roles and not _user_start_ok(messages, replayed, start, at):
        yield "user_start", start, f"starts on a {roles[0]} message"
    declared: set[str] = set()
    for i, entry in zip(indices, entries, strict=True):
        if entry.get("role") == "assistant":
            declared.update(tool_call_ids(entry))
        elif entry.get("role") == "tool":
            answered = tool_result_id(entry)
            if answered is not None and answered not in declared:
                yield "orphan_tool_result", i, f"answers undeclared call {answered!r}"
    if window.max_tokens > 0:
        over = _over_budget(roles, [replayed.tokens[i] for i in indices], window.max_tokens)
        if over:
            yield "token_budget", None, over


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _exact_windows(
    sessions: Iterable[Session],
    max_messages: int | Sequence[int],
    max_tokens: int | Sequence[int],
    include_timestamps: bool,
    extend_to_user: bool,
) -> Iterable[_Window]:
    """The exact policy's window before every user message, for every setting."""
    grid = [(int(m), int(t)) for m in _as_list(max_messages) for t in _as_list(max_tokens)]
    for session in sessions:
        policy = get_policy(session.policy)
        users = [i for i, m in enumerate(session.messages) if m.get("role") == "user"]
        for turn, at in enumerate(users):
            history = session.messages[:at]
            lc = session.last_consolidated
            offset = lc if lc <= at else 0
            for count, budget in grid:
                replay = policy.replay(
                    history,
                    offset,
                    count,
                    max_tokens=budget,
                    include_timestamps=include_timestamps,
                    extend_to_user=extend_to_user,
                )
                indices = [i for i, _ in replay]
                yield _Window(
                    session,
                    at,
                    turn,
                    offset,
                    count,
                    budget,
                    include_timestamps,
                    extend_to_user,
                    indices,
                )


def _frame_windows(
    frame: pd.DataFrame, sessions: Iterable[Session], replayed: dict[tuple[str, bool], _Replayed]
) -> Iterable[_Window]:
    """The windows a :func:`sessionkit.windows` frame claims: replayable ``[start, stop)``."""
    missing = [c for c in _FRAME_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"not a sessionkit.windows() frame: columns {missing} are missing")
    by_key = {s.key: s for s in sessions}
    rows = frame[list(_FRAME_COLUMNS)].astype({"session_key": "string"})
    for row in rows.itertuples(index=False):
        session = by_key[row.session_key]
        stamps = bool(row.include_timestamps)
        entries = _cached_replay(replayed, session, stamps).entries
        yield _Window(
            session,
            int(row.at),
            int(row.turn),
            int(row.consolidated),
            int(row.max_messages),
            int(row.max_tokens),
            stamps,
            bool(row.extend_to_user),
            [i for i in range(int(row.start), int(row.stop)) if entries[i] is not None],
        )


def _cached_replay(
    replayed: dict[tuple[str, bool], _Replayed], session: Session, stamps: bool
) -> _Replayed:
    key = (session.key, stamps)
    if key not in replayed:
        replayed[key] = _replay_all(session, stamps)
    return replayed[key]


def check_window_invariants(
    source: Corpus | Session | Iterable[Session] | pd.DataFrame,
    *,
    corpus: Corpus | Iterable[Session] | None = None,
    exact: bool = False,
    max_messages: int | Sequence[int] = 120,
    max_tokens: int | Sequence[int] = 0,
    include_timestamps: bool = True,
    extend_to_user: bool = False,
) -> pd.DataFrame:
    """Every :data:`INVARIANTS` violation among history windows, one row each.

    ``source`` is a corpus (or sessions): its window before every user message is checked for
    each ``max_messages`` x ``max_tokens`` combination, as computed by
    :func:`sessionkit.windows` or, with ``exact=True``, by the exact policy
    (``Session.get_history``; slower, the ground truth).  Or ``source`` is a frame from
    :func:`sessionkit.windows` with the ``corpus`` it was computed on; its rows carry their
    own settings.  ``include_timestamps`` defaults to True, as nanobot's agent calls it.

    Returns a frame with :data:`VIOLATIONS`; empty when every window is sound.
    """
    replayed: dict[tuple[str, bool], _Replayed] = {}
    if isinstance(source, pd.DataFrame):
        if corpus is None:
            raise TypeError("checking a windows frame needs corpus=..., the sessions it covers")
        candidates: Iterable[_Window] = _frame_windows(source, corpus, replayed)
    elif exact:
        sessions = [source] if isinstance(source, Session) else list(source)
        candidates = _exact_windows(
            sessions, max_messages, max_tokens, include_timestamps, extend_to_user
        )
    else:
        sessions = [source] if isinstance(source, Session) else list(source)
        frame = windows(
            sessions,
            max_messages=_as_list(max_messages),
            max_tokens=_as_list(max_tokens),
            include_timestamps=include_timestamps,
            extend_to_user=extend_to_user,
        )
        candidates = _frame_windows(frame, sessions, replayed)
    rows = [
        (w.session.key, w.at, w.turn, w.max_messages, w.max_tokens, name, idx, detail)
        for w in candidates
        for name, idx, detail in _violations(
            w, _cached_replay(replayed, w.session, w.include_timestamps)
        )
    ]
    if not rows:
        return empty_frame(VIOLATIONS)
    frame = pd.DataFrame(rows, columns=[c.name for c in VIOLATIONS])
    return frame.astype({c.name: c.dtype for c in VIOLATIONS})


def assert_window_invariants(
    source: Corpus | Session | Iterable[Session] | pd.DataFrame, **options: Any
) -> None:
    """Raise :class:`InvariantViolation` when :func:`check_window_invariants` finds any."""
    found = check_window_invariants(source, **options)
    if found.empty:
        return
    counts = found["invariant"].value_counts().to_dict()
    summary = ", ".join(f"{name}: {n}" for name, n in counts.items())
    with pd.option_context("display.width", 200, "display.max_colwidth", 80):
        head = found.head(10).to_string(index=False)
    raise InvariantViolation(f"{len(found)} window invariant violations ({summary}):\n{head}")
