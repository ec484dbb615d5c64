"""What a load may be given: the bundled sample store (the default source) and the check that
refuses a path no session store can be, before anything is read."""

from __future__ import annotations

from pathlib import Path

from sessionkit.nanobot.reader import SESSION_SUFFIXES, SessionPathError

__all__ = ["PACKAGED_SAMPLE", "REPOSITORY_DATA", "PathLike", "check_source", "default_data_dir"]

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
