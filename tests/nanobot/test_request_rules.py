"""sessionkit.nanobot.request_rules: the shared steps whose keyword carries a release's rule."""

from __future__ import annotations

from typing import Any

from sessionkit.nanobot.request_rules import backfill, drop_orphan_results

CALLS = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "read_file", "arguments": "{}"}},
        {"id": 7, "type": "function", "function": {"name": 42, "arguments": "{}"}},
    ],
}


def _result(call_id: Any, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": "read_file", "content": text}


ORPHANS = [
    {"role": "user", "content": "hi"},
    _result("a", "before its call"),
    CALLS,
    _result("a", "first"),
    _result("a", "again"),
    _result(None, "no id"),
    _result("zz", "unknown"),
    _result("7", "seven"),
]


def test_drop_orphan_results_strict_drops_repeats_and_results_without_id() -> None:
    kept = drop_orphan_results(ORPHANS, strict=True)
    assert [m.get("content") for m in kept] == ["hi", None, "first", "seven"]


def test_drop_orphan_results_lenient_keeps_repeats_and_results_without_id() -> None:
    kept = drop_orphan_results(ORPHANS, strict=False)
    assert [m.get("content") for m in kept] == ["hi", None, "first", "again", "no id", "seven"]


UNANSWERED = [CALLS, {"role": "user", "content": "next"}]


def test_backfill_keeps_a_name_that_is_not_text() -> None:
    out = backfill(UNANSWERED, "missing", str_names=False)
    assert out == [
        CALLS,
        {"role": "tool", "tool_call_id": "a", "name": "read_file", "content": "missing"},
        {"role": "tool", "tool_call_id": "7", "name": 42, "content": "missing"},
        {"role": "user", "content": "next"},
    ]


def test_backfill_str_names_makes_the_name_text() -> None:
    out = backfill(UNANSWERED, "missing", str_names=True)
    assert [m.get("name") for m in out] == [None, "read_file", "42", None]
    assert out[2] == {"role": "tool", "tool_call_id": "7", "name": "42", "content": "missing"}


def test_backfill_inserts_after_the_results_that_follow_the_call() -> None:
    messages = [CALLS, _result("a", "done"), {"role": "user", "content": "next"}]
    out = backfill(messages, "missing", str_names=True)
    assert [(m["role"], m.get("content")) for m in out] == [
        ("assistant", None),
        ("tool", "done"),
        ("tool", "missing"),
        ("user", "next"),
    ]
    assert backfill(out, "missing", str_names=True) is out
