"""sessionkit.nanobot.tokens: payload rules, exact counts, nanobot's fallback, the encoding file."""

from __future__ import annotations

import json
import shutil
import string
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionkit.nanobot import tokens
from sessionkit.nanobot.tokens import (
    encoding,
    estimate_message_tokens,
    fallback_message_tokens,
    has_marker,
    message_payload,
    splits_between,
)

TOOL_CALLS = [
    {
        "id": "c1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "é.txt"}'},
    }
]
IMAGE_BLOCK = {"type": "image_url", "image_url": {"url": "data:x"}}


@pytest.fixture
def fresh_encoding() -> Iterator[None]:
    """Rebuild ``encoding()`` inside the test and again afterwards for the other tests."""
    encoding.cache_clear()
    yield
    encoding.cache_clear()


# --- payload rules ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "payload"),
    [
        ({"role": "user", "content": "hello world"}, "hello world"),
        ({"role": "user", "content": ""}, ""),
        ({"role": "user", "content": None}, ""),
        ({"role": "user"}, ""),
        ({}, ""),
        ({"role": "assistant", "content": []}, ""),
        ({"content": "", "name": "bot"}, "\nbot"),
        ({"content": 42}, "42"),
        ({"content": 1.5}, "1.5"),
        ({"content": True}, "true"),
        ({"content": False}, "false"),
        ({"content": 0}, "0"),
        ({"content": {"a": "é"}}, '{"a": "é"}'),
        ({"content": "x", "name": "", "tool_call_id": ""}, "x"),
        ({"content": "x", "name": 7, "tool_call_id": None}, "x"),
        ({"content": "x", "name": "bot", "tool_call_id": "call_1"}, "x\nbot\ncall_1"),
        ({"content": None, "tool_call_id": "call_1"}, "call_1"),
        ({"content": "x", "tool_calls": []}, "x"),
        ({"content": "x", "reasoning_content": ""}, "x"),
        ({"content": "x", "reasoning_content": ["no"]}, "x"),
        ({"content": "x", "reasoning_content": "think"}, "x\nthink"),
    ],
)
def test_payload_scalar_content_and_fields(message: dict[str, Any], payload: str) -> None:
    assert message_payload(message) == payload


def test_payload_field_order() -> None:
    message = {
        "reasoning_content": "why",
        "tool_calls": TOOL_CALLS,
        "tool_call_id": "call_1",
        "name": "bot",
        "content": "Hi",
    }
    calls = json.dumps(TOOL_CALLS, ensure_ascii=False)
    assert message_payload(message) == f"Hi\nbot\ncall_1\n{calls}\nwhy"


def test_payload_tool_calls_json_keeps_unicode_and_default_separators() -> None:
    payload = message_payload({"role": "assistant", "content": None, "tool_calls": TOOL_CALLS})
    assert payload == (
        '[{"id": "c1", "type": "function", "function": {"name": "read_file", '
        '"arguments": "{\\"path\\": \\"é.txt\\"}"}}]'
    )


def test_payload_content_list() -> None:
    content = [
        {"type": "text", "text": "a"},
        {"type": "text", "text": ""},
        {"type": "text"},
        {"type": "text", "text": None},
        {"type": "text", "text": 0},
        IMAGE_BLOCK,
        "plain",
        3,
        {"type": "text", "text": "b"},
    ]
    assert message_payload({"content": content}) == "\n".join(
        ["a", json.dumps(IMAGE_BLOCK), '"plain"', "3", "b"]
    )


@pytest.mark.parametrize("text", [5, ["a"], {"t": 1}, True])
def test_payload_truthy_non_string_text_raises_like_nanobot(text: Any) -> None:
    with pytest.raises(TypeError):
        message_payload({"content": [{"type": "text", "text": text}]})
    with pytest.raises(TypeError):
        estimate_message_tokens({"content": [{"type": "text", "text": text}]})


# --- counts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"role": "user", "content": "hello world"}, 2 + 4),
        ({"role": "user", "content": "你好，世界"}, 6 + 4),
        ({"role": "user", "content": "a\nb"}, 3 + 4),
        ({"role": "user", "content": "x"}, 1 + 4),
        ({"role": "tool", "content": "Hi", "name": "bot", "tool_call_id": "call_1"}, 7 + 4),
        ({"role": "assistant", "content": None, "tool_calls": TOOL_CALLS}, 37 + 4),
        ({"role": "user", "content": [IMAGE_BLOCK]}, 18 + 4),
        ({"content": {"a": 1}}, 6 + 4),
        ({"content": 42}, 1 + 4),
        ({"content": True}, 1 + 4),
    ],
)
def test_estimate_exact(message: dict[str, Any], expected: int) -> None:
    assert estimate_message_tokens(message) == expected


@pytest.mark.parametrize("message", [{}, {"content": ""}, {"content": None}, {"content": []}])
def test_empty_payload_costs_the_four_framing_tokens(message: dict[str, Any]) -> None:
    assert estimate_message_tokens(message) == 4
    assert fallback_message_tokens(message) == 4


@pytest.mark.parametrize(
    "text",
    [
        "say <|endoftext|> now",
        "<|fim_prefix|>a<|fim_middle|>b<|fim_suffix|>",
        "end <|endofprompt|>",
    ],
)
def test_special_token_text_takes_nanobots_fallback(text: str) -> None:
    # nanobot's enc.encode() raises on special-token text and falls back to chars // 4 + 4.
    with pytest.raises(ValueError):
        encoding().encode(text)
    expected = len(text) // 4 + 4
    assert estimate_message_tokens({"content": text}) == expected


def test_special_lookalikes_are_counted_exactly() -> None:
    text = "<|endoftext| and <|im_start|>"
    assert estimate_message_tokens({"content": text}) == len(encoding().encode(text)) + 4


def test_lone_surrogates_are_counted_as_tiktoken_repairs_them() -> None:
    text = "ok \ud800 then \udfff"
    expected = len(encoding().encode_ordinary(text)) + 4
    assert estimate_message_tokens({"content": text}) == expected


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"content": "hello world"}, 11 // 4 + 4),
        ({"content": "你好，世界"}, 5 // 4 + 4),
        ({"content": "abc"}, 4),
        ({"content": "abcd"}, 5),
        ({"content": "Hi", "name": "bot"}, 6 // 4 + 4),
        ({"content": "say <|endoftext|> now"}, 21 // 4 + 4),
    ],
)
def test_fallback_method(message: dict[str, Any], expected: int) -> None:
    assert fallback_message_tokens(message) == expected


# --- the encoding file ---------------------------------------------------------------------


def test_encoding_is_cl100k() -> None:
    enc = encoding()
    assert enc.name == "cl100k_base"
    assert enc.n_vocab == 100277
    assert enc.encode_ordinary("hello world") == [15339, 1917]
    assert enc.encode("<|endoftext|>", allowed_special="all") == [100257]


@pytest.mark.usefixtures("fresh_encoding")
def test_encoding_rejects_a_wrong_expected_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "CL100K_SHA256", "0" * 64)
    with pytest.raises(ValueError, match="Hash mismatch"):
        encoding()


@pytest.mark.usefixtures("fresh_encoding")
def test_encoding_rejects_a_tampered_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    shipped = resources.files("tiktoken_ext").joinpath("data").joinpath("cl100k_base.tiktoken")
    data = tmp_path / "data"
    data.mkdir()
    with resources.as_file(shipped) as path:
        shutil.copyfile(path, data / "cl100k_base.tiktoken")
    with (data / "cl100k_base.tiktoken").open("ab") as f:
        f.write(b"IQ== 100256\n")
    monkeypatch.setattr(tokens.resources, "files", lambda package: tmp_path)
    with pytest.raises(ValueError, match="Hash mismatch"):
        encoding()


def _tokens(text: str) -> int:
    return len(encoding().encode_ordinary(text))


TRICKY_STARTS = ["", "'s", "'LL", " ", "  x", "\t\n", "1", "123", "a", "é", "/", "]", "<", "\u2028"]


@given(
    head=st.text(max_size=30),
    mark=st.sampled_from(string.punctuation),
    start=st.sampled_from(TRICKY_STARTS),
    tail=st.text(max_size=30),
)
def test_a_text_cut_after_punctuation_and_a_newline_counts_as_its_two_parts(
    head: str, mark: str, start: str, tail: str
) -> None:
    prefix, rest = f"{head}{mark}\n", start + tail
    assert splits_between(prefix, rest) is (rest[:1] not in ("\r", "\n"))
    if splits_between(prefix, rest):
        assert _tokens(prefix + rest) == _tokens(prefix) + _tokens(rest)


@pytest.mark.parametrize(
    ("prefix", "rest"),
    [("a]\n", "\nb"), ("x:\n", "\n"), ("[Message Time: x]\n", "\n\nhello"), ("a]", "\nb")],
)
def test_texts_the_rule_does_not_cut_can_count_otherwise(prefix: str, rest: str) -> None:
    assert not splits_between(prefix, rest)
    assert _tokens(prefix + rest) != _tokens(prefix) + _tokens(rest)


@pytest.mark.parametrize("prefix", ["a\n", "a \n", "]", "", "é\n", "]\r\n"])
def test_only_ascii_punctuation_before_one_final_newline_cuts(prefix: str) -> None:
    assert not splits_between(prefix, "b")


@given(st.text(alphabet="<|ab", max_size=12))
def test_has_marker_finds_exactly_the_special_token_start(text: str) -> None:
    assert has_marker(text) is ("<|" in text)
