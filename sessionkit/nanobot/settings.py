"""The history settings nanobot's agent loop uses, as one value every part of sessionkit takes.

Session, the policies, ``windows``, ``message_states``, the plots, the explorer and
``sessionkit.testing`` all take a :class:`HistorySettings`; these defaults are the one place
where "what nanobot does" is written down.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

__all__ = ["DEFAULT_SETTINGS", "HistorySettings", "Offset"]

Offset = Literal["recorded", "none"] | int
"""Which ``last_consolidated`` a replay starts from: the stored one, 0, or a given index."""


@dataclass(frozen=True)
class HistorySettings:
    """How nanobot builds the history it sends the model, and bounds the session file.

    The defaults are what nanobot-ai 0.2.2's agent loop passes at every turn:
    ``get_history(max_messages=120, max_tokens=..., include_timestamps=True,
    extend_to_user=False)``, then ``enforce_file_cap(limit=2000)`` after the turn.

    Parameters
    ----------
    max_messages
        The count window; ``<= 0`` means the policy's default (120 in 0.2.2).
    max_tokens
        The token budget counted from the newest message; 0 means no budget.  nanobot's loop
        passes ``context_window - max_output_tokens - 1024``.
    include_timestamps
        Prefix each replayed user message with ``[Message Time: ...]`` (the loop does).
    extend_to_user
        Reach back to a user message when the count window holds none (subagents).
    include_runtime_context
        Keep a user turn's ``_runtime_context`` suffix in the replay (0.3.x releases only).
    file_cap
        ``enforce_file_cap``'s limit applied after each turn; 0 disables it.
    last_consolidated
        ``"recorded"`` (the stored offset where it lies within the messages replayed, else 0),
        ``"none"`` (0), or an index used the same way.
    """

    max_messages: int = 120
    max_tokens: int = 0
    include_timestamps: bool = True
    extend_to_user: bool = False
    include_runtime_context: bool = True
    file_cap: int = 2000
    last_consolidated: Offset = "recorded"

    def replace(self, **changes: Any) -> HistorySettings:
        """A copy with some fields changed (``None`` values leave a field as it is)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


DEFAULT_SETTINGS = HistorySettings()
