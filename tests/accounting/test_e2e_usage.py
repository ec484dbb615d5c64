"""End to end: nanobot 0.3.5's own gateway loop (tests/support/e2e.py) runs scripted turns
one after another against the local stub, which reports known usage; every call it logged
appears once in ``usage``, tied to the turn and step that made it (summary calls to their
turn), with the stub's tokens and genai-prices' cost.  Concurrency is tested with fixtures
(test_attribution.py)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import pytest
from genai_prices import Usage, calc_price
from support import e2e  # noqa: E402

from sessionkit.accounting.ledger import usage

pytestmark = pytest.mark.conformance

PRICED_MODEL = "gpt-4o-mini"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], e2e.GatewayRun]:
    """The governor scenario with the stub's model name, the basic one with a priced model
    (the stub answers whatever model is asked for); each run once per module."""
    done: dict[str, e2e.GatewayRun] = {}

    def get(name: str) -> e2e.GatewayRun:
        if name not in done:
            scenario = {"governor": e2e.SCENARIO_GOVERNOR, "basic": e2e.SCENARIO_BASIC}[name]
            with pytest.MonkeyPatch.context() as patch:
                if name == "basic":
                    patch.setattr(e2e, "MODEL", PRICED_MODEL)
                done[name] = e2e.run_gateway(tmp_path_factory.mktemp(name), scenario)
        return done[name]

    return get


def _expected(run: e2e.GatewayRun, scenario: dict) -> list[tuple]:
    """Per logged call (in order): session key, session turn, step, kind and the stub's
    tokens."""
    sessions = [t["session"] for t in scenario["turns"]]
    out = []
    for turn, step, kind, used in zip(run.turns, run.steps, run.kinds, run.usage, strict=True):
        key = sessions[turn]
        number = sessions[:turn].count(key)
        tokens = (used.prompt_tokens, used.completion_tokens, used.cached_tokens)
        out.append((key, number, step, "summary" if kind == "default" else "agent", *tokens))
    return out


def _rows(frame) -> list[tuple]:
    columns = [
        "session_key",
        "turn",
        "step",
        "kind",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
    ]
    return [tuple(r) for r in frame[columns].astype(object).itertuples(index=False)]


@pytest.mark.parametrize("name", ["governor", "basic"])
def test_every_logged_call_is_tied_to_its_turn_and_step(runs, name: str) -> None:
    run = runs(name)
    scenario = {"governor": e2e.SCENARIO_GOVERNOR, "basic": e2e.SCENARIO_BASIC}[name]
    reported = usage(run.data_dir, estimate=False, cache=False)
    frame = reported.sort_values("call_id")
    assert frame["call_id"].tolist() == list(range(1, len(run.requests) + 1))
    assert _rows(frame) == _expected(run, scenario)
    assert frame["attribution"].notna().all()
    summary = reported.summary
    assert (summary["calls"], summary["unattributed"], summary["ambiguous"]) == (
        len(run.requests),
        0,
        0,
    )
    if name == "governor":
        assert run.kinds.count("default") == 2
        assert frame["cost_usd"].isna().all()
        assert reported.problems["reason"].tolist() == [
            f"no price for model 'stub-model' (provider 'custom') in genai-prices: cost_usd "
            f"NaN for {len(run.requests)} call(s) (Unable to find provider with model matching "
            "'stub-model')"
        ]


def test_costs_are_what_genai_prices_calculates(runs) -> None:
    run = runs("basic")
    reported = usage(run.data_dir, estimate=False, cache=False)
    frame = reported.sort_values("call_id")
    expected = [
        float(
            calc_price(
                Usage(
                    input_tokens=p, output_tokens=c, cache_read_tokens=r, cache_write_tokens=None
                ),
                PRICED_MODEL,
                genai_request_timestamp=datetime.fromtimestamp(t.timestamp(), UTC),
            ).total_price
        )
        for p, c, r, t in zip(
            frame["prompt_tokens"],
            frame["completion_tokens"],
            frame["cached_tokens"],
            frame["time"],
            strict=True,
        )
    ]
    assert frame["cost_usd"].tolist() == expected
    assert np.all(frame["cost_usd"] > 0)
    assert reported.notes["reason"].tolist() == [
        "provider 'custom' is unknown to genai-prices: 'gpt-4o-mini' priced at openai's prices"
    ]
    assert reported.problems.empty
