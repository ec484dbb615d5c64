"""The one replay-and-count cache: shared by windows, states and testing, cleared at once."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import sessionkit
from sessionkit import Session
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.settings import HistorySettings
from sessionkit.nanobot.tokens import encoding
from sessionkit.simulate.replay import (
    UNREPLAYABLE,
    derived,
    replay,
    replay_all,
    replay_jobs,
    stored_tokens,
)
from sessionkit.simulate.replay_compute import Replay
from sessionkit.simulate.states import message_states
from sessionkit.simulate.windowing import windows
from sessionkit.store import memo
from sessionkit.store.counting import TokenCache, count_tokens, counts_through
from sessionkit.store.index import SessionChangedError
from sessionkit.testing import check_window_invariants
from sessionkit.tuning import TUNING

POLICY = get_policy("nanobot-0.2")
STAMPED = HistorySettings(include_timestamps=True)
PLAIN = HistorySettings(include_timestamps=False)


def user(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": "2026-01-01T10:00:00", **extra}


def assistant(text: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


@pytest.fixture
def session() -> Session:
    return Session("k", [user("/help", _command=True), assistant(""), user("q"), assistant("a")])


def test_a_replay_holds_the_entries_and_their_tokens(session: Session) -> None:
    for stamps in (False, True):
        replayed = replay(session, HistorySettings(include_timestamps=stamps))
        entries = [POLICY.replay_entry(m, stamps) for m in session.messages]
        assert replayed.kept.tolist() == [2, 3]
        assert replayed.sent().tolist() == [False, False, True, True]
        assert replayed.tokens.tolist() == count_tokens([e for e in entries if e is not None])
        assert replayed.sent_tokens().tolist() == [pd.NA, pd.NA, *replayed.tokens.tolist()]
        assert replayed.command.tolist() == [True, False, False, False]
    assert replay(session, STAMPED).tokens[0] > replay(session, PLAIN).tokens[0]


def test_replays_are_cached_until_the_session_changes() -> None:
    memo.clear()
    session = Session("k", [user("/help", _command=True), assistant(""), user("q"), assistant("a")])
    windows(session)
    windows(session, grid={"max_tokens": [10, 20]})
    assert memo.size("replays") == 1
    session.messages.append(user("more"))
    assert windows(session, at="end")["messages_kept"].item() == 3
    session.retain_recent_legal_suffix(1)
    assert windows(session, at="end")["messages_kept"].item() == 1
    windows(session, grid={"include_timestamps": [False, True]})
    assert memo.size("replays") == 2
    session.messages = [user()]
    assert replay(session, STAMPED).kept.tolist() == [0] and memo.size("replays") == 1
    del session
    assert memo.size("replays") == 0


def test_windows_states_and_testing_share_one_replay(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    memo.clear()
    first = replay(session, STAMPED)
    stored_tokens(session)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("replayed again despite a cached replay")

    monkeypatch.setattr(sessionkit.simulate.replay_compute, "compute", refuse)
    monkeypatch.setattr(sessionkit.simulate.replay_counts, "counts_through", refuse)
    monkeypatch.setattr(sessionkit.simulate.replay, "counts_through", refuse)
    windows(session, at="end")
    message_states(session)
    assert check_window_invariants(session).empty
    assert replay(session, STAMPED) is first and memo.size("replays") == 1


def test_memo_clear_forgets_replays_stored_counts_and_derived_values(session: Session) -> None:
    replayed = replay_all([session], STAMPED)
    stored = stored_tokens(session)
    assert derived(replayed, len) == 1
    memo.clear()
    assert memo.size("replays") == 0
    assert replay(session, STAMPED) is not replayed[0]
    assert stored_tokens(session) is not stored
    calls: list[int] = []
    derived(replayed, calls.append)
    assert calls == [replayed]


def test_stored_counts_are_read_only_and_follow_edits(session: Session) -> None:
    stored = stored_tokens(session)
    assert stored.tolist() == count_tokens(session.messages)
    with pytest.raises(ValueError, match="read-only"):
        stored[0] = 1
    session.messages.append(assistant("new " * 20))
    assert stored_tokens(session).tolist() == count_tokens(session.messages)


def test_derived_values_are_reused_for_the_same_replays(session: Session) -> None:
    memo.clear()
    replays = replay_all([session], STAMPED)
    calls: list[list] = []

    def build(values: list) -> int:
        calls.append(values)
        return len(calls)

    assert derived(replays, build) == 1
    assert derived(list(replays), build) == 1
    assert derived(replay_all([session], PLAIN), build) == 2


def test_workers_give_the_same_replays() -> None:
    sessions = [Session(f"t:{i}", [user(f"q{j} {i}") for j in range(i + 2)]) for i in range(6)]
    memo.clear()
    parallel = replay_all(sessions, STAMPED, workers=2, progress=False)
    memo.clear()
    serial = replay_all(sessions, STAMPED, workers=1, progress=False)
    for a, b in zip(parallel, serial, strict=True):
        names = (
            "is_user",
            "delivery",
            "command",
            "checkpoint",
            "declared",
            "kept",
            "entry_declared",
        )
        for name in names:
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        np.testing.assert_array_equal(a.tokens, b.tokens)


def test_a_long_session_replayed_in_ranges_by_workers_equals_one_replayed_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ranges of 2 messages: calls declared in one range and answered in later ones (or
    never, or twice), a line without a role, a command, a hidden checkpoint and stamped
    turns all give the replays, under every release, one process gives."""

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        user("q"),
        assistant("", tool_calls=[call]),
        user("/new", _command=True),
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"content": "no role"},
        {"role": "tool", "tool_call_id": "c1", "content": "again"},
        {"role": "tool", "tool_call_id": "c9", "content": "orphan"},
        user("summary", _hidden_history=True),
        assistant("[Message Time: 2026-01-01]\nb"),
        user("\nlast"),
        assistant("done"),
    ]
    session = Session("k", messages)
    jobs = [(name, settings) for name in RELEASES for settings in (PLAIN, STAMPED)]
    stored = np.array(count_tokens(messages, cache=False))
    memo.clear()
    whole = replay_jobs([session], jobs, workers=1, progress=False, cache=None, stored=[stored])
    memo.clear()
    monkeypatch.setattr(TUNING, "split_messages", 4)
    split = replay_jobs([session], jobs, workers=2, progress=False, cache=None, stored=[stored])
    for (a,), (b,) in zip(split, whole, strict=True):
        for name in (f.name for f in fields(Replay)):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert (whole[0][0].declared == UNREPLAYABLE).sum() == 1
    assert whole[0][0].declared[[3, 5, 6]].tolist() == [1, 1, -1]


def test_a_long_indexed_session_is_read_by_each_worker_up_to_its_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long session not read yet: each worker reads the file in 4 KB batches up to the
    end of its range and replays that range; the replays equal one process's, the session
    stays unread, and a file changed since the load fails as reading it would."""
    import sessionkit.nanobot.reader as reader_module
    import sessionkit.simulate.replay_workers as replay_workers
    import sessionkit.store.index

    folder = tmp_path / "sessions"
    folder.mkdir()
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    turn = [
        user("q " * 40),
        assistant("", tool_calls=[call]),
        {"role": "tool", "tool_call_id": "c1", "content": "r " * 30},
        assistant("[Message Time: 2026-01-01]\nb"),
    ]
    lines = [{"_type": "metadata", "key": "t:0"}, *turn * 60, user("/new", _command=True)]
    (folder / "t_0.jsonl").write_text("".join(f"{json.dumps(x)}\n" for x in lines))
    monkeypatch.setattr(TUNING, "racy_ns", 0)
    monkeypatch.setattr(reader_module, "_CHUNK_BYTES", 4096)
    jobs = [(name, STAMPED) for name in RELEASES]

    def unread(cache: str) -> Any:
        """The session as a new process's second load gives it (an index of its own)."""
        memo.clear()
        monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / cache))
        sessionkit.load(folder)
        (session,) = list(sessionkit.load(folder))
        assert session.streamable
        return session

    whole = replay_jobs([unread("one")], jobs, workers=1, progress=False, cache=None)
    monkeypatch.setattr(TUNING, "split_messages", 4)
    session = unread("two")
    split = replay_jobs([session], jobs, workers=2, progress=False, cache=None)
    assert session.streamable
    for (a,), (b,) in zip(split, whole, strict=True):
        for name in (f.name for f in fields(Replay)):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert replay_workers._streamed_bounds(241, 2, 3) == [0, 138, 241]
    session = unread("three")
    with (folder / "t_0.jsonl").open("a") as file:
        file.write(json.dumps(user("more")) + "\n")
    with pytest.raises(SessionChangedError):
        replay_jobs([session], jobs, workers=2, progress=False, cache=None)


@pytest.mark.parametrize("workers", [1, 2])
def test_replayed_again_reads_token_counts_from_the_cache(
    monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    sessions = [
        Session(key=f"t:{i}", messages=[{"role": "user", "content": f"hello {i}"}] * 3)
        for i in range(3)
    ]
    cache = TokenCache()
    first = windows(sessions, cache=cache, workers=1)
    memo.clear()

    def refuse(payloads: list[str]) -> list[int]:
        raise AssertionError("tokenized again despite a warm token cache")

    monkeypatch.setattr(sessionkit.store.counting, "_encode_lengths", refuse)
    pd.testing.assert_frame_equal(windows(sessions, cache=cache, workers=workers), first)


def test_replays_are_cached_per_release_and_the_settings_its_entries_read() -> None:
    memo.clear()
    session = Session("k", [user("say <|endoftext|> now"), assistant("a")])
    own = replay(session, STAMPED)
    release = get_policy("nanobot-0.3.0")
    plain_030 = replay(session, HistorySettings(include_runtime_context=False), policy=release.name)
    assert memo.size("replays") == 2
    # 0.3.0's entries ignore include_timestamps: the same cached replay.
    same = HistorySettings(include_timestamps=False, include_runtime_context=False)
    assert replay(session, same, policy=release.name) is plain_030
    assert own.tokens.tolist() == [
        len("[Message Time: 2026-01-01T10:00:00]\nsay <|endoftext|> now") // 4 + 4,
        5,
    ]
    assert plain_030.tokens.tolist() == [len(b"say <|endoftext|> now") + 4, 5]
    assert stored_tokens(session).tolist() == [21 // 4 + 4, 5]
    assert stored_tokens(session, release.name).tolist() == [
        release.estimate_message_tokens(m) for m in session.messages
    ]


RELEASES = ["nanobot-0.2", "nanobot-0.3.0", "nanobot-0.3.5"]


@pytest.mark.parametrize("workers", [1, 2])
def test_replays_for_several_releases_parse_each_indexed_session_once(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """One pass computes every release's replay of a session read back from the index: its
    file is parsed once (in the process computing it: a forked worker's parse dies with it,
    so a pass per release parsed it once per release), and each replay equals that
    release's replay computed alone."""
    import os

    import sessionkit.store.index

    folder = tmp_path / "sessions"
    folder.mkdir()
    for i in range(4):
        lines = [{"_type": "metadata", "key": f"t:{i}"}]
        lines += [user(f"q{j} {i}") if j % 2 == 0 else assistant(f"a{j}") for j in range(6 + i)]
        (folder / f"t_{i}.jsonl").write_text("".join(f"{json.dumps(x)}\n" for x in lines))
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(TUNING, "racy_ns", 0)  # index files just written
    sessionkit.load(folder)
    sessions = list(sessionkit.load(folder))
    assert all(s.identity is not None and s._messages is None for s in sessions)
    log = tmp_path / "parsed.log"  # appended to by forked workers too
    real = sessionkit.store.index.read_session_file

    def counted(path: Any, *sink: Any) -> Any:  # a worker streams the file to a sink
        with log.open("a") as f:
            f.write(os.fspath(path) + "\n")
        return real(path, *sink)

    monkeypatch.setattr(sessionkit.store.index, "read_session_file", counted)
    memo.clear()
    jobs = [(name, STAMPED) for name in RELEASES]
    together = replay_jobs(sessions, jobs, workers=workers, progress=False, cache=None)
    assert sorted(log.read_text().split()) == sorted(os.fspath(s.path) for s in sessions)
    alone = []
    for name in RELEASES:
        memo.clear()
        fresh = [Session(s.key, list(s.messages), policy=s.policy) for s in sessions]
        alone.append(replay_all(fresh, STAMPED, policy=name, workers=1, progress=False))
    for found, expected in zip(together, alone, strict=True):
        for a, b in zip(found, expected, strict=True):
            for name in ("is_user", "command", "turn", "declared", "kept", "tokens"):
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_entries_equal_to_their_message_take_its_stored_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An entry holding its message's own fields takes the message's stored (0.2.2) count
    where that count is for the same rule: 0.2.2 always, 0.3.x for a plain message (no
    ``<|``, a ``<`` alone is plain); an entry counted for one release is reused by the next
    with the same rule."""
    import sessionkit.simulate.replay_counts as replay_counts

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": "<|b>"}'}}
    messages = [
        user("q"),
        assistant("a <|endoftext|>"),
        assistant("[Message Time: 2026-01-01]\nb"),
        assistant("c", tool_calls=[call]),
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "tool", "tool_call_id": "c1", "content": "<b>x</b> <", "name": "f<"},
    ]
    session = Session("k", messages)
    batches: list[tuple[str, list[Any]]] = []

    def spy(batch: list[dict[str, Any]], cache: Any, **kwargs: Any) -> list[int]:
        batches.append((kwargs["policy"], [e["content"] for e in batch]))
        return counts_through(batch, cache, **kwargs)

    monkeypatch.setattr(replay_counts, "counts_through", spy)
    memo.clear()
    stored = np.array([101, 102, 103, 104, 105, 106])
    jobs = [(name, PLAIN) for name in RELEASES]
    found = replay_jobs([session], jobs, workers=1, progress=False, cache=None, stored=[stored])

    def counted(name: str, i: int) -> int:
        entry = get_policy(name).entry_function(PLAIN)(messages[i])
        return count_tokens([entry], policy=name, cache=False)[0]

    b = counted("nanobot-0.2", 2)
    assert [r[0].tokens.tolist() for r in found] == [
        [101, 102, b, 104, 105, 106],
        [101, counted("nanobot-0.3.0", 1), b, counted("nanobot-0.3.0", 3), 105, 106],
        [101, counted("nanobot-0.3.5", 1), b, counted("nanobot-0.3.5", 3), 105, 106],
    ]
    assert batches[:3] == [
        ("nanobot-0.2", ["b"]),
        ("nanobot-0.3.0", ["a <|endoftext|>", "c"]),
        ("nanobot-0.3.5", ["a <|endoftext|>", "c"]),
    ]


def test_a_stamped_entry_counts_its_stamp_line_plus_its_messages_stored_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """0.2.2's ``[Message Time: …]`` line before a user message's own plain text costs the
    line's tokens plus the message's stored count; an entry is counted whole where the
    pre-tokenizer joins the line to the text (text starting with a newline), where the line
    or the text holds ``<|``, or where the text changed too; an entry holding its message's
    own content list takes the stored count.  Every count equals counting the entry."""
    import sessionkit.simulate.replay_counts as replay_counts

    messages = [
        user("q"),
        user("\nq"),
        user("\rq"),
        user("say <|endoftext|>"),
        user("q", timestamp="<|endoftext|>"),
        user("q", media=["/m.png"]),
        user([{"type": "text", "text": "q"}]),
        user("it's <b>"),
    ]
    session = Session("k", messages)
    counted: list[Any] = []

    def spy(batch: list[dict[str, Any]], cache: Any, **kwargs: Any) -> list[int]:
        counted.extend(e["content"] for e in batch)
        return counts_through(batch, cache, **kwargs)

    monkeypatch.setattr(replay_counts, "counts_through", spy)
    memo.clear()
    stored = np.array(count_tokens(messages, cache=False))
    (found,) = replay_jobs(
        [session], [(POLICY.name, STAMPED)], workers=1, progress=False, cache=None, stored=[stored]
    )
    entries = [POLICY.replay_entry(m, include_timestamps=True) for m in messages]
    assert found[0].tokens.tolist() == count_tokens(entries, cache=False)
    stamp = "[Message Time: 2026-01-01T10:00:00]\n"
    assert found[0].tokens[0] == len(encoding().encode_ordinary(stamp)) + stored[0]
    assert counted == [entries[i]["content"] for i in (1, 2, 3, 4, 5)]


def test_a_grid_on_a_loaded_store_reuses_its_counts_and_equals_one_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counts a load keeps (stored_counts) are its messages' 0.2.2 counts, and windows
    of the loaded Corpus, whose replays reuse them, equals windows of its sessions held in
    memory (every entry counted)."""
    import sessionkit.store.index

    folder = tmp_path / "sessions"
    folder.mkdir()
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    lines = [
        {"_type": "metadata", "key": "t:0"},
        user("q <|x|>"),
        assistant("[Message Time: 2026-01-01]\nb", tool_calls=[call]),
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "r"}]},
        user("/new", _command=True),
        assistant(""),
        user("again"),
    ]
    (folder / "t_0.jsonl").write_text("".join(f"{json.dumps(x)}\n" for x in lines))
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(TUNING, "racy_ns", 0)  # index files just written
    sessionkit.load(folder)
    corpus = sessionkit.load(folder)
    (loaded,) = list(corpus)
    counts = sessionkit.simulate.replay.stored_counts(corpus.entries)
    assert counts[id(loaded)].tolist() == count_tokens(loaded.messages, cache=False)
    memo.clear()
    grid = {"policy": RELEASES, "max_tokens": [0, 8], "include_timestamps": [False, True]}
    from_store = windows(corpus, grid=grid)
    memo.clear()
    in_memory = windows([Session(loaded.key, list(loaded.messages))], grid=grid)
    pd.testing.assert_frame_equal(from_store, in_memory)


def test_the_progress_bar_names_the_releases_in_words(capsys: pytest.CaptureFixture[str]) -> None:
    memo.clear()
    session = Session("k", [user("q"), assistant("a")] * 3)
    windows(session, grid={"policy": ["nanobot-0.2", "nanobot-0.3.5"]}, progress=True)
    bar = capsys.readouterr().err
    assert "replaying sessions (nanobot 0.2.2, nanobot 0.3.5)" in bar
