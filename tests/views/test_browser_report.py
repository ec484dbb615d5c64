"""``sessionkit report`` on a store of hostile keys, titles and contents, opened in Chromium:
no session text runs as script or becomes an element of the page.

The report is written by the real ``write_report`` (the tour run headless), served from
localhost and opened with Playwright on Debian's ``chromium`` (``executable_path``, never
Playwright's own browser download); every request off localhost is refused.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Route, sync_playwright

from sessionkit.views.report import write_report

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
PAYLOADS = [
    "<script>window.__pwned=1</script>",
    '<script src="data:text/javascript,window.__pwned=2"></script>',
    '<img src="x" onerror="window.__pwned=3">',
    '<svg onload="window.__pwned=4"><circle r="1" /></svg>',
    '<iframe src="javascript:parent.__pwned=5"></iframe>',
    '<a href="javascript:window.__pwned=6">click</a>',
    "[md link](javascript:window.__pwned=7)",
    '` `` ``` <img src="x" onerror="document.title=\'pwned\'"> `',
    "$\\notacommand{$ $$\\x{$$",
    '"><script>document.title="pwned"</script>',
]
INJECTED = (
    "script[src^='data:'], [onerror], [onload], iframe, svg, a[href^='javascript:'], img[src='x']"
)


def _file_name(key: str) -> str:
    return re.sub(r'[<>:"/\\|?*]', "_", key.replace(":", "_")).strip() + ".jsonl"


def _write(
    folder: Path, key: str, title: str, contents: list[str], reply: str = "assistant"
) -> None:
    meta = {
        "_type": "metadata",
        "key": key,
        "created_at": "2026-01-01T00:00:00",
        "updated_at": "2026-01-01T00:00:00",
        "metadata": {"title": title},
        "last_consolidated": 0,
    }
    lines = [json.dumps(meta)]
    for i, content in enumerate(contents):
        role = "user" if i % 2 == 0 else reply
        stamp = f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}"
        lines.append(json.dumps({"role": role, "content": content, "timestamp": stamp}))
    (folder / _file_name(key)).write_text("\n".join(lines) + "\n", encoding="utf-8")


BIGGEST = "web:$\\notacommand{$ ` " + PAYLOADS[2] + " " + PAYLOADS[3] + " `"  # plotted too
OVER_CAP = "cap:` " + " ".join(PAYLOADS[i] for i in (1, 4, 5, 0)) + " `"


def _hostile_store(folder: Path) -> Path:
    folder.mkdir(parents=True)
    # Two sessions over the 2,000-message file cap, the larger one the largest of all: their
    # keys are in every sentence of the tour's conclusions.
    _write(folder, BIGGEST, PAYLOADS[0], [f"turn {i} {PAYLOADS[i % 10]}" for i in range(2002)])
    _write(folder, OVER_CAP, PAYLOADS[1], [f"turn {i}" for i in range(2001)])
    for n, payload in enumerate(PAYLOADS):
        _write(folder, f"t{n}:{payload}", payload, [payload, f"reply {payload}", payload], payload)
    return folder


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The report of the hostile store, served on localhost: (URL, HTML file)."""
    store = _hostile_store(tmp_path / "ws" / "sessions")
    out = write_report(store, tmp_path / "site" / "report.html", timeout=120, create=True)
    handler = partial(SimpleHTTPRequestHandler, directory=str(out.parent))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{out.name}", out
    finally:
        server.shutdown()
        server.server_close()


def _local_only(route: Route) -> None:
    if route.request.url.startswith("http://127.0.0.1:"):
        route.continue_()
    else:
        route.abort()


def test_hostile_session_text_never_runs_in_the_report(served: tuple[str, Path]) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Debian's chromium is not installed at {CHROMIUM}: run `make chromium`")
    url, html_file = served
    html = html_file.read_text(encoding="utf-8")
    assert "__pwned" in html  # the payloads are in the report, as text
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.route("**/*", _local_only)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(url, wait_until="load")
            page.wait_for_timeout(300)  # late handlers (onerror of a failed image) run by now
            assert page.evaluate("window.__pwned") is None
            assert "pwned" not in page.title()
            found = page.eval_on_selector_all(
                INJECTED, "nodes => nodes.map(n => n.outerHTML.slice(0, 120))"
            )
            assert found == []
            scripts = page.eval_on_selector_all(
                "script", "nodes => nodes.filter(n => n.text.includes('__pwned')).length"
            )
            assert scripts == 0
            shown = page.locator(".jp-OutputArea-output.jp-RenderedMarkdown").all_inner_texts()
            (conclusions,) = [t for t in shown if "The largest session" in t]
            # The keys are shown as written, backticks, tags and all.
            assert conclusions.count(BIGGEST) == 3 and conclusions.count(OVER_CAP) == 1
            assert "<script>window.__pwned=1</script>" in page.inner_text("body")
            assert errors == []
        finally:
            browser.close()
