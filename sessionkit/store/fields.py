"""One field of many message dicts at once, read in C: what the column builders share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any

__all__ = ["STR_OR_NONE", "message_field"]

STR_OR_NONE = frozenset({str, type(None)})
"""The value types of a plain text field; ``STR_OR_NONE.issuperset(map(type, values))`` tells
whether a whole column needs no per-value step."""


def message_field(messages: Sequence[Mapping[str, Any]], name: str) -> list[Any]:
    """``name`` of every message (None where absent), read by a C-level ``map`` over dicts."""
    try:
        return list(map(dict.get, messages, repeat(name)))
    except TypeError:  # a mapping that is not a dict
        return [m.get(name) for m in messages]
