"""Where the cache folder is, and the one atomic writer of what is kept there."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from sessionkit.store import cachedir
from sessionkit.store.integrity import read_sealed


def test_the_cache_folder_follows_sessionkit_cache_dir_then_xdg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cachedir.sys, "platform", "linux")
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "chosen"))
    assert cachedir.default_cache_dir() == tmp_path / "chosen"
    monkeypatch.delenv("SESSIONKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cachedir.default_cache_dir() == tmp_path / "xdg" / "sessionkit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cachedir.default_cache_dir() == tmp_path / "home" / ".cache" / "sessionkit"


def test_write_ipc_replaces_the_file_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "kept" / "one.arrow"
    schema = pa.schema([("n", pa.int64())])
    cachedir.write_ipc(target, schema, [pa.table({"n": [1, 2]})])
    assert read_sealed(target)[0].column("n").to_pylist() == [1, 2]

    def broken():  # type: ignore[no-untyped-def]
        yield pa.table({"n": [3]})
        raise RuntimeError("the writer died halfway")

    with pytest.raises(RuntimeError, match="halfway"):
        cachedir.write_ipc(target, schema, broken())
    assert read_sealed(target)[0].column("n").to_pylist() == [1, 2]
    assert [p.name for p in target.parent.iterdir()] == ["one.arrow"]
