"""The public API's one signature convention, in code: grids, the session key, old spellings.

Every public function taking history settings is called
``f(source, key=None, *, policy=None, settings=None, <one value per setting>, grid=None, ...)``:
``source`` a Corpus, a Session or sessions; ``key`` a session of it (None: every session, or
the only one); ``policy`` a release; ``settings`` a :class:`~sessionkit.HistorySettings`
(None: every field the release's default); each setting keyword one value overriding
``settings`` (None: keep it); ``grid`` a mapping from those names (``policy``,
``context_window`` and ``max_output`` included) to lists of values swept, ``None`` in a list
again the release's default.  A list given to a single-value keyword still sweeps it, with a
``DeprecationWarning`` naming ``grid=``; so do the old spellings :func:`entry_point` keeps.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ParamSpec, TypeVar

from sessionkit.nanobot.settings import is_many
from sessionkit.store.versions import pinned

__all__ = ["SETTING_NAMES", "SWEEPABLE", "as_keywords", "entry_point", "is_many", "swept"]

P = ParamSpec("P")
T = TypeVar("T")

SETTING_NAMES = (
    "max_messages",
    "max_tokens",
    "include_timestamps",
    "include_runtime_context",
    "extend_to_user",
    "last_consolidated",
    "file_cap",
)
"""The history settings, as keywords (:class:`~sessionkit.HistorySettings`' fields)."""

SWEEPABLE = ("policy", *SETTING_NAMES, "context_window", "max_output")
"""What a ``grid=`` may sweep (each function takes the subset it documents)."""


def entry_point(**old_to_new: str) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Wrap a public function of the convention: each session's digest is taken once for the
    whole call (:func:`~sessionkit.store.versions.pinned`), and old keyword spellings keep
    working for one release, passed on under their new names with a ``DeprecationWarning``
    naming them (both at once is a ``TypeError``)."""

    def decorate(function: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            for old, new in old_to_new.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise TypeError(
                        f"{function.__name__}() got {old}= and {new}=; pass {new}= only"
                    )
                warnings.warn(
                    f"{function.__name__}({old}=...) is deprecated; pass {new}=... (the same "
                    "value); the old spelling goes in the next release",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[new] = kwargs.pop(old)
            with pinned():
                return function(*args, **kwargs)

        return wrapper

    return decorate


def swept(
    function: str,
    grid: Mapping[str, Any] | None,
    accepted: Iterable[str],
    *,
    stacklevel: int = 4,
    **given: Any,
) -> dict[str, Any]:
    """Each name of ``accepted`` as the call gives it: its ``grid`` list, else its keyword's
    value (a list there is deprecated, moved to the grid with a warning), else None.

    Raises ``TypeError`` for a grid that is no mapping or names what ``function`` does not
    sweep, and ``ValueError`` for a name both in the grid and given as a keyword, or a grid
    value that is not a non-empty list.  ``stacklevel`` points the warning at the caller of
    the public function (4: called from a function wrapped by :func:`entry_point`).
    """
    names = list(accepted)
    found = {name: given.get(name) for name in names}
    if grid is None:
        grid = {}
    if not isinstance(grid, Mapping):
        raise TypeError(
            f"{function}(grid=...) takes a mapping such as {{'max_tokens': [0, 8000]}}, "
            f"not {type(grid).__name__}"
        )
    unknown = [name for name in grid if name not in names]
    if unknown:
        raise TypeError(
            f"{function}(grid=...) cannot sweep {', '.join(map(repr, unknown))}; it sweeps "
            f"{', '.join(names)}"
        )
    for name, values in grid.items():
        if given.get(name) is not None:
            raise ValueError(f"{function}() got {name} both as a keyword and in grid=; pass one")
        if not is_many(values) or not list(values):
            raise ValueError(
                f"{function}(grid={{{name!r}: ...}}) takes a non-empty list of values, "
                f"not {values!r}"
            )
        found[name] = list(values)
    for name in names:
        value = given.get(name)
        if value is not None and is_many(value):
            warnings.warn(
                f"{function}({name}=[...]) is deprecated; sweep with grid={{{name!r}: [...]}} "
                "(a keyword takes one value)",
                DeprecationWarning,
                stacklevel=stacklevel,
            )
            found[name] = list(value)
    return found


def as_keywords(given: Mapping[str, Any]) -> dict[str, Any]:
    """What :func:`swept` found, as keywords for another function of the convention: single
    values as themselves, lists under ``grid``."""
    keywords: dict[str, Any] = {k: v for k, v in given.items() if not isinstance(v, list)}
    keywords["grid"] = {k: v for k, v in given.items() if isinstance(v, list)} or None
    return keywords
