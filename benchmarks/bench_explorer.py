"""Benchmark: the explorer's interactions as a user sees them, in JupyterLab and Chromium.

Serves JupyterLab on localhost (``serve_lab`` from ``tests/views/test_browser_explore.py``)
and drives Debian's ``chromium`` with Playwright.  Each trial opens a fresh notebook (a new
kernel) whose one cell calls ``sk.explore(sk.load())``, waits until the explorer shows, lets
it sit ``--settle`` seconds (a user finding the first control), then makes ``--moves``
interactions and times each in the page: from the Enter that sets a slider's value (or the
mouse press on a transcript row) to the moment the view it changes shows the new text (the
summary for a slider, written last by the kernel; the fork panel for a transcript click).

Interactions, in turn: ``max_tokens`` (readout typed), ``turn`` (one turn back),
``max_messages`` and a click on a user message in the transcript; each trial starts with the
next one, so every kind is the first interaction of some trials.

``--modes previous,after``: ``after`` is the explorer as it is; ``previous`` is the same
kernel with the explorer's redraw of before the timeline was kept (a cleared figure on plain
Agg each move, the timeline drawn before the transcript is sent); ``before`` the drawing of
before that (``savefig`` on a new canvas with constrained layout on every draw) and no
warm-up.  Each is patched in by the notebook's cell, so the modes run in the same JupyterLab,
alternately, under the same load.

Run: ``python benchmarks/bench_explorer.py`` (``--help`` for options).  Prints the medians
and writes JSON to ``benchmarks/results/bench_explorer.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import nbformat
from playwright.sync_api import Page, expect, sync_playwright

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
sys.path.insert(0, str(REPO / "tests" / "views"))

from test_browser_explore import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    _run_all_cells,
    _set_slider,
    serve_lab,
)

KINDS = ("max_tokens", "turn", "max_messages", "transcript")

# The explorer's drawing before this benchmark's change: constrained layout run on every
# redraw and savefig (a new canvas each time, two draws), and nothing warmed.
BEFORE = """
import io
from matplotlib.backend_bases import FigureCanvasBase
from sessionkit.views import explorer as _explorer

def _draw_before(self):
    from sessionkit import plot
    self._figure.set_layout_engine("constrained")
    FigureCanvasBase(self._figure)
    ax = plot.timeline_axes(self._figure)
    plot.token_timeline(self.states, ax=ax, xlim=self._xlim())
    buffer = io.BytesIO()
    self._figure.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})
    self.timeline.value = buffer.getvalue()

_explorer.Explorer._draw = _draw_before
_explorer.Explorer._warm_up = lambda self: None
"""

# The explorer's redraw before the timeline was kept (sessionkit.views.timeline_canvas): a
# cleared figure on a plain Agg canvas each move, the timeline drawn before the transcript.
PREVIOUS = """
from matplotlib.backends.backend_agg import FigureCanvasAgg
from sessionkit import plot
from sessionkit.plot.style import png
from sessionkit.simulate.states import message_states
from sessionkit.views import explorer as _explorer
from sessionkit.views.transcript import transcript_rows

class _FreshCanvas:
    def __init__(self, figure):
        self.figure = figure
        FigureCanvasAgg(figure)

    def plot(self, states, xlim=None):  # the warm-up's drawing: the whole session
        plot.token_timeline(states, ax=plot.timeline_axes(self.figure))

    def png(self, states, xlim=None):
        plot.token_timeline(states, ax=plot.timeline_axes(self.figure), xlim=xlim)
        return png(self.figure, compress_level=1)

def _refresh_previous(self, *, rows=False):
    self._scheduled = False
    self.states = message_states(self.subject(), turn=self.turn.value, settings=self.settings())
    counts = self.states.summary()
    self._draw()
    frame = self.states.frame
    if rows:
        self.transcript.rows = transcript_rows(self.subject(), frame["tokens"].tolist())
    self.transcript.status = frame["status"].astype(str).tolist()
    window = counts["window"]
    self.transcript.focus = window[0] if window else max(0, self.states.stop - 1)
    self._request_moved()
    self.summary.value = self._summary_html(counts)

_explorer.TimelineCanvas = _FreshCanvas
_explorer.Explorer._refresh = _refresh_previous
"""

PATCHES = {"before": BEFORE, "previous": PREVIOUS, "after": ""}

EXPLORE = "import sessionkit as sk\n\nsk.explore(sk.load())"

# Arms the timer: t0 at the trigger (the Enter that sets a readout, or a mouse press),
# t1 when the text of ``selector`` first differs from what it was.
ARM_JS = """
([selector, trigger]) => {
  const node = document.querySelector(selector);
  const before = node.textContent;
  window.__skT0 = null;
  window.__skT1 = null;
  const stop = new AbortController();
  const start = (event) => {
    if (trigger === "Enter" && event.key !== "Enter") return;
    if (window.__skT0 === null) { window.__skT0 = performance.now(); window.__skD0 = Date.now(); }
    stop.abort();
  };
  document.addEventListener(trigger === "Enter" ? "keydown" : "mousedown", start,
                            {capture: true, signal: stop.signal});
  const observer = new MutationObserver(() => {
    if (window.__skT0 !== null && node.textContent !== before) {
      window.__skT1 = performance.now(); window.__skD1 = Date.now();
      observer.disconnect();
    }
  });
  observer.observe(node, {subtree: true, childList: true, characterData: true});
}
"""


def _notebook(root: Path, name: str, mode: str) -> None:
    code = PATCHES[mode] + "\n" + EXPLORE
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, root / name)


def _timed(page: Page, selector: str, trigger: str, action: Any) -> float:
    page.evaluate(ARM_JS, [selector, trigger])
    action()
    page.wait_for_function("window.__skT0 !== null && window.__skT1 !== null", timeout=60_000)
    return float(page.evaluate("window.__skT1 - window.__skT0")) / 1000


def _interact(page: Page, kind: str, step: int) -> float:
    """One interaction of ``kind`` (the ``step``-th of the trial); its seconds."""
    if kind == "transcript":
        row = page.locator(f".sk-row[data-user='{1 + step}']")
        row.scroll_into_view_if_needed()
        return _timed(page, ".sk-fork-info", "mousedown", row.click)
    if kind == "turn":
        value = int(page.locator(".sk-turn .widget-readout").inner_text()) - 1
    elif kind == "max_tokens":
        value = 3000 + 100 * step
    else:
        value = 60 - step
    return _timed(
        page,
        ".sk-summary",
        "Enter",
        lambda: _set_slider(page, f".sk-{kind.replace('_', '-')}", value),
    )


def _shutdown_kernels(base: str, token: str) -> None:
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as answer:
        sessions = json.load(answer)
    for session in sessions:
        request = urllib.request.Request(
            f"{base}/api/sessions/{session['id']}?token={token}", method="DELETE"
        )
        urllib.request.urlopen(request, timeout=30).close()


def run_trial(
    context: Any, base: str, token: str, name: str, first: int, moves: int, settle: float
) -> dict[str, Any]:
    page = context.new_page()
    try:
        page.goto(f"{base}/lab/tree/{name}?token={token}&reset")
        started = time.monotonic()
        _run_all_cells(page)
        expect(page.locator(".sk-summary .sk-in-window")).to_be_visible()
        page.locator(".sk-transcript[data-rows]").wait_for()
        shown = time.monotonic() - started
        page.wait_for_timeout(settle * 1000)
        times = []
        for step in range(moves):
            kind = KINDS[(first + step) % len(KINDS)]
            times.append({"kind": kind, "seconds": _interact(page, kind, step)})
        return {"shown_after": shown, "interactions": times}
    finally:
        page.close()
        _shutdown_kernels(base, token)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(trials: list[dict[str, Any]]) -> dict[str, Any]:
    firsts = [t["interactions"][0]["seconds"] for t in trials]
    later = [i["seconds"] for t in trials for i in t["interactions"][1:]]
    by_kind = {
        kind: {
            "first": _median(
                [
                    t["interactions"][0]["seconds"]
                    for t in trials
                    if t["interactions"][0]["kind"] == kind
                ]
            ),
            "later": _median(
                [i["seconds"] for t in trials for i in t["interactions"][1:] if i["kind"] == kind]
            ),
        }
        for kind in KINDS
    }
    return {
        "first_median": _median(firsts),
        "first_max": max(firsts),
        "later_median": _median(later),
        "later_p90": statistics.quantiles(later, n=10)[-1] if len(later) >= 2 else None,
        "later_max": max(later) if later else None,
        "shown_after_median": _median([t["shown_after"] for t in trials]),
        "by_kind": by_kind,
        "n_first": len(firsts),
        "n_later": len(later),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=8, help="fresh kernels per mode (default 8)")
    parser.add_argument("--moves", type=int, default=8, help="interactions per trial (default 8)")
    parser.add_argument(
        "--settle",
        type=float,
        default=1.5,
        help="seconds between the explorer showing and the first interaction (default 1.5)",
    )
    parser.add_argument(
        "--modes", default="previous,after", help="comma-separated: before, previous, after"
    )
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not Path(CHROMIUM).exists():
        sys.exit(f"Debian's chromium is not installed at {CHROMIUM}: run `make chromium`")
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="bench-explorer-") as tmp:
        tmp_path = Path(tmp)
        root = tmp_path / "root"
        root.mkdir()
        for trial in range(args.trials):
            for mode in modes:
                _notebook(root, f"{mode}-{trial}.ipynb", mode)
        with serve_lab(tmp_path) as (base, token), sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"),
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1280, "height": 1400},
            )
            context.set_default_timeout(60_000)
            expect.set_options(timeout=60_000)
            try:
                for trial in range(args.trials):
                    for mode in modes:  # alternately, so both see the same load
                        result = run_trial(
                            context,
                            base,
                            token,
                            f"{mode}-{trial}.ipynb",
                            trial,
                            args.moves,
                            args.settle,
                        )
                        runs[mode].append(result)
                        print(
                            f"{mode:>6} trial {trial}: "
                            + " ".join(
                                f"{i['kind']}={i['seconds']:.3f}" for i in result["interactions"]
                            ),
                            flush=True,
                        )
            finally:
                context.close()
    summary = {mode: summarize(trials) for mode, trials in runs.items()}
    print()
    print(
        f"{'mode':<8}{'first (median)':>16}{'first (max)':>13}{'later (median)':>16}{'later (p90)':>13}{'later (max)':>13}"
    )
    for mode, s in summary.items():
        print(
            f"{mode:<8}{s['first_median']:>16.3f}{s['first_max']:>13.3f}{s['later_median']:>16.3f}"
            f"{s['later_p90'] or float('nan'):>13.3f}{s['later_max'] or float('nan'):>13.3f}"
        )
    print("\nfirst / later medians by kind (s):")
    for mode, s in summary.items():
        cells = "  ".join(
            f"{kind} {v['first'] if v['first'] is not None else float('nan'):.3f}/{v['later'] if v['later'] is not None else float('nan'):.3f}"
            for kind, v in s["by_kind"].items()
        )
        print(f"  {mode:<8}{cells}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "bench_explorer.json"
    out.write_text(
        json.dumps(
            {
                "args": vars(args),
                "machine": {"python": platform.python_version(), "platform": platform.platform()},
                "summary": summary,
                "trials": runs,
            },
            indent=2,
        )
    )
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
