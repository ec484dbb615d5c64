"""Plans kept between runs: each planned call's answer digest, token estimate and allowed
output, by everything that makes them (the session as indexed, its release and kit, the call,
its setting, the endpoint, model, parameters, edit and sample), so planning the same calls
again rebuilds no request.  A file per session and plan target in the private cache, under
sessionkit's persistence switch."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import orjson

from sessionkit.store.cachedir import (
    cache_dir_problem,
    default_cache_dir,
    name_digest,
    persistence_on,
    write_private,
)

__all__ = ["PLANS_FORMAT", "Entry", "PlanStore", "entry_key"]

PLANS_FORMAT = 1
"""The version of a kept plan's layout and of what its entries mean."""

Entry = list[Any]
"""A kept call: ``[answer digest, estimate, allowed output, error]`` (no digest with an
error: the request could not be rebuilt, and why)."""


def entry_key(turn: int, step: int, settings: Hashable, model: str, edit: str | None) -> str:
    """The name of one call's entry in its session's file: the call, its setting, the model
    and the edit (a text, or None: as stored)."""
    return repr((turn, step, settings, model, edit))


class PlanStore:
    """Kept plans by session and target: files (0600) in ``<cache folder>/plans-<format>-
    <version>/`` (0700) when persistence is on and the folder is safe; else nothing is read
    or kept.  What one run adds is written by :meth:`flush`, each file atomically."""

    def __init__(self, cache: object) -> None:
        self.folder: Path | None = None
        if persistence_on(cache):
            root = default_cache_dir()
            if cache_dir_problem(root) is None:
                version = importlib.metadata.version("sessionkit")
                self.folder = root / f"plans-{PLANS_FORMAT}-{version}"
        self._files: dict[str, dict[str, Entry]] = {}
        self._changed: set[str] = set()

    def file_of(self, version: Hashable, release: str, kit: str, target: Sequence[Any]) -> str:
        """The name of the file of one session ``version`` (what
        :func:`sessionkit.store.memo.version` says), its release and kit digest, planned
        for ``target`` (the endpoint, parameters and samples asked)."""
        return name_digest(repr((PLANS_FORMAT, version, release, kit, *target)))

    def entries(self, name: str) -> dict[str, Entry]:
        """The entries kept in file ``name`` (read once; an unreadable file: none)."""
        found = self._files.get(name)
        if found is None:
            found = {}
            if self.folder is not None:
                try:
                    data = orjson.loads((self.folder / f"{name}.json").read_bytes())
                    found = data if isinstance(data, dict) else {}
                except (OSError, orjson.JSONDecodeError):
                    found = {}
            self._files[name] = found
        return found

    def put(self, name: str, key: str, entry: Entry) -> None:
        """Keep ``entry`` under ``key`` in file ``name`` (written by :meth:`flush`)."""
        self.entries(name)[key] = entry
        self._changed.add(name)

    def flush(self) -> None:
        """Write each changed file (a folder that cannot take them: they are planned again
        next time)."""
        if self.folder is None:
            return
        for name in sorted(self._changed):
            try:
                write_private(self.folder / f"{name}.json", orjson.dumps(self._files[name]))
            except OSError:
                return
        self._changed.clear()
