"""The explorer's experiment panel in a real JupyterLab and Chromium: pick a turn with the
slider, click "run", see each setting's answer beside the session's with its marks, and the
button turn off once the budget is spent.

The kernel asks a stub OpenAI-compatible server this test runs on 127.0.0.1
(:mod:`support.stub_rules`; its answers follow a rule of the request); JupyterLab and
Chromium are started as in ``test_browser_explore.py``.  Screenshot:
``test-output/browser/experiment.png``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from playwright.sync_api import expect, sync_playwright
from support.stub_openai import Reply, ToolCall, Usage
from support.stub_rules import RuleServer
from test_browser_explore import (
    CHROMIUM,
    CHROMIUM_ARGS,
    LAYOUT_JS,
    SHOTS,
    TIMEOUT_MS,
    _run_all_cells,
    _set_slider,
    serve_lab,
)

import sessionkit

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
KEY = "cli:direct"
TURN = 2
MODEL = "gpt-4o-mini"
API_KEY = "sk-browser-3e1f-NEVER-SHOWN"
FACT = "perfect, ship it"
"""The session's first user message: out of a 4-message window by turn 2."""
USAGE = Usage(prompt_tokens=1000, completion_tokens=20, cached_tokens=200)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content)


def _rule(stored: ToolCall) -> Any:
    """After a tool result "done <b>&"; asked about Toronto, the session's own tool call when
    its first user message is in the context, else "I do not know"."""

    def answer(body: dict[str, Any], seen: int) -> Reply:
        messages = body["messages"]
        if messages[-1]["role"] == "tool":
            return Reply(USAGE, text="done <b>&")
        if any(FACT in _text(m) for m in messages[1:-1]):
            return Reply(USAGE, tool_calls=(stored,))
        return Reply(USAGE, text="I do not know")

    return answer


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[str, RuleServer, dict[str, str]]]:
    """A workspace whose config names the stub, a notebook showing the explorer with an
    experiment panel (a 4-message window and the default; 3 calls of budget), and JupyterLab
    serving it; yields (notebook URL, stub, the session's function call at turn 2, step 0)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Debian's chromium is not installed at {CHROMIUM}: run `make chromium`")
    root = tmp_path / "root"
    root.mkdir()
    shutil.copytree(REPO / "data" / "sessions", tmp_path / "workspace" / "sessions")
    with RuleServer(lambda body, seen: Reply(USAGE, text="unset")) as stub:
        made = sessionkit.load(tmp_path / "workspace")[KEY].messages[9]  # turn 2, step 0
        function = made["tool_calls"][0]["function"]
        stub.rule = _rule(ToolCall(function["name"], json.loads(function["arguments"])))
        config = {
            "agents": {"defaults": {"model": MODEL}},
            "providers": {"custom": {"apiKey": API_KEY, "apiBase": stub.url}},
        }
        (tmp_path / "config.json").write_text(json.dumps(config))
        code = (
            "import sessionkit as sk\n\n"
            f"corpus = sk.load({str(tmp_path / 'workspace')!r})\n"
            f"sk.explore(corpus, key={KEY!r}, sessions_dir={str(tmp_path / 'forks')!r},\n"
            "           experiment=dict(grid={'max_messages': [4, 0]}, budget_calls=3, "
            "cache=False))"
        )
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        nbformat.write(nb, root / "experiment.ipynb")
        try:
            with serve_lab(tmp_path) as (base, token):
                yield f"{base}/lab/tree/experiment.ipynb?token={token}&reset", stub, function
        except RuntimeError as exc:
            pytest.fail(str(exc))


def test_run_shows_the_answers_and_marks_in_chromium(
    lab: tuple[str, RuleServer, dict[str, str]], tmp_path: Path
) -> None:
    url, stub, function = lab
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 1400},
        )
        browser.set_default_timeout(TIMEOUT_MS)
        expect.set_options(timeout=TIMEOUT_MS)
        page = browser.pages[0] if browser.pages else browser.new_page()
        try:
            page.goto(url)
            _run_all_cells(page)
            page.locator(".sk-experiment").wait_for()
            run = page.locator("button.sk-exp-run")
            expect(run).to_be_enabled()
            expect(page.locator(".sk-exp-budget")).to_have_text(
                "budget of all runs together: 3 calls; used 0 calls, $0.000000"
            )
            _set_slider(page, ".sk-turn", TURN)
            expect(page.locator(".sk-summary")).to_contain_text(f"at turn {TURN}")
            assert stub.received == []
            run.click()
            rows = page.locator(".sk-exp-view tr.sk-exp-row")
            expect(rows).to_have_count(4)
            # Step by step; the 4-message window, then the default: the last over budget.
            expect(page.locator(".sk-exp-same")).to_have_text(["✗", "✓", "✓", "–"])
            expect(page.locator(".sk-exp-outcome")).to_contain_text(
                ["answered", "answered", "answered", "over budget"]
            )
            expect(page.locator(".sk-exp-answer")).to_have_text(
                ["I do not know", f"{function['name']}({function['arguments']})", "done <b>&", ""]
            )
            expect(page.locator(".sk-exp-original").first).to_contain_text("Let me check.")
            expect(page.locator(".sk-exp-similarity")).to_have_text(["0.23", "0.00", "0.06", "–"])
            expect(run).to_be_disabled()
            expect(page.locator(".sk-exp-budget")).to_contain_text(
                "run is off: the budget is spent (used 3 calls"
            )
            found = page.locator(".sk-explorer").evaluate(LAYOUT_JS)
            assert found["over"] == [], f"these pass the right edge: {found['over']}"
            page.locator(".sk-experiment").screenshot(path=SHOTS / "experiment.png")
            assert page.locator("script", has_text="done").count() == 0
        finally:
            page.screenshot(path=SHOTS / "experiment-last.png", full_page=True)
            browser.close()
    assert len(stub.received) == 3
    assert {r.authorization for r in stub.received} == {f"Bearer {API_KEY}"}
