"""What a test checks against (nanobot-ai 0.2.2, a tool, a library): had, or the test cannot run.

The unit tests need only sessionkit; nanobot-ai comes with the test extra.  Conformance modules
call :func:`require` at import time (the whole module stops) or take the ``nanobot`` fixture.
A test that cannot get what it checks against skips on a developer's machine and fails under
CI (``CI=true``), so a run without the registry never goes green without one comparison.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import NoReturn

import pytest

NANOBOT_MISSING = (
    "nanobot-ai 0.2.2 is not installed; the conformance tests need the test extra "
    "(pip install -e '.[test]')"
)


RUNNING: list[pytest.Item] = []
"""The test running now (set by conftest's ``_running`` fixture), so a reference can check
that the test asking for it is marked as needing it."""


def marked_for(marker: str, what: str) -> None:
    """Fail the running test unless it carries ``marker``: ``-m "not conformance"`` must be
    the run that needs no nanobot release, so every test that asks for one says so."""
    if RUNNING and RUNNING[-1].get_closest_marker(marker) is None:
        pytest.fail(f"{RUNNING[-1].nodeid} uses {what} but is not marked {marker}")


def under_ci() -> bool:
    """Whether this run is CI's (``CI`` set to true, as ``.ci/run`` is run)."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def unavailable(reason: str) -> NoReturn:
    """Stop the calling test for want of its reference: a skip, or under CI a failure."""
    if under_ci():
        pytest.fail(f"{reason} (under CI a test that cannot get its reference fails)")
    pytest.skip(reason)


def need(module: str, reason: str | None = None) -> ModuleType:
    """Import ``module``, or stop the caller with :func:`unavailable`."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as error:
        unavailable(reason or f"{module} cannot be imported: {error}")


def require(module: str = "nanobot.session.manager") -> ModuleType:
    """Import one of nanobot's modules, or stop the caller with :data:`NANOBOT_MISSING`
    (inside a test, one marked ``conformance``)."""
    marked_for("conformance", f"nanobot-ai ({module})")
    return need(module, NANOBOT_MISSING)
