"""Window stacks kept in the index: read back equal to the stacks computed, sharing the
bytes of their entries with the replays they came from."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import sessionkit
from sessionkit import Session
from sessionkit.simulate.replay import replay_all
from sessionkit.simulate.windowing import _stack, _stack_arrays, _stack_of
from sessionkit.store import memo
from sessionkit.store.integrity import read_sealed
from sessionkit.tuning import TUNING

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "q", "timestamp": "2026-01-01T10:00:00"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "r"},
    {"role": "tool", "tool_call_id": "c9", "content": "orphan"},
    {"role": "user", "content": "/new", "_command": True},
    {"role": "assistant", "content": "done"},
]


def test_a_stack_taken_apart_and_made_again_is_equal() -> None:
    sessions = [Session("a", MESSAGES), Session("b", MESSAGES[2:]), Session("c", [])]
    stack = _stack(replay_all(sessions, policy="nanobot-0.2", progress=False))
    arrays = _stack_arrays(stack)
    assert not {"users", "rank", "entry_user", "entry_users"} & set(arrays)
    assert arrays["kept"].tolist() == [0, 1, 2, 3, 5, 0, 1, 3]  # each session's own
    again = _stack_of(arrays)
    for field in fields(stack):
        before, after = getattr(stack, field.name), getattr(again, field.name)
        for a, b in zip(*(v if isinstance(v, list) else [v] for v in (before, after)), strict=True):
            assert a.dtype == b.dtype, field.name
            np.testing.assert_array_equal(a, b, err_msg=field.name)
    built: list = []
    first, second = _stack_of(arrays, built), _stack_of(dict(arrays), built)
    assert second.raw_jumps is first.raw_jumps and second.entry_jumps is first.entry_jumps
    assert _stack_of(arrays).raw_jumps is not first.raw_jumps  # made again without ``built``


def test_a_kept_stack_shares_its_entries_with_the_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stack's per-session entry indices and token counts are the replays' own bytes,
    kept once; the windows read back equal those computed."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    for n in range(2):
        lines = [{"_type": "metadata", "key": f"k:{n}"}, *MESSAGES[n:]]
        (folder / f"k_{n}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(TUNING, "racy_ns", 0)
    monkeypatch.setattr(TUNING, "persist_min_messages", 0)
    first = sessionkit.windows(sessionkit.load(folder), policy="nanobot-0.2")
    named: dict[str, list[list[str]]] = {}
    for kind in ("derived", "replays"):
        for path in (tmp_path / "cache").glob(f"index-*/{kind}/*-*.arrow"):
            described = json.loads(read_sealed(path)[0].schema.metadata[b"sessionkit"])
            named[kind] = described["shared"]
    replays: dict[str, set[str]] = {}
    for name, _, digest in named["replays"]:
        replays.setdefault(digest, set()).add(name)
    same = {name: replays.get(digest, set()) for name, _, digest in named["derived"]}
    assert {"is_user", "delivery", "command", "kept"} <= {k for k, v in same.items() if k in v}
    assert "tokens" in same["prefix"] and "entries" in same["entry_sizes"]
    memo.clear()
    pd.testing.assert_frame_equal(
        sessionkit.windows(sessionkit.load(folder), policy="nanobot-0.2"), first
    )
