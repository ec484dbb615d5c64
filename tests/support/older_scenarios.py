"""Run inside an older release's venv by ``release_harness``: its ``SessionManager`` loading one
session file (stdlib and nanobot only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nanobot.session.manager import SessionManager


def load(workspace: str, key: str) -> dict[str, Any] | None:
    """What ``SessionManager(workspace)._load(key)`` returns, as plain fields (None: lost)."""
    session = SessionManager(Path(workspace))._load(key)
    if session is None:
        return None
    return {
        "messages": session.messages,
        "metadata": session.metadata,
        "last_consolidated": session.last_consolidated,
        "created_at": session.created_at.isoformat(),
    }
