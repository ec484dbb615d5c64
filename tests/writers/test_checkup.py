"""sessionkit.writers.checkup: what nanobot 0.2.2 would lose, and a fix it then loads in full."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest

from sessionkit.cli import main
from sessionkit.nanobot.loss import nanobot_load, split_lines
from sessionkit.nanobot.reader import SessionPathError, read_session_file
from sessionkit.nanobot.writer import LOCK_FILENAME
from sessionkit.writers.checkup import COLUMNS, doctor, fix, has_problems

META = '{"_type": "metadata", "key": "t:1", "created_at": "2025-01-01T00:00:00", "metadata": {}}'
USER = '{"role": "user", "content": "hi"}'
REPLY = '{"role": "assistant", "content": "café"}'

# file, nanobot_keeps, sessionkit_keeps, nanobot_loses, next_save_overwrites, fix
DAMAGED_REPORT = [
    ("damaged_blank_lines.jsonl", 0, 0, "nothing", False, ""),
    (
        "damaged_created_at_not_iso.jsonl",
        31,
        31,
        "created_at '30/11/2026 09:15' (not ISO)",
        True,
        "",
    ),
    ("damaged_crlf_line_endings.jsonl", 27, 27, "nothing", False, ""),
    ("damaged_empty.jsonl", 0, 0, "nothing", False, ""),
    (
        "damaged_invalid_utf8.jsonl",
        pd.NA,
        29,
        "whole session (line 16: not valid UTF-8 (byte 32))",
        True,
        "rewrite without line 16 (kept in the backup)",
    ),
    (
        "damaged_last_consolidated_out_of_range.jsonl",
        25,
        25,
        "last_consolidated 999999 (reset to 0)",
        True,
        "",
    ),
    (
        "damaged_last_consolidated_string.jsonl",
        37,
        37,
        "last_consolidated '7' (reset to 0)",
        True,
        "",
    ),
    (
        "damaged_non_object_array.jsonl",
        pd.NA,
        21,
        "whole session (line 12: JSON array, not an object)",
        True,
        "rewrite without line 12 (kept in the backup)",
    ),
    (
        "damaged_non_object_string.jsonl",
        pd.NA,
        42,
        "whole session (line 22: JSON string, not an object)",
        True,
        "rewrite without line 22 (kept in the backup)",
    ),
    (
        "damaged_not_json_line.jsonl",
        36,
        36,
        "line 19 (not JSON)",
        True,
        "rewrite without line 19 (kept in the backup)",
    ),
    (
        "damaged_several_problems.jsonl",
        31,
        31,
        "lines 7, 35 (not JSON); created_at 'yesterday' (not ISO); "
        "last_consolidated 999999 (reset to 0)",
        True,
        "rewrite without lines 7, 35 (kept in the backup)",
    ),
    (
        "damaged_truncated_last_line.jsonl",
        44,
        44,
        "line 46 (not JSON)",
        True,
        "rewrite without line 46 (kept in the backup)",
    ),
]
FIXED = {row[0] for row in DAMAGED_REPORT if row[5]}


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def damaged(tmp_path: Path, data_dir: Path) -> Path:
    """A copy of ``data/damaged`` in a folder of its own."""
    folder = tmp_path / "sessions"
    shutil.copytree(data_dir / "damaged", folder)
    return folder


def test_report_on_the_bundled_damaged_files(damaged):
    before = _listing(damaged)
    report = doctor(damaged)
    assert list(report.columns) == COLUMNS
    assert set(report["kind"]) == {"session"}
    shown = report[
        [
            "file",
            "nanobot_keeps",
            "sessionkit_keeps",
            "nanobot_loses",
            "next_save_overwrites",
            "fix",
        ]
    ]
    expected = pd.DataFrame(DAMAGED_REPORT, columns=shown.columns).astype(
        {"nanobot_keeps": "Int64", "sessionkit_keeps": "Int64"}
    )
    pd.testing.assert_frame_equal(shown, expected)
    assert report.loc[4, "problems"] == "line 16: not valid UTF-8 (byte 32)"
    assert report.loc[0, "path"] == str(damaged / "damaged_blank_lines.jsonl")
    assert _listing(damaged) == before


def test_clean_store_loses_nothing(data_dir):
    report = doctor(data_dir / "sessions").set_index("file")
    assert len(report) == 15
    legacy = report.loc["legacy_chat.json"]
    assert (legacy["kind"], legacy["nanobot_loses"]) == (
        "legacy JSON session",
        "not read: nanobot 0.2.2 reads only .jsonl files",
    )
    # The one file 0.3.5 wrote is described in 0.3.5's terms, not measured by 0.2.2's rule.
    later = report.loc["d2VidWk6ZGVmNDU2.jsonl"]
    assert (later["policy"], later["nanobot_loses"]) == (
        "nanobot-0.3.5",
        "not known (only nanobot 0.2.2's loss rule is known)",
    )
    assert (
        pd.isna(later["nanobot_keeps"]) and later["sessionkit_keeps"] == 315
    )  # 314 messages, 1 record
    assert not later["next_save_overwrites"] and later["fix"] == ""
    sessions = report.drop(["legacy_chat.json", "d2VidWk6ZGVmNDU2.jsonl"])
    assert set(sessions["policy"]) == {"nanobot-0.2"}
    assert set(sessions["nanobot_loses"]) == {"nothing"} and set(sessions["fix"]) == {""}
    assert (sessions["nanobot_keeps"] == sessions["sessionkit_keeps"]).all()
    assert not has_problems(report)


def test_checkpoint_sidecars_are_not_listed(tmp_path, data_dir):
    folder = tmp_path / "sessions"
    folder.mkdir()
    shutil.copy(data_dir / "sessions" / "d2VidWk6ZGVmNDU2.jsonl", folder)
    (folder / "d2VidWk6ZGVmNDU2.checkpoint.json").write_text('{"checkpoint": {"step": 1}}')
    (folder / ".webui_session_index.json").write_text('{"version": 8, "rows": []}')
    report = doctor(folder)
    assert list(report["file"]) == ["d2VidWk6ZGVmNDU2.jsonl"]
    assert list(report["kind"]) == ["session"]


def test_damaged_store_has_problems(damaged):
    assert has_problems(doctor(damaged))
    assert has_problems(doctor(damaged / "damaged_empty.jsonl"))  # "empty file: no records"
    assert not has_problems(doctor(damaged / "damaged_crlf_line_endings.jsonl"))


def test_what_is_not_a_session_store_is_refused(tmp_path, monkeypatch):
    (tmp_path / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(SessionPathError, match=r"passwd is not a session store; pass a nanobot"):
        doctor(tmp_path / "passwd")
    (tmp_path / "t_1.jsonl").write_text(f"{META}\n{USER}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SessionPathError, match="an empty path names no session store"):
        doctor("")
    (tmp_path / "t_1.jsonl").unlink()
    with pytest.raises(SessionPathError, match="holds no session files"):
        doctor(tmp_path)


def test_a_workspace_and_a_single_file(tmp_path, damaged):
    workspace = damaged.parent
    assert len(doctor(workspace)) == 12
    one = doctor(damaged / "damaged_non_object_array.jsonl")
    assert list(one["file"]) == ["damaged_non_object_array.jsonl"]


def test_missing_path(tmp_path):
    with pytest.raises(SessionPathError, match="no such file or folder"):
        doctor(tmp_path / "nope")


def test_temp_files_and_oddities_are_reported(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "t_1.jsonl").write_text(f"{META}\n{USER}\n")
    (folder / ".t_1.0123456789ab.tmp").write_bytes(b"partial")
    (folder / "t_2.jsonl.tmp").write_bytes(b"nanobot's partial")
    os.mkfifo(folder / "fifo_1.jsonl")
    (folder / "dir_1.jsonl").mkdir()
    (folder / "gone_1.jsonl").symlink_to(folder / "nowhere")
    (folder / "loop_1.jsonl").symlink_to(folder / "loop_1.jsonl")
    os.mkfifo(folder / LOCK_FILENAME)
    (folder / "notes.txt").write_text("not a session")
    (folder / ".._.._etc_evil.jsonl").write_text(f"{META}\n")
    report = doctor(folder).set_index("file")
    assert report["kind"].to_dict() == {
        ".._.._etc_evil.jsonl": "session",
        ".session-files.lock": "lock file",
        ".t_1.0123456789ab.tmp": "temp file",
        "dir_1.jsonl": "folder",
        "fifo_1.jsonl": "FIFO",
        "gone_1.jsonl": "broken symlink",
        "loop_1.jsonl": "broken symlink",
        "t_1.jsonl": "session",
        "t_2.jsonl.tmp": "temp file",
    }
    assert report.loc[".t_1.0123456789ab.tmp", "fix"] == "move to the backup folder"
    assert report.loc["fifo_1.jsonl", "problems"] == (
        "named like a session but a FIFO; no session loads from it"
    )
    assert report.loc[LOCK_FILENAME, "problems"] == (
        "a FIFO, not a regular file: sessionkit refuses to save here"
    )
    assert report.loc["loop_1.jsonl", "fix"].startswith("by hand: ")
    assert report.loc[".._.._etc_evil.jsonl", "problems"] == (
        "hidden file name, as a path-like key makes; sessionkit now refuses such keys; not read "
        "from here by nanobot 0.2.2: it reads 't:1' from t_1.jsonl beside it, never this file"
    )


def test_an_unreadable_file_is_lost_to_nanobot(damaged, monkeypatch):
    import sessionkit.writers.checkup as doctor_module

    def deny(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(doctor_module, "open", deny, raising=False)
    row = doctor(damaged / "damaged_not_json_line.jsonl").iloc[0]
    assert (row["nanobot_loses"], row["next_save_overwrites"], row["fix"]) == (
        "whole session (unreadable: Permission denied)",
        True,
        "by hand: make the file readable",
    )


def test_fix_mends_backs_up_and_is_idempotent(tmp_path, damaged):
    originals = _listing(damaged)
    (damaged / ".x_1.0123456789ab.tmp").write_bytes(b"partial")
    backup = tmp_path / "backup"
    done = fix(damaged, backup_dir=backup)
    assert sorted(done["file"]) == sorted([*FIXED, ".x_1.0123456789ab.tmp"])
    row = done.set_index("file").loc["damaged_non_object_array.jsonl"]
    assert row["fix"] == (
        f"rewrote without line 12; original in {backup / 'damaged_non_object_array.jsonl'}"
    )
    saved = _listing(backup)
    assert sorted(saved) == sorted(
        [".x_1.0123456789ab.tmp", *FIXED, *(f"{name}.damaged-lines.txt" for name in FIXED)]
    )
    assert saved[".x_1.0123456789ab.tmp"] == b"partial"
    assert all(saved[name] == originals[name] for name in FIXED)
    lost = json.loads(_listing(backup)["damaged_non_object_array.jsonl.damaged-lines.txt"])
    assert lost == {"line_no": 12, "reason": "JSON array, not an object", "text": "[1, 2]"}
    fixed = (damaged / "damaged_not_json_line.jsonl").read_bytes().splitlines()
    kept = originals["damaged_not_json_line.jsonl"].splitlines()
    assert fixed == kept[:18] + kept[19:]
    for name in set(originals) - FIXED:
        assert (damaged / name).read_bytes() == originals[name]

    after = _listing(damaged)
    assert fix(damaged, backup_dir=backup).empty
    assert _listing(damaged) == after
    assert not doctor(damaged)["fix"].astype(bool).any()


def test_default_backup_folder_is_next_to_the_sessions_folder(damaged):
    fix(damaged)
    (backup,) = damaged.parent.glob("sessionkit-doctor-backup-*")
    assert sorted(p.name for p in damaged.parent.iterdir()) == sorted(["sessions", backup.name])
    assert len(list(backup.iterdir())) == 2 * len(FIXED)


def test_a_clean_store_makes_no_backup_folder(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "t_1.jsonl").write_text(f"{META}\n{USER}\n")
    assert fix(folder).empty
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sessions"]


def test_backup_inside_the_sessions_folder_is_refused(damaged):
    before = _listing(damaged)
    with pytest.raises(ValueError, match="is inside the sessions folder"):
        fix(damaged, backup_dir=damaged / "backup")
    assert _listing(damaged) == before and not (damaged / "backup").exists()


def test_a_backup_folder_under_a_missing_folder_is_refused_unless_create(damaged, tmp_path):
    before = _listing(damaged)
    backup = tmp_path / "typo" / "backup"
    with pytest.raises(FileNotFoundError, match="name an existing folder, or pass create=True"):
        fix(damaged, backup_dir=backup)
    assert _listing(damaged) == before and not (tmp_path / "typo").exists()
    assert main(["doctor", str(damaged), "--fix", "--backup-dir", str(backup)]) == 1
    assert _listing(damaged) == before
    assert not fix(damaged, backup_dir=backup, create=True).empty
    assert backup.is_dir()


def _generated() -> list[str]:
    """Damaged files: clean lines with bad ones spliced in at every position."""
    bad = ["{oops", "[1, 2]", '"text"', '{"n": ' + "7" * 5000 + "}", "null"]
    files = []
    for line in bad:
        for at in range(4):
            lines = [META, USER, REPLY, USER]
            lines.insert(at, line)
            files.append("\n".join(lines) + "\n")
    files.append(f"{USER}\n[1]\n")
    files.append(f'{META}\n{{"_type": "metadata", "created_at": "x", "metadata": {{}}}}\n[1]\n')
    return files


def _nanobot_messages(nanobot: ModuleType, file: Path, workspace: Path) -> list | None:
    sessions = workspace / "sessions"
    sessions.mkdir(parents=True)
    shutil.copyfile(file, sessions / "probe.jsonl")
    manager = nanobot.SessionManager(workspace)
    manager.legacy_sessions_dir = workspace / "no-legacy"
    session = manager._load("probe")
    return None if session is None else session.messages


def _intact(file: Path) -> list[dict]:
    """sessionkit's messages of ``file``, less lines Python's json cannot read at all."""
    session, _ = read_session_file(file)
    with open(file, "rb") as stream:
        unreadable = set(nanobot_load(split_lines(stream)).damaged_lines)
    return [
        m
        for m, n in zip(session.messages, session.line_numbers, strict=True)
        if n not in unreadable
    ]


@pytest.mark.conformance
def test_nanobot_loads_every_fixed_file_in_full(nanobot, tmp_path, data_dir):
    folder = tmp_path / "sessions"
    shutil.copytree(data_dir / "damaged", folder)
    for n, text in enumerate(_generated()):
        (folder / f"gen_{n}.jsonl").write_bytes(text.encode())
    intact = {p.name: _intact(p) for p in folder.iterdir()}
    done = fix(folder, backup_dir=tmp_path / "backup")
    assert len(done) == 6 + 22
    for n, name in enumerate(sorted(intact)):
        theirs = _nanobot_messages(nanobot, folder / name, tmp_path / f"ws{n}")
        # None only for a file with no message and empty metadata: nothing to lose.
        assert (theirs if theirs is not None else []) == intact[name], name


def _disk_full_at(monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    """The ``call``-th ``os.fsync`` from now fails as a full disk would (later ones pass)."""
    import errno

    real, calls = os.fsync, []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == call:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize(
    ("call", "stage"),
    [(1, "backing up"), (2, "backing up"), (3, "rewriting")],
    ids=["backup-copy", "damaged-lines", "mended-file"],
)
def test_fix_on_a_full_disk_leaves_the_original_byte_identical(
    tmp_path, damaged, monkeypatch, call, stage
):
    name = "damaged_not_json_line.jsonl"
    target = damaged / name
    before = _listing(damaged)
    backup = tmp_path / "backup"
    _disk_full_at(monkeypatch, call)
    with pytest.raises(OSError, match=f"{stage} {name}.*disk full.*is unchanged") as raised:
        fix(target, backup_dir=backup)
    assert "\n" not in str(raised.value.strerror)
    assert _listing(damaged) == before  # no temp file left, the original byte-identical
    kept = _listing(backup) if backup.exists() else {}
    assert not [n for n in kept if n.endswith(".tmp")]  # no half-written temp file
    assert all(kept[n] == before[name] for n in kept if n == name)  # a backup is whole or absent
    if call == 1:
        assert kept == {}


def test_doctor_names_a_file_its_release_never_reads(tmp_path, capsys):
    from tests.nanobot.test_placement import B64, WHO, session_file, store_035

    config, workspace, namespace = store_035(tmp_path)
    session_file(namespace / B64)
    legacy = session_file(workspace / "sessions" / "cli_direct.jsonl")
    reason = (
        f"{WHO}it has already moved this workspace's sessions to {namespace.resolve()}/ (a copy "
        "named cli_direct.jsonl is there: it keeps the newer of the two and removes this file "
        f"when it next starts), and reads 'cli:direct' only from {B64} there"
    )
    session_file(namespace / "cli_direct.jsonl")
    row = doctor(legacy, config_dir=config).iloc[0]
    assert (row.policy, row.nanobot_loses, row.problems) == (
        "nanobot-0.3.5",
        f"whole session ({reason})",
        reason,
    )
    assert main(["doctor", str(legacy), "--config-dir", str(config)]) == 1
    assert f"nanobot-0.3.5 loses: whole session ({reason})" in capsys.readouterr().out
