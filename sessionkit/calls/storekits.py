"""The kits of a store's sessions: each asked once per release, workspace, config file and
channel (:func:`sessionkit.calls.kits.kit_for` keeps them on disk), with the tokens of its
system prompt and tools counted once per kit content."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sessionkit.calls.assembly import config_of, count_text, kit_of, kit_persistence, workspace_of
from sessionkit.calls.installs import ReleaseNotInstalled, find_release
from sessionkit.calls.kits import kit_for
from sessionkit.nanobot.kit import Kit
from sessionkit.nanobot.release import ReplayPolicy
from sessionkit.nanobot.session import Session

__all__ = ["Interpreter", "StoreKits", "kit_sizes"]

Interpreter = str | os.PathLike[str]

_SIZES: dict[str, tuple[int, int, bool]] = {}
"""System prompt tokens, tool tokens and whether a system part is inferred, by kit digest."""


def kit_sizes(release: ReplayPolicy, kit: Kit) -> tuple[str, tuple[int, int, bool]]:
    """The kit's digest (its whole content) and its sizes, counted once per digest."""
    text = json.dumps([release.name, kit.raw], sort_keys=True, ensure_ascii=False)
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    if digest not in _SIZES:
        system = count_text(kit.system_text) if kit.system_text else 0
        tools = release.estimate_request([], [dict(t) for t in kit.tools], count_text)
        _SIZES[digest] = (system, tools if kit.tools else 0, any(p[2] for p in kit.system))
    return digest, _SIZES[digest]


class StoreKits:
    """The kit of each session of one ``sk.requests`` call, asked once per release,
    workspace, config and channel; what cannot have one (a release not installed, a session
    without a workspace) is noted once in :attr:`warnings` for the caller to warn."""

    def __init__(
        self,
        workspace: Path | None,
        config: Path | None,
        nanobot: Interpreter | Mapping[str, Interpreter] | None,
        runtime: Mapping[str, Any] | None,
    ) -> None:
        self.workspace, self.config, self.nanobot, self.runtime = (
            workspace,
            config,
            nanobot,
            runtime,
        )
        self.pythons: dict[str, Path | None] = {}
        self.places: dict[Any, tuple[Path | None, Path | None]] = {}
        self.kits: dict[tuple[Any, ...], tuple[Kit, str, tuple[int, int, bool]]] = {}
        self.warnings: dict[str, str] = {}
        """What to warn about, once each: a release not installed, a session without a kit."""

    def _warn(self, what: str, message: str) -> None:
        self.warnings.setdefault(what, f"sessionkit.requests: {message}")

    def _python(self, version: str) -> Path | None:
        if version not in self.pythons:
            chosen = self.nanobot
            if isinstance(chosen, Mapping):
                chosen = chosen.get(version)
            try:
                self.pythons[version] = find_release(version, chosen)
            except ReleaseNotInstalled as exc:
                self.pythons[version] = None
                self._warn(version, f"{exc}; system prompt and tools are left empty")
        return self.pythons[version]

    def _place(self, session: Session) -> tuple[Path | None, Path | None]:
        """The session's workspace and config file (found once per sessions folder)."""
        where = os.path.dirname(os.fspath(session.path)) if session.path else None
        if where not in self.places:
            root = self.workspace if self.workspace is not None else workspace_of(session)
            config = self.config
            if root is not None and config is None:
                config = config_of(root, session)
            self.places[where] = root, config
        return self.places[where]

    def of(
        self, release: ReplayPolicy, session: Session
    ) -> tuple[Kit | None, str | None, tuple[int, int, bool]]:
        """The session's kit, its digest and sizes (None, None, zeros without one)."""
        python = self._python(release.version)
        if python is None:
            return None, None, (0, 0, False)
        root, config = self._place(session)
        if root is None:
            try:
                kit_of(release, session, None, None, python, self.runtime)
            except ValueError as exc:  # no workspace: kit_of says why and what to pass
                self._warn(session.key, str(exc))
            return None, None, (0, 0, False)
        channel = release.channel(session.key)
        key = (release.version, release.probe, python, root, config, channel)
        if key not in self.kits:
            try:
                kit = kit_for(
                    release.version,
                    release.probe,
                    python,
                    root,
                    config=config,
                    channel=channel,
                    runtime=self.runtime,
                    cache_dir=kit_persistence(session),
                )
            except ValueError as exc:
                self._warn(session.key, str(exc))
                return None, None, (0, 0, False)
            self.kits[key] = (kit, *kit_sizes(release, kit))
        return self.kits[key]
