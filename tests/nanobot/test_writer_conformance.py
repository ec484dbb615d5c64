"""The writer and forks against nanobot-ai 0.2.2's own SessionManager.

* ``save_session`` writes the bytes nanobot's ``SessionManager.save`` writes, under the same name.
* ``fork`` written to disk and nanobot's ``fork_session_before_user_index`` written by nanobot
  hold the same message lines, metadata and offset, and nanobot loads sessionkit's fork without
  its repair pass.  Generated sessions are checked at every user index, both ends and one
  past each end included; the sample store at its ends, around its consolidated offset and at
  evenly spaced indices between (every index of its largest sessions takes minutes).
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from support.reference import require

from sessionkit.nanobot.naming import UnsafeKeyError, session_filename
from sessionkit.nanobot.policies import FORK_VOLATILE_METADATA_KEYS as VOLATILE_METADATA_KEYS
from sessionkit.nanobot.reader import read_session_file
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.writer import save_session
from sessionkit.writers.forking import ForkIndexError, fork

nb = require()

pytestmark = pytest.mark.conformance

DATA = Path(__file__).resolve().parents[2] / "data" / "sessions"
SAMPLE_INDICES = 24


def nanobot(workspace: Path) -> Any:
    """A fresh nanobot SessionManager on ``workspace`` whose repair pass must never run."""
    manager = nb.SessionManager(workspace)
    manager.legacy_sessions_dir = workspace / "no-legacy"

    def no_repair(key: str) -> None:
        raise AssertionError(f"nanobot had to repair {key!r}")

    manager._repair = no_repair
    return manager


def as_nanobot(session: Session) -> Any:
    return nb.Session(
        key=session.key,
        messages=session.messages,
        created_at=session.created_at,
        updated_at=session.updated_at,
        metadata=session.metadata,
        last_consolidated=session.last_consolidated,
    )


def without_times(data: bytes) -> tuple[dict[str, Any], list[bytes]]:
    """A file's metadata record minus key and times, and its other lines as bytes."""
    head, *rest = data.splitlines()
    meta = json.loads(head)
    for field in ("key", "created_at", "updated_at"):
        meta.pop(field)
    return meta, rest


# --- strategies (small, fork-shaped; tests/strategies.py covers the replay policy) ---------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "user", "assistant", "tool", "system"])},
    optional={
        "content": st.one_of(st.text(max_size=20), st.none(), st.lists(values, max_size=2)),
        "timestamp": st.sampled_from(["2025-05-01T10:00:00", "2025-05-01T10:00:00.250000", ""]),
        "media": st.lists(st.text(max_size=6), max_size=2),
        "_command": st.booleans(),
        "tool_calls": st.lists(st.fixed_dictionaries({"id": st.text(max_size=4)}), max_size=2),
        "extra ✓": values,
    },
)
metadata = st.dictionaries(
    st.sampled_from(sorted(VOLATILE_METADATA_KEYS) + ["_last_summary", "keep", "sessionkit_fork"]),
    values,
    max_size=5,
)
times = st.one_of(
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),
    st.datetimes(timezones=st.just(timezone(timedelta(hours=5, minutes=30)))),
)


@st.composite
def sessions(draw: st.DrawFn, key: st.SearchStrategy[str] | None = None) -> Session:
    messages = draw(st.lists(message, max_size=12))
    return Session(
        key="telegram:42" if key is None else draw(key),
        messages=messages,
        created_at=draw(times),
        updated_at=draw(times),
        metadata=draw(metadata),
        last_consolidated=draw(st.integers(0, len(messages) + 1)),
    )


def nameable(key: str) -> bool:
    try:
        session_filename(key)
    except UnsafeKeyError:
        return False
    return True


keys = st.one_of(
    st.sampled_from(["cli:direct", "webui:a/b", 'x:<>"|?*', " pad: ", "e:ü@x.com", "a:b:c"]),
    st.text(max_size=12),
)


# --- the writer ----------------------------------------------------------------------------


@given(session=sessions(key=keys.filter(nameable)), nan=st.booleans())
def test_save_writes_nanobots_bytes_and_name(session, nan, tmp_path_factory):
    if nan:
        session.messages.append({"role": "tool", "content": float("nan"), "n": 10**30})
    base = tmp_path_factory.mktemp("save")
    manager = nanobot(base / "nanobot")
    manager.save(as_nanobot(session))
    theirs = manager._get_session_path(session.key)
    ours = save_session(session, base / "sessionkit", create=True)
    assert ours.name == theirs.name
    assert ours.read_bytes() == theirs.read_bytes()


def nanobot_written_samples() -> list[Path]:
    return sorted(
        p for p in DATA.glob("*.jsonl") if read_session_file(p)[0].format == "nanobot-0.2"
    )


@pytest.mark.parametrize("file", nanobot_written_samples(), ids=lambda p: p.name)
def test_sample_round_trip_is_nanobots_save(file, tmp_path):
    session, problems = read_session_file(file)
    assert not problems
    (tmp_path / "sessions").mkdir()
    shutil.copyfile(file, tmp_path / "sessions" / file.name)
    writer = nanobot(tmp_path / "nanobot")
    writer.save(nanobot(tmp_path)._load(session.key))
    theirs = writer._get_session_path(session.key).read_bytes()
    ours = save_session(session, tmp_path / "sessionkit", create=True).read_bytes()
    if session.created_at is None:
        assert without_times(ours) == without_times(theirs)
    else:
        assert ours == theirs == file.read_bytes()


# --- forks ---------------------------------------------------------------------------------


def assert_fork_matches(workspace: Path, manager: Any, source: Session, index: int) -> None:
    """Fork ``source`` at ``index`` with both tools in ``workspace`` and compare the results."""
    theirs = manager.fork_session_before_user_index(source.key, f"nb:{index}", index)
    if not 0 <= index <= source.n_user_turns:
        assert theirs is None
        with pytest.raises(ForkIndexError):
            fork(source, f"sk:{index}", index, sessions_dir=workspace)
        assert not list((workspace / "sessions").glob(f"*_{index}.jsonl"))
        return
    ours = fork(source, f"sk:{index}", index, sessions_dir=workspace)
    assert ours.messages == theirs.messages
    assert ours.metadata == theirs.metadata
    assert ours.last_consolidated == theirs.last_consolidated

    fresh = nanobot(workspace)
    reloaded_theirs = fresh._load(f"nb:{index}")
    reloaded_ours = fresh._load(f"sk:{index}")
    assert reloaded_ours.messages == reloaded_theirs.messages == theirs.messages
    assert reloaded_ours.metadata == reloaded_theirs.metadata
    assert reloaded_ours.last_consolidated == reloaded_theirs.last_consolidated
    assert reloaded_ours.created_at == ours.created_at
    assert without_times(ours.path.read_bytes()) == without_times(
        fresh._get_session_path(f"nb:{index}").read_bytes()
    )


def source_workspace(workspace: Path, session: Session) -> tuple[Session, Any]:
    """Write ``session`` with nanobot, read it back with sessionkit, cache it in nanobot."""
    manager = nanobot(workspace)
    manager.save(as_nanobot(session))
    loaded, problems = read_session_file(manager._get_session_path(session.key))
    assert not problems
    manager.get_or_create(session.key)
    return loaded, manager


@given(session=sessions())
def test_fork_at_every_index_matches_nanobot(session, tmp_path_factory):
    workspace = tmp_path_factory.mktemp("fork")
    source, manager = source_workspace(workspace, session)
    for index in range(-1, source.n_user_turns + 2):
        assert_fork_matches(workspace, manager, source, index)


def sample_indices(session: Session) -> list[int]:
    """Both ends, one past each, both sides of the consolidated offset, evenly spaced others."""
    n = session.n_user_turns
    if n <= SAMPLE_INDICES:
        return list(range(-1, n + 2))
    cuts = [i for i, m in enumerate(session.messages) if m.get("role") == "user"]
    below = sum(1 for c in cuts if c < session.last_consolidated)
    spaced = {round(k * n / (SAMPLE_INDICES - 1)) for k in range(SAMPLE_INDICES)}
    return sorted({-1, 0, 1, n - 1, n, n + 1, max(below - 1, 0), below, min(below + 1, n)} | spaced)


@pytest.mark.parametrize("file", nanobot_written_samples(), ids=lambda p: p.name)
def test_fork_of_samples_matches_nanobot(file, tmp_path):
    (tmp_path / "sessions").mkdir()
    shutil.copyfile(file, tmp_path / "sessions" / file.name)
    source, problems = read_session_file(tmp_path / "sessions" / file.name)
    assert not problems
    manager = nanobot(tmp_path)
    manager.get_or_create(source.key)
    for index in sample_indices(source):
        assert_fork_matches(tmp_path, manager, source, index)


@given(session=sessions(), data=st.data())
def test_edited_fork_is_nanobots_fork_plus_the_new_question(session, data, tmp_path_factory):
    workspace = tmp_path_factory.mktemp("edit")
    source, manager = source_workspace(workspace, session)
    assume(source.n_user_turns > 0)
    index = data.draw(st.integers(0, source.n_user_turns - 1))
    text = data.draw(st.text(max_size=20))
    theirs = manager.fork_session_before_user_index(source.key, "nb:x", index)
    ours = fork(source, "sk:x", index, edit=text, sessions_dir=workspace)
    original = [m for m in source.messages if m.get("role") == "user"][index]
    expected = {**original, "content": text, "timestamp": ours.created_at.isoformat()}
    assert ours.messages == [*theirs.messages, expected]
    assert (ours.metadata, ours.last_consolidated) == (theirs.metadata, theirs.last_consolidated)
    assert nanobot(workspace)._load("sk:x").messages == ours.messages
