"""The explorer's request panel without a browser: built only when asked for, its parts and
JSON equal to sessionkit.request, escaped, and a clear message where it cannot be built."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

import sessionkit
from sessionkit.calls import assembly
from sessionkit.calls.assembly import Request
from sessionkit.calls.assembly import request as real_request
from sessionkit.schema import REQUEST_PARTS, frame
from sessionkit.views.explorer import Explorer, explore, request_html

KEY = "cli:direct"


@pytest.fixture(scope="module")
def corpus(data_dir) -> sessionkit.Corpus:
    return sessionkit.load(data_dir)


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Every request the explorer builds, as (session, turn, step): sessionkit's own
    ``request`` runs, and each call is recorded."""
    calls: list[tuple[str, int, int]] = []
    real = assembly.request

    def recorded(session, *, turn, **options):
        calls.append((session.key, turn, options.get("step", 0)))
        return real(session, turn=turn, **options)

    monkeypatch.setattr(assembly, "request", recorded)
    return calls


@pytest.fixture
def app(corpus, tmp_path: Path) -> Explorer:
    return explore(corpus, key=KEY, sessions_dir=tmp_path)


def _parts(view: str) -> list[list[str]]:
    """The rows of the parts table, cell texts unescaped."""
    table = view.split("<table class='sk-request-parts'>")[1].split("</table>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table)[1:]
    return [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", row)] for row in rows]


def _json(view: str) -> str:
    """The text of the JSON ``<pre>``, unescaped."""
    return html.unescape(re.search(r"<pre[^>]*>(.*?)</pre>", view, re.S).group(1))


def test_nothing_is_built_until_the_button_is_pressed(app: Explorer, built: list) -> None:
    app.turn.value = 1
    app.max_messages.value = 30
    app.request_step.value = 1
    assert built == [] and app.request_view.value == ""
    app.request_button.click()
    assert built == [(KEY, 1, 1)]


def test_the_parts_and_the_json_are_the_request(app: Explorer, corpus, built: list) -> None:
    app.turn.value = 1
    app.request_button.click()
    expected = real_request(corpus[KEY], turn=1, settings=app.settings())
    view = app.request_view.value
    assert view.startswith(
        "<div class='sk-request-head'><b>nanobot 0.2.2 request</b> for turn 1, step 0: "
        f"4 messages, 19 tools, <span class='sk-request-tokens'>{expected.tokens:,}</span> tokens"
    )
    assert _parts(view) == [
        [p.part, f"{p.messages:,}", f"{p.tokens:,}", "yes" if p.inferred else ""]
        for p in expected.parts.itertuples(index=False)
    ]
    assert [row[0] for row in _parts(view)][-4:] == ["tools", "history", "current", "steps"]
    assert _json(view) == expected.to_json()
    assert "<rule" in expected.to_json() and "<rule" not in view, "the prompt's tags escaped"
    assert f"the request as JSON ({len(expected.to_json()):,} characters)" in view


def test_moving_a_control_takes_the_request_away_until_asked_again(
    app: Explorer, corpus, built: list
) -> None:
    app.turn.value = 1
    app.request_button.click()
    app.turn.value = 2
    stale = app.request_view.value
    assert "sk-request-stale" in stale and "request at turn 2, step 0" in stale
    assert "<pre" not in stale
    app.max_tokens.value = 3000
    app.request_step.value = 1
    assert app.request_view.value == stale, "said once, not redrawn at every move"
    app.request_button.click()
    assert built == [(KEY, 1, 0), (KEY, 2, 1)]
    expected = real_request(corpus[KEY], turn=2, step=1, settings=app.settings())
    assert _json(app.request_view.value) == expected.to_json()
    app.picker.value = "webui:f00d42"
    assert "sk-request-stale" in app.request_view.value


def test_the_next_turn_and_a_step_past_the_turn_say_what_to_do(app: Explorer, built: list) -> None:
    assert app.turn.value == 200
    app.request_button.click()
    assert app.request_view.value == (
        "<div class='sk-request-error'>Turn 200 is the next turn: nothing was sent for it "
        "yet. Move the turn slider below 200 to see a request nanobot sent.</div>"
    )
    app.turn.value = 1
    app.request_step.value = 2
    app.request_button.click()
    assert app.request_view.value == (
        "<div class='sk-request-error'>step 2 is out of range: turn 1 of session "
        "&#x27;cli:direct&#x27; made 2 calls</div>"
    )
    assert built == [(KEY, 1, 2)]


def test_without_the_release_the_panel_says_how_to_install_it(
    app: Explorer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replayed under 0.3.5, which is neither in this environment, on PATH nor installed."""
    empty = tmp_path / "releases"
    empty.mkdir()
    monkeypatch.setenv("SESSIONKIT_RELEASES_DIR", str(empty))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    app.policy.value = "nanobot-0.3.5"
    app.turn.value = 1
    app.request_button.click()
    assert app.request_view.value == (
        "<div class='sk-request-error'>nanobot-ai 0.3.5 is not installed where sessionkit "
        f"looks (this environment, the `nanobot` command on PATH, {empty}): run "
        "`sessionkit releases install 0.3.5`, or pass nanobot=&lt;its python or venv&gt;</div>"
    )


def test_session_text_is_shown_escaped() -> None:
    """Markup, a lone surrogate and a note in a hand-made request: shown as written."""
    messages = [{"role": "user", "content": "</pre><script>alert(1)</script> \ud800 & done"}]
    parts = frame(
        REQUEST_PARTS,
        {
            "part": ["system: bootstrap:<b>.md", "current"],
            "messages": [0, 1],
            "tokens": [1_234, 12],
            "inferred": [False, True],
        },
    )
    note = "rebuilt from /ws <now>"
    request = Request(
        session_key="cli:x",
        release="nanobot-0.3.5",
        turn=3,
        step=1,
        messages=messages,
        loop_messages=messages,
        tools=[],
        parts=parts,
        tokens=1_250,
        as_of_now=True,
        notes=(note,),
    )
    view = request_html(request)
    assert "<script>" not in view and "<b>.md" not in view
    assert (view.count("<pre"), view.count("</pre>")) == (1, 1)
    assert _json(view) == request.to_json().replace("\ud800", "\\ud800")
    assert _parts(view) == [
        ["system: bootstrap:<b>.md", "0", "1,234", ""],
        ["current", "1", "12", "yes"],
    ]
    assert "<div class='sk-request-note'>rebuilt from /ws &lt;now&gt;</div>" in view
    assert "<b>nanobot 0.3.5 request</b> for turn 3, step 1: 1 messages, 0 tools" in view
