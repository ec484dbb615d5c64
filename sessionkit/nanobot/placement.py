"""Whether a session's release would read its file from where it lies.

Each release reads one file name per key in one folder: 0.1.4 to 0.2.2 ``<safe key>.jsonl``;
0.3.0 ``<base64url key>.jsonl``, else the 0.2 name beside it (renamed on first load); 0.3.5
only ``<base64url key>.jsonl`` in its per-workspace folder ``<config dir>/sessions/<workspace
id>/``, into which it moves a workspace's ``sessions/*.jsonl`` when it starts (names kept).
A file the release would skip, move or leave shadowed gets a reason saying what it does
instead; sessionkit still loads it.  Only names are compared and siblings looked up: nothing
is read.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sessionkit.nanobot.naming import safe_key, storage_key
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.policy_035 import NAME as NAMESPACED
from sessionkit.nanobot.workspace import WORKSPACE_ID_FILE, sessions_dir_035

__all__ = ["NOT_READ_HERE", "placement_problem"]

NOT_READ_HERE = "not read from here by "
"""How the reason of every file its release would not read where it lies starts."""
_NAMESPACE = re.compile(r"[0-9a-f]{32}")


def _stems(key: str) -> tuple[str | None, str]:
    """``key``'s base64url file stem (None: a key not encodable as UTF-8) and its safe one."""
    try:
        return storage_key(key), safe_key(key)
    except UnicodeEncodeError:
        return None, safe_key(key)


def placement_problem(
    path: Path, key: str, policy: str, config_dir: str | Path | None = None
) -> str | None:
    """Why release ``policy`` would not read session ``key`` from ``path``, saying what it
    does instead; None when it reads it there (or where that cannot be told: a legacy
    ``.json`` file, a copy lying outside any sessions folder)."""
    if path.suffix != ".jsonl":
        return None
    release = get_policy(policy)
    base = release if release.rule is None else get_policy(release.rule.base)
    who = f"{NOT_READ_HERE}{base.label}: "
    b64, safe = _stems(key)
    folder = path.parent
    if base.name == NAMESPACED:
        return _namespaced(path, key, b64, who, config_dir)
    read = b64 if base.naming == "nanobot-0.3" else safe  # 0.3.0 falls back to the safe name
    if read is None or path.stem == read or not os.path.exists(folder / f"{read}.jsonl"):
        return None
    return f"{who}it reads {key!r} from {read}.jsonl beside it, never this file"


def _namespaced(
    path: Path, key: str, b64: str | None, who: str, config_dir: str | Path | None
) -> str | None:
    """:func:`placement_problem` for 0.3.5: a namespace's files under their base64url names
    only; a workspace's ``sessions/`` moved into its namespace when it starts."""
    folder = path.parent
    named = f"{b64}.jsonl" if b64 is not None else "no file name"
    if _NAMESPACE.fullmatch(folder.name) and folder.parent.name == "sessions":
        if b64 is not None and path.stem == b64:
            return None
        beside = (
            " (that file, beside it, is what it reads)" if os.path.exists(folder / named) else ""
        )
        return (
            f"{who}it reads a session only under its base64url name, {key!r} from "
            f"{named}{beside}; this file stays unread"
        )
    if folder.name != "sessions" or not (folder.parent / WORKSPACE_ID_FILE).exists():
        return None
    try:
        namespace = sessions_dir_035(folder.parent, config_dir)
    except (OSError, RuntimeError):
        namespace = None
    where = "<config dir>/sessions/<workspace id>/" if namespace is None else f"{namespace}{os.sep}"
    if namespace is not None and os.path.exists(namespace / path.name):
        return (
            f"{who}it has already moved this workspace's sessions to {where} (a copy named "
            f"{path.name} is there: it keeps the newer of the two and removes this file when it "
            f"next starts), and reads {key!r} only from {named} there"
        )
    read = "reads it there" if path.stem == b64 else f"reads {key!r} there only from {named}"
    return f"{who}it moves this file to {where}{path.name} when it starts on this workspace, and {read}"
