"""0.3.5's context governor rules on plain data: which checkpoint belongs to which turn, what a
turn began from, the messages of the calls around a summary, and the two budgets.

The whole against the release itself is ``tests/calls/test_governor_e2e.py``; the texts here
are stand-ins (the real ones come from the release's kit and probe).
"""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

from sessionkit.nanobot.governor_035 import (
    Summary,
    archive_fits,
    candidate_messages,
    checkpoints,
    governed_turn,
    input_budget,
    journal_summaries,
    sent_messages,
    summary_messages,
    verdict,
)
from sessionkit.nanobot.history import CONTINUATION_TEXT
from sessionkit.nanobot.policy_035 import Policy035

POLICY = Policy035()
DAY = "2026-01-01T"
KIT: dict[str, Any] = {
    "loop": {
        "placeholder_assistant": ["[omitted]"],
        "backfill": "[lost]",
        "continuation": CONTINUATION_TEXT,
        "max_tool_result_chars": 16_000,
        "tool_results_root": "/w/.nanobot/tool-results",
        "preview_chars": 1200,
        "offload_exempt_tools": ["read_file"],
        "empty_tool_result": "(\u0000SK:name\u0000 completed with no output)",
        "tool_result_reference": "[saved \u0000SK:path\u0000]",
        "tool_result_reference_cut": "[saved \u0000SK:path\u0000, cut]",
        "tool_result_too_long": "[too long \u0000SK:path\u0000]",
    }
}
ARCHIVE = {"role": "user", "content": "Summarise, please."}


def _user(text: str, at: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": DAY + at}


def _checkpoint(at: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": CONTINUATION_TEXT,
        "_hidden_history": True,
        "timestamp": DAY + at,
    }


def _call(call_id: str, at: str) -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call], "timestamp": DAY + at},
        {
            "role": "tool",
            "tool_call_id": call_id,
            "name": "f",
            "content": "r",
            "timestamp": DAY + at,
        },
    ]


def _final(text: str, at: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text, "timestamp": DAY + at}


# turn 0: no summary; turn 1: summary before its step 1 (checkpoint after the user message);
# turn 2: summary at its start (checkpoint before its user message, stamped later);
# then an idle archive between turns 2 and 3 (stamped before turn 3's message).
MESSAGES = [
    _user("one", "10:00:00"),
    _final("one done", "10:00:05"),
    _user("two", "10:01:00"),
    _checkpoint("10:01:30"),
    *_call("c1", "10:01:30"),
    _final("two done", "10:01:30"),
    _checkpoint("10:02:40"),
    _user("three", "10:02:00"),
    _final("three done", "10:02:40"),
    _checkpoint("10:03:00"),
    _user("four", "10:04:00"),
    _final("four done", "10:04:05"),
]
STORED = {"text": "S3", "last_active": DAY + "10:03:00.5"}
USERS = [0, 2, 8, 11]


def _turn(turn: int, texts: list[str] | None = None) -> Any:
    stop = USERS[turn + 1] if turn + 1 < len(USERS) else len(MESSAGES)
    return governed_turn(
        MESSAGES,
        USERS[turn],
        stop,
        {"_last_summary": STORED},
        is_turn=POLICY.is_user_turn,
        texts=texts,
        zone=UTC,
    )


def test_checkpoints_and_which_turn_wrote_them() -> None:
    assert checkpoints(MESSAGES) == [3, 7, 10]
    texts = ["S1", "S2", "S3"]
    first, mid, start, idle = (_turn(t, texts) for t in range(4))
    assert (first.before, first.offset, first.last_summary, first.summary_step) == (
        MESSAGES[:0],
        0,
        None,
        None,
    )
    assert (mid.offset, mid.summary_step, mid.before) == (0, 1, MESSAGES[:2])
    assert mid.summary == Summary("S1", DAY + "10:01:00+00:00", ("text", "last_active"))
    assert (start.offset, start.summary_step, start.before) == (3, 0, MESSAGES[:7])
    assert start.last_summary == {"text": "S1", "last_active": DAY + "10:01:00"}
    assert start.last_summary_inferred == ("text", "last_active")
    assert start.summary == Summary("S2", DAY + "10:02:00+00:00", ("text", "last_active"))
    assert (idle.offset, idle.summary_step, idle.summary, idle.before) == (
        10,
        None,
        None,
        MESSAGES[:11],
    )
    assert (idle.last_summary, idle.last_summary_inferred) == (STORED, ())


def test_without_the_journal_the_latest_text_stands_in() -> None:
    start = _turn(2, ["only one"])  # the journal does not line up with the checkpoints
    assert start.summary == Summary("S3", DAY + "10:02:00+00:00", ("text", "last_active"))
    assert start.last_summary == {"text": "S3", "last_active": DAY + "10:01:00"}


def test_a_session_without_checkpoints_keeps_its_stored_summary() -> None:
    plain = [_user("one", "10:00:00"), _final("done", "10:00:01"), _user("two", "10:00:02")]
    turn = governed_turn(plain, 2, 3, {"_last_summary": STORED}, is_turn=POLICY.is_user_turn)
    assert (turn.before, turn.offset, turn.last_summary, turn.summary_step) == (
        plain[:2],
        0,
        STORED,
        None,
    )


def test_an_idle_archive_is_stamped_with_the_last_message_before_it() -> None:
    later = [*MESSAGES, _checkpoint("10:05:00"), _user("five", "10:06:00")]
    turn = governed_turn(
        later, len(later) - 1, len(later), {"_last_summary": STORED}, is_turn=POLICY.is_user_turn
    )
    assert turn.offset == len(later) - 2
    assert turn.last_summary == STORED  # the latest checkpoint: as stored
    earlier = governed_turn(
        later, 11, len(later) - 2, {"_last_summary": STORED}, is_turn=POLICY.is_user_turn
    )
    assert earlier.last_summary == {"text": "S3", "last_active": DAY + "10:02:40"}


SYSTEM = {"role": "system", "content": "sys"}
HISTORY = [{"role": "user", "content": "h"}, {"role": "assistant", "content": "a"}]
CURRENT = {"role": "user", "content": "now"}
A0, R0 = ({k: v for k, v in m.items() if k != "timestamp"} for m in _call("c0", "x"))
A1, R1 = ({k: v for k, v in m.items() if k != "timestamp"} for m in _call("c1", "x"))
STEPS = [[], [A0, R0], [A0, R0, A1, R1]]
CONTINUATION = {"role": "user", "content": CONTINUATION_TEXT}


def _calls(builder: Any, step: int, summary_step: int | None) -> list[dict[str, Any]]:
    return builder(
        KIT,
        "telegram:1",
        system="sys",
        history=HISTORY,
        current=CURRENT,
        steps=STEPS,
        step=step,
        summary_step=summary_step,
        summary_system="sys+S",
    )


def test_the_calls_after_a_summary_start_from_it() -> None:
    summarised = {"role": "system", "content": "sys+S"}
    assert _calls(sent_messages, 0, 1) == [SYSTEM, *HISTORY, CURRENT]
    assert _calls(sent_messages, 1, 1) == [summarised, CONTINUATION, A0, R0]
    assert _calls(sent_messages, 2, 1) == [summarised, CONTINUATION, A0, R0, A1, R1]
    assert _calls(sent_messages, 0, 0) == [summarised, CONTINUATION, CURRENT]
    assert _calls(sent_messages, 1, 0) == [summarised, CONTINUATION, CURRENT, A0, R0]
    assert _calls(sent_messages, 2, None) == [SYSTEM, *HISTORY, CURRENT, A0, R0, A1, R1]


def test_the_governor_measured_what_would_have_gone_out() -> None:
    assert _calls(candidate_messages, 1, 1) == [SYSTEM, *HISTORY, CURRENT, A0, R0]
    assert _calls(candidate_messages, 0, 0) == [SYSTEM, *HISTORY, CURRENT]
    assert _calls(candidate_messages, 2, 1) == _calls(sent_messages, 2, 1)


def test_a_summary_call_sends_the_accepted_messages_and_the_instruction() -> None:
    def summary(step: int) -> list[dict[str, Any]]:
        return summary_messages(
            KIT,
            "telegram:1",
            ARCHIVE,
            system="sys",
            history=HISTORY,
            current=CURRENT,
            steps=STEPS,
            step=step,
        )

    assert summary(0) == [SYSTEM, *HISTORY, ARCHIVE]
    twice = [{"role": "user", "content": "h"}, {"role": "user", "content": "h2"}]
    cleaned = summary_messages(
        KIT,
        "telegram:1",
        ARCHIVE,
        system="sys",
        history=twice,
        current=CURRENT,
        steps=STEPS,
        step=0,
    )
    assert cleaned == [SYSTEM, {"role": "user", "content": "h\n\nh2"}, ARCHIVE]  # loop clean-up
    assert summary(1) == [SYSTEM, *HISTORY, CURRENT, ARCHIVE]
    assert summary(2) == [SYSTEM, *HISTORY, CURRENT, A0, R0, ARCHIVE]


def test_the_budgets() -> None:
    assert input_budget(10_680, 256) == 9_400
    assert input_budget(1_000, 256) == 0
    assert [verdict(t, 10_680, 256) for t in (9_399, 9_400, 9_401)] == [False, True, True]
    assert verdict(10**9, 0, 256) is False  # no context window: no governor
    assert verdict(0, 1_000, 256) is True  # no room at all: every call is over
    assert [archive_fits(t, 10_680, 256) for t in (10_424, 10_425)] == [True, False]
    assert archive_fits(0, 256, 256) is False


def test_the_journal_lists_one_sessions_summaries_in_order() -> None:
    lines = [
        {"cursor": 1, "content": "A", "session_key": "telegram:1"},
        {"cursor": 2, "content": "other", "session_key": "slack:2"},
        "not json",
        {"cursor": 3, "content": 7, "session_key": "telegram:1"},
        {"cursor": 4, "content": "B", "session_key": "telegram:1"},
    ]
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    assert journal_summaries(text, "telegram:1") == ["A", "B"]
    assert journal_summaries(text, "cli:direct") == []
