"""Token counts for many messages at once: batched, parallel, and cached by content.

Each count equals a release's exact estimate (``get_policy(name).estimate_message_tokens``)
or its no-tiktoken fallback.  Pick ``tokens="tiktoken"`` (the default) to match a nanobot that
could load tiktoken, ``tokens="fallback"`` to match one that could not.  The releases differ in
the payload (0.3.5 skips non-string text blocks, which 0.2.2 and 0.3.0 cannot join) and in
what special-token text and the fallback cost (0.2.2: characters // 4 + 4; 0.3.x: UTF-8
bytes + 4); where a release raises, so does :func:`count_tokens`, with the same class.
"""

from __future__ import annotations

import atexit
import importlib.machinery
import importlib.util
import os
import pickle
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager, suppress
from functools import lru_cache, partial
from itertools import compress, repeat
from operator import contains, is_not
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypeVar, cast

import numpy as np
import orjson
import pyarrow as pa
import xxhash

from sessionkit.conventions import entry_point
from sessionkit.nanobot.policies import DEFAULT_POLICY, POLICIES, ReplayPolicy, get_policy
from sessionkit.nanobot.tokens import encoding, has_marker, has_special_tokens
from sessionkit.nanobot.uncountable import counts_or_missing
from sessionkit.store.cachedir import (
    cache_dir_problem,
    default_cache_dir,
    persistence_on,
    remove_dead_temp_files,
    write_ipc,
)
from sessionkit.store.fields import STR_OR_NONE, message_field
from sessionkit.store.forked import SHARED, can_fork, forked_pool
from sessionkit.store.heap import retain_freed
from sessionkit.store.integrity import IntegrityError, discard, read_sealed_or_none
from sessionkit.tuning import TUNING

__all__ = [
    "DEFAULT_CACHE",
    "KEY_FIELDS",
    "CountingBatches",
    "Method",
    "PendingCounts",
    "ReadThroughCache",
    "ReleaseCounts",
    "TokenCache",
    "bind_token_cache",
    "count_tokens",
    "counts_through",
    "counting_workers",
    "every_release",
    "ready_to_fork",
    "release_counts",
    "text_tokens",
    "token_cache_in",
    "token_cache_of",
]

Method = Literal["tiktoken", "fallback"]
Progress = Callable[[int], object]
"""Told how many more messages are counted (a progress bar's ``update``)."""
ReleaseCounts = dict[str, tuple[list[int | None], list[int | None]]]
"""Per release (by name, every one of :data:`~sessionkit.nanobot.policies.POLICIES`): each
message's exact count and no-tiktoken estimate, None where that release cannot count it (or
exact counts were not asked for)."""
PendingCounts = Callable[[Progress | None], ReleaseCounts]
"""Waits for counting under way: every release's counts of the messages (:data:`ReleaseCounts`),
telling a :data:`Progress` as parts arrive."""
T = TypeVar("T")


class TokenCache:
    """Token counts keyed by a stable digest of each message's payload (and release or counting
    rule), so recounts skip tokenizing.

    A cache given a ``folder`` (``DEFAULT_CACHE``: ``<cache dir>/tokens-<format>``) keeps its
    counts there between processes: files of keys sorted for binary search, memory-mapped on
    first use (nothing is read into a dict); new counts are written by :meth:`flush` (after
    large batches, at most every few seconds, and at exit) as one more file (temp file +
    rename, so two processes never clash), merged when there are many.  Each file is sealed
    with a checksum checked before it is mapped (:mod:`sessionkit.store.integrity`): a
    damaged one is removed with a warning and its counts made again.  A folder whose cache
    folder is not the user's alone (:func:`~sessionkit.store.cachedir.cache_dir_problem`) is
    neither read nor written.
    """

    def __init__(self, folder: Path | Callable[[], Path] | None = None) -> None:
        self._counts: dict[int, int] = {}
        self._folder = folder
        self._disk: list[tuple[np.ndarray, np.ndarray]] | None = None if folder else []
        self._pending: list[tuple[int, int]] = []
        self._flushed = time.monotonic()
        if folder is not None:
            atexit.register(self.flush)

    def __len__(self) -> int:
        keys = [np.fromiter(self._counts, dtype=np.uint64, count=len(self._counts))]
        keys += [k for k, _ in self._segments()]
        return int(np.unique(np.concatenate(keys)).size)

    def clear(self) -> None:
        """Forget every count held in this process; what is on disk is read again on next use."""
        self._counts.clear()
        self._pending.clear()
        if self._folder is not None:
            self._disk = None

    def get(self, key: int) -> int | None:
        """The cached count for a message key, or None."""
        return self.get_many([key])[0]

    def get_many(self, keys: list[int | None]) -> list[int | None]:
        """Cached counts of many keys (None: not cached; a None key is never cached)."""
        lookup = cast("Callable[[int | None], int | None]", self._counts.get)  # None: not cached
        found: list[int | None] = list(map(lookup, keys))
        segments = self._segments()
        if not segments or None not in found:
            return found
        misses = [i for i, n in enumerate(found) if n is None and keys[i] is not None]
        wanted = np.array([keys[i] for i in misses], dtype=np.uint64)
        counts = np.full(len(misses), -1, dtype=np.int64)
        for sorted_keys, sorted_counts in segments:
            at = np.minimum(np.searchsorted(sorted_keys, wanted), len(sorted_keys) - 1)
            hit = (sorted_keys[at] == wanted) & (counts < 0)
            counts[hit] = sorted_counts[at[hit]]
        for i, n in zip(misses, counts.tolist(), strict=True):
            if n >= 0:
                found[i] = n
        return found

    def update(self, keys: Iterable[int], counts: Iterable[int]) -> None:
        """Record counts for message keys (kept on disk at the next :meth:`flush`)."""
        pairs = list(zip(keys, counts, strict=True))
        self._counts.update(pairs)
        if self._folder is not None:
            self._pending.extend(pairs)

    @property
    def folder(self) -> Path | None:
        """Where the counts persist (None: this process only)."""
        return self._folder() if callable(self._folder) else self._folder

    def _usable_folder(self) -> Path | None:
        """:attr:`folder`, unless persistence is off (:func:`persistence_on`) or its cache
        folder (its parent) may not be trusted: then None, the latter with a warning."""
        folder = self.folder
        if folder is None or not persistence_on():
            return None
        problem = cache_dir_problem(folder.parent)
        if problem is None:
            return folder
        warnings.warn(
            f"the cache folder {folder.parent} {problem}; token counts are not kept there",
            stacklevel=4,
        )
        return None

    def sweep(self) -> int:
        """Remove temp files that writers which died mid-flush left in :attr:`folder`
        (see :func:`~sessionkit.store.cachedir.remove_dead_temp_files`); returns how many."""
        folder = self.folder
        return 0 if folder is None else remove_dead_temp_files(folder)

    def _segments(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The files on disk as (sorted keys, counts), memory-mapped on first use; several
        files of moderate size are merged in memory (a lookup searches each file), the
        first file's count kept for a key several hold."""
        if self._disk is None:
            self._disk = []
            folder = self._usable_folder()
            if folder is not None and folder.is_dir():
                for segment in sorted(folder.glob("*.arrow")):
                    found = _read_counts(segment)
                    if found is not None and len(found[0]):
                        self._disk.append(found)
            if (
                len(self._disk) > 1
                and sum(len(k) for k, _ in self._disk) <= TUNING.merged_count_keys
            ):
                keys, first = np.unique(
                    np.concatenate([k for k, _ in self._disk]), return_index=True
                )
                self._disk = [(keys, np.concatenate([c for _, c in self._disk])[first])]
        return self._disk

    def flush_soon(self) -> None:
        """:meth:`flush` when many counts wait or the last flush is a while ago."""
        waited = time.monotonic() - self._flushed
        if len(self._pending) >= TUNING.flush_counts or waited >= _FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Write the counts recorded since the last flush; merge the files when there are
        more than :attr:`~sessionkit.tuning.Tuning.count_files`.  A folder that cannot be written costs speed only."""
        self._flushed = time.monotonic()
        folder = self._usable_folder() if self._pending else None
        if folder is None:
            return
        pairs, self._pending = self._pending, []
        keys = np.array([k for k, _ in pairs], dtype=np.uint64)
        counts = np.array([n for _, n in pairs], dtype=np.int64)
        with suppress(OSError, pa.ArrowException):
            _write_counts(folder, keys, counts)
            segments = sorted(folder.glob("*.arrow"))
            if len(segments) > TUNING.count_files:
                self._disk = None
                merged = [*self._segments(), (keys, counts)]
                _write_counts(
                    folder,
                    np.concatenate([k for k, _ in merged]),
                    np.concatenate([c for _, c in merged]),
                )
                for segment in segments:
                    segment.unlink(missing_ok=True)


_FLUSH_SECONDS = 10.0
_COUNTS = pa.schema([("key", pa.uint64()), ("count", pa.int64())])


def _read_counts(segment: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """A counts file's (sorted keys, counts), memory-mapped once its seal checks out; None
    when it is gone or damaged (removed, with a warning: its counts are made again).  Keys
    must be strictly increasing (binary search relies on it) and counts non-negative."""
    sealed = read_sealed_or_none(segment)
    if sealed is None:
        return None
    table, inode = sealed
    try:
        if table.schema.remove_metadata() != _COUNTS:
            raise IntegrityError("another schema")
        keys = table.column("key").to_numpy()
        counts = table.column("count").to_numpy()
        if len(keys) > 1 and not (keys[1:] > keys[:-1]).all():
            raise IntegrityError("keys out of order")
        if len(counts) and counts.min() < 0:
            raise IntegrityError("a negative count")
    except (IntegrityError, pa.ArrowException, KeyError, ValueError) as exc:
        discard(segment, exc, inode)
        return None
    return keys, counts


def _write_counts(folder: Path, keys: np.ndarray, counts: np.ndarray) -> None:
    """One more counts file in ``folder``, keys unique and sorted, written atomically (temp +
    rename)."""
    keys, first = np.unique(keys, return_index=True)
    name = f"{time.time_ns()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.arrow"
    table = pa.table([pa.array(keys), pa.array(counts[first])], schema=_COUNTS)
    write_ipc(folder / name, _COUNTS, [table])


TOKENS_FORMAT = 4
"""The layout of persisted counts and their keys; another format lives in another folder."""

DEFAULT_CACHE = TokenCache(lambda: default_cache_dir() / f"tokens-{TOKENS_FORMAT}")
_CACHES: dict[Path, TokenCache] = {}


_BOUND: dict[int, tuple[weakref.ref, TokenCache | None]] = {}


def bind_token_cache(sessions: Iterable[object], cache: TokenCache | None) -> None:
    """Remember that ``sessions`` were loaded with token counts kept in ``cache`` (None: a
    ``cache=False`` load, which keeps none), so what is computed from them later (replays,
    states, windows) counts through the same cache and never touches another folder."""
    for session in sessions:
        key = id(session)

        def forget(_: weakref.ref[object], key: int = key) -> None:
            _BOUND.pop(key, None)

        ref = weakref.ref(session, forget)
        _BOUND[key] = (ref, cache)


def token_cache_of(sessions: Iterable[object]) -> TokenCache | None:
    """The token cache to count ``sessions`` through: none if any was loaded with
    ``cache=False``, the cache they were all loaded with, else :data:`DEFAULT_CACHE`."""
    chosen: set[int] = set()
    found: TokenCache | None = DEFAULT_CACHE
    for session in sessions:
        bound = _BOUND.get(id(session))
        cache = bound[1] if bound is not None and bound[0]() is session else DEFAULT_CACHE
        if cache is None:
            return None
        chosen.add(id(cache))
        found = cache
    return found if len(chosen) <= 1 else DEFAULT_CACHE


def token_cache_in(root: Path) -> TokenCache:
    """The token counts kept in cache folder ``root`` (``sk.load(..., cache=root)``), one
    :class:`TokenCache` per folder and process."""
    folder = Path(root) / f"tokens-{TOKENS_FORMAT}"
    if folder not in _CACHES:
        _CACHES[folder] = TokenCache(folder)
    return _CACHES[folder]


KEY_FIELDS = ("content", "tool_calls", "name", "tool_call_id", "reasoning_content")
"""The message fields a payload is built from (what a counting worker is sent of each)."""


def _seed(name: str) -> int:
    """The XXH3 seed of a release's (or a counting rule's) keys: its name's own hash."""
    return xxhash.xxh3_64_intdigest(name.encode())


def _payload_keys(payloads: Sequence[str], release: ReplayPolicy) -> list[int]:
    """Cache keys of payloads ``release`` built: a stable 64-bit XXH3 of each payload's UTF-8
    (lone surrogates passed through), seeded by the release's name, or for a payload with no
    ``<|`` (so no special-token text) by its plain counting rule
    (:attr:`~sessionkit.nanobot.release.ReplayPolicy.plain_count`), which every release naming
    it counts alike.

    A count is a function of the payload and that rule or release, so equal keys mean equal
    counts (a 64-bit hash: a ~2**-64 chance per pair of being wrong, as any 64-bit digest);
    hashing the payload a count needs anyway costs about a fifth of digesting each message's
    fields, and every payload has a key, whatever its fields hold.
    """
    raw = map(str.encode, payloads, repeat("utf-8"), repeat("surrogatepass"))  # one at a time
    marked = list(map(has_marker, payloads))
    plain = _seed(f"*{release.plain_count}")
    if not any(marked):
        return list(map(xxhash.xxh3_64_intdigest, raw, repeat(plain)))
    seeds = [_seed(release.name) if m else plain for m in marked]
    return list(map(xxhash.xxh3_64_intdigest, raw, seeds))


@lru_cache(maxsize=1)
def _counter() -> Callable[[str], int]:
    """The fastest exact cl100k_base counter installed: GitHub's Rust ``bpe`` crate
    (``bpe-openai``, about twice tiktoken's speed, its own copy of the BPE file), else tiktoken.

    ``bpe-openai``'s counts equal tiktoken's ``encode_ordinary`` lengths (a hypothesis test
    checks it against tiktoken, the reference).
    """
    bindings = _bpe_bindings()
    if bindings is None:
        return _tiktoken_count
    return bindings.tokenizer_for_encoding("cl100k_base").count


def _bpe_bindings() -> ModuleType | None:
    """bpe-openai's Rust extension module, loaded on its own: the package's ``__init__``
    builds a tiktoken-like layer by reading all three of its BPE files in Python (1.5 s),
    which sessionkit never uses.  None when bpe-openai is not installed."""
    spec = importlib.util.find_spec("bpe_openai")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(folder) / f"_bindings{suffix}"
            if path.is_file():
                loader = importlib.machinery.ExtensionFileLoader("bpe_openai._bindings", str(path))
                found = importlib.util.spec_from_file_location(loader.name, path, loader=loader)
                module = importlib.util.module_from_spec(
                    cast("importlib.machinery.ModuleSpec", found)  # with a loader: never None
                )
                loader.exec_module(module)
                return module
    return None


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


def text_tokens(texts: Sequence[str]) -> list[int]:
    """cl100k_base tokens of short texts holding no ``<|``, counted now: for a line of text
    looking its count up in a :class:`TokenCache` costs more than counting it."""
    return _encode_lengths(texts)


def _payload_counts(messages: Sequence[dict[str, Any]], policy: str) -> list[int]:
    """The release's exact count for each message, tokenizing in one batch."""
    release = get_policy(policy)
    return _counts_of(list(map(release.message_payload, messages)), release)


def _counts_of(payloads: list[str], release: ReplayPolicy) -> list[int]:
    """The release's exact count of each of its message payloads."""
    counts = [release.encoded_tokens(0)] * len(payloads)  # right for empty payloads
    plain = []
    for i, payload in enumerate(payloads):
        if payload and has_special_tokens(payload):
            counts[i] = release.fallback_tokens(payload)
        elif payload:
            plain.append(i)
    lengths = _encode_lengths([payloads[i] for i in plain]) if plain else []
    for i, n in zip(plain, lengths, strict=True):
        counts[i] = release.encoded_tokens(n)
    return counts


class ReadThroughCache(TokenCache):
    """A token cache that reads through to ``base`` and keeps its own new counts apart (what a
    forked worker sends back)."""

    def __init__(self, base: TokenCache | None) -> None:
        super().__init__()
        self.base = base
        self.fresh: list[tuple[int, int]] = []

    def get_many(self, keys: list[int | None]) -> list[int | None]:
        found = self.base.get_many(keys) if self.base is not None else [None] * len(keys)
        own = super().get_many(keys)
        return [o if f is None else f for f, o in zip(found, own, strict=True)]

    def update(self, keys: Iterable[int], counts: Iterable[int]) -> None:
        pairs = list(zip(keys, counts, strict=True))
        super().update((d for d, _ in pairs), (c for _, c in pairs))
        self.fresh.extend(pairs)


def _parallel(n_messages: int, workers: int) -> bool:
    """Whether to fork workers: a large batch, and a process that may have children (a Dask
    or multiprocessing worker is a daemon, which may not)."""
    return workers > 1 and n_messages >= TUNING.parallel_count_messages and can_fork()


def _count_shared_range(start: int, stop: int, policy: str) -> list[int]:
    return _payload_counts(SHARED["messages"][start:stop], policy)


def _keyed_shared_range(start: int, stop: int, policy: str) -> tuple[list[int], list]:
    """A range's counts through the parent's cache, and the counts it had to make."""
    delta = ReadThroughCache(SHARED["cache"])
    counts = _cached_counts(SHARED["messages"][start:stop], delta, 1, policy)
    return counts, delta.fresh


def _forked(
    task: Callable[[int, int, str], T],
    messages: Sequence[dict[str, Any]],
    workers: int,
    policy: str,
    cache: TokenCache | None = None,
    progress: Progress | None = None,
) -> list[T]:
    """``task`` over ranges of ``messages`` in forked workers that inherit them (and
    ``cache``), results in order; ``progress`` hears of each range as it arrives."""
    step = max(1, -(-len(messages) // (workers * 16)))
    starts = list(range(0, len(messages), step))
    stops = [min(len(messages), s + step) for s in starts]
    ready_to_fork(cache)
    results = []
    with forked_pool(workers, messages=messages, cache=cache) as pool:
        for start, stop, result in zip(
            starts, stops, pool.map(task, starts, stops, repeat(policy)), strict=True
        ):
            results.append(result)
            if progress is not None:
                progress(stop - start)
    return results


def _uncached_counts(
    messages: Sequence[dict[str, Any]],
    workers: int,
    policy: str,
    progress: Progress | None = None,
) -> list[int]:
    """Exact counts, in forked workers when the batch is large enough to repay them."""
    if _parallel(len(messages), workers):
        parts = _forked(_count_shared_range, messages, workers, policy, progress=progress)
        return [n for part in parts for n in part]
    counts = _payload_counts(messages, policy)
    if progress is not None:
        progress(len(messages))
    return counts


def _cached_counts(
    messages: Sequence[dict[str, Any]],
    cache: TokenCache,
    workers: int,
    policy: str,
    progress: Progress | None = None,
    payloads: list[str] | None = None,
) -> list[int]:
    """Counts looked up by their payloads' keys (:func:`_payload_keys`); each missing distinct
    key tokenized once and recorded (``payloads``: the messages' own under ``policy``, when the
    caller has built them).

    Keys hash the release in, so one cache never serves one release's count for another,
    except for plain messages, which every release sharing a counting rule counts alike.
    A large batch is keyed and counted in forked workers, a range each, reading through
    ``cache``.  New counts are flushed to the cache's folder, if it has one.
    """
    if _parallel(len(messages), workers):
        parts = _forked(_keyed_shared_range, messages, workers, policy, cache, progress)
        for _, fresh in parts:
            cache.update((k for k, _ in fresh), (n for _, n in fresh))
        cache.flush_soon()
        return [n for counts, _ in parts for n in counts]
    release = get_policy(policy)
    if payloads is None:
        payloads = list(map(release.message_payload, messages))
    keys = _payload_keys(payloads, release)
    counts = cache.get_many(cast("list[int | None]", keys))
    todo = [i for i, n in enumerate(counts) if n is None]
    first: dict[int, int] = {}
    fresh = [i for i in todo if first.setdefault(keys[i], i) == i]
    if progress is not None:
        progress(len(messages) - len(fresh))  # found in the cache, or a repeat of a fresh one
    if not todo:
        return cast("list[int]", counts)  # no count missing (todo is empty)
    fresh_counts = _counts_of([payloads[i] for i in fresh], release)
    if progress is not None:
        progress(len(fresh))
    for i, n in zip(fresh, fresh_counts, strict=True):
        counts[i] = n
    for i in todo:
        if counts[i] is None:
            counts[i] = counts[first[keys[i]]]
    cache.update(map(keys.__getitem__, fresh), fresh_counts)
    cache.flush_soon()
    return cast("list[int]", counts)  # every missing count was filled in above


def ready_to_fork(cache: TokenCache | None) -> None:
    """Load the BPE ranks and map ``cache``'s files on disk now, once, so workers forked
    next inherit them instead of each loading its own."""
    _counter()
    if cache is not None:
        cache.get_many([])


@contextmanager
def counting_workers(
    cache: TokenCache | None, workers: int | None = None
) -> Iterator[ProcessPoolExecutor | None]:
    """Counting processes forked now, while this process is small, for a load that will send
    them batches (:class:`CountingBatches`) as it reads: each worker's memory is then what it was
    forked with plus one batch, not a copy of everything read so far.  They read through
    ``cache`` as it is now.  None when this process may not fork, or has one core."""
    workers = workers or os.cpu_count() or 1
    if workers < 2 or not can_fork():
        yield None
        return
    ready_to_fork(cache)
    with forked_pool(workers, cache=cache) as pool:
        pool.submit(int).result()  # a fork-context pool forks all its workers at once
        yield pool


class CountingBatches:
    """Messages sent to the pool of :func:`counting_workers` as a load reads them, in batches
    of about :attr:`~sessionkit.tuning.Tuning.batch_chars` characters of content, counted exactly through the cache
    the workers were forked with (and estimated without tiktoken) under every release
    (:func:`every_release`); :meth:`close` ends a run of them.  State: the messages not yet sent and the batches under way."""

    def __init__(self, pool: ProcessPoolExecutor, cache: TokenCache | None) -> None:
        self.pool, self.cache = pool, cache
        self._held: list[dict[str, Any]] = []
        self._chars = 0
        self._sent: list[tuple[Future, int]] = []  # each batch and how many messages it holds

    def add(self, messages: Sequence[dict[str, Any]]) -> None:
        """Send ``messages`` on, each batch as soon as it is full."""
        sizes = [len(c) if type(c) is str else 256 for c in message_field(messages, "content")]
        total = self._chars + sum(sizes) + 64 * len(sizes)
        if (
            total // TUNING.batch_chars == self._chars // TUNING.batch_chars
        ):  # fills none: a small file
            self._held += messages
            self._chars = total
            return
        ends = self._chars + np.cumsum(np.array(sizes, dtype=np.int64) + 64)
        full = np.flatnonzero(
            np.diff(ends // TUNING.batch_chars, prepend=self._chars // TUNING.batch_chars)
        )
        start = 0
        for last in full.tolist():
            self._held += messages[start : last + 1]
            self._send()
            start = last + 1
        self._held += messages[start:]
        self._chars = int(ends[-1]) if len(ends) else self._chars

    def _send(self) -> None:
        """Submit the held messages as the fields their payloads are built from (and keys
        digest, :data:`KEY_FIELDS`): half the pickling of whole dicts."""
        if self._held:
            fields = [message_field(self._held, name) for name in KEY_FIELDS]
            size, self._held = len(self._held), []
            try:
                sent = pickle.dumps(fields, pickle.HIGHEST_PROTOCOL)
            except RecursionError:  # nested too deeply to pickle: counted here instead
                future: Future = Future()
                future.set_result(_count_batch(fields))
            else:  # only the pickled bytes are held: the batch's text is not kept alive
                future = self.pool.submit(_count_pickled, sent)
            self._sent.append((future, size))

    def close(self) -> PendingCounts:
        """Send what is held; returns a function that waits for every release's counts of
        every message added since the last close, in order (:data:`ReleaseCounts`), records
        the new counts in the cache and tells ``progress`` of each batch as it arrives."""
        self._send()
        sent, self._sent = self._sent, []
        cache = self.cache

        def wait(progress: Progress | None = None) -> ReleaseCounts:
            found: ReleaseCounts = {name: ([], []) for name in POLICIES}
            for future, size in sent:
                counted, fresh = future.result()
                for name, (exact, estimates) in counted.items():
                    found[name][0].extend(exact)
                    found[name][1].extend(estimates)
                if cache is not None and fresh:
                    cache.update((k for k, _ in fresh), (n for _, n in fresh))
                if progress is not None:
                    progress(size)
            if cache is not None:
                cache.flush_soon()
            return found

        return wait


def _count_pickled(sent: bytes) -> tuple[ReleaseCounts, list[tuple[int, int]]]:
    """:func:`_count_batch` of a batch's fields as pickled by :meth:`CountingBatches._send`, in
    a counting worker, which keeps the memory it frees for its next batch
    (:func:`~sessionkit.store.heap.retain_freed`)."""
    retain_freed()
    return _count_batch(pickle.loads(sent))


def _count_batch(fields: list[list[Any]]) -> tuple[ReleaseCounts, list[tuple[int, int]]]:
    """One batch's counts under every release, sent as its :data:`KEY_FIELDS`, and the counts
    made that the parent's cache lacks: in a worker, or in the parent for a batch nested too
    deeply to pickle.
    Each message is rebuilt as a dict of those fields (None for one it lacks): everything a
    payload, a key or :func:`~sessionkit.nanobot.uncountable.uncountable_reason` reads."""
    batch = [dict(zip(KEY_FIELDS, row, strict=True)) for row in zip(*fields, strict=True)]
    base = SHARED.get("cache")
    delta = None if base is None else ReadThroughCache(base)
    return release_counts(batch, delta), [] if delta is None else delta.fresh


def release_counts(
    messages: Sequence[dict[str, Any]], cache: TokenCache | None, progress: Progress | None = None
) -> ReleaseCounts:
    """Every release's exact counts and estimates of ``messages`` (:data:`ReleaseCounts`), in
    this process, through ``cache`` (None: none): one payload built per message for the
    reference release's count, key and estimate, from which the other releases' plain
    messages' estimates come too (:func:`every_release`); ``progress`` as
    :func:`count_tokens`'."""
    built: list[list[str]] = []
    count = partial(_both_counts, cache=cache, policy=DEFAULT_POLICY, built=built)
    pairs = counts_or_missing(messages, partial(count, progress=progress))
    exact = [None if pair is None else pair[0] for pair in pairs]
    estimates = [None if pair is None else pair[1] for pair in pairs]
    whole = built[-1] if built and len(built[-1]) == len(messages) else None  # none uncountable
    return every_release(messages, (exact, estimates), cache, exact=True, workers=1, payloads=whole)


def _both_counts(
    messages: list[dict[str, Any]],
    cache: TokenCache | None,
    policy: str,
    built: list[list[str]],
    progress: Progress | None = None,
) -> list[tuple[int, int]]:
    """Each message's exact count (through ``cache``) and no-tiktoken estimate, both from the
    one payload built for it; the payloads join ``built`` (the other releases' estimates of
    plain messages are taken from them)."""
    release = get_policy(policy)
    payloads = list(map(release.message_payload, messages))
    if cache is None:
        exact = _counts_of(payloads, release)
        if progress is not None:
            progress(len(messages))
    else:
        exact = _cached_counts(messages, cache, 1, policy, progress, payloads)
    found = list(zip(exact, map(release.fallback_tokens, payloads), strict=True))
    built.append(payloads)
    return found


_CANNOT = (TypeError, RecursionError, ValueError)
"""What a release raises on a message it cannot count: a text that cannot be joined, tool
calls nested too deeply, text that is not valid Unicode where it counts UTF-8 bytes."""


def every_release(
    messages: Sequence[dict[str, Any]],
    reference: tuple[list[int | None], list[int | None]],
    cache: TokenCache | None,
    *,
    exact: bool,
    workers: int | None = None,
    payloads: list[str] | None = None,
) -> ReleaseCounts:
    """Every release's counts of ``messages`` (:data:`ReleaseCounts`), given ``reference``,
    :data:`~sessionkit.nanobot.policies.DEFAULT_POLICY`'s exact counts (all None unless
    ``exact``) and estimates.

    A message every release counts alike (:func:`_alike`) takes the reference's exact count
    under each release naming the same ``plain_count`` rule; only the others are counted
    again, through ``cache`` (keys name the release).  Estimates are each release's own;
    given ``payloads`` (the reference release's payload of every message), those of plain
    messages under such a release come from them, once per estimate rule, instead of from
    payloads built again per release (a plain message's payload is the same under each).
    """
    first = get_policy(DEFAULT_POLICY)
    found: ReleaseCounts = {first.name: reference}
    alike: list[bool] | None = None
    by_rule: dict[object, list[int | None]] = {}  # plain messages' estimates, by rule
    for release in POLICIES.values():
        if release.name in found:
            continue
        shared = release.plain_count == first.plain_count
        if payloads is None or not shared:
            estimates = _each_or_missing(messages, partial(map, release.fallback_message_tokens))
        else:
            alike = _alike(messages) if alike is None else alike
            estimates = _estimates_from(messages, (payloads, alike), release, by_rule)
        counts = list(reference[0])
        if exact:
            alike = _alike(messages) if alike is None else alike
            rest = [i for i, plain in enumerate(alike) if not (plain and shared)]
            count = partial(counts_through, cache=cache, policy=release.name, workers=workers)
            own = _each_or_missing([messages[i] for i in rest], count)
            for i, n in zip(rest, own, strict=True):
                counts[i] = n
        found[release.name] = (counts, estimates)
    return found


def _estimates_from(
    messages: Sequence[dict[str, Any]],
    plain: tuple[list[str], list[bool]],
    release: ReplayPolicy,
    by_rule: dict[object, list[int | None]],
) -> list[int | None]:
    """``release``'s no-tiktoken estimate of each message: a plain one's from its payload in
    ``plain`` (every message's payload under a release sharing ``release``'s counting rule,
    and whether each is plain), each estimate rule's once (``by_rule``); the others' from
    payloads of their own."""
    payloads, alike = plain
    rule = type(release).fallback_tokens
    if rule not in by_rule:
        texts = list(compress(payloads, alike))
        by_rule[rule] = _each_or_missing(texts, partial(map, release.fallback_tokens))
    estimates = iter(by_rule[rule])
    rest = [m for m, plain in zip(messages, alike, strict=True) if not plain]
    own = iter(_each_or_missing(rest, partial(map, release.fallback_message_tokens)))
    return [next(estimates) if plain else next(own) for plain in alike]


def _each_or_missing(
    messages: Sequence[T], count: Callable[[list[T]], Iterable[int]]
) -> list[int | None]:
    """``count`` of every message, None for each one it raises on (:data:`_CANNOT`): the batch
    at once, message by message only when it fails."""
    batch = list(messages)
    try:
        return list(count(batch))
    except _CANNOT:
        found: list[int | None] = []
        for message in batch:
            try:
                found.append(next(iter(count([message]))))
            except _CANNOT:
                found.append(None)
        return found


def _alike(messages: Sequence[dict[str, Any]]) -> list[bool]:
    """Whether each message is plain as :attr:`~sessionkit.nanobot.release.ReplayPolicy.plain_count`
    means it: text or no content, every other field it is counted from (:data:`KEY_FIELDS`)
    text or missing, tool calls JSON, and no ``<|`` in any of them.  Its payload is then the
    same for every release and holds no special-token text, so a release counts it by its
    plain rule alone."""
    n = len(messages)
    odd: set[int] = set()  # the rows that are not plain
    for name in KEY_FIELDS:
        values = message_field(messages, name)
        if name == "tool_calls":
            odd.update(i for i in compress(range(n), values) if not _plain_json(values[i]))
        elif values.count(None) == n:
            continue
        elif STR_OR_NONE.issuperset(map(type, values)):
            texts = list(compress(range(n), map(is_not, values, repeat(None))))
            odd.update(_marked(texts, values))
        else:
            odd.update(i for i, v in enumerate(values) if v is not None and not _plain_text(v))
    return [i not in odd for i in range(n)]


def _marked(rows: list[int], texts: list[Any]) -> Iterator[int]:
    """Those of ``rows`` whose text holds ``<|``: C-level searches for ``<`` first (one
    ``memchr`` each), then for ``<|`` in the few that hold it."""
    found = list(compress(rows, map(contains, map(texts.__getitem__, rows), repeat("<"))))
    return compress(found, map(contains, map(texts.__getitem__, found), repeat("<|")))


def _plain_text(value: Any) -> bool:
    return type(value) is str and not has_marker(value)


def _plain_json(calls: Any) -> bool:
    """Whether truthy tool calls are JSON holding no ``<|``."""
    try:
        return b"<|" not in orjson.dumps(calls)
    except (orjson.JSONEncodeError, TypeError):
        return False


@entry_point(method="tokens")
def count_tokens(
    messages: Iterable[dict[str, Any]],
    *,
    policy: str = DEFAULT_POLICY,
    tokens: Method = "tiktoken",
    cache: TokenCache | bool | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> list[int]:
    """Token counts for many messages at once: batched, parallel and cached.

    Cached counts are looked up by key; each missing distinct payload is tokenized once, in
    forked worker processes when there are many (they inherit the messages, nothing is
    pickled to them).

    Parameters
    ----------
    messages
        Persisted message dicts.
    policy
        The release whose estimate to reproduce (``"nanobot-0.2"``, ``"nanobot-0.3.0"``,
        ``"nanobot-0.3.5"``).
    tokens
        ``"tiktoken"`` for the release's exact count, ``"fallback"`` for its estimate without
        tiktoken (0.2.2: characters // 4 + 4; 0.3.x: UTF-8 bytes + 4); as ``sk.load(tokens=)``
        (``method=`` is its deprecated spelling).
    cache
        Where exact counts are remembered, keyed by a hash of each message's payload
        (and the release): None or True the default cache (on disk unless
        ``SESSIONKIT_CACHE=off``), ``False`` none, or a ``TokenCache``.
    workers
        Processes used for large batches (default: every core).
    progress
        Called with how many more messages are counted as parts finish (a progress bar's
        ``update``); the calls add up to ``len(messages)``.

    Raises
    ------
    TypeError
        For an item that is not a dict, and (0.2.2, 0.3.0) a text block whose truthy ``text``
        is not a string, as those releases raise.
    UnicodeEncodeError
        (0.3.x) A lone surrogate in a payload counted by UTF-8 bytes: special-token text, or
        any payload with ``tokens="fallback"``, as those releases raise.
    """
    if cache is None or cache is True:
        cache = DEFAULT_CACHE
    return counts_through(
        messages,
        None if cache is False else cache,
        policy=policy,
        tokens=tokens,
        workers=workers,
        progress=progress,
    )


def counts_through(
    messages: Iterable[dict[str, Any]],
    cache: TokenCache | None,
    *,
    policy: str = DEFAULT_POLICY,
    tokens: Method = "tiktoken",
    workers: int | None = None,
    progress: Progress | None = None,
) -> list[int]:
    """:func:`count_tokens` through ``cache`` as sessionkit holds it (None: no cache), for its
    own callers, which carry the cache a load chose (or none) rather than the public switch."""
    batch = messages if isinstance(messages, list | tuple) else list(messages)
    bad = next((n for n, m in enumerate(batch) if not isinstance(m, dict)), None)
    if bad is not None:
        raise TypeError(
            "count_tokens takes a list of message dicts such as {'role': 'user', 'content': "
            f"'hello'}}; item {bad} is {batch[bad]!r:.60} ({type(batch[bad]).__name__})"
        )
    release = get_policy(policy)
    policy = release.release_name  # a candidate counts as its release, and is kept as it
    if tokens == "fallback":
        estimates = [release.fallback_message_tokens(m) for m in batch]
        if progress is not None:
            progress(len(batch))
        return estimates
    if tokens != "tiktoken":
        raise ValueError(f"unknown token method tokens={tokens!r}; use 'tiktoken' or 'fallback'")
    workers = workers or os.cpu_count() or 1
    if cache is None:
        return _uncached_counts(batch, workers, policy, progress)
    return _cached_counts(batch, cache, workers, policy, progress)
