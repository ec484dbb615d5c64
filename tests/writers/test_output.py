"""Reports and other files written for the user: whole, new unless asked, in folders that exist."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sessionkit.writers.output import check_output, write_output


def test_a_new_file_is_written_whole_and_nothing_else_is_left(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        path = write_output(tmp_path / "r.html", b"<p>hi</p>")
    finally:
        os.umask(old)
    assert path == tmp_path / "r.html" and path.read_bytes() == b"<p>hi</p>"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]


def test_an_existing_file_is_kept_unless_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "r.html"
    path.write_bytes(b"mine")
    with pytest.raises(FileExistsError) as raised:
        write_output(path, b"new")
    assert raised.value.strerror == (
        f"{path} exists, so nothing was written: name another file or pass overwrite=True "
        "(command line: --overwrite)"
    )
    assert path.read_bytes() == b"mine"
    assert write_output(path, b"new", overwrite=True).read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]


def test_a_missing_folder_is_refused_unless_create(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "r.html"
    with pytest.raises(FileNotFoundError, match="pass create=True"):
        check_output(target)
    assert not (tmp_path / "a").exists()
    assert write_output(target, b"x", create=True).read_bytes() == b"x"
