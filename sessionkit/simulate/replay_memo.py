"""Replays and what is derived from them, kept in this process's memory.

Each session's replays are kept in its :mod:`sessionkit.store.memo` slot by
:data:`~sessionkit.simulate.replay_compute.ReplayKey`, for the session as it is now (any edit
makes them computed again); values derived from lists of replays are kept for the latest few
lists (:func:`derived`) and, for what is also kept in the index, by its name there.
:func:`sessionkit.store.memo.clear` forgets them all.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, TypeVar

from sessionkit.nanobot.session import Session
from sessionkit.simulate.replay_compute import Replay, ReplayKey
from sessionkit.store import memo

__all__ = ["cached", "derived", "keep_prepared", "kept_prepared", "remember"]

T = TypeVar("T")

_DERIVED_KEPT = 6
_SPACE = "replays"
"""This module's space in :mod:`sessionkit.store.memo` (replays by key; the stored counts of
:func:`~sessionkit.simulate.replay.stored_tokens` by release are in ``"stored counts"``)."""


def _replays(session: Session) -> dict[Any, Any]:
    return memo.slot(session, _SPACE)


def cached(session: Session, key: ReplayKey) -> Replay | None:
    """The session's replay kept under ``key`` for the session as it is now (None: none)."""
    return _replays(session).get(key)


def remember(session: Session, key: ReplayKey, replay: Replay) -> None:
    """Keep the session's replay under ``key`` until the session changes or the memo is cleared."""
    _replays(session)[key] = replay


# The latest values derived from lists of replays, with those lists (see `derived`).
_DERIVED: list[tuple[list[Replay], Any]] = []


def derived(replays: list[Replay], build: Callable[[list[Replay]], T]) -> T:
    """``build(replays)``, reused while asked again for the same replays (the latest few
    lists, so comparing releases does not rebuild each one's)."""
    for before, value in _DERIVED:
        if len(before) == len(replays) and all(map(operator.is_, before, replays)):
            return value
    value = build(replays)
    _DERIVED[:] = [(replays, value), *_DERIVED[: _DERIVED_KEPT - 1]]
    return value


_PREPARED: dict[tuple[str, str], Any] = {}
"""What :func:`~sessionkit.simulate.replay.prepared` derived for indexed sessions, by its name
and stamp in the index (the latest few)."""


def kept_prepared(name: tuple[str, str]) -> Any | None:
    """What ``prepared`` derived and this process keeps by ``name`` (its name and stamp in
    the index), so it is read from the index once; None when nothing is kept."""
    return _PREPARED.get(name)


def keep_prepared(name: tuple[str, str], value: T) -> T:
    """Keep ``value`` by ``name`` (see :func:`kept_prepared`), dropping the oldest beyond
    the latest few; returns it."""
    _PREPARED[name] = value
    while len(_PREPARED) > _DERIVED_KEPT:
        del _PREPARED[next(iter(_PREPARED))]
    return value


def _forget() -> None:
    _DERIVED.clear()
    _PREPARED.clear()


memo.on_clear(_forget)
