"""The ``sessionkit`` command on a tiny store: exact summary and problems output, version."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import unicodedata
import warnings
from pathlib import Path
from typing import Any

import pytest

import sessionkit
from sessionkit.cli import main

TELEGRAM = [
    {
        "_type": "metadata",
        "key": "telegram:42",
        "created_at": "2026-03-01T09:00:00",
        "updated_at": "2026-03-01T09:05:00",
        "metadata": {"title": "<think>naming</think>Weekend trip"},
        "last_consolidated": 1,
    },
    {"role": "user", "content": "plan a trip", "timestamp": "2026-03-01T09:00:00"},
    {"role": "assistant", "content": "Sure, where to?", "timestamp": "2026-03-01T09:00:05"},
    {"role": "user", "content": "Lisbon", "timestamp": "2026-03-01T09:01:00.654321"},
]
CLI = [
    {
        "_type": "metadata",
        "key": "cli:direct",
        "created_at": "2026-03-02T10:00:00",
        "updated_at": "2026-03-02T10:00:00",
        "metadata": {},
        "last_consolidated": 0,
    },
    {"role": "user", "content": "hello world"},
    {"role": "assistant", "content": "hi"},
]


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws" / "sessions"
    folder.mkdir(parents=True)
    _write(folder / "telegram_42.jsonl", TELEGRAM)
    _write(folder / "cli_direct.jsonl", CLI)
    return tmp_path / "ws"


def test_table(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(workspace)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "        key      format  n_messages  n_user_turns  last_consolidated  tokens"
        "    first_message_at            last_message_at        title",
        " cli:direct nanobot-0.2           2             1                  0      11"
        "                   -                          -             ",
        "telegram:42 nanobot-0.2           3             2                  1      23"
        " 2026-03-01 09:00:00 2026-03-01 09:01:00.654321 Weekend trip",
        "      TOTAL                       5             3                         34"
        " 2026-03-01 09:00:00 2026-03-01 09:01:00.654321             ",
    ]
    assert err == ""


def _columns(line: str) -> str:
    """``line`` as the terminal lays it out: a wide (W/F) character takes two columns."""
    return "".join(c + "\0" if unicodedata.east_asian_width(c) in "WF" else c for c in line)


def test_table_aligns_wide_characters(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = workspace / "sessions" / "telegram_42.jsonl"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("<think>naming</think>Weekend trip", "东京周末旅行计划"), "utf-8")
    assert main(["summary", str(workspace)]) == 0
    lines = [_columns(line) for line in capsys.readouterr().out.splitlines()]
    assert _columns("东京周末旅行计划") in lines[2]
    assert {len(line) for line in lines} == {len(lines[0])}
    for header in ["key", "format", "tokens", "first_message_at", "last_message_at"]:
        edge = lines[0].index(header) + len(header)
        assert [line[edge] for line in lines] == [" "] * 4, header


def test_csv(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(workspace), "--format", "csv"]) == 0
    assert capsys.readouterr().out == (
        "key,format,n_messages,n_user_turns,last_consolidated,tokens,first_message_at,"
        "last_message_at,title\n"
        "cli:direct,nanobot-0.2,2,1,0,11,,,\n"
        "telegram:42,nanobot-0.2,3,2,1,23,2026-03-01 09:00:00,2026-03-01 09:01:00.654321,"
        "Weekend trip\n"
    )


def test_csv_with_fallback_tokens(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(workspace), "--format", "csv", "--tokens", "fallback"]) == 0
    rows = [line.split(",") for line in capsys.readouterr().out.splitlines()]
    # chars // 4 + 4 per message: cli 6 + 4, telegram 6 + 7 + 5.
    assert [(row[0], row[5]) for row in rows[1:]] == [("cli:direct", "10"), ("telegram:42", "18")]


def test_json(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(workspace), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {
            "key": "cli:direct",
            "format": "nanobot-0.2",
            "n_messages": 2,
            "n_user_turns": 1,
            "last_consolidated": 0,
            "tokens": 11,
            "first_message_at": None,
            "last_message_at": None,
            "title": "",
        },
        {
            "key": "telegram:42",
            "format": "nanobot-0.2",
            "n_messages": 3,
            "n_user_turns": 2,
            "last_consolidated": 1,
            "tokens": 23,
            "first_message_at": "2026-03-01T09:00:00.000000",
            "last_message_at": "2026-03-01T09:01:00.654321",
            "title": "Weekend trip",
        },
    ]


def test_single_file_and_problems_note(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    damaged = workspace / "sessions" / "cli_direct.jsonl"
    damaged.write_text(damaged.read_text(encoding="utf-8") + "not json\n", encoding="utf-8")
    assert main(["summary", str(damaged), "--format", "csv"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[1:] == ["cli:direct,nanobot-0.2,2,1,0,11,,,"]
    assert err == f"1 problem(s) found; see `sessionkit problems {damaged}`\n"


@pytest.fixture
def damaged(workspace: Path) -> Path:
    """The workspace with a bad line 4 in cli_direct.jsonl; returns that file."""
    path = workspace / "sessions" / "cli_direct.jsonl"
    path.write_text(path.read_text(encoding="utf-8") + "[1, 2]\n", encoding="utf-8")
    return path


def test_problems_table(workspace: Path, damaged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["problems", str(workspace)]) == 1
    out, err = capsys.readouterr()
    width = len(str(damaged))
    assert out.splitlines() == [
        f"{'path':>{width}}  line_no                    reason",
        f"{damaged}        4 JSON array, not an object",
    ]
    assert err == ""


def test_problems_csv_and_json(
    workspace: Path, damaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["problems", str(workspace), "--format", "csv"]) == 1
    assert (
        capsys.readouterr().out == f'path,line_no,reason\n{damaged},4,"JSON array, not an object"\n'
    )
    assert main(["problems", str(workspace), "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out) == [
        {"path": str(damaged), "line_no": 4, "reason": "JSON array, not an object"}
    ]


def test_no_problems(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["problems", str(workspace)]) == 0
    assert capsys.readouterr().out == "no problems found\n"
    assert main(["problems", str(workspace), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_no_sessions_loaded_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "chat.json").write_text("[1, 2]", encoding="utf-8")
    assert main(["summary", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"sessionkit: error: no session could be loaded from {tmp_path} "
        f"(1 problem(s); see `sessionkit problems {tmp_path}`)\n"
    )


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert sessionkit.__version__ == importlib.metadata.version("sessionkit")
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"sessionkit {sessionkit.__version__}\n"


def test_python_dash_m(workspace: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "sessionkit", "summary", str(workspace), "--format", "csv"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout.splitlines()[1] == "cli:direct,nanobot-0.2,2,1,0,11,,,"


def test_missing_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    assert main(["summary", str(missing)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"sessionkit: error: no such file or folder: {missing}\n"


def test_empty_folder_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"sessionkit: error: {tmp_path} holds no session files (*.jsonl or *.json)\n"


def test_workspace_with_empty_sessions_folder_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sessions").mkdir()
    assert main(["summary", str(tmp_path)]) == 2
    expected = f"sessionkit: error: {tmp_path / 'sessions'} holds no session files"
    assert capsys.readouterr().err.startswith(expected)


def test_bad_option_is_an_argparse_error(workspace: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["summary", str(workspace), "--format", "xml"])
    assert exit_info.value.code == 2


# --- doctor --------------------------------------------------------------------------------


@pytest.fixture
def damaged_copy(tmp_path: Path) -> Path:
    """A copy of the bundled damaged files: the doctor never runs on ``data/`` itself."""
    folder = tmp_path / "sessions"
    shutil.copytree(Path(__file__).resolve().parent.parent / "data" / "damaged", folder)
    return folder


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_doctor_reports_without_writing(
    damaged_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _tree(damaged_copy.parent)
    assert main(["doctor", str(damaged_copy)]) == 1
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines()[-6:] == [
        "damaged_truncated_last_line.jsonl  (session)",
        "  nanobot 0.2.2 loses: line 46 (not JSON); its next save overwrites the file",
        "  sessionkit keeps:    44 messages",
        "  problems:            line 46: not JSON: Unterminated string starting at (column 99)",
        "  --fix:               rewrite without line 46 (kept in the backup)",
        "12 file(s); nanobot 0.2.2 would lose something from 9; `--fix` mends 6",
    ]
    assert "  nanobot 0.2.2 loses: whole session (line 12: JSON array, not an object); " in out
    assert _tree(damaged_copy.parent) == before


def test_doctor_fix_then_nothing_to_fix(
    damaged_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backup = tmp_path / "backup"
    # Still 1 after the fix: nanobot resets offsets and times that --fix cannot know.
    assert main(["doctor", str(damaged_copy), "--fix", "--backup-dir", str(backup)]) == 1
    out = capsys.readouterr().out
    assert out.count("  fixed:               rewrote without ") == 6
    assert f"original in {backup / 'damaged_invalid_utf8.jsonl'}\n" in out
    assert len(list(backup.iterdir())) == 12
    fixed = _tree(damaged_copy)
    assert main(["doctor", str(damaged_copy), "--fix", "--backup-dir", str(backup)]) == 1
    assert capsys.readouterr().out == "nothing to fix\n"
    assert _tree(damaged_copy) == fixed
    main(["doctor", str(damaged_copy)])
    assert capsys.readouterr().out.endswith(
        "12 file(s); nanobot 0.2.2 would lose something from 4; `--fix` mends 0\n"
    )


def test_doctor_csv(damaged_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", str(damaged_copy), "--format", "csv"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "file,kind,policy,nanobot_keeps,sessionkit_keeps,nanobot_loses,next_save_overwrites,"
        "problems,fix,path"
    )
    assert lines[1].startswith("damaged_blank_lines.jsonl,session,nanobot-0.2,0,0,nothing,False,")
    assert len(lines) == 13


def test_doctor_refuses_a_backup_inside_the_sessions_folder(
    damaged_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _tree(damaged_copy)
    code = main(["doctor", str(damaged_copy), "--fix", "--backup-dir", str(damaged_copy / "b")])
    assert code == 2
    assert "is inside the sessions folder" in capsys.readouterr().err
    assert _tree(damaged_copy) == before


def test_doctor_backup_dir_needs_fix(
    damaged_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", str(damaged_copy), "--backup-dir", str(tmp_path / "b")]) == 2
    assert capsys.readouterr().err == (
        "sessionkit: error: --backup-dir and --create are only used with --fix\n"
    )
    assert not (tmp_path / "b").exists()


def test_doctor_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", str(tmp_path / "nope")]) == 2
    assert (
        capsys.readouterr().err
        == f"sessionkit: error: no such file or folder: {tmp_path / 'nope'}\n"
    )


# --- exit statuses: 0 healthy, 1 problems found, 2 usage error, for every command ----------


def test_every_help_documents_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    """In full once, in the top-level help; each command's help names them in one line."""
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "exit status (the same for every command): 0 healthy" in out
    assert " 1 problems found: damaged lines" in out and " 2 usage error: bad arguments" in out
    for command in ("summary", "problems", "doctor", "report", "usage", "cache", "request"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0
        out = capsys.readouterr().out
        assert out.endswith(
            "exit status: 0 healthy, 1 problems found, 2 usage error, 130 interrupted (when "
            "each is given: sessionkit --help)\n"
        ), command
        assert "(the same for every command)" not in out, command


def test_every_format_option_says_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("summary", "problems", "doctor", "usage", "request"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert "--format {" in out and "how to print the" in out, command


@pytest.mark.parametrize("command", ["summary", "problems", "doctor"])
def test_healthy_store_exits_0(workspace: Path, command: str) -> None:
    assert main([command, str(workspace)]) == 0


@pytest.mark.parametrize("command", ["summary", "problems", "doctor"])
def test_damaged_store_exits_1(workspace: Path, damaged: Path, command: str) -> None:
    assert main([command, str(workspace)]) == 1


def test_doctor_fix_that_mends_everything_exits_0(
    workspace: Path, damaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backup = tmp_path / "backup"
    assert main(["doctor", str(workspace), "--fix", "--backup-dir", str(backup)]) == 0
    assert "fixed:               rewrote without line 4" in capsys.readouterr().out
    assert main(["doctor", str(workspace)]) == 0


def _not_a_store(tmp_path: Path) -> Path:
    notes = tmp_path / "passwd"
    notes.write_text("root:x:0:0:root:/root:/bin/bash\n", encoding="utf-8")
    return notes


@pytest.mark.parametrize("command", ["summary", "problems", "doctor", "report"])
def test_a_file_that_is_not_a_session_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    notes = _not_a_store(tmp_path)
    assert main([command, str(notes)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"sessionkit: error: {notes} is not a session store; pass ")
    assert "a sessions folder, a session file (.jsonl" in err


@pytest.mark.parametrize("command", ["summary", "problems", "doctor", "report"])
def test_an_empty_path_exits_2(
    workspace: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
) -> None:
    monkeypatch.chdir(workspace / "sessions")  # "" would have meant this store
    assert main([command, ""]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sessionkit: error: an empty path names no session store; pass ")


def test_doctor_on_a_folder_without_sessions_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("hello", encoding="utf-8")
    assert main(["doctor", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(
        f"sessionkit: error: {tmp_path} holds no session files"
    )


def test_doctor_speaks_of_each_file_in_its_release_terms(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 0.3.5 file is not measured by 0.2.2's loss rule; its checkpoint sidecar is no session."""
    folder = workspace / "sessions"
    later = folder / "dGVsZWdyYW06OQ.jsonl"  # storage key of telegram:9
    meta = {**TELEGRAM[0], "key": "telegram:9", "last_archived": 0}
    _write(later, [meta, *TELEGRAM[1:]])
    (folder / "dGVsZWdyYW06OQ.checkpoint.json").write_text('{"checkpoint": {}}', "utf-8")
    assert main(["doctor", str(workspace)]) == 0
    out = capsys.readouterr().out
    assert "checkpoint" not in out
    assert (
        "dGVsZWdyYW06OQ.jsonl  (session)\n"
        "  nanobot-0.3.5 loses: not known (only nanobot 0.2.2's loss rule is known)\n"
        "  sessionkit keeps:    3 messages\n"
    ) in out
    assert "nanobot 0.2.2 loses: nothing" in out  # the 0.2 files beside it
    assert out.endswith(
        "3 file(s); nanobot 0.2.2 would lose something from 0; 1 written by a later release "
        "(loss not known); `--fix` mends 0\n"
    )


def test_doctor_fix_on_a_full_disk_is_one_line_and_exits_1(
    damaged_copy: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import errno

    import sessionkit.nanobot.writer as writer

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    before = _tree(damaged_copy)
    monkeypatch.setattr(writer, "_write_temp", full)
    code = main(["doctor", str(damaged_copy), "--fix", "--backup-dir", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("sessionkit: error: rewriting ")
    assert "disk full" in err and "Traceback" not in err
    assert _tree(damaged_copy) == before


def test_cache_info_and_clear_touch_only_sessionkits_files(
    workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    sessionkit.load(workspace, cache=cache).token_cache.flush()
    (cache / "notes.txt").write_text("the user's own file")
    (cache / "forks" / "sessions").mkdir(parents=True)
    (cache / "forks" / "sessions" / "cli_fork.jsonl").write_text("{}\n")
    (cache / "kits-1").mkdir()
    (cache / "kits-1" / "0123.json").write_text("{}")
    (cache / "plans-1-0.1.0").mkdir()
    (cache / "plans-1-0.1.0" / "4567.json").write_text("{}")
    assert main(["cache", "info", "--cache-dir", str(cache)]) == 0
    shown = capsys.readouterr().out
    assert f"folder: {cache}\n" in shown
    assert "tokens" in shown and "1 file(s); `cache clear` leaves them" in shown
    assert "  kits           1 file(s)               2 bytes\n" in shown
    assert "  plans          1 file(s)               2 bytes\n" in shown
    assert "releases: " in shown and "`sessionkit releases remove VERSION` removes one" in shown
    assert main(["cache", "clear", "--cache-dir", str(cache)]) == 0
    assert capsys.readouterr().out.startswith("removed ")
    assert sorted(p.name for p in cache.rglob("*")) == [
        "cli_fork.jsonl",
        "forks",
        "notes.txt",
        "sessions",
    ]
    assert main(["cache", "info", "--cache-dir", str(cache)]) == 0
    assert "size:   0 bytes in 0 file(s)" in capsys.readouterr().out


def test_cache_clear_keeps_the_models_answers_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Answers cost money to ask again: listed by info, removed only by clear --answers."""
    cache = tmp_path / "cache"
    (cache / "answers-1").mkdir(parents=True)
    (cache / "answers-1" / "ab.json").write_text('{"a": 1}')
    assert main(["cache", "info", "--cache-dir", str(cache)]) == 0
    assert "  answers        1 file(s)               8 bytes\n" in capsys.readouterr().out
    assert main(["cache", "clear", "--cache-dir", str(cache)]) == 0
    assert capsys.readouterr().out == (
        f"removed 0 file(s), 0 bytes, from {cache}\n"
        "kept 1 model answer(s), 8 bytes (--answers removes them)\n"
    )
    assert main(["cache", "clear", "--answers", "--cache-dir", str(cache)]) == 0
    assert capsys.readouterr().out == f"removed 1 file(s), 8 bytes, from {cache}\n"
    assert sorted(p.name for p in cache.iterdir()) == []


def test_cache_info_defaults_to_the_cache_folder_and_refuses_bad_usage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "nowhere"))
    assert main(["cache", "info"]) == 0
    assert f"folder: {tmp_path / 'nowhere'} (not created yet)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["cache", "shred"])
    assert exited.value.code == 2
    (tmp_path / "a-file").write_text("x")
    assert main(["cache", "clear", "--cache-dir", str(tmp_path / "a-file")]) == 2
    assert (tmp_path / "a-file").exists()


def _fake_release(root: Path, version: str) -> Path:
    """A venv as ``releases install`` leaves it: its marker, and an interpreter that says
    which nanobot-ai it has (a script standing in for python)."""
    folder = root / version
    (folder / "bin").mkdir(parents=True)
    python = folder / "bin" / "python"
    python.write_text(f"#!/bin/sh\necho {version}\n")
    python.chmod(0o755)
    (folder / ".sessionkit-release.json").write_text(json.dumps({"nanobot-ai": version}))
    return folder


def test_releases_remove_removes_only_what_install_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "releases"
    monkeypatch.setenv("SESSIONKIT_RELEASES_DIR", str(root))
    made = _fake_release(root, "0.3.0")
    (root / "0.3.5").mkdir()  # not sessionkit's: no marker
    assert main(["releases", "remove", "0.3.5"]) == 1
    assert "nanobot-ai 0.3.5 is not installed by sessionkit" in capsys.readouterr().err
    assert (root / "0.3.5").is_dir()
    assert main(["releases", "remove", "0.3.0"]) == 0
    assert capsys.readouterr().out == f"nanobot-ai 0.3.0: removed {made}\n"
    assert not made.exists()
    assert main(["releases", "remove"]) == 2


def test_summary_of_sixty_workspaces_prints_one_table_and_one_problems_line(
    tmp_path, capsys
) -> None:
    from tests.store.test_corpus import team

    folder = team(tmp_path, 60)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        status = main(["summary", str(folder), "--recursive", "--tokens", "fallback"])
    out, err = capsys.readouterr()
    assert status == 1
    assert out.count("TOTAL") == 1 and len(out.splitlines()) == 1 + 120 + 1
    assert err == f"2 problem(s) found; see `sessionkit problems {folder} --recursive`\n"


def test_problems_of_the_bundled_data_notes_the_folders_it_did_not_load(capsys) -> None:
    from sessionkit.store.sources import default_data_dir

    assert main(["problems"]) == 0
    out, err = capsys.readouterr()
    assert out == "no problems found\n"
    assert err == (
        f"note: {default_data_dir()}: 3 sessions folders below not loaded (damaged, "
        "nanobot-0.3.5/sessions/5e551011c0575a3b9d2e7f4a6c8b0d1e, "
        "nanobot-0.3.5-claude/sessions/c1a0de035ca0e5e55101c0575a3b9d2e); load with "
        "recursive=True (--recursive) to read them too\n"
    )
    assert main(["problems", "--recursive", "--format", "csv"]) == 1
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 + 14 and err == ""
