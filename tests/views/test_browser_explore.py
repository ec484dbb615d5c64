"""The explorer in a real JupyterLab and Chromium: layout, pick, move limits, select, edit, fork.

Starts ``jupyter lab`` on a free localhost port with a random token and a temporary root,
opens a notebook that shows ``sessionkit.explore`` on the repository's ``data/``, and drives
it with Playwright on Debian's ``chromium`` (never Playwright's own browser download).
Screenshots go to ``test-output/browser/`` (``explorer-1280.png`` and ``explorer-1920.png``
show the explorer at the two widths whose layout is checked).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import Page, expect, sync_playwright

import sessionkit
from sessionkit.nanobot.naming import session_path
from sessionkit.simulate.states import message_states
from sessionkit.simulate.windowing import windows

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "test-output" / "browser"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KEY = "webui:f00d42"
MAX_TOKENS = 3000
USER = 5
EDIT = "What changed in the nginx config since yesterday? (edited in the browser)"
TARGET = "webui:f00d42-browser-fork"
MAX_MESSAGES = 30
WIDTHS = (1280, 1920)
TIMEOUT_MS = 60_000

# Every visible element of the explorer whose box passes the explorer's right edge or the
# notebook cell's, and every picker entry wider than the picker's text area.
LAYOUT_JS = """
(root) => {
  const cell = root.closest(".jp-Cell").getBoundingClientRect();
  const right = Math.min(root.getBoundingClientRect().right, cell.right) + 0.5;
  const name = (n) => `${n.tagName.toLowerCase()}.${[...n.classList].join(".")}`;
  const over = [];
  if (root.getBoundingClientRect().right > cell.right + 0.5) over.push(name(root));
  for (const node of root.querySelectorAll("*")) {
    const box = node.getBoundingClientRect();
    if ((box.width || box.height) && box.right > right) {
      over.push(`${name(node)} ends at ${box.right} > ${right}`);
    }
  }
  const select = root.querySelector(".sk-picker select");
  const style = getComputedStyle(select);
  const context = document.createElement("canvas").getContext("2d");
  context.font = style.font;
  const room = select.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const cut = [...select.options]
    .map((option) => [option.text, context.measureText(option.text).width])
    .filter(([, width]) => width > room - 4)
    .map(([text, width]) => `${text} (${width} > ${room - 4})`);
  if (select.scrollWidth > select.clientWidth) cut.push(`scrollWidth ${select.scrollWidth}`);
  return {over, cut, width: root.getBoundingClientRect().width};
}
"""

# Whether transcript row ``idx`` is inside the transcript's scrolled viewport.
ROW_IN_VIEW_JS = """
([root, idx]) => {
  const list = root.querySelector(".sk-rows").getBoundingClientRect();
  const row = root.querySelector(`.sk-row[data-idx="${idx}"]`).getBoundingClientRect();
  return row.top >= list.top - 1 && row.top < list.bottom - 20;
}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _notebook(root: Path, forks: Path) -> str:
    code = (
        "import sessionkit\n"
        "from sessionkit.views.explorer import explore\n\n"
        f"corpus = sessionkit.load({str(REPO / 'data')!r})\n"
        f"explore(corpus, sessions_dir={str(forks)!r})"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, root / "explore.ipynb")
    return "explore.ipynb"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A JupyterLab server on a temporary root; yields (notebook URL, forks folder)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Debian's chromium is not installed at {CHROMIUM}: run `make chromium`")
    root, forks = tmp_path / "root", tmp_path / "forks"
    for folder in (root, forks):
        folder.mkdir()
    name = _notebook(root, forks)
    try:
        with serve_lab(tmp_path) as (base, token):
            yield f"{base}/lab/tree/{name}?token={token}&reset", forks
    except RuntimeError as exc:
        pytest.fail(str(exc))


@contextlib.contextmanager
def serve_lab(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``jupyter lab`` serving ``tmp_path / "root"`` on a free localhost port with a random
    token, its settings and kernels' state under ``tmp_path / "home"``; yields (base URL,
    token).  Also used by ``benchmarks/bench_explorer.py``."""
    root, home = tmp_path / "root", tmp_path / "home"
    home.mkdir()
    news = home / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    port, token = _free_port(), secrets.token_hex(16)
    env = os.environ | {
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "IPYTHONDIR": str(home / "ipython"),
    }
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        f"--port={port}",
        "--ServerApp.ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.workspaces_dir={home / 'workspaces'}",
        f"--LabApp.user_settings_dir={home / 'settings'}",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
        "--ServerApp.terminals_enabled=False",
    ]
    if os.geteuid() == 0:
        command.append("--allow-root")
    log = (tmp_path / "lab.log").open("wb")
    server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise RuntimeError(
                        f"JupyterLab did not start:\n{(tmp_path / 'lab.log').read_text()}"
                    ) from None
                time.sleep(0.3)
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=20)
        log.close()


def _run_all_cells(page: Page) -> None:
    """Run > Run All Cells once the kernel is idle; again if the run got lost while connecting."""
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()
    prompt = page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-prompt").first
    for _ in range(3):
        expect(page.locator(".jp-StatusBar-Widget").get_by_text("Idle")).to_be_visible()
        page.locator(".lm-MenuBar-itemLabel").get_by_text("Run", exact=True).click()
        page.locator(".lm-Menu-itemLabel").get_by_text("Run All Cells", exact=True).click()
        try:
            expect(prompt).not_to_have_text("[ ]:", timeout=5_000)
            return
        except AssertionError:
            continue
    pytest.fail("JupyterLab never ran the notebook's cell")


def _in_window(page: Page) -> int:
    return int(page.locator(".sk-summary .sk-in-window").inner_text())


def _set_slider(page: Page, css: str, value: int) -> None:
    readout = page.locator(f"{css} .widget-readout")
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(str(value))
    page.keyboard.press("Enter")


def _check_layout(page: Page, width: int) -> None:
    """At ``width`` px the explorer fits its cell and shows every picker entry whole."""
    page.set_viewport_size({"width": width, "height": 1400})
    explorer = page.locator(".sk-explorer")
    page.wait_for_timeout(500)  # let JupyterLab lay the notebook out again
    found = explorer.evaluate(LAYOUT_JS)
    explorer.screenshot(path=SHOTS / f"explorer-{width}.png")
    assert found["over"] == [], f"at {width} px these pass the right edge: {found['over']}"
    assert found["cut"] == [], f"at {width} px these picker entries are cut: {found['cut']}"


def _expect_row_in_view(page: Page, idx: int) -> None:
    """The transcript has scrolled so that message ``idx`` is in its viewport."""
    explorer = page.locator(".sk-explorer").element_handle()
    expect(page.locator(f".sk-row[data-idx='{idx}']")).to_have_attribute("data-status", "in_window")
    page.wait_for_function(ROW_IN_VIEW_JS, arg=[explorer, idx], timeout=10_000)


def test_explorer_in_chromium(lab: tuple[str, Path]) -> None:
    url, forks = lab
    SHOTS.mkdir(parents=True, exist_ok=True)
    corpus = sessionkit.load(REPO / "data")
    session = corpus[KEY]
    kept = windows(session, grid={"max_tokens": [0, MAX_TOKENS]}, include_timestamps=True, at="end")
    before, expected = kept["messages_kept"].tolist()
    assert expected == len(session.get_history(120, max_tokens=MAX_TOKENS, include_timestamps=True))
    assert expected != before, "pick a MAX_TOKENS that changes this session's window"
    firsts = [
        message_states(session, max_tokens=budget, max_messages=count).summary()["window"][0]
        for count, budget in [(None, MAX_TOKENS), (None, 0), (MAX_MESSAGES, 0)]
    ]
    assert len(set(firsts)) == 3, "each limit change moves the window"

    with sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(forks.parent / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": WIDTHS[0], "height": 1400},
        )
        browser.set_default_timeout(TIMEOUT_MS)
        expect.set_options(timeout=TIMEOUT_MS)
        page = browser.pages[0] if browser.pages else browser.new_page()
        try:
            page.goto(url)
            _run_all_cells(page)
            transcript = page.locator(".sk-transcript[data-rows]")
            transcript.wait_for()
            page.screenshot(path=SHOTS / "1-explorer.png", full_page=True)
            for width in WIDTHS:
                _check_layout(page, width)
            page.set_viewport_size({"width": WIDTHS[0], "height": 1400})

            page.locator(".sk-search input").fill("f00d42")
            expect(page.locator(".sk-picker option")).to_have_count(1)
            page.locator(".sk-picker select").select_option(index=0)
            expect(page.locator(".sk-summary")).to_contain_text(KEY)
            expect(transcript).to_have_attribute("data-rows", str(len(session.messages)))
            assert _in_window(page) == before

            _set_slider(page, ".sk-max-tokens", MAX_TOKENS)
            expect(page.locator(".sk-summary .sk-in-window")).to_have_text(str(expected))
            _expect_row_in_view(page, firsts[0])
            page.screenshot(path=SHOTS / "2-max-tokens.png", full_page=True)
            _set_slider(page, ".sk-max-tokens", 0)
            _expect_row_in_view(page, firsts[1])
            _set_slider(page, ".sk-max-messages", MAX_MESSAGES)
            _expect_row_in_view(page, firsts[2])
            page.screenshot(path=SHOTS / "2-max-messages.png", full_page=True)

            page.locator(f".sk-row[data-user='{USER}']").click()
            text = page.locator(".sk-fork-text textarea")
            original = session.messages[_user_position(session, USER)]["content"]
            expect(text).to_have_value(original)
            text.fill(EDIT)
            page.locator(".sk-fork-target input").fill(TARGET)
            page.locator("button.sk-fork-write").click()
            expect(page.locator(".sk-fork-result .sk-ok")).to_contain_text("Wrote")
            page.screenshot(path=SHOTS / "3-fork.png", full_page=True)

            page.locator("button.sk-fork-write").click()
            expect(page.locator(".sk-fork-result .sk-error")).to_contain_text(
                "tick “overwrite an existing fork”"
            )
        finally:
            page.screenshot(path=SHOTS / "last.png", full_page=True)
            browser.close()

    written = session_path(TARGET, forks)
    lines = [json.loads(line) for line in written.read_text(encoding="utf-8").splitlines()]
    assert lines[0]["key"] == TARGET
    cut = _user_position(session, USER)
    assert lines[1:-1] == session.messages[:cut]
    assert lines[-1]["role"] == "user" and lines[-1]["content"] == EDIT


def _user_position(session: sessionkit.Session, user: int) -> int:
    return [i for i, m in enumerate(session.messages) if m.get("role") == "user"][user]
