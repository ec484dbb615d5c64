"""nanobot-ai 0.3.5's context governor, rebuilt from what it saved.

Before every agent call 0.3.5 measures the request with its whole-request estimate (or, when
the request repeats the previous one, the provider's reported input tokens) and, at or over
``context_window - max_output - 1024``, summarises: one call sends the accepted messages
(the previous call's request, or system prompt and history at a turn's start) cleaned up
again, plus the release's archive instruction; the call then goes out as ``[system prompt with
the new summary, the continuation message, what came after the accepted messages]`` and later
calls of the turn grow from that.  When the turn is saved a hidden checkpoint (the
continuation text) is inserted where the accepted messages ended, ``last_archived`` points to
it and ``_last_summary`` becomes ``{text, last_active: session.updated_at}``.

What the files do not hold, and what stands in for it (marked inferred):

- the ``last active`` time the request right after a summary carries is the clock at that
  moment (``datetime.now().astimezone()``): the turn's user message's stored time, in this
  machine's time zone unless one is given;
- a ``_last_summary`` a later summary overwrote: its text comes from ``texts`` (the session's
  summaries in order, e.g. from ``memory/history.jsonl``) or else the last one's, its
  ``last_active`` from the stored time of the message the session held last when it was
  committed;
- a turn summarised twice keeps one checkpoint, the last: the requests between the two are
  rebuilt as if the first had not happened (the verdict, over the budget there, shows it).

A checkpoint just before a turn's user message belongs to that turn (a summary at its start)
when it was stamped after that message; otherwise it was written between turns (an idle
archive).  Pure and pandas-free; the clean-up rules are :mod:`sessionkit.nanobot.request_035`'s.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

from sessionkit.nanobot.history import CONTINUATION_TEXT, Message, is_hidden_history
from sessionkit.nanobot.release import SAFETY_BUFFER
from sessionkit.nanobot.request_035 import cleaned_for_model, in_loop, loop_messages
from sessionkit.nanobot.timestamps import local_moment

__all__ = [
    "GovernedTurn",
    "Summary",
    "archive_fits",
    "candidate_messages",
    "checkpoints",
    "governed_turn",
    "input_budget",
    "is_checkpoint",
    "journal_summaries",
    "sent_messages",
    "summary_messages",
    "verdict",
]


@dataclass(frozen=True)
class Summary:
    """A summary as a request's system prompt carries it, and which of its values are not
    on disk (``"text"``, ``"last_active"``)."""

    text: str
    last_active: str
    inferred: tuple[str, ...] = ()

    def as_metadata(self) -> dict[str, str]:
        """The ``_last_summary`` value 0.3.5's prompt builder reads."""
        return {"text": self.text, "last_active": self.last_active}


@dataclass(frozen=True)
class GovernedTurn:
    """What 0.3.5's governor found and did in one user turn."""

    before: list[Message]
    """The session's messages when the turn began (a checkpoint the turn itself inserted
    before its user message is left out)."""
    offset: int
    """``last_archived`` when the turn began: the latest checkpoint in :attr:`before`, else 0."""
    last_summary: Mapping[str, Any] | None
    """The ``_last_summary`` in force when the turn began (as stored, while it still is)."""
    last_summary_inferred: tuple[str, ...]
    """Which of its values are not on disk (``"text"``, ``"last_active"``)."""
    summary_step: int | None
    """The step the turn's own summary call precedes (0: at its start), ``None`` without one."""
    summary: Summary | None
    """That summary as the calls after it carry it (``last_active``: the inferred clock)."""


def is_checkpoint(message: Mapping[str, Any]) -> bool:
    """Whether a stored message is a summary checkpoint (hidden continuation message)."""
    return is_hidden_history(message) and message.get("content") == CONTINUATION_TEXT


def checkpoints(messages: Sequence[Message]) -> list[int]:
    """The indices of the summary checkpoints among ``messages``."""
    return [i for i, message in enumerate(messages) if is_checkpoint(message)]


def _stamp(message: Mapping[str, Any]) -> datetime | None:
    value = message.get("timestamp")
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _starts_turn(messages: Sequence[Message], at: int, is_turn: Callable[[Message], bool]) -> bool:
    """Whether the checkpoint at ``at`` was written by the summary at the start of the turn
    whose user message follows it (stamped later than that message)."""
    if at + 1 >= len(messages) or not is_turn(messages[at + 1]):
        return False
    mine, theirs = _stamp(messages[at]), _stamp(messages[at + 1])
    if mine is None or theirs is None:
        return True
    try:
        return mine > theirs
    except TypeError:  # one naive, one aware: not comparable, take the position
        return True


def _committed_at(
    messages: Sequence[Message], at: int, is_turn: Callable[[Message], bool]
) -> str | None:
    """The stored time of the message the session held last when the checkpoint at ``at`` was
    committed (its ``updated_at`` then): the governing turn's user message, or for an idle
    archive the message before it."""
    if _starts_turn(messages, at, is_turn):
        owner: int | None = at + 1
    elif at + 1 < len(messages) and not is_turn(messages[at + 1]):
        owner = next((i for i in range(at - 1, -1, -1) if is_turn(messages[i])), None)
    else:
        owner = next((i for i in range(at - 1, -1, -1) if not is_checkpoint(messages[i])), None)
    if owner is None:
        return None
    stamp = messages[owner].get("timestamp")
    return stamp if isinstance(stamp, str) else None


def _aware(stamp: str | None, zone: tzinfo | None) -> str | None:
    """A stored naive local time as ``datetime.now().astimezone()`` writes it (``zone``:
    default this machine's)."""
    moment = local_moment(stamp, zone)
    return None if moment is None else moment.isoformat()


def _replies(messages: Sequence[Message]) -> int:
    """How many agent calls' replies the loop saved among ``messages``."""
    return sum(m.get("role") == "assistant" and in_loop(m) for m in messages)


def _text_of(
    index: int, marks: list[int], metadata: Mapping[str, Any], texts: Sequence[str | None] | None
) -> tuple[str | None, bool]:
    """The summary text of checkpoint ``marks[index]``, and whether it is inferred."""
    stored = metadata.get("_last_summary")
    final = stored.get("text") if isinstance(stored, Mapping) else None
    final = final if isinstance(final, str) else None
    if index == len(marks) - 1:
        return final, False
    if texts is not None and len(texts) == len(marks) and isinstance(texts[index], str):
        return texts[index], True
    return final, True


def governed_turn(
    messages: Sequence[Message],
    user_index: int,
    stop: int,
    metadata: Mapping[str, Any],
    *,
    is_turn: Callable[[Message], bool],
    texts: Sequence[str | None] | None = None,
    zone: tzinfo | None = None,
) -> GovernedTurn:
    """Where the governor summarised in the turn whose user message is ``messages[user_index]``
    (``stop``: the next turn's user message, or the end), and what the turn began from.

    ``texts`` are the session's summary texts in the order they were written (one per
    checkpoint), for summaries ``_last_summary`` no longer holds; ``zone`` the time zone of
    the process that ran the turn (default: this machine's).
    """
    marks = checkpoints(messages)
    own_start = user_index - 1 in marks and _starts_turn(messages, user_index - 1, is_turn)
    cut = user_index - 1 if own_start else user_index
    earlier = [i for i in marks if i < cut]
    stored = metadata.get("_last_summary")
    last_summary: Mapping[str, Any] | None = None if marks else stored
    inferred: tuple[str, ...] = ()
    if earlier and earlier[-1] == marks[-1]:
        last_summary = stored
    elif earlier:
        text, text_inferred = _text_of(marks.index(earlier[-1]), marks, metadata, texts)
        active = _committed_at(messages, earlier[-1], is_turn)
        if text is not None and active is not None:
            last_summary = {"text": text, "last_active": active}
            inferred = ("text", "last_active") if text_inferred else ("last_active",)
    own = [i for i in marks if user_index < i < stop and not _starts_turn(messages, i, is_turn)]
    step = summary = None
    if own_start or own:
        at = cut if own_start else own[-1]
        step = 0 if own_start else 1 + _replies(messages[user_index + 1 : at])
        text, text_inferred = _text_of(marks.index(at), marks, metadata, texts)
        clock = _aware(messages[user_index].get("timestamp"), zone)
        if text is not None and clock is not None:
            summary = Summary(
                text, clock, ("text", "last_active") if text_inferred else ("last_active",)
            )
    offset = earlier[-1] if earlier else 0
    return GovernedTurn(list(messages[:cut]), offset, last_summary, inferred, step, summary)


def journal_summaries(text: str, session_key: str) -> list[str]:
    """The summaries of one session in the text of 0.3.5's ``memory/history.jsonl`` (one
    JSON entry a line, ``content`` and the ``session_key`` it came from), oldest first."""
    found = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("session_key") == session_key:
            content = entry.get("content")
            if isinstance(content, str):
                found.append(content)
    return found


def _new(steps: list[list[Message]], k: int) -> list[Message]:
    """What the loop appended between call ``k - 1`` and call ``k`` (the reply and results)."""
    return copy.deepcopy(steps[k][len(steps[k - 1]) :])


def sent_messages(
    kit: Mapping[str, Any],
    session_key: str | None,
    *,
    system: str,
    history: list[Message],
    current: Message,
    steps: list[list[Message]],
    step: int,
    summary_step: int | None,
    summary_system: str | None,
) -> list[Message]:
    """The loop's messages of agent call ``step`` as sent: after the turn's summary (before
    ``summary_step``, with ``summary_system`` the prompt carrying it), the continuation
    message and what came after the summarised messages, grown call by call from there."""
    if summary_step is None or step < summary_step:
        return loop_messages(
            system, history, current, steps[step], kit=kit, session_key=session_key
        )
    if summary_system is None:
        raise ValueError("the turn's summary is not on disk: pass its system prompt")
    rules = kit["loop"]
    delta = [copy.deepcopy(current)] if summary_step == 0 else _new(steps, summary_step)
    base = [
        {"role": "system", "content": summary_system},
        {"role": "user", "content": rules["continuation"]},
        *delta,
    ]
    sent = cleaned_for_model(base, rules, session_key)
    for k in range(summary_step + 1, step + 1):
        sent = cleaned_for_model([*sent, *_new(steps, k)], rules, session_key)
    return sent


def candidate_messages(
    kit: Mapping[str, Any],
    session_key: str | None,
    *,
    system: str,
    history: list[Message],
    current: Message,
    steps: list[list[Message]],
    step: int,
    summary_step: int | None,
    summary_system: str | None,
) -> list[Message]:
    """The messages the governor measured before call ``step``: what would have been sent
    without a summary there (the call itself, except at ``summary_step``)."""
    if summary_step is not None and step == summary_step:
        summary_step = None
    return sent_messages(
        kit,
        session_key,
        system=system,
        history=history,
        current=current,
        steps=steps,
        step=step,
        summary_step=summary_step,
        summary_system=summary_system,
    )


def summary_messages(
    kit: Mapping[str, Any],
    session_key: str | None,
    archive: Mapping[str, Any],
    *,
    system: str,
    history: list[Message],
    current: Message,
    steps: list[list[Message]],
    step: int,
) -> list[Message]:
    """The messages of the summary call before agent call ``step``: the accepted messages
    (system prompt and history at a turn's start, else the previous call's request) cleaned
    up again, then the release's archive instruction (``archive``, from its probe)."""
    if step == 0:
        accepted = [{"role": "system", "content": system}, *copy.deepcopy(history)]
    else:
        accepted = loop_messages(
            system, history, current, steps[step - 1], kit=kit, session_key=session_key
        )
    return [*cleaned_for_model(accepted, kit["loop"], session_key), copy.deepcopy(dict(archive))]


def input_budget(context_window: int, max_output: int) -> int:
    """0.3.5's governor budget: ``ctx - max_output - 1024``, 0 when not positive."""
    return max(context_window - max_output - SAFETY_BUFFER, 0)


def verdict(tokens: int, context_window: int, max_output: int) -> bool:
    """Whether the governor summarises before a call measured at ``tokens``: never without a
    context window, always when the budget is not positive, else at or over it."""
    if context_window <= 0:
        return False
    budget = input_budget(context_window, max_output)
    return budget <= 0 or tokens >= budget


def archive_fits(tokens: int, context_window: int, max_output: int) -> bool:
    """Whether a summary call measured at ``tokens`` goes out (else the archive keeps the raw
    messages without calling the model): within ``ctx - max_output``, which must be positive."""
    budget = context_window - max_output
    return budget > 0 and tokens <= budget
