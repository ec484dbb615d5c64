"""Every threshold that decides how sessionkit does its work, in one documented place.

They choose when to show progress, fork workers, read in runs, stream a file, rewrite a pack,
keep derived arrays on disk, split a long session or merge count files.  No answer depends on
them: each path they choose between is tested equal to the others.  Speed and memory do, so
benchmarks and tests set them with :func:`tuned` (or by assigning :data:`TUNING`'s fields)
instead of reaching into a module.  Forked workers see the values set before they fork.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["TUNING", "Tuning", "tuned"]


@dataclass
class Tuning:
    """The thresholds (one process's values; see :func:`tuned`)."""

    read_progress_bytes: int = 20_000_000
    """A cold load shows its bars by default once the files it reads hold this many bytes (over
    a second and a half of reading and counting on 2 cores; the bundled sample holds 2.5 MB)."""
    count_progress_messages: int = 20_000
    """A cold load shows its counting bar by default once it counts this many messages (many
    small files: 5,000 files of 4 messages; the bundled sample holds about 7,000 messages)."""
    fork_bytes: int = 16 << 20
    """A cold load with exact counts forks its counting workers before reading once the files
    it reads hold this many bytes (about 13,000 messages), and sends them each run's messages
    while it reads the next (:func:`~sessionkit.store.counting.counting_workers`), when it
    cannot have forked workers read, build and count whole runs instead (see
    :attr:`spread_run_bytes`): no index, one run, or a file it streams."""
    spread_run_bytes: int = 2 << 20
    """A cold load with exact counts of :attr:`fork_bytes` or more and an index, in more than
    one run of this many bytes and streaming no file, has forked workers read, build and count
    each run
    (:func:`~sessionkit.store.runs.built_apart`): nothing is parsed twice or sent as
    batches, and a worker holds one run's dicts (2 MB: 126 MiB at its peak on the 123 MB
    store, 168 MiB in 8 MB runs; the CPU seconds alike)."""
    run_bytes: int = 8 << 20
    """A cold load reads, builds and counts files in runs of about this many bytes; when there
    is more than one run, an indexed file's session keeps its columns but not its parsed
    messages (parsed again on first use, as after a warm open), so memory holds two runs'
    dicts, not the store's (8 MB parses to about 30 MB of dicts: 32 MB runs peaked 0.2 GB
    higher on a 123 MB store, in the same time)."""
    trim_after: float = 0.5
    """A cold load read in runs returns the C heap's freed pages to the system after each run
    (:func:`~sessionkit.store.heap.release_freed`) once it has read this share of its files'
    bytes: its peak comes at the end, when what it keeps is largest, and a return takes every
    page freed so far, so pages freed earlier are better reused by the next runs than faulted
    back in (the 123 MB store: the same peak, a third fewer page faults than from the start)."""
    run_files: int = 1024
    """A run holds at most this many files, so a store of many small files is read, built and
    counted by both cores, and what a worker sends back stays small."""
    stream_bytes: int = 64 << 20
    """A file of this many bytes or more is streamed (when the index can stand for its
    messages: see :func:`sessionkit.load`); at least a run's bytes, so it is a run of its own."""
    pack_min: int = 32
    """A store's pack is rewritten once this many of its files (or a tenth) are served
    otherwise; a store of fewer files gets no pack of its own (and so no catalog)."""
    racy_ns: int = 3_000_000_000
    """A file whose mtime or ctime is this close to the moment it was read is not indexed yet
    (nor its checksum remembered): file systems stamp times coarsely, so a change right after
    could leave its identity as is."""
    parallel_count_messages: int = 20_000
    """:func:`sessionkit.count_tokens` counts in forked workers from this many messages."""
    batch_chars: int = 1 << 21
    """Characters of message content per batch a load sends to a counting worker."""
    merged_count_keys: int = 1 << 22
    """Counts files holding at most this many keys together are searched as one array in
    memory (64 MiB): more are searched file by file, memory-mapped."""
    count_files: int = 16
    """The counts files of one folder are merged into one once there are more than this many."""
    flush_counts: int = 4096
    """New token counts are written to disk once this many wait (or every few seconds)."""
    parallel_replay_messages: int = 50_000
    """Replays (and rebuilt calls) run in forked workers from this many messages to replay."""
    replay_chunk_messages: int = 5_000
    """About this many messages per task handed to a replay worker."""
    split_messages: int = 100_000
    """A session this long is replayed by all workers, each taking a range of its messages."""
    persist_min_messages: int = 20_000
    """What is derived from a store's replays (the windows' stacked arrays) is kept in the index
    only for this many messages or more: smaller sets rebuild it faster than they read it."""
    fast_timeline: bool = True
    """The explorer redraws its timeline on kept Axes through matplotlib's internals, where the
    installed matplotlib has them (:mod:`sessionkit.views.timeline_canvas`); False: on fresh
    Axes with its public API only (the same pixels, slower)."""
    experiment_timeout_s: float = 120.0
    """An experiment's call that has no whole answer after this many seconds fails (and is
    not asked again: the endpoint may have answered and billed it)."""
    experiment_retries: int = 4
    """An experiment's call refused with 429 or a 5xx status (or no connection) is retried
    this many times."""
    experiment_backoff_s: float = 1.0
    """Seconds before the first retry, doubled at each one, unless ``Retry-After`` says."""
    experiment_retry_after_max_s: float = 60.0
    """The longest ``Retry-After`` an experiment waits; a longer one is waited this long."""
    experiment_prompt_margin: float = 0.25
    """budget_usd reserves each call's estimated prompt plus this share of it (estimates
    run a few percent under what providers count) before sending it."""
    experiment_progress_calls: int = 20
    """An experiment shows a progress bar by default once it sends this many calls."""
    parallel_plan_rows: int = 400
    """An experiment's plan rebuilds rows in forked workers from this many rows to rebuild
    (about 2 s of rebuilding on the 400k-message benchmark store)."""


TUNING = Tuning()
"""The thresholds in force in this process."""


@contextmanager
def tuned(**changes: Any) -> Iterator[Tuning]:
    """Set some of :data:`TUNING`'s thresholds for the block, restoring them after; an unknown
    name is a ``TypeError`` naming the known ones."""
    known = {f.name for f in fields(Tuning)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise TypeError(f"no threshold {', '.join(unknown)}; the thresholds are {sorted(known)}")
    before = {name: getattr(TUNING, name) for name in changes}
    for name, value in changes.items():
        setattr(TUNING, name, value)
    try:
        yield TUNING
    finally:
        for name, value in before.items():
            setattr(TUNING, name, value)
