"""A warm open from a store's pack and catalog: the same corpus as reading every file, taken
only when every file is the one indexed, and never trusting a catalog that does not check out."""

from __future__ import annotations

import json
import os
import shutil
from contextlib import nullcontext
from pathlib import Path

import pandas as pd
import pytest

import sessionkit.store.corpus
import sessionkit.store.index
import sessionkit.store.snapshot
from sessionkit import load
from sessionkit.nanobot.policies import POLICIES
from sessionkit.store.catalog import read_catalog
from sessionkit.store.corpus import Corpus
from sessionkit.store.counting import token_cache_in, token_cache_of
from sessionkit.store.integrity import IntegrityError
from sessionkit.store.sources import REPOSITORY_DATA
from sessionkit.tuning import TUNING

SAMPLES = ("sessions", "damaged", "nanobot-0.3.5")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An index folder of its own; files count as settled as soon as they are written, and
    a first load keeps a pack of the store (as one of 32 files or more does)."""
    folder = tmp_path / "index"
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(folder))
    monkeypatch.setattr(TUNING, "racy_ns", 0)
    monkeypatch.setattr(TUNING, "pack_min", 1)
    return folder


def _copy(name: str, tmp_path: Path) -> Path:
    """A copy of a bundled sample folder."""
    target = tmp_path / "store" / name
    shutil.copytree(REPOSITORY_DATA / name, target, symlinks=True)
    return target


def _sample(name: str, tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    """A copy of a bundled sample, and how to load it (0.3.5: its workspace, whose sessions
    its config folder keeps)."""
    folder = _copy(name, tmp_path)
    if (folder / "workspace").is_dir():
        return folder / "workspace", {"config_dir": folder}
    return folder, {}


def _catalogs(cache: Path) -> list[Path]:
    return sorted(cache.rglob("catalogs/*.arrow"))


def _assert_same(left: Corpus, right: Corpus) -> None:
    """Equal frames, keys, size and summary, then equal sessions once they are made."""
    pd.testing.assert_frame_equal(left.messages, right.messages)
    pd.testing.assert_frame_equal(left.sessions, right.sessions)
    pd.testing.assert_frame_equal(left.problems, right.problems)
    assert left.keys() == right.keys()
    assert len(left) == len(right)
    assert repr(left) == repr(right)
    assert list(left) == list(right)
    assert [e.meta for e in left.entries] == [e.meta for e in right.entries]


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("tokens", ["tiktoken", "fallback", None])
def test_a_warm_open_from_the_catalog_equals_reading_every_file(
    name: str, tokens: str | None, tmp_path: Path, cache: Path
) -> None:
    folder, how = _sample(name, tmp_path)
    cold = load(folder, tokens=tokens, **how)
    assert cold._snapshot is None
    assert len(_catalogs(cache)) == 1
    warm = load(folder, tokens=tokens, **how)
    assert warm._snapshot is not None
    fresh = load(folder, tokens=tokens, cache=False, **how)
    pd.testing.assert_frame_equal(warm.problems, fresh.problems)
    _assert_same(warm, fresh)
    assert warm._snapshot is None  # its sessions are made now
    _assert_same(load(folder, tokens=tokens, **how), cold)


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_chosen_release_applies_to_the_frames_and_the_sessions(
    policy: str, tmp_path: Path, cache: Path
) -> None:
    folder = _copy("sessions", tmp_path)
    load(folder)
    warm = load(folder, policy=policy)
    assert warm._snapshot is not None
    assert set(warm.sessions["policy"]) == {policy}
    _assert_same(warm, load(folder, policy=policy, cache=False))
    assert {s.policy for s in warm} == {policy}


def test_sessions_first_then_frames_equal_reading(tmp_path: Path, cache: Path) -> None:
    folder = _copy("sessions", tmp_path)
    load(folder)
    warm = load(folder)
    first = next(iter(warm))
    first.policy = "nanobot-0.3.5"
    fresh = load(folder, cache=False)
    next(iter(fresh)).policy = "nanobot-0.3.5"
    _assert_same(warm, fresh)


def _grow(path: Path) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(json.dumps({"role": "user", "content": "one more"}) + "\n")


def _link(folder: Path) -> None:
    (folder / "linked.jsonl").symlink_to(folder / "telegram_42.jsonl")


def _add(folder: Path) -> None:
    text = (folder / "telegram_42.jsonl").read_text(encoding="utf-8")
    (folder / "new.jsonl").write_text(text.replace("telegram:42", "new:1"), encoding="utf-8")


def _twin(folder: Path) -> None:
    shutil.copy(folder / "telegram_42.jsonl", folder / "telegram_42_again.jsonl")


@pytest.mark.parametrize(
    "change",
    [
        lambda folder: _grow(folder / "telegram_42.jsonl"),
        lambda folder: (folder / "telegram_42.jsonl").unlink(),
        _add,
        lambda folder: os.utime(folder / "telegram_42.jsonl", ns=(1, 1)),
        _link,
        _twin,
        lambda folder: os.mkfifo(folder / "fifo.jsonl"),
    ],
    ids=["grown", "gone", "added", "touched", "symlink", "duplicate key", "fifo"],
)
def test_any_change_to_the_folder_is_seen(change, tmp_path: Path, cache: Path) -> None:
    folder = _copy("sessions", tmp_path)
    load(folder)
    change(folder)
    with pytest.warns(UserWarning, match="duplicate") if change is _twin else nullcontext():
        found = load(folder)
    assert found._snapshot is None
    with pytest.warns(UserWarning, match="duplicate") if change is _twin else nullcontext():
        fresh = load(folder, cache=False)
    _assert_same(found, fresh)


def test_a_temp_file_left_beside_the_sessions_is_reported(tmp_path: Path, cache: Path) -> None:
    folder = _copy("sessions", tmp_path)
    load(folder)
    (folder / "telegram_42.jsonl.tmp").write_text("x")
    found = load(folder)
    assert found._snapshot is not None
    assert found.problems["reason"].str.startswith("leftover temp file").sum() == 1
    _assert_same(found, load(folder, cache=False))


def test_a_store_a_catalog_cannot_hold_opens_through_its_pack(tmp_path: Path, cache: Path) -> None:
    folder = _copy("sessions", tmp_path)
    with (folder / "odd.jsonl").open("w", encoding="utf-8") as file:
        file.write(json.dumps({"_type": "metadata", "key": "odd:1"}) + "\n")
        file.write(json.dumps({"role": "user", "content": "lone \udc80"}) + "\n")
    load(folder)
    assert _catalogs(cache) == []
    warm = load(folder)
    assert warm._snapshot is None
    _assert_same(warm, load(folder, cache=False))


def test_a_damaged_catalog_is_removed_rebuilt_and_never_trusted(
    tmp_path: Path, cache: Path
) -> None:
    folder = _copy("sessions", tmp_path)
    load(folder)
    [catalog] = _catalogs(cache)
    data = bytearray(catalog.read_bytes())
    data[len(data) // 2] ^= 0xFF
    catalog.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="damaged cache file"):
        found = load(folder)
    assert found._snapshot is None
    _assert_same(found, load(folder, cache=False))
    assert _catalogs(cache) == [catalog]  # rebuilt from the pack by that load
    assert load(folder)._snapshot is not None


def test_a_catalog_of_another_pack_is_not_used(tmp_path: Path, cache: Path) -> None:
    folder = _copy("sessions", tmp_path)
    load(folder)
    [catalog] = _catalogs(cache)
    pack = catalog.parent.parent / "stores" / catalog.name
    table = sessionkit.store.index._open_pack(pack, sessionkit.store.index.MESSAGE_TABLE)
    assert table is not None
    rows, checksum = table.table.num_rows, table.checksum
    layout = sessionkit.store.index.FORMAT
    assert read_catalog(catalog, checksum, rows, layout) is not None
    assert read_catalog(catalog, checksum ^ 1, rows, layout) is None
    assert read_catalog(catalog, checksum, rows, layout + 1) is None
    with pytest.warns(UserWarning, match="row counts disagree"):
        assert read_catalog(catalog, checksum, rows + 1, layout) is None
    assert not catalog.exists()


def test_sessions_of_a_snapshot_parse_their_files_on_first_use(tmp_path: Path, cache: Path) -> None:
    folder = _copy("sessions", tmp_path)
    load(folder)
    warm = load(folder)
    fresh = load(folder, cache=False)
    assert warm["telegram:42"].messages == fresh["telegram:42"].messages
    assert "telegram:42" in warm


def test_a_pack_that_disagrees_with_its_catalog_is_reported_and_the_corpus_kept(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _copy("sessions", tmp_path)
    load(folder)
    warm = load(folder)
    monkeypatch.setattr(sessionkit.store.index, "FORMAT", sessionkit.store.index.FORMAT + 1)
    with (
        pytest.warns(UserWarning, match="damaged cache file"),
        pytest.raises(IntegrityError, match="disagrees with its catalog"),
    ):
        list(warm)
    assert warm._snapshot is not None  # its frames still answer
    monkeypatch.undo()
    pd.testing.assert_frame_equal(warm.messages, load(folder, cache=False).messages)


def test_a_folder_gone_while_its_files_are_checked_is_a_changed_store(tmp_path: Path) -> None:
    assert sessionkit.store.snapshot._identities(str(tmp_path / "gone"), ["a.jsonl"]) is None
    (tmp_path / "a.jsonl").write_text("{}\n")
    (tmp_path / "b.jsonl").mkdir()
    assert sessionkit.store.snapshot._identities(str(tmp_path), ["a.jsonl", "b.jsonl"]) is None
    [device], [inode], [size], *_ = sessionkit.store.snapshot._identities(
        str(tmp_path), ["a.jsonl"]
    )
    found = os.stat(tmp_path / "a.jsonl")
    assert (device, inode, size) == (found.st_dev, found.st_ino, 3)


def test_sessions_of_a_snapshot_count_through_the_cache_folder_of_their_load(
    tmp_path: Path, cache: Path
) -> None:
    folder = _copy("sessions", tmp_path)
    chosen = tmp_path / "chosen"
    load(folder, cache=chosen)
    warm = load(folder, cache=chosen)
    assert warm._snapshot is not None
    assert token_cache_of(list(warm)) is token_cache_in(chosen)
    assert not cache.exists()  # nothing went to the default cache folder
