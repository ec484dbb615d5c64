"""Comparing an answer with the session's: hand-made cases of same_action, the text ratio,
the samples' agreement, and which stored message answered which call."""

from __future__ import annotations

import math

import sessionkit as sk
from sessionkit.experiments.compare import (
    action_of,
    agreement,
    same_action,
    stored_answers,
    text_similarity,
)


def call(name: str, arguments: str) -> dict[str, str]:
    return {"name": name, "arguments": arguments}


def test_same_action_is_the_same_tools_with_json_equal_arguments_in_order() -> None:
    a = [call("read_file", '{"path": "a.txt", "limit": 10}')]
    assert same_action(a, [call("read_file", '{"limit":10,"path":"a.txt"}')]) is True
    assert same_action(a, [call("read_file", '{"path": "b.txt", "limit": 10}')]) is False
    assert same_action(a, [call("list_dir", '{"path": "a.txt", "limit": 10}')]) is False
    assert same_action(a, []) is False
    assert same_action([], []) is True  # both a text answer, whatever the texts
    two = [call("grep", '{"pattern": "x"}'), call("list_dir", "{}")]
    assert same_action(two, two[::-1]) is False
    assert same_action(two, [*two, call("list_dir", "{}")]) is False
    assert same_action([call("f", "not json")], [call("f", "not json")]) is True
    assert same_action([call("f", "not json")], [call("f", "not  json")]) is False
    assert same_action([call("f", "1.0")], [call("f", "1")]) is True  # JSON-equal numbers
    assert action_of([]) == "text"


def test_text_similarity_is_difflibs_ratio() -> None:
    assert text_similarity("abcd", "abce") == 0.75
    assert text_similarity("", "") == 1.0
    assert text_similarity("abc", "") == 0.0
    assert text_similarity("same", "same") == 1.0


def test_agreement_is_the_share_taking_the_most_common_action() -> None:
    assert agreement(["text", "text", "x"]) == 2 / 3
    assert agreement(["text", None, "x", "x"]) == 2 / 3
    assert agreement(["x"]) == 1.0
    assert math.isnan(agreement([None, None]))


def test_stored_answers_are_the_assistant_messages_of_each_turn_in_order() -> None:
    tool_call = {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
    messages = [
        {"role": "assistant", "content": "before any turn"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "", "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
        {"role": "assistant", "content": [{"type": "text", "text": "a1"}]},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2"},
    ]
    session = sk.Session(key="cli:x", messages=messages)
    assert stored_answers(session) == {
        (0, 0): ("", [call("grep", "{}")]),
        (0, 1): ("a1", []),
        (1, 0): ("a2", []),
    }
