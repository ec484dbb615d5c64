"""What ``usage`` keeps between calls (the log's rows, each session's turns, the attribution)
is used only while the files are the versions it came from."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from support.usage_fixtures import call, ledger, reply, tied, user, write_log, write_session

from sessionkit.accounting import ledger as ledger_module
from sessionkit.store import memo
from sessionkit.tuning import TUNING


def test_a_second_call_reuses_what_is_kept_and_sees_changed_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TUNING, "racy_ns", 0)  # keep the files just written
    data, cache = tmp_path / "data", tmp_path / "cache"
    cache.mkdir(mode=0o700)
    write_session(data, "telegram:alice", [user("x", 0), reply("y", 2)])
    write_log(data, [call(1)])
    memo.clear()
    first = ledger(data, cache=cache)
    assert tied(first) == [(1, "telegram:alice", 0, 0, "agent", "time")]
    assert (memo.size("turn times"), len(ledger_module._TIED)) == (1, 1)
    kept = next(iter(ledger_module._TIED.values()))
    again = ledger(data, cache=cache)
    pd.testing.assert_frame_equal(again, first, check_exact=True)
    assert [a is kept for a in ledger_module._TIED.values()] == [True]
    write_session(
        data, "telegram:alice", [user("x", 0), reply("y", 2), user("z", 10), reply("w", 12)]
    )
    write_log(data, [call(11)])
    later = ledger(data, cache=cache)
    assert tied(later) == [
        (1, "telegram:alice", 0, 0, "agent", "time"),
        (2, "telegram:alice", 1, 0, "agent", "time"),
    ]
    assert (memo.size("turn times"), len(ledger_module._TIED)) == (2, 2)
