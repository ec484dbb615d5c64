"""save_session and session_lines: exact bytes, file names, atomicity, refusals, the lock."""

from __future__ import annotations

import copy
import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
from support.reference import need

from sessionkit.nanobot import writer
from sessionkit.nanobot.naming import (
    UnsafeKeyError,
    key_from_filename,
    sessions_folder,
    storage_key,
)
from sessionkit.nanobot.policies import is_temp_file
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.writer import (
    LOCK_FILENAME,
    TEMP_NAME,
    save_session,
    session_lines,
)

CREATED = datetime(2025, 3, 1, 9, 30, 0, 123456)
UPDATED = datetime(2025, 3, 1, 9, 45, 10)


def _session(key: str = "telegram:123", **kwargs) -> Session:
    fields = {
        "messages": [
            {"role": "user", "content": "Grüß dich ☕", "timestamp": "2025-03-01T09:30:01"},
            {"role": "assistant", "content": "Hi!\nLine two", "timestamp": "2025-03-01T09:30:05"},
        ],
        "created_at": CREATED,
        "updated_at": UPDATED,
        "metadata": {"title": "Café", "n": 1.5},
        "last_consolidated": 1,
    }
    fields.update(kwargs)
    return Session(key=key, **fields)


EXPECTED = (
    '{"_type": "metadata", "key": "telegram:123", "created_at": "2025-03-01T09:30:00.123456", '
    '"updated_at": "2025-03-01T09:45:10", "metadata": {"title": "Café", "n": 1.5}, '
    '"last_consolidated": 1}\n'
    '{"role": "user", "content": "Grüß dich ☕", "timestamp": "2025-03-01T09:30:01"}\n'
    '{"role": "assistant", "content": "Hi!\\nLine two", "timestamp": "2025-03-01T09:30:05"}\n'
).encode()


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


# --- serialisation -------------------------------------------------------------------------


def test_session_lines_exact_bytes():
    assert session_lines(_session()) == EXPECTED


def test_missing_times_become_now():
    now = datetime(2026, 1, 2, 3, 4, 5)
    data = session_lines(_session(created_at=None, updated_at=None), now=now)
    assert data.startswith(
        b'{"_type": "metadata", "key": "telegram:123", "created_at": "2026-01-02T03:04:05", '
        b'"updated_at": "2026-01-02T03:04:05",'
    )


def test_records_follow_the_metadata_line():
    state = {"_type": "provider_state", "payload": {"id": "r1"}}
    lines = session_lines(_session(records=[state])).splitlines()
    assert lines[1] == b'{"_type": "provider_state", "payload": {"id": "r1"}}'
    assert len(lines) == 4


def test_empty_session_is_one_line():
    data = session_lines(Session("cli:direct", created_at=CREATED, updated_at=CREATED))
    assert data.count(b"\n") == 1 and data.endswith(b'"last_consolidated": 0}\n')


def test_unicode_separators_stay_raw():
    s = _session(messages=[{"role": "user", "content": "a\u2028b\x85c\rd"}])
    line = session_lines(s).splitlines(keepends=True)[-1]
    assert line == '{"role": "user", "content": "a\u2028b\x85c\\rd"}\n'.encode()


def test_lone_surrogate_is_refused_and_nothing_written(tmp_path):
    s = _session(messages=[{"role": "user", "content": "bad \ud800"}])
    with pytest.raises(ValueError, match="message 0 holds text that is not valid Unicode"):
        save_session(s, tmp_path)
    assert _listing(tmp_path) == {}


def test_unserialisable_value_is_refused(tmp_path):
    s = _session(metadata={"when": datetime.now()})
    with pytest.raises(ValueError, match="metadata line is not JSON-serialisable"):
        save_session(s, tmp_path)
    assert _listing(tmp_path) == {}


def test_non_datetime_time_is_a_type_error():
    with pytest.raises(TypeError, match="created_at must be a datetime"):
        session_lines(_session(created_at="2025-01-01"))


# --- file names and folders ----------------------------------------------------------------


def test_save_writes_nanobot_name_and_bytes(tmp_path):
    path = save_session(_session(), tmp_path)
    assert path == tmp_path / "telegram_123.jsonl"
    assert _listing(tmp_path) == {"telegram_123.jsonl": EXPECTED}


def test_save_with_storage_key_naming(tmp_path):
    path = save_session(_session(), tmp_path, naming="nanobot-0.3")
    assert path.name == "dGVsZWdyYW06MTIz.jsonl"
    assert path.read_bytes() == EXPECTED


def test_unknown_naming_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown naming"):
        save_session(_session(), tmp_path, naming="nanobot-9")


def test_workspace_resolves_to_its_sessions_folder(tmp_path):
    (tmp_path / "sessions").mkdir()
    assert sessions_folder(tmp_path) == tmp_path / "sessions"
    assert save_session(_session(), tmp_path) == tmp_path / "sessions" / "telegram_123.jsonl"


def test_a_missing_folder_is_refused_unless_asked_to_create_it(tmp_path):
    target = tmp_path / "a" / "b"
    with pytest.raises(FileNotFoundError, match="does not exist, so nothing was written") as info:
        save_session(_session(), target)
    assert info.value.filename == str(target) and not (tmp_path / "a").exists()
    assert save_session(_session(), target, create=True).parent == target


@pytest.mark.parametrize("create", [False, True])
def test_a_workspace_without_a_sessions_folder_is_recognised_not_written_into(tmp_path, create):
    """The README's ``sessions_dir="/path/to/workspace"`` on a workspace nanobot has not saved a
    session in yet: the fork would land beside AGENTS.md, where nanobot never reads."""
    (tmp_path / "AGENTS.md").write_text("rules\n")
    (tmp_path / "memory").mkdir()
    with pytest.raises(FileNotFoundError) as info:
        save_session(_session(), tmp_path, create=create)
    assert info.value.strerror == (
        f"{tmp_path} is a nanobot workspace (AGENTS.md, memory) without a sessions folder, so "
        f"nothing was written: nanobot reads sessions from {tmp_path / 'sessions'}; pass that "
        "folder, with create=True (command line: --create) to make it"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["AGENTS.md", "memory"]
    made = save_session(_session(), tmp_path / "sessions", create=True)
    assert made == tmp_path / "sessions" / "telegram_123.jsonl"
    assert save_session(_session(key="t:2"), tmp_path).parent == tmp_path / "sessions"


def test_one_workspace_file_alone_does_not_make_a_workspace(tmp_path):
    (tmp_path / "memory").mkdir()
    assert save_session(_session(), tmp_path) == tmp_path / "telegram_123.jsonl"


def test_save_leaves_the_session_untouched(tmp_path):
    s = _session(created_at=None)
    before = copy.deepcopy(s)
    save_session(s, tmp_path)
    assert s == before and s.path is None


def test_file_mode_follows_umask_like_nanobot(tmp_path):
    old = os.umask(0o022)
    try:
        path = save_session(_session(), tmp_path)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


# --- refusals ------------------------------------------------------------------------------


def test_existing_file_is_not_replaced(tmp_path):
    original = tmp_path / "telegram_123.jsonl"
    original.write_bytes(b"original\n")
    with pytest.raises(
        FileExistsError,
        match=r"the file already exists and holds session 'telegram:123'; pass overwrite=True",
    ) as info:
        save_session(_session(), tmp_path)
    assert info.value.filename == str(original)
    assert str(info.value).endswith("telegram_123.jsonl'")
    assert _listing(tmp_path) == {"telegram_123.jsonl": b"original\n"}


def test_overwrite_replaces(tmp_path):
    (tmp_path / "telegram_123.jsonl").write_bytes(b"original\n")
    save_session(_session(), tmp_path, overwrite=True)
    assert _listing(tmp_path) == {"telegram_123.jsonl": EXPECTED}


def test_dangling_symlink_counts_as_existing(tmp_path):
    (tmp_path / "telegram_123.jsonl").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        save_session(_session(), tmp_path)
    assert not (tmp_path / "nowhere").exists()


def test_overwrite_replaces_a_symlink_not_its_target(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"keep")
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "telegram_123.jsonl").symlink_to(outside)
    save_session(_session(), folder, overwrite=True)
    assert outside.read_bytes() == b"keep"
    assert not (folder / "telegram_123.jsonl").is_symlink()


@pytest.mark.parametrize(
    "key", ["", "   ", ".", "..", "a\x00b", ". ", 7, "nul", "NUL.txt", "com1", "Lpt9.log", "con"]
)
def test_hostile_keys_are_refused(tmp_path, key):
    with pytest.raises(UnsafeKeyError):
        save_session(_session(key=key), tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("key", "naming"),
    [
        *(
            (key, naming)
            for key in [
                "../../etc/evil",
                "/etc/passwd",
                "a\\..\\b",
                "cli:../x",
                "a/b",
                "a\\b",
                "..",
            ]
            for naming in ["nanobot-0.2", "nanobot-0.3"]
        ),
        (".hidden", "nanobot-0.2"),
        ("..:x", "nanobot-0.2"),
    ],
)
def test_path_like_keys_are_refused_before_any_write(tmp_path, monkeypatch, key, naming):
    monkeypatch.setattr(writer, "_write_temp", _never)
    folder = tmp_path / "sessions"
    with pytest.raises(UnsafeKeyError, match="path-like|hidden"):
        save_session(_session(key=key), folder, naming=naming)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("telegram:123", "telegram_123.jsonl"),
        ("webui:abc-def", "webui_abc-def.jsonl"),
        ("matrix:!room33_example.org", "matrix_!room33_example.org.jsonl"),
        ("feishu:用户_五", "feishu_用户_五.jsonl"),
        ("slack:C01:thread", "slack_C01_thread.jsonl"),
        ("email:alice@example.com", "email_alice@example.com.jsonl"),
    ],
)
def test_nanobot_keys_still_save(tmp_path, key, name):
    assert save_session(_session(key=key), tmp_path).name == name


def test_every_bundled_key_can_be_saved(tmp_path, data_dir):
    files = sorted((data_dir / "sessions").glob("*.jsonl")) + sorted(
        (data_dir / "damaged").glob("*.jsonl")
    )
    for file in files:
        first = file.read_bytes().split(b"\n", 1)[0]
        key = json.loads(first).get("key") if b'"metadata"' in first else None
        key = key or key_from_filename(file)
        naming = "nanobot-0.3" if file.stem == storage_key(key) else "nanobot-0.2"
        assert save_session(
            _session(key=key), tmp_path / file.parent.name, naming=naming, create=True
        ).name == (file.name)
    assert len(files) == 26


def _never(*args, **kwargs):
    raise AssertionError("a temporary file was about to be written")


def test_a_key_too_long_for_the_file_system_is_refused_first(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "_write_temp", _never)
    key = "telegram:" + "x" * 300
    with pytest.raises(UnsafeKeyError, match=r"too long: its file name is 315 bytes and .* 255"):
        save_session(_session(key=key), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_longest_name_the_folder_takes_is_written(tmp_path):
    key = "t:" + "é" * 123 + "x"  # a 249-byte stem and ".jsonl": 255 bytes
    path = save_session(_session(key=key), tmp_path)
    assert len(path.name.encode()) == 255 and path.read_bytes().count(b"\n") == 3


@pytest.mark.parametrize(
    ("key", "message"),
    [("t:\ud800", "not valid Unicode"), ("t:a\nb", "control character"), ("t:\x00", "NUL")],
)
def test_malformed_keys_are_refused(tmp_path, key, message):
    with pytest.raises(UnsafeKeyError, match=message):
        save_session(_session(key=key), tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("key", ["a:b", "a_b", "a<b", "a|b"])
def test_a_collision_names_the_session_stored_there(tmp_path, key):
    save_session(_session(key="a:b"), tmp_path)
    with pytest.raises(FileExistsError) as info:
        save_session(_session(key=key), tmp_path)
    assert info.value.strerror == (
        f"cannot save session {key!r}: the file already exists and holds session 'a:b'"
        + ("" if key == "a:b" else ", whose key maps to the same file name")
        + "; pass overwrite=True to replace it"
    )
    assert info.value.filename == str(tmp_path / "a_b.jsonl")


# --- atomicity -----------------------------------------------------------------------------


def _boom(*args, **kwargs):
    raise OSError(errno.EIO, "injected failure")


@pytest.mark.parametrize(
    ("step", "overwrite"),
    [("link", False), ("fsync", False), ("replace", True), ("fsync", True)],
)
def test_failure_before_rename_leaves_no_trace(tmp_path, monkeypatch, step, overwrite):
    if overwrite:
        (tmp_path / "telegram_123.jsonl").write_bytes(b"original\n")
    before = _listing(tmp_path)
    monkeypatch.setattr(writer.os, step, _boom)
    with pytest.raises(OSError, match="injected failure") as info:
        save_session(_session(), tmp_path, overwrite=overwrite)
    assert info.value.errno == errno.EIO
    assert _listing(tmp_path) == before


def test_interrupt_during_write_leaves_no_trace(tmp_path, monkeypatch):
    (tmp_path / "telegram_123.jsonl").write_bytes(b"original\n")

    def interrupt(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(writer.os, "fsync", interrupt)
    with pytest.raises(KeyboardInterrupt):
        save_session(_session(), tmp_path, overwrite=True)
    assert _listing(tmp_path) == {"telegram_123.jsonl": b"original\n"}


def test_hard_crash_before_rename_keeps_the_original(tmp_path):
    original = tmp_path / "telegram_123.jsonl"
    original.write_bytes(b"original\n")
    script = textwrap.dedent(
        f"""
        import os
        from datetime import datetime
        from sessionkit.nanobot import writer
        from sessionkit.nanobot.session import Session

        def crash(*args):
            os._exit(3)

        writer.os.replace = crash
        s = Session("telegram:123", messages=[{{"role": "user", "content": "x" * 100000}}])
        writer.save_session(s, {str(tmp_path)!r}, overwrite=True)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert result.returncode == 3
    assert original.read_bytes() == b"original\n"
    leftovers = [p.name for p in tmp_path.iterdir() if p != original]
    assert len(leftovers) == 1 and TEMP_NAME.fullmatch(leftovers[0]).group("stem") == "telegram_123"


def test_file_appearing_meanwhile_is_not_replaced(tmp_path, monkeypatch):
    final = tmp_path / "telegram_123.jsonl"
    real_write_temp = writer._write_temp

    def racing_write_temp(*args, **kwargs):
        tmp = real_write_temp(*args, **kwargs)
        final.write_bytes(b"written by someone else\n")
        return tmp

    monkeypatch.setattr(writer, "_write_temp", racing_write_temp)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_session(_session(), tmp_path)
    assert _listing(tmp_path) == {"telegram_123.jsonl": b"written by someone else\n"}


def _no_hard_links(*args, **kwargs):
    raise OSError(errno.EPERM, "hard links not supported")


def test_without_hard_links_falls_back_to_rename(tmp_path, monkeypatch):
    monkeypatch.setattr(writer.os, "link", _no_hard_links)
    save_session(_session(), tmp_path)
    assert _listing(tmp_path) == {"telegram_123.jsonl": EXPECTED}


def test_without_hard_links_still_refuses_a_late_file(tmp_path, monkeypatch):
    final = tmp_path / "telegram_123.jsonl"

    def link_fails_after_file_appears(*args, **kwargs):
        final.write_bytes(b"late\n")
        _no_hard_links()

    monkeypatch.setattr(writer.os, "link", link_fails_after_file_appears)
    with pytest.raises(FileExistsError):
        save_session(_session(), tmp_path)
    assert _listing(tmp_path) == {"telegram_123.jsonl": b"late\n"}


# --- permissions ---------------------------------------------------------------------------


def test_failed_temp_file_names_the_key_and_target(tmp_path, monkeypatch):
    real_open = os.open

    def deny_create(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and Path(path).parent == tmp_path:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(writer.os, "open", deny_create)
    with pytest.raises(PermissionError) as info:
        save_session(_session(), tmp_path)
    assert info.value.strerror == (
        "cannot save session 'telegram:123': writing the temporary file failed: Permission denied"
    )
    assert info.value.filename == str(tmp_path / "telegram_123.jsonl")
    assert _listing(tmp_path) == {}


def test_uncreatable_folder_simulated(tmp_path, monkeypatch):
    def deny_mkdir(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(writer.Path, "mkdir", deny_mkdir)
    with pytest.raises(PermissionError, match="cannot create the sessions folder") as info:
        save_session(_session(), tmp_path / "new", create=True)
    assert info.value.filename == str(tmp_path / "new" / "telegram_123.jsonl")


def test_unwritable_folder_is_refused_before_any_write(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "_write_temp", _never)
    monkeypatch.setattr(writer.os, "access", lambda path, mode: False)
    with pytest.raises(PermissionError) as info:
        save_session(_session(), tmp_path)
    assert info.value.strerror == (
        f"cannot save session 'telegram:123': no permission to create files in {tmp_path}"
    )
    assert info.value.filename == str(tmp_path / "telegram_123.jsonl")


def test_read_only_file_system_is_refused_before_any_write(tmp_path, monkeypatch):
    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(writer, "_write_temp", _never)
    monkeypatch.setattr(writer.os, "statvfs", lambda path: ReadOnly)
    with pytest.raises(OSError, match="is on a read-only file system") as info:
        save_session(_session(), tmp_path)
    assert info.value.errno == errno.EROFS
    assert info.value.filename == str(tmp_path / "telegram_123.jsonl")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(PermissionError, match="no permission to create files") as info:
            save_session(_session(), folder)
        assert info.value.filename == str(folder / "telegram_123.jsonl")
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o700)


# --- the later nanobot's lock file ---------------------------------------------------------


def test_absent_lock_file_is_not_created(tmp_path):
    save_session(_session(), tmp_path)
    assert not (tmp_path / LOCK_FILENAME).exists()


def test_lock_is_held_while_the_file_moves_into_place(tmp_path, monkeypatch):
    lock = tmp_path / LOCK_FILENAME
    lock.write_bytes(b"")
    seen = []
    real_link = os.link

    def probing_link(src, dst):
        with open(lock, "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append("free")
            except BlockingIOError:
                seen.append("held")
        real_link(src, dst)

    monkeypatch.setattr(writer.os, "link", probing_link)
    save_session(_session(), tmp_path)
    assert seen == ["held"]
    with open(lock, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert lock.read_bytes() == b""


def test_held_lock_times_out_without_writing(tmp_path):
    lock = tmp_path / LOCK_FILENAME
    lock.write_bytes(b"")
    with open(lock, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(TimeoutError, match=r"\.session-files\.lock stayed locked"):
            save_session(_session(), tmp_path, lock_timeout=0.1)
    assert _listing(tmp_path) == {LOCK_FILENAME: b""}


def test_waits_for_nanobots_filelock(tmp_path):
    filelock = need("filelock")
    held = threading.Event()

    def hold() -> None:
        with filelock.FileLock(str(tmp_path / LOCK_FILENAME)):
            held.set()
            time.sleep(0.3)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    with pytest.raises(TimeoutError):
        save_session(_session(), tmp_path, lock_timeout=0.05)
    path = save_session(_session(), tmp_path, lock_timeout=10)
    holder.join(timeout=10)
    assert not holder.is_alive()
    assert path.read_bytes() == EXPECTED


def test_folder_fsync_refused_by_the_file_system_is_skipped(tmp_path, monkeypatch):
    real_fsync = os.fsync

    def no_folder_fsync(fd):
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EINVAL, "Invalid argument")
        real_fsync(fd)

    monkeypatch.setattr(writer.os, "fsync", no_folder_fsync)
    assert save_session(_session(), tmp_path).read_bytes() == EXPECTED


def test_fifo_lock_file_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / LOCK_FILENAME)
    started = time.monotonic()
    with pytest.raises(
        OSError, match=r"\.session-files\.lock is a FIFO, not a regular file"
    ) as info:
        save_session(_session(), tmp_path, lock_timeout=1)
    assert time.monotonic() - started < 1
    assert info.value.filename == str(tmp_path / LOCK_FILENAME)
    assert str(info.value).startswith(
        f"[Errno 22] cannot save session 'telegram:123' to {tmp_path / 'telegram_123.jsonl'}: "
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_FILENAME]


@pytest.mark.parametrize("make", [lambda p: p.mkdir(), lambda p: p.symlink_to(p.parent / "x")])
def test_other_non_regular_lock_files_are_refused(tmp_path, make):
    make(tmp_path / LOCK_FILENAME)
    with pytest.raises(OSError, match="not a regular file"):
        save_session(_session(), tmp_path, lock_timeout=1)


def test_unreadable_lock_file_is_named(tmp_path, monkeypatch):
    (tmp_path / LOCK_FILENAME).write_bytes(b"")
    real_open = os.open

    def deny_lock(path, flags, *args, **kwargs):
        if Path(path).name == LOCK_FILENAME:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(writer.os, "open", deny_lock)
    with pytest.raises(PermissionError, match="no permission to open the lock file") as info:
        save_session(_session(), tmp_path)
    assert info.value.filename == str(tmp_path / LOCK_FILENAME)
    assert "cannot save session 'telegram:123'" in info.value.strerror


# --- temporary files and hard crashes -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "temp"),
    [
        (".telegram_123.0123456789ab.tmp", True),
        (".a.b.c.ffffffffffff.tmp", True),
        ("telegram_123.jsonl.tmp", True),
        (".telegram_123.0123456789AB.tmp", False),
        (".telegram_123.tmp", False),
        ("telegram_123.jsonl", False),
        (".session-files.lock", False),
    ],
)
def test_is_temp_file(name, temp):
    assert is_temp_file(Path("/ws/sessions") / name) is temp


def test_temp_names_stay_short_and_recognisable():
    name = writer._temp_name("é" * 120)
    assert TEMP_NAME.fullmatch(name) and len(name.encode()) == 1 + 64 + 1 + 12 + 4


_CRASH = """
import os, signal, sys
from sessionkit.nanobot import writer
from sessionkit.nanobot.session import Session

step, folder, overwrite = sys.argv[1], sys.argv[2], sys.argv[3] == "1"

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def after(real, when=lambda *a: True):
    def wrapped(*args, **kwargs):
        result = real(*args, **kwargs)
        if when(*args):
            die()
        return result
    return wrapped

def before(real):
    def wrapped(*args, **kwargs):
        die()
    return wrapped

os_ = writer.os
if step == "after temp create":
    os_.open = after(os_.open, lambda path, flags, *a: bool(flags & os_.O_CREAT))
elif step == "after write":
    os_.fsync = before(os_.fsync)
elif step == "before rename":
    os_.link, os_.replace = before(os_.link), before(os_.replace)
elif step == "after rename":
    os_.link, os_.replace = after(os_.link), after(os_.replace)
s = Session("telegram:123", messages=[{"role": "user", "content": "x" * 200000}])
writer.save_session(s, folder, overwrite=overwrite)
"""


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize(
    "step", ["after temp create", "after write", "before rename", "after rename"]
)
def test_kill_9_mid_save_leaves_no_partial_file(tmp_path, step, overwrite):
    from sessionkit.writers.checkup import doctor

    final = tmp_path / "telegram_123.jsonl"
    if overwrite:
        final.write_bytes(b"original\n")
    run = subprocess.run([sys.executable, "-c", _CRASH, step, str(tmp_path), str(int(overwrite))])
    assert run.returncode == -signal.SIGKILL
    content = final.read_bytes() if final.exists() else None
    if step == "after rename":
        assert content is not None and content.endswith(b"x" * 200000 + b'"}\n')
    else:
        assert content == (b"original\n" if overwrite else None)
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p != final)
    assert all(is_temp_file(name) for name in leftovers)
    assert len(leftovers) == (0 if step == "after rename" and overwrite else 1)
    report = doctor(tmp_path)
    assert sorted(report.loc[report["kind"] == "temp file", "file"]) == leftovers
