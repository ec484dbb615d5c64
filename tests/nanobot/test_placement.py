"""Whether each release reads a session file from where it lies: 0.3.5's per-workspace folder
and base64url names, 0.3.0's and 0.2's file names, a shadowing file beside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessionkit.nanobot.placement import placement_problem
from sessionkit.nanobot.workspace import WORKSPACE_ID_FILE

WORKSPACE_ID = "3f" * 16
B64 = "Y2xpOmRpcmVjdA.jsonl"  # base64url of "cli:direct"
WHO = "not read from here by nanobot 0.3.5: "


def session_file(path: Path, key: str = "cli:direct") -> Path:
    """A 0.3.5 session file: metadata with last_archived, one exchange."""
    meta = {"_type": "metadata", "key": key, "created_at": "2026-04-02T08:00:00",
            "updated_at": "2026-04-02T08:01:00", "metadata": {}, "last_consolidated": 0,
            "last_archived": 0}  # fmt: skip
    user = {"role": "user", "content": "status?", "timestamp": "2026-04-02T08:00:00"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta) + "\n" + json.dumps(user) + "\n", encoding="utf-8")
    return path


def store_035(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A 0.3.5 config dir with one workspace's namespace: (config dir, workspace, namespace)."""
    config, workspace = tmp_path / "config", tmp_path / "ws"
    (workspace / WORKSPACE_ID_FILE).parent.mkdir(parents=True)
    (workspace / WORKSPACE_ID_FILE).write_text(WORKSPACE_ID)
    namespace = config / "sessions" / WORKSPACE_ID
    namespace.mkdir(parents=True)
    (namespace / ".workspace").write_text(str(workspace.resolve()))
    return config, workspace, namespace


def test_035_reads_a_namespace_file_under_its_base64url_name_only(tmp_path: Path) -> None:
    _, _, namespace = store_035(tmp_path)
    read = session_file(namespace / B64)
    assert placement_problem(read, "cli:direct", "nanobot-0.3.5") is None
    migrated = session_file(namespace / "cli_direct.jsonl")
    assert placement_problem(migrated, "cli:direct", "nanobot-0.3.5") == (
        f"{WHO}it reads a session only under its base64url name, 'cli:direct' from {B64} "
        "(that file, beside it, is what it reads); this file stays unread"
    )
    read.unlink()
    assert placement_problem(migrated, "cli:direct", "nanobot-0.3.5") == (
        f"{WHO}it reads a session only under its base64url name, 'cli:direct' from {B64}; "
        "this file stays unread"
    )


def test_035_moves_a_workspace_sessions_file_or_has_moved_it(tmp_path: Path) -> None:
    config, workspace, namespace = store_035(tmp_path)
    legacy = session_file(workspace / "sessions" / "cli_direct.jsonl")
    target = f"{namespace.resolve()}/"
    assert placement_problem(legacy, "cli:direct", "nanobot-0.3.5", config) == (
        f"{WHO}it moves this file to {target}cli_direct.jsonl when it starts on this "
        f"workspace, and reads 'cli:direct' there only from {B64}"
    )
    session_file(namespace / "cli_direct.jsonl")
    assert placement_problem(legacy, "cli:direct", "nanobot-0.3.5", config) == (
        f"{WHO}it has already moved this workspace's sessions to {target} (a copy named "
        "cli_direct.jsonl is there: it keeps the newer of the two and removes this file when it "
        f"next starts), and reads 'cli:direct' only from {B64} there"
    )
    assert placement_problem(legacy, "cli:direct", "nanobot-0.3.5") == (  # config dir unknown
        f"{WHO}it moves this file to <config dir>/sessions/<workspace id>/cli_direct.jsonl when "
        f"it starts on this workspace, and reads 'cli:direct' there only from {B64}"
    )


@pytest.mark.parametrize("policy", ["nanobot-0.3.5", "nanobot-0.3.0", "nanobot-0.2"])
def test_a_copy_outside_any_sessions_layout_and_legacy_json_are_not_judged(
    tmp_path: Path, policy: str
) -> None:
    copy = session_file(tmp_path / "backup" / "cli_direct.jsonl")
    assert placement_problem(copy, "cli:direct", policy) is None
    old = tmp_path / "sessions" / "cli_direct.json"
    old.parent.mkdir()
    old.write_text('{"key": "cli:direct", "history": []}')
    assert placement_problem(old, "cli:direct", policy) is None


def test_030_and_02_leave_a_file_shadowed_by_the_name_they_read(tmp_path: Path) -> None:
    folder = tmp_path / "ws" / "sessions"
    safe = session_file(folder / "cli_direct.jsonl")
    assert placement_problem(safe, "cli:direct", "nanobot-0.3.0") is None  # renamed on load
    b64 = session_file(folder / B64)
    assert placement_problem(safe, "cli:direct", "nanobot-0.3.0") == (
        f"not read from here by nanobot 0.3.0: it reads 'cli:direct' from {B64} beside it, "
        "never this file"
    )
    assert placement_problem(b64, "cli:direct", "nanobot-0.3.0") is None
    assert placement_problem(safe, "cli:direct", "nanobot-0.2") is None
    assert placement_problem(b64, "cli:direct", "nanobot-0.2") == (
        "not read from here by nanobot 0.2.2: it reads 'cli:direct' from cli_direct.jsonl "
        "beside it, never this file"
    )
