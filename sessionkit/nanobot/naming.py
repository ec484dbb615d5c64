"""Session keys and file names: nanobot's schemes, their inverses, and hostile-key checks."""

from __future__ import annotations

import base64
import os
import re
import unicodedata
from pathlib import Path
from typing import Literal

from sessionkit.nanobot.workspace import WORKSPACE_ID_FILE, sessions_dir_035, sessions_root_035

__all__ = [
    "SessionPathError",
    "UnsafeKeyError",
    "check_key",
    "check_name_length",
    "check_plain_name",
    "key_from_filename",
    "safe_key",
    "session_filename",
    "session_path",
    "sessions_folder",
    "storage_key",
    "storage_key_of",
]

Naming = Literal["nanobot-0.2", "nanobot-0.3"]
_UNSAFE = re.compile(r'[<>:"/\\|?*]')
_SEPARATORS = ("/", "\\")
_DEFAULT_NAME_MAX = 255
_WINDOWS_DEVICE = re.compile(
    r"(con|prn|aux|nul|conin\$|conout\$|com[1-9\u00b9\u00b2\u00b3]|lpt[1-9\u00b9\u00b2\u00b3])"
    r"[ .]*(\..*)?",
    re.IGNORECASE | re.DOTALL,
)
"""A reserved Windows device name, with any extension (``nul.txt.jsonl`` is the device NUL)."""
_NOT_PORTABLE = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')


class UnsafeKeyError(ValueError):
    """A session key that cannot become a file inside the sessions folder."""


def safe_key(key: str) -> str:
    """nanobot 0.2's file stem for a key: ``:`` and ``<>:"/\\|?*`` become ``_``, then strip."""
    return _UNSAFE.sub("_", key.replace(":", "_")).strip()


def storage_key(key: str) -> str:
    """nanobot 0.3's file stem for a key: base64url of its UTF-8 bytes, without padding."""
    return base64.urlsafe_b64encode(key.encode("utf-8")).decode("ascii").rstrip("=")


def check_key(key: object) -> str:
    """``key`` if it can name a session file; refuses path-like and malformed keys.

    Raises
    ------
    UnsafeKeyError
        For a non-string key, a NUL byte or other control character, text that is not valid
        Unicode (a lone surrogate), a path separator (``/`` or ``\\``), or a ``..`` component.
    """
    if not isinstance(key, str):
        raise UnsafeKeyError(f"session key must be a string, got {type(key).__name__}")
    if "\x00" in key:
        raise UnsafeKeyError(f"session key {key!r} contains a NUL byte")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise UnsafeKeyError(f"session key {key!r} is not valid Unicode (lone surrogate)") from None
    if any(sep in key for sep in _SEPARATORS):
        raise UnsafeKeyError(f"session key {key!r} is path-like: it contains a path separator")
    if key.strip() == "..":
        raise UnsafeKeyError(f"session key {key!r} is path-like: it is a '..' component")
    if any(unicodedata.category(c) == "Cc" for c in key.strip()):
        raise UnsafeKeyError(f"session key {key!r} contains a control character")
    return key


def session_filename(key: str, naming: Naming = "nanobot-0.2") -> str:
    """The file name nanobot gives a key, refusing keys that cannot name a safe file.

    Raises
    ------
    UnsafeKeyError
        For a key :func:`check_key` refuses, or a stem that is empty or starts with ``.``
        (a hidden file, including ``.`` and ``..``).
    """
    check_key(key)
    if naming == "nanobot-0.2":
        stem = safe_key(key)
    elif naming == "nanobot-0.3":
        stem = storage_key(key)
    else:
        raise ValueError(f"unknown naming {naming!r}; use 'nanobot-0.2' or 'nanobot-0.3'")
    if not stem or stem.startswith("."):
        raise UnsafeKeyError(
            f"session key {key!r} does not map to a safe file name ({stem!r}: "
            f"{'empty' if not stem else 'hidden'})"
        )
    name = f"{stem}.jsonl"
    check_plain_name(key, name)
    return name


def check_plain_name(key: str, name: str) -> str:
    """``name`` if it is a plain file name on every OS; refuses a reserved Windows device name
    (``CON``, ``PRN``, ``AUX``, ``NUL``, ``COM1``-``COM9``, ``LPT1``-``LPT9``, with any
    extension, any case) and characters some OS does not take in a name.

    Raises
    ------
    UnsafeKeyError
        Naming ``key`` and what is wrong with ``name``.
    """
    if _WINDOWS_DEVICE.fullmatch(name):
        raise UnsafeKeyError(
            f"session key {key!r} maps to {name!r}, a reserved device name on Windows"
        )
    if _NOT_PORTABLE.search(name) or name.rstrip(" .") != name or name in {".", ".."}:
        raise UnsafeKeyError(f"session key {key!r} maps to {name!r}, not a plain file name")
    return name


def _name_max(folder: Path) -> int:
    """The longest file name, in bytes, the nearest existing folder at or above ``folder`` takes."""
    for candidate in (folder, *folder.parents):
        try:
            return os.pathconf(candidate, "PC_NAME_MAX")
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            break
    return _DEFAULT_NAME_MAX


def check_name_length(key: str, name: str, folder: Path) -> None:
    """Refuse ``key`` when its file ``name`` is longer than ``folder``'s file system allows."""
    limit = _name_max(folder)
    size = len(name.encode("utf-8"))
    if size > limit:
        raise UnsafeKeyError(
            f"session key {key!r} is too long: its file name is {size} bytes and {folder} "
            f"takes at most {limit}"
        )


def storage_key_of(stem: str) -> str | None:
    """The key nanobot 0.3's file stem ``stem`` names, or None when it names none.

    As 0.3.0 and 0.3.5 decode it: base64url, padding restored, UTF-8, any text (no ``:``
    needed: ``aGVhcnRiZWF0`` is ``heartbeat``), taken only when ``stem`` is that key's own
    :func:`storage_key` (0.3.5's ``session_key_from_path``; 0.3.0 lists such a file under the
    same key, and any other name is a 0.2 name it migrates when that key is asked for).
    """
    try:
        key = base64.urlsafe_b64decode(stem + "=" * (-len(stem) % 4)).decode("utf-8")
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        return None
    return key if key and storage_key(key) == stem else None


def key_from_filename(path: str | Path) -> str:
    """Best key for a file whose metadata names none.

    A stem that is a 0.3 storage key is read as the key it encodes (:func:`storage_key_of`);
    anything else is a 0.2 safe key, whose first ``_`` was the channel separator (nanobot's
    own fallback in ``list_sessions``).
    """
    stem = Path(path).stem
    decoded = storage_key_of(stem)
    if decoded is not None:
        return decoded
    return stem.replace("_", ":", 1)


class SessionPathError(FileNotFoundError):
    """A path that does not exist or holds no session files."""


def sessions_folder(sessions_dir: str | Path, config_dir: str | Path | None = None) -> Path:
    """The folder a workspace's session files live in, by the rule of the release that made it.

    A 0.3.5 workspace (it holds ``.nanobot/workspace-id``) keeps them outside itself, in
    ``<config_dir>/sessions/<workspace id>/`` (``config_dir``: the folder of the config file
    nanobot runs with, ``~/.nanobot`` by default); a workspace with a ``sessions/`` subfolder
    (0.2, 0.3.0, or a 0.3.5 workspace not yet migrated) keeps them there; any other folder is
    itself the sessions folder.  ``config_dir`` may also name the config file itself.  Only
    reads; ``~`` is expanded.

    Raises
    ------
    SessionPathError
        For a 0.3.5 workspace whose sessions folder is not under ``config_dir``.
    """
    folder = Path(sessions_dir).expanduser()
    if config_dir is not None and not os.path.lexists(Path(config_dir).expanduser()):
        raise SessionPathError(
            f"config_dir {str(config_dir)!r} does not exist; pass the config file nanobot runs "
            "with or its folder (command line: --config-dir)"
        )
    if (folder / WORKSPACE_ID_FILE).exists():
        found = sessions_dir_035(folder, config_dir)
        if found is not None:
            return found
        if not (folder / "sessions").is_dir():
            raise SessionPathError(
                f"{folder} is a nanobot 0.3.5 workspace (workspace id in {WORKSPACE_ID_FILE}), "
                f"but {sessions_root_035(config_dir)} holds no folder for it; pass config_dir= "
                "(command line: --config-dir), the config file nanobot runs with or its folder, "
                "or start nanobot 0.3.5 once on this workspace to make that folder"
            )
    return folder / "sessions" if (folder / "sessions").is_dir() else folder


def session_path(
    key: str,
    sessions_dir: str | Path,
    naming: Naming = "nanobot-0.2",
    config_dir: str | Path | None = None,
) -> Path:
    """Where ``key``'s file goes under ``sessions_dir``, refusing keys that would leave it.

    ``sessions_dir`` is a sessions folder or a workspace, found as :func:`sessions_folder`
    finds it (a 0.3.5 workspace's through ``config_dir``).

    Raises
    ------
    UnsafeKeyError
        For a key :func:`session_filename` refuses, one whose file name is longer than the
        folder's file system allows, or one that would not name a file directly inside it.
    """
    folder = sessions_folder(sessions_dir, config_dir)
    name = session_filename(key, naming)
    path = folder / name
    if path.parent != folder:
        raise UnsafeKeyError(f"session key {key!r} would be written outside {folder}")
    check_name_length(key, name, folder)
    return path
