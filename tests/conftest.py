"""Shared test set-up: nanobot counts with tiktoken offline, hypothesis profiles, data paths."""

from __future__ import annotations

import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# nanobot 0.2.2 calls tiktoken.get_encoding("cl100k_base"), which reads this cache entry
# (sha1 of the download URL) before trying the network.  Seed it from the offline copy so
# the conformance tests compare sessionkit with nanobot's tiktoken count, not its fallback.
_TIKTOKEN_CACHE = Path(tempfile.mkdtemp(prefix="sessionkit-tiktoken-"))
_bpe = resources.files("tiktoken_ext").joinpath("data").joinpath("cl100k_base.tiktoken")
with resources.as_file(_bpe) as _path:
    shutil.copyfile(_path, _TIKTOKEN_CACHE / "9b5ad71b2ce5302211f9c61530b329a4922fc6a4")
os.environ["TIKTOKEN_CACHE_DIR"] = str(_TIKTOKEN_CACHE)

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


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The bundled sample store (``data/``)."""
    return DATA


@pytest.fixture(autouse=True, scope="session")
def _quiet_nanobot() -> None:
    """nanobot logs every repair through loguru; keep test output readable."""
    from loguru import logger

    logger.disable("nanobot")
