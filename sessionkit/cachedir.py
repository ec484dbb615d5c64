"""Where sessionkit keeps what it persists between processes (the index, token counts)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["default_cache_dir"]


def default_cache_dir() -> Path:
    """``$SESSIONKIT_CACHE_DIR``, else the user cache folder (``$XDG_CACHE_HOME`` or
    ``~/.cache`` on Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows) plus
    ``sessionkit``."""
    chosen = os.environ.get("SESSIONKIT_CACHE_DIR")
    if chosen:
        return Path(chosen).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "sessionkit"
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(local) / "sessionkit" / "Cache"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sessionkit"
