"""Regression helpers for tests and notebooks: snapshots, figure data and window invariants.

- :mod:`~sessionkit.testing.snapshots`: pin a DataFrame in a small CSV or JSON file beside the
  notebook and compare it cell by cell on rerun (:func:`assert_frame_snapshot`).
- :mod:`~sessionkit.testing.request_snapshots`: pin each LLM call's size and cost under a
  history policy in a JSON file; fail when calls grow or get dearer beyond a tolerance
  (:func:`assert_requests_snapshot`, :func:`requests_data`).
- :mod:`~sessionkit.testing.agreement_snapshots`: pin an experiment's agreement rate per
  setting in a JSON file; fail when a setting's rate moves beyond a tolerance
  (:func:`assert_agreement_snapshot`, :func:`agreement_data`).
- :mod:`~sessionkit.testing.stub_server`: an OpenAI-compatible endpoint on 127.0.0.1 whose
  answers follow a rule of the request, to try experiments offline (:func:`stub_server`).
- :mod:`~sessionkit.testing.local_server`: the base of that stub and the test suite's: a
  threaded server on 127.0.0.1 for a ``with`` block, with JSON and server-sent-event answers.
- :mod:`~sessionkit.testing.figures`: the data a figure draws, as a frame to snapshot
  (:func:`figure_data`, :func:`assert_figure_snapshot`).
- :mod:`~sessionkit.testing.invariants`: properties every history window of nanobot 0.2.2's
  policy has (:func:`check_window_invariants`, :func:`assert_window_invariants`).
"""

from sessionkit.testing.agreement_snapshots import agreement_data, assert_agreement_snapshot
from sessionkit.testing.figures import assert_figure_snapshot, figure_data
from sessionkit.testing.invariants import (
    InvariantViolation,
    assert_window_invariants,
    check_window_invariants,
)
from sessionkit.testing.request_snapshots import assert_requests_snapshot, requests_data
from sessionkit.testing.snapshots import (
    FLOAT_DIGITS,
    UPDATE_ENV,
    Snapshot,
    SnapshotMismatch,
    assert_frame_snapshot,
)
from sessionkit.testing.stub_server import stub_server

__all__ = [
    "FLOAT_DIGITS",
    "UPDATE_ENV",
    "InvariantViolation",
    "Snapshot",
    "SnapshotMismatch",
    "agreement_data",
    "assert_agreement_snapshot",
    "assert_figure_snapshot",
    "assert_frame_snapshot",
    "assert_requests_snapshot",
    "assert_window_invariants",
    "check_window_invariants",
    "figure_data",
    "requests_data",
    "stub_server",
]
