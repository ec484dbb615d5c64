"""The explorer's experiment panel without a browser, against a stub OpenAI-compatible server
on 127.0.0.1 whose answers follow a rule of the request: nothing is sent before "run" (and
"run" is off without a budget), each setting's answer stands beside the session's with the
marks the rule implies, the budget bounds every run together, kept answers are shown without
sending, all text is escaped and the key is in no widget's state."""

from __future__ import annotations

import difflib
import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import pandas as pd
import pytest
from genai_prices import Usage as PriceUsage
from genai_prices import calc_price
from support.stub_openai import Reply, ToolCall, Usage
from support.stub_rules import RuleServer, message_text, stub_workspace

import sessionkit as sk
from sessionkit.views.experiment_panel import experiment_html
from sessionkit.views.explorer import Explorer, explore

KEY = "cli:direct"
TURN = 2
MODEL = "gpt-4o-mini"
API_KEY = "sk-test-panel-7d3a-NEVER-SHOWN"
FACT = "perfect, ship it"
"""The session's first user message: out of a 4-message window by turn 2."""
USAGE = Usage(prompt_tokens=1000, completion_tokens=20, cached_tokens=200)
GRID = {"max_messages": [4, 0]}
SHOWN = [0, 2, 1, 3]
"""The results' rows (4-message window, then the default; steps 0 and 1 in each) as the
panel shows them: step by step, each setting in the frame's order."""
STEP0 = "Let me check."
"""The text the session stored with its tool call at turn 2, step 0."""


def _stored_call(corpus: sk.Corpus) -> ToolCall:
    """The tool call the session made at turn 2, step 0."""
    function = corpus[KEY].messages[9]["tool_calls"][0]["function"]
    return ToolCall(function["name"], json.loads(function["arguments"]))


def answer(body: dict[str, Any], stored: ToolCall) -> Reply:
    """The stub's rule: after a tool result, "done <b>&"; asked about Toronto, the session's
    own tool call when its first user message is in the context, else "I do not know"; else
    "hello"."""
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        return Reply(USAGE, text="done <b>&")
    if "Toronto" in message_text(last):
        if any(FACT in message_text(m) for m in messages[1:-1]):
            return Reply(USAGE, tool_calls=(stored,))
        return Reply(USAGE, text="I do not know")
    return Reply(USAGE, text="hello")


@pytest.fixture(scope="module")
def stub() -> Iterator[RuleServer]:
    with RuleServer(lambda body, seen: Reply(USAGE, text="unset")) as server:
        yield server


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, stub: RuleServer) -> sk.Corpus:
    return sk.load(
        stub_workspace(
            tmp_path_factory.mktemp("panel"), data_dir, stub.url, model=MODEL, api_key=API_KEY
        )
    )


@pytest.fixture(autouse=True)
def ruled(
    stub: RuleServer, corpus: sk.Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule in force, nothing received yet, and answers kept in this test's own cache."""
    monkeypatch.setenv("SESSIONKIT_CACHE_DIR", str(tmp_path / "cache"))
    stored = _stored_call(corpus)
    stub.rule = lambda body, seen: answer(body, stored)
    stub.reset()


def _app(corpus: sk.Corpus, tmp_path: Path, **experiment: Any) -> Explorer:
    app = explore(corpus, key=KEY, sessions_dir=tmp_path / "forks", experiment=experiment)
    app.turn.value = TURN
    return app


def _canonical(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


def _plain(cell: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", cell))


def _cells(view: str, css: str) -> list[str]:
    """The text of every ``<td class=css>`` in the view, tags dropped and unescaped."""
    return [_plain(c) for c in re.findall(rf"<td class='{css}'[^>]*>(.*?)</td>", view, re.S)]


def _price(calls: int) -> float:
    one = calc_price(PriceUsage(input_tokens=1000, cache_read_tokens=200, output_tokens=20), MODEL)
    return calls * float(one.total_price)


def test_without_a_budget_run_is_off_and_nothing_is_sent(
    corpus: sk.Corpus, stub: RuleServer, tmp_path: Path
) -> None:
    app = _app(corpus, tmp_path, grid=GRID)
    panel = app.experiment_panel
    assert panel is not None and panel in app.children
    assert panel.run_button.disabled is True
    reason = (
        "run is off: nothing is sent without a budget; give the explorer "
        "experiment=dict(budget_calls=..., budget_usd=...)"
    )
    assert panel.run_button.tooltip == reason
    assert _plain(panel.budget_view.value) == f"{reason} (used 0 calls, $0.000000)"
    assert panel.view.value == "" and panel.results is None
    panel.run_button.click()  # a click that reaches the kernel anyway sends nothing
    assert _plain(panel.view.value) == reason
    panel.show_button.click()
    assert stub.received == []
    assert panel.results is not None, panel.view.value
    assert list(panel.results["outcome"]) == ["planned"] * 4
    assert _cells(panel.view.value, "sk-exp-outcome") == [
        f"planned, at most ${panel.results['worst_cost_usd'][i]:,.6f}" for i in SHOWN
    ]


def test_run_shows_each_settings_answer_beside_the_sessions(
    corpus: sk.Corpus, stub: RuleServer, tmp_path: Path
) -> None:
    app = _app(corpus, tmp_path, grid=GRID, budget_calls=10)
    panel = app.experiment_panel
    assert stub.received == []
    panel.run_button.click()
    calls = sk.requests(corpus[KEY], settings=app.settings(), grid=GRID)
    calls = calls[calls["turn"] == TURN]
    assert [(r.max_messages, r.step) for r in calls.itertuples()] == [
        (4, 0),
        (4, 1),
        (0, 0),
        (0, 1),
    ]
    bodies = [r.body for r in stub.received]
    assert len(bodies) == 4 and {b["model"] for b in bodies} == {MODEL}
    assert {r.authorization for r in stub.received} == {f"Bearer {API_KEY}"}
    expected = [
        sk.request(
            corpus,
            KEY,
            turn=TURN,
            step=row.step,
            settings=app.settings(),
            max_messages=row.max_messages,
        ).messages
        for row in calls.itertuples()
    ]
    assert sorted(map(_canonical, (b["messages"] for b in bodies))) == sorted(
        map(_canonical, expected)
    )
    out = panel.results
    assert list(out["outcome"]) == ["answered"] * 4
    assert list(out["answer_text"].fillna("<none>")) == [
        "I do not know",
        "done <b>&",
        "<none>",
        "done <b>&",
    ]
    assert list(out["same_action"]) == [False, True, True, True]
    step1 = corpus[KEY].messages[11]["content"]
    ratios = [
        difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
        for a, b in [
            ("I do not know", STEP0),
            ("done <b>&", step1),
            ("", STEP0),
            ("done <b>&", step1),
        ]
    ]
    assert list(out["text_similarity"]) == ratios
    view = panel.view.value
    assert _plain(view.split("</div>")[0]) == (
        f"Experiment for turn 2 of {KEY} at {stub.url[7:-3]}: 4 answered; this run spent "
        f"${_price(4):,.6f}"
    )
    assert (
        _cells(view, "sk-exp-setting")
        == [
            f"max_messages=4 · {MODEL}",
            f"max_messages=0 · {MODEL}",
        ]
        * 2
    )
    assert _cells(view, "sk-exp-same") == ["✗✓✓✓"[i] for i in SHOWN]
    assert _cells(view, "sk-exp-similarity") == [f"{ratios[i]:.2f}" for i in SHOWN]
    assert _cells(view, "sk-exp-judge") == []  # no judge, no column
    assert _cells(view, "sk-exp-outcome") == [f"answered, ${_price(1):,.6f}"] * 4
    originals = _cells(view, "sk-exp-original")
    call = _stored_call(corpus)
    assert originals == [f"{STEP0}{call.name}({json.dumps(call.arguments)})", step1]
    assert "done &lt;b&gt;&amp;" in view and "done <b>&" not in view
    assert panel.used_calls == 4 and panel.spent_usd == pytest.approx(_price(4))
    assert _plain(panel.budget_view.value) == (
        f"budget of all runs together: 10 calls; used 4 calls, ${_price(4):,.6f}"
    )


def test_the_budget_bounds_every_run_and_kept_answers_are_not_sent_again(
    corpus: sk.Corpus, stub: RuleServer, tmp_path: Path
) -> None:
    app = _app(corpus, tmp_path, grid=GRID, budget_calls=3)
    panel = app.experiment_panel
    panel.run_button.click()
    assert len(stub.received) == 3
    assert list(panel.results["outcome"]) == ["answered"] * 3 + ["over budget"]
    assert panel.run_button.disabled is True
    assert _plain(panel.budget_view.value) == (
        f"run is off: the budget is spent (used 3 calls, ${_price(3):,.6f})"
    )
    panel.run_button.click()
    assert len(stub.received) == 3
    app.turn.value = 1
    assert _plain(panel.view.value) == (
        "The controls changed: press “kept answers” or “run” for turn 1."
    )
    app.turn.value = TURN
    panel.show_button.click()
    assert len(stub.received) == 3
    assert list(panel.results["outcome"]) == ["stored"] * 3 + ["planned"]
    assert list(panel.results["answer_text"].fillna("<none>")) == [
        "I do not know",
        "done <b>&",
        "<none>",
        "<none>",
    ]
    fresh = _app(corpus, tmp_path, grid=GRID, budget_calls=1)
    fresh.experiment_panel.run_button.click()
    assert len(stub.received) == 4  # the three kept answers are free; the fourth is sent
    assert list(fresh.experiment_panel.results["outcome"]) == ["stored"] * 3 + ["answered"]
    assert fresh.experiment_panel.used_calls == 1


def test_a_judge_given_scores_each_answer_in_its_own_column(
    corpus: sk.Corpus, stub: RuleServer, tmp_path: Path
) -> None:
    def judge(row: dict[str, Any]) -> float:
        return 1.0 if row["same_action"] else 0.25

    app = _app(corpus, tmp_path, grid=GRID, budget_calls=10, judge=judge)
    panel = app.experiment_panel
    panel.run_button.click()
    scores = [1.0 if same else 0.25 for same in panel.results["same_action"]]
    assert list(panel.results["judge_score"]) == scores
    assert scores == [0.25, 1.0, 1.0, 1.0]
    view = panel.view.value
    assert _cells(view, "sk-exp-judge") == [f"{scores[i]:.2f}" for i in SHOWN]
    assert "<th title='the score the judge gave, in [0, 1]'>judge</th>" in view


def _states(widget: widgets.Widget) -> Iterator[dict[str, Any]]:
    """The synced state of ``widget`` and of every widget it holds."""
    yield widget.get_state()
    for name in widget.keys:
        value = getattr(widget, name)
        for held in value if isinstance(value, tuple | list) else [value]:
            if isinstance(held, widgets.Widget):
                yield from _states(held)


def test_a_key_given_is_sent_but_in_no_widget_state_and_text_is_escaped(
    corpus: sk.Corpus, stub: RuleServer, tmp_path: Path
) -> None:
    given = "sk-given-9f2c-NEVER-SHOWN"
    stub.rule = lambda body, seen: Reply(USAGE, text="<script>alert(1)</script>")
    app = _app(corpus, tmp_path, endpoint=stub.url, api_key=given, budget_calls=5, cache=False)
    panel = app.experiment_panel
    panel.run_button.click()
    assert {r.authorization for r in stub.received} == {f"Bearer {given}"}
    assert len(stub.received) == 2
    view = panel.view.value
    assert "<script>" not in view
    assert _cells(view, "sk-exp-answer") == ["<script>alert(1)</script>"] * 2
    shown = [json.dumps(state, default=str) for state in _states(app)]
    assert len(shown) > 40 and any("alert(1)" in s for s in shown)
    assert [s for s in shown if given in s or API_KEY in s] == []
    assert given not in repr(panel.options)


def test_an_error_or_the_next_turn_is_a_message_in_the_panel(
    corpus: sk.Corpus, stub: RuleServer, tmp_path: Path
) -> None:
    app = _app(corpus, tmp_path, models="stub-<model>", budget_usd=1.0)
    panel = app.experiment_panel
    panel.run_button.click()
    assert _plain(panel.view.value) == (
        "ValueError: budget_usd cannot bound calls to 'stub-<model>': genai-prices has no price "
        "for them; pass budget_calls= instead"
    )
    assert "&#x27;stub-&lt;model&gt;&#x27;" in panel.view.value
    app.turn.value = app.turn.max
    panel.run_button.click()
    assert _plain(panel.view.value) == (
        f"Turn {app.turn.max} is the next turn: nothing was sent for it yet. Move the turn "
        f"slider below {app.turn.max}."
    )
    assert stub.received == []


def test_the_panel_takes_only_experiment_keywords(corpus: sk.Corpus, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"experiment= cannot take 'budget'; it takes models, "):
        explore(corpus, key=KEY, sessions_dir=tmp_path, experiment={"budget": 3})
    assert explore(corpus, key=KEY, sessions_dir=tmp_path).experiment_panel is None


def test_a_turn_without_calls_is_said() -> None:
    assert experiment_html(pd.DataFrame(), "a<b", 3) == (
        "<div class='sk-exp-none'>No calls at turn 3 of <b>a&lt;b</b>: nanobot did not call "
        "the model.</div>"
    )
