"""Messages nanobot cannot count: found, explained, and left out of a batch count."""

from __future__ import annotations

import orjson
import pytest

from sessionkit.nanobot.uncountable import counts_or_missing, uncountable_reason

DEEP = orjson.loads(b"[" * 1020 + b"]" * 1020)
TEXT_INT = {"role": "user", "content": [{"type": "text", "text": 5}]}
CONSEQUENCE = (
    "on it, so every get_history with a token budget and every token consolidation over it "
    "fails; its token count is missing"
)


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": None},
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": {}}]},
        {"role": "user", "content": [{"type": "text", "text": 0}]},
    ],
)
def test_countable_messages_have_no_reason(message: dict) -> None:
    assert uncountable_reason(message) is None


def test_a_text_block_that_is_not_a_string_is_explained() -> None:
    assert uncountable_reason(TEXT_INT) == (
        "nanobot 0.2.2's estimate_message_tokens raises TypeError (sequence item 0: expected "
        f"str instance, int found) {CONSEQUENCE}"
    )


@pytest.mark.parametrize("field", ["content", "tool_calls"])
def test_nesting_too_deep_to_encode_is_explained(field: str) -> None:
    message = {"role": "assistant", "content": "x", field: DEEP}
    assert uncountable_reason(message) == (
        "nanobot 0.2.2's estimate_message_tokens raises RecursionError (nested too deeply) "
        f"{CONSEQUENCE}"
    )


def strict_count(messages: list[dict]) -> list[int]:
    """A stand-in counter that fails, like nanobot's, on any uncountable message."""
    for m in messages:
        if uncountable_reason(m):
            raise TypeError("cannot count")
    return [len(m["content"]) for m in messages]


def test_counts_or_missing_leaves_only_the_uncountable_out() -> None:
    batch = [{"content": "ab"}, TEXT_INT, {"content": "abc"}, {"content": DEEP}]
    assert counts_or_missing(batch, strict_count) == [2, None, 3, None]
    assert counts_or_missing(batch[::2], strict_count) == [2, 3]


def test_counts_or_missing_lets_other_failures_through() -> None:
    with pytest.raises(TypeError, match="boom"):
        counts_or_missing([{"content": "a"}], lambda ms: (_ for _ in ()).throw(TypeError("boom")))
