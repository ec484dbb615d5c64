"""End to end: nanobot 0.3.5's context governor (its own gateway loop, a small context window,
a stub on 127.0.0.1) summarises mid-turn and at a turn's start; every request it sent, agent
and summary calls, is rebuilt by ``sk.request`` from the files it left, and the governor's
verdict before every call is the one the release acted on."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import pytest
from support.e2e import SCENARIO_GOVERNOR, GatewayRun, run_gateway  # noqa: E402
from support.releases import release  # noqa: E402

import sessionkit as sk
from sessionkit.calls.assembly import call_list, kit_of
from sessionkit.calls.governor import _JOIN_MARGIN, _joins, verdicts
from sessionkit.nanobot.policies import get_policy

pytestmark = pytest.mark.conformance

KEY = "telegram:gov"
SETTINGS = SCENARIO_GOVERNOR["settings"]
CTX, OUT = SETTINGS["context_window_tokens"], SETTINGS["max_tokens"]
KINDS = {"scripted": "agent", "default": "summary"}


@pytest.fixture(scope="module")
def governed(tmp_path_factory: pytest.TempPathFactory) -> GatewayRun:
    return run_gateway(tmp_path_factory.mktemp("gateway"), SCENARIO_GOVERNOR)


@pytest.fixture(scope="module")
def session(governed: GatewayRun) -> sk.Session:
    return sk.load(governed.sessions_dir)[KEY]


def _where(run: GatewayRun) -> dict[str, Any]:
    return {
        "workspace": run.workspace,
        "config_dir": run.config,
        "nanobot": release("0.3.5").python,
    }


def _recorded(run: GatewayRun) -> list[tuple[int, int, str, dict[str, Any]]]:
    """(turn, step, kind, body) of every call the stub received, in order (one session, so
    scenario turns are session turns)."""
    assert {t["session"] for t in SCENARIO_GOVERNOR["turns"]} == {KEY}
    return [
        (turn, step, KINDS[kind], body)
        for turn, step, kind, body in zip(
            run.turns, run.steps, run.kinds, run.requests, strict=True
        )
    ]


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _last_active(kit_summary: str, system: str) -> str | None:
    """The ``last active`` value of the archived-summary part of a system prompt, found with
    the release's own template (its sentinels become groups)."""
    pattern = re.escape(kit_summary)
    for name in ("last_active", "text"):
        pattern = pattern.replace(re.escape(f"\u0000SK:{name}\u0000"), f"(?P<{name}>.*?)")
    found = re.search(pattern + r"\Z", system, re.DOTALL)
    return found["last_active"] if found else None


def test_the_calls_listed_are_the_calls_made(governed: GatewayRun, session: sk.Session) -> None:
    made = [(turn, step, kind) for turn, step, kind, _ in _recorded(governed)]
    listed = [
        (turn, *call) for turn in range(session.n_user_turns) for call in call_list(session, turn)
    ]
    assert listed == made
    assert [kind for *_, kind in made].count("summary") == 2
    assert (1, 1, "summary") in made and (2, 0, "summary") in made  # mid-turn, turn start


def test_every_request_is_rebuilt_exactly(governed: GatewayRun, session: sk.Session) -> None:
    """Byte for byte from the files; where the request carries a ``last active`` time the files
    do not hold, everything else is, that time is marked inferred and stands in from the
    nearest stored time, and given the sent one the rebuild is byte for byte."""
    where = _where(governed)
    template = _kit_summary(governed)
    exact = stood_in = 0
    for turn, step, kind, body in _recorded(governed):
        label = (turn, step, kind)
        built = sk.request(session, turn=turn, step=step, summary=kind == "summary", **where)
        assert built.kind == kind and (built.turn, built.step) == (turn, step)
        assert _json(built.tools) == body["tools"], label
        archived = built.parts.set_index("part")["inferred"].get("system: archived summary")
        if not archived:
            assert _json(built.messages) == body["messages"], label
            exact += 1
            continue
        sent_system = body["messages"][0]["content"]
        sent = _last_active(template, sent_system)
        guess = _last_active(template, built.messages[0]["content"])
        assert sent is not None and guess is not None and guess != sent, label
        assert built.messages[0]["content"].replace(guess, sent) == sent_system, label
        assert _json(built.messages[1:]) == body["messages"][1:], label
        assert any("last active" in note for note in built.notes), label
        lag = datetime.fromisoformat(sent) - datetime.fromisoformat(guess)
        assert 0 <= lag.total_seconds() < _turn_seconds(governed, turn), label
        given = sk.request(
            session, turn=turn, step=step, summary=kind == "summary", last_active=sent, **where
        )
        assert _json(given.messages) == body["messages"], label
        assert not any("last active" in note for note in given.notes), label
        still = given.parts.set_index("part")["inferred"]["system: archived summary"]
        assert still == any("text" in note for note in given.notes), label  # from the journal
        stood_in += 1
    assert (exact, stood_in) == (5, 3)


def _kit_summary(run: GatewayRun) -> str:
    """The release's archived-summary part, with its sentinels."""
    session = sk.load(run.sessions_dir)[KEY]
    kit, _ = kit_of(
        get_policy(session.policy),
        session,
        run.workspace,
        run.config,
        release("0.3.5").python,
        None,
    )
    assert kit.summary is not None
    return kit.summary


def _turn_seconds(run: GatewayRun, turn: int) -> float:
    window = run.output["turns"][turn]
    return (window["ended_ns"] - window["started_ns"]) / 1e9


def test_the_verdict_is_the_one_the_release_acted_on(
    governed: GatewayRun, session: sk.Session
) -> None:
    """Before each agent call the release summarised exactly where its estimate reached the
    budget; each summary call went out, so it fit ``ctx - max_output``."""
    frame = verdicts(session, context_window=CTX, max_output=OUT, calls="all", **_where(governed))
    made = [(turn, step, kind) for turn, step, kind, _ in _recorded(governed)]
    assert list(zip(frame["turn"], frame["step"], frame["kind"], strict=True)) == made
    agent = frame[frame["kind"] == "agent"]
    preceded = {(turn, step) for turn, step, kind in made if kind == "summary"}
    acted = [(t, s) in preceded for t, s in zip(agent["turn"], agent["step"], strict=True)]
    assert agent["needs_summary"].tolist() == acted
    assert agent["summarised"].tolist() == acted
    assert (agent["budget"] == CTX - OUT - 1024).all()
    summaries = frame[frame["kind"] == "summary"]
    assert len(summaries) == 2
    assert (summaries["tokens"] <= summaries["budget"]).all()
    assert (summaries["budget"] == CTX - OUT).all()


def test_a_call_sent_as_measured_counts_as_its_request(
    governed: GatewayRun, session: sk.Session
) -> None:
    """Where no summary came before a call, the governor measured the request it sent: the
    verdict's exact count is that request's estimate."""
    where = _where(governed)
    frame = verdicts(session, context_window=CTX, max_output=OUT, calls="all", **where)
    checked = 0
    for row in frame[(frame["kind"] == "agent") & ~frame["summarised"]].itertuples():
        sent = sk.request(session, turn=row.turn, step=row.step, **where)
        budget = sent.tokens  # the budget exactly at the request's estimate: counted exactly
        near = verdicts(
            session, context_window=budget + OUT + 1024, max_output=OUT, calls="all", **where
        )
        again = near[(near["turn"] == row.turn) & (near["step"] == row.step)].iloc[0]
        assert (again["tokens"], again["exact"], again["needs_summary"]) == (
            sent.tokens,
            True,
            True,
        )
        checked += 1
    assert checked == 4


def test_near_the_budget_the_count_is_exact_and_far_from_it_screened(
    governed: GatewayRun, session: sk.Session
) -> None:
    """Per turn, the first call: one token under the exact estimate's budget it is over, one
    above it is not, both counted exactly; far from any budget the screen decides."""
    where = _where(governed)
    sent = {turn: sk.request(session, turn=turn, **where) for turn in (0, 1, 3)}  # no summary first
    for turn, request in sent.items():
        tokens = request.tokens
        for budget, over in ((tokens, True), (tokens + 1, False)):
            frame = verdicts(session, context_window=budget + OUT + 1024, max_output=OUT, **where)
            row = frame.set_index("turn").loc[turn]
            assert (row["tokens"], row["exact"], row["needs_summary"]) == (tokens, True, over)
    far = verdicts(session, context_window=200_000, max_output=OUT, **where)
    assert len(far) == session.n_user_turns == 4
    assert not far["exact"].any() and not far["needs_summary"].any()
    assert far["summarised"].tolist() == [False, False, True, False]
    for turn, request in sent.items():
        screened = int(far.set_index("turn").loc[turn, "tokens"])
        margin = _JOIN_MARGIN * (sum(map(_joins, request.loop_messages)) + 1)
        assert abs(screened - request.tokens) < margin
