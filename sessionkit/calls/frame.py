"""Every LLM call of a store as rows: tokens per part of the whole request and what a
provider's prefix cache could reuse from the previous call, for any history setting.

The history part comes from :func:`sessionkit.windows` (index arithmetic and prefix sums);
system prompt and tools from the release's kit, counted once per kit; the current message
and the turn's steps from each release's request rules, rebuilt and counted once per session
(:mod:`sessionkit.calls.turns`, cached).  The rows are then array arithmetic over the
windows frame: no request is rebuilt per row.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

import numpy as np
import pandas as pd

from sessionkit.calls.storekits import Interpreter, StoreKits
from sessionkit.calls.turns import Item, SessionCalls, all_calls
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings, SettingsOverrides
from sessionkit.schema import REQUESTS, frame
from sessionkit.simulate.windowing import windows
from sessionkit.store.corpus import Corpus

__all__ = ["requests"]

_SETTING_COLUMNS = [
    "max_messages",
    "max_tokens",
    "include_timestamps",
    "include_runtime_context",
    "extend_to_user",
    "last_consolidated",
    "context_window",
    "max_output",
]


def requests(
    source: Session | Corpus | Iterable[Session],
    *,
    workspace: str | Path | None = None,
    config: str | Path | None = None,
    policy: str | list[str] | None = None,
    settings: HistorySettings = DEFAULT_SETTINGS,
    nanobot: Interpreter | Mapping[str, Interpreter] | None = None,
    runtime: Mapping[str, Any] | None = None,
    block: int | None = None,
    context_window: int | list[int] | None = None,
    max_output: int | list[int] | None = None,
    workers: int | None = None,
    progress: bool | None = None,
    **overrides: Unpack[SettingsOverrides],
) -> pd.DataFrame:
    """One row per (session, release, setting, turn, step): the request's tokens by part,
    its total, and ``prefix_tokens``, what it shares exactly with the session's previous
    request (tool definitions and system prompt when unchanged, then whole identical
    messages), rounded down to a multiple of ``block`` when given, with ``cache_ratio``.

    Settings and overrides are those of :func:`sessionkit.windows` (each may be a list: the
    frame covers the grid).  ``nanobot`` names the release's interpreter or venv, or maps
    release versions to them (``{"0.2.2": ...}``; a version left out is found as usual).
    Without an installed release (see ``sessionkit releases install``) the system and tools
    parts are 0 and a warning says so once.  ``workers`` and ``progress`` are those of
    :func:`sessionkit.windows`.
    """
    sessions = [source] if isinstance(source, Session) else list(source)
    w = windows(
        sessions,
        settings=settings,
        policy=policy,
        context_window=context_window,
        max_output=max_output,
        workers=workers,
        progress=progress,
        **overrides,
    )
    kits = StoreKits(
        Path(workspace) if workspace is not None else None,
        Path(config) if config is not None else None,
        nanobot,
        runtime,
    )
    rows = _rows(w, {s.key: s for s in sessions}, kits, block, workers, progress)
    for message in kits.warnings.values():
        warnings.warn(message, stacklevel=2)
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


def _rows(
    w: pd.DataFrame,
    by_key: Mapping[str, Session],
    kits: StoreKits,
    block: int | None,
    workers: int | None,
    progress: bool | None,
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
    stack = _Stack.of(all_calls(items, workers=workers, progress=progress))
    turn = w["turn"].to_numpy(np.int64)
    has_turn = (turn < np.diff(stack.base)[pair]) & ~w["command"].to_numpy(bool)
    g = np.where(has_turn, stack.base[pair] + turn, stack.base[-1])
    group = (
        w.groupby(
            ["session_key", "policy", *_SETTING_COLUMNS], observed=True, sort=False, dropna=False
        )
        .ngroup()
        .to_numpy(np.int64)
    )
    rows = np.flatnonzero(stack.n_steps[g] > 0)
    step = np.diff(group[rows])
    if not ((step >= 0).all() and (np.diff(turn[rows])[step == 0] > 0).all()):
        rows = rows[np.lexsort((turn[rows], group[rows]))]  # groups as first met, turns ascending
    return _calls(w, rows, g[rows], group[rows], entry[rows], fixed[pair[rows]], stack, block)


def _present(values: pd.Categorical, rows: np.ndarray) -> pd.Categorical:
    """``values[rows]`` with the categories pandas gives those values (the ones present,
    sorted), mapped through the few categories instead of every value."""
    codes = values.codes[rows]
    present = np.flatnonzero(np.bincount(codes, minlength=len(values.categories)))
    labels = pd.Categorical(np.asarray(values.categories[present], dtype=object))
    lookup = np.zeros(len(values.categories), dtype=np.int64)
    lookup[present] = labels.codes
    return pd.Categorical.from_codes(lookup[codes], labels.categories)


def _calls(
    w: pd.DataFrame,
    rows: np.ndarray,
    g: np.ndarray,
    group: np.ndarray,
    entry: np.ndarray,
    fixed: np.ndarray,
    stack: _Stack,
    block: int | None,
) -> pd.DataFrame:
    """Rows of ``w`` (in order, each group's turns ascending) expanded to one per call.

    A call's prefix: nothing for a session's first call; the previous call's whole request
    within a turn; at a turn's first call, system prompt and tools, and when the history
    still starts where the previous turn's did, that history and the leading messages of
    the previous turn's last call that this history repeats unchanged (those it holds).
    """
    first = np.ones(len(rows), dtype=bool)
    first[1:] = group[1:] != group[:-1]
    start = w["start"].to_numpy(np.int64)[rows]
    stop = w["stop"].to_numpy(np.int64)[rows]
    history = w["tokens_kept"].to_numpy(np.int64)[rows]
    before = np.roll(g, 1)
    same_start = ~first & (start == np.roll(start, 1))
    held = np.clip(stop - stack.at[before], 0, stack.tail_length[before])
    matched = np.where(entry, stack.matches[True][before], stack.matches[False][before])
    repeated = stack.tail[stack.tail_start[before] + np.minimum(held, matched)]
    system, tools, inferred = fixed[:, 0], fixed[:, 1], fixed[:, 2].astype(bool)
    opening = np.where(
        first, 0, system + tools + np.where(same_start, np.roll(history, 1) + repeated, 0)
    )
    n_steps = stack.n_steps[g]
    call = np.repeat(np.arange(len(rows)), n_steps)
    step = np.arange(len(call)) - (np.cumsum(n_steps) - n_steps)[call]
    steps = stack.steps[stack.step_start[g][call] + step]
    total = (system + tools + history + stack.current[g])[call] + steps
    prefix = np.where(step == 0, opening[call], np.roll(total, 1))
    if block:
        prefix -= prefix % block
    source = rows[call]
    columns: dict[str, Any] = {
        "session_key": w["session_key"].cat.codes.to_numpy(np.int64)[source],
        "policy": w["policy"].cat.codes.to_numpy(np.int64)[source],
        "turn": w["turn"].to_numpy(np.int64)[source],
        "step": step,
        "system_tokens": system[call],
        "tools_tokens": tools[call],
        "history_tokens": history[call],
        "history_messages": w["messages_kept"].to_numpy(np.int64)[source],
        "current_tokens": stack.current[g][call],
        "steps_tokens": steps,
        "total_tokens": total,
        "prefix_tokens": prefix,
        "cache_ratio": np.divide(
            prefix, total, out=np.zeros(len(total)), where=total != 0, dtype=np.float64
        ),
        "inferred": (inferred | stack.inferred[g])[call],
    }
    for name in _SETTING_COLUMNS:
        values = w[name]
        if isinstance(values.dtype, pd.CategoricalDtype):
            columns[name] = _present(values.array, source)
        elif isinstance(values.dtype, pd.api.extensions.ExtensionDtype):
            columns[name] = values.array[source]
        else:
            columns[name] = values.to_numpy()[source]
    categories = {name: w[name].cat.categories for name in ("session_key", "policy")}
    return frame(REQUESTS, columns, categories=categories)
