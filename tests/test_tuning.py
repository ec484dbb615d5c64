"""The thresholds live in one place, and ``tuned`` sets them for a block only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sessionkit.tuning import TUNING, Tuning, tuned

PACKAGE = Path(__file__).resolve().parents[1] / "sessionkit"


def test_tuned_sets_for_the_block_and_restores() -> None:
    before = TUNING.pack_min
    with tuned(pack_min=2, racy_ns=0) as tuning:
        assert tuning is TUNING
        assert (TUNING.pack_min, TUNING.racy_ns) == (2, 0)
    assert (TUNING.pack_min, TUNING.racy_ns) == (before, Tuning().racy_ns)


def test_tuned_restores_after_an_error_and_refuses_unknown_names() -> None:
    with pytest.raises(RuntimeError), tuned(split_messages=4):
        raise RuntimeError
    assert TUNING.split_messages == Tuning().split_messages
    with (
        pytest.raises(TypeError, match="no threshold pack_size; the thresholds are"),
        tuned(pack_size=2),
    ):
        pass


def test_no_module_keeps_a_threshold_of_its_own() -> None:
    """The names the thresholds had as module constants are gone from the package."""
    old = {
        "READ_PROGRESS_BYTES", "COUNT_PROGRESS_MESSAGES", "FORK_BYTES", "PACK_MIN", "RUN_BYTES",
        "RUN_FILES", "STREAM_BYTES", "RACY_NS", "_SETTLED_NS", "_PARALLEL_MIN_MESSAGES",
        "_MERGED_KEYS", "_FLUSH_COUNTS", "_SEGMENTS", "BATCH_CHARS", "_AUTO_PARALLEL_MESSAGES",
        "_CHUNK_MESSAGES", "_SPLIT_MESSAGES", "_PERSIST_MIN_MESSAGES",
    }  # fmt: skip
    found = [
        f"{path.relative_to(PACKAGE)}: {target.id}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name) and target.id in old
    ]
    assert found == []
