"""The provider's prompt cache, call by call: what each call of a requests frame reads from it,
writes to it, and why it reads less than the whole previous request of its session.

Each family is the wire form nanobot 0.3.5 sends (:mod:`sessionkit.nanobot.prompt_cache_035`):

- ``"openai"``: automatic prefix caching.  OpenAI, "Prompt caching" guide
  (https://developers.openai.com/api/docs/guides/prompt-caching, read 2026-12-07): caching
  applies to prompts of 1,024 tokens or more, hits come in 128-token increments (the guide's
  cookbook "Prompt Caching 201"), in-memory retention clears a prefix after 5-10 minutes of
  inactivity and always within an hour (``prompt_cache_retention="24h"``: up to 24 hours);
  writes cost nothing extra.  A call reads the prefix it shares with its session's previous
  call, rounded down to 128 tokens, when that is at least 1,024.
- ``"anthropic"`` (and ``"openai-marked"``, gateways that pass nanobot's markers on to a Claude
  model): Anthropic, "Prompt caching"
  (https://platform.claude.com/docs/en/build-with-claude/prompt-caching, read 2026-12-07):
  the prefix up to each ``cache_control`` breakpoint is cached (tools, then system, then
  messages); a later request reads the longest cached prefix ending at or before one of its
  breakpoints and writes the rest up to its last one; the 5-minute lifetime is refreshed on
  every hit (1 hour with ``ttl: "1h"``); writes cost 1.25x the base input price (2x for 1
  hour), reads 0.1x; nothing below the model's minimum is cached (4,096 tokens for Claude
  Opus 4.5 and later and Haiku 4.5, 2,048 for Haiku 3 and 3.5, 1,024 for the others).
  Breakpoints as 0.3.5 places them: end of the tools, end of the system prompt, end of the
  second-to-last message once a request holds three, unless (``"openai-marked"``) that
  message has no text (``marker_dropped``: an assistant tool call sent with null content);
  the calls after such a one still read the last message entry written before it.

The default lifetime is 300 seconds: nanobot's markers carry no ``ttl`` (Anthropic's 5
minutes), and the low end of OpenAI's 5-10 idle minutes.  ``None``: nothing expires (the
model before 0.4: every shared prefix read).  What the frame cannot tell: a cache entry older
than the previous call but for the message entry written before calls without a message
breakpoint (otherwise only the previous call's breakpoints and hit are looked up, not
Anthropic's 20-block lookback), the boundary between built-in and MCP tools (one tools
breakpoint), and, for ``"deployment"`` scope, which sessions share a prompt: those of one
release and setting whose tools count alike share the tools (first in the prefix, for OpenAI
as for Anthropic's tools breakpoint, whatever the system prompt), and their system prompt too
when it counts alike.  tests/calls/test_caching_e2e.py holds these
columns against a stub provider's cache written from the same documentation, call by call.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sessionkit.nanobot.prompt_cache_035 import (
    FAMILIES,
    configured_provider,
    family_of,
    marks_second_to_last,
)
from sessionkit.schema import CACHE_BREAKS, REQUEST_SETTINGS

__all__ = [
    "DEFAULT_TTL",
    "FAMILIES",
    "SCOPES",
    "cache_columns",
    "checked",
    "minimum_tokens",
    "resolve_rules",
    "write_premium",
]

DEFAULT_TTL = 300.0
"""Seconds a cached prefix lives after its last use (see the module text)."""
SCOPES = ("session", "deployment")
OPENAI_MINIMUM = 1024
OPENAI_STEP = 128
_ANTHROPIC_MINIMUM = 1024
_ANTHROPIC_LARGER = (
    (("opus-4-5", "opus-4.5", "opus-4-6", "opus-4.6", "opus-4-7", "opus-4.7"), 4096),
    (("haiku-4-5", "haiku-4.5"), 4096),
    (("3-haiku", "3-5-haiku", "3.5-haiku", "haiku-3"), 2048),
)
"""Claude models whose minimum cacheable prompt is larger than 1,024 tokens."""
_WRITE_5M, _WRITE_1H = 1.25, 2.0
"""Anthropic's cache-write price, in base input prices, for the 5-minute and 1-hour TTL."""
_FIVE_MINUTES = 300.0
_LOOKBACK = 20
"""Blocks before a breakpoint Anthropic looks back through for a cached prefix."""
_BREAK_ORDER = (
    "first call",
    "idle past the TTL",
    "none",
    "tools changed",
    "summary",
    "system prompt changed",
    "window slid",
)
"""Why a call's cache broke, in the order the conditions are tried: the first that holds."""
_BREAK_CODES = np.array(
    [
        CACHE_BREAKS.index(
            _BREAK_ORDER[(b & -b).bit_length() - 1] if b else "clean-up or compaction"
        )
        for b in range(2 ** len(_BREAK_ORDER))
    ],
    dtype=np.int8,
)
"""The :data:`~sessionkit.schema.CACHE_BREAKS` code of each set of conditions that hold (bit
``k``: the ``k``-th of :data:`_BREAK_ORDER`): the first's (none: a clean-up or compaction)."""


def checked(cache_ttl: float | None, cache_scope: str) -> None:
    """Refuse a TTL that is no positive number of seconds, or an unknown scope."""
    if cache_ttl is not None and (
        isinstance(cache_ttl, bool) or not isinstance(cache_ttl, int | float) or cache_ttl <= 0
    ):
        raise ValueError(
            f"cache_ttl must be seconds > 0 or None (never expires), not {cache_ttl!r}"
        )
    if cache_scope not in SCOPES:
        raise ValueError(f"cache_scope must be one of {', '.join(SCOPES)}, not {cache_scope!r}")


def resolve_rules(cache_rules: str | None, config: Path | None) -> tuple[str, str | None]:
    """The family (and the configured model, None when unknown) of ``cache_rules`` — a family
    or a nanobot provider name — or, when None, of the provider the config file runs with
    (0.3.5's choice; no config or provider: ``"openai"``)."""
    raw: Any = {}
    if config is not None:
        try:
            raw = json.loads(Path(config).read_text(encoding="utf-8"))
        except (OSError, UnicodeError, ValueError):
            raw = {}
    provider, model = configured_provider(raw if isinstance(raw, Mapping) else {})
    if cache_rules is None:
        return family_of(provider, model), model
    if not isinstance(cache_rules, str) or not cache_rules:
        raise ValueError(
            f"cache_rules must be one of {', '.join(FAMILIES)} or a nanobot provider name, not {cache_rules!r}"
        )
    if cache_rules in FAMILIES:
        return cache_rules, model
    return family_of(cache_rules, model), model


def minimum_tokens(family: str, model: str | None) -> int:
    """The smallest prefix ``family`` caches for ``model`` (None: the family's usual one)."""
    if family == "openai":
        return OPENAI_MINIMUM
    name = (model or "").lower()
    return next(
        (n for keys, n in _ANTHROPIC_LARGER if any(k in name for k in keys)), _ANTHROPIC_MINIMUM
    )


def write_premium(cache_ttl: float | None) -> float:
    """Anthropic's cache-write price in base input prices: 1.25 up to 5 minutes (and for a
    cache that never expires), else 2 (the 1-hour cache)."""
    return _WRITE_5M if cache_ttl is None or cache_ttl <= _FIVE_MINUTES else _WRITE_1H


_SESSION = ["session_key", "policy", *REQUEST_SETTINGS]
"""The columns naming one cache: a session's calls under one release and setting."""


def _rounded(tokens: np.ndarray, where: np.ndarray) -> np.ndarray:
    """OpenAI's cached tokens of a shared prefix where ``where`` holds (else 0): 128-token
    steps from 1,024 on."""
    kept = tokens >= OPENAI_MINIMUM
    kept &= where
    return (tokens & -OPENAI_STEP) * kept  # a power of 2; a product, faster than np.where


def _ms(times: pd.Series) -> np.ndarray:
    """UTC epoch milliseconds of aware times, -1 where missing."""
    index = pd.DatetimeIndex(times)
    raw = index.asi8  # UTC whatever the zone shown
    if index.unit != "ns":
        raw = index.as_unit("ms").asi8
        return np.where(raw == np.iinfo(np.int64).min, -1, raw)
    values = raw // 1_000_000  # floored, as as_unit("ms") floors
    np.putmask(values, raw == np.iinfo(np.int64).min, -1)
    return values


def _alike(values: pd.Series) -> np.ndarray:
    """Per row after the first: it holds the previous row's value (missing ones alike); False
    where that is not cheap to tell (a column of objects)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes = values.array.codes  # a Categorical's
        return codes[1:] == codes[:-1]
    if isinstance(values.dtype, np.dtype) and values.dtype.kind in "iubf":
        data = values.to_numpy()  # nothing missing but NaN, never alike: a run split, no harm
        return data[1:] == data[:-1]
    if values.dtype.kind not in "iubf":
        return np.zeros(max(len(values) - 1, 0), dtype=bool)
    missing = values.isna().to_numpy()
    if missing.all():  # a setting no row sets (context_window, max_output): alike throughout
        return np.ones(max(len(values) - 1, 0), dtype=bool)
    kind = np.dtype(getattr(values.dtype, "numpy_dtype", values.dtype))
    data = values.to_numpy(dtype=kind, na_value=kind.type(0))
    return (data[1:] == data[:-1]) & (missing[1:] == missing[:-1])


def _starts(rows: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """Per row: it begins a run of rows alike in ``keys`` (the first row always does)."""
    starts = np.ones(len(rows), dtype=bool)
    if len(rows) > 1:
        alike = _alike(rows[keys[0]])
        for key in keys[1:]:
            alike &= _alike(rows[key])
        np.logical_not(alike, out=starts[1:])
    return starts


def _run_groups(rows: pd.DataFrame, keys: list[str], first: np.ndarray) -> np.ndarray:
    """The group of each run of rows starting at ``first``, numbered as first met (missing
    values a group of their own): ``groupby(keys, observed=True, sort=False,
    dropna=False).ngroup()`` of those rows, factorizing one key at a time as groupby does."""
    group = np.zeros(len(first), dtype=np.int64)
    for key in keys:
        codes, uniques = pd.factorize(rows[key].take(first), use_na_sentinel=False)
        group, found = pd.factorize(group * len(uniques) + codes)
        if len(found) == len(first):  # every run a group of its own: the rest changes nothing
            return np.arange(len(first))
    return group


def _grouped(rows: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """``rows.groupby(keys, observed=True, sort=False, dropna=False).ngroup()``, grouping only
    the first row of each run of rows alike in ``keys`` (a requests frame's are long)."""
    first = np.flatnonzero(_starts(rows, keys))
    return np.repeat(_run_groups(rows, keys, first), np.diff(np.append(first, len(rows))))


def _shared_warm(
    rows: pd.DataFrame, t: np.ndarray, ttl_ms: float, order: np.ndarray | slice, keys: list[str]
) -> np.ndarray:
    """Per row (in ``order``): another call of its deployment (release and setting) alike in
    ``keys`` (the tools, or the tools and system prompt) was made within the TTL before it, so
    the prefix they share is cached."""
    keys = ["policy", *REQUEST_SETTINGS, *keys]
    d, tt = _grouped(rows, keys)[order], t[order]
    by_time = np.lexsort((tt, d))
    ds, ts = d[by_time], tt[by_time]
    warm = np.zeros(len(d), dtype=bool)
    if len(ds) > 1:
        same = (ds[1:] == ds[:-1]) & (ts[:-1] >= 0) & (ts[1:] >= 0)
        warm[by_time[1:]] = same & (ts[1:] - ts[:-1] <= ttl_ms)
    return warm


def _previous(values: np.ndarray) -> np.ndarray:
    """Each row's predecessor's value (the first row's own): ``values[max(i - 1, 0)]``."""
    out = np.empty_like(values)
    out[:1], out[1:] = values[:1], values[:-1]
    return out


def _session_order(
    rows: pd.DataFrame, turn: np.ndarray, step: np.ndarray
) -> tuple[np.ndarray | slice, np.ndarray]:
    """The rows sorted by session (as first met), turn and step (stable) — all of them as they
    are when they already are (a requests frame's own order) — and which of them, in that
    order, is its session's first call."""
    starts = _starts(rows, _SESSION)
    first = np.flatnonzero(starts)
    runs = _run_groups(rows, _SESSION, first)
    if (runs == np.arange(len(runs))).all():  # no session met twice: in order within runs?
        later = (turn[1:] > turn[:-1]) | ((turn[1:] == turn[:-1]) & (step[1:] >= step[:-1]))
        if (starts[1:] | later).all():
            return slice(None), starts
    group = np.repeat(runs, np.diff(np.append(first, len(rows))))
    order = np.lexsort((step, turn, group))
    g = group[order]
    starts[1:] = g[1:] != g[:-1]
    return order, starts


def _reaching(tokens: np.ndarray, where: np.ndarray | None, least: int | np.ndarray) -> np.ndarray:
    """``tokens`` where ``where`` holds (None: everywhere), kept where they reach the minimum
    ``least``, else 0."""
    if isinstance(least, np.ndarray) or least <= 0:
        value = tokens if where is None else np.where(where, tokens, 0)
        return np.where(value >= least, value, 0)
    kept = tokens >= least  # a minimum over 0: the zeros ``where`` leaves fall below it
    if where is not None:
        kept &= where
    return tokens * kept


def cache_columns(
    rows: pd.DataFrame,
    family: np.ndarray | pd.Categorical,
    minimum: int | np.ndarray,
    cache_ttl: float | None,
    cache_scope: str,
    *,
    breaks: bool = True,
) -> dict[str, Any]:
    """``cache_read_tokens``, ``cache_write_tokens`` and ``cache_break`` (a Categorical of
    :data:`~sessionkit.schema.CACHE_BREAKS`; left out when not ``breaks``: a price needs
    only the tokens) of a requests frame's rows, under each row's ``family`` (names, or a
    Categorical of them: faster) and ``minimum`` cacheable prefix (one for every row, or one
    per row)."""
    families = family if isinstance(family, pd.Categorical) else pd.Categorical(family)
    names = [str(c) for c in families.categories]
    n = len(rows)
    if len(names) == 1 and n and families.codes.min() >= 0:  # one family, every row
        used = np.array([False, True])
    else:
        used = np.bincount(families.codes + 1, minlength=len(names) + 1) > 0
    present = [name for name, u in zip(names, used[1:], strict=True) if u]
    unknown = sorted(set(present) - set(FAMILIES)) + (["nan"] if used[0] else [])
    if unknown:
        raise ValueError(f"cache_rules {unknown} unknown: a family is one of {', '.join(FAMILIES)}")
    turn, step = (rows[c].to_numpy(np.int64) for c in ("turn", "step"))
    order, first = _session_order(rows, turn, step)

    def col(name: str) -> np.ndarray:
        return rows[name].to_numpy(np.int64)[order]

    t = _ms(rows["time"])
    ts, st = t[order], step[order]
    total, prefix, tools = col("total_tokens"), col("prefix_tokens"), col("tools_tokens")
    system, summary = col("system_tokens"), col("summary_tokens")
    head = tools + system
    head += summary
    least: int | np.ndarray = (
        int(minimum) if np.ndim(minimum) == 0 else np.asarray(minimum, np.int64)[order]
    )
    ttl_ms = np.inf if cache_ttl is None else cache_ttl * 1000
    idle = np.zeros(n, dtype=bool)
    if cache_ttl is not None and n > 1:
        later = ts[1:] - ts[:-1] > (math.floor(ttl_ms) if ttl_ms < 2**53 else ttl_ms)  # ints
        later &= ~first[1:]
        unknown_time = ts < 0
        if unknown_time.any():
            later &= ~(unknown_time[1:] | unknown_time[:-1])
        idle[1:] = later
    warm = ~(first | idle)
    shared: np.ndarray | None = None
    read, write = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    if cache_scope == "deployment":  # the prefix runs tools, system, messages
        shared = _shared_warm(rows, t, ttl_ms, order, ["tools_tokens", "system_tokens"])
        shared_tools = _shared_warm(rows, t, ttl_ms, order, ["tools_tokens"])
        shared_head = np.maximum(
            np.where(shared, np.where(summary == 0, head, tools), 0),
            np.where(shared_tools, tools, 0),
        )
    if len(present) > 1:  # families of their own per row
        fam = families.codes[order]
        marked: Any = np.array([name != "openai" for name in names] + [False])[fam]  # -1: none
        anthropic: Any = fam == (names.index("anthropic") if "anthropic" in names else -1)
    else:  # one family (or no row): the same for every row
        marked = bool(present) and present[0] != "openai"
        anthropic = present == ["anthropic"]
    if not np.all(marked):  # some rows under "openai"
        read = _rounded(prefix, warm)
        if shared is not None:
            read = np.maximum(read, _rounded(tools + system, shared))
            read = np.maximum(read, _rounded(tools, shared_tools))
        if isinstance(least, np.ndarray) or least > OPENAI_MINIMUM:  # else read reaches it
            read = np.where(read >= least, read, 0)
    if np.any(marked):
        messages = 2 * st
        messages += col("history_messages")
        messages += 2
        messages -= anthropic  # one fewer under "anthropic"
        if anthropic is True:
            last, dropped = col("last_results_tokens"), None  # blocks: never dropped
        else:
            last = col("last_tokens")
            dropped = rows["marker_dropped"].to_numpy(bool)[order]
            if anthropic is not False:
                last = np.where(anthropic, col("last_results_tokens"), last)
                dropped = dropped & ~anthropic
        marks = marks_second_to_last(messages)
        if dropped is not None:
            marks &= ~dropped
        fast = not isinstance(least, np.ndarray) and least > 0
        points = [
            _reaching(tools if fast else np.maximum(tools, 0), None, least),
            _reaching(head, head > tools, least),
            _reaching(total - last, marks, least),
        ]
        top = np.maximum(points[0], points[1])
        np.maximum(top, points[2], out=top)
        bound = np.minimum(prefix, top)
        older = None
        if dropped is not None and dropped.any():
            group = np.cumsum(first)  # a session's rows run together in session order
            older = _older_entries(points[2], dropped, messages, bound, group, ts, ttl_ms)
        arrived = None
        if shared is not None:
            arrived = np.where((least <= shared_head) & (shared_head <= top), shared_head, 0)
        hits = _breakpoint_reads(points, bound, warm, arrived, older)
        if np.all(marked):
            read = hits
            write = np.subtract(top, hits, out=top)
            np.maximum(write, 0, out=write)
        else:
            read = np.where(marked, hits, read)
            write = np.where(marked, np.maximum(top - hits, 0), 0)
    out: dict[str, Any] = {"cache_read_tokens": read, "cache_write_tokens": write}
    if not isinstance(order, slice):  # back to the frame's order
        for name, values in list(out.items()):
            out[name] = np.empty(n, np.int64)
            out[name][order] = values
    if breaks:
        codes = np.empty(n, np.int8)
        codes[order] = _breaks(rows, order, first, idle, prefix, head, tools, summary, total)
        out["cache_break"] = pd.Categorical.from_codes(codes, CACHE_BREAKS)
    return out


def _breakpoint_reads(
    points: list[np.ndarray],
    bound: np.ndarray,
    warm: np.ndarray,
    arrived: np.ndarray | None,
    older: np.ndarray | None,
) -> np.ndarray:
    """Each call's read under its breakpoints ``points`` (one array per breakpoint, rows in
    session order): the longest entry alive — one the previous call wrote or read at its
    breakpoints, an ``older`` one (:func:`_older_entries`; None: none), or the deployment's
    shared head where it ``arrived`` (None: none) — that this request repeats and reaches with
    a breakpoint (within ``bound``).  The read a call carries on depends on the one before, so
    the recurrence is iterated until no read changes (as many rounds as the longest run of
    calls carrying one read on), each round over the rows just after a read the round before
    changed."""
    n = len(bound)
    fresh = np.zeros(n, dtype=np.int64)  # a session's first row is never warm
    if n > 1:
        within, kept = bound[1:], fresh[1:]
        for p in points:
            before = p[:-1]
            np.maximum(kept, before * (before <= within), out=kept)
    np.multiply(fresh, warm, out=fresh)
    if arrived is not None:
        np.maximum(fresh, arrived, out=fresh)
    if older is not None:
        np.maximum(fresh, older, out=fresh)
    reads = fresh.copy()  # the first round over whole arrays, later ones sparse
    if n > 1:
        carried = fresh[:-1]
        taken = carried <= bound[1:]
        taken &= warm[1:]
        np.maximum(reads[1:], carried * taken, out=reads[1:])
    i = np.flatnonzero(reads != fresh) + 1
    i = i[i < len(reads)]
    while len(i):
        carried = reads[i - 1]
        found = np.maximum(fresh[i], np.where(warm[i] & (carried <= bound[i]), carried, 0))
        changed = found != reads[i]
        i = i[changed]
        reads[i] = found[changed]
        i = i[i + 1 < len(reads)] + 1
    return reads


def _older_entries(
    message: np.ndarray,
    dropped: np.ndarray,
    messages: np.ndarray,
    bound: np.ndarray,
    group: np.ndarray,
    t: np.ndarray,
    ttl_ms: float,
) -> np.ndarray:
    """Per call after one whose marker 0.3.5 ``dropped`` (rows in session order), the message
    entry (``message``) the last call of its session with a message breakpoint wrote: when
    still alive, repeated by this request (within ``bound``) and within Anthropic's 20-block
    lookback of this call's second-to-last message; else 0."""
    n = len(message)
    index = np.arange(n)
    latest = np.maximum.accumulate(np.where(message > 0, index, -1))
    j = _previous(latest)
    j[:1] = -1
    found = (j >= 0) & (j < index - 1) & _previous(dropped)
    j = np.maximum(j, 0)
    unknown = (t < 0) | (t[j] < 0)
    found &= (group[j] == group) & (unknown | (t - t[j] <= ttl_ms))
    found &= (messages - messages[j] < _LOOKBACK) & (message[j] <= bound)
    return np.where(found, message[j], 0)


def _breaks(
    rows: pd.DataFrame,
    order: np.ndarray | slice,
    first: np.ndarray,
    idle: np.ndarray,
    prefix: np.ndarray,
    head: np.ndarray,
    tools: np.ndarray,
    summary: np.ndarray,
    total: np.ndarray,
) -> np.ndarray:
    """Each call's :data:`~sessionkit.schema.CACHE_BREAKS` code (rows in session order): the
    conditions that hold as bits of one number per row, read off :data:`_BREAK_CODES`."""
    start = rows["history_start"].to_numpy(np.int64)[order]
    codes = np.empty(len(first), dtype=np.int8)
    if not len(first):
        return codes
    codes[0] = CACHE_BREAKS.index("first call")
    conditions = [  # each row against the one before, in the order of _BREAK_ORDER
        first[1:],
        idle[1:],
        prefix[1:] >= total[:-1],
        prefix[1:] < tools[1:],
        summary[1:] != summary[:-1],
        prefix[1:] < head[1:],
        start[1:] != start[:-1],
    ]
    bits = np.zeros(len(first) - 1, dtype=np.uint8)
    for k, condition in enumerate(conditions):
        bits |= condition.view(np.uint8) << k
    codes[1:] = _BREAK_CODES[bits]
    return codes
