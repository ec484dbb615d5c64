"""nanobot-ai 0.2.2, the release the conformance tests compare sessionkit with: import it or skip.

The unit tests need only sessionkit; nanobot-ai comes with the test extra.  Conformance modules
call :func:`require` at import time (the whole module skips) or take the ``nanobot`` fixture.
"""

from __future__ import annotations

from types import ModuleType

import pytest

NANOBOT_MISSING = (
    "nanobot-ai 0.2.2 is not installed; the conformance tests need the test extra "
    "(pip install -e '.[test]')"
)


def require(module: str = "nanobot.session.manager") -> ModuleType:
    """Import one of nanobot's modules, or skip the caller with :data:`NANOBOT_MISSING`."""
    return pytest.importorskip(module, reason=NANOBOT_MISSING)
