"""Messages whose tokens nanobot cannot count, and what nanobot 0.2.2 does with them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import orjson

from sessionkit.nanobot.tokens import message_payload

__all__ = ["counts_or_missing", "uncountable_reason"]

_T = TypeVar("_T")
_CONSEQUENCE = (
    "nanobot 0.2.2's estimate_message_tokens raises {error} on it, so every get_history with "
    "a token budget and every token consolidation over it fails; its token count is missing"
)


def uncountable_reason(message: dict[str, Any]) -> str | None:
    """Why nanobot cannot build ``message``'s token payload, or None when it can.

    Only non-string content or deeply nested tool calls can fail, so a common message
    costs two lookups and, with tool calls, one orjson encoding (refused past 255 levels).
    """
    content, calls = message.get("content"), message.get("tool_calls")
    if (content is None or type(content) is str) and (not calls or _shallow(calls)):
        return None
    try:
        message_payload(message)
    except TypeError as exc:
        return _CONSEQUENCE.format(error=f"TypeError ({exc})")
    except RecursionError:
        return _CONSEQUENCE.format(error="RecursionError (nested too deeply)")
    return None


def _shallow(value: Any) -> bool:
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    return True


def counts_or_missing(
    messages: Sequence[dict[str, Any]], count: Callable[[list[dict[str, Any]]], list[_T]]
) -> list[_T | None]:
    """``count(messages)``, with None for each message nanobot cannot count.

    The batch is counted whole; only when it fails are the uncountable messages found and
    the rest counted again.
    """
    try:
        return list(count(list(messages)))
    except (TypeError, RecursionError):
        failed = {i for i, m in enumerate(messages) if uncountable_reason(m)}
        if not failed:
            raise
    counted = iter(count([m for i, m in enumerate(messages) if i not in failed]))
    return [None if i in failed else next(counted) for i in range(len(messages))]
