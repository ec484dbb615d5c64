"""The registry of every nanobot-ai release since 0.1.4, and the README's table of it."""

from __future__ import annotations

import re
from pathlib import Path

from sessionkit.nanobot.policies import POLICIES, RELEASE_TABLE, get_policy

README = Path(__file__).resolve().parents[2] / "README.md"
PYPI_SINCE_014 = [
    "0.1.4",
    "0.1.4.post2",
    "0.1.4.post3",
    "0.1.4.post4",
    "0.1.4.post5",
    "0.1.4.post6",
    "0.1.5",
    "0.1.5.post1",
    "0.1.5.post2",
    "0.1.5.post3",
    "0.2.0",
    "0.2.1",
    "0.2.2",
    "0.3.0",
    "0.3.5",
]
"""``pip index versions nanobot-ai`` from 0.1.4 on (2026-11-30), oldest first."""


def test_every_release_since_014_resolves_by_its_version() -> None:
    assert list(RELEASE_TABLE) == PYPI_SINCE_014
    objects = {v: get_policy(f"nanobot-{v}") for v in RELEASE_TABLE}
    assert {v: o.name for v, o in objects.items()} == RELEASE_TABLE
    assert [v for v, o in objects.items() if o.version == v] == [
        "0.1.4", "0.1.4.post2", "0.1.4.post5", "0.1.4.post6", "0.1.5", "0.1.5.post2",
        "0.1.5.post3", "0.2.0", "0.2.1", "0.2.2", "0.3.0", "0.3.5",
    ]  # fmt: skip
    assert get_policy("nanobot-0.2.2") is POLICIES["nanobot-0.2"]


def test_an_alias_is_the_object_it_names() -> None:
    assert get_policy("nanobot-0.1.4.post3") is get_policy("nanobot-0.1.4.post2")
    assert get_policy("nanobot-0.1.4.post4") is get_policy("nanobot-0.1.4.post2")
    assert get_policy("nanobot-0.1.5.post1") is get_policy("nanobot-0.1.5")


def test_the_readme_lists_every_release_with_its_object() -> None:
    rows = re.findall(r"^\| (\d[\w.]*) \| `(nanobot-[\w.]+)` \|", README.read_text(), flags=re.M)
    assert dict(rows) == RELEASE_TABLE
    assert [version for version, _ in rows] == list(RELEASE_TABLE)


def test_older_releases_take_only_their_own_arguments() -> None:
    """0.1.4 to 0.1.5.post2 take ``max_messages`` alone (default 500: the whole file when 0);
    0.1.5.post3 to 0.2.1 take no ``extend_to_user``."""
    messages = [{"role": "user", "content": str(i)} for i in range(3)]
    assert get_policy("nanobot-0.1.4").get_history(messages, 2, 0) == messages
    assert get_policy("nanobot-0.1.4").get_history(messages, 2, -1) == messages[1:]
    assert get_policy("nanobot-0.1.4.post2").get_history(messages, 2) == messages[2:]
    assert get_policy("nanobot-0.2.1").history_kwargs(get_policy("nanobot-0.2.1").defaults) == {
        "max_messages": 120,
        "max_tokens": 0,
        "include_timestamps": True,
    }
    for name, keyword in [("nanobot-0.1.5", "max_tokens"), ("nanobot-0.2.0", "extend_to_user")]:
        try:
            get_policy(name).get_history(messages, 0, **{keyword: 1})
        except TypeError:
            continue
        raise AssertionError(f"{name} took {keyword}")
