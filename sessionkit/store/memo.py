"""The one in-memory memo of what is derived from sessions (replays, calls, turns), and its one
:func:`clear`.

Each session's slot is valid for one :func:`version` of it: the file version it was indexed
at while its messages are still those indexed (nothing is parsed to check that), else the
digest of what it holds now (:func:`~sessionkit.store.versions.content_digest`).  Any edit,
through a ``Session`` method or in place, gives another version, so nothing derived before it
is handed out again.  Slots of file versions can be shared by every load of that file version
(``shared=True``); others live as long as their session.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from sessionkit.nanobot.session import Session
from sessionkit.store.index import IndexedSession
from sessionkit.store.versions import content_digest

__all__ = ["KEPT_VERSIONS", "clear", "on_clear", "size", "slot", "version"]

KEPT_VERSIONS = 50_000
"""How many file versions' shared slots are kept (the least recently used dropped first)."""


def version(session: Session) -> tuple[Hashable, ...] | None:
    """What the session's derived results depend on now: ``("file", identity, release,
    offset, key)`` for an indexed session whose messages are still those indexed, else
    ``("content", digest)``; None when the session cannot be digested (never memoised)."""
    if isinstance(session, IndexedSession) and session.pristine:
        return ("file", session.identity, session.policy, session.last_consolidated, session.key)
    digest = content_digest(session)
    return None if digest is None else ("content", digest)


@dataclass
class _Slot:
    ref: weakref.ref
    version: tuple[Hashable, ...]
    spaces: dict[str, dict[Any, Any]] = field(default_factory=dict)


_SLOTS: dict[int, _Slot] = {}
_SHARED: OrderedDict[tuple[str, tuple[Hashable, ...]], dict[Any, Any]] = OrderedDict()
_CLEARERS: list[Callable[[], None]] = []


def slot(session: Session, space: str, *, shared: bool = False) -> dict[Any, Any]:
    """The dict where ``space`` (a module's name for what it keeps) keeps what it derives from
    ``session`` as it is now: an empty one after any change, a throwaway one for a session
    that cannot be digested.  ``shared``: one dict for every session of the same indexed
    file version."""
    current = version(session)
    if current is None:
        return {}
    if shared and current[0] == "file":
        key = (space, current)
        found = _SHARED.get(key)
        if found is None:
            found = _SHARED[key] = {}
            while len(_SHARED) > KEPT_VERSIONS:
                _SHARED.popitem(last=False)
        else:
            _SHARED.move_to_end(key)
        return found
    ident = id(session)
    kept = _SLOTS.get(ident)
    if kept is None or kept.ref() is not session:

        def forget(_: weakref.ref, ident: int = ident) -> None:
            _SLOTS.pop(ident, None)

        kept = _SLOTS[ident] = _Slot(weakref.ref(session, forget), current)
    elif kept.version != current:
        kept.version, kept.spaces = current, {}
    return kept.spaces.setdefault(space, {})


def size(space: str) -> int:
    """How many values ``space`` keeps over every session (for tests and reports)."""
    own = sum(len(s.spaces.get(space, ())) for s in _SLOTS.values())
    return own + sum(len(values) for (name, _), values in _SHARED.items() if name == space)


def on_clear(forget: Callable[[], None]) -> None:
    """Have :func:`clear` also call ``forget`` (a module's memo of values derived from slots)."""
    _CLEARERS.append(forget)


def clear() -> None:
    """Forget everything derived in this process (what is on disk is keyed by content and
    stays valid)."""
    _SLOTS.clear()
    _SHARED.clear()
    for forget in _CLEARERS:
        forget()
