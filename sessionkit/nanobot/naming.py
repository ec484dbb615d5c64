"""Session keys and file names: nanobot's schemes, their inverses, and hostile-key checks."""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path
from typing import Literal

__all__ = [
    "UnsafeKeyError",
    "key_from_filename",
    "safe_key",
    "session_filename",
    "session_path",
    "sessions_folder",
    "storage_key",
]

Naming = Literal["nanobot-0.2", "nanobot-0.3"]
_UNSAFE = re.compile(r'[<>:"/\\|?*]')


class UnsafeKeyError(ValueError):
    """A session key that cannot become a file inside the sessions folder."""


def safe_key(key: str) -> str:
    """nanobot 0.2's file stem for a key: ``:`` and ``<>:"/\\|?*`` become ``_``, then strip."""
    return _UNSAFE.sub("_", key.replace(":", "_")).strip()


def storage_key(key: str) -> str:
    """nanobot 0.3's file stem for a key: base64url of its UTF-8 bytes, without padding."""
    return base64.urlsafe_b64encode(key.encode("utf-8")).decode("ascii").rstrip("=")


def session_filename(key: str, naming: Naming = "nanobot-0.2") -> str:
    """The file name nanobot gives a key, refusing keys that cannot name a safe file.

    Raises
    ------
    UnsafeKeyError
        For a non-string or empty key, a NUL byte, or a stem that is empty, ``.``/``..``,
        or would still contain a path separator.
    """
    if not isinstance(key, str):
        raise UnsafeKeyError(f"session key must be a string, got {type(key).__name__}")
    if "\x00" in key:
        raise UnsafeKeyError(f"session key {key!r} contains a NUL byte")
    if naming == "nanobot-0.2":
        stem = safe_key(key)
    elif naming == "nanobot-0.3":
        stem = storage_key(key)
    else:
        raise ValueError(f"unknown naming {naming!r}; use 'nanobot-0.2' or 'nanobot-0.3'")
    if not stem or stem in {".", ".."} or "/" in stem or "\\" in stem:
        raise UnsafeKeyError(f"session key {key!r} does not map to a safe file name ({stem!r})")
    return f"{stem}.jsonl"


def _decode_storage_stem(stem: str) -> str | None:
    if not stem or not re.fullmatch(r"[A-Za-z0-9_-]+", stem) or len(stem) % 4 == 1:
        return None
    try:
        raw = base64.urlsafe_b64decode(stem + "=" * (-len(stem) % 4))
        key = raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if ":" not in key or not key.isprintable() or storage_key(key) != stem:
        return None
    return key


def key_from_filename(path: str | Path) -> str:
    """Best key for a file whose metadata names none.

    A base64url stem that decodes to a printable ``channel:chat`` key is a 0.3 storage
    key; anything else is a 0.2 safe key, whose first ``_`` was the channel separator
    (nanobot's own fallback in ``list_sessions``).
    """
    stem = Path(path).stem
    decoded = _decode_storage_stem(stem)
    if decoded is not None:
        return decoded
    return stem.replace("_", ":", 1)


def sessions_folder(sessions_dir: str | Path) -> Path:
    """The folder session files go in: ``sessions_dir``, or its ``sessions/`` subfolder.

    A folder holding a ``sessions/`` subfolder is a nanobot workspace, where nanobot 0.2 keeps
    its session files (the same rule the loader uses), so passing a workspace writes where
    nanobot will look.  ``~`` is expanded.
    """
    folder = Path(sessions_dir).expanduser()
    return folder / "sessions" if (folder / "sessions").is_dir() else folder


def session_path(key: str, sessions_dir: str | Path, naming: Naming = "nanobot-0.2") -> Path:
    """Where ``key``'s file goes under ``sessions_dir``, refusing keys that would leave it.

    Raises
    ------
    UnsafeKeyError
        When the key has a NUL byte, maps to an empty, ``.`` or ``..`` name, or otherwise
        would not name a file directly inside the folder.
    """
    folder = sessions_folder(sessions_dir)
    path = folder / session_filename(key, naming)
    if path.parent != folder:
        raise UnsafeKeyError(f"session key {key!r} would be written outside {folder}")
    return path
