"""``sessionkit.explore(corpus)``: pick a session, move the limits, watch the window, fork.

An ipywidgets app with no logic of its own: the release selector replays the session under
another nanobot release (``Session.policy``), the statuses and counts come from
:func:`sessionkit.simulate.states.message_states` and :meth:`~sessionkit.simulate.states.MessageStates.summary`, the
timeline from :func:`sessionkit.plot.token_timeline`, forks from :func:`sessionkit.fork`, and
the request of the selected turn (its parts, and the request itself as JSON) from
:func:`sessionkit.request`, built only when asked for, and, given a usage frame, what the
provider reported and charged for the selected turn (:func:`sessionkit.usage` rows, written by
:mod:`sessionkit.views.usage_panel`), and, given an experiment, the selected turn's calls asked
again beside the session's answers (:mod:`sessionkit.views.experiment_panel`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import unicodedata
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import ipywidgets as widgets
import numpy as np
import pandas as pd

from sessionkit.calls import assembly
from sessionkit.calls.assembly import Request
from sessionkit.calls.installs import ReleaseNotInstalled
from sessionkit.calls.kits import KitError
from sessionkit.conventions import entry_point
from sessionkit.nanobot.listing import flatten_content
from sessionkit.nanobot.naming import UnsafeKeyError
from sessionkit.nanobot.policies import POLICIES, get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings, Offset
from sessionkit.schema import STATUSES
from sessionkit.simulate.states import MessageStates, message_states
from sessionkit.store.cachedir import default_cache_dir, private_dir_problem
from sessionkit.store.corpus import Corpus
from sessionkit.store.text import shown
from sessionkit.views.experiment_panel import ExperimentPanel
from sessionkit.views.timeline_canvas import TimelineCanvas
from sessionkit.views.transcript import TranscriptWidget, transcript_rows
from sessionkit.views.usage_panel import TurnUsage, check_usage, own_turn, usage_html
from sessionkit.writers.forking import fork

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["OPTION_CHARS", "SCRATCH_FORK_DIR", "Explorer", "explore", "request_html"]

SCRATCH_FORK_DIR = default_cache_dir() / "forks"
"""Where forks go unless the explorer is given ``sessions_dir``: never a live sessions folder,
and never a folder shared with other users (forks hold private conversations).  It lies in
the user's cache folder, is created 0700 on first use, and is refused if another user owns
it or others may write to it (``sessionkit cache clear`` leaves it alone)."""

OPTION_CHARS = 56
"""Widest picker entry, in columns (a CJK character takes two): titles are clipped so every
entry fits the picker from 1,280 px up."""


def _auto() -> widgets.Layout:
    """Fill the parent box's width without the overflow ``width: 100%`` plus margins causes."""
    return widgets.Layout(width="auto")


def _slider(description: str, value: int, high: int, step: int, css: str) -> widgets.IntSlider:
    slider = widgets.IntSlider(
        value=value,
        min=0,
        max=high,
        step=step,
        description=description,
        style={"description_width": "110px"},
        layout=widgets.Layout(width="auto", max_width="520px"),
    )
    slider.add_class(css)
    return slider


def _checkbox(description: str, value: bool, css: str) -> widgets.Checkbox:
    box = widgets.Checkbox(
        value=value, description=description, indent=False, layout=widgets.Layout(width="auto")
    )
    box.add_class(css)
    return box


def _columns(text: str) -> int:
    """Display width of ``text``: East Asian wide and full-width characters take two columns."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _option(row: pd.Series) -> str:
    """A picker entry, ``key — title (n msgs, t tok)``, its title clipped to fit
    :data:`OPTION_CHARS` columns."""
    tokens = "" if pd.isna(row["tokens"]) else f", {int(row['tokens']):,} tok"
    sizes = f" ({int(row['n_messages']):,} msgs{tokens})"
    title = row["title"] if isinstance(row["title"], str) else ""
    room = OPTION_CHARS - _columns(f"{row['key']} — {sizes}")
    if _columns(title) > room:
        while title and _columns(title) > room - 1:
            title = title[:-1]
        title = f"{title}…" if title else ""
    return shown(f"{row['key']}{f' — {title}' if title else ''}{sizes}") or ""


def _chip(name: str, count: int) -> str:
    """A status count, labelled and coloured as in the transcript (``schema.STATUSES``; the
    label black or white, whichever reads better on the status colour)."""
    status = next(s for s in STATUSES if s.name == name)
    return (
        f"<span class='sk-count' data-status='{name}' title='{html.escape(status.doc)}'>"
        f"<span style='background:{status.color};color:{status.text_color};padding:0 5px;border-radius:7px'>"
        f"{html.escape(status.label)}</span> {count:,}</span>"
    )


_PRE_STYLE = (
    "white-space:pre-wrap;overflow-wrap:anywhere;max-height:480px;overflow:auto;"
    "margin:4px 0;font-size:11px"
)


def request_html(built: Request) -> str:
    """A request as the explorer shows it: what it is, its parts and their tokens, and the
    request itself as JSON in a collapsed ``<pre>`` (all session text escaped)."""
    head = (
        f"<div class='sk-request-head'><b>{html.escape(get_policy(built.release).label)} "
        f"request</b> for turn {built.turn}, step {built.step}: {len(built.messages)} messages, "
        f"{len(built.tools)} tools, <span class='sk-request-tokens'>{built.tokens:,}</span> "
        "tokens (the release's estimate; parts counted alone need not add up to it)</div>"
    )
    notes = "".join(
        f"<div class='sk-request-note'>{html.escape(shown(note) or '')}</div>"
        for note in built.notes
    )
    cells = "".join(
        f"<tr><td>{html.escape(shown(row.part) or '')}</td><td>{row.messages:,}</td>"
        f"<td>{row.tokens:,}</td><td>{'yes' if row.inferred else ''}</td></tr>"
        for row in built.parts.itertuples(index=False)
    )
    table = (
        "<table class='sk-request-parts'><tr><th>part</th><th>messages</th><th>tokens</th>"
        "<th title='depends on this machine or a stand-in, not on disk'>inferred</th></tr>"
        f"{cells}</table>"
    )
    text = shown(built.to_json()) or ""
    body = (
        f"<details class='sk-request-json'><summary>the request as JSON ({len(text):,} "
        f"characters)</summary><pre style='{_PRE_STYLE}'>{html.escape(text)}</pre></details>"
    )
    return f"{head}{notes}{table}{body}"


def _request_message(text: str, css: str) -> str:
    return f"<div class='{css}'>{html.escape(shown(text) or '')}</div>"


def _budget_note(states: MessageStates) -> str:
    """Why the window holds more tokens than ``max_tokens``, in nanobot's own terms ('' if not)."""
    budget = states.settings.max_tokens
    assert budget is not None  # resolved settings: every release has a default
    if budget <= 0 or states.tokens_kept <= budget:
        return ""
    if states.recovered:
        return (
            f"<div class='sk-over-budget'>Over the {budget:,}-token budget on purpose: the newest "
            "messages that fit held no user message, so nanobot kept the latest user message "
            "and what follows it anyway (its documented recovery of a user turn; "
            "<code>recovered=True</code> in <code>sk.windows</code>).</div>"
        )
    return (
        f"<div class='sk-over-budget'>Over the {budget:,}-token budget on purpose: nanobot always "
        "keeps the newest message, even when it alone exceeds the budget.</div>"
    )


class Explorer(widgets.VBox):
    """The explorer app; every control is a public attribute, so code and tests can drive it.

    Parameters
    ----------
    corpus
        The sessions to explore.
    key
        Session shown first (default: the first one).
    sessions_dir
        Folder the fork panel writes to (default: :data:`SCRATCH_FORK_DIR`; name a
        workspace's ``sessions`` folder, or the workspace, to have nanobot list the forks).
    config_dir
        For a 0.3.5 workspace as ``sessions_dir``: the config file nanobot runs with, or its
        folder (default ``~/.nanobot``); forks go where 0.3.5 looks, as with :func:`sessionkit.fork`.
    usage
        What the provider reported for each turn: a frame from :func:`sessionkit.usage`, or
        True to read it for ``corpus`` from ``config_dir`` (its ``llm_usage.sqlite3``); the
        panel under the request shows the selected turn's calls, tokens and cost (default
        None: no panel).
    experiment
        :func:`sessionkit.experiment`'s keywords (``models``, ``endpoint``, ``budget_calls``,
        ``budget_usd``, ...; :data:`~sessionkit.views.experiment_panel.OPTIONS`) for a panel
        asking the selected turn's calls again (its ``config_dir`` is this one); "run" sends
        only under the budget, which all its runs share (default None: no panel).
    settings
        Initial history settings (a field left ``None``: the release's default); the
        controls change all but ``last_consolidated``.
    **overrides
        Any :class:`~sessionkit.HistorySettings` field by name, overriding ``settings``.
    """

    def __init__(
        self,
        corpus: Corpus,
        *,
        key: str | None = None,
        sessions_dir: str | Path | None = None,
        config_dir: str | Path | None = None,
        usage: pd.DataFrame | bool | None = None,
        experiment: Mapping[str, Any] | None = None,
        settings: HistorySettings = DEFAULT_SETTINGS,
    ) -> None:
        self.corpus = corpus
        self.experiment_panel = (
            None if experiment is None else ExperimentPanel(experiment, config_dir)
        )
        self.config_dir = config_dir
        self.usage = _usage_frame(corpus, usage, config_dir)
        self._turn_usage: TurnUsage | None = None
        self._usage_shown: tuple[Any, ...] | None = None
        self.fork_folder = SCRATCH_FORK_DIR if sessions_dir is None else Path(sessions_dir)
        self._initial = settings
        self._scheduled = False
        self._quiet = False
        self._original = ""
        table = corpus.sessions
        self._options = [(_option(row), row["key"]) for _, row in table.iterrows()]
        longest = int(table["n_messages"].max()) if len(table) else 0
        most_tokens = int(table["tokens"].max()) if table["tokens"].notna().any() else 0

        self.search = widgets.Text(placeholder="search key or title", layout=_auto())
        self.search.add_class("sk-search")
        self.picker = widgets.Select(options=self._options, rows=7, layout=_auto())
        self.picker.add_class("sk-picker")
        initial = get_policy().resolve(self._initial)  # each release's own once a session shows
        # The default release (nanobot 0.2.2) has a default for every setting.
        assert initial.max_messages is not None and initial.max_tokens is not None
        assert initial.file_cap is not None
        assert initial.include_timestamps is not None and initial.extend_to_user is not None
        self.max_messages = _slider(
            "max_messages", initial.max_messages, max(2000, longest), 1, "sk-max-messages"
        )
        self.max_tokens = _slider(
            "max_tokens", initial.max_tokens, max(200_000, most_tokens), 100, "sk-max-tokens"
        )
        self.turn = _slider("turn", 0, 0, 1, "sk-turn")
        self.file_cap = _slider(
            "file cap", initial.file_cap, max(4000, 2 * longest), 10, "sk-file-cap"
        )
        self.include_timestamps = _checkbox(
            "include_timestamps", initial.include_timestamps, "sk-include-timestamps"
        )
        self.extend_to_user = _checkbox(
            "extend_to_user", initial.extend_to_user, "sk-extend-to-user"
        )
        self.zoom = _checkbox("zoom to the turn", True, "sk-zoom")
        from sessionkit import plot  # matplotlib loads with the first explorer, not the package
        from sessionkit.plot.style import KeptLayout

        self.policy = widgets.Dropdown(
            options=[(release.label, name) for name, release in POLICIES.items()],
            description="release",
            style={"description_width": "110px"},
            layout=widgets.Layout(width="auto", max_width="520px"),
        )
        self.policy.add_class("sk-policy")
        self._releases: dict[str, Session] = {}

        self._figure = cast("Figure", plot.timeline_axes().figure)  # on a Figure it made
        # Laid out once (and again only when its texts outgrow the margins): see _draw.
        self._figure.set_layout_engine(KeptLayout())
        self._canvas = TimelineCanvas(self._figure)
        # At most its own pixel width, so a wide screen does not blow it up (and blur it).
        pixels = round(self._figure.get_figwidth() * self._figure.dpi)
        self.timeline = widgets.Image(
            format="png", layout=widgets.Layout(width="auto", max_width=f"{pixels}px")
        )
        self.timeline.add_class("sk-timeline")
        self.summary = widgets.HTML(layout=_auto())
        self.summary.add_class("sk-summary")
        self.transcript = TranscriptWidget(layout=widgets.Layout(flex="3 1 0", min_width="0"))

        self.request_button = widgets.Button(
            description="request",
            tooltip="build the request nanobot sent at this turn (asks the installed release)",
        )
        self.request_button.add_class("sk-request")
        self.request_step = widgets.BoundedIntText(
            value=0,
            min=0,
            max=9_999,
            description="step",
            style={"description_width": "40px"},
            layout=widgets.Layout(width="130px"),
        )
        self.request_step.add_class("sk-request-step")
        self.request_view = widgets.HTML(layout=_auto())
        self.request_view.add_class("sk-request-view")
        self._request_shown: tuple[Any, ...] | None = None
        self.usage_view = widgets.HTML(layout=_auto())
        self.usage_view.add_class("sk-usage-view")

        self.fork_info = widgets.HTML(layout=_auto())
        self.fork_info.add_class("sk-fork-info")
        self.fork_text = widgets.Textarea(rows=6, layout=_auto())
        self.fork_text.add_class("sk-fork-text")
        self.fork_target = widgets.Text(description="target key", layout=_auto())
        self.fork_target.add_class("sk-fork-target")
        self.fork_dir = widgets.Text(description="folder", layout=_auto())
        self.fork_dir.add_class("sk-fork-dir")
        self.fork_overwrite = _checkbox("overwrite an existing fork", False, "sk-fork-overwrite")
        self.fork_button = widgets.Button(description="Write fork", button_style="primary")
        self.fork_button.add_class("sk-fork-write")
        self.fork_result = widgets.HTML(layout=_auto())
        self.fork_result.add_class("sk-fork-result")

        self.session: Session = corpus[key] if key is not None else next(iter(corpus))
        super().__init__(self._layout(), layout=widgets.Layout(width="auto", min_width="0"))
        self.add_class("sk-explorer")
        self._show(self.session.key)
        self._wire()
        self._warm_up()

    def __repr__(self) -> str:
        return (
            f"Explorer({self.session.key!r} at turn {self.turn.value}, {len(self.corpus)} sessions)"
        )

    def _layout(self) -> list[widgets.Widget]:
        """Picker and controls side by side, wrapping below 1,280 px; transcript beside the fork panel."""
        controls = widgets.VBox(
            [
                self.policy,
                self.max_messages,
                self.max_tokens,
                self.turn,
                self.file_cap,
                widgets.HBox(
                    [self.include_timestamps, self.extend_to_user, self.zoom],
                    layout=widgets.Layout(flex_flow="row wrap"),
                ),
            ],
            layout=widgets.Layout(flex="1 1 420px", min_width="0"),
        )
        picker = widgets.VBox(
            [self.search, self.picker], layout=widgets.Layout(flex="1 1 420px", min_width="0")
        )
        fork_panel = widgets.VBox(
            [
                widgets.HTML("<b>Fork</b>"),
                self.fork_info,
                self.fork_text,
                self.fork_target,
                self.fork_dir,
                self.fork_overwrite,
                self.fork_button,
                self.fork_result,
            ],
            layout=widgets.Layout(flex="2 1 0", min_width="0", padding="0 0 0 10px"),
        )
        request_bar = widgets.HBox(
            [self.request_button, self.request_step],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
        )
        panels: list[widgets.Widget] = [] if self.usage is None else [self.usage_view]
        if self.experiment_panel is not None:
            panels.append(self.experiment_panel)
        return [
            widgets.HBox([picker, controls], layout=widgets.Layout(flex_flow="row wrap")),
            self.summary,
            self.timeline,
            request_bar,
            self.request_view,
            *panels,
            widgets.HBox([self.transcript, fork_panel]),
        ]

    def _wire(self) -> None:
        self.search.observe(self._on_search, "value")
        self.picker.observe(self._on_pick, "value")
        self.policy.observe(self._on_policy, "value")
        for control in (
            self.max_messages,
            self.max_tokens,
            self.turn,
            self.file_cap,
            self.include_timestamps,
            self.extend_to_user,
            self.zoom,
        ):
            control.observe(self._changed, "value")
        self.transcript.observe(self._on_select, "selected")
        self.fork_button.on_click(self._write_fork)
        self.request_button.on_click(self.show_request)
        self.request_step.observe(self._request_moved, "value")

    # -- session and settings -------------------------------------------------------------

    def _on_search(self, change: dict[str, Any]) -> None:
        """Filter the picker; the session shown stays until another one is picked."""
        words = change["new"].lower().split()
        shown = [o for o in self._options if all(w in o[0].lower() for w in words)]
        self._quiet = True
        try:
            self.picker.options = shown
            if any(key == self.session.key for _, key in shown):
                self.picker.value = self.session.key
            else:
                self.picker.index = None
        finally:
            self._quiet = False

    def _on_pick(self, change: dict[str, Any]) -> None:
        if not self._quiet and change["new"] not in (None, self.session.key):
            self._show(change["new"])

    def _show(self, key: str) -> None:
        """Switch to session ``key`` under its own release: new rows, the next turn, a cleared
        fork panel."""
        self.session = self.corpus[key]
        self._releases = {self.session.policy: self.session}
        if self.usage is not None:
            self._turn_usage = TurnUsage(self.usage, key)
        self._quiet = True
        try:
            self.picker.value = key if any(k == key for _, k in self.picker.options) else None
            previous = self.policy.value
            self.policy.value = self.offered(self.session.policy)
            self._follow_default(previous, self.session.policy)
            self.turn.max = self.turn.value = self.subject().n_user_turns
            self.transcript.selected = -1
        finally:
            self._quiet = False
        self._reset_fork()
        self._refresh(rows=True)

    def offered(self, name: str) -> str:
        """``name``, added to the release selector when it is not there (a release the
        analyses do not compare by default, such as 0.2.1, or a later candidate)."""
        if all(value != name for _, value in self.policy.options):
            self.policy.options = [*self.policy.options, (get_policy(name).label, name)]
        return name

    def subject(self) -> Session:
        """The session shown, under the release the selector names (a copy sharing its
        messages, kept while the session is shown so its replays stay cached)."""
        name = self.policy.value
        if name not in self._releases:
            self._releases[name] = dataclasses.replace(self.session, policy=name)
        return self._releases[name]

    def _follow_default(self, previous: str, name: str) -> None:
        """A max_messages slider at release ``previous``'s default moves to release ``name``'s
        (120 in 0.2.2, 2000 in 0.3.0, 0 = none in 0.3.5)."""
        if self.max_messages.value == get_policy(previous).default_max_messages:
            self.max_messages.value = get_policy(name).default_max_messages

    def _on_policy(self, change: dict[str, Any]) -> None:
        """Replay the session under the release picked; the turn stays, or stays the next one."""
        if self._quiet:
            return
        next_turn = self.turn.value == self.turn.max
        self._quiet = True
        try:
            self._follow_default(change["old"], change["new"])
            self.turn.max = self.subject().n_user_turns
            if next_turn:
                self.turn.value = self.turn.max
        finally:
            self._quiet = False
        self._refresh(rows=True)

    def settings(self) -> HistorySettings:
        """The history settings the controls show, as the release selected resolves them (the
        turn is ``self.turn.value``)."""
        shown = self._initial.replace(
            max_messages=self.max_messages.value,
            max_tokens=self.max_tokens.value,
            include_timestamps=self.include_timestamps.value,
            extend_to_user=self.extend_to_user.value,
            file_cap=self.file_cap.value,
        )
        return get_policy(self.policy.value).resolve(shown)

    def _changed(self, change: dict[str, Any]) -> None:
        """Refresh now after a change made in code (so the next line sees it), after one made
        in the browser once the kernel has applied every pending control change."""
        if self._quiet:
            return
        # ipywidgets holds this lock while it applies a state the browser sent.
        from_browser = bool(change["owner"]._property_lock)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or not from_browser:
            self._refresh()
        elif not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._refresh)

    def _refresh(self, *, rows: bool = False) -> None:
        """Every view for the controls' values; the transcript first, so the browser marks
        its rows while the kernel draws the timeline (the two run side by side)."""
        self._scheduled = False
        self.states: MessageStates = message_states(
            self.subject(), turn=self.turn.value, settings=self.settings()
        )
        counts = self.states.summary()
        frame = self.states.frame
        if rows:
            self.transcript.rows = transcript_rows(self.subject(), frame["tokens"].tolist())
        self.transcript.status = frame["status"].tolist()  # the names, as str
        window = counts["window"]
        self.transcript.focus = window[0] if window else max(0, self.states.stop - 1)
        self._request_moved()
        self._show_usage()
        if self.experiment_panel is not None:
            self.experiment_panel.select(self.subject(), self.turn.value, self.settings())
        self._draw()
        # Last, so a summary showing the new numbers means every other view has them too.
        self.summary.value = self._summary_html(counts)

    def _xlim(self) -> tuple[float, float] | None:
        """The timeline's x range: zoomed, the count window (token cut included) to the turn."""
        stop = self.states.stop
        status = self.states.frame["status"].to_numpy()
        counted = np.flatnonzero(np.isin(status, ["trimmed_tokens", "in_window"]))
        if not (self.zoom.value and len(counted)):
            return None
        start = int(counted[0])
        return (start - max(10, (stop - start) // 10) - 0.5, stop + 0.5)

    def _draw(self) -> None:
        """The timeline; zoomed, it spans the count window (token cut included) to the turn."""
        # One draw on a kept canvas and kept Axes, in margins laid out once.
        self.timeline.value = self._canvas.png(self.states, self._xlim())

    WARM_DELAY = 0.2
    """Seconds after the explorer is made (once the kernel is idle) before it warms up."""

    def _warm_up(self) -> None:
        """While the widget renders: on the kernel's idle ticks, one step at a time (so a
        control moved meanwhile waits for one step at most), compute what the first move of
        a control needs (:meth:`_warm_steps`).  Nothing without a running event loop (a
        script, a test): there is no idle time to hide the work in."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        steps = self._warm_steps()

        def step() -> None:
            try:
                done = next(steps, None) is None
            except Exception:  # only a head start: the move itself computes and reports it
                done = True
            if not done:
                loop.call_later(0.01, step)

        loop.call_later(self.WARM_DELAY, step)

    def _warm_steps(self) -> Iterator[str]:
        """The replays for the settings one step of each control reaches (cached with the
        session), then a timeline drawn and not shown (matplotlib's font and text caches):
        yields after each."""
        session, settings, turn = self.subject(), self.settings(), self.turn.value
        assert settings.max_messages is not None  # resolved settings: every release has a default
        reachable = [
            (max(0, turn - 1), settings),
            (turn, settings.replace(max_tokens=settings.max_tokens + self.max_tokens.step)),
            (turn, settings.replace(max_messages=max(1, settings.max_messages - 1))),
        ]
        for at, reached in reachable:
            message_states(session, turn=at, settings=reached)
            yield "replay"
        # With a token budget, so the budget line, its label and a token cut draw too.
        budget = max(self.max_tokens.step, self.states.tokens_kept // 2)
        if session is not self.subject():
            return
        states = message_states(session, turn=turn, settings=settings.replace(max_tokens=budget))
        yield "replay"
        self._canvas.plot(states, self._xlim())  # its strings drawn where a move draws them
        yield "plot"
        self._figure.canvas.draw()  # the figure is drawn afresh by the next _draw
        yield "draw"

    def _summary_html(self, counts: dict[str, Any]) -> str:
        """The window in words, then one count per status, labelled as in the transcript."""
        max_tokens = self.states.settings.max_tokens
        budget = f" of {max_tokens:,}" if max_tokens else ""
        window = counts["window"]
        span = f"messages {window[0]}–{window[1] - 1}" if window else "empty"
        sent = (
            f"<b>{html.escape(shown(self.session.key) or '')}</b> at turn {self.states.turn}: "
            f"<b>in window: <span class='sk-in-window'>{counts['in_window']}</span></b> "
            f"messages, <span class='sk-sent-tokens'>{counts['sent_tokens']:,}</span>"
            f"{budget} tokens ({span}, cut by <span class='sk-cut'>{counts['cut']}</span>)"
        )
        chips = " · ".join(_chip(s.name, counts[s.name]) for s in STATUSES[1:])
        return f"<div>{sent}</div>{_budget_note(self.states)}<div>{chips}</div>"

    # -- the request of the selected turn --------------------------------------------------

    def _request_key(self) -> tuple[Any, ...]:
        """What the request shown depends on: session, release, turn, step and settings."""
        return (
            self.session.key,
            self.policy.value,
            self.turn.value,
            self.request_step.value,
            self.settings(),
        )

    def _request_moved(self, _change: dict[str, Any] | None = None) -> None:
        """A request (or why there is none) shown for other controls is taken away, not
        rebuilt (that waits for the button): moving a control never waits for a request."""
        if self._request_shown is not None and self._request_shown != self._request_key():
            self._request_shown = None
            self.request_view.value = _request_message(
                f"The controls changed: press “{self.request_button.description}” for the "
                f"request at turn {self.turn.value}, step {self.request_step.value}.",
                "sk-request-stale",
            )

    def show_request(self, _button: widgets.Button | None = None) -> None:
        """Build the request of the selected turn and step (:func:`sessionkit.request`) and
        show its parts and JSON, or what to do when it cannot be built (no release
        installed: how to install it)."""
        subject, turn = self.subject(), self.turn.value
        self._request_shown = self._request_key()
        if turn >= subject.n_user_turns:
            self.request_view.value = _request_message(
                f"Turn {turn} is the next turn: nothing was sent for it yet. Move the turn "
                f"slider below {subject.n_user_turns} to see a request nanobot sent.",
                "sk-request-error",
            )
            return
        self.request_view.value = _request_message(
            "Building the request (the first one of a release and workspace asks the "
            "installed release for its prompt and tools: a few seconds)…",
            "sk-request-busy",
        )
        try:
            built = assembly.request(
                subject, turn=turn, step=self.request_step.value, settings=self.settings()
            )
        except (ReleaseNotInstalled, IndexError, ValueError, KitError) as exc:
            self.request_view.value = _request_message(str(exc), "sk-request-error")
        except Exception as exc:  # shown in the widget, where the user can act on it
            message = f"{type(exc).__name__}: {exc}"
            self.request_view.value = _request_message(message, "sk-request-error")
        else:
            self.request_view.value = request_html(built)

    # -- the usage of the selected turn ----------------------------------------------------

    def _show_usage(self) -> None:
        """The selected turn's recorded calls (when given usage), rewritten only when the
        session, release or turn changed (a dictionary lookup: moves never wait for it)."""
        if self._turn_usage is None:
            return
        subject, turn = self.subject(), self.turn.value
        shown_for = (self.session.key, subject.policy, turn)
        if shown_for == self._usage_shown:
            return
        self._usage_shown = shown_for
        if turn >= subject.n_user_turns:
            self.usage_view.value = (
                f"<div class='sk-usage-none'>No usage recorded for this turn: turn {turn} is "
                "the next turn, nothing was sent for it yet.</div>"
            )
            return
        own = own_turn(self.session, subject, turn)
        self.usage_view.value = usage_html(self._turn_usage.rows(own), self.session.key, turn)

    # -- fork -------------------------------------------------------------------------------

    def _reset_fork(self) -> None:
        self.fork_dir.value = str(self.fork_folder)
        self.fork_text.value = ""
        self.fork_target.value = ""
        self.fork_result.value = ""
        where = (
            "a scratch folder; name your workspace's sessions folder to have nanobot list it"
            if self.fork_folder == SCRATCH_FORK_DIR
            else "the folder below"
        )
        self.fork_info.value = (
            f"Click a user message in the transcript to fork before it. The fork goes to {where}."
        )

    def _on_select(self, change: dict[str, Any]) -> None:
        user = change["new"]
        if user < 0 or self._quiet:
            return
        frame = self.states.frame
        users = frame.index[frame["role"] == "user"]
        idx = int(users[user])
        self._original = flatten_content(self.session.messages[idx].get("content"))
        self.fork_text.value = self._original
        self.fork_target.value = f"{self.session.key}:fork-{user}"
        self.fork_result.value = ""
        self.fork_info.value = (
            f"Fork before user message #{user} (message {idx}): the fork keeps the {idx} "
            "messages before it and, if you edit the text, ends with your edited message."
        )

    def _write_fork(self, _button: widgets.Button | None = None) -> None:
        """Write the fork through :func:`sessionkit.fork`; show its path or what to change."""
        user = self.transcript.selected
        if user < 0:
            self._fork_error("Click a user message in the transcript first.")
            return
        if not self.fork_dir.value.strip():
            self._fork_error("Choose the sessions folder to write the fork to.")
            return
        folder = Path(self.fork_dir.value.strip()).expanduser()
        problem = private_dir_problem(folder) if folder == SCRATCH_FORK_DIR else None
        if problem is not None:
            self._fork_error(f"Refused scratch folder {folder}: it {problem}; name another.")
            return
        text = self.fork_text.value
        try:
            result = fork(
                self.session,
                self.fork_target.value,
                user,
                edit=None if text == self._original else text,
                sessions_dir=self.fork_dir.value.strip(),
                overwrite=self.fork_overwrite.value,
                config_dir=self.config_dir,
                create=folder == SCRATCH_FORK_DIR,  # sessionkit's own scratch folder only
            )
        except Exception as exc:  # shown in the widget, where the user can act on it
            self._fork_error(self._fork_problem(exc))
            return
        edited = "ends with your edited message" if text != self._original else "no edit"
        self.fork_result.value = (
            f"<span class='sk-ok' style='color:#2ca02c'>Wrote <code>{html.escape(str(result.path))}"
            f"</code></span>: {len(result.messages)} messages, {edited}."
        )

    def _fork_problem(self, exc: Exception) -> str:
        """``exc`` in the panel's terms: its controls, not :func:`sessionkit.fork`'s arguments."""
        if isinstance(exc, FileNotFoundError) and exc.filename:
            return (
                f"The folder {exc.filename} does not exist: create it first, or name an "
                "existing sessions folder or workspace."
            )
        if isinstance(exc, FileExistsError):
            return (
                f"A session file already exists at {exc.filename}: tick "
                f"“{self.fork_overwrite.description}” to replace it, or change the target key."
            )
        if isinstance(exc, UnsafeKeyError):
            return f"Refused target key: {exc}. Choose another target key."
        return f"{type(exc).__name__}: {exc}"

    def _fork_error(self, message: str) -> None:
        self.fork_result.value = (
            f"<span class='sk-error' style='color:#d62728'>{html.escape(message)}</span>"
        )


def _usage_frame(
    corpus: Corpus, usage: pd.DataFrame | bool | None, config_dir: str | Path | None
) -> pd.DataFrame | None:
    """The usage frame the explorer shows: given, read for ``corpus`` (True), or None."""
    if usage is None or usage is False:
        return None
    if usage is True:
        from sessionkit.accounting.ledger import usage as read_usage

        return read_usage(corpus, config_dir=config_dir, estimate=False)
    if isinstance(usage, pd.DataFrame):
        return check_usage(usage)
    raise TypeError(f"usage= takes a frame from sessionkit.usage, True or None, not {usage!r}")


@entry_point(corpus="source")
def explore(
    source: Corpus | Session,
    key: str | None = None,
    *,
    policy: str | None = None,
    settings: HistorySettings | None = None,
    max_messages: int | None = None,
    max_tokens: int | None = None,
    include_timestamps: bool | None = None,
    include_runtime_context: bool | None = None,
    extend_to_user: bool | None = None,
    last_consolidated: Offset | None = None,
    file_cap: int | None = None,
    sessions_dir: str | Path | None = None,
    config_dir: str | Path | None = None,
    usage: pd.DataFrame | bool | None = None,
    experiment: Mapping[str, Any] | None = None,
) -> Explorer:
    """Show the explorer for a Corpus (or one Session); returns the app (an ipywidgets VBox).

    ``key`` picks the session shown first and ``policy`` the release it is replayed with
    (default: the session's own); ``settings`` are the initial history settings and the
    setting keywords replace some of them (``corpus=`` is the deprecated spelling of
    ``source``).  Forks go to ``sessions_dir`` (default: :data:`SCRATCH_FORK_DIR`), a 0.3.5
    workspace's through ``config_dir`` (the config file or its folder).  ``usage`` (a frame
    from :func:`sessionkit.usage`, or True to read it from ``config_dir``) adds a panel with
    the selected turn's reported calls, tokens and cost.  ``experiment`` (a dict of
    :func:`sessionkit.experiment`'s keywords, with a budget for its "run" button) adds a panel
    with the selected turn's calls asked again, each answer beside the session's own.
    """
    corpus = Corpus([source]) if isinstance(source, Session) else source
    initial = (DEFAULT_SETTINGS if settings is None else settings).replace(
        max_messages=max_messages,
        max_tokens=max_tokens,
        include_timestamps=include_timestamps,
        include_runtime_context=include_runtime_context,
        extend_to_user=extend_to_user,
        last_consolidated=last_consolidated,
        file_cap=file_cap,
    )
    app = Explorer(
        corpus,
        key=key,
        sessions_dir=sessions_dir,
        config_dir=config_dir,
        usage=usage,
        experiment=experiment,
        settings=initial,
    )
    if policy is not None:
        app.policy.value = app.offered(get_policy(policy).name)
    return app
