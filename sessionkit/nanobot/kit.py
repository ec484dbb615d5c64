"""What a release sends besides the history (its kit): system prompt parts, the current
message's wrapper and the tool definitions, as the installed release rendered them.

The text is nanobot's, asked from the release at run time (:mod:`sessionkit.calls.kits`);
sessionkit only fills the per-request values the release left as sentinels.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SENTINEL", "Kit"]

SENTINEL = "\u0000SK:{}\u0000"
"""How a probe marks a per-request value in a template (``SENTINEL.format("text")``)."""
_SENTINELS = re.compile("\u0000SK:(\\w+)\u0000")


@dataclass(frozen=True)
class Kit:
    """What a release sends besides the history, for one workspace and channel."""

    release: str
    system: tuple[tuple[str, str, bool], ...]
    """(part, text, inferred) in the release's order."""
    joiner: str
    system_text: str
    summary: str | None
    current: Mapping[str, Any]
    sentinels: tuple[str, ...]
    tools: tuple[Mapping[str, Any], ...]
    runtime: Mapping[str, Any] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)
    """The probe's whole answer (release-specific texts and settings the rules read)."""
    inputs_changed_at: float = 0.0
    """Newest modification time of the workspace files the prompt reads (to tell a request
    rebuilt "as of now" from one rebuilt as it was)."""

    def fill(self, template: str, **values: str) -> str:
        """``template`` with each sentinel replaced by its value, in one pass (a value that
        itself looks like a sentinel stays as it is)."""
        return _SENTINELS.sub(lambda m: values.get(m.group(1), m.group(0)), template)
