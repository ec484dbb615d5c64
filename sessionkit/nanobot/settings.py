"""The history settings nanobot's agent loop uses, as one value every part of sessionkit takes.

Session, the policies, ``windows``, ``message_states``, the plots, the explorer and
``sessionkit.testing`` all take a :class:`HistorySettings`.  A field left ``None`` means "what
this release does by default"; each release object resolves it
(``get_policy(name).resolve(settings)``), so one value means the same under every function.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, TypedDict

__all__ = [
    "DEFAULT_SETTINGS",
    "HistorySettings",
    "Offset",
    "SettingsOverrides",
    "checked_limit",
    "checked_setting",
    "grid_values",
    "is_many",
]

Offset = Literal["recorded", "none"] | int
"""Which ``last_consolidated`` a replay starts from: the stored one, 0, or a given index."""


@dataclass(frozen=True)
class HistorySettings:
    """How nanobot builds the history it sends the model, and bounds the session file.

    Every field is ``None`` by default: the release in force supplies its own value.  A value
    given means that value under every release that takes the setting; a release ignores a
    setting it does not take.

    ============================  ================  ================  ================
    setting                       nanobot 0.2.2     nanobot 0.3.0     nanobot 0.3.5
    ============================  ================  ================  ================
    ``max_messages``              120               2000              0 (no limit)
    ``max_tokens``                0 (no budget)     0 (no budget)     0 (no budget)
    ``include_timestamps``        True              ignored (False)   ignored (False)
    ``include_runtime_context``   ignored (True)    True              True
    ``extend_to_user``            False             False             False
    ``file_cap``                  2000              2000              ignored (none)
    ``last_consolidated``         ``"recorded"``    ``"recorded"``    ``"recorded"``
    ============================  ================  ================  ================

    These are what ``get_history`` and ``enforce_file_cap`` take by default and what each
    agent loop passes besides the limits it derives from the model (0.2.2 passes
    ``include_timestamps=True``); pass ``context_window`` to ``windows`` for those limits.

    Parameters
    ----------
    max_messages
        The count window; ``<= 0`` means the release's ``get_history`` default (0.2.2: 120,
        0.3.0: 2000, 0.3.5: none).
    max_tokens
        The token budget counted from the newest message; 0 means no budget.  The 0.2.2 and
        0.3.0 loops pass ``context_window - max_output_tokens - 1024``.
    include_timestamps
        Prefix each replayed user message with ``[Message Time: ...]`` (0.2.2 only).
    extend_to_user
        Reach back to a user message when the count window holds none (subagents).
    include_runtime_context
        Keep a user turn's ``_runtime_context`` suffix in the replay (0.3.x releases only).
    file_cap
        ``enforce_file_cap``'s limit applied after each turn; 0 disables it (0.2.2, 0.3.0).
    last_consolidated
        ``"recorded"`` (the stored offset where it lies within the messages replayed, else 0),
        ``"none"`` (0), or an index used the same way.
    """

    max_messages: int | None = None
    max_tokens: int | None = None
    include_timestamps: bool | None = None
    extend_to_user: bool | None = None
    include_runtime_context: bool | None = None
    file_cap: int | None = None
    last_consolidated: Offset | None = None

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if value is not None:
                object.__setattr__(self, field.name, checked_setting(field.name, value))

    def replace(self, **changes: Any) -> HistorySettings:
        """A copy with some fields changed (``None`` values leave a field as it is)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


class SettingsOverrides(TypedDict, total=False):
    """Keyword overrides of a :class:`HistorySettings` (``None``: keep the setting), as every
    function taking ``settings=`` also takes them."""

    max_messages: int | None
    max_tokens: int | None
    include_timestamps: bool | None
    extend_to_user: bool | None
    include_runtime_context: bool | None
    file_cap: int | None
    last_consolidated: Offset | None


_ACCEPTED = {
    "max_messages": "an int (<= 0: the release's default count window)",
    "max_tokens": "an int >= 0 (0: no budget)",
    "file_cap": "an int >= 0 (0: no cap)",
    "include_timestamps": "True or False",
    "extend_to_user": "True or False",
    "include_runtime_context": "True or False",
    "last_consolidated": "'recorded', 'none' or an int",
}


def _int(name: str, value: Any, accepted: str) -> int:
    if isinstance(value, bool | str):
        raise TypeError(f"{name} must be {accepted}, not {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be {accepted}, not {value!r}") from None


def checked_setting(name: str, value: Any) -> Any:
    """``value`` for history setting ``name``, checked (a numpy int or bool taken as the
    Python one); raises ``TypeError``/``ValueError`` naming the setting and what it takes."""
    accepted = _ACCEPTED.get(name)
    if accepted is None:
        raise TypeError(f"{name!r} is no history setting; the settings are {', '.join(_ACCEPTED)}")
    if accepted == "True or False":
        if type(value).__name__ in ("bool", "bool_"):
            return bool(value)
        raise TypeError(f"{name} must be {accepted}, not {value!r}")
    if name == "last_consolidated":
        if isinstance(value, str) and value in ("recorded", "none"):
            return value
        if isinstance(value, str):
            raise ValueError(f"{name} must be {accepted}, not {value!r}")
        return _int(name, value, accepted)
    number = _int(name, value, accepted)
    if name != "max_messages" and number < 0:
        raise ValueError(f"{name} must be {accepted}, not {number}")
    return number


def checked_limit(name: str, value: Any) -> int:
    """A model limit (``context_window``, ``max_output``): an int >= 0, else an error naming it."""
    number = _int(name, value, "an int >= 0")
    if number < 0:
        raise ValueError(f"{name} must be an int >= 0, not {number}")
    return number


def is_many(value: Any) -> bool:
    """Whether ``value`` is several values (a list, tuple, range or array), not one."""
    return not isinstance(value, str | bytes | dict) and hasattr(value, "__iter__")


def grid_values(name: str, value: Any) -> list[Any] | None:
    """The values a keyword sweeps: None when not given, else a value or a list (tuple,
    range, array) of values, each checked, and ``None`` inside a list kept (the release's
    default, resolved by the caller)."""
    if value is None:
        return None
    values = list(value) if is_many(value) else [value]
    if not values:
        raise ValueError(f"{name}= takes a value or a non-empty list of values, not {value!r}")
    check = checked_limit if name in ("context_window", "max_output") else checked_setting
    return [None if v is None else check(name, v) for v in values]


DEFAULT_SETTINGS = HistorySettings()
"""Every setting as the release in force has it."""
