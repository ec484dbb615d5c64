"""sk.requests under nanobot 0.3.0 and 0.3.5: each call's history and steps are what
sk.request's call sends after the release's per-call clean-up (empty results marked, orphan
results dropped, unanswered calls backfilled, long results offloaded), counted message by
message as windows count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support.releases import release  # noqa: E402
from support.sampling import sample_rows  # noqa: E402

import sessionkit as sk
from sessionkit.calls.assembly import kit_of, turn_calls

KEYS = ("telegram:777", "cli:direct", "discord:987")
ESTIMATE = sk.get_policy("nanobot-0.2")


def _tokens(messages: list[dict[str, Any]]) -> int:
    return sum(ESTIMATE.estimate_message_tokens(m) for m in messages)


def _split(request: sk.Request) -> tuple[list[Any], list[Any]]:
    """(history, steps) of a request as its loop sent them (the current message is the last
    user message; steps hold none)."""
    loop = request.loop_messages
    at = max(i for i, m in enumerate(loop) if m["role"] == "user")
    return loop[1:at], loop[at + 1 :]


@pytest.fixture(scope="module")
def corpus(data_dir: Path) -> sk.Corpus:
    return sk.load(data_dir / "sessions")


@pytest.mark.conformance
@pytest.mark.parametrize("version", ["0.3.0", "0.3.5"])
def test_each_history_and_steps_are_the_requests(corpus: sk.Corpus, version: str) -> None:
    """For a sample of calls of three sessions: history and steps tokens and the history's
    messages equal sk.request's after the release's clean-up, which changes many of them
    from the stored messages (telegram:777 turn 19: an empty grep result marked)."""
    release(version)
    name = f"nanobot-{version}"
    policy = sk.get_policy(name)
    checked = cleaned = 0
    for key in KEYS:
        session = corpus[key]
        kit, _ = kit_of(policy, session, None, None, None, None)
        rows = sk.requests(session, policy=name)
        every = len(rows) // 6 + 1
        sample = pd.concat([rows.iloc[::every], rows[rows["step"] >= 1].iloc[::every]])
        for row in sample.itertuples():
            try:
                request = sk.request(session, turn=row.turn, step=row.step, policy=name)
            except ValueError:  # a turn whose input was not stored: no request to compare
                assert row.inferred
                continue
            history, steps = _split(request)
            assert row.history_tokens == _tokens(history)
            assert row.history_messages == len(history)
            assert row.steps_tokens == _tokens(steps)
            calls = turn_calls(session, row.turn, kit, policy=policy)
            stored = _tokens(calls.history) + _tokens(calls.steps[row.step])
            cleaned += row.history_tokens + row.steps_tokens != stored
            checked += 1
    assert checked > 20
    assert cleaned > checked // 4
    rows = sk.requests(corpus["telegram:777"], policy=name).set_index(["turn", "step"])
    history, _ = _split(sk.request(corpus["telegram:777"], turn=19, step=1, policy=name))
    assert rows.loc[(19, 1), "history_tokens"] == _tokens(history) == 2_036


@pytest.mark.conformance
def test_calls_near_0_3_0s_budget_are_rebuilt(corpus: sk.Corpus, tmp_path: Path) -> None:
    """Under a context window whose budget (14,000) a third of telegram:777's calls pass,
    0.3.0 compacts and snips those requests itself: the frame's calls near the budget are
    sk.request's."""
    release("0.3.0")
    name = "nanobot-0.3.0"
    session = corpus["telegram:777"]
    config = tmp_path / "config.json"
    defaults = {"contextWindowTokens": 14_000 + 512 + 1024, "maxTokens": 512}
    config.write_text(json.dumps({"agents": {"defaults": defaults}}))
    roomy = sk.requests(session, policy=name)
    rows = sk.requests(session, policy=name, config_dir=config)
    trimmed = rows["history_tokens"] + rows["steps_tokens"]
    trimmed = trimmed < roomy["history_tokens"] + roomy["steps_tokens"]
    assert 30 < trimmed.sum() < len(rows) // 2
    near = rows[rows["total_tokens"] > 14_000 - 3_000].iloc[::9]
    assert len(near) > 6
    for row in near.itertuples():
        request = sk.request(session, turn=row.turn, step=row.step, policy=name, config_dir=config)
        history, steps = _split(request)
        assert row.history_tokens == _tokens(history)
        assert row.history_messages == len(history)
        assert row.steps_tokens == _tokens(steps)


LEGACY = {"slack:C01:thread": 1.0, "feishu:ou_5f3a": 0.4, "webui:abc123": 0.4}
"""Sessions an earlier release consolidated (``last_consolidated`` without a checkpoint), and
the share of their calls past that offset to check."""


def _first_turn_past_offset(session: sk.Session, name: str) -> int:
    """The first turn whose user message lies at or past the session's recorded offset."""
    turns = sk.windows(session, policy=name)
    return int(turns.loc[turns["at"] >= session.last_consolidated, "turn"].min())


@pytest.mark.conformance
def test_0_3_5_replays_from_an_offset_an_earlier_release_recorded(corpus: sk.Corpus) -> None:
    """0.3.5 reads a 0.2 file's ``last_consolidated`` as ``last_archived``: at the first turn
    past it, sk.request's history is the release's own ``get_history`` of the messages before
    that turn (slack:C01:thread turn 29: none, not the 105 messages before offset 107)."""
    nb035 = release("0.3.5")
    name = "nanobot-0.3.5"
    policy = sk.get_policy(name)
    sessions = [corpus[key] for key in LEGACY]
    records = [
        json.loads(Path(s.path).read_text(encoding="utf-8").splitlines()[0]) for s in sessions
    ]
    offsets = [
        r["returned"] for r in nb035.run("_archive_offset", [{"args": [r]} for r in records])
    ]
    assert offsets == [s.last_consolidated for s in sessions] == [107, 180, 311]
    ours = []
    for session in sessions:
        kit, _ = kit_of(policy, session, None, None, None, None)
        turn = _first_turn_past_offset(session, name)
        try:
            ours.append(turn_calls(session, turn, kit, policy=policy))
        except ValueError:  # feishu:ou_5f3a turn 51: its input was not stored
            ours.append(turn_calls(session, turn + 1, kit, policy=policy))
    cases = [
        {
            "init": {"key": s.key, "messages": s.messages[: c.user_index], "last_consolidated": o},
            "state": False,
        }
        for s, c, o in zip(sessions, ours, offsets, strict=True)
    ]
    theirs = [r["returned"] for r in nb035.run("Session.get_history", cases)]
    assert theirs == [json.loads(json.dumps(c.history)) for c in ours]
    assert [len(h) for h in theirs] == [0, 9, 0]


@pytest.mark.conformance
def test_0_3_5_history_past_a_recorded_offset_is_the_requests(corpus: sk.Corpus) -> None:
    """Every sampled call from the first turn past a recorded offset (all of that turn's):
    history tokens and messages equal sk.request's (they differed on 105 calls of these three
    sessions when sk.request dropped the offset)."""
    release("0.3.5")
    name = "nanobot-0.3.5"
    checked = 0
    for key, share in LEGACY.items():
        session = corpus[key]
        first = _first_turn_past_offset(session, name)
        rows = sk.requests(session, policy=name)
        later = rows[rows["turn"] > first + 1]
        chosen = pd.concat(
            [rows[rows["turn"].between(first, first + 1)], sample_rows(later, share)]
        )
        for row in chosen.itertuples():
            try:
                request = sk.request(session, turn=row.turn, step=row.step, policy=name)
            except ValueError:  # a turn whose input was not stored: no request to compare
                continue
            history, _ = _split(request)
            assert (row.turn, row.history_tokens, row.history_messages) == (
                row.turn,
                _tokens(history),
                len(history),
            )
            checked += 1
    assert checked > 60
