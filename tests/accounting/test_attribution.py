"""Calls tied to their session, turn and step: by time windows, by counts when windows overlap,
by recorded usage exactly; summary calls to their turn; what stays ambiguous stays untied."""

from __future__ import annotations

from pathlib import Path
from zoneinfo import ZoneInfo

from support.usage_fixtures import (
    call,
    checkpoint,
    last_usage,
    ledger,
    reply,
    tied,
    tool_round,
    user,
    write_log,
    write_session,
    write_turn_end,
)

PARIS = ZoneInfo("Europe/Paris")


def test_sequential_turns_are_tied_by_their_windows_and_last_usage_confirms_exactly(
    tmp_path: Path,
) -> None:
    write_session(
        tmp_path,
        "telegram:alice",
        [
            user("read a.md", 0),
            *tool_round("c1", 5),
            reply("done", 5),
            user("thanks", 20),
            reply("welcome", 22),
        ],
        {"_last_usage": last_usage(1, 1000, 10)},
    )
    write_session(tmp_path, "slack:bob", [user("hi", 10), reply("hello", 12)])
    write_log(tmp_path, [call(1), call(3), call(11), call(21)])
    frame = ledger(tmp_path)
    assert tied(frame) == [
        (1, "telegram:alice", 0, 0, "agent", "time"),
        (2, "telegram:alice", 0, 1, "agent", "time"),
        (3, "slack:bob", 0, 0, "agent", "time"),
        (4, "telegram:alice", 1, 0, "agent", "exact"),
    ]
    assert frame.summary == {
        "calls": 4,
        "exact": 1,
        "time": 3,
        "ambiguous": 0,
        "outside": 0,
        "unattributed": 0,
        "daily_rows": 0,
        "tz": "UTC",
    }


def test_overlapping_windows_are_broken_by_the_calls_each_turn_saved(tmp_path: Path) -> None:
    write_session(tmp_path, "telegram:a", [user("one call", 0), reply("a", 10)])
    write_session(
        tmp_path, "telegram:b", [user("two calls", 2), *tool_round("c1", 12), reply("b", 12)]
    )
    write_log(tmp_path, [call(1), call(5), call(11.5)])
    assert tied(ledger(tmp_path)) == [
        (1, "telegram:a", 0, 0, "agent", "time"),
        (2, "telegram:b", 0, 0, "agent", "time"),
        (3, "telegram:b", 0, 1, "agent", "time"),
    ]


def test_what_counts_cannot_break_stays_unattributed_and_is_counted(tmp_path: Path) -> None:
    write_session(tmp_path, "telegram:a", [user("x", 0), reply("a", 10)])
    write_session(tmp_path, "telegram:b", [user("y", 0.5), reply("b", 10.5)])
    write_log(tmp_path, [call(3), call(6)])
    frame = ledger(tmp_path)
    assert tied(frame) == [
        (1, None, None, None, "agent", None),
        (2, None, None, None, "agent", None),
    ]
    summary = frame.summary
    assert (summary["ambiguous"], summary["unattributed"], summary["outside"]) == (2, 2, 0)


def test_calls_of_one_turn_never_overlap(tmp_path: Path) -> None:
    write_session(tmp_path, "telegram:a", [user("x", 0), *tool_round("c1", 10), reply("a", 10)])
    write_session(tmp_path, "telegram:b", [user("y", 0.5), reply("b", 10)])
    # a takes two calls that do not overlap, b one: the last call is a's either way
    write_log(tmp_path, [call(1, duration=5), call(2, duration=1), call(7, duration=1)])
    assert tied(ledger(tmp_path)) == [
        (1, None, None, None, "agent", None),
        (2, None, None, None, "agent", None),
        (3, "telegram:a", 0, None, "agent", "time"),
    ]


def test_webui_round_usages_tie_calls_exactly(tmp_path: Path) -> None:
    write_session(tmp_path, "websocket:chat1", [user("x", 0), reply("a", 10)])
    write_session(tmp_path, "telegram:b", [user("y", 0.5), reply("b", 10.5)])
    write_turn_end(tmp_path, "chat1", 10.2, [(1200, 30)])
    write_log(tmp_path, [call(3, 900, 20), call(6, 1200, 30)])
    assert tied(ledger(tmp_path)) == [
        (1, "telegram:b", 0, 0, "agent", "time"),
        (2, "websocket:chat1", 0, 0, "agent", "exact"),
    ]


def test_summary_calls_go_to_their_turn_other_dream_and_cron_calls_to_none(
    tmp_path: Path,
) -> None:
    write_session(
        tmp_path,
        "telegram:gov",
        [
            user("first", 0),
            reply("one", 2),
            checkpoint(13.9),
            user("second", 10),
            *tool_round("c1", 14),
            reply("two", 14),
            user("(cron job)", 20, _cron_turn=True),
            reply("reminder sent", 22),
        ],
    )
    write_log(
        tmp_path,
        [
            call(1),
            call(1.6, source="dream"),  # a Dream run during a turn that did not summarise
            call(11, source="dream"),
            call(12),
            call(13),
            call(21, source="cron"),
            call(30, source="dream"),
            call(40, source="cron"),
            call(50),
        ],
    )
    frame = ledger(tmp_path)
    assert tied(frame) == [
        (1, "telegram:gov", 0, 0, "agent", "time"),
        (2, None, None, None, "other", None),
        (3, "telegram:gov", 1, 0, "summary", "time"),
        (4, "telegram:gov", 1, 0, "agent", "time"),
        (5, "telegram:gov", 1, 1, "agent", "time"),
        (6, "telegram:gov", None, 0, "agent", "time"),
        (7, None, None, None, "other", None),
        (8, None, None, None, "other", None),
        (9, None, None, None, "agent", None),
    ]
    assert frame.summary["outside"] == 1


def test_a_retry_repeats_its_step(tmp_path: Path) -> None:
    write_session(tmp_path, "telegram:a", [user("x", 0), *tool_round("c1", 5), reply("a", 5)])
    write_log(tmp_path, [call(1, None, None, finish="error"), call(2), call(4), call(6)])
    frame = ledger(tmp_path)
    assert tied(frame) == [
        (1, "telegram:a", 0, 0, "agent", "time"),
        (2, "telegram:a", 0, 0, "agent", "time"),
        (3, "telegram:a", 0, 1, "agent", "time"),
        (4, None, None, None, "agent", None),
    ]
    assert frame["prompt_tokens"].isna().tolist() == [True, False, False, False]


def test_session_times_are_read_in_the_zone_given_and_a_wrong_zone_is_named(
    tmp_path: Path,
) -> None:
    for n in range(4):
        start = 100 * n
        write_session(
            tmp_path, f"telegram:{n}", [user("x", start, PARIS), reply("y", start + 5, PARIS)]
        )
    write_log(tmp_path, [call(100 * n + 1) for n in range(4)])
    right = ledger(tmp_path, tz="Europe/Paris")
    assert [r[1:4] for r in tied(right)] == [(f"telegram:{n}", 0, 0) for n in range(4)]
    wrong = ledger(tmp_path, tz="UTC")
    assert tied(wrong) == [(n + 1, None, None, None, "agent", None) for n in range(4)]
    assert wrong.problems["reason"].tolist()[-1] == (
        "4 of 4 agent calls fall in no turn window; with session times read -1 h off, 4 "
        "would: pass tz= the zone nanobot ran in"
    )
