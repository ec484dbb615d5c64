"""Multi-step scenarios run inside a release's environment by ``release_harness.py``.

Stdlib only (plus the release itself).  Each function takes JSON-able arguments and returns
JSON-able results, so ``Release.run("release_scenarios:<name>", cases)`` can call it.
"""

from __future__ import annotations

import json
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any


def _manager(root: Path) -> Any:
    """The release's own ``SessionManager`` over a scratch workspace (never the user's)."""
    import inspect

    from nanobot.session.manager import SessionManager

    workspace = root / "workspace"
    workspace.mkdir()
    if "sessions_root" in inspect.signature(SessionManager).parameters:
        return SessionManager(workspace, sessions_root=root / "sessions-root")
    return SessionManager(workspace)


def fork_file(source: dict[str, Any], target_key: str, before_user_index: int) -> Any:
    """Save ``source`` with the release's store, fork it, and return the fork's file.

    ``source`` holds ``Session`` fields (``created_at``/``updated_at`` as ISO text).  Returns
    ``None`` when the release refuses the fork, else ``{"name": file name, "lines": [...]}``.
    """
    from nanobot.session.manager import Session

    with tempfile.TemporaryDirectory() as tmp:
        manager = _manager(Path(tmp))
        fields = dict(source)
        for stamp in ("created_at", "updated_at"):
            fields[stamp] = datetime.fromisoformat(fields[stamp])
        manager.save(Session(**fields))
        before = set(manager.sessions_dir.glob("*.jsonl"))
        fork = manager.fork_session_before_user_index(source["key"], target_key, before_user_index)
        if fork is None:
            return None
        (path,) = set(manager.sessions_dir.glob("*.jsonl")) - before
        return {"name": path.name, "lines": path.read_text(encoding="utf-8").splitlines()}


def load_file(name: str, text: str) -> Any:
    """Put a session file named ``name`` in a fresh store and load it with the release.

    Returns the loaded session's key, messages, metadata and offset, or ``None``.
    """
    with tempfile.TemporaryDirectory() as tmp:
        manager = _manager(Path(tmp))
        (manager.sessions_dir / name).write_text(text, encoding="utf-8")
        first = json.loads(text.splitlines()[0])
        session = manager._load(first["key"])
        if session is None:
            return None
        return {
            "key": session.key,
            "messages": session.messages,
            "metadata": session.metadata,
            "last_consolidated": session.last_consolidated,
        }


def make_workspace(root: str, sessions: list[dict[str, Any]]) -> Any:
    """Write ``sessions`` with the release's own store into ``<root>/workspace`` (0.3.5: its
    sessions live in ``<root>/config/sessions/<id>/``); return where the files went.

    Each session dict holds ``key``, ``messages``, ``metadata`` and optionally
    ``checkpoint`` (``commit_summary_checkpoint`` keyword arguments), ``runtime_checkpoint``
    (an unfinished turn's state, saved to the 0.3.5 sidecar) or ``last_consolidated``.
    """
    import inspect

    from nanobot.session.manager import Session, SessionManager

    base = Path(root)
    workspace = base / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    if "sessions_root" in inspect.signature(SessionManager).parameters:
        manager = SessionManager(workspace, sessions_root=base / "config" / "sessions")
    else:
        manager = SessionManager(workspace)
    for spec in sessions:
        session = Session(key=spec["key"], messages=spec["messages"], metadata=spec["metadata"])
        if "last_consolidated" in spec:
            session.last_consolidated = spec["last_consolidated"]
        if "checkpoint" in spec:
            session.commit_summary_checkpoint(**spec["checkpoint"])
        manager.save(session)
        if "runtime_checkpoint" in spec:
            session.metadata["runtime_checkpoint"] = spec["runtime_checkpoint"]
            manager.save_runtime_checkpoint(session)
    return {
        "sessions_dir": str(manager.sessions_dir),
        "files": sorted(p.name for p in Path(manager.sessions_dir).iterdir()),
    }


def workspace_sessions(config_file: str, workspace: str) -> Any:
    """The sessions 0.3.5 finds for ``workspace`` when run with ``--config config_file``:
    the config path set as its CLI sets it, the store built with no ``sessions_root``, so the
    release derives ``<config dir>/sessions/<workspace id>/`` itself.

    Returns the sessions folder, the keys ``list_sessions`` lists and each one as loaded.
    """
    from nanobot.config.loader import set_config_path
    from nanobot.session.manager import SessionManager

    set_config_path(Path(config_file))
    manager = SessionManager(Path(workspace))
    keys = sorted(info["key"] for info in manager.list_sessions())
    loaded = {}
    for key in keys:
        session = manager._load(key)
        loaded[key] = (
            None
            if session is None
            else {
                "messages": session.messages,
                "metadata": session.metadata,
                "last_consolidated": session.last_consolidated,
            }
        )
    return {"sessions_dir": str(manager.sessions_dir), "keys": keys, "sessions": loaded}


def read_store(files: dict[str, str]) -> Any:
    """Put session files (name: text) in a fresh store, list them and load each listed key
    with the release, as its agent does: per key, the file it came from, the messages loaded,
    each one's token estimate (``None`` where the release raises) and ``get_history()``."""
    from nanobot.utils.helpers import estimate_message_tokens

    def estimate(message: dict[str, Any]) -> Any:
        try:
            return estimate_message_tokens(message)
        except Exception:
            return None

    with tempfile.TemporaryDirectory() as tmp:
        manager = _manager(Path(tmp))
        for name, text in files.items():
            (manager.sessions_dir / name).write_text(text, encoding="utf-8")
        found = {}
        for info in manager.list_sessions():
            session = manager._load(info["key"])
            found[info["key"]] = {
                "file": Path(info["path"]).name,
                "messages": None if session is None else session.messages,
                "tokens": None if session is None else list(map(estimate, session.messages)),
                "history": None if session is None else session.get_history(),
            }
        return found


def listed_keys(names: list[str], text: str) -> Any:
    """Each file the release's ``list_sessions`` lists when a fresh store holds ``text`` under
    each of ``names``: its key, by file name (a name it leaves out is missing)."""
    with tempfile.TemporaryDirectory() as tmp:
        manager = _manager(Path(tmp))
        for name in names:
            (manager.sessions_dir / name).write_text(text, encoding="utf-8")
        return {Path(info["path"]).name: info["key"] for info in manager.list_sessions()}


def migrate_exec(messages: list[dict[str, Any]], metadata: dict[str, Any]) -> Any:
    """0.3.5's load-time rewrite of legacy exec records applied to ``messages`` and
    ``metadata``: whether it changed anything, and both afterwards."""
    from nanobot.session.manager import _migrate_legacy_exec_session_records

    changed = _migrate_legacy_exec_session_records(messages, metadata)
    return {"changed": changed, "messages": messages, "metadata": metadata}
