"""sk.requests: each row's parts equal the parts of sk.request's call, counted message by
message as windows count; the prefix a call shares with the session's previous call; block
rounding; settings grids; the per-session cache; and a store without an installed release."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import sessionkit as sk
from sessionkit.calls.assembly import count_text, kit_of, turn_calls
from sessionkit.calls.installs import ReleaseNotInstalled
from sessionkit.store import memo

RELEASE = sk.get_policy("nanobot-0.2")
KEYS = ("telegram:12345", "telegram:777", "cli:direct")  # two channels: two kits to ask for


def _tokens(messages: list[dict[str, Any]]) -> int:
    """0.2.2's per-message estimates, summed (how windows counts a history)."""
    return sum(RELEASE.estimate_message_tokens(m) for m in messages)


@pytest.fixture(scope="module")
def corpus(data_dir: Path) -> sk.Corpus:
    return sk.load(data_dir / "sessions")


@pytest.fixture(scope="module")
def sessions(corpus: sk.Corpus) -> list[sk.Session]:
    """Three bundled nanobot 0.2.2 sessions (their workspace is data/)."""
    return [corpus[key] for key in KEYS]


@pytest.fixture(scope="module")
def frame(sessions: list[sk.Session]) -> pd.DataFrame:
    return sk.requests(sessions)


@pytest.fixture(scope="module")
def no_nanobot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interpreter of an empty venv: no nanobot release in it."""
    folder = tmp_path_factory.mktemp("empty") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    return folder / "bin" / "python"


def _split(request: sk.Request) -> tuple[list[Any], dict[str, Any], list[Any]]:
    """(history, current, steps) of a 0.2.2 request as its loop sent them, after the loop's
    clean-up: the current message is the last user message (steps hold none)."""
    loop = request.loop_messages
    at = max(i for i, m in enumerate(loop) if m["role"] == "user")
    return loop[1:at], loop[at], loop[at + 1 :]


def _archived(request: sk.Request) -> int:
    parts = request.parts.set_index("part")["tokens"]
    return int(parts.get("system: archived summary", 0))


def test_each_part_is_the_requests_part(corpus: sk.Corpus, frame: pd.DataFrame) -> None:
    """For calls across turns and steps: system prompt, archived summary and tools as the
    kit and sk.request hold them; the history, current message and steps of sk.request's
    call as its loop sent them (0.2.2's clean-up applied: results bounded, older long ones
    compacted), each message counted alone; the total within a few tokens per message of
    the release's own estimate (its counts join texts)."""
    sample = pd.concat([frame.iloc[::97], frame[frame["step"] >= 2].iloc[::9]])
    assert len(sample) > 40 and sample["step"].max() >= 3
    stand_ins = cleaned = 0
    for row in sample.itertuples():
        session = corpus[row.session_key]
        kit, _ = kit_of(RELEASE, session, None, None, None, None)
        try:
            calls = turn_calls(session, row.turn, kit)
        except ValueError:  # a stored form 0.2.2 never sends: the stored message stands in
            stored = [m for m in session.messages if RELEASE.is_user_turn(m)][row.turn]
            assert row.inferred and row.current_tokens == _tokens([stored])
            stand_ins += 1
            continue
        request = sk.request(session, turn=row.turn, step=row.step)
        history, current, steps = _split(request)
        parts = request.parts.set_index("part")["tokens"]
        assert row.system_tokens == count_text(kit.system_text) > 0
        assert row.summary_tokens == _archived(request)
        assert row.tools_tokens == parts["tools"] > 0
        assert row.history_tokens == _tokens(history)
        assert row.history_messages == len(history) == len(calls.history)
        assert row.current_tokens == parts["current"] == _tokens([current])
        assert row.steps_tokens == _tokens(steps)
        assert row.total_tokens == (
            row.system_tokens
            + row.summary_tokens
            + row.tools_tokens
            + row.history_tokens
            + row.current_tokens
            + row.steps_tokens
        )
        assert abs(row.total_tokens - request.tokens) <= 2 * len(request.loop_messages)
        cleaned += row.history_tokens < _tokens(calls.history)
        system = request.parts[request.parts["part"].str.startswith("system")]
        assert row.inferred == system["inferred"].any()
    assert stand_ins < len(sample) // 4
    assert cleaned > len(sample) // 4  # long tool results compacted in most long histories
    assert (sample["summary_tokens"] > 0).any()  # telegram:12345 holds a _last_summary


def test_a_long_session_counts_what_0_2_2_sends(corpus: sk.Corpus) -> None:
    """cli:direct turn 138: the replayed history holds 14,896 tokens, but 0.2.2 compacts the
    older long tool results before each call: the frame counts the 8,680 it sends, and its
    total is the release's own estimate of that request within the joins (the total itself
    depends on the checkout's path, which the system prompt names: 18,268 in /work/main)."""
    session = corpus["cli:direct"]
    rows = sk.requests(session)
    row = rows[(rows["turn"] == 138) & (rows["step"] == 2)].iloc[0]
    windows = sk.windows(session).set_index("turn")
    request = sk.request(session, turn=138, step=2)
    history, _, steps = _split(request)
    assert windows.loc[138, "tokens_kept"] == 14_896
    assert row.history_tokens == _tokens(history) == 8_680
    assert row.steps_tokens == _tokens(steps) == 538
    assert row.total_tokens - request.tokens == 6


def _shared(before: list[dict[str, Any]], now: list[dict[str, Any]], kit: Any) -> int:
    """Tokens of the leading messages two calls send identically (as the provider sends
    each one), each counted alone."""
    shared = 0
    for a, b in zip(before, now, strict=False):
        if a != b and RELEASE.wire_messages(kit, [a]) != RELEASE.wire_messages(kit, [b]):
            break
        shared += RELEASE.estimate_message_tokens(b)
    return shared


@pytest.mark.parametrize(
    ("key", "turns", "setting"),
    [
        ("telegram:777", range(0, 90), {}),
        ("cli:direct", range(120, 142), {}),
        ("telegram:12345", range(300, 330), {"max_messages": 30, "max_tokens": 3000}),
    ],
)
def test_the_prefix_is_what_the_previous_call_shares(
    corpus: sk.Corpus, key: str, turns: range, setting: dict[str, int]
) -> None:
    """Each call's prefix is exactly what it shares with the call before it as sk.request
    rebuilds both: tools, system prompt, then every leading message sent identically (a
    result compacted in one call and not the other ends it; 0.2.2's runtime context on the
    current message ends it at the next turn)."""
    session = corpus[key]
    frame = sk.requests(session, **setting)
    frame = frame[frame["turn"].isin(turns)]
    settings = sk.HistorySettings(**setting)
    kit, _ = kit_of(RELEASE, session, None, None, None, None)
    previous: Any = None
    checked = within_turn = moved = 0
    for row in frame.itertuples():
        assert row.cache_ratio == row.prefix_tokens / row.total_tokens
        try:
            request = sk.request(session, turn=row.turn, step=row.step, settings=settings)
        except ValueError:  # the stored message stands in for the current one
            previous = None
            continue
        loop = request.loop_messages[1:]
        if previous is not None:
            head = row.system_tokens + row.summary_tokens + row.tools_tokens
            assert row.prefix_tokens == head + _shared(previous[1], loop, kit), (row.turn, row.step)
            checked += 1
            within_turn += row.step > 0
            moved += row.step > 0 and row.prefix_tokens < previous[0]
        previous = (row.total_tokens, loop)
    assert checked > 20 and within_turn > 5
    if not setting:
        assert moved > 0  # a call compacting a result the previous one sent whole


def test_block_rounds_the_prefix_down(sessions: list[sk.Session], frame: pd.DataFrame) -> None:
    blocked = sk.requests(sessions, block=128)
    assert (blocked["prefix_tokens"] == frame["prefix_tokens"] // 128 * 128).all()
    assert (blocked["prefix_tokens"] < frame["prefix_tokens"]).any()
    assert (blocked["cache_ratio"] == blocked["prefix_tokens"] / blocked["total_tokens"]).all()
    derived = ("prefix_tokens", "cache_ratio", "cache_read_tokens", "cache_write_tokens")
    same = [c for c in frame.columns if c not in (*derived, "cache_break")]
    pd.testing.assert_frame_equal(blocked[same], frame[same])


def test_a_grid_is_one_block_per_setting(sessions: list[sk.Session]) -> None:
    grid = sk.requests(sessions, grid={"max_messages": [20, 120], "max_tokens": [0, 4000]})
    blocks = grid.groupby(["max_messages", "max_tokens"], sort=False).ngroup()
    assert blocks.is_monotonic_increasing and blocks.nunique() == 4
    for (messages, budget), rows in grid.groupby(["max_messages", "max_tokens"]):
        alone = sk.requests(sessions, max_messages=messages, max_tokens=budget)
        pd.testing.assert_frame_equal(rows.reset_index(drop=True), alone)
    later = grid[(grid["step"] == 0) & (grid["prefix_tokens"] > 0) & (grid["max_tokens"] == 0)]
    head = later["system_tokens"] + later["summary_tokens"] + later["tools_tokens"]
    history_lost = later["prefix_tokens"] == head
    lost = history_lost.groupby(later["max_messages"]).mean()
    assert lost[20] > 0.5 > lost[120]  # a short count window slides at most turns


def test_calls_are_kept_until_the_messages_change(corpus: sk.Corpus) -> None:
    """A second frame reuses each session's calls; a session cut short is counted again."""
    session = corpus["telegram:777"].copy()
    memo.clear()
    first = sk.requests(session)
    assert memo.size("calls") == 1
    (kept,) = memo.slot(session, "calls", shared=True).values()
    pd.testing.assert_frame_equal(sk.requests(session), first)
    assert next(iter(memo.slot(session, "calls", shared=True).values())) is kept
    cut = session.before_user(10)
    session.messages = cut.messages
    shorter = sk.requests(session)
    assert shorter["turn"].max() == 9
    pd.testing.assert_frame_equal(shorter, first[first["turn"] < 10].reset_index(drop=True))


def test_without_the_release_system_and_tools_are_empty(
    sessions: list[sk.Session], frame: pd.DataFrame, no_nanobot: Path
) -> None:
    with pytest.raises(ReleaseNotInstalled, match="has no nanobot-ai, not nanobot-ai 0.2.2"):
        sk.request(sessions[0], turn=0, nanobot=no_nanobot)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bare = sk.requests(sessions, nanobot=no_nanobot)
    assert [str(w.message) for w in caught] == [
        f"sessionkit.requests: {no_nanobot} has no nanobot-ai, not nanobot-ai 0.2.2: pass the "
        "interpreter or venv of that release, or install it with `sessionkit releases install "
        "0.2.2`; system prompt and tools are left empty"
    ]
    assert caught[0].filename == __file__
    assert (bare[["system_tokens", "summary_tokens", "tools_tokens"]] == 0).all(axis=None)
    assert bare["inferred"].all()  # the stored user message stands in for the current one
    stored = [m for s in sessions for m in s.messages if RELEASE.is_user_turn(m)]
    assert bare["current_tokens"][bare["step"] == 0].sum() == sum(
        _tokens([m]) for m in stored if not m.get("_command")
    )
    same = ["session_key", "turn", "step"]
    pd.testing.assert_frame_equal(bare[same], frame[same])
    # without the release its clean-up is unknown: the history is counted as replayed
    windows = sk.windows(sessions).set_index(["session_key", "turn"])["tokens_kept"]
    replayed = windows.loc[list(zip(bare["session_key"], bare["turn"], strict=True))]
    assert bare["history_tokens"].tolist() == replayed.tolist()
    assert (bare["history_tokens"] > frame["history_tokens"]).any()
    named = sk.requests(sessions, nanobot={"0.2.2": sys.executable})
    pd.testing.assert_frame_equal(named, frame)


def _handmade(key: str, stamps: bool) -> sk.Session:
    """Three turns: a tool round, then two plain answers."""
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "name": "weather", "content": "18C, cloudy"},
        {"role": "assistant", "content": "It is 18C and cloudy."},
        {"role": "user", "content": "And tomorrow?"},
        {"role": "assistant", "content": "Rain, 14C."},
        {"role": "user", "content": "Thanks."},
        {"role": "assistant", "content": "You're welcome."},
    ]
    if stamps:
        for minute, message in enumerate(messages):
            message["timestamp"] = f"2026-03-01T10:{minute:02d}:00"
    return sk.Session(key=key, messages=messages)


def test_a_turn_shares_what_its_history_repeats(no_nanobot: Path) -> None:
    """Without a kit the stored messages stand in for the current ones, so the next history
    repeats the previous turn's last call exactly: its user message, assistant tool call and
    tool result all stay in the prefix."""
    session = _handmade("cli:handmade", stamps=False)
    with pytest.warns(UserWarning, match="system prompt and tools are left empty"):
        got = sk.requests(session, nanobot=no_nanobot)
    t = [_tokens([m]) for m in session.messages]
    assert got[["turn", "step"]].values.tolist() == [[0, 0], [0, 1], [1, 0], [2, 0]]
    assert got["total_tokens"].tolist() == [
        t[0],
        t[0] + t[1] + t[2],
        sum(t[:4]) + t[4],
        sum(t[:6]) + t[6],
    ]
    assert got["prefix_tokens"].tolist() == [0, t[0], sum(t[:3]), sum(t[:5])]
    with pytest.warns(UserWarning, match="system prompt and tools are left empty"):
        slid = sk.requests(session, nanobot=no_nanobot, max_messages=2)
    assert slid["history_tokens"].tolist() == [0, 0, t[3], t[4] + t[5]]  # the tool result
    # without its call is dropped; then the window moves on by a whole turn
    assert slid["prefix_tokens"].tolist() == [0, t[0], 0, 0]


def test_the_runtime_context_ends_the_shared_prefix(data_dir: Path) -> None:
    """With 0.2.2's kit the current message carries its runtime context, which the next
    history replays without: the prefix stops at the previous history."""
    session = _handmade("cli:handmade", stamps=True)
    got = sk.requests(session, workspace=data_dir)
    fixed = int(got["system_tokens"].iloc[0] + got["tools_tokens"].iloc[0])
    assert fixed > 0
    assert got["prefix_tokens"].tolist() == [
        0,
        got["total_tokens"].iloc[0],
        fixed,
        fixed + got["history_tokens"].iloc[2],
    ]


def _tool_session() -> sk.Session:
    """Four turns of tool rounds: twelve long shell results, then an empty result and a call
    left unanswered (0.2.2 backfills a result for it), then more long results."""
    messages: list[dict[str, Any]] = []

    def call(i: int, name: str) -> dict[str, Any]:
        arguments = f'{{"command": "step {i}"}}'
        return {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }

    def result(i: int, name: str, text: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": f"c{i}", "name": name, "content": text}

    messages.append({"role": "user", "content": "Run the twelve checks."})
    messages.append(
        {"role": "assistant", "content": "", "tool_calls": [call(i, "exec") for i in range(12)]}
    )
    messages += [result(i, "exec", f"line {i}: " + "ok " * (200 + i)) for i in range(12)]
    messages.append({"role": "assistant", "content": "All twelve passed."})
    messages.append({"role": "user", "content": "Now the empty one, then read the log."})
    messages.append({"role": "assistant", "content": "", "tool_calls": [call(12, "exec")]})
    messages.append(result(12, "exec", ""))
    messages.append({"role": "assistant", "content": "", "tool_calls": [call(13, "read_file")]})
    messages.append({"role": "assistant", "content": "The log could not be read."})
    messages.append({"role": "user", "content": "Thanks."})
    messages.append({"role": "assistant", "content": "You're welcome."})
    messages.append({"role": "user", "content": "Three more checks, please."})
    messages.append(
        {"role": "assistant", "content": "", "tool_calls": [call(i, "exec") for i in (14, 15, 16)]}
    )
    messages += [result(i, "exec", f"check {i}: " + "fine " * 150) for i in (14, 15, 16)]
    messages.append({"role": "assistant", "content": "Done."})
    for minute, message in enumerate(messages):
        message["timestamp"] = f"2026-03-01T10:{minute:02d}:00"
    return sk.Session(key="cli:tools", messages=messages)


def _check_calls(session: sk.Session, got: pd.DataFrame, **where: Any) -> None:
    """Each row's parts and prefix equal to sk.request's call and the one before it."""
    kit, _ = kit_of(RELEASE, session, where["workspace"], where.get("config_dir"), None, None)
    previous: Any = None
    for row in got.itertuples():
        request = sk.request(session, turn=row.turn, step=row.step, **where)
        history, current, steps = _split(request)
        assert (row.history_tokens, row.history_messages) == (_tokens(history), len(history))
        assert (row.current_tokens, row.steps_tokens) == (_tokens([current]), _tokens(steps))
        loop = request.loop_messages[1:]
        head = row.system_tokens + row.summary_tokens + row.tools_tokens
        shared = 0 if previous is None else head + _shared(previous, loop, kit)
        assert row.prefix_tokens == shared, (row.turn, row.step)
        previous = loop


def test_the_clean_up_of_a_tool_heavy_session(data_dir: Path) -> None:
    """Every call of a hand-made session whose requests compact results (the two oldest of
    fourteen, then more as the turns add results), mark an empty result and backfill an
    unanswered call: each part and each prefix equal to sk.request's calls."""
    session = _tool_session()
    got = sk.requests(session, workspace=data_dir)
    windows = sk.windows(session).set_index("turn")
    assert got[["turn", "step"]].values.tolist() == [
        [0, 0],
        [0, 1],
        [1, 0],
        [1, 1],
        [1, 2],
        [2, 0],
        [3, 0],
        [3, 1],
    ]
    _check_calls(session, got, workspace=data_dir)
    kept = windows.loc[got["turn"], "tokens_kept"].to_numpy()
    assert (got["history_tokens"].to_numpy() < kept)[got["turn"] >= 1].all()  # compacted
    later = got[got["turn"] >= 2]
    backfilled = windows.loc[later["turn"], "messages_kept"].to_numpy() + 1
    assert (later["history_messages"] == backfilled).all()


def test_calls_the_model_cannot_say_are_rebuilt(data_dir: Path) -> None:
    """A turn left unanswered (the next current message is merged into it) and a call id
    answered in another turn (backfilling then depends on the request): those calls are
    rebuilt with the release's loop, equal to sk.request's."""
    call = {"id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{}"}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hello?"},
        {"role": "user", "content": "Are you there? Run the check."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "exec", "content": "ok " * 300},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Once more."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "assistant", "content": "It did not run."},
        {"role": "user", "content": "Thanks."},
        {"role": "assistant", "content": "Welcome."},
    ]
    for minute, message in enumerate(messages):
        message["timestamp"] = f"2026-03-01T11:{minute:02d}:00"
    session = sk.Session(key="cli:odd", messages=messages)
    got = sk.requests(session, workspace=data_dir)
    assert got[["turn", "step"]].values.tolist() == [[0, 0], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0]]
    _check_calls(session, got, workspace=data_dir)
    merged = got[(got["turn"] == 1)].iloc[0]
    assert merged["history_messages"] == 0  # the unanswered message went out with the current


def test_calls_over_the_release_budget_are_rebuilt(data_dir: Path, tmp_path: Path) -> None:
    """Under a configured context window the release trims a request over its budget
    itself: those calls (and the ones near it) are rebuilt, equal to sk.request's."""
    session = _tool_session()
    roomy = sk.requests(session, workspace=data_dir)
    head = int(roomy["system_tokens"].iloc[0] + roomy["tools_tokens"].iloc[0])
    budget = head + int(roomy["history_tokens"].median())
    config = tmp_path / "config.json"
    defaults = {"contextWindowTokens": budget + 512 + 1024, "maxTokens": 512}
    config.write_text(json.dumps({"agents": {"defaults": defaults}}))
    got = sk.requests(session, workspace=data_dir, config_dir=config)
    _check_calls(session, got, workspace=data_dir, config_dir=config)
    trimmed = got["history_tokens"] < roomy["history_tokens"]
    assert trimmed.any() and not trimmed.all()
