"""nanobot-ai 0.1.4 to 0.2.1, each with only what its session and token modules import.

The differential tests of these releases run ``nanobot.session.manager`` and
``nanobot.utils.helpers`` and nothing else, so each release is installed with ``--no-deps``
beside the few packages those modules import (:data:`IMPORTS`, found by importing them in an
empty venv), in its own venv under ``<repo>/.cache/nanobot-releases/session-only/<version>/``:
a few seconds each instead of a whole install.  Building is idempotent (a marker written last),
safe when pytest workers race (a file lock), and instant on reuse.  ``make test`` checks one
version per distinct release object (:data:`REPRESENTATIVES`); ``SESSIONKIT_FULL_CHECKS=1``
checks every version (:data:`VERSIONS`), aliases included.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from functools import cache

from sessionkit.nanobot.policies import get_policy
from support.reference import marked_for, unavailable
from support.releases import ROOT, Release
from support.sampling import FULL

__all__ = ["IMPORTS", "REPRESENTATIVES", "VERSIONS", "build_session_release", "session_release"]

FOLDER = ROOT / "session-only"
_MARKER = ".session-only"

_BASE = ("loguru", "tiktoken")
_CONFIG = (*_BASE, "pydantic", "pydantic-settings")
_AGENT = (*_CONFIG, "jinja2", "httpx", "filelock", "pyyaml")
IMPORTS: dict[str, tuple[str, ...]] = {
    "0.1.4": _BASE,
    "0.1.4.post2": _BASE,
    "0.1.4.post3": _BASE,
    "0.1.4.post4": _CONFIG,
    "0.1.4.post5": _CONFIG,
    "0.1.4.post6": _CONFIG,
    "0.1.5": _AGENT,
    "0.1.5.post1": _AGENT,
    "0.1.5.post2": _AGENT,
    "0.1.5.post3": _AGENT,
    "0.2.0": _AGENT,
    "0.2.1": _CONFIG,
}
"""What each release's ``nanobot.session.manager`` and ``nanobot.utils.helpers`` import
(``nanobot/__init__`` imports the agent from 0.1.5 to 0.2.0)."""

ALL_VERSIONS = tuple(IMPORTS)
REPRESENTATIVES = tuple(v for v in ALL_VERSIONS if get_policy(f"nanobot-{v}").version == v)
"""The version each distinct release object is named after."""
VERSIONS = ALL_VERSIONS if FULL else REPRESENTATIVES
"""The versions this run checks."""


def build_session_release(version: str) -> Release:
    """The venv of ``nanobot-ai==version`` without its dependencies, plus :data:`IMPORTS`."""
    FOLDER.mkdir(parents=True, exist_ok=True)
    folder = FOLDER / version
    python = folder / "bin" / "python"
    if (folder / _MARKER).exists():
        return Release(version, python)
    with open(FOLDER / f".{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / _MARKER).exists():
            return Release(version, python)
        shutil.rmtree(folder, ignore_errors=True)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True)
        pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
        for packages in ([f"nanobot-ai=={version}", "--no-deps"], list(IMPORTS[version])):
            proc = subprocess.run([*pip, *packages], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                shutil.rmtree(folder, ignore_errors=True)
                raise RuntimeError(f"pip could not install {packages}: {proc.stderr[-800:]}")
        (folder / _MARKER).write_text(version)
    return Release(version, python)


@cache
def _build_or_reason(version: str) -> Release | str:
    try:
        return build_session_release(version)
    except (RuntimeError, subprocess.CalledProcessError, OSError) as error:
        return f"nanobot-ai {version} (session modules) unavailable: {error}"


def session_release(version: str) -> Release:
    """The release's session-only environment, built on first use; when it can't be, the
    calling test skips (fails under CI)."""
    marked_for("conformance", f"nanobot-ai {version}")
    built = _build_or_reason(version)
    if isinstance(built, str):
        unavailable(built)
    return built
