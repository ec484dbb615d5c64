"""Differential: a file whose metadata names no key is keyed as each release keys it.

0.3.0 and 0.3.5 read a base64url stem as the key it encodes, ``:`` or not (0.3.0 renames a
pre-key ``heartbeat.jsonl`` to ``aGVhcnRiZWF0.jsonl`` and lists it as ``heartbeat``); any
other name is a 0.2 name, keyed as 0.2.2 keys it.  The release is chosen accordingly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.releases import release
from support.sampling import examples

from sessionkit.nanobot.naming import key_from_filename, safe_key, storage_key, storage_key_of
from sessionkit.nanobot.reader import read_session_file

pytestmark = pytest.mark.conformance

PRE_KEY = (
    json.dumps(
        {
            "_type": "metadata",
            "created_at": "2026-03-02T08:00:00",
            "updated_at": "2026-03-02T08:30:00",
            "metadata": {},
            "last_consolidated": 0,
        }
    )
    + "\n"
    + json.dumps({"role": "user", "content": "Read HEARTBEAT.md and follow it."})
    + "\n"
    + json.dumps({"role": "assistant", "content": "HEARTBEAT_OK"})
    + "\n"
)
"""A heartbeat session as releases before the key field wrote it: metadata without ``key``."""

KEYS = ["heartbeat", "cron:daily", "cli:direct", "webui:日本", "a b", "x\ny", "email:a@b.c", "𝔘"]
STEMS = [
    "heartbeat",
    "cli",
    "abcd",
    "cron_job1",
    "dGVzdA",
    "YTpiCx",
    "YTpiCg",
    "telegram_123",
    "a+b",
    "c2xhY2s6QzQy==",
    "8J-ZgA",
    "_-_-",
]


def _names() -> list[str]:
    """File names of every kind: 0.3 names of keys with and without ``:``, their 0.2 names,
    and stems that decode loosely, not at all, or to text that is not that name's key."""
    stems = [*STEMS, *map(storage_key, KEYS), *(safe_key(k) for k in KEYS if safe_key(k))]
    return sorted({f"{stem}.jsonl" for stem in stems})


def _keys(version: str, names: list[str]) -> dict[str, str]:
    (listed,) = release(version).run("release_scenarios:listed_keys", [{"args": [names, PRE_KEY]}])
    assert "returned" in listed, listed
    return listed["returned"]


def _stem(name: str) -> str:
    return name[: -len(".jsonl")]


def test_a_pre_key_file_is_keyed_as_each_release_keys_it() -> None:
    names = _names()
    ours = {name: key_from_filename(name) for name in names}
    v035 = _keys("0.3.5", names)
    # 0.3.5 lists exactly the files whose name is a key's storage key, under that key
    assert v035 == {n: k for n in names if (k := storage_key_of(_stem(n))) is not None}
    assert {n: ours[n] for n in v035} == v035
    v030 = _keys("0.3.0", names)
    assert {n: v030[n] for n in v035} == v035  # 0.3.0 lists those under the same keys
    v022 = _keys("0.2.2", names)
    legacy = [n for n in names if n not in v035]
    assert legacy
    assert {n: ours[n] for n in legacy} == {n: v022[n] for n in legacy}
    assert v035["aGVhcnRiZWF0.jsonl"] == ours["aGVhcnRiZWF0.jsonl"] == "heartbeat"


@pytest.mark.parametrize(
    ("folder", "policy"),
    [("workspace/sessions", "nanobot-0.3.0"), ("config/sessions/" + "ab" * 16, "nanobot-0.3.5")],
)
def test_a_renamed_pre_key_file_replays_with_the_release_that_named_it(
    tmp_path: Path, folder: str, policy: str
) -> None:
    where = tmp_path / folder
    where.mkdir(parents=True)
    for stem in ("aGVhcnRiZWF0", "heartbeat"):
        (where / f"{stem}.jsonl").write_text(PRE_KEY, encoding="utf-8")
    renamed, _ = read_session_file(where / "aGVhcnRiZWF0.jsonl")
    legacy, _ = read_session_file(where / "heartbeat.jsonl")
    assert renamed is not None and legacy is not None
    assert (renamed.key, renamed.format, renamed.policy) == ("heartbeat", "nanobot-0.3", policy)
    legacy_policy = "nanobot-0.2" if policy == "nanobot-0.3.0" else policy
    assert (legacy.key, legacy.format, legacy.policy) == ("heartbeat", "nanobot-0.2", legacy_policy)


@pytest.mark.sampled
@settings(max_examples=examples(100, 10), deadline=None)
@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=8))
def test_generated_names_key_as_0_3_5_keys_them(keys: list[str]) -> None:
    """Names of generated keys (0.3 and 0.2 forms): sessionkit reads a 0.3 name exactly when
    0.3.5 lists it, under the same key."""
    names = {
        name
        for key in keys
        for stem in (storage_key(key), safe_key(key))
        if _plain_file_name(name := f"{stem}.jsonl")
    }
    listed = _keys("0.3.5", sorted(names))
    assert listed == {n: k for n in names if (k := storage_key_of(_stem(n))) is not None}


def _plain_file_name(name: str) -> bool:
    """Whether ``name`` can be written as it is: not hidden, no separator or NUL, UTF-8, short."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return (
        name != ".jsonl"
        and not name.startswith(".")
        and "/" not in name
        and "\x00" not in name
        and size < 200
    )
