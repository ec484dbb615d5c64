"""sessionkit.store.counting: batch counts equal the estimator, the fallback method, cache, parallel path."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.sampling import examples
from support.strategies import messages

from sessionkit.nanobot.policies import POLICIES, get_policy
from sessionkit.nanobot.tokens import encoding, estimate_message_tokens, fallback_message_tokens
from sessionkit.nanobot.uncountable import counts_or_missing
from sessionkit.store import counting, forked
from sessionkit.store.cachedir import write_ipc
from sessionkit.store.counting import TokenCache, count_tokens
from sessionkit.store.integrity import SEAL, read_sealed
from sessionkit.tuning import TUNING

RELEASE = "nanobot-0.2"
"""The release whose cache keys the key tests make."""
TOOL_CALLS = [
    {
        "id": "c1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "é.txt"}'},
    }
]
IMAGE_BLOCK = {"type": "image_url", "image_url": {"url": "data:x"}}


@pytest.mark.parametrize("message", [{}, {"content": ""}, {"content": None}, {"content": []}])
def test_empty_payload_costs_the_four_framing_tokens(message: dict[str, Any]) -> None:
    assert count_tokens([message], cache=False) == [4]


@pytest.mark.parametrize(
    "text",
    [
        "say <|endoftext|> now",
        "<|fim_prefix|>a<|fim_middle|>b<|fim_suffix|>",
        "end <|endofprompt|>",
    ],
)
def test_special_token_text_takes_nanobots_fallback(text: str) -> None:
    assert count_tokens([{"content": text}], cache=False) == [len(text) // 4 + 4]


def test_lone_surrogates_are_counted_as_tiktoken_repairs_them() -> None:
    text = "ok \ud800 then \udfff"
    expected = len(encoding().encode_ordinary(text)) + 4
    assert count_tokens([{"content": text}, {"content": "plain"}], cache=False) == [expected, 5]


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
    assert count_tokens([message], tokens="fallback", cache=False) == [expected]


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
    assert count_tokens(MIXED, cache=False) == [estimate_message_tokens(m) for m in MIXED]
    assert count_tokens(MIXED, tokens="fallback", cache=False) == [
        fallback_message_tokens(m) for m in MIXED
    ]
    assert count_tokens([], cache=False) == []


def test_count_tokens_rejects_unknown_method() -> None:
    with pytest.raises(ValueError, match="unknown token method tokens='words'"):
        count_tokens(MIXED, tokens="words")  # type: ignore[arg-type]


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
        count_tokens(MIXED, cache=False)
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


def _keys(messages: list[dict[str, Any]], policy: str = RELEASE) -> list[int]:
    """The cache keys of ``messages``' payloads under ``policy``."""
    release = get_policy(policy)
    return counting._payload_keys([release.message_payload(m) for m in messages], release)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"content": "[1]"}, {"content": [1]}),  # a string is not its JSON look-alike
        ({"content": "a", "name": "b"}, {"content": "a\nb"}),  # name joins: "a\nb" either way
        ({"content": "a", "tool_calls": [{"id": "x"}]}, {"content": "a"}),
    ],
)
def test_keys_are_equal_exactly_when_payloads_are(
    one: dict[str, Any], other: dict[str, Any]
) -> None:
    release = get_policy(RELEASE)
    first, second = _keys([one, other])
    assert (first == second) == (release.message_payload(one) == release.message_payload(other))
    assert first != _keys([{"content": "[2]"}])[0]


def test_marker_free_payloads_share_keys_across_releases_sharing_a_rule() -> None:
    plain = {"content": "hello world"}
    special = {"content": "a <|endoftext|> b"}
    assert len({_keys([plain], name)[0] for name in POLICIES}) == 1
    assert len({_keys([special], name)[0] for name in POLICIES}) == len(POLICIES)
    assert _keys([plain])[0] != _keys([special])[0]


@pytest.mark.parametrize(
    "message",
    [
        {"content": [{"type": "image", "detail": float("nan")}]},
        {"content": "a", "tool_calls": [{"id": "x", "arguments": float("nan")}]},
    ],
)
def test_fields_without_faithful_json_are_counted_through_the_cache(
    message: dict[str, Any],
) -> None:
    cache = TokenCache()
    assert count_tokens([message], cache=cache) == [estimate_message_tokens(message)]
    assert len(cache) == 1


def test_equal_payloads_get_equal_keys_and_non_strings_count_as_absent() -> None:
    keys = _keys(
        [
            {"role": "user", "content": "x", "name": 3, "reasoning_content": None},
            {"role": "assistant", "content": "x", "tool_calls": []},
            {"content": "x", "tool_call_id": ["id"]},
        ]
    )
    assert len(set(keys)) == 1


def test_a_lone_surrogate_gets_a_key_of_its_own() -> None:
    assert len(set(_keys([{"content": "\ud800"}, {"content": "\udfff"}, {"content": "?"}]))) == 3


def test_parallel_path_equals_single_path(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [{"role": "user", "content": f"message {i} " + "word " * (i % 7)} for i in range(40)]
    messages += MIXED
    single = count_tokens(messages, cache=False, workers=1)
    pools: list[int] = []
    pool_class = forked.ProcessPoolExecutor

    class SpyPool(pool_class):  # type: ignore[misc, valid-type]
        def __init__(self, max_workers: int, **kwargs: Any) -> None:
            pools.append(max_workers)
            super().__init__(max_workers, **kwargs)

    monkeypatch.setattr(forked, "ProcessPoolExecutor", SpyPool)
    monkeypatch.setattr(TUNING, "parallel_count_messages", 1)
    assert count_tokens(messages, cache=False, workers=2) == single
    assert pools == [2]
    cache = TokenCache()
    assert count_tokens(messages, cache=cache, workers=2) == single
    assert len(cache) == len(set(_keys(messages))) == 47
    assert count_tokens(messages, cache=cache, workers=1) == single
    assert single == [estimate_message_tokens(m) for m in messages]


_TRICKY = st.sampled_from(
    [*" \t\n\r\x0b\x0c\u00a0\u2003\u3000'sdmtlvreSDMTLVRE0123456789aZé日本語😀!?.,-_<|>{}[]\"/\\"]
    + ["'ll", "'VE", "<|endoftext|>", "<|fim_prefix|>", "\r\n", "\n\n", "\u200b", "\u0301"]
    + ["\U0001f468\u200d\U0001f469", "\ud800", "\udfff", "\ud83d\ude00"]
)


@given(st.lists(_TRICKY, max_size=60).map("".join) | st.text(max_size=80))
def test_the_counting_backend_equals_tiktoken(text: str) -> None:
    assert counting._encode_lengths([text]) == [len(encoding().encode_ordinary(text))]


def test_the_counting_backend_is_the_rust_bpe_crate() -> None:
    assert counting._counter() is not counting._tiktoken_count


@pytest.mark.parametrize(
    ("messages", "named"),
    [
        (["hello"], "item 0 is 'hello' (str)"),
        ([{"role": "user", "content": "hi"}, 42], "item 1 is 42 (int)"),
        ({"role": "user", "content": "hi"}, "item 0 is 'role' (str)"),
    ],
)
@pytest.mark.parametrize("method", ["tiktoken", "fallback"])
def test_non_dict_items_are_a_type_error(messages: Any, named: str, method: str) -> None:
    with pytest.raises(TypeError, match="count_tokens takes a list of message dicts") as error:
        count_tokens(messages, tokens=method, cache=False)
    assert str(error.value).endswith(named)


def test_a_generator_of_dicts_is_still_counted() -> None:
    messages = ({"role": "user", "content": "hello"} for _ in range(2))
    assert count_tokens(messages, tokens="fallback") == [5, 5]


# --- every release ---------------------------------------------------------------------------

RELEASES = ["nanobot-0.2", "nanobot-0.3.0", "nanobot-0.3.5"]
NON_STRING_TEXT = {
    "role": "user",
    "content": [{"type": "text", "text": 7}, {"type": "text", "text": "hi"}],
}


@pytest.mark.sampled
@pytest.mark.parametrize("policy", RELEASES)
@settings(max_examples=examples(150, 50))
@given(st.lists(messages(), max_size=12))
def test_count_tokens_equals_each_releases_estimate(
    policy: str, batch: list[dict[str, Any]]
) -> None:
    estimate = get_policy(policy).estimate_message_tokens
    countable = [m for m in batch if _counts(lambda m=m: estimate(m))]
    assert count_tokens(countable, cache=False, workers=1, policy=policy) == [
        estimate(m) for m in countable
    ]
    assert count_tokens(countable, cache=TokenCache(), workers=1, policy=policy) == [
        estimate(m) for m in countable
    ]


def _counts(call: Any) -> bool:
    try:
        call()
    except (TypeError, UnicodeEncodeError):
        return False
    return True


@pytest.mark.parametrize(
    ("policy", "method", "expected"),
    [
        ("nanobot-0.2", "tiktoken", [len("say <|endoftext|> now 日本") // 4 + 4, 5]),
        ("nanobot-0.3.0", "tiktoken", [len("say <|endoftext|> now 日本".encode()) + 4, 5]),
        ("nanobot-0.3.5", "tiktoken", [len("say <|endoftext|> now 日本".encode()) + 4, 5]),
        ("nanobot-0.2", "fallback", [len("say <|endoftext|> now 日本") // 4 + 4, 4 // 4 + 4]),
        ("nanobot-0.3.0", "fallback", [len("say <|endoftext|> now 日本".encode()) + 4, 8]),
        ("nanobot-0.3.5", "fallback", [len("say <|endoftext|> now 日本".encode()) + 4, 8]),
    ],
)
def test_special_tokens_and_the_fallback_per_release(
    policy: str, method: str, expected: list[int]
) -> None:
    batch = [{"content": "say <|endoftext|> now 日本"}, {"content": "plan"}]
    assert count_tokens(batch, tokens=method, cache=False, policy=policy) == expected  # type: ignore[arg-type]
    if method == "fallback" and policy != "nanobot-0.2":
        fallback = get_policy(policy).fallback_message_tokens  # type: ignore[attr-defined]
        assert expected == [fallback(m) for m in batch]


def test_one_cache_never_serves_one_releases_count_for_another() -> None:
    cache = TokenCache()
    special = [{"content": "say <|endoftext|> now 日本"}]
    assert count_tokens(special, cache=cache, policy="nanobot-0.2") == [24 // 4 + 4]
    assert count_tokens(special, cache=cache, policy="nanobot-0.3.0") == [28 + 4]
    assert count_tokens(special, cache=cache, policy="nanobot-0.3.5") == [28 + 4]
    assert count_tokens(special, cache=cache, policy="nanobot-0.2") == [24 // 4 + 4]
    assert len(cache) == 3
    assert count_tokens([NON_STRING_TEXT], cache=cache, policy="nanobot-0.3.5") == [5]
    with pytest.raises(TypeError):
        count_tokens([NON_STRING_TEXT], cache=cache, policy="nanobot-0.3.0")


def test_a_plain_message_is_tokenized_once_for_every_release(encoded: list[str]) -> None:
    """Releases sharing a counting rule share plain messages' counts: a grid over releases
    tokenizes each once; payloads holding special-token text stay per release."""
    cache = TokenCache()
    plain = [{"role": "user", "content": "hello world"}, {"content": "x", "name": "read"}]
    for policy in RELEASES:
        assert count_tokens(plain, cache=cache, workers=1, policy=policy) == [6, 7]
    assert encoded == ["hello world", "x\nread"]
    assert len(cache) == 2
    special = [{"content": "a <|endoftext|>"}, {"content": "a <", "name": "|b"}]
    for policy in RELEASES:
        count_tokens(special, cache=cache, workers=1, policy=policy)
    # "<|" in the payload: a key per release; "a <\n|b" holds none, so is counted once
    assert len(cache) == 2 + 3 + 1
    assert encoded == ["hello world", "x\nread", "a <\n|b"]


@pytest.mark.sampled
@settings(max_examples=examples(150, 40))
@given(st.lists(messages(), max_size=12), st.permutations(RELEASES))
def test_one_cache_across_releases_equals_each_release_alone(
    batch: list[dict[str, Any]], order: list[str]
) -> None:
    """Counts from one cache filled by every release in turn (any order) equal each
    release's own count without a cache: a shared key never serves a wrong count."""
    cache = TokenCache()
    for policy in order:
        estimate = get_policy(policy).estimate_message_tokens
        countable = [m for m in batch if _counts(lambda m=m, e=estimate: e(m))]
        assert count_tokens(countable, cache=cache, workers=1, policy=policy) == count_tokens(
            countable, cache=None, workers=1, policy=policy
        )


@pytest.mark.parametrize("policy", RELEASES)
def test_where_a_release_raises_so_does_count_tokens(policy: str) -> None:
    estimate = get_policy(policy).estimate_message_tokens
    surrogate = {"content": "<|endoftext|> \ud800"}
    for message, method in [(NON_STRING_TEXT, "tiktoken"), (surrogate, "tiktoken")]:
        try:
            expected: Any = [estimate(message)]
        except (TypeError, UnicodeEncodeError) as error:
            expected = type(error)
        if isinstance(expected, list):
            assert count_tokens([message], cache=False, policy=policy) == expected
        else:
            with pytest.raises(expected):
                count_tokens([message], cache=False, policy=policy, tokens=method)  # type: ignore[arg-type]
    if policy != "nanobot-0.2":
        with pytest.raises(UnicodeEncodeError):
            count_tokens([{"content": "a \ud800"}], tokens="fallback", policy=policy)


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown history policy 'nanobot-9'"):
        count_tokens([{"content": "hi"}], policy="nanobot-9")


def test_a_cache_with_a_folder_keeps_counts_for_the_next_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = [{"role": "user", "content": f"hello {n}"} for n in range(40)]
    first = TokenCache(tmp_path)
    counts = count_tokens(messages, cache=first, workers=1)
    first.flush()
    monkeypatch.setattr(counting, "_uncached_counts", _refuse)
    assert count_tokens(messages, cache=TokenCache(tmp_path), workers=1) == counts
    assert len(TokenCache(tmp_path)) == 40


def test_many_flushes_are_merged_into_one_file(tmp_path: Path) -> None:
    cache = TokenCache(tmp_path)
    for n in range(TUNING.count_files + 1):
        count_tokens([{"role": "user", "content": f"turn {n}"}], cache=cache, workers=1)
        cache.flush()
    assert len(list(tmp_path.glob("*.arrow"))) == 1
    fresh = TokenCache(tmp_path)
    assert len(fresh) == TUNING.count_files + 1
    assert fresh.get_many([None, 12345]) == [None, None]


def _refuse(*args: Any, **kwargs: Any) -> list[int]:
    raise AssertionError("tokenized although every count was kept")


def _session_store(folder: Path) -> Path:
    folder.mkdir()
    for n in range(2):
        lines = [{"_type": "metadata", "key": f"cli:{n}"}]
        lines += [{"role": "user", "content": f"count me {n} {i}"} for i in range(3)]
        text = "".join(json.dumps(r) + "\n" for r in lines)
        (folder / f"cli_{n}.jsonl").write_text(text, encoding="utf-8")
    return folder


def _plus_1000(folder: Path) -> int:
    """Rewrite every counts file in ``folder`` with each count + 1000, sealed as sessionkit
    seals them (valid files: only not reading them keeps the answer right)."""
    files = sorted(folder.glob("*.arrow"))
    for path in files:
        table = read_sealed(path)[0]
        counts = pa.compute.add(table.column("count"), 1000)
        write_ipc(path, counting._COUNTS, [table.set_column(1, "count", counts)])
    return len(files)


def test_cache_false_reads_and_writes_no_token_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessionkit import load

    store = _session_store(tmp_path / "sessions")
    cache = tmp_path / "cache"
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(cache))
    exact = load(store, cache=False).messages["tokens"].tolist()
    assert not cache.exists()
    load(store).token_cache.flush()
    assert _plus_1000(cache / f"tokens-{counting.TOKENS_FORMAT}") >= 1
    counting.DEFAULT_CACHE.clear()
    before = sorted(cache.rglob("*"))
    corpus = load(store, cache=False)
    assert corpus.messages["tokens"].tolist() == exact
    assert corpus.token_cache is None
    assert sorted(cache.rglob("*")) == before


def test_a_cache_folder_keeps_its_own_token_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessionkit import load

    store = _session_store(tmp_path / "sessions")
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "default"))
    chosen = tmp_path / "chosen"
    corpus = load(store, cache=chosen)
    corpus.token_cache.flush()
    assert list((chosen / f"tokens-{counting.TOKENS_FORMAT}").glob("*.arrow"))
    assert not (tmp_path / "default").exists()
    assert corpus.token_cache is counting.token_cache_in(chosen)


def test_token_counts_read_back_are_checked_against_their_seal(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": f"hello {n}"} for n in range(5)]
    first = TokenCache(tmp_path)
    counts = count_tokens(messages, cache=first, workers=1)
    first.flush()
    (path,) = tmp_path.glob("*.arrow")
    raw = bytearray(path.read_bytes())
    body = read_sealed(path)[0]
    changed = body.set_column(1, "count", pa.compute.add(body.column("count"), 1000))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, counting._COUNTS) as writer:
        writer.write_table(changed)
    path.write_bytes(sink.getvalue().to_pybytes() + bytes(raw[-SEAL:]))  # the old seal
    with pytest.warns(UserWarning, match="damaged cache file"):
        assert count_tokens(messages, cache=TokenCache(tmp_path), workers=1) == counts
    assert not path.exists()


def test_windows_of_a_cache_false_corpus_keep_no_token_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sessionkit
    from sessionkit import load

    store = _session_store(tmp_path / "sessions")
    cache = tmp_path / "cache"
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(cache))
    counting.DEFAULT_CACHE.clear()
    sessionkit.windows(
        load(store, cache=False), policy="nanobot-0.3.5", grid={"max_tokens": [0, 20]}
    )
    counting.DEFAULT_CACHE.flush()
    assert not cache.exists()


def test_states_of_a_cache_false_session_keep_no_token_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replays, states and stored counts of sessions from a ``cache=False`` load count
    without any cache; those of ``cache=<folder>`` through that folder's."""
    from sessionkit import load
    from sessionkit.simulate.states import message_states

    store = _session_store(tmp_path / "sessions")
    cache = tmp_path / "cache"
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(cache))
    counting.DEFAULT_CACHE.clear()
    session = load(store, cache=False)["cli:0"]
    assert counting.token_cache_of([session]) is None
    message_states(session, max_tokens=20)
    counting.DEFAULT_CACHE.flush()
    assert not cache.exists()
    chosen = tmp_path / "chosen"
    other = load(store, cache=chosen)["cli:1"]
    assert counting.token_cache_of([other]) is counting.token_cache_in(chosen)
    assert counting.token_cache_of([other, session]) is None


def test_counting_batches_cut_by_characters_and_count_as_count_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Batches close once their content (plus 64 per message) reaches BATCH_CHARS, across
    ``add`` calls; a close sends what is held; the counts and estimates come back in order,
    equal to count_tokens' under every release, None where one cannot count, and new counts
    join the cache."""
    monkeypatch.setattr(TUNING, "batch_chars", 200)
    messages = [{"role": "user", "content": "x" * n} for n in (36, 36, 100, 300, 0)]
    odd = {"role": "user", "content": [{"type": "text", "text": 5}]}
    sent: list[int] = []
    real = counting.CountingBatches._send

    def spied(self: counting.CountingBatches) -> None:
        sent.append(len(self._held))
        real(self)

    monkeypatch.setattr(counting.CountingBatches, "_send", spied)
    cache = counting.TokenCache()
    with counting.counting_workers(cache, workers=2) as pool:
        assert pool is not None
        batches = counting.CountingBatches(pool, cache)
        batches.add(messages[:2])
        batches.add(messages[2:])
        first = batches.close()
        batches.add([odd, messages[0]])
        second = batches.close()
        told: list[int] = []
        assert first(told.append) == {
            policy: (
                count_tokens(messages, cache=False, policy=policy),
                count_tokens(messages, tokens="fallback", cache=False, policy=policy),
            )
            for policy in POLICIES
        }
        alone = count_tokens(messages[:1], cache=False)[0]
        # 0.3.5 skips the text block whose text is not a string, which the others cannot join
        assert second() == {
            "nanobot-0.2": ([None, alone], [None, 13]),
            "nanobot-0.3.0": ([None, alone], [None, 40]),
            "nanobot-0.3.5": ([4, alone], [4, 40]),
        }
    # sizes with 64 each: 100, 100 | 164, 364 | 64 (close) | 320 | 100 | (close: nothing)
    assert sent == [2, 2, 1, 1, 1, 0]
    assert told == [2, 2, 1]
    # the first two messages are one payload; the odd one's under 0.3.5 is the last one's, ""
    assert len(cache) == 4


@pytest.mark.parametrize("merged_keys", [0, 1 << 22])
def test_counts_files_answer_alike_merged_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, merged_keys: int
) -> None:
    """Several counts files are searched as one array in memory, or file by file past
    ``_MERGED_KEYS``: the same answers, the oldest file's count for a key two hold."""
    monkeypatch.setattr(TUNING, "merged_count_keys", merged_keys)
    folder = tmp_path / "tokens"
    folder.mkdir()
    for keys, counts in [([5, 1, 9], [50, 10, 90]), ([9, 3], [91, 30]), ([2], [20])]:
        counting._write_counts(folder, np.array(keys, np.uint64), np.array(counts, np.int64))
    cache = TokenCache(folder)
    assert cache.get_many([1, 2, 3, 4, 5, 9, None]) == [10, 20, 30, None, 50, 90, None]
    assert len(cache._segments()) == (1 if merged_keys else 3)


def _or_none(count: Any, message: dict[str, Any]) -> int | None:
    try:
        return count(message)
    except (TypeError, RecursionError, ValueError):
        return None


_ODD = st.sampled_from(
    [
        {"role": "user", "content": [{"type": "text", "text": 7}, {"type": "text", "text": "a"}]},
        {"role": "user", "content": "bad \ud800 text <|endoftext|>"},
        {"role": "user", "content": "bad \ud800 text"},
        {"role": "tool", "content": "ok", "name": "<|fim_prefix|>", "tool_call_id": "c"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "<|endofprompt|>"}]},
        {"role": "assistant", "content": "x", "reasoning_content": "think <|endoftext|> 好"},
        {"role": "assistant", "content": "x", "reasoning_content": {"not": "text"}},
        {"role": "user", "content": "ends in <", "name": "|x"},
        {"role": "assistant", "content": "deep", "tool_calls": [[[[[]]]]] * 2},
        {"role": "user", "content": {"a": "<|endoftext|>"}},
    ]
)


@settings(max_examples=150, deadline=None)
@given(batch=st.lists(st.one_of(messages(), _ODD), max_size=12), cached=st.booleans())
def test_every_release_counts_each_message_as_that_release_does(
    batch: list[dict[str, Any]], cached: bool
) -> None:
    """Counts taken over from the reference release for plain messages, and made again for
    the rest, equal each release's own estimates message by message (None where it raises);
    so do estimates taken from the reference release's payloads, when given."""
    cache = TokenCache() if cached else None
    reference = (
        counts_or_missing(batch, partial(counting.counts_through, cache=cache, workers=1)),
        counts_or_missing(batch, partial(counting.counts_through, cache=None, tokens="fallback")),
    )
    found = counting.every_release(batch, reference, cache, exact=True, workers=1)
    assert list(found) == list(POLICIES)
    for name, release in POLICIES.items():
        exact = [_or_none(release.estimate_message_tokens, m) for m in batch]
        estimates = [_or_none(release.fallback_message_tokens, m) for m in batch]
        assert found[name] == (exact, estimates), name
    if None not in reference[1]:  # 0.2.2 builds every payload: estimates from them
        payloads = [get_policy(RELEASE).message_payload(m) for m in batch]
        given = counting.every_release(
            batch, reference, cache, exact=True, workers=1, payloads=payloads
        )
        assert given == found
    unexact = counting.every_release(batch, ([None] * len(batch), reference[1]), cache, exact=False)
    assert {name: counts[0] for name, counts in unexact.items()} == {
        name: [None] * len(batch) for name in POLICIES
    }
