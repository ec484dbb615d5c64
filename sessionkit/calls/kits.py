"""The release's own system prompt, current-message wrapper and tool definitions for one
workspace: asked once from the installed release (its probe, in a subprocess) and cached.

A kit is keyed by everything that can change it: the release and its interpreter, the
workspace files the prompt reads (top-level files, ``memory/``, ``skills/``), the config
file, the channel and the process facts (platform, PATH, overrides).  A cached kit is
checked against its key and its checksum before it is trusted; a damaged one is discarded
with a warning and asked again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import subprocess
import tempfile
import warnings
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, cast

from sessionkit.nanobot.kit import Kit
from sessionkit.store.cachedir import (
    cache_dir_problem,
    default_cache_dir,
    make_private_dir,
    persistence_on,
)

__all__ = ["KitError", "kit_for", "package_folder", "shown_at", "workspace_inputs"]

_FORMAT = 1
_INPUT_FOLDERS = ("memory", "skills")
_MEMORY_FILE = "memory/MEMORY.md"
_MAX_INPUT_BYTES = 64 << 20


class KitError(RuntimeError):
    """The release's probe failed (its message carries the probe's own error)."""


def workspace_inputs(workspace: Path) -> tuple[list[tuple[str, str]], dict[str, float]]:
    """(relative path, content digest) of every file the prompt may read (top-level files
    plus everything under ``memory/`` and ``skills/``: the kit's cache key), and each one's
    modification time."""
    found: list[tuple[str, str]] = []
    newest: dict[str, float] = {}
    paths: list[Path] = []
    try:
        paths += [p for p in workspace.iterdir() if p.is_file()]
    except OSError:
        return [], {}
    for name in _INPUT_FOLDERS:
        folder = workspace / name
        if folder.is_dir():
            paths += [p for p in folder.rglob("*") if p.is_file()]
    for path in sorted(paths):
        try:
            stat = path.stat()
            digest = hashlib.blake2b(digest_size=16)
            if stat.st_size <= _MAX_INPUT_BYTES:
                digest.update(path.read_bytes())
            else:
                digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
        except OSError:
            continue
        name = path.relative_to(workspace).as_posix()
        newest[name] = stat.st_mtime
        found.append((name, digest.hexdigest()))
    return found, newest


def _process_facts() -> dict[str, str]:
    """The facts of this process a release writes into its prompt or tools."""
    return {
        "system": platform.system(),
        "machine": platform.machine(),
        "path": os.environ.get("PATH", ""),
    }


def _key(
    release: str,
    python: Path,
    workspace: Path,
    config: Path | None,
    channel: str | None,
    runtime: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, float]]:
    inputs, newest = workspace_inputs(workspace)
    config_digest = None
    if config is not None:
        config_digest = hashlib.blake2b(config.read_bytes(), digest_size=16).hexdigest()
    key = {
        "format": _FORMAT,
        "release": release,
        "python": str(python),
        "workspace": str(workspace),
        "inputs": inputs,
        "config": [str(config) if config else None, config_digest],
        "channel": channel,
        "process": _process_facts(),
        "runtime": dict(runtime),
    }
    return json.loads(json.dumps(key)), newest  # as it reads back: lists, not tuples


def _checksum(kit: Mapping[str, Any]) -> str:
    text = json.dumps(kit, sort_keys=True, ensure_ascii=True)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _read(path: Path, key: Mapping[str, Any]) -> dict[str, Any] | None:
    """The cached kit at ``path`` when it is there, whole and made for ``key``."""
    try:
        stored = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        _discard(path, f"unreadable: {type(exc).__name__}")
        return None
    if not isinstance(stored, dict) or stored.get("key") != key:
        if isinstance(stored, dict) and isinstance(stored.get("key"), dict):
            return None  # a kit of other inputs (a digest collision, or a renamed file)
        _discard(path, "not a kit")
        return None
    kit = stored.get("kit")
    if not isinstance(kit, dict) or stored.get("check") != _checksum(kit):
        _discard(path, "checksum mismatch")
        return None
    return kit


def _discard(path: Path, reason: str) -> None:
    warnings.warn(
        f"sessionkit: damaged kit cache file {path} ({reason}); ignored and asked again",
        stacklevel=4,
    )
    with contextlib.suppress(OSError):
        path.unlink()


def _write(path: Path, key: Mapping[str, Any], kit: Mapping[str, Any]) -> None:
    """Write atomically (a 0600 temp file beside it, then a rename); a cache, so no fsync."""
    data = json.dumps({"key": key, "kit": kit, "check": _checksum(kit)}).encode()
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)


def run_probe(probe: str, python: Path, request: Mapping[str, Any]) -> dict[str, Any]:
    """Run the release's probe in ``python`` (isolated mode: nothing of this environment), in
    a private scratch folder of its own: a release resolves a config's relative paths (0.3.5's
    ``workspace``) against its working folder and makes them while being built, which must
    never happen where the caller stands."""
    script = resources.files("sessionkit.nanobot.probes").joinpath(probe)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    with (
        resources.as_file(script) as path,
        tempfile.TemporaryDirectory(prefix="sessionkit-probe-") as scratch,
    ):
        proc = subprocess.run(
            [str(python), "-I", str(path)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=env,
            cwd=scratch,
            timeout=300,
            check=False,
        )
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-12:])
        raise KitError(f"the nanobot probe ({probe}, {python}) failed:\n{tail}")
    try:
        return json.loads(proc.stdout)
    except ValueError as exc:
        raise KitError(f"the nanobot probe ({probe}) answered no JSON: {exc}") from None


def _changed_at(raw: Mapping[str, Any], times: Mapping[str, float]) -> float:
    """Newest modification time of the files the kit's prompt holds: the bootstrap files its
    parts name, the long-term memory file and the workspace's skills (the summary journal and
    cursors under ``memory/`` change with every summary but are not the prompt)."""
    read = {p["part"].split(":", 1)[1] for p in raw["system"] if p["part"].startswith("bootstrap:")}
    for part in raw["system"]:
        for entry in part.get("files") or ():  # a file name, or a {"part": "bootstrap:<name>"}
            name = entry if isinstance(entry, str) else str(entry.get("part", ""))
            read.add(name.removeprefix("bootstrap:"))
    read.add(_MEMORY_FILE)
    return max(
        (t for name, t in times.items() if name in read or name.startswith("skills/")),
        default=0.0,
    )


def _as_kit(raw: Mapping[str, Any], times: Mapping[str, float]) -> Kit:
    return Kit(
        release=str(raw["nanobot"]),
        system=tuple((p["part"], p["text"], bool(p["inferred"])) for p in raw["system"]),
        joiner=raw["joiner"],
        system_text=raw["system_text"],
        summary=raw.get("summary"),
        current=raw["current"],
        sentinels=tuple(raw.get("sentinels", ())),
        tools=tuple(raw["tools"]),
        runtime=raw.get("runtime", {}),
        raw=raw,
        inputs_changed_at=_changed_at(raw, times),
    )


def shown_at(value: Any, real: str, shown: str) -> Any:
    """``value`` (a kit as JSON) with every mention of the path ``real`` written as ``shown``:
    the path the prompt names when nanobot ran from another folder (workspace, install)."""
    if isinstance(value, str):
        return value.replace(real, shown)
    if isinstance(value, list):
        return [shown_at(v, real, shown) for v in value]
    if isinstance(value, dict):
        return {k: shown_at(v, real, shown) for k, v in value.items()}
    return value


@functools.lru_cache(maxsize=8)
def package_folder(python: Path) -> str:
    """The folder of the ``nanobot`` package ``python`` imports (the release's install)."""
    code = "import nanobot, os; print(os.path.dirname(nanobot.__file__))"
    proc = subprocess.run(
        [str(python), "-I", "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0:
        raise KitError(f"{python} cannot import nanobot: {proc.stderr.strip()[-300:]}")
    return proc.stdout.strip()


def kit_for(
    release: str,
    probe: str,
    python: Path,
    workspace: Path,
    *,
    config: Path | None = None,
    channel: str | None = None,
    runtime: Mapping[str, Any] | None = None,
    cache_dir: Path | None | bool = None,
) -> Kit:
    """The kit of ``release`` for ``workspace`` (probed once, then read from the cache).  A
    workspace that does not exist (a relative path in a config or a ``.workspace`` marker, read
    against the current folder as nanobot reads it) is the empty one the release would make
    there, made in a scratch folder instead and shown at its own path.

    ``cache_dir=False`` keeps nothing on disk; ``None`` is the user's cache folder, unless
    persistence is off (``SESSIONKIT_CACHE=off``).
    """
    workspace = workspace.expanduser().resolve()
    config = config.expanduser().resolve() if config is not None else None
    runtime = dict(runtime or {})
    key, newest = _key(release, python, workspace, config, channel, runtime)
    folder = None
    if persistence_on(cache_dir):
        # persistence_on: ``cache_dir`` is not False, so a folder where it is not None or True.
        root = (
            default_cache_dir() if cache_dir is None or cache_dir is True else cast(Path, cache_dir)
        )
        folder = Path(root) / f"kits-{_FORMAT}"
        if cache_dir_problem(folder.parent) is not None:
            folder = None
    path = None
    if folder is not None:
        name = hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=16)
        path = folder / f"{name.hexdigest()}.json"
        cached = _read(path, key)
        if cached is not None:
            return _as_kit(cached, newest)
    shown = runtime.pop("workspace_path", None)
    installed_as = runtime.pop("release_path", None)
    with tempfile.TemporaryDirectory(prefix="sessionkit-kit-") as scratch:
        probed = workspace if workspace.exists() else Path(scratch) / workspace.name
        request = {
            "workspace": str(probed),
            "config": str(config) if config else None,
            "channel": channel,
            "runtime": runtime,
        }
        raw = run_probe(probe, python, request)
    if raw.get("nanobot") != release:
        raise KitError(f"the probe ran nanobot {raw.get('nanobot')!r}, not {release}")
    if probed != workspace:
        raw = shown_at(raw, str(probed), str(workspace))
    if shown is not None:
        raw = shown_at(raw, str(workspace), str(shown))
    if installed_as is not None:
        raw = shown_at(raw, package_folder(python), str(installed_as))
    if folder is not None and path is not None:
        try:
            make_private_dir(folder)
            _write(path, key, raw)
        except OSError:
            pass
    return _as_kit(raw, newest)
