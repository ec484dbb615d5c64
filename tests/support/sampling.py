"""How the test command samples the slowest differential checks, so ``make test`` stays under
15 minutes on two cores: every case with ``SESSIONKIT_FULL_CHECKS=1``, else a seeded share.

Tests that sample are marked ``sampled``; run them in full with
``SESSIONKIT_FULL_CHECKS=1 pytest -m sampled``.
"""

from __future__ import annotations

import os

import pandas as pd

FULL = os.environ.get("SESSIONKIT_FULL_CHECKS") == "1"
"""Whether to check every case (a nightly or pre-release run) instead of a sample."""


def examples(full: int, sampled: int) -> int:
    """Hypothesis examples to draw: ``full`` in a full run, else ``sampled``."""
    return full if FULL else sampled


def sample_rows(frame: pd.DataFrame, share: float, seed: int = 0) -> pd.DataFrame:
    """Every row in a full run, else a seeded ``share`` of them (at least one)."""
    if FULL or frame.empty:
        return frame
    return frame.sample(n=max(1, round(len(frame) * share)), random_state=seed).sort_index()
