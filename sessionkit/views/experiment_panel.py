"""The explorer's experiment panel: the selected turn's calls asked again, each answer beside
the one the session stored.

Its calls are the selected turn's rows of :func:`sessionkit.requests` (the session under the
release and history settings the explorer shows, and the settings ``grid`` the caller
sweeps); :func:`sessionkit.experiment` plans them, reads the answers kept from earlier runs
and, on the "run" button only, asks the endpoint under the caller's budget, which every run
of the panel shares.  The API key stays in this process: never in a widget's state or the
HTML, where every answer, error and session text is escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import pandas as pd

from sessionkit.calls.frame import requests
from sessionkit.experiments.experiment import experiment
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import HistorySettings
from sessionkit.schema import REQUEST_SETTINGS, Reported
from sessionkit.store.text import shown

__all__ = [
    "OPTIONS",
    "ExperimentOptions",
    "ExperimentPanel",
    "experiment_html",
    "experiment_options",
]

OPTIONS = (
    "models",
    "edits",
    "endpoint",
    "api_key",
    "params",
    "grid",
    "budget_calls",
    "budget_usd",
    "samples",
    "concurrency",
    "workspace",
    "nanobot",
    "runtime",
    "cache",
    "judge",
)
"""What ``explore(experiment={...})`` takes: :func:`sessionkit.experiment`'s keywords of the
same names, and ``grid``, the history settings swept besides the explorer's own (as
:func:`sessionkit.requests` takes it)."""


@dataclass(frozen=True)
class ExperimentOptions:
    """The panel's experiment, as the explorer's caller gave it (``api_key`` left out of its
    repr)."""

    models: str | list[str] | None = None
    edits: Mapping[str, Any] | None = None
    endpoint: str | None = None
    api_key: str | None = field(default=None, repr=False)
    params: Mapping[str, Any] | None = None
    grid: Mapping[str, Any] | None = None
    budget_calls: int | None = None
    budget_usd: float | None = None
    samples: int = 1
    concurrency: int = 8
    workspace: str | Path | None = None
    nanobot: Any = None
    runtime: Mapping[str, Any] | None = None
    cache: bool | None = None
    judge: Any = None


def experiment_options(given: Mapping[str, Any]) -> ExperimentOptions:
    """``given`` (``explore(experiment=...)``) as options, or a TypeError naming a keyword it
    does not take."""
    if not isinstance(given, Mapping):
        raise TypeError(
            f"experiment= takes a dict of sessionkit.experiment's keywords, not {type(given).__name__}"
        )
    unknown = [str(name) for name in given if name not in OPTIONS]
    if unknown:
        raise TypeError(
            f"experiment= cannot take {', '.join(map(repr, unknown))}; it takes {', '.join(OPTIONS)}"
        )
    return ExperimentOptions(**given)


_WRAP = "white-space:pre-wrap;overflow-wrap:anywhere;max-height:240px;overflow:auto;margin:0"
"""Answers keep their lines, wrap anywhere and scroll when long (so the panel fits its cell)."""

_TABLE = "width:100%;table-layout:fixed;border-collapse:collapse;font-size:12px;line-height:1.4"
_ROW = "vertical-align:top;border-top:1px solid #ddd"


def _text(value: Any) -> str:
    return "" if value is None or value is pd.NA else html.escape(shown(value) or "")


def _answer(text: Any, tool_calls: Any) -> str:
    """An answer's text and tool calls (``name(arguments)``), escaped."""
    parts = []
    if isinstance(text, str) and text:
        parts.append(f"<div class='sk-exp-text' style='{_WRAP}'>{_text(text)}</div>")
    for call in tool_calls or ():
        parts.append(
            f"<div class='sk-exp-tool' style='{_WRAP}'><code>{_text(call['name'])}("
            f"{_text(call['arguments'])})</code></div>"
        )
    return "".join(parts) or "<div class='sk-exp-empty'>(empty)</div>"


def _mark(same: Any) -> str:
    """The same-action mark: ✓ (the session's action), ✗ (another) or – (nothing to compare)."""
    if same is None or same is pd.NA:
        return "<td class='sk-exp-same' data-same='' title='no answer or none stored'>–</td>"
    if same:
        return (
            "<td class='sk-exp-same' data-same='true' title='the same action' "
            "style='color:#2ca02c'>✓</td>"
        )
    return (
        "<td class='sk-exp-same' data-same='false' title='another action' "
        "style='color:#d62728'>✗</td>"
    )


def _dollars(value: float) -> str:
    return f"${value:,.6f}"


def _outcome(row: Mapping[str, Any]) -> str:
    """The outcome, its price (a planned call: its worst case) and error, escaped."""
    outcome = str(row["outcome"])
    cost, worst = row["cost_usd"], row["worst_cost_usd"]
    if outcome in ("answered", "stored") and not math.isnan(cost):
        outcome += f", {_dollars(cost)}"
    elif outcome == "planned" and not math.isnan(worst):
        outcome += f", at most {_dollars(worst)}"
    error = row["error"]
    note = f"<div class='sk-exp-error'>{_text(error)}</div>" if isinstance(error, str) else ""
    return f"{html.escape(outcome)}{note}"


def _labels(results: pd.DataFrame) -> list[str]:
    """Each row's setting: the release and history settings that vary among the rows, the
    model, the edit and (several asked) the sample."""
    varying = [
        name
        for name in ("policy", *REQUEST_SETTINGS)
        if results[name].astype("string").nunique(dropna=False) > 1
    ]
    several = results["sample"].max() > 0 if len(results) else False
    labels = []
    for row in results.to_dict("records"):
        parts = [f"{name}={row[name]}" for name in varying]
        parts.append(str(row["model"]))
        if isinstance(row["edit"], str):
            parts.append(f"edit {row['edit']}")
        if several:
            parts.append(f"sample {row['sample']}")
        labels.append(" · ".join(_text(p) for p in parts))
    return labels


def _similarity(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.2f}"


def experiment_html(results: pd.DataFrame, key: str, turn: int) -> str:
    """Turn ``turn``'s experiment as the panel shows it: for each step, the answer the session
    stored beside each setting's answer, with its same-action mark, text similarity, judge
    score (a column only when a judge scored some answer), outcome and price (all text
    escaped)."""
    where = f"turn {turn} of <b>{_text(key)}</b>"
    if results.empty:
        return (
            f"<div class='sk-exp-none'>No calls at {where}: nanobot did not call the model.</div>"
        )
    counts = results["outcome"].value_counts()
    tally = ", ".join(f"{int(n)} {html.escape(str(name))}" for name, n in counts.items() if n)
    spent = results.loc[results["outcome"] == "answered", "cost_usd"].sum()
    head = (
        f"<div class='sk-exp-head'><b>Experiment</b> for {where} at "
        f"{_text(results['host'].iloc[0])}: <span class='sk-exp-tally'>{tally}</span>; "
        f"this run spent <span class='sk-exp-spent'>{_dollars(float(spent))}</span></div>"
    )
    labels = pd.Series(_labels(results), index=results.index)
    judged = bool(results["judge_score"].notna().any())
    shares = (28, 14, 28, 7, 7, 6, 10) if judged else (30, 15, 30, 7, 7, 11)
    widths = "".join(f"<col style='width:{w}%'>" for w in shares)
    header = (
        f"<colgroup>{widths}</colgroup>"
        "<tr><th>the session's answer</th><th>setting</th><th>answer</th>"
        "<th title='the same tool calls with JSON-equal arguments, or both text'>same action</th>"
        '<th title="difflib\'s ratio of the two texts">similarity</th>'
        + ("<th title='the score the judge gave, in [0, 1]'>judge</th>" if judged else "")
        + "<th>outcome</th></tr>"
    )
    tables = []
    for step, group in results.groupby("step", sort=True):
        rows = []
        for n, (at, row) in enumerate(zip(group.index, group.to_dict("records"), strict=True)):
            answered = row["tool_calls"] is not None
            original = ""
            if n == 0:
                stored = row["original_text"]
                answer = (
                    "<div class='sk-exp-empty'>none stored</div>"
                    if stored is pd.NA
                    else _answer(stored, row["original_tool_calls"])
                )
                original = f"<td class='sk-exp-original' rowspan='{len(group)}'>{answer}</td>"
            rows.append(
                f"<tr class='sk-exp-row' data-outcome='{html.escape(str(row['outcome']))}' "
                f"style='{_ROW}'>"
                f"{original}<td class='sk-exp-setting'>{labels[at]}</td>"
                f"<td class='sk-exp-answer'>"
                f"{_answer(row['answer_text'], row['tool_calls']) if answered else ''}"
                f"</td>{_mark(row['same_action'])}"
                f"<td class='sk-exp-similarity'>{_similarity(row['text_similarity'])}</td>"
                + (
                    f"<td class='sk-exp-judge'>{_similarity(row['judge_score'])}</td>"
                    if judged
                    else ""
                )
                + f"<td class='sk-exp-outcome'>{_outcome(row)}</td></tr>"
            )
        tables.append(
            f"<div class='sk-exp-step'>step {int(step)}</div>"
            f"<table class='sk-exp-table' data-step='{int(step)}' style='{_TABLE}'>{header}"
            f"{''.join(rows)}</table>"
        )
    return head + "".join(tables)


def _message(text: str, css: str) -> str:
    return f"<div class='{css}'>{html.escape(shown(text) or '')}</div>"


class ExperimentPanel(widgets.VBox):
    """The panel: "kept answers" shows the plan and the answers kept from earlier runs
    (nothing sent), "run" asks the endpoint under what is left of the budget (disabled, with
    the reason shown, when there is none).  The explorer tells it the selected turn
    (:meth:`select`); nothing is built or sent before a button is pressed."""

    def __init__(self, given: Mapping[str, Any], config_dir: str | Path | None = None) -> None:
        self.options = experiment_options(given)
        self.config_dir = config_dir
        self.used_calls = 0
        """Calls answered by this panel's runs (stored answers and refused calls are free)."""
        self.spent_usd = 0.0
        """Dollars those answers cost, as genai-prices prices their reported usage."""
        self.results: Reported | None = None
        """The frame shown last (:data:`sessionkit.schema.EXPERIMENTS`), None before any."""
        self._selected: tuple[Session, int, HistorySettings] | None = None
        self._shown_for: tuple[Any, ...] | None = None
        self._calls: tuple[tuple[Any, ...], pd.DataFrame] | None = None
        self.show_button = widgets.Button(
            description="kept answers",
            tooltip="the plan and the answers kept from earlier runs: sends nothing",
        )
        self.show_button.add_class("sk-exp-show")
        self.run_button = widgets.Button(description="run", button_style="warning")
        self.run_button.add_class("sk-exp-run")
        self.budget_view = widgets.HTML(layout=widgets.Layout(width="auto"))
        self.budget_view.add_class("sk-exp-budget")
        self.view = widgets.HTML(layout=widgets.Layout(width="auto"))
        self.view.add_class("sk-exp-view")
        bar = widgets.HBox(
            [self.show_button, self.run_button, self.budget_view],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
        )
        super().__init__(
            [widgets.HTML("<b>Experiment</b>"), bar, self.view],
            layout=widgets.Layout(width="auto", min_width="0"),
        )
        self.add_class("sk-experiment")
        self.show_button.on_click(self.show)
        self.run_button.on_click(self.run)
        self._show_budget()

    def left(self) -> tuple[int | None, float | None]:
        """What is left of the budget: calls and dollars (None: not bounded that way)."""
        calls, usd = self.options.budget_calls, self.options.budget_usd
        return (
            None if calls is None else max(0, calls - self.used_calls),
            None if usd is None else max(0.0, usd - self.spent_usd),
        )

    def blocked(self) -> str | None:
        """Why "run" is disabled (None: it is not)."""
        if self.options.budget_calls is None and self.options.budget_usd is None:
            return (
                "run is off: nothing is sent without a budget; give the explorer "
                "experiment=dict(budget_calls=..., budget_usd=...)"
            )
        calls, usd = self.left()
        if calls == 0 or usd == 0.0:
            return "run is off: the budget is spent"
        return None

    def _show_budget(self) -> None:
        """The budget line, and the run button enabled only when something may be sent."""
        reason = self.blocked()
        self.run_button.disabled = reason is not None
        self.run_button.tooltip = reason or "ask the endpoint this turn's calls, under the budget"
        calls, usd = self.options.budget_calls, self.options.budget_usd
        bounds = [] if calls is None else [f"{calls:,} calls"]
        bounds += [] if usd is None else [_dollars(float(usd))]
        used = f"used {self.used_calls:,} calls, {_dollars(self.spent_usd)}"
        if reason is None:
            text = f"budget of all runs together: {', '.join(bounds)}; {used}"
            self.budget_view.value = _message(text, "sk-exp-budget-left")
        else:
            self.budget_view.value = _message(f"{reason} ({used})", "sk-exp-blocked")

    def select(self, subject: Session, turn: int, settings: HistorySettings) -> None:
        """The explorer's selection: the session under its release, the turn and settings.
        An answer shown for another selection is taken away, not recomputed."""
        self._selected = (subject, turn, settings)
        if self._shown_for is not None and self._shown_for != self._key():
            self._shown_for = None
            self.view.value = _message(
                f"The controls changed: press “{self.show_button.description}” or "
                f"“{self.run_button.description}” for turn {turn}.",
                "sk-exp-stale",
            )

    def _key(self) -> tuple[Any, ...]:
        assert self._selected is not None
        subject, turn, settings = self._selected
        return (subject.key, subject.policy, turn, settings)

    def calls(self) -> pd.DataFrame:
        """The selected turn's rows of :func:`sessionkit.requests` (every step, and every
        setting of ``grid``); the session's whole frame is kept for the next turn."""
        assert self._selected is not None
        subject, turn, settings = self._selected
        key = (subject.key, subject.policy, settings)
        if self._calls is None or self._calls[0] != key:
            frame = requests(
                subject,
                settings=settings,
                grid=self.options.grid,
                workspace=self.options.workspace,
                config_dir=self.config_dir,
                nanobot=self.options.nanobot,
                runtime=self.options.runtime,
                progress=False,
            )
            self._calls = (key, frame)
        frame = self._calls[1]
        return frame[frame["turn"] == turn]

    def show(self, _button: widgets.Button | None = None) -> None:
        """The plan and the kept answers of the selected turn (a dry run: nothing sent)."""
        self._experiment(dry_run=True)

    def run(self, _button: widgets.Button | None = None) -> None:
        """Ask the selected turn's calls under what is left of the budget; answers kept from
        earlier runs are shown, not asked again."""
        reason = self.blocked()
        if reason is not None:
            self.view.value = _message(reason, "sk-exp-error")
            return
        self._experiment(dry_run=False)

    def _experiment(self, *, dry_run: bool) -> None:
        if self._selected is None:
            return
        subject, turn, _settings = self._selected
        self._shown_for = self._key()
        if turn >= subject.n_user_turns:
            self.view.value = _message(
                f"Turn {turn} is the next turn: nothing was sent for it yet. Move the turn "
                f"slider below {subject.n_user_turns}.",
                "sk-exp-error",
            )
            return
        doing = "Reading the plan and kept answers" if dry_run else "Asking the endpoint"
        self.view.value = _message(f"{doing} for turn {turn}…", "sk-exp-busy")
        calls, usd = self.left()
        o = self.options
        try:
            out = experiment(
                self.calls(),
                subject,
                models=o.models,
                edits=o.edits,
                endpoint=o.endpoint,
                api_key=o.api_key,
                params=o.params,
                budget_calls=calls,
                budget_usd=usd,
                samples=o.samples,
                concurrency=o.concurrency,
                dry_run=dry_run,
                workspace=o.workspace,
                config_dir=self.config_dir,
                nanobot=o.nanobot,
                runtime=o.runtime,
                cache=o.cache,
                judge=o.judge,
                progress=False,
            )
        except Exception as exc:  # shown in the panel, where the user can act on it
            self.view.value = _message(f"{type(exc).__name__}: {exc}", "sk-exp-error")
            return
        if not dry_run:
            self.used_calls += int(out.summary["answered"])
            self.spent_usd += float(out.summary["spent_usd"])
            self._show_budget()
        self.results = out
        said = [*out.problems["reason"], *out.notes["reason"]]
        notes = "".join(_message(str(text), "sk-exp-note") for text in said)
        self.view.value = experiment_html(out, subject.key, turn) + notes
