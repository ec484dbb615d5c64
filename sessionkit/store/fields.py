"""Fields and flags of many message dicts at once, read in C where they can be: what the
column builders and replays share."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import compress, repeat
from operator import eq, is_not
from typing import Any, cast

import numpy as np

from sessionkit.nanobot.history import HIDING_KEYS, is_hidden_history
from sessionkit.nanobot.policies import ReplayPolicy

__all__ = ["STR_OR_NONE", "hidden_flags", "message_field", "truthy_flags", "user_turn_flags"]

STR_OR_NONE = frozenset({str, type(None)})
"""The value types of a plain text field; ``STR_OR_NONE.issuperset(map(type, values))`` tells
whether a whole column needs no per-value step."""


def message_field(messages: Sequence[Mapping[str, Any]], name: str) -> list[Any]:
    """``name`` of every message (None where absent), read by a C-level ``map`` over dicts."""
    # typeshed's overloaded ``dict.get`` does not take a Mapping; a mapping that is not a dict
    # raises the TypeError handled below
    get = cast("Callable[[Mapping[str, Any], str], Any]", dict.get)
    try:
        return list(map(get, messages, repeat(name)))
    except TypeError:  # a mapping that is not a dict
        return [m.get(name) for m in messages]


def hidden_flags(msgs: list[dict[str, Any]]) -> np.ndarray:
    """:func:`is_hidden_history` of every message, called only on those holding one of
    the fields it reads (:data:`~sessionkit.nanobot.history.HIDING_KEYS`; C-level maps find
    them)."""
    hidden = np.zeros(len(msgs), dtype=bool)
    marked: set[int] = set()
    for key in HIDING_KEYS:
        marked.update(
            compress(range(len(msgs)), map(is_not, message_field(msgs, key), repeat(None)))
        )
    for row in marked:
        hidden[row] = is_hidden_history(msgs[row])
    return hidden


def user_turn_flags(
    msgs: list[dict[str, Any]], roles: list[Any], hidden: np.ndarray, policy: ReplayPolicy
) -> np.ndarray:
    """``policy.is_user_turn`` of every message: from the roles and ``hidden`` when the
    policy keeps the shared rule (a user message, hidden ones counted only where
    ``hidden_turns``), else asked message by message."""
    if type(policy).is_user_turn is not ReplayPolicy.is_user_turn:
        return np.fromiter(map(policy.is_user_turn, msgs), dtype=bool, count=len(msgs))
    users = np.fromiter(map(eq, roles, repeat("user")), dtype=bool, count=len(roles))
    return users if policy.hidden_turns else users & ~hidden


def truthy_flags(values: list[Any]) -> np.ndarray:
    """``bool`` of every value (a flag field read with :func:`message_field`)."""
    return np.fromiter(map(bool, values), dtype=bool, count=len(values))
