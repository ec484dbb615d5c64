"""What a load may be given: the bundled sample store (the default source) and the check that
refuses a path no session store can be, before anything is read."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from sessionkit.nanobot.naming import sessions_folder
from sessionkit.nanobot.reader import (
    SESSION_SUFFIXES,
    Problem,
    SessionPathError,
    sessions_folders_below,
    workspace_of,
)

__all__ = [
    "PACKAGED_SAMPLE",
    "REPOSITORY_DATA",
    "PathLike",
    "check_source",
    "default_data_dir",
    "folders_left_out",
    "workspace_names",
]

PathLike = str | Path
"""A path given as text or as a Path (a load, its config_dir and cache folder take either)."""

_PACKAGE = Path(__file__).resolve().parents[1]
REPOSITORY_DATA = _PACKAGE.parent / "data"
"""The sample store of a source checkout (generated, 15 sessions)."""
PACKAGED_SAMPLE = _PACKAGE / "_sample"
"""The same store (``sessions/`` and ``damaged/``) shipped inside the wheel (see pyproject's
force-include)."""


def default_data_dir() -> Path:
    """The bundled sample store, the default everywhere: the checkout's ``data/``, else (an
    installed wheel) its copy packaged as ``sessionkit/_sample``."""
    for path in (REPOSITORY_DATA, PACKAGED_SAMPLE):
        if (path / "sessions").is_dir():
            return path
    raise SessionPathError(
        f"no bundled sample data ({REPOSITORY_DATA} and {PACKAGED_SAMPLE} are missing); "
        "pass the path of a nanobot workspace or sessions folder"
    )


_EXPECTED = (
    "a nanobot workspace folder, a sessions folder, a session file (.jsonl, or a legacy "
    ".json), a glob, or a list of these"
)


def check_source(path: PathLike | list[PathLike] | tuple[PathLike, ...]) -> None:
    """Refuse, naming what is expected, a path that cannot be a session store: an empty
    string (it would mean the current folder) or an existing file that is not named like a
    session (``/etc/passwd``).  Missing paths and globs are left to the reader."""
    for item in path if isinstance(path, list | tuple) else [path]:
        if not str(item).strip():
            raise SessionPathError(f"an empty path names no session store; pass {_EXPECTED}")
        target = Path(item).expanduser()
        if target.exists() and not target.is_dir() and target.suffix not in SESSION_SUFFIXES:
            raise SessionPathError(f"{target} is not a session store; pass {_EXPECTED}")


def workspace_names(
    source: PathLike | list[PathLike] | tuple[PathLike, ...],
    folders: Iterable[Path],
    config_dir: PathLike | None,
    recursive: bool,
) -> dict[str, str]:
    """The workspace of each of ``folders`` (those the files loaded lie in), by name: a
    workspace's path below the parent of the folder named (``course/alice``), its own name when
    it is not below it (``data`` for ``data/sessions``; ``workspace`` for a 0.3.5 workspace),
    or the workspace folder's own name for a file or glob named."""
    names: dict[str, str] = {}
    for item in source if isinstance(source, list | tuple) else [source]:
        path = Path(item).expanduser()
        if not path.is_dir():
            continue
        base = path.resolve().parent
        if recursive:
            below = [
                (f, path if f == path / "sessions" else workspace_of(f))
                for f in sessions_folders_below(path)
            ]
        else:  # the folder given is the workspace, unless it is a sessions folder
            folder = sessions_folder(path, config_dir)
            below = [(folder, workspace_of(folder) if folder == path else path)]
        for folder, workspace in below:
            found = workspace.resolve()
            inside = found.is_relative_to(base) and found != base
            name = found.relative_to(base).as_posix() if inside else found.name
            names.setdefault(str(folder.resolve()), name)
    for folder in folders:
        names.setdefault(str(folder), workspace_of(folder).name)
    return names


_NAMED = 5
"""How many folders left out a note names; the rest are counted."""


def folders_left_out(
    source: PathLike | list[PathLike] | tuple[PathLike, ...], config_dir: PathLike | None
) -> list[Problem]:
    """A note per folder given that holds sessions folders below it that a load without
    ``recursive`` did not read (the bundled ``data/damaged``), naming them: nothing is skipped
    unsaid."""
    notes = []
    for item in source if isinstance(source, list | tuple) else [source]:
        path = Path(item).expanduser()
        if not path.is_dir():
            continue
        below = sessions_folders_below(path, skip=sessions_folder(path, config_dir))
        if not below:
            continue
        names = [folder.relative_to(path).as_posix() for folder in below]
        shown = ", ".join(names[:_NAMED])
        more = f" and {len(names) - _NAMED} more" if len(names) > _NAMED else ""
        folders = "sessions folder" if len(names) == 1 else "sessions folders"
        reason = (
            f"{len(names)} {folders} below not loaded ({shown}{more}); "
            "load with recursive=True (--recursive) to read them too"
        )
        notes.append(Problem(str(path.absolute()), None, reason))
    return notes
