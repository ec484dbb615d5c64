"""Continue a fork with the installed release's own agent loop, in a private copy of the
workspace and config dir, and show the continuation beside the original.

The session's release drives it (:mod:`sessionkit.nanobot.loop_releases`): nanobot 0.3.5's
gateway parts (``probes/continue_035.py``) or the ``nanobot agent`` loop of nanobot 0.2.2 or
0.3.0 (``probes/continue_022.py``), each in that release's interpreter.  Nothing of the user's
workspace or config dir is written: both are copied into a 0700 folder, the fork is written
there, and the loop runs there.  The copied config holds no secret: every key, token,
password, header and MCP environment value is replaced by a ``${VAR}`` reference whose value
reaches the child only through its environment.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pandas as pd

from sessionkit.calls.assembly import config_of, workspace_of
from sessionkit.calls.installs import find_release
from sessionkit.experiments.endpoint import target
from sessionkit.nanobot.loop_releases import OUTSIDE_SWITCHES, LoopRelease, loop_release, refusal
from sessionkit.nanobot.provider_entry import provider_entry
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.workspace import config_file, config_folder, sessions_dir_035
from sessionkit.schema import CONTINUATION, frame
from sessionkit.store.cachedir import default_cache_dir, make_private_dir, private_dir_problem
from sessionkit.store.corpus import resolve_session
from sessionkit.store.loading import load
from sessionkit.writers.forking import fork

if TYPE_CHECKING:
    from sessionkit.store.corpus import Corpus

__all__ = ["OUTSIDE_TOOLS", "Continuation", "ContinuationError", "continue_fork"]

OUTSIDE_TOOLS: dict[str, tuple[str, ...]] = dict(OUTSIDE_SWITCHES)
"""The tools that reach past the copy (every release continued switches them alike), each by
the name ``enable=`` takes and the config switch that turns it off (the shell and its sessions; web
fetch and search; installed CLI apps; image generation at its provider).  ``"files"`` lets
the file tools past the workspace (``tools.restrictToWorkspace`` is set otherwise) and
``"mcp:<server>"`` keeps that MCP server; every other MCP server is dropped and every channel
disabled (channels are never started: what the loop sends to one is returned in
``replies``)."""

_KEY_ENV = "SESSIONKIT_CONTINUATION_API_KEY"
_SECRET = re.compile(r"key|token|secret|password|passwd|credential|cookie|auth", re.I)
_ALL_SECRET = ("headers", "env", "extraHeaders", "extra_headers")


class ContinuationError(RuntimeError):
    """The release's loop failed (its message carries the loop's own error)."""


@dataclass(frozen=True)
class Continuation:
    """A continued fork beside its original.

    ``original`` is the session forked; ``fork`` what was written into the copy before the
    loop ran; ``continued`` the session the loop left (read back with :func:`sessionkit.load`
    from the copy, whose ``corpus`` it belongs to); ``folder`` the private copy (workspace in
    ``workspace``, config dir in ``config_dir``); ``replies`` each turn's outbound messages;
    ``calls`` the provider calls made and ``budget_hit`` whether ``max_calls`` stopped the
    loop; ``connections`` every socket connect and name lookup the loop's process made
    (``{"event", "address", "allowed"}``, from ``connections.jsonl`` in ``folder``).
    """

    original: Session
    fork: Session
    continued: Session
    corpus: Corpus = field(repr=False)
    folder: Path
    workspace: Path
    config_dir: Path
    replies: list[list[str]]
    calls: int
    budget_hit: bool
    connections: list[dict[str, Any]]

    def side_by_side(self) -> pd.DataFrame:
        """The messages from the fork point on, the original's and the continuation's in one
        row per position (a :data:`sessionkit.schema.CONTINUATION` frame)."""
        start = len(self.fork.messages)
        ours, theirs = self.original.messages[start:], self.continued.messages[start:]
        rows = max(len(ours), len(theirs))

        def column(messages: list[Any], part: str) -> list[str | None]:
            return [_shown(m, part) for m in messages] + [None] * (rows - len(messages))

        return frame(
            CONTINUATION,
            {
                "position": list(range(start, start + rows)),
                "original_role": column(ours, "role"),
                "original": column(ours, "text"),
                "continued_role": column(theirs, "role"),
                "continued": column(theirs, "text"),
            },
        )


def _shown(message: Mapping[str, Any], part: str) -> str:
    """A message's role, or its text with its tool calls named (``-> name(arguments)``)."""
    if part == "role":
        return str(message.get("role"))
    content = message.get("content")
    parts = (
        []
        if content is None or content == ""
        else [content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)]
    )
    for call in message.get("tool_calls") or []:
        function = call.get("function", {}) if isinstance(call, Mapping) else {}
        parts.append(f"-> {function.get('name')}({function.get('arguments')})")
    return "\n".join(parts)


def _scrubbed(value: Any, env: dict[str, str], secret: bool = False) -> Any:
    """``value`` with every secret string replaced by a ``${VAR}`` reference (its value put
    in ``env``); references already there are kept (the child inherits the environment)."""
    if isinstance(value, Mapping):
        return {
            k: _scrubbed(v, env, secret or bool(_SECRET.search(k)) or k in _ALL_SECRET)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_scrubbed(v, env, secret) for v in value]
    if secret and isinstance(value, str) and value and "${" not in value:
        name = f"SESSIONKIT_CONTINUATION_SECRET_{len(env)}"
        env[name] = value
        return f"${{{name}}}"
    return value


def _set(config: dict[str, Any], path: Sequence[str], value: Any) -> None:
    """Set ``path`` (camelCase names) in ``config``, dropping a snake_case spelling beside it."""
    node = config
    for name in path[:-1]:
        snake = _snake(name)
        found = node.pop(snake, None) if snake != name and name not in node else None
        node = node.setdefault(name, found if isinstance(found, dict) else {})
        if not isinstance(node, dict):
            raise ValueError(f"the nanobot config's {name!r} is not an object")
    last = path[-1]
    node.pop(_snake(last), None)
    node[last] = value


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _checked_enable(
    enable: Iterable[str], config: Mapping[str, Any], release: LoopRelease
) -> set[str]:
    tools = config.get("tools")
    servers = (
        tools.get("mcpServers", tools.get("mcp_servers")) if isinstance(tools, Mapping) else None
    ) or {}
    known = {*release.outside_tools, "files", *(f"mcp:{name}" for name in servers)}
    chosen = {enable} if isinstance(enable, str) else set(enable)
    unknown = sorted(chosen - known)
    if unknown:
        raise ValueError(
            f"enable= names {', '.join(map(repr, unknown))}, which this config cannot enable; "
            f"it takes {', '.join(sorted(known))}"
        )
    return chosen


def _private_config(
    original: Mapping[str, Any],
    workspace: Path,
    endpoint: str | None,
    key: str | None,
    enable: set[str],
    agent_defaults: Mapping[str, Any] | None,
    release: LoopRelease,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The copy's config (no secret in it) and the environment that fills its references."""
    env: dict[str, str] = {}
    config = _scrubbed(copy.deepcopy(dict(original)), env)
    reference = f"${{{_KEY_ENV}}}"
    if endpoint is not None:
        _set(config, ("providers", "custom"), {"apiBase": endpoint})
        _set(config, ("agents", "defaults", "provider"), "custom")
    if key is not None:
        name = "custom" if endpoint is not None else provider_entry(original).name
        if name is None:
            raise ValueError("the nanobot config names no provider to give api_key= to")
        _set(config, ("providers", _camel(name), "apiKey"), reference)
        env[_KEY_ENV] = key
    _set(config, ("agents", "defaults", "workspace"), str(workspace))
    _set(config, ("agents", "defaults", "idleCompactAfterMinutes"), 0)
    config["agents"]["defaults"].pop("sessionTtlMinutes", None)
    for name, value in (agent_defaults or {}).items():
        _set(config, ("agents", "defaults", name), value)
    for name, path in release.outside_tools.items():
        if name not in enable:
            _set(config, path, False)
    _set(config, ("tools", "restrictToWorkspace"), "files" not in enable)
    tools = config["tools"]
    servers = tools.get("mcpServers") or tools.get("mcp_servers") or {}
    _set(
        config, ("tools", "mcpServers"), {n: s for n, s in servers.items() if f"mcp:{n}" in enable}
    )
    channels = config.get("channels")
    if isinstance(channels, dict):
        for entry in channels.values():
            if isinstance(entry, dict) and "enabled" in entry:
                entry["enabled"] = False
    return config, env


def _check_into(into: str | os.PathLike[str] | None, originals: Iterable[Path]) -> None:
    """Refuse ``into`` before anything is made: inside what is copied, under a missing
    folder, or holding anything already."""
    if into is None:
        return
    folder = Path(into).expanduser().resolve()
    for original in originals:
        if folder.is_relative_to(original):
            raise ValueError(f"into={str(into)!r} is inside {original}, which is copied")
    if not folder.parent.is_dir():
        raise FileNotFoundError(
            f"into={str(into)!r}: {folder.parent} does not exist (name a folder in an existing one)"
        )
    if folder.is_dir() and any(folder.iterdir()):
        raise FileExistsError(f"into={str(into)!r} is not empty; continuations never overwrite")


def _private_folder(into: str | os.PathLike[str] | None) -> Path:
    """``into`` (created 0700 when missing), else a new folder under ``continuations/`` of
    sessionkit's cache folder; refused when others could read or write there."""
    if into is None:
        root = default_cache_dir() / "continuations"
        problem = private_dir_problem(root)
        if problem is not None:
            raise PermissionError(f"sessionkit's cache folder {root} {problem}")
        folder = root / f"{datetime.now():%Y%m%dT%H%M%S}-{secrets.token_hex(4)}"
        make_private_dir(folder)
        return folder
    folder = Path(into).expanduser()
    problem = private_dir_problem(folder)
    if problem is not None:
        raise PermissionError(f"into={str(into)!r} {problem}")
    return folder


def _copy(workspace: Path, config_dir: Path | None, folder: Path) -> tuple[Path, Path]:
    """Copy the config dir (without one: make an empty one) and the workspace (once, when it
    lies inside the config dir)."""
    config_copy = folder / "config"
    if config_dir is None:
        make_private_dir(config_copy)
    else:
        shutil.copytree(config_dir, config_copy, symlinks=True)
    if config_dir is not None and workspace.is_relative_to(config_dir):
        return config_copy / workspace.relative_to(config_dir), config_copy
    workspace_copy = folder / "workspace"
    shutil.copytree(workspace, workspace_copy, symlinks=True)
    return workspace_copy, config_copy


def _claim(namespace: Path, config_dir: Path, config_copy: Path, workspace_copy: Path) -> None:
    """Point the copied namespace's ``.workspace`` marker at the copied workspace, so 0.3.5
    keeps using it there (a marker naming the original would make it start a new one)."""
    marker = config_copy / namespace.relative_to(config_dir) / ".workspace"
    marker.write_text(f"{workspace_copy}\n", encoding="utf-8")


def _child_env(home: Path, secrets_env: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without Python or proxy settings, HOME in the copy (so
    nothing nanobot writes under ``~`` lands in the user's home), plus the secrets."""
    dropped = ("PYTHON", "VIRTUAL_ENV", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(dropped)}
    env["HOME"] = str(home)
    env.update(secrets_env)
    return env


def _run(
    release: LoopRelease,
    python: Path,
    request: Mapping[str, Any],
    env: Mapping[str, str],
    cwd: Path,
) -> Any:
    script = resources.files("sessionkit.nanobot.probes").joinpath(release.probe)
    with resources.as_file(script) as path:
        proc = subprocess.run(
            [str(python), "-I", str(path)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=dict(env),
            cwd=cwd,
            timeout=request["timeout"] + 60,
            check=False,
        )
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-12:])
        raise ContinuationError(f"nanobot {release.version}'s loop failed in {cwd}:\n{tail}")
    return json.loads(proc.stdout)


def _drop_replaced(original: Session, root: Path, copy_root: Path, forked: Session) -> None:
    """Remove the original's file from the copy when the fork was written under another name
    (the release names files otherwise, or the original is a legacy file), so that the copy
    holds the session once."""
    if not original.path or not forked.path:
        return
    source = Path(original.path).resolve()
    if not source.is_relative_to(root):
        return
    copied = copy_root / source.relative_to(root)
    if copied.is_file() and copied.resolve() != Path(forked.path).resolve():
        copied.unlink()


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int of 1 or more, not {value!r}")
    return value


def continue_fork(
    source: Session | Corpus,
    key: str | None = None,
    *,
    before_user_index: int,
    max_turns: int,
    max_calls: int,
    edit: str,
    then: Sequence[str] = (),
    agent_defaults: Mapping[str, Any] | None = None,
    enable: Iterable[str] = (),
    workspace: str | os.PathLike[str] | None = None,
    config_dir: str | os.PathLike[str] | None = None,
    endpoint: str | None = None,
    api_key: str | None = None,
    into: str | os.PathLike[str] | None = None,
    nanobot: str | os.PathLike[str] | None = None,
    timeout: float = 600,
) -> Continuation:
    """Fork ``source`` before its ``before_user_index``-th user message and let its release's
    own agent loop answer from there (nanobot 0.3.5, 0.3.0 or 0.2.2 for ``nanobot-0.2``
    sessions; :mod:`sessionkit.nanobot.loop_releases`), in a private copy; the original is
    never touched.

    The fork (:func:`sessionkit.fork`, with lineage) replaces the session in the copy; the loop
    then gets ``edit`` (that user message rewritten, or asked again under other settings; an
    index past the last user message asks it at the end) and each of ``then`` as user turns on
    the session's channel, against ``endpoint`` (default: the config's provider) with
    ``api_key`` (default: the config's key), under the config's agent settings updated by
    ``agent_defaults`` (the release's ``agents.defaults`` names, e.g. ``contextWindowTokens``).
    A 0.2.2 or 0.3.0 workspace needs no config: without one the copy's starts from nanobot's
    defaults.
    ``max_turns`` refuses more turns up front; ``max_calls`` caps the provider calls (summary
    calls included): past it the release's provider refuses to send.

    Tools that reach past the copy (:data:`OUTSIDE_TOOLS`, MCP servers, channels, file tools
    outside the workspace) are off unless ``enable`` names them.  While none is enabled, the
    loop's process may connect to the endpoint's host and port only: any other connect or
    name lookup fails and is recorded in ``Continuation.connections`` (a tokenizer file the
    release would download too: it then falls back to its estimate, unless
    ``TIKTOKEN_CACHE_DIR`` holds the file).  ``into`` is the folder for the copy (new or empty,
    in an existing folder; default a new folder under ``continuations/`` in sessionkit's cache
    folder); ``nanobot`` the release's interpreter or venv (default: as
    :func:`~sessionkit.calls.installs.find_release` finds it).
    """
    session = resolve_session(source, key)
    release = loop_release(session.policy)
    if release is None:
        raise ValueError(refusal(session.key, session.policy))
    if (
        not isinstance(edit, str)
        or isinstance(then, str)
        or not all(isinstance(t, str) for t in then)
    ):
        raise TypeError("edit and each of then= must be the text of a user message")
    turns = [edit, *then]
    if _positive("max_turns", max_turns) < len(turns):
        raise ValueError(
            f"max_turns={max_turns} allows fewer turns than the {len(turns)} asked "
            "(the edited message plus then=)"
        )
    _positive("max_calls", max_calls)
    fork(session, session.key, before_user_index)  # the index checked before anything is made
    root = Path(workspace) if workspace is not None else workspace_of(session)
    if root is None or not root.is_dir():
        named = "names no workspace" if root is None else f"records workspace {root}, not there"
        raise ValueError(f"session {session.key!r} {named}: pass workspace=")
    config = config_file(config_dir) if config_dir is not None else config_of(root, session)
    if config is None and release.config_required:
        raise ValueError(f"no nanobot config found beside {root}: pass config_dir=")
    original_config = {} if config is None else json.loads(config.read_text(encoding="utf-8"))
    chosen = _checked_enable(enable, original_config, release)
    aim = target(config, endpoint, api_key, None)
    namespace = None
    if config is not None and release.sessions_in_config_dir:
        namespace = sessions_dir_035(root, config)
        if namespace is None:
            raise ValueError(f"{root} has no 0.3.5 sessions folder under {config_folder(config)}")
    config_home = None if config is None else config_folder(config).resolve()
    _check_into(into, (root.resolve(), *([config_home] if config_home else [])))
    python = find_release(release.version, nanobot)

    folder = _private_folder(into)
    workspace_copy, config_copy = _copy(root.resolve(), config_home, folder)
    if namespace is not None and config_home is not None:
        _claim(namespace, config_home, config_copy, workspace_copy)
    home = folder / "home"
    make_private_dir(home)
    private, secrets_env = _private_config(
        original_config,
        workspace_copy,
        endpoint,
        api_key if endpoint is None else aim.key,
        chosen,
        agent_defaults,
        release,
    )
    config_path = config_copy / (config.name if config is not None else "config.json")
    config_path.write_text(json.dumps(private, indent=2), encoding="utf-8")
    forked = fork(
        session,
        session.key,
        before_user_index,
        sessions_dir=workspace_copy,
        config_dir=config_path,
        overwrite=True,
        lineage=True,
    )
    _drop_replaced(session, root.resolve(), workspace_copy, forked)
    parts = urlsplit(aim.url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    reaching = chosen - {"files"}
    log = folder / "connections.jsonl"
    request = {
        "config": str(config_path),
        "workspace": str(workspace_copy),
        "session": session.key,
        "turns": turns,
        "max_calls": max_calls,
        "allowed": None if reaching else [[parts.hostname, port]],
        "connections": str(log),
        "timeout": timeout,
    }
    answer = _run(release, python, request, _child_env(home, secrets_env), folder)
    corpus = load(workspace_copy, config_dir=config_path, cache=False)
    return Continuation(
        original=session,
        fork=forked,
        continued=corpus[session.key],
        corpus=corpus,
        folder=folder,
        workspace=workspace_copy,
        config_dir=config_copy,
        replies=[t["replies"] for t in answer["turns"]],
        calls=answer["calls"],
        budget_hit=answer["budget_hit"],
        connections=_connections(log),
    )


def _connections(log: Path) -> list[dict[str, Any]]:
    with contextlib.suppress(FileNotFoundError):
        return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    return []
