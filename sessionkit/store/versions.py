"""What a session holds now, as a digest: the key every in-memory memo of derived results uses.

A digest covers everything a derived result may read (key, release, offset, metadata, records
and messages, nested values included), so an edit in place (``msg["content"] += ...``) gives
another digest and nothing derived before it is reused.  Inside :func:`pinned` (every public
entry point runs in one) a session's digest is computed once: the session is taken not to change
during one call.
"""

from __future__ import annotations

import contextvars
import functools
import pickle
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

import orjson
import xxhash

__all__ = ["consistent", "content_digest", "pinned"]

P = ParamSpec("P")
T = TypeVar("T")

_PINNED: contextvars.ContextVar[dict[int, tuple[weakref.ref, bytes | None]] | None] = (
    contextvars.ContextVar("sessionkit_pinned_digests", default=None)
)
_JSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def _fields(session: Any) -> list[Any]:
    return [
        session.key,
        session.policy,
        session.last_consolidated,
        session.metadata,
        session.records,
        session.messages,
    ]


def _computed(session: Any) -> bytes | None:
    """The digest of the session's fields: their JSON, or their pickle where JSON cannot hold
    them (a lone surrogate, an int past 64 bits, nesting past orjson's depth); None when
    neither can (such a session is never memoised)."""
    fields = _fields(session)
    try:
        data = b"j" + orjson.dumps(fields, option=_JSON_OPTIONS)
    except (TypeError, orjson.JSONEncodeError):
        try:
            data = b"p" + pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError, ValueError):
            return None
    return xxhash.xxh3_128_digest(data)


def content_digest(session: Any) -> bytes | None:
    """A 16-byte digest of what ``session`` holds now (None: it holds values that cannot be
    digested, so nothing derived from it may be kept); once per session inside :func:`pinned`."""
    kept = _PINNED.get()
    if kept is None:
        return _computed(session)
    found = kept.get(id(session))
    if found is not None and found[0]() is session:
        return found[1]
    digest = _computed(session)
    kept[id(session)] = (weakref.ref(session), digest)
    return digest


@contextmanager
def pinned() -> Iterator[None]:
    """Within this block each session's digest is computed once (an outer block's are kept)."""
    if _PINNED.get() is not None:
        yield
        return
    token = _PINNED.set({})
    try:
        yield
    finally:
        _PINNED.reset(token)


def consistent(function: Callable[P, T]) -> Callable[P, T]:
    """Run ``function`` inside :func:`pinned`: one public call digests each session once."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        with pinned():
            return function(*args, **kwargs)

    return wrapper
