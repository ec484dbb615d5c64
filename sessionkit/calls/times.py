"""When each call of :func:`sessionkit.requests` was made, for caches that expire.

Exact where a usage log ties the call to its (session, turn, step) (a :func:`sessionkit.usage`
frame); otherwise a turn's first call at its user message's stored time (stamped before the
call) and its later calls spread evenly up to the latest time the turn stored (nanobot stamps
messages when it saves them, so a turn's results may all carry its end).  Stored times are
naive local times of the process that ran nanobot (``zone``; None: this machine's).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import tzinfo

import numpy as np
import pandas as pd

from sessionkit.accounting.attribution import parsed_ms, zone_key
from sessionkit.nanobot.session import Session
from sessionkit.store import memo

__all__ = ["call_times", "logged_times", "turn_span"]

_SPACE = "message times"
"""This module's space in :mod:`sessionkit.store.memo`."""


def _message_ms(session: Session, zone: tzinfo | None) -> np.ndarray:
    """Each stored message's time as UTC epoch milliseconds (-1: none), kept per file version
    and zone."""
    key = zone_key(zone)
    try:
        kept = memo.slot(session, _SPACE, shared=True)
        found = kept.get(key)
    except TypeError:  # an unhashable zone: nothing kept
        kept, found = {}, None
    if found is None:
        stamps = [m.get("timestamp") for m in session.messages]
        found = parsed_ms(stamps, zone) if stamps else np.empty(0, dtype=np.int64)
        kept[key] = found = np.asarray(found, dtype=np.int64)
    return found


def turn_span(session: Session, at: np.ndarray, zone: tzinfo | None) -> np.ndarray:
    """Per user turn at message positions ``at`` (ascending): its user message's time and the
    latest time stored from it up to the next turn (rows of UTC epoch ms, -1: none)."""
    stamps = _message_ms(session, zone)
    out = np.full((len(at), 2), -1, dtype=np.int64)
    if len(at) and len(stamps):
        out[:, 0] = stamps[at]
        out[:, 1] = np.maximum.reduceat(stamps, at)
    return out


def call_times(span: np.ndarray, n_steps: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Each call's time (UTC epoch ms, -1: none) from its turn's ``span`` (rows of start and
    end) and its ``step`` of ``n_steps``: step ``k`` at start + k / n_steps of the turn."""
    start = span[:, 0]
    placed = span[:, 1] - start  # the turn's length (none when it ends before it starts)
    np.maximum(placed, 0, out=placed)
    placed *= step
    placed //= n_steps if n_steps.min(initial=1) >= 1 else np.maximum(n_steps, 1)
    placed += start
    unknown = start < 0
    if unknown.any():
        placed[unknown] = -1
    return placed


def logged_times(
    usage: pd.DataFrame, keys: Sequence[str], turn: np.ndarray, step: np.ndarray, key: np.ndarray
) -> np.ndarray:
    """Per call (``key`` codes into ``keys``, ``turn``, ``step``): the start of the first agent
    call ``usage`` (a :func:`sessionkit.usage` frame) ties to it, as UTC epoch ms (-1: none;
    a retry repeats its step, so the first try is the call's start)."""
    tied = usage[
        (usage["kind"] == "agent")
        & usage["session_key"].notna()
        & usage["turn"].notna()
        & usage["step"].notna()
        & usage["time"].notna()
    ]
    out = np.full(len(turn), -1, dtype=np.int64)
    if not len(tied) or not len(turn):
        return out
    codes = pd.Index(list(keys)).get_indexer(tied["session_key"].astype(str))
    ms = tied["time"].dt.tz_convert("UTC").dt.as_unit("ms").astype("int64").to_numpy()
    logged = pd.DataFrame(
        {
            "key": codes,
            "turn": tied["turn"].to_numpy(dtype=np.int64),
            "step": tied["step"].to_numpy(dtype=np.int64),
            "ms": ms,
        }
    )
    first = logged[logged["key"] >= 0].groupby(["key", "turn", "step"])["ms"].min()
    if not len(first):
        return out
    wanted = pd.MultiIndex.from_arrays([key, turn, step])
    at = first.index.get_indexer(wanted)
    values = first.to_numpy(dtype=np.int64)
    return np.where(at >= 0, values[np.maximum(at, 0)], -1)
