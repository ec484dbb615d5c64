"""Where nanobot-ai 0.3.5 keeps a workspace's sessions, found by reading only.

0.3.5 stores sessions outside the workspace, in ``<config dir>/sessions/<workspace id>/``.
The config dir is the folder of the config file nanobot runs with (``--config``; no
environment variable sets it), by default ``~/.nanobot`` (``$HOME`` decides ``~``).  The
32-hex workspace id is in ``<workspace>/.nanobot/workspace-id``; when that file is missing,
nanobot recovers the id from the namespace whose ``.workspace`` file names this workspace.
Building nanobot's store creates and migrates folders; nothing here writes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = [
    "WORKSPACE_ID_FILE",
    "config_dir_hint",
    "config_file",
    "config_folder",
    "default_config_dir",
    "recorded_workspace",
    "sessions_dir_035",
    "sessions_root_035",
    "workspace_id_035",
]

WORKSPACE_ID_FILE = Path(".nanobot") / "workspace-id"
_WORKSPACE_ID = re.compile(r"[0-9a-f]{32}")
_NAMESPACE_MARKER = ".workspace"


def default_config_dir() -> Path:
    """``~/.nanobot``: the folder of 0.3.5's default config file."""
    return Path.home() / ".nanobot"


def _canonical(path: str | Path) -> Path:
    return Path(path).expanduser().resolve(strict=False)


def config_folder(config_dir: str | Path | None = None) -> Path:
    """The config dir 0.3.5 derives from ``config_dir``: the folder itself, or the folder of
    a config file (an existing file, or a missing path ending in ``.json``, as ``--config``
    takes it); ``None``: :func:`default_config_dir`.  ``~`` is expanded."""
    if config_dir is None or not str(config_dir).strip():
        return default_config_dir()
    path = Path(config_dir).expanduser()
    if path.is_file() or (path.suffix == ".json" and not path.exists()):
        return path.parent
    return path


def config_file(config_dir: str | os.PathLike[str]) -> Path:
    """The config file ``config_dir`` names: the file itself, or ``config.json`` in that
    folder (``~`` expanded); ``FileNotFoundError`` naming what was looked for when there is
    none."""
    path = Path(config_dir).expanduser()
    found = path if path.is_file() else path / "config.json"
    if not found.is_file():
        raise FileNotFoundError(
            f"config_dir={str(config_dir)!r} names no nanobot config file: {found} does not "
            "exist (pass the config.json nanobot ran with, or the folder holding it)"
        )
    return found


def sessions_root_035(config_dir: str | Path | None = None) -> Path:
    """``<config dir>/sessions``, resolved as 0.3.5 resolves it (may not exist); ``config_dir``
    is the folder or the config file (:func:`config_folder`)."""
    return _canonical(config_folder(config_dir) / "sessions")


def _namespaces(root: Path) -> list[Path]:
    """The 32-hex namespace folders in a 0.3.5 sessions root (names checked before any
    Path is made: the root asked about may be a sessions folder of many files)."""
    try:
        with os.scandir(root) as listing:
            names = sorted(
                e.name
                for e in listing
                if len(e.name) == 32 and _WORKSPACE_ID.fullmatch(e.name) and e.is_dir()
            )
    except OSError:
        return []
    return [root / name for name in names]


def config_dir_hint(path: str | Path) -> str | None:
    """What to pass instead when ``path`` is a 0.3.5 config dir, its config file or its
    sessions root, which keep sessions per workspace in ``sessions/<workspace id>/``; else None.

    A config dir's ``sessions/`` (or a sessions root itself) holds 32-hex namespace folders; a
    config file is a ``.json`` file named ``config.json`` or beside such a ``sessions/``.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        if (path / WORKSPACE_ID_FILE).exists():
            return None
        if _namespaces(path / "sessions"):
            config, root, kind = path, path / "sessions", "config folder"
        elif _namespaces(path):
            config, root, kind = path.parent, path, "sessions root"
        else:
            return None
    elif path.suffix == ".json" and (
        path.name == "config.json" or _namespaces(path.parent / "sessions")
    ):
        config, root, kind = path.parent, path.parent / "sessions", "config file"
    else:
        return None
    found = _namespaces(root)
    if not found:
        return (
            f"{path} is a nanobot config file, not a session file; pass the workspace with "
            f"config_dir={str(path)!r} (command line: --config-dir)"
        )
    named = [_shown_workspace(n, config) for n in found]
    shown = ", ".join(named[:3]) + (f", ... ({len(named)} in all)" if len(named) > 3 else "")
    return (
        f"{path} is a nanobot 0.3.5 {kind}: it keeps each workspace's sessions apart, in "
        f"{root}/<workspace id>/, and sessionkit loads one workspace at a time; pass a "
        f"workspace ({shown}) with config_dir={str(config)!r} (command line: --config-dir), "
        "or one of those namespace folders"
    )


def _shown_workspace(namespace: Path, config: Path) -> str:
    """The workspace a namespace records, as a hint can name it: where it exists (a relative
    record tried from the config folder too), else said to be missing."""
    recorded = recorded_workspace(namespace)
    if recorded is None:
        return f"? (namespace {namespace.name})"
    if recorded.exists():
        return str(recorded)
    beside = config / (namespace / _NAMESPACE_MARKER).read_text(encoding="utf-8").strip()
    if beside.is_dir():
        return str(beside)
    return f"{recorded} (recorded by namespace {namespace.name}; not found)"


def _read_id(marker: Path) -> str:
    if marker.is_symlink():
        raise RuntimeError(f"nanobot 0.3.5 refuses a symlinked workspace id file: {marker}")
    value = marker.read_text(encoding="utf-8").strip()
    if not _WORKSPACE_ID.fullmatch(value):
        raise RuntimeError(f"nanobot 0.3.5 refuses an invalid workspace id in {marker}")
    return value


def recorded_workspace(namespace: Path) -> Path | None:
    """The workspace a namespace's ``.workspace`` file names, or None when unreadable."""
    marker = namespace / _NAMESPACE_MARKER
    if marker.is_symlink() or not marker.is_file():
        return None
    try:
        return _canonical(marker.read_text(encoding="utf-8").strip())
    except (OSError, UnicodeError, ValueError):
        return None


def _same(recorded: Path, workspace: Path) -> bool:
    try:
        return recorded == workspace or (recorded.exists() and recorded.samefile(workspace))
    except OSError:
        return False


def _recovered_id(workspace: Path, root: Path) -> str | None:
    if not root.is_dir():
        return None
    matches = [
        namespace.name
        for namespace in root.iterdir()
        if _WORKSPACE_ID.fullmatch(namespace.name)
        and not namespace.is_symlink()
        and namespace.is_dir()
        and (recorded := recorded_workspace(namespace)) is not None
        and _same(recorded, workspace)
    ]
    if len(matches) > 1:
        raise RuntimeError(f"several session namespaces in {root} claim workspace {workspace}")
    return matches[0] if matches else None


def workspace_id_035(workspace: str | Path, config_dir: str | Path | None = None) -> str | None:
    """The id 0.3.5 uses for ``workspace``, or None when it would make a new one.

    Raises ``RuntimeError`` where 0.3.5 refuses to start (symlinked or invalid id file,
    two namespaces claiming the workspace).
    """
    workspace = _canonical(workspace)
    state = workspace / WORKSPACE_ID_FILE.parent
    if state.is_symlink():
        raise RuntimeError(f"nanobot 0.3.5 refuses a symlinked workspace state folder: {state}")
    marker = workspace / WORKSPACE_ID_FILE
    if marker.exists() or marker.is_symlink():
        return _read_id(marker)
    return _recovered_id(workspace, sessions_root_035(config_dir))


def sessions_dir_035(workspace: str | Path, config_dir: str | Path | None = None) -> Path | None:
    """The folder holding 0.3.5's session files for ``workspace``, or None if it has none.

    None also when 0.3.5 would start a fresh namespace: no id yet, no folder for the id, or
    a folder claimed by another workspace that still exists (a copied workspace).
    """
    workspace = _canonical(workspace)
    root = sessions_root_035(config_dir)
    if root == workspace or root.is_relative_to(workspace):
        raise RuntimeError(f"nanobot 0.3.5 refuses a sessions folder inside the workspace: {root}")
    workspace_id = workspace_id_035(workspace, config_dir)
    if workspace_id is None:
        return None
    folder = root / workspace_id
    if folder.is_symlink():
        raise RuntimeError(f"nanobot 0.3.5 refuses a symlinked session namespace: {folder}")
    if not folder.is_dir():
        return None
    marker = folder / _NAMESPACE_MARKER
    if marker.is_symlink():
        raise RuntimeError(f"nanobot 0.3.5 refuses a symlinked namespace marker: {marker}")
    if not marker.exists():
        if any(folder.iterdir()):
            raise RuntimeError(f"nanobot 0.3.5 refuses a namespace with no marker: {folder}")
        return folder
    text = marker.read_text(encoding="utf-8").strip()
    if not text:
        raise RuntimeError(f"nanobot 0.3.5 refuses an empty namespace marker: {marker}")
    recorded = _canonical(text)
    return folder if _same(recorded, workspace) or not recorded.exists() else None
