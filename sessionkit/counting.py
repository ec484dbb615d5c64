"""Token counts for many messages at once: batched, parallel, and cached by content.

Each count equals :func:`sessionkit.nanobot.tokens.estimate_message_tokens` (nanobot's exact
estimate) or its no-tiktoken fallback.  Pick ``method="tiktoken"`` (the default) to match a
nanobot that could load tiktoken, ``method="fallback"`` to match one that could not.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from itertools import compress, repeat
from operator import is_not
from typing import Any, Literal

import orjson

from sessionkit.fields import STR_OR_NONE, message_field
from sessionkit.nanobot.tokens import (
    FRAMING_TOKENS,
    encoding,
    fallback_payload_tokens,
    has_special_tokens,
    message_payload,
)

__all__ = ["DEFAULT_CACHE", "Method", "TokenCache", "count_tokens"]

Method = Literal["tiktoken", "fallback"]
_PARALLEL_MIN_MESSAGES = 20_000


class TokenCache:
    """Token counts keyed by a content hash of each message, so recounts skip tiktoken.

    The key (:func:`_message_keys`) hashes the fields the payload is built from, without
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

_KEY_FIELDS = ("content", "tool_calls", "name", "tool_call_id", "reasoning_content")
_NO_KEY = object()


def _dumped(values: list[Any]) -> list[Any]:
    """Compact JSON of non-string fields; ``_NO_KEY`` where JSON null would be ambiguous
    (orjson writes NaN as null) or the value is not JSON."""
    try:
        dumped: list[Any] = list(map(orjson.dumps, values))
    except (orjson.JSONEncodeError, TypeError):
        if len(values) == 1:
            return [_NO_KEY]
        return [_dumped([v])[0] for v in values]
    if b"null" in b"".join(dumped):
        return [_NO_KEY if b"null" in d else d for d in dumped]
    return dumped


def _message_keys(messages: Sequence[dict[str, Any]]) -> list[int | None]:
    """Cache keys of many messages, from the fields their payloads are built from.

    A key hashes (content, tool calls, name, tool_call_id, reasoning): non-string content as
    a 1-tuple of compact JSON (so it never equals a string), tool calls as compact JSON when
    truthy, and names, ids and reasoning only when they are strings (only strings reach the
    payload).  Equal keys mean equal fields (a 64-bit hash: a ~2**-64 chance per pair of
    being wrong), and equal fields mean equal payloads.  A message whose fields have no
    faithful JSON form gets ``None`` and is counted without the cache.  Each field is read
    for all messages by one C-level ``map``; only odd values take a Python step.
    """
    contents, calls, names, ids, reasonings = (
        message_field(messages, field) for field in _KEY_FIELDS
    )
    no_key: list[int] = []
    if not STR_OR_NONE.issuperset(map(type, contents)):
        odd = [i for i, v in enumerate(contents) if type(v) not in STR_OR_NONE]
        for i, dumped in zip(odd, _dumped([contents[i] for i in odd]), strict=True):
            contents[i] = (dumped,)
            if dumped is _NO_KEY:
                no_key.append(i)
    present = list(compress(range(len(calls)), map(is_not, calls, repeat(None))))
    truthy = [i for i in present if calls[i]]
    dumped_calls = _dumped([calls[i] for i in truthy])
    for i in present:
        calls[i] = None
    for i, dumped in zip(truthy, dumped_calls, strict=True):
        calls[i] = dumped
        if dumped is _NO_KEY:
            no_key.append(i)
    for column in (names, ids, reasonings):
        if not STR_OR_NONE.issuperset(map(type, column)):
            column[:] = [v if type(v) is str else None for v in column]
    keys: list[int | None] = list(
        map(hash, zip(contents, calls, names, ids, reasonings, strict=True))
    )
    for i in no_key:
        keys[i] = None
    return keys


@lru_cache(maxsize=1)
def _counter() -> Callable[[str], int]:
    """The fastest exact cl100k_base counter installed: GitHub's Rust ``bpe`` crate
    (``bpe-openai``, about twice tiktoken's speed, its own copy of the BPE file), else tiktoken.

    ``bpe-openai``'s counts equal tiktoken's ``encode_ordinary`` lengths (a hypothesis test
    checks it against tiktoken, the reference).
    """
    try:
        from bpe_openai._bindings import tokenizer_for_encoding
    except ImportError:
        return _tiktoken_count
    return tokenizer_for_encoding("cl100k_base").count


def _tiktoken_count(payload: str) -> int:
    return len(encoding().encode_to_numpy(payload, disallowed_special=()))


def _repaired(payload: str) -> str:
    """Text with lone surrogates replaced by U+FFFD, the repair tiktoken applies (and so
    nanobot's count sees) before encoding."""
    return payload.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _encode_lengths(payloads: Sequence[str]) -> list[int]:
    """Token counts of payloads holding no special-token text (as ``encode_ordinary``)."""
    count = _counter()
    try:
        return list(map(count, payloads))
    except UnicodeEncodeError:  # a lone surrogate somewhere in the batch
        return [count(_repaired(p)) for p in payloads]


def _payload_counts(messages: Sequence[dict[str, Any]]) -> list[int]:
    """nanobot's exact count for each message, tokenizing in one batch."""
    payloads = [message_payload(m) for m in messages]
    counts = [fallback_payload_tokens(p) for p in payloads]  # right for empty and special
    plain = [i for i, p in enumerate(payloads) if p and not has_special_tokens(p)]
    lengths = _encode_lengths([payloads[i] for i in plain]) if plain else []
    for i, n in zip(plain, lengths, strict=True):
        counts[i] = max(FRAMING_TOKENS, n + FRAMING_TOKENS)
    return counts


_SHARED: Sequence[dict[str, Any]] = ()
"""What forked workers count: set just before the pool forks, so nothing is pickled to them."""


def _count_shared_range(start: int, stop: int) -> list[int]:
    return _payload_counts(_SHARED[start:stop])


def _payload_counts_forked(messages: Sequence[dict[str, Any]], workers: int) -> list[int]:
    """:func:`_payload_counts` split over forked workers that inherit the messages."""
    global _SHARED
    step = max(1, -(-len(messages) // (workers * 16)))
    starts = list(range(0, len(messages), step))
    stops = [min(len(messages), s + step) for s in starts]
    _counter()  # load the ranks once; the workers inherit them
    _SHARED = messages
    counts: list[int] = []
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            for part in pool.map(_count_shared_range, starts, stops):
                counts.extend(part)
    finally:
        _SHARED = ()
    return counts


def _uncached_counts(messages: Sequence[dict[str, Any]], workers: int) -> list[int]:
    """Exact counts, in forked workers when the batch is large enough to repay them."""
    parallel = (
        workers > 1
        and len(messages) >= _PARALLEL_MIN_MESSAGES
        and "fork" in multiprocessing.get_all_start_methods()
    )
    return _payload_counts_forked(messages, workers) if parallel else _payload_counts(messages)


def _cached_counts(
    messages: Sequence[dict[str, Any]], cache: TokenCache, workers: int
) -> list[int]:
    """Counts looked up by key; each missing distinct key tokenized once and recorded.

    Keys are computed here, never in workers, so each string's hash stays cached on it
    for the next recount.
    """
    keys = _message_keys(messages)
    # The method, so subclasses (read-through caches) are honoured; a plain cache's dict
    # lookup skips a Python call per message.
    lookup = cache._counts.get if type(cache) is TokenCache else cache.get
    counts: list[int | None] = list(map(lookup, keys))
    if None not in counts:
        return counts  # type: ignore[return-value]
    todo = [i for i, n in enumerate(counts) if n is None]
    first: dict[int, int] = {}
    fresh = [i for i in todo if keys[i] is None or first.setdefault(keys[i], i) == i]  # type: ignore[index]
    fresh_counts = _uncached_counts([messages[i] for i in fresh], workers)
    for i, n in zip(fresh, fresh_counts, strict=True):
        counts[i] = n
    for i in todo:
        if counts[i] is None:
            counts[i] = counts[first[keys[i]]]  # type: ignore[index]
    known = [(keys[i], n) for i, n in zip(fresh, fresh_counts, strict=True) if keys[i] is not None]
    cache.update((k for k, _ in known), (n for _, n in known))  # type: ignore[misc]
    return counts  # type: ignore[return-value]


def count_tokens(
    messages: Iterable[dict[str, Any]],
    *,
    method: Method = "tiktoken",
    cache: TokenCache | None = DEFAULT_CACHE,
    workers: int | None = None,
) -> list[int]:
    """Token counts for many messages at once: batched, parallel and cached.

    Cached counts are looked up by key; each missing distinct payload is tokenized once, in
    forked worker processes when there are many (they inherit the messages, nothing is
    pickled to them).

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
    batch = messages if isinstance(messages, list | tuple) else list(messages)
    bad = next((n for n, m in enumerate(batch) if not isinstance(m, dict)), None)
    if bad is not None:
        raise TypeError(
            "count_tokens takes a list of message dicts such as {'role': 'user', 'content': "
            f"'hello'}}; item {bad} is {batch[bad]!r:.60} ({type(batch[bad]).__name__})"
        )
    if method == "fallback":
        return [fallback_payload_tokens(message_payload(m)) for m in batch]
    if method != "tiktoken":
        raise ValueError(f"unknown token method {method!r}; use 'tiktoken' or 'fallback'")
    workers = workers or os.cpu_count() or 1
    if cache is None:
        return _uncached_counts(batch, workers)
    return _cached_counts(batch, cache, workers)
