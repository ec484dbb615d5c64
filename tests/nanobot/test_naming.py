"""sessionkit.nanobot.naming: nanobot's file names for keys, their inverses, hostile keys."""

from __future__ import annotations

import unicodedata
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionkit.nanobot.naming import (
    UnsafeKeyError,
    check_name_length,
    check_plain_name,
    key_from_filename,
    safe_key,
    session_filename,
    storage_key,
    storage_key_of,
)

keys = st.one_of(
    st.text(),
    st.builds(
        lambda channel, chat: f"{channel}:{chat}",
        st.sampled_from(["telegram", "cli", "webui", "discord"]),
        st.text(alphabet=st.characters(codec="utf-8"), max_size=20),
    ),
    st.lists(
        st.sampled_from(["<", ">", ":", '"', "/", "\\", "|", "?", "*", " ", ".", "a", "日"])
    ).map("".join),
)


@pytest.mark.parametrize(
    ("key", "stem"),
    [
        ("telegram:123", "telegram_123"),
        ("cli:direct", "cli_direct"),
        ("a:b:c", "a_b_c"),
        ('x<>"/\\|?*y', "x________y"),
        ("  webui:日本  ", "webui_日本"),
        ("../x", ".._x"),
        ("/abs", "_abs"),
        ("a/b", "a_b"),
        ("..", ".."),
        ("", ""),
        (" \t\n", ""),
    ],
)
def test_safe_key(key: str, stem: str) -> None:
    assert safe_key(key) == stem


@pytest.mark.parametrize(
    ("key", "stem"),
    [
        ("telegram:123", "dGVsZWdyYW06MTIz"),
        ("webui:日本", "d2VidWk65pel5pys"),
        ("a:b/c", "YTpiL2M"),
        ("..", "Li4"),
        ("", ""),
    ],
)
def test_storage_key(key: str, stem: str) -> None:
    assert storage_key(key) == stem


@pytest.mark.parametrize(
    ("key", "naming", "name"),
    [
        ("telegram:123", "nanobot-0.2", "telegram_123.jsonl"),
        ("telegram:123", "nanobot-0.3", "dGVsZWdyYW06MTIz.jsonl"),
        ("a<b>|c?*", "nanobot-0.2", "a_b__c__.jsonl"),
        ("matrix:!room33_example.org", "nanobot-0.2", "matrix_!room33_example.org.jsonl"),
        ("webui:abc-def", "nanobot-0.2", "webui_abc-def.jsonl"),
        ("微信:用户一", "nanobot-0.2", "微信_用户一.jsonl"),
        (".hidden", "nanobot-0.3", "LmhpZGRlbg.jsonl"),
        ("   ", "nanobot-0.3", "ICAg.jsonl"),
        ("t:1\n", "nanobot-0.2", "t_1.jsonl"),
    ],
)
def test_session_filename(key: str, naming: Any, name: str) -> None:
    assert session_filename(key, naming) == name


@pytest.mark.parametrize(
    ("key", "naming", "message"),
    [
        ("", "nanobot-0.2", "does not map to a safe file name"),
        ("", "nanobot-0.3", "does not map to a safe file name"),
        ("   ", "nanobot-0.2", r"does not map to a safe file name \('': empty\)"),
        ("..", "nanobot-0.2", "is path-like: it is a '..' component"),
        ("..", "nanobot-0.3", "is path-like: it is a '..' component"),
        (" . ", "nanobot-0.2", r"\('\.': hidden\)"),
        (".hidden", "nanobot-0.2", r"\('\.hidden': hidden\)"),
        ("..:x", "nanobot-0.2", r"\('\.\._x': hidden\)"),
        ("../x", "nanobot-0.2", "is path-like: it contains a path separator"),
        ("../x", "nanobot-0.3", "is path-like: it contains a path separator"),
        ("/abs", "nanobot-0.2", "is path-like"),
        ("a\\b", "nanobot-0.3", "is path-like"),
        ("t:\ud800", "nanobot-0.2", "not valid Unicode"),
        ("t:a\tb", "nanobot-0.2", "control character"),
        ("a\x00b", "nanobot-0.2", "NUL byte"),
        ("a\x00b", "nanobot-0.3", "NUL byte"),
        (None, "nanobot-0.2", "must be a string, got NoneType"),
        (12, "nanobot-0.3", "must be a string, got int"),
        ("nul", "nanobot-0.2", "reserved device name on Windows"),
        ("NUL.txt", "nanobot-0.2", "reserved device name on Windows"),
        ("nul.txt", "nanobot-0.2", "reserved device name on Windows"),
        ("Con", "nanobot-0.2", "reserved device name on Windows"),
        ("prn.log.old", "nanobot-0.2", "reserved device name on Windows"),
        ("aux ", "nanobot-0.2", "reserved device name on Windows"),
        ("COM1", "nanobot-0.2", "reserved device name on Windows"),
        ("com9.x", "nanobot-0.2", "reserved device name on Windows"),
        ("lpt1", "nanobot-0.2", "reserved device name on Windows"),
        ("LPT9.jsonl", "nanobot-0.2", "reserved device name on Windows"),
    ],
)
def test_session_filename_refuses_hostile_keys(key: Any, naming: Any, message: str) -> None:
    with pytest.raises(UnsafeKeyError, match=message):
        session_filename(key, naming)


@pytest.mark.parametrize("key", ["aux:1", "com0", "com10", "nully", "lpt", "a.con", "xnul"])
def test_session_filename_takes_names_near_device_names(key: str) -> None:
    assert session_filename(key) == f"{safe_key(key)}.jsonl"


def test_check_plain_name_refuses_what_some_os_does_not_take() -> None:
    for name in ("a:b.jsonl", "a?.jsonl", "a.jsonl.", "a.jsonl ", "a\x01.jsonl", "..", "a|b"):
        with pytest.raises(UnsafeKeyError, match="not a plain file name"):
            check_plain_name("k", name)
    assert check_plain_name("k", "telegram_1.jsonl") == "telegram_1.jsonl"


def test_unsafe_key_error_is_a_value_error() -> None:
    assert issubclass(UnsafeKeyError, ValueError)


def test_session_filename_rejects_unknown_naming() -> None:
    with pytest.raises(ValueError, match="unknown naming 'nanobot-9'"):
        session_filename("telegram:1", "nanobot-9")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("telegram_123.jsonl", "telegram:123"),
        (Path("/ws/sessions/telegram_123.jsonl"), "telegram:123"),
        ("a_b_c.jsonl", "a:b_c"),
        ("cli.jsonl", "cli"),
        ("abcd.jsonl", "abcd"),
        ("dGVzdA.jsonl", "test"),
        ("aGVhcnRiZWF0.jsonl", "heartbeat"),
        ("heartbeat.jsonl", "heartbeat"),
        ("dGVsZWdyYW06MTIz.jsonl", "telegram:123"),
        ("/ws/sessions/d2VidWk65pel5pys.jsonl", "webui:日本"),
        ("YTpiL2M.jsonl", "a:b/c"),
        ("dGVsZWdyYW06MTIz=.jsonl", "dGVsZWdyYW06MTIz="),
        ("dGVsZWdyYW06MTIz_.jsonl", "dGVsZWdyYW06MTIz:"),
        ("YTpiCg.jsonl", "a:b\n"),
        ("YTpiCx.jsonl", "YTpiCx"),
        ("5pel5pys.jsonl", "日本"),
        ("legacy_key.json", "legacy:key"),
    ],
)
def test_key_from_filename(path: str | Path, key: str) -> None:
    assert key_from_filename(path) == key


@given(key=keys)
def test_safe_key_equals_nanobot(nanobot: ModuleType, key: str) -> None:
    assert safe_key(key) == nanobot.SessionManager.safe_key(key)


@given(key=keys)
def test_session_filename_stays_inside_the_folder(nanobot: ModuleType, key: str) -> None:
    for naming in ("nanobot-0.2", "nanobot-0.3"):
        try:
            name = session_filename(key, naming)
        except UnsafeKeyError:
            stem = safe_key(key) if naming == "nanobot-0.2" else storage_key(key)
            control = any(unicodedata.category(c) == "Cc" for c in key.strip())
            path_like = "/" in key or "\\" in key or key.strip() == ".."
            device = stem.split(".")[0].rstrip(" ").lower()
            reserved = device in {"con", "prn", "aux", "nul", "conin$", "conout$"} or (
                len(device) == 4 and device[:3] in {"com", "lpt"} and device[3] in "123456789¹²³"
            )
            assert control or path_like or stem.startswith(".") or not stem or reserved
            continue
        folder = Path("/ws/sessions")
        assert (folder / name).parent == folder
        assert name not in {".jsonl", "..jsonl"}
        if naming == "nanobot-0.2":
            assert name == f"{nanobot.SessionManager.safe_key(key)}.jsonl"


@given(key=keys)
def test_storage_names_round_trip(key: str) -> None:
    try:
        name = session_filename(key, "nanobot-0.3")
    except UnsafeKeyError:
        return
    assert key_from_filename(name) == storage_key_of(name[: -len(".jsonl")]) == key


@given(
    channel=st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=10),
    chat=st.text(alphabet="0123456789-", min_size=1, max_size=12),
)
def test_safe_names_round_trip(channel: str, chat: str) -> None:
    key = f"{channel}:{chat}"
    name = session_filename(key)
    found = key_from_filename(name)
    # A safe stem that is also the storage key of some key reads as that key.
    assert found == key or f"{storage_key(found)}.jsonl" == name


def test_check_name_length_walks_up_to_an_existing_folder(tmp_path: Path) -> None:
    check_name_length("k", "x" * 255, tmp_path / "not" / "yet")
    with pytest.raises(UnsafeKeyError, match="its file name is 256 bytes .* at most 255"):
        check_name_length("k", "x" * 256, tmp_path / "not" / "yet")
