"""Where a nanobot release's interpreter is: one named by the user, the current environment,
the ``nanobot`` command on PATH, or a venv sessionkit installed in the user's cache.

Installing is an explicit set-up step (``sessionkit releases install 0.3.5``), never a side
effect of an analysis call: :func:`find_release` only looks.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

from sessionkit.store.cachedir import cache_dir_problem, default_cache_dir, make_private_dir

__all__ = [
    "ReleaseNotInstalled",
    "find_release",
    "install",
    "installed",
    "release_version",
    "remove",
    "releases_dir",
]

_MARKER = ".sessionkit-release.json"
_VERSION_PROBE = (
    "import importlib.metadata as m\n"
    "try:\n    print(m.version('nanobot-ai'))\n"
    "except m.PackageNotFoundError:\n    print('')\n"
)


class ReleaseNotInstalled(LookupError):
    """No interpreter with the wanted nanobot release: the message says how to install one."""


def releases_dir(folder: Path | None = None) -> Path:
    """The folder of the venvs sessionkit installs, one per version: ``folder`` when given,
    else ``$SESSIONKIT_RELEASES_DIR``, else ``releases`` in the user's cache folder."""
    if folder is not None:
        return folder
    chosen = os.environ.get("SESSIONKIT_RELEASES_DIR")
    return Path(chosen).expanduser() if chosen else default_cache_dir() / "releases"


def _venv_python(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def _as_python(path: Path) -> Path:
    """``path`` itself when it is an interpreter, its ``bin/python`` when it is a venv."""
    return _venv_python(path) if path.is_dir() else path


@cache
def _version_of(python: str, stamp: tuple[int, int]) -> str:
    """The nanobot-ai version ``python`` imports ('' without one); ``stamp`` (size, mtime of the
    interpreter) keys the cache so a reinstalled venv is asked again."""
    try:
        proc = subprocess.run(
            [python, "-I", "-c", _VERSION_PROBE],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except OSError:
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def release_version(python: Path) -> str:
    """The nanobot-ai version the interpreter ``python`` has installed ('' when none)."""
    try:
        found = os.stat(python)
    except OSError:
        return ""
    return _version_of(str(python), (found.st_size, found.st_mtime_ns))


def _current_environment(version: str) -> Path | None:
    try:
        here = importlib.metadata.version("nanobot-ai")
    except importlib.metadata.PackageNotFoundError:
        return None
    return Path(sys.executable) if here == version else None


def _on_path(version: str) -> Path | None:
    """The interpreter of the ``nanobot`` command on PATH (its shebang), if it has ``version``."""
    command = shutil.which("nanobot")
    if command is None:
        return None
    try:
        with open(command, "rb") as file:
            first = file.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    python = Path(first[2:].decode(errors="replace").strip().split(" ")[0])
    return python if release_version(python) == version else None


def _managed(version: str, releases: Path | None) -> Path | None:
    folder = releases_dir(releases) / version
    python = _venv_python(folder)
    try:
        marker = json.loads((folder / _MARKER).read_text())
    except (OSError, ValueError):
        return None
    if marker != {"nanobot-ai": version} or release_version(python) != version:
        return None
    return python


def find_release(
    version: str,
    nanobot: str | os.PathLike[str] | None = None,
    *,
    releases: Path | None = None,
) -> Path:
    """The interpreter to run nanobot ``version`` with.

    ``nanobot`` names an interpreter or a venv (it must hold that release).  Without it: the
    current environment, the ``nanobot`` command on PATH, then the venv of
    ``sessionkit releases install`` in the user's cache.  Raises :class:`ReleaseNotInstalled`
    saying how to install it.
    """
    if nanobot is not None:
        python = _as_python(Path(nanobot).expanduser())
        found = release_version(python)
        if found != version:
            held = f"nanobot-ai {found}" if found else "no nanobot-ai"
            raise ReleaseNotInstalled(
                f"{python} has {held}, not nanobot-ai {version}: pass the interpreter or venv "
                f"of that release, or install it with `sessionkit releases install {version}`"
            )
        return python
    for candidate in (_current_environment(version), _on_path(version)):
        if candidate is not None:
            return candidate
    managed = _managed(version, releases)
    if managed is not None:
        return managed
    raise ReleaseNotInstalled(
        f"nanobot-ai {version} is not installed where sessionkit looks (this environment, the "
        f"`nanobot` command on PATH, {releases_dir(releases)}): run "
        f"`sessionkit releases install {version}`, or pass nanobot=<its python or venv>"
    )


def installed(releases: Path | None = None) -> dict[str, Path]:
    """The releases ``sessionkit releases install`` set up: version -> interpreter."""
    root = releases_dir(releases)
    if not root.is_dir():
        return {}
    found = {}
    for folder in sorted(root.iterdir()):
        python = _managed(folder.name, releases)
        if python is not None:
            found[folder.name] = python
    return found


def remove(version: str, *, releases: Path | None = None) -> Path:
    """Remove the venv ``sessionkit releases install`` made for ``version``; returns its
    folder.  Only a venv sessionkit installed (its marker file) is removed: anything else is
    :class:`ReleaseNotInstalled`."""
    folder = releases_dir(releases) / version
    if version not in installed(releases):
        raise ReleaseNotInstalled(
            f"nanobot-ai {version} is not installed by sessionkit in {releases_dir(releases)}: "
            "nothing to remove"
        )
    shutil.rmtree(folder)
    return folder


def install(version: str, *, releases: Path | None = None, quiet: bool = True) -> Path:
    """Install ``nanobot-ai==version`` with its dependencies into its own venv (0700) under
    :func:`releases_dir`, from the package index; a complete install is reused.  Returns its
    python."""
    root = releases_dir(releases)
    make_private_dir(root)
    problem = cache_dir_problem(root)
    if problem:
        raise PermissionError(f"refusing to install into {root}: {problem}")
    existing = _managed(version, releases)
    if existing is not None:
        return existing
    folder = root / version
    with open(root / f".{version}.lock", "w") as lock:
        os.chmod(lock.fileno(), 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)
        existing = _managed(version, releases)
        if existing is not None:
            return existing
        shutil.rmtree(folder, ignore_errors=True)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True)
        os.chmod(folder, 0o700)
        python = _venv_python(folder)
        pip = [sys.executable, "-m", "pip", "--python", str(python), "install"]
        proc = subprocess.run(
            [*pip, *(["-q"] if quiet else []), f"nanobot-ai=={version}"],
            capture_output=quiet,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            tail = (proc.stderr or "").strip().splitlines()[-3:]
            raise RuntimeError(f"pip could not install nanobot-ai=={version}: {' '.join(tail)}")
        partial = folder / f"{_MARKER}.partial"
        partial.write_text(json.dumps({"nanobot-ai": version}))
        partial.replace(folder / _MARKER)
    return python
