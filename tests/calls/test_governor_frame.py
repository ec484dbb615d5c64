"""sk.requests under nanobot 0.3.5's context governor (its own gateway run, a small context
window, a stub on 127.0.0.1): ``needs_summary`` is the verdict ``verdicts`` finds before
each call, and ``summary_tokens`` the archived summary sk.request's system prompt carries
at each call (before and after a summary within the turn)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from support.e2e import SCENARIO_GOVERNOR, GatewayRun, run_gateway  # noqa: E402
from support.releases import release  # noqa: E402

import sessionkit as sk
from sessionkit.calls.governor import verdicts

pytestmark = pytest.mark.conformance

KEY = "telegram:gov"
SETTINGS = SCENARIO_GOVERNOR["settings"]
CTX, OUT = SETTINGS["context_window_tokens"], SETTINGS["max_tokens"]


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


def test_needs_summary_is_the_governors_verdict(governed: GatewayRun, session: sk.Session) -> None:
    """At the run's own window the frame marks the two calls the release summarised before;
    at every window its verdicts are verdicts(calls="all")'s agent rows; without a context
    window there is none."""
    where = _where(governed)
    windows = [CTX, CTX + 400, 200_000]
    got = sk.requests(session, grid={"context_window": windows}, max_output=OUT, **where)
    for window, rows in got.groupby("context_window"):
        found = verdicts(session, context_window=window, max_output=OUT, calls="all", **where)
        agent = found[found["kind"] == "agent"]
        assert rows[["turn", "step"]].values.tolist() == agent[["turn", "step"]].values.tolist()
        assert rows["needs_summary"].tolist() == agent["needs_summary"].tolist(), window
    own = got[got["context_window"] == CTX]
    assert own["needs_summary"].sum() == 2
    assert not got[got["context_window"] == 200_000]["needs_summary"].any()
    plain = sk.requests(session, **where)
    assert plain["needs_summary"].isna().all()


def test_summary_tokens_are_the_archived_summary(governed: GatewayRun, session: sk.Session) -> None:
    """Each call's summary part is sk.request's 'system: archived summary' (the summary in
    force when the turn began, then the one made within it), inferred where sk.request's is."""
    where = _where(governed)
    got = sk.requests(session, **where)
    carried = 0
    for row in got.itertuples():
        request = sk.request(session, turn=row.turn, step=row.step, **where)
        parts = request.parts.set_index("part")
        archived = (
            parts.loc["system: archived summary"]
            if "system: archived summary" in parts.index
            else None
        )
        tokens = 0 if archived is None else int(archived["tokens"])
        assert row.summary_tokens == tokens, (row.turn, row.step)
        if archived is not None and archived["inferred"]:
            assert row.inferred
        carried += tokens > 0
    assert carried > 0
    assert got["total_tokens"].equals(
        got[
            [
                "system_tokens",
                "summary_tokens",
                "tools_tokens",
                "history_tokens",
                "current_tokens",
                "steps_tokens",
            ]
        ].sum(axis=1)
    )
    assert isinstance(got["needs_summary"].dtype, pd.BooleanDtype)
