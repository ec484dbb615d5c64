"""Every LLM call of a store as rows: tokens per part of the whole request and what a
provider's prefix cache could reuse from the previous call, for any history setting.

The history part comes from :func:`sessionkit.windows` (index arithmetic and prefix sums);
system prompt and tools from the release's kit, counted once per kit; the current message
and the turn's steps from each release's request rules, rebuilt and counted once per session
(:mod:`sessionkit.calls.turns`, cached); the archived summary the release adds to the prompt
and its per-call clean-up of history and steps (:mod:`sessionkit.calls.extras`) counted once
per session as per-message prefix sums.  The rows are then array arithmetic over the
windows frame: no request is rebuilt per row.  Only the context governor's verdict
(``needs_summary``, for a governed release given a context window) is measured per call, as
the release measures it (:func:`sessionkit.calls.governor.frame_verdicts`).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd

from sessionkit.calls.assembly import config_of, workspace_of
from sessionkit.calls.caching import (
    DEFAULT_TTL,
    cache_columns,
    checked,
    minimum_tokens,
    resolve_rules,
)
from sessionkit.calls.extras import SessionExtras, session_extras
from sessionkit.calls.governor import frame_verdicts
from sessionkit.calls.rebuilt import Call, rebuild, shared
from sessionkit.calls.storekits import Interpreter, StoreKits
from sessionkit.calls.times import call_times, logged_times, turn_span
from sessionkit.calls.turns import Item, SessionCalls, all_calls
from sessionkit.conventions import SWEEPABLE, as_keywords, entry_point, swept
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import HistorySettings, Offset
from sessionkit.nanobot.workspace import config_file
from sessionkit.schema import REQUEST_SETTINGS, REQUESTS, frame
from sessionkit.simulate.windowing import windows
from sessionkit.store import memo
from sessionkit.store.corpus import Corpus, selected
from sessionkit.store.counting import token_cache_of

__all__ = ["requests", "row_settings"]


@entry_point(config="config_dir")
def requests(
    source: Session | Corpus | Iterable[Session],
    key: str | None = None,
    *,
    policy: str | None = None,
    settings: HistorySettings | None = None,
    max_messages: int | None = None,
    max_tokens: int | None = None,
    include_timestamps: bool | None = None,
    include_runtime_context: bool | None = None,
    extend_to_user: bool | None = None,
    last_consolidated: Offset | None = None,
    file_cap: int | None = None,
    context_window: int | None = None,
    max_output: int | None = None,
    grid: Mapping[str, Sequence[Any]] | None = None,
    workspace: str | Path | None = None,
    config_dir: str | Path | None = None,
    nanobot: Interpreter | Mapping[str, Interpreter] | None = None,
    runtime: Mapping[str, Any] | None = None,
    block: int | None = None,
    tz: str | tzinfo | None = None,
    usage: pd.DataFrame | None = None,
    cache_rules: str | None = None,
    cache_ttl: float | None = DEFAULT_TTL,
    cache_scope: str = "session",
    workers: int | None = None,
    progress: bool | None = None,
) -> pd.DataFrame:
    """One row per (session, release, setting, turn, step): the request's tokens by part,
    its total, and ``prefix_tokens``, what it shares exactly with the session's previous
    request (tool definitions and system prompt when unchanged, then whole identical
    messages), rounded down to a multiple of ``block`` when given, with ``cache_ratio``.

    Each part is what the release sends (history and steps after its per-call clean-up:
    0.2.2 bounds tool results and compacts the older long ones), each message counted alone
    as windows count, so ``total_tokens`` is the release's own whole-request estimate within
    a few tokens per message (its count joins the texts).  ``summary_tokens`` is the
    archived summary the release adds to the system prompt; ``needs_summary`` the context
    governor's exact verdict before the call (0.3.5, with ``context_window``; <NA> otherwise).

    ``key``, ``policy``, ``settings``, the setting keywords and ``grid`` are those of
    :func:`sessionkit.windows` (the frame covers the grid).  ``config_dir`` is the nanobot
    config file the kits are probed with, or its folder (``config.json`` there; ``config=``
    is its deprecated spelling).  ``nanobot`` names the release's interpreter or venv, or maps
    release versions to them (``{"0.2.2": ...}``; a version left out is found as usual).
    Without an installed release (see ``sessionkit releases install``) the system and tools
    parts are 0 and a warning says so once.  ``workers`` and ``progress`` are those of
    :func:`sessionkit.windows`.

    ``time`` is each call's start: from ``usage`` (a :func:`sessionkit.usage` frame) where it
    ties a call to the row's (session, turn, step), else from the stored times, read as local
    time of ``tz`` (an IANA name or tzinfo; None: this machine's zone), as ``usage`` reads
    them.  ``cache_read_tokens``, ``cache_write_tokens`` and ``cache_break`` follow the
    provider's prompt cache (:mod:`sessionkit.calls.caching`): ``cache_rules`` a family
    (``"openai"``, ``"openai-marked"``, ``"anthropic"``) or a nanobot provider name (None:
    the provider the config file runs with, as nanobot 0.3.5 chooses it; without one
    ``"openai"``), ``cache_ttl`` seconds a prefix lives after its last use (default 300;
    None: forever), ``cache_scope`` ``"session"`` (each session's own cache) or
    ``"deployment"`` (sessions of one release and setting share the tools, and the system
    prompt where it counts alike).
    """
    checked(cache_ttl, cache_scope)
    given = swept(
        "requests",
        grid,
        SWEEPABLE,
        policy=policy,
        max_messages=max_messages,
        max_tokens=max_tokens,
        include_timestamps=include_timestamps,
        include_runtime_context=include_runtime_context,
        extend_to_user=extend_to_user,
        last_consolidated=last_consolidated,
        file_cap=file_cap,
        context_window=context_window,
        max_output=max_output,
    )
    chosen = selected(source, key)
    sessions = [chosen] if isinstance(chosen, Session) else list(chosen)
    w = windows(
        sessions, settings=settings, workers=workers, progress=progress, **as_keywords(given)
    )
    config = None if config_dir is None else config_file(config_dir)
    kits = StoreKits(
        Path(workspace) if workspace is not None else None,
        config,
        nanobot,
        runtime,
    )
    zone = ZoneInfo(tz) if isinstance(tz, str) else tz
    rows = _rows(w, {s.key: s for s in sessions}, kits, block, workers, progress, zone)
    if usage is not None and len(rows):
        _logged(rows, usage)
    rows = _cached(rows, {s.key: s for s in sessions}, kits, cache_rules, cache_ttl, cache_scope)
    for message in kits.warnings.values():
        warnings.warn(message, stacklevel=3)
    return rows


def _entries(w: pd.DataFrame, codes: np.ndarray) -> tuple[np.ndarray, dict[int, list[bool]]]:
    """Per row, the setting its release's replayed entries depend on; per release (by
    code), the values its rows take."""
    entry = np.zeros(len(w), dtype=bool)
    values: dict[int, list[bool]] = {}
    for code, name in enumerate(w["policy"].cat.categories):
        rows = codes == code
        column = w[get_policy(name).entry_setting].to_numpy(dtype=bool)[rows]
        entry[rows] = column
        values[code] = [bool(v) for v in np.unique(column)]
    return entry, values


def _offsets(sizes: Iterable[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(list(sizes), dtype=np.int64)]).astype(np.int64)


@dataclass(frozen=True)
class _Stack:
    """Every (session, release)'s calls laid end to end, indexed by global turn, then one
    closing turn without calls (where rows without a turn point)."""

    base: np.ndarray
    """First global turn of each (session, release), then the closing turn."""
    at: np.ndarray
    current: np.ndarray
    inferred: np.ndarray
    n_steps: np.ndarray
    step_start: np.ndarray
    steps: np.ndarray
    tail_start: np.ndarray
    tail_length: np.ndarray
    tail: np.ndarray
    matches: dict[bool, np.ndarray]

    @classmethod
    def of(cls, parts: list[SessionCalls]) -> _Stack:
        def joined(arrays: Iterable[np.ndarray], end: Any = 0) -> np.ndarray:
            return np.concatenate([*arrays, [end]])

        step_shift = _offsets(len(p.steps) for p in parts)
        tail_shift = _offsets(len(p.tail) for p in parts)
        return cls(
            base=_offsets(len(p.at) for p in parts),
            at=joined(p.at for p in parts),
            current=joined(p.current for p in parts),
            inferred=joined((p.inferred for p in parts), False),
            n_steps=joined(p.n_steps for p in parts),
            step_start=joined(
                p.step_offsets[:-1] + s for p, s in zip(parts, step_shift, strict=False)
            ),
            steps=joined(p.steps for p in parts),
            tail_start=joined(
                (p.tail_offsets[:-1] + s for p, s in zip(parts, tail_shift, strict=False)),
                tail_shift[-1],
            ),
            tail_length=joined(np.diff(p.tail_offsets) - 1 for p in parts),
            tail=joined(p.tail for p in parts),
            matches={
                entry: joined(p.matches.get(entry, np.zeros(len(p.at), np.int64)) for p in parts)
                for entry in (False, True)
            },
        )


@dataclass(frozen=True)
class _Extras:
    """Every (session, release)'s :class:`SessionExtras` laid end to end: per-message prefix
    sums carried on from one session to the next (so searches stay in order), per-call
    arrays in the order of :class:`_Stack`'s steps, then one closing entry."""

    base: np.ndarray
    weight: np.ndarray
    history: np.ndarray
    history_compacted: np.ndarray
    steps: np.ndarray
    steps_compacted: np.ndarray
    fillers: np.ndarray
    next_long: np.ndarray
    run_start: np.ndarray
    assistant: np.ndarray
    entry_tokens: dict[bool, np.ndarray]
    step_raw: np.ndarray
    step_length: np.ndarray
    summary: np.ndarray
    summary_inferred: np.ndarray
    keep: np.ndarray
    budget: np.ndarray
    regular: np.ndarray
    user: np.ndarray
    blank: np.ndarray

    @classmethod
    def of(cls, parts: list[SessionExtras]) -> _Extras:
        sizes = [len(p.weight) for p in parts]
        base = _offsets(sizes)[:-1]

        def carried(name: str, values: Iterable[np.ndarray] | None = None) -> np.ndarray:
            arrays = list(values) if values is not None else [getattr(p, name) for p in parts]
            carry = _offsets(a[-1] for a in arrays)
            shifted = [a + c for a, c in zip(arrays, carry[:-1], strict=False)]
            return np.concatenate([*shifted, carry[-1:]]).astype(np.int64)

        def joined(name: str, end: Any = 0) -> np.ndarray:
            return np.concatenate([*(getattr(p, name) for p in parts), [end]])

        return cls(
            base=base.astype(np.int64),
            weight=carried("weight"),
            history=carried("history"),
            history_compacted=carried("history_compacted"),
            steps=carried("steps"),
            steps_compacted=carried("steps_compacted"),
            fillers=carried("fillers"),
            next_long=np.concatenate(
                [*(p.next_long + b for p, b in zip(parts, base, strict=True)), [0]]
            ).astype(np.int64),
            run_start=np.concatenate(
                [*(p.run_start + b for p, b in zip(parts, base, strict=True)), [0]]
            ).astype(np.int64),
            assistant=joined("assistant", False),
            entry_tokens={
                value: carried(
                    "entry_tokens",
                    (p.entry_tokens.get(value, np.zeros(len(p.weight), np.int64)) for p in parts),
                )
                for value in (False, True)
            },
            step_raw=carried("step_raw"),
            step_length=joined("step_length"),
            summary=joined("summary"),
            summary_inferred=joined("summary_inferred", False),
            keep=np.array([p.keep for p in parts], dtype=np.int64),
            budget=np.array([p.budget for p in parts], dtype=np.int64),
            regular=np.array([p.regular for p in parts], dtype=bool),
            user=joined("user", False),
            blank=joined("blank", False),
        )


_LAID_OUT: list[Any] = []
"""The last :func:`_laid_out` result and weak references to the parts it was made of."""
memo.on_clear(_LAID_OUT.clear)


def _laid_out(built: list[SessionCalls], parts: list[SessionExtras]) -> tuple[_Stack, _Extras]:
    """The calls and extras stacked end to end; the previous stacks again when made of the
    same parts (a warm call on the same store)."""
    entries = [len(calls.matches) for calls in built]  # matches gain entry settings in place
    if _LAID_OUT:
        refs, known, stacks = _LAID_OUT
        if (
            known == entries
            and len(refs) == len(built) + len(parts)
            and all(ref() is part for ref, part in zip(refs, [*built, *parts], strict=True))
        ):
            return stacks
    stacks = (_Stack.of(built), _Extras.of(parts))
    _LAID_OUT[:] = [[weakref.ref(part) for part in [*built, *parts]], entries, stacks]
    return stacks


def _rows(
    w: pd.DataFrame,
    by_key: Mapping[str, Session],
    kits: StoreKits,
    block: int | None,
    workers: int | None,
    progress: bool | None,
    zone: tzinfo | None,
) -> pd.DataFrame:
    """The requests of the windows frame ``w``: each window's turn, call by call."""
    keys, names = w["session_key"].cat, w["policy"].cat
    key_names, policy_names = list(keys.categories), list(names.categories)
    key_codes = keys.codes.to_numpy(np.int64)
    policy_codes = names.codes.to_numpy(np.int64)
    n_policies = max(1, len(names.categories))
    entry, entry_values = _entries(w, policy_codes)
    pair, pairs = pd.factorize(key_codes * n_policies + policy_codes)
    items: list[Item] = []
    fixed = np.zeros((len(pairs), 3), dtype=np.int64)  # system, tools, kit inferred
    for i, code in enumerate(pairs):
        key_code, policy_code = divmod(int(code), n_policies)
        release = get_policy(policy_names[policy_code])
        session = by_key[key_names[key_code]]
        kit, digest, (system, tools, inferred) = kits.of(release, session)
        items.append((release, session, kit, digest, entry_values[policy_code]))
        fixed[i] = system, tools, inferred or kit is None
    built = all_calls(items, workers=workers, progress=progress)
    parts = [
        session_extras(calls, release, session, kit, values, kits.workspace)
        for calls, (release, session, kit, _, values) in zip(built, items, strict=True)
    ]
    stack, extras = _laid_out(built, parts)
    spans = np.concatenate(
        [
            *(turn_span(item[1], calls.at, zone) for item, calls in zip(items, built, strict=True)),
            np.full((1, 2), -1, dtype=np.int64),
        ]
    )
    turn = w["turn"].to_numpy(np.int64)
    has_turn = (turn < np.diff(stack.base)[pair]) & ~w["command"].to_numpy(bool)
    g = np.where(has_turn, stack.base[pair] + turn, stack.base[-1])
    group = (
        w.groupby(
            ["session_key", "policy", *REQUEST_SETTINGS], observed=True, sort=False, dropna=False
        )
        .ngroup()
        .to_numpy(np.int64)
    )
    rows = np.flatnonzero(stack.n_steps[g] > 0)
    step = np.diff(group[rows])
    if not ((step >= 0).all() and (np.diff(turn[rows])[step == 0] > 0).all()):
        rows = rows[np.lexsort((turn[rows], group[rows]))]  # groups as first met, turns ascending
    found = _Found(rows, g[rows], group[rows], entry[rows], pair[rows])
    out = _calls(w, items, found, fixed, stack, extras, block, spans)
    out["needs_summary"] = _governor(out, by_key, kits)
    return out


def _offset(label: str) -> Offset:
    """A ``last_consolidated`` label of the frame as the setting it names."""
    if label == "recorded":
        return "recorded"
    return "none" if label == "none" else int(label)


def row_settings(row: Mapping[str, Any]) -> HistorySettings:
    """The history setting a row of a requests frame names (its setting columns)."""
    return HistorySettings(
        max_messages=int(row["max_messages"]),
        max_tokens=int(row["max_tokens"]),
        include_timestamps=bool(row["include_timestamps"]),
        include_runtime_context=bool(row["include_runtime_context"]),
        extend_to_user=bool(row["extend_to_user"]),
        last_consolidated=_offset(str(row["last_consolidated"])),
    )


def _governor(out: pd.DataFrame, by_key: Mapping[str, Session], kits: StoreKits) -> pd.array:
    """Each call's governor verdict (:func:`~sessionkit.calls.governor.frame_verdicts`):
    <NA> for a release without a governor, a setting without a context window, a session
    without a kit, or a turn whose request cannot be rebuilt."""
    verdict = out["needs_summary"].array.copy()
    governed = [name for name in out["policy"].cat.categories if get_policy(name).governed]
    if not governed:
        return verdict
    chosen = out["policy"].isin(governed) & out["context_window"].notna()
    columns = ["session_key", "policy", *REQUEST_SETTINGS]
    for values, rows in out[chosen].groupby(columns, observed=True, sort=False).groups.items():
        setting = dict(zip(columns, values, strict=True))
        release, session = get_policy(setting["policy"]), by_key[setting["session_key"]]
        kit, _, _ = kits.of(release, session)
        if kit is None:
            continue
        settings = row_settings(setting)
        root = kits.workspace if kits.workspace is not None else workspace_of(session)
        limits = (int(setting["context_window"]), int(setting["max_output"]))
        found = frame_verdicts(release, session, kit, root, limits, settings)
        positions = out.index.get_indexer(rows)
        turns, steps = out["turn"].to_numpy()[positions], out["step"].to_numpy()[positions]
        for i, turn, step in zip(positions, turns, steps, strict=True):
            verdict[i] = found.get((int(turn), int(step)), pd.NA)
    return verdict


@dataclass(frozen=True)
class _Found:
    """The rows of the windows frame that made calls (in group, then turn order): each one's
    global turn, setting group, entry setting and (session, release) pair."""

    rows: np.ndarray
    g: np.ndarray
    group: np.ndarray
    entry: np.ndarray
    pair: np.ndarray


def _present(values: pd.Categorical, rows: np.ndarray) -> pd.Categorical:
    """``values[rows]`` with the categories pandas gives those values (the ones present,
    sorted), mapped through the few categories instead of every value."""
    codes = values.codes[rows]
    present = np.flatnonzero(np.bincount(codes, minlength=len(values.categories)))
    labels = pd.Categorical(np.asarray(values.categories[present], dtype=object))
    lookup = np.zeros(len(values.categories), dtype=np.int64)
    lookup[present] = labels.codes
    return pd.Categorical.from_codes(lookup[codes], labels.categories)


def _first_at_or_after(cumulative: np.ndarray, at: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Per call, the first message position ``i >= at`` whose count of earlier items from
    ``at`` (prefix sums ``cumulative``) reaches ``rank``."""
    return np.maximum(np.searchsorted(cumulative, cumulative[at] + rank, side="left"), at)


@dataclass(frozen=True)
class _Cleaned:
    """Each call's clean-up, in global message positions: its history ``[s, e)`` compacted
    on ``[s, qh)``, its steps ``[ss, se)`` compacted on ``[ss, qs)``."""

    s: np.ndarray
    e: np.ndarray
    qh: np.ndarray
    ss: np.ndarray
    se: np.ndarray
    qs: np.ndarray


def _cleaned(
    x: _Extras,
    base: np.ndarray,
    start: np.ndarray,
    stop: np.ndarray,
    at: np.ndarray,
    length: np.ndarray,
    keep: np.ndarray,
) -> _Cleaned:
    """Where each call's compactable results are compacted: all but the ``keep`` newest of
    the request (history, then steps)."""
    s, e = base + start, base + stop
    ss = base + at + 1
    se = ss + length
    in_history = x.weight[e] - x.weight[s]
    over = np.maximum(in_history + x.weight[se] - x.weight[ss] - keep, 0)
    qh = np.minimum(_first_at_or_after(x.weight, s, over), e)
    qs = np.minimum(_first_at_or_after(x.weight, ss, np.maximum(over - in_history, 0)), se)
    return _Cleaned(s, e, qh, ss, se, qs)


def _history_before(
    x: _Extras, c: _Cleaned, entry: np.ndarray, i: np.ndarray, p: np.ndarray
) -> np.ndarray:
    """Tokens of calls ``i``'s cleaned histories from their starts up to positions ``p``."""
    s, chosen = c.s[i], entry[i]
    tokens = np.where(chosen, x.entry_tokens[True][p], x.entry_tokens[False][p])
    tokens -= np.where(chosen, x.entry_tokens[True][s], x.entry_tokens[False][s])
    tokens += x.history[p] - x.history[s]
    return tokens + x.history_compacted[np.minimum(p, c.qh[i])] - x.history_compacted[s]


def _steps_before(x: _Extras, c: _Cleaned, i: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Tokens of calls ``i``'s cleaned steps up to positions ``p``."""
    ss = c.ss[i]
    tokens = x.step_raw[p] - x.step_raw[ss] + x.steps[p] - x.steps[ss]
    return tokens + x.steps_compacted[np.minimum(p, c.qs[i])] - x.steps_compacted[ss]


def _changed(x: _Extras, lo: np.ndarray, hi: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per call, the first message with a compacted form in ``[min(lo, hi), max(lo, hi))``
    and before ``end`` (where one request compacts it and the other does not), else ``end``."""
    first = x.next_long[np.minimum(lo, hi)]
    return np.where(first < np.minimum(np.maximum(lo, hi), end), first, end)


def _calls(
    w: pd.DataFrame,
    items: list[Item],
    found: _Found,
    fixed: np.ndarray,
    stack: _Stack,
    x: _Extras,
    block: int | None,
    spans: np.ndarray,
) -> pd.DataFrame:
    """Rows of ``w`` (in order, each group's turns ascending) expanded to one per call, each
    part as the release sends it (its per-call clean-up applied).

    A call's prefix is what it shares with the session's previous call (nothing for a
    session's first call): the tools and system prompt while the prompt is unchanged; within
    a turn, the previous call whole up to the first message the clean-up changed between
    them (a result compacted in one and not the other); at a turn's first call, while the
    history still starts where the previous turn's did, that history up to the first such
    change, then the leading messages of the previous turn's last call that this history
    repeats unchanged.
    """
    rows, g, group, entry = found.rows, found.g, found.group, found.entry
    first_row = np.ones(len(rows), dtype=bool)
    first_row[1:] = group[1:] != group[:-1]
    n_steps = stack.n_steps[g]
    call = np.repeat(np.arange(len(rows)), n_steps)
    step = np.arange(len(call)) - (np.cumsum(n_steps) - n_steps)[call]
    index = stack.step_start[g][call] + step
    source = rows[call]
    start = w["start"].to_numpy(np.int64)[source]
    stop = w["stop"].to_numpy(np.int64)[source]
    at = stack.at[g][call]
    pair = found.pair[call]
    c = _cleaned(x, x.base[pair], start, stop, at, x.step_length[index], x.keep[pair])
    history = w["tokens_kept"].to_numpy(np.int64)[source]
    history += x.history[c.e] - x.history[c.s] + x.history_compacted[c.qh]
    history -= x.history_compacted[c.s]
    steps = stack.steps[index] + x.steps[c.se] - x.steps[c.ss]
    steps += x.steps_compacted[c.qs] - x.steps_compacted[c.ss]
    system, tools, inferred = (fixed[found.pair[call], i] for i in range(3))
    summary = x.summary[index]
    current = stack.current[g][call]
    head = system + summary + tools
    total = head + history + current + steps
    prefix = _prefix(x, c, stack, g[call], entry[call], step, history, current, head, total)
    prefix = np.where(np.roll(summary, 1) == summary, prefix, tools)
    first = np.repeat(first_row, n_steps) & (step == 0)
    prefix[first] = 0
    messages = w["messages_kept"].to_numpy(np.int64)[source] + x.fillers[c.e] - x.fillers[c.s]
    margin = 8 * (messages + c.se - c.ss + 2) + 64
    unsure = ~x.regular[pair] | ((messages > 0) & x.user[c.e - 1])
    unsure |= (x.budget[pair] > 0) & (total + margin >= x.budget[pair])
    if unsure.any():
        parts = {"history": history, "history_messages": messages, "current": current}
        parts |= {"steps": steps, "prefix": prefix, "head": head, "tools": tools}
        _rebuilt(items, np.flatnonzero(unsure), first, pair, c, x, entry[call], step, at, parts)
        history, messages, current, steps = (
            parts[k] for k in ("history", "history_messages", "current", "steps")
        )
        total = head + history + current + steps
        prefix = parts["prefix"]
    if block:
        prefix -= prefix % block
    last, results = _last(x, c, step, current)
    dropped = _marker_dropped(x, c, step)
    answer = np.where(x.assistant[c.se], x.step_raw[c.se + 1] - x.step_raw[c.se], 0)
    ms = call_times(spans[g[call]], n_steps[call], step)
    zeros = np.zeros(len(call), dtype=np.int64)
    columns: dict[str, Any] = {
        "session_key": w["session_key"].cat.codes.to_numpy(np.int64)[source],
        "policy": w["policy"].cat.codes.to_numpy(np.int64)[source],
        "turn": w["turn"].to_numpy(np.int64)[source],
        "step": step,
        "time": _utc(ms),
        "time_inferred": (step > 0) | (ms < 0),
        "system_tokens": system,
        "summary_tokens": summary,
        "tools_tokens": tools,
        "history_tokens": history,
        "history_messages": messages,
        "history_start": start,
        "current_tokens": current,
        "steps_tokens": steps,
        "last_tokens": last,
        "last_results_tokens": results,
        "marker_dropped": dropped,
        "total_tokens": total,
        "answer_tokens": answer,
        "prefix_tokens": prefix,
        "cache_ratio": np.divide(
            prefix, total, out=np.zeros(len(total)), where=total != 0, dtype=np.float64
        ),
        "cache_rules": pd.Categorical(np.full(len(call), "openai", dtype=object)),
        "cache_read_tokens": zeros,
        "cache_write_tokens": zeros,
        "cache_break": pd.Categorical(np.full(len(call), "none", dtype=object)),
        "inferred": inferred.astype(bool) | stack.inferred[g][call] | x.summary_inferred[index],
        "needs_summary": pd.arrays.BooleanArray(
            np.zeros(len(call), dtype=bool), np.ones(len(call), dtype=bool)
        ),
    }
    for name in REQUEST_SETTINGS:
        values = w[name]
        if isinstance(values.dtype, pd.CategoricalDtype):
            columns[name] = _present(values.array, source)
        elif isinstance(values.dtype, pd.api.extensions.ExtensionDtype):
            columns[name] = values.array[source]
        else:
            columns[name] = values.to_numpy()[source]
    categories = {name: w[name].cat.categories for name in ("session_key", "policy")}
    return frame(REQUESTS, columns, categories=categories)


def _utc(ms: np.ndarray) -> pd.DatetimeIndex:
    """UTC epoch milliseconds as aware times, NaT where -1."""
    return pd.to_datetime(np.maximum(ms, 0), unit="ms", utc=True).where(ms >= 0).as_unit("ns")


def _last(
    x: _Extras, c: _Cleaned, step: np.ndarray, current: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each call's last message and its trailing tool results, in tokens as sent: the current
    message at a turn's first call, else the cleaned steps' last message and results run."""

    def tokens(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        found = x.step_raw[b] - x.step_raw[a] + x.steps[b] - x.steps[a]
        return (
            found + x.steps_compacted[np.minimum(b, c.qs)] - x.steps_compacted[np.minimum(a, c.qs)]
        )

    end = c.se
    at = np.maximum(end - 1, c.ss)
    run = np.clip(x.run_start[end], c.ss, end)
    later = step > 0
    return np.where(later, tokens(at, end), current), np.where(later, tokens(run, end), current)


def _marker_dropped(x: _Extras, c: _Cleaned, step: np.ndarray) -> np.ndarray:
    """Per call, whether its second-to-last message as sent is blank (:attr:`SessionExtras.blank`):
    a step's message before its last, else the history's last unless results were backfilled
    after it or it is a user message the current one is merged into (never blank then)."""
    later = step > 0
    at = np.where(later, c.se - 2, c.e - 1)
    held = np.where(later, at >= c.ss, c.e > c.s)
    at = np.maximum(at, 0)
    plain = later | ((x.fillers[at + 1] == x.fillers[at]) & ~x.user[at])
    return held & plain & x.blank[at]


def _logged(rows: pd.DataFrame, usage: pd.DataFrame) -> None:
    """Set ``time`` (exact, not inferred) where ``usage`` ties an agent call to the row."""
    keys = rows["session_key"].cat
    ms = logged_times(
        usage,
        [str(k) for k in keys.categories],
        rows["turn"].to_numpy(np.int64),
        rows["step"].to_numpy(np.int64),
        keys.codes.to_numpy(np.int64),
    )
    found = ms >= 0
    if found.any():
        rows.loc[found, "time"] = _utc(ms[found])
        rows.loc[found, "time_inferred"] = False


def _cached(
    rows: pd.DataFrame,
    by_key: Mapping[str, Session],
    kits: StoreKits,
    cache_rules: str | None,
    cache_ttl: float | None,
    cache_scope: str,
) -> pd.DataFrame:
    """``rows`` with the cache columns under each session's rules (its config's provider
    unless ``cache_rules`` names them)."""
    keys = rows["session_key"].cat
    chosen = []
    read: dict[Path | None, tuple[str, str | None]] = {}
    configs: dict[Path | None, Path | None] = {}  # per session folder: one lookup for them all
    for key in keys.categories:
        session = by_key[str(key)]
        config = kits.config
        if config is None:
            folder = session.path.parent if session.path else None
            if folder not in configs:
                root = kits.workspace if kits.workspace is not None else workspace_of(session)
                configs[folder] = config_of(root, session) if root is not None else None
            config = configs[folder]
        if config not in read:
            read[config] = resolve_rules(cache_rules, config)
        chosen.append(read[config])
    codes = np.maximum(keys.codes.to_numpy(), 0)
    names = [f for f, _ in chosen] or ["openai"]
    minimums = {minimum_tokens(f, m) for f, m in chosen}
    if len(set(names)) == 1 and len(minimums) <= 1 and len(rows):  # every session alike
        family = pd.Categorical.from_codes(np.zeros(len(rows), dtype=np.int8), names[:1])
        least: int | np.ndarray = minimums.pop() if minimums else 0
    else:
        seen = np.bincount(codes, minlength=len(names)) > 0
        used = sorted({names[i] for i in np.flatnonzero(seen)})  # the families of these rows
        per_key = np.array([used.index(f) if f in used else -1 for f in names], dtype=np.int64)
        family = pd.Categorical.from_codes(per_key[codes], used)
        least = np.array([minimum_tokens(f, m) for f, m in chosen] or [0], dtype=np.int64)
        least = least[codes]
    rows["cache_rules"] = family
    found = cache_columns(rows, family, least, cache_ttl, cache_scope)
    for name, values in found.items():  # made for these rows alone: not copied again
        rows[name] = pd.Series(values, index=rows.index, copy=False)
    return rows


def _prefix(
    x: _Extras,
    c: _Cleaned,
    stack: _Stack,
    g: np.ndarray,
    entry: np.ndarray,
    step: np.ndarray,
    history: np.ndarray,
    current: np.ndarray,
    head: np.ndarray,
    total: np.ndarray,
) -> np.ndarray:
    """Each call's prefix shared with the call before it (see :func:`_calls`; the first
    call of each group is the caller's to zero)."""
    prefix = np.roll(total, 1)  # within a turn: the previous call whole, unless ...
    i = np.flatnonzero(step > 0)
    j = i - 1
    cut = _changed(x, c.qh[j], c.qh[i], c.e[i])  # ... it compacted a history message
    hit = cut < c.e[i]
    prefix[i[hit]] = head[i[hit]] + _history_before(x, c, entry, i[hit], cut[hit])
    i, j = i[~hit], j[~hit]
    cut = _changed(x, c.qs[j], c.qs[i], c.se[j])  # ... or a step's
    hit = cut < c.se[j]
    i, cut = i[hit], cut[hit]
    prefix[i] = head[i] + history[i] + current[i] + _steps_before(x, c, i, cut)
    # at a turn's start: the previous history up to a change, then what this one repeats
    i = np.flatnonzero(step == 0)
    j = np.roll(np.arange(len(step)), 1)[i]
    prefix[i] = head[i]
    same = c.s[i] == c.s[j]
    i, j = i[same], j[same]
    cut = _changed(x, c.qh[j], c.qh[i], c.e[j])
    hit = cut < c.e[j]
    prefix[i[hit]] += _history_before(x, c, entry, i[hit], cut[hit])
    i, j = i[~hit], j[~hit]
    before = g[j]
    ss_before, qs_before = c.ss[j], c.qs[j]
    held = np.clip(c.e[i] - (ss_before - 1), 0, stack.tail_length[before])
    matched = np.where(entry[i], stack.matches[True][before], stack.matches[False][before])
    stretch = np.maximum(np.minimum(qs_before, c.qh[i]), ss_before)
    differs = x.next_long[stretch]
    differs = np.where(differs < np.maximum(qs_before, c.qh[i]), differs, c.se[j])
    repeat = np.minimum(np.minimum(held, matched), np.maximum(differs - ss_before + 1, 0))
    repeated = stack.tail[stack.tail_start[before] + repeat]
    tail_end = ss_before + np.maximum(repeat - 1, 0)
    repeated += x.steps[tail_end] - x.steps[ss_before]
    repeated += x.steps_compacted[np.minimum(tail_end, qs_before)] - x.steps_compacted[ss_before]
    prefix[i] += history[j] + repeated
    return prefix


def _rebuilt(
    items: list[Item],
    unsure: np.ndarray,
    first: np.ndarray,
    pair: np.ndarray,
    c: _Cleaned,
    x: _Extras,
    entry: np.ndarray,
    step: np.ndarray,
    at: np.ndarray,
    parts: dict[str, np.ndarray],
) -> None:
    """Rebuild the calls the model cannot say (and measure the prefix of each one's next
    call), updating ``parts`` in place (:mod:`sessionkit.calls.rebuilt`)."""
    after = unsure + 1
    after = after[(after < len(first)) & ~first[np.minimum(after, len(first) - 1)]]
    measured = np.union1d(unsure, after)
    wanted = np.union1d(measured, (measured - 1)[~first[measured]])
    base = x.base[pair]
    loops: dict[int, list[dict[str, Any]]] = {}
    for p in np.unique(pair[wanted]):
        release, session, kit, _, _ = items[p]
        if kit is None:
            continue
        mine = wanted[pair[wanted] == p]
        calls = [
            Call(
                int(c.s[i] - base[i]),
                int(c.e[i] - base[i]),
                int(at[i]),
                int(step[i]),
                bool(entry[i]),
            )
            for i in mine
        ]
        system = release.system_prompt(kit, session)
        for i, done in zip(mine, rebuild(release, session, kit, system, calls), strict=True):
            loops[int(i)] = done.loop
            if i in unsure:
                parts["history"][i], parts["history_messages"][i] = (
                    done.history,
                    done.history_messages,
                )
                parts["current"][i], parts["steps"][i] = done.current, done.steps
        for i in measured[pair[measured] == p]:
            if first[i] or int(i) not in loops or int(i) - 1 not in loops:
                continue
            before, now = loops[int(i) - 1], loops[int(i)]
            if before[0] != now[0]:  # another system prompt: only the tools are shared
                parts["prefix"][i] = parts["tools"][i]
            else:
                parts["prefix"][i] = parts["head"][i] + shared(
                    release, kit, before, now, token_cache_of([session])
                )
