"""The explorer's usage panel: what the provider reported and charged for the selected turn.

The rows come from :func:`sessionkit.usage` (one per recorded LLM call, tied to its session,
turn and step); this module only picks a turn's rows and writes them as HTML, every recorded
text (session key, model, provider, source) escaped.
"""

from __future__ import annotations

import html
import math
from typing import Any

import pandas as pd

from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session
from sessionkit.store.text import shown

__all__ = ["NEEDED", "TurnUsage", "check_usage", "own_turn", "usage_html"]

NEEDED = (
    "session_key",
    "turn",
    "step",
    "kind",
    "source",
    "model",
    "provider",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cost_usd",
    "attribution",
)
"""Columns of a :func:`sessionkit.usage` frame the panel reads."""

_COLUMNS = (
    ("step", "agent call within the turn (a summary: the step it preceded)"),
    ("kind", "agent, or summary (the governor's summary call of this turn)"),
    ("source", "as nanobot recorded it"),
    ("model", "as recorded"),
    ("provider", "as recorded"),
    ("prompt", "input tokens, cache reads and writes included"),
    ("cached", "input tokens read from the provider's prefix cache"),
    ("completion", "output tokens"),
    ("cost", "genai-prices' price at the call's date (n/a: no price known)"),
    ("attribution", "how the call was tied to this turn: exact or time"),
)


def check_usage(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` if it has the columns the panel reads (a :func:`sessionkit.usage` frame),
    else a ValueError naming the missing ones."""
    missing = [c for c in NEEDED if c not in frame.columns]
    if missing:
        raise ValueError(
            f"usage= needs a frame from sessionkit.usage; it lacks the columns {missing}"
        )
    return frame


class TurnUsage:
    """One session's recorded calls, by the turn they served (the session's own count)."""

    def __init__(self, frame: pd.DataFrame, key: str) -> None:
        rows = frame[frame["session_key"] == key]
        rows = rows[rows["turn"].notna()]
        self.turns: dict[int, pd.DataFrame] = {
            int(turn): group for turn, group in rows.groupby("turn", sort=True)
        }

    def rows(self, turn: int | None) -> pd.DataFrame | None:
        """The calls recorded for ``turn`` in step order (None: none recorded)."""
        if turn is None or turn not in self.turns:
            return None
        group = self.turns[turn]
        order = group["step"].astype("Float64").fillna(math.inf).to_numpy(dtype=float)
        return group.iloc[order.argsort(kind="stable")]


def own_turn(session: Session, subject: Session, turn: int) -> int | None:
    """Turn ``turn`` of ``subject`` (the session replayed under the release selected) as the
    session's own release counts it, where its usage was recorded; None when that message
    was no user turn for it (a 0.3.5 checkpoint counted by an older release) or ``turn`` is
    the next turn."""
    if session.policy == subject.policy:
        return turn if turn < session.n_user_turns else None
    shown_turn = get_policy(subject.policy).is_user_turn
    own = get_policy(session.policy).is_user_turn
    seen = own_turns = 0
    for message in session.messages:
        if shown_turn(message):
            if seen == turn:
                return own_turns if own(message) else None
            seen += 1
        own_turns += own(message)
    return None


def _tokens(value: Any) -> str:
    return "?" if pd.isna(value) else f"{int(value):,}"


def _cost(value: Any) -> str:
    return "n/a" if pd.isna(value) else f"${float(value):,.6f}"


def _text(value: Any) -> str:
    return "" if pd.isna(value) else html.escape(shown(value) or "")


def _row(call: Any) -> str:
    cells = (
        "?" if pd.isna(call.step) else str(int(call.step)),
        _text(call.kind),
        _text(call.source),
        _text(call.model),
        _text(call.provider),
        _tokens(call.prompt_tokens),
        _tokens(call.cached_tokens),
        _tokens(call.completion_tokens),
        _cost(call.cost_usd),
        _text(call.attribution),
    )
    return "<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"


def _sum(column: pd.Series) -> str:
    return _tokens(column.sum()) if column.notna().all() else "?"


def usage_html(rows: pd.DataFrame | None, key: str, turn: int) -> str:
    """Turn ``turn``'s recorded calls as the explorer shows them: a line of totals and one
    table row per call, or that no usage was recorded for the turn (``rows`` None)."""
    where = f"turn {turn} of <b>{html.escape(shown(key) or '')}</b>"
    if rows is None or rows.empty:
        return (
            f"<div class='sk-usage-none'>No usage recorded for this turn ({where}): no call "
            "in the usage log was tied to it.</div>"
        )
    costs = rows["cost_usd"]
    unpriced = int(costs.isna().sum())
    if unpriced == 0:
        priced = _cost(costs.sum())
    else:
        priced = "n/a" if unpriced == len(rows) else f"{_cost(costs.sum())} for the priced calls"
    note = f" ({unpriced} of {len(rows)} calls unpriced)" if unpriced else ""
    head = (
        f"<div class='sk-usage-head'><b>Reported usage</b> for {where}: "
        f"<span class='sk-usage-calls'>{len(rows)}</span> call{'' if len(rows) == 1 else 's'}, "
        f"<span class='sk-usage-prompt'>{_sum(rows['prompt_tokens'])}</span> prompt tokens "
        f"(<span class='sk-usage-cached'>{_sum(rows['cached_tokens'])}</span> cached), "
        f"<span class='sk-usage-completion'>{_sum(rows['completion_tokens'])}</span> "
        f"completion tokens, <span class='sk-usage-cost'>{priced}</span>{note}</div>"
    )
    header = "".join(
        f"<th title='{html.escape(doc, quote=True)}'>{name}</th>" for name, doc in _COLUMNS
    )
    body = "".join(_row(call) for call in rows.itertuples(index=False))
    return f"{head}<table class='sk-usage-table'><tr>{header}</tr>{body}</table>"
