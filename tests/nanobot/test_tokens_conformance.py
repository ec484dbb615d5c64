"""Differential: sessionkit's token estimates equal nanobot 0.2.2's, message by message."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.reference import require

from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.tokens import estimate_message_tokens, fallback_message_tokens
from sessionkit.store.counting import TokenCache, _payload_keys, count_tokens

pytestmark = pytest.mark.conformance

FRAGMENTS = [
    "你好，世界",
    "日本語のテキスト",
    "🙂👍🏽🇫🇷",
    "\ud800",
    "\udfff",
    "\ud83d\ude00",
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|endofprompt|>",
    "<|im_start|>",
    "<|endoftext|",
    "def f(x):\n    return x ** 2\n",
    "   \t\n\n  ",
    "\r\n",
    "[Message Time: 2026-01-02T03:04:05]\n",
    "<think>plan</think>",
    "12345678901234567890",
    "é",
    "'s 're ",
]

texts = st.lists(st.one_of(st.text(max_size=30), st.sampled_from(FRAGMENTS)), max_size=6).map(
    "".join
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
falsy_texts = st.sampled_from([None, "", 0, False, [], {}, 0.0])
truthy_non_str = st.one_of(
    st.integers().filter(bool), st.lists(json_scalars, min_size=1, max_size=2), st.just(True)
)
blocks = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, texts),
    st.builds(lambda t: {"type": "text", "text": t}, falsy_texts),
    st.just({"type": "text"}),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, texts),
    st.dictionaries(st.sampled_from(["type", "text", "data", "媒体"]), json_values, max_size=3),
    json_scalars,
)
contents = st.one_of(
    st.none(),
    texts,
    st.lists(blocks, max_size=5),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.dictionaries(st.text(max_size=8), json_values, max_size=3),
)
tool_calls = st.lists(
    st.fixed_dictionaries(
        {
            "id": texts,
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": texts, "arguments": st.one_of(texts, json_values)}
            ),
        }
    ),
    max_size=3,
)
optional_fields = {
    "name": st.one_of(texts, json_scalars),
    "tool_call_id": st.one_of(texts, json_scalars),
    "tool_calls": st.one_of(tool_calls, json_values),
    "reasoning_content": st.one_of(texts, json_values),
    "timestamp": st.just("2026-01-02T03:04:05"),
}
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system"]), "content": contents},
    optional=optional_fields,
)
raising_messages = st.builds(
    lambda before, text, after: {"role": "user", "content": [*before, text, *after]},
    st.lists(blocks, max_size=2),
    st.builds(lambda t: {"type": "text", "text": t}, truthy_non_str),
    st.lists(blocks, max_size=2),
)


@pytest.fixture(scope="module")
def helpers() -> ModuleType:
    """nanobot.utils.helpers, imported once outside any hypothesis example.

    Importing nanobot pulls in ``rich``, which draws from the global ``random`` at import
    time; doing that inside an example would make hypothesis flag the example as flaky.
    """
    return require("nanobot.utils.helpers")


def _outcome(estimate: Callable[[dict[str, Any]], int], message: dict[str, Any]) -> Any:
    try:
        return estimate(message)
    except Exception as exc:  # noqa: BLE001 - the exception type is what is compared
        return type(exc)


def test_nanobot_counts_with_tiktoken_here(helpers: ModuleType) -> None:
    helpers._get_token_encoding.cache_clear()
    assert helpers._get_token_encoding().name == "cl100k_base"
    # tiktoken gives 6 + 4; the chars // 4 fallback would give 5 // 4 + 4.
    assert helpers.estimate_message_tokens({"content": "你好，世界"}) == 10


@given(message=messages)
def test_estimate_equals_nanobot(helpers: ModuleType, message: dict[str, Any]) -> None:
    expected = _outcome(helpers.estimate_message_tokens, message)
    assert _outcome(estimate_message_tokens, message) == expected


@given(message=raising_messages)
def test_raises_where_nanobot_raises(helpers: ModuleType, message: dict[str, Any]) -> None:
    expected = _outcome(helpers.estimate_message_tokens, message)
    assert expected is TypeError
    assert _outcome(estimate_message_tokens, message) is expected


@given(batch=st.lists(messages, max_size=12))
def test_count_tokens_equals_nanobot(helpers: ModuleType, batch: list[dict[str, Any]]) -> None:
    nanobot_estimate = helpers.estimate_message_tokens
    batch = [m for m in batch if isinstance(_outcome(nanobot_estimate, m), int)]
    expected = [nanobot_estimate(m) for m in batch]
    cache = TokenCache()
    assert count_tokens(batch, cache=cache, workers=1) == expected
    assert count_tokens(batch, cache=cache, workers=1) == expected


SHARED_CACHE = TokenCache()
RELEASE = "nanobot-0.2"
"""The release whose estimate these tests check (and whose cache keys)."""


@given(batch=st.lists(messages, max_size=12))
def test_counts_from_one_cache_shared_by_all_examples_equal_nanobot(
    helpers: ModuleType, batch: list[dict[str, Any]]
) -> None:
    """Every example adds to the same cache: two payloads sharing a key would show here."""
    nanobot_estimate = helpers.estimate_message_tokens
    batch = [m for m in batch if isinstance(_outcome(nanobot_estimate, m), int)]
    assert count_tokens(batch, cache=SHARED_CACHE, workers=1) == [
        nanobot_estimate(m) for m in batch
    ]


@given(batch=st.lists(messages, max_size=12))
def test_payload_keys_do_not_depend_on_the_batch(batch: list[dict[str, Any]]) -> None:
    release = get_policy(RELEASE)
    payloads = [p for m in batch if type(p := _outcome(release.message_payload, m)) is str]
    assert _payload_keys(payloads, release) == [_payload_keys([p], release)[0] for p in payloads]


@given(batch=st.lists(messages, max_size=12))
def test_fallback_equals_nanobot_without_tiktoken(
    helpers: ModuleType, batch: list[dict[str, Any]]
) -> None:
    def no_tiktoken() -> Any:
        raise RuntimeError("no network for the BPE download")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(helpers, "_get_token_encoding", no_tiktoken)
        expected = [_outcome(helpers.estimate_message_tokens, m) for m in batch]
    assert [_outcome(fallback_message_tokens, m) for m in batch] == expected
    counted = [m for m, n in zip(batch, expected, strict=True) if isinstance(n, int)]
    assert count_tokens(counted, tokens="fallback") == [n for n in expected if isinstance(n, int)]
