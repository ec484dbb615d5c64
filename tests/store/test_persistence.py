"""The one persistence switch: with it off, a whole tour writes nothing of sessionkit's
anywhere (the cache folder and HOME unchanged but for matplotlib's own font cache)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sessionkit.store.cachedir import persistence_on

REPO = Path(__file__).resolve().parents[2]

TOUR = r"""
import sys, warnings
warnings.simplefilter("ignore")
import sessionkit as sk
off = sys.argv[1] == "argument"
cache = False if off else None
corpus = sk.load({data!r}, cache=cache)
corpus.sessions, corpus.messages, corpus.problems
session = corpus["webui:f00d42"]
sk.windows(corpus, grid={{"max_tokens": [0, 4000]}})
calls = sk.requests(session, grid={{"max_messages": [20, 120]}})
sk.cost(calls, model="gpt-4o", provider="openai")
sk.message_states(session, turn=3)
sk.file_cap(corpus, grid={{"file_cap": [50]}})
sk.count_tokens(session.messages, cache=cache, workers=1)
sk.count_tokens([{{"role": "user", "content": "a new text"}}], cache=cache)
explorer = sk.explore(corpus, key="webui:f00d42")
explorer.max_tokens.value = 2000
print("toured")
"""


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


@pytest.mark.parametrize("how", ["environment", "argument"])
def test_a_tour_with_persistence_off_writes_nothing(tmp_path: Path, how: str) -> None:
    home, cache = tmp_path / "home", tmp_path / "cache"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "MPL"))}
    env |= {"HOME": str(home), "SESSIONKIT_CACHE_DIR": str(cache)}
    if how == "environment":
        env["SESSIONKIT_CACHE"] = "off"
    else:
        env.pop("SESSIONKIT_CACHE", None)
    script = TOUR.format(data=str(REPO / "data" / "sessions"))
    done = subprocess.run(
        [sys.executable, "-c", script, how],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "toured"
    assert not cache.exists()
    matplotlib = (".cache/matplotlib", ".config/matplotlib")
    assert {f for f in _files(home) if not f.startswith(matplotlib)} <= {".cache", ".config"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]  # nothing in the cwd


@pytest.mark.conformance
def test_the_same_tour_with_persistence_on_keeps_its_index(tmp_path: Path) -> None:
    """The check above can fail: the tour with persistence on writes the cache folder."""
    home, cache = tmp_path / "home", tmp_path / "cache"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "MPL"))}
    env |= {"HOME": str(home), "SESSIONKIT_CACHE_DIR": str(cache)}
    env.pop("SESSIONKIT_CACHE", None)
    script = TOUR.format(data=str(REPO / "data" / "sessions"))
    done = subprocess.run(
        [sys.executable, "-c", script, "on"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert any(f.startswith("index-") for f in _files(cache))
    assert any(f.startswith("tokens-") for f in _files(cache))
    assert any(f.startswith("kits-") for f in _files(cache))  # requests probed the release


@pytest.mark.parametrize(
    ("value", "cache", "on"),
    [
        (None, None, True),
        (None, False, False),
        (None, True, True),
        ("off", None, False),
        ("OFF", True, False),
        ("0", "/some/folder", False),
        ("false", None, False),
        ("on", None, True),
    ],
)
def test_persistence_on(
    monkeypatch: pytest.MonkeyPatch, value: str | None, cache: object, on: bool
) -> None:
    if value is None:
        monkeypatch.delenv("SESSIONKIT_CACHE", raising=False)
    else:
        monkeypatch.setenv("SESSIONKIT_CACHE", value)
    assert persistence_on(cache) is on
