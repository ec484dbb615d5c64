"""A huge session file read as a stream: each batch of its messages built into columns and
dropped as it is read, so memory holds the columns and one batch of dicts, never every
dict of the file at once (a 500 MB session parses to over a gigabyte of dicts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sessionkit.nanobot.listing import PreviewScan
from sessionkit.nanobot.reader import Problem, read_session_file, unforeseen_failure
from sessionkit.store.counting import CountingBatches, Method, Progress, TokenCache
from sessionkit.store.frames import Entry, Rows, built_rows, entries_of, joined_rows, with_counts

__all__ = ["streamed_entry"]


def streamed_entry(
    file: Path,
    *,
    tokens: Method | None,
    cache: TokenCache | None,
    batches: CountingBatches | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> tuple[Entry | None, list[Problem]]:
    """``file``'s entry, built a batch of messages at a time as it is read, and what reading
    it found (the entry is None when nothing in the file is usable).  Exact counts are made
    by ``batches``' workers when given (sent each batch as read), else per batch here
    (``workers`` as :func:`~sessionkit.store.counting.count_tokens`'s).  The entry's session
    holds no messages: the caller restores it from the index, or reads the file whole."""
    parts: list[Rows] = []
    scan = PreviewScan()
    later = batches is not None

    def sink(messages: list[dict[str, Any]], line_numbers: list[int]) -> None:
        if batches is not None:
            batches.add(messages)
        parts.append(
            built_rows(messages, tokens=tokens, cache=cache, workers=workers, counts=not later)
        )
        scan.add(messages, line_numbers)

    try:
        session, met = read_session_file(file, sink)
    except Exception as exc:  # a bug must cost one file (its batches still waited for)
        session, met = None, [unforeseen_failure(file, exc)]
    counted = None if batches is None else batches.close()(progress)
    if session is None:
        return None, met
    rows = joined_rows(parts) if parts else built_rows([], tokens=tokens, counts=not later)
    if counted is not None:
        rows = with_counts(rows, counted)
    lengths = np.array([rows.table.num_rows], dtype=np.int64)
    (entry,) = entries_of([session], rows, lengths, {str(file): met}, tokens=tokens, scans=[scan])
    return entry, []
