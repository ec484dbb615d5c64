"""The explorer's usage panel without a browser: the selected turn's recorded calls, tokens and
cost as sessionkit.usage tied them (priced as genai-prices prices them), escaped, and a clear
line where no usage was recorded for the turn."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
from genai_prices import Usage, calc_price
from support.usage_fixtures import (  # noqa: E402
    NAMESPACE,
    T0,
    call,
    checkpoint,
    ledger,
    reply,
    tool_round,
    user,
    write_log,
    write_session,
)

import sessionkit
from sessionkit.views.explorer import Explorer, explore

GOV = "telegram:gov"
ODD = "slack:<b>&amp;"
ODD_MODEL = "<i>local</i>-model"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A 0.3.5 data dir: a session whose second turn was summarised by the governor (a
    summary call and two agent steps, with cached tokens), and a session with markup in its
    key whose model no price is known for."""
    write_session(
        tmp_path,
        GOV,
        [
            user("first", 0),
            reply("one", 2),
            checkpoint(13.9),
            user("second", 10),
            *tool_round("c1", 14),
            reply("two", 14),
            user("third", 30),
            reply("three", 32),
        ],
    )
    write_session(tmp_path, ODD, [user("hi", 40), reply("hello", 42)])
    write_log(
        tmp_path,
        [
            call(1, 900, 12),
            call(11, 5000, 200, source="dream"),
            call(12, 1200, 40, cached=1000),
            call(13, 1500, 30, cached=1200),
            call(41, 700, 9, model=ODD_MODEL),
        ],
    )
    return tmp_path


@pytest.fixture
def frame(store: Path) -> pd.DataFrame:
    return ledger(store)


@pytest.fixture
def corpus(store: Path) -> sessionkit.Corpus:
    return sessionkit.load(store / "sessions" / NAMESPACE, cache=False)


def _app(corpus, key: str, usage, tmp_path: Path, **options) -> Explorer:
    return explore(corpus, key=key, usage=usage, sessions_dir=tmp_path / "forks", **options)


def _price(prompt: int, cached: int, completion: int, at: float) -> float:
    """genai-prices' own price of one call ``at`` seconds after the fixtures' T0."""
    when = datetime.fromtimestamp(T0 / 1000 + at, UTC)
    usage = Usage(input_tokens=prompt, cache_read_tokens=cached, output_tokens=completion)
    price = calc_price(usage, "gpt-4o-mini", provider_id="openai", genai_request_timestamp=when)
    return float(price.total_price)


def _rows(view: str) -> list[list[str]]:
    """The cells of the calls table, unescaped."""
    table = view.split("<table class='sk-usage-table'>")[1].split("</table>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table)[1:]
    return [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", row)] for row in rows]


def _head(view: str) -> dict[str, str]:
    """The totals line's numbers by their class, unescaped."""
    found = re.findall(r"<span class='sk-usage-(\w+)'>(.*?)</span>", view)
    return {name: html.unescape(text) for name, text in found}


def test_the_selected_turn_shows_its_calls_tokens_and_cost(
    corpus, frame: pd.DataFrame, tmp_path: Path
) -> None:
    app = _app(corpus, GOV, frame, tmp_path)
    app.turn.value = 1
    costs = [_price(5000, 0, 200, 11), _price(1200, 1000, 40, 12), _price(1500, 1200, 30, 13)]
    assert frame["cost_usd"].iloc[1:4].tolist() == costs
    view = app.usage_view.value
    assert _rows(view) == [
        ["0", "summary", "dream", "gpt-4o-mini", "openai", "5,000", "0", "200", f"${costs[0]:,.6f}", "time"],
        ["0", "agent", "user", "gpt-4o-mini", "openai", "1,200", "1,000", "40", f"${costs[1]:,.6f}", "time"],
        ["1", "agent", "user", "gpt-4o-mini", "openai", "1,500", "1,200", "30", f"${costs[2]:,.6f}", "time"],
    ]  # fmt: skip
    assert _head(view) == {
        "calls": "3",
        "prompt": "7,700",
        "cached": "2,200",
        "completion": "270",
        "cost": f"${sum(costs):,.6f}",
    }
    assert "for turn 1 of <b>telegram:gov</b>" in view
    app.turn.value = 0
    assert _rows(app.usage_view.value) == [
        ["0", "agent", "user", "gpt-4o-mini", "openai", "900", "0", "12", f"${_price(900, 0, 12, 1):,.6f}", "time"]
    ]  # fmt: skip


def test_a_turn_without_usage_says_so(corpus, frame: pd.DataFrame, tmp_path: Path) -> None:
    app = _app(corpus, GOV, frame, tmp_path)
    assert app.turn.value == 3
    assert app.usage_view.value == (
        "<div class='sk-usage-none'>No usage recorded for this turn: turn 3 is the next turn, "
        "nothing was sent for it yet.</div>"
    )
    app.turn.value = 2
    assert app.usage_view.value == (
        "<div class='sk-usage-none'>No usage recorded for this turn (turn 2 of "
        "<b>telegram:gov</b>): no call in the usage log was tied to it.</div>"
    )


def test_turns_are_matched_as_the_release_that_ran_the_session_counts_them(
    corpus, frame: pd.DataFrame, tmp_path: Path
) -> None:
    """Under 0.2.2 the governor's checkpoint is a user turn: its turn 1 is that checkpoint
    (no usage), its turn 2 the user message 0.3.5 answered as turn 1."""
    app = _app(corpus, GOV, frame, tmp_path)
    app.policy.value = "nanobot-0.2"
    assert app.turn.max == 4
    app.turn.value = 1
    assert "No usage recorded for this turn (turn 1 of" in app.usage_view.value
    app.turn.value = 2
    assert [row[:3] for row in _rows(app.usage_view.value)] == [
        ["0", "summary", "dream"],
        ["0", "agent", "user"],
        ["1", "agent", "user"],
    ]
    assert "for turn 2 of" in app.usage_view.value


def test_session_text_and_model_names_are_escaped_and_unknown_prices_named(
    corpus, frame: pd.DataFrame, tmp_path: Path
) -> None:
    app = _app(corpus, ODD, frame, tmp_path)
    app.turn.value = 0
    view = app.usage_view.value
    assert "<i>" not in view and "<b>&amp;" not in view
    assert "for turn 0 of <b>slack:&lt;b&gt;&amp;amp;</b>" in view
    assert _rows(view) == [
        ["0", "agent", "user", ODD_MODEL, "openai", "700", "0", "9", "n/a", "time"]
    ]
    assert re.search(r"<span class='sk-usage-cost'>n/a</span> \(1 of 1 calls unpriced\)", view)


def test_usage_true_reads_the_config_dir_and_no_usage_means_no_panel(
    corpus, frame: pd.DataFrame, store: Path, tmp_path: Path
) -> None:
    read = _app(corpus, GOV, True, tmp_path, config_dir=store)
    given = _app(corpus, GOV, frame, tmp_path)
    for app in (read, given):
        app.turn.value = 1
    assert read.usage_view.value == given.usage_view.value
    assert given.usage_view in given.children
    plain = _app(corpus, GOV, None, tmp_path)
    assert plain.usage is None and plain.usage_view not in plain.children
    assert plain.usage_view.value == ""


def test_a_frame_that_is_not_a_usage_frame_is_refused(corpus, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"lacks the columns \['session_key', 'turn'"):
        _app(corpus, GOV, pd.DataFrame({"step": [0]}), tmp_path)
    with pytest.raises(TypeError, match="usage= takes a frame"):
        _app(corpus, GOV, "llm_usage.sqlite3", tmp_path)
