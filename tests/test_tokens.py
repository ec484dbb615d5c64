"""sessionkit.counting: payload rules, exact counts, fallback, cache, parallel path, file check."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from sessionkit import counting
from sessionkit.counting import TokenCache, count_tokens
from sessionkit.nanobot import tokens
from sessionkit.nanobot.tokens import (
    encoding,
    estimate_message_tokens,
    fallback_message_tokens,
    message_payload,
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
    assert count_tokens([message], cache=None) == [4]


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
    assert count_tokens([{"content": text}], cache=None) == [expected]


def test_special_lookalikes_are_counted_exactly() -> None:
    text = "<|endoftext| and <|im_start|>"
    assert estimate_message_tokens({"content": text}) == len(encoding().encode(text)) + 4


def test_lone_surrogates_are_counted_as_tiktoken_repairs_them() -> None:
    text = "ok \ud800 then \udfff"
    expected = len(encoding().encode_ordinary(text)) + 4
    assert estimate_message_tokens({"content": text}) == expected
    assert count_tokens([{"content": text}, {"content": "plain"}], cache=None) == [expected, 5]


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
    assert count_tokens([message], method="fallback", cache=None) == [expected]


MIXED: list[dict[str, Any]] = [
    {"role": "user", "content": "hello world"},
    {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS},
    {"role": "tool", "content": "file body", "tool_call_id": "c1", "name": "read_file"},
    {"role": "assistant", "content": "say <|endoftext|> now"},
    {"role": "assistant", "content": ""},
    {"role": "user", "content": [{"type": "text", "text": "你好"}, IMAGE_BLOCK]},
    {"role": "user", "content": "hello world"},
    {"role": "assistant", "content": "ok", "reasoning_content": "plan 🙂"},
]


def test_count_tokens_equals_per_message_estimates() -> None:
    assert count_tokens(MIXED, cache=None) == [estimate_message_tokens(m) for m in MIXED]
    assert count_tokens(MIXED, method="fallback", cache=None) == [
        fallback_message_tokens(m) for m in MIXED
    ]
    assert count_tokens([], cache=None) == []


def test_count_tokens_rejects_unknown_method() -> None:
    with pytest.raises(ValueError, match="unknown token method 'words'"):
        count_tokens(MIXED, method="words")  # type: ignore[arg-type]


def test_cached_recount_skips_the_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = TokenCache()
    first = count_tokens(MIXED, cache=cache)
    # One entry per distinct message (the two "hello world" share one), the empty and
    # special-token ones included.
    assert len(cache) == 7

    def refuse(payloads: list[str]) -> list[int]:
        raise AssertionError(f"encoder called for {len(payloads)} payloads")

    monkeypatch.setattr(counting, "_encode_lengths", refuse)
    assert count_tokens(MIXED, cache=cache) == first
    with pytest.raises(AssertionError, match="encoder called"):
        count_tokens(MIXED, cache=None)
    cache.clear()
    assert len(cache) == 0
    with pytest.raises(AssertionError, match="encoder called"):
        count_tokens(MIXED, cache=cache)


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every payload handed to the encoder from here on, in order."""
    seen: list[str] = []
    encode = counting._encode_lengths

    def spy(payloads: list[str]) -> list[int]:
        seen.extend(payloads)
        return encode(payloads)

    monkeypatch.setattr(counting, "_encode_lengths", spy)
    return seen


def test_cache_only_encodes_new_payloads(encoded: list[str]) -> None:
    cache = TokenCache()
    count_tokens(MIXED[:3], cache=cache)
    encoded.clear()
    assert count_tokens(MIXED, cache=cache) == [estimate_message_tokens(m) for m in MIXED]
    assert encoded == ["你好\n" + json.dumps(IMAGE_BLOCK), "ok\nplan 🙂"]


def test_equal_payloads_in_one_batch_are_tokenized_once(encoded: list[str]) -> None:
    batch = [{"role": "user", "content": "hello world"}, {"role": "assistant", "content": "hi"}]
    assert count_tokens(batch * 3, cache=TokenCache()) == [6, 5] * 3
    assert encoded == ["hello world", "hi"]


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"content": "[1]"}, {"content": [1]}),  # a string is not its JSON look-alike
        ({"content": "a", "name": "b"}, {"content": "a", "tool_call_id": "b"}),
        ({"content": "a", "tool_calls": [{"id": "x"}]}, {"content": "a"}),
    ],
)
def test_different_payloads_get_different_keys(one: dict[str, Any], other: dict[str, Any]) -> None:
    first, second = counting._message_keys([one, other])
    assert first is not None and second is not None and first != second


@pytest.mark.parametrize(
    "message",
    [
        {"content": [{"type": "text", "text": float("nan")}]},
        {"content": "a", "tool_calls": [{"id": "x", "arguments": float("nan")}]},
        {"content": [None]},
        {"content": {1, 2}},
    ],
)
def test_fields_without_faithful_json_get_no_key(message: dict[str, Any]) -> None:
    assert counting._message_keys([{"content": "ok"}, message])[1] is None


def test_equal_fields_get_equal_keys_and_non_strings_count_as_absent() -> None:
    keys = counting._message_keys(
        [
            {"role": "user", "content": "x", "name": 3, "reasoning_content": None},
            {"role": "assistant", "content": "x", "tool_calls": []},
            {"content": "x", "tool_call_id": ["id"]},
        ]
    )
    assert len(set(keys)) == 1 and keys[0] is not None


def test_parallel_path_equals_single_path(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [{"role": "user", "content": f"message {i} " + "word " * (i % 7)} for i in range(40)]
    messages += MIXED
    single = count_tokens(messages, cache=None, workers=1)
    pools: list[int] = []
    pool_class = counting.ProcessPoolExecutor

    class SpyPool(pool_class):  # type: ignore[misc, valid-type]
        def __init__(self, max_workers: int, **kwargs: Any) -> None:
            pools.append(max_workers)
            super().__init__(max_workers, **kwargs)

    monkeypatch.setattr(counting, "ProcessPoolExecutor", SpyPool)
    monkeypatch.setattr(counting, "_PARALLEL_MIN_MESSAGES", 1)
    assert count_tokens(messages, cache=None, workers=2) == single
    assert pools == [2]
    cache = TokenCache()
    assert count_tokens(messages, cache=cache, workers=2) == single
    assert len(cache) == len(set(counting._message_keys(messages))) == 47
    assert count_tokens(messages, cache=cache, workers=1) == single
    assert single == [estimate_message_tokens(m) for m in messages]


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
