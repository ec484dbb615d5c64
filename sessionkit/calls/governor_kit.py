"""The archive instruction a release's context governor appends to its summary call: asked
from the installed release (its governor probe), once per interpreter in this process."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from sessionkit.calls.kits import KitError, run_probe
from sessionkit.nanobot.release import ReplayPolicy

__all__ = ["governor_texts"]


@lru_cache(maxsize=8)
def _texts(release: str, probe: str, python: str) -> Mapping[str, Any]:
    answer = run_probe(probe, Path(python), {})
    if answer.get("nanobot") != release:
        raise KitError(f"the probe ran nanobot {answer.get('nanobot')!r}, not {release}")
    return answer


def governor_texts(policy: ReplayPolicy, python: Path) -> Mapping[str, Any]:
    """The release's governor texts (``archive``: the instruction message its summary call
    appends)."""
    if not policy.governor_probe:
        raise ValueError(f"{policy.label} has no context governor")
    return _texts(policy.version, policy.governor_probe, str(python))
