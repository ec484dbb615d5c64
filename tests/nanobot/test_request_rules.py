"""sessionkit.nanobot.request_rules: the shared steps whose keyword carries a release's rule."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from sessionkit.nanobot.request_rules import (
    alternate,
    backfill,
    content_parts,
    drop_orphan_results,
    estimate_request,
    merge_contents,
    newest_fitting,
    request_parts,
    short_id,
    unique_id,
    wire_keys,
)

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


def _no_id() -> str:
    raise ValueError("no id")


def _call(call_id: Any, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": arguments}}


TWO_CALLS = [
    {"role": "assistant", "content": "looking", "tool_calls": [_call("x", "{}"), _call("x", 5)]},
    {"role": "tool", "tool_call_id": "x", "content": "one", "_meta": {"k": 1}},
    {"role": "tool", "tool_call_id": "x", "content": "two", "timestamp": "t"},
]


def test_wire_keys_nulls_assistant_text_beside_calls_when_asked() -> None:
    out = wire_keys(TWO_CALLS, missing_id=_no_id, arguments=repr, null_text_beside_calls=True)
    renamed = hashlib.sha1(b"x:1:1").hexdigest()[:9]
    assert out == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("x", "'{}'"), _call(renamed, "5")],
        },
        {"role": "tool", "tool_call_id": "x", "content": "one"},
        {"role": "tool", "tool_call_id": renamed, "content": "two"},
    ]


def test_wire_keys_keeps_assistant_text_beside_calls_otherwise() -> None:
    out = wire_keys(TWO_CALLS, missing_id=_no_id, arguments=repr, null_text_beside_calls=False)
    assert out[0]["content"] == "looking"
    assert [call["id"] for call in out[0]["tool_calls"]] == ["x", short_id("x:1:1")]


def test_wire_keys_asks_missing_id_for_a_call_without_one() -> None:
    message = {"role": "assistant", "tool_calls": [_call(None, None), _call("", None)]}
    ids = iter(["new", "new"])
    out = wire_keys(
        [message], missing_id=lambda: next(ids), arguments=str, null_text_beside_calls=False
    )
    assert out == [
        {
            "role": "assistant",
            "tool_calls": [_call("new", "None"), _call(short_id("new:1:1"), "None")],
            "content": None,
        }
    ]
    with pytest.raises(ValueError, match="no id"):
        wire_keys([message], missing_id=_no_id, arguments=str, null_text_beside_calls=False)


def test_unique_id_takes_the_first_free_salt() -> None:
    first = short_id("a:2:1")
    assert unique_id("a", set(), 2) == "a"
    assert unique_id("a", {"a"}, 2) == first
    assert unique_id("a", {"a", first}, 2) == short_id("a:2:2")
    assert short_id("abc123XYZ") == "abc123XYZ"
    assert short_id("abc") == hashlib.sha1(b"abc").hexdigest()[:9]


USERS = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "text"},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
    {"role": "assistant", "content": "done"},
]


def test_alternate_replaces_a_user_text_by_blocks_without_merge_user_blocks() -> None:
    out = alternate(USERS, "(go)", merge_user_blocks=False)
    assert out == [USERS[0], USERS[2]]


def test_alternate_joins_user_contents_as_blocks_with_merge_user_blocks() -> None:
    out = alternate(USERS, "(go)", merge_user_blocks=True)
    assert out == [
        USERS[0],
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "text"},
                {"type": "image_url", "image_url": {"url": "u"}},
            ],
        },
    ]
    assert out[1]["content"][1] is not USERS[2]["content"][0]


@pytest.mark.parametrize("merge_user_blocks", [False, True])
def test_alternate_joins_texts_and_starts_with_a_user(merge_user_blocks: bool) -> None:
    messages = [
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b "},
        {"role": "assistant", "content": "bye"},
    ]
    assert alternate(messages, "(go)", merge_user_blocks=merge_user_blocks) == [
        {"role": "user", "content": "(go)"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "a\n\nb"},
    ]


@pytest.mark.parametrize(
    ("left", "right", "drop", "expected"),
    [
        ("a", "", False, "a\n\n"),
        ("a", "", True, "a"),
        ("", "b", True, "b"),
        ("a", "b", True, "a\n\nb"),
        (None, "b", True, [{"type": "text", "text": "b"}]),
        (
            ["x", {"type": "image_url"}],
            3,
            False,
            [
                {"type": "text", "text": "x"},
                {"type": "image_url"},
                {"type": "text", "text": "3"},
            ],
        ),
    ],
)
def test_merge_contents(left: Any, right: Any, drop: bool, expected: Any) -> None:
    assert merge_contents(left, right, drop_empty_right=drop) == expected


IMAGE = {"type": "image_url", "image_url": {"url": "u"}}
ODD_TEXT = [
    {
        "role": "assistant",
        "content": [{"type": "text", "text": 7}, {"type": "text", "text": "seen"}, IMAGE],
        "reasoning_content": "why",
        "tool_calls": [{"id": "c", "function": {"name": "f"}}],
        "name": "",
        "tool_call_id": "c0",
    },
    {"role": "user", "content": "hi"},
]


def test_request_parts_keeps_or_skips_a_text_that_is_not_a_string() -> None:
    calls = '[{"id": "c", "function": {"name": "f"}}]'
    assert request_parts(ODD_TEXT, skip_non_string_text=False) == [
        7,
        "seen",
        calls,
        "why",
        "c0",
        "hi",
    ]
    assert request_parts(ODD_TEXT, skip_non_string_text=True) == ["seen", calls, "why", "c0", "hi"]


def test_estimate_request_counts_parts_tools_and_framing() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    payload = "\n".join(request_parts(ODD_TEXT, skip_non_string_text=True))
    rendered = "\n" + json.dumps(tools)
    assert estimate_request(ODD_TEXT, tools, len, skip_non_string_text=True) == (
        len(payload) + len(rendered) + 8
    )
    with pytest.raises(TypeError):
        estimate_request(ODD_TEXT, tools, len, skip_non_string_text=False)


def test_estimate_request_takes_utf8_bytes_when_count_raises() -> None:
    def refuse(text: str) -> int:
        raise ValueError(text)

    messages = [{"role": "user", "content": "é"}]
    assert estimate_request(messages, [], refuse, skip_non_string_text=True) == 2 + 4
    assert estimate_request(messages, [{"a": 1}], refuse, skip_non_string_text=False) == (
        len('é\n[{"a": 1}]'.encode()) + 4
    )


def test_newest_fitting_keeps_the_newest_within_room_and_always_one() -> None:
    messages = [{"n": 5}, {"n": 1}, {"n": 2}, {"n": 3}]
    assert newest_fitting(messages, 6, lambda m: m["n"]) == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert newest_fitting(messages, 5, lambda m: m["n"]) == [{"n": 2}, {"n": 3}]
    assert newest_fitting(messages, 0, lambda m: m["n"]) == [{"n": 3}]
    assert newest_fitting([], 9, lambda m: m["n"]) == []


BLOCKS = [{"type": "text", "text": 7}, {"type": "text", "text": ""}, {"type": "text"}, "x", IMAGE]


@pytest.mark.parametrize(
    ("content", "skip", "other", "expected"),
    [
        ("", False, True, [""]),
        (BLOCKS, False, False, [7]),
        (BLOCKS, True, False, []),
        (BLOCKS, False, True, [7, '"x"', json.dumps(IMAGE)]),
        (BLOCKS, True, True, ['"x"', json.dumps(IMAGE)]),
        ({"k": "é"}, False, True, ['{"k": "é"}']),
        ({"k": "é"}, False, False, []),
        (None, False, True, []),
    ],
)
def test_content_parts(content: Any, skip: bool, other: bool, expected: list[Any]) -> None:
    assert content_parts(content, skip_non_string_text=skip, other_blocks=other) == expected
