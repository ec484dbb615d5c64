"""The garbage collector paused around bulk work, and left as the caller had it."""

from __future__ import annotations

import gc

import pytest

from sessionkit.store.nogc import no_gc


def test_the_collector_is_paused_inside_and_back_after_even_on_an_error() -> None:
    assert gc.isenabled()
    with no_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), no_gc():
        raise KeyError("x")
    assert gc.isenabled()


def test_a_collector_the_caller_paused_stays_paused() -> None:
    gc.disable()
    try:
        with no_gc(), no_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_what_a_worker_keeps_is_frozen_so_no_collection_walks_it() -> None:
    kept = [{"n": i} for i in range(3)]
    try:
        with no_gc(kept=True):
            kept.extend({"n": i} for i in range(1_000))
            assert gc.get_freeze_count() == 0
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()
