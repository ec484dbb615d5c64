"""Every LLM call of a store as rows: tokens per part of the whole request and what a
provider's prefix cache could reuse from the previous call, for any history setting.

The history part comes from :func:`sessionkit.windows` (index arithmetic and prefix sums);
system prompt and tools from the release's kit, counted once per workspace; the current
message and the turn's steps from each release's request rules, counted once per message.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

import numpy as np
import pandas as pd

from sessionkit.calls.assembly import count_text
from sessionkit.calls.assembly import kit_of as _kit_of
from sessionkit.calls.installs import ReleaseNotInstalled
from sessionkit.nanobot.kit import Kit
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.release import ReplayPolicy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings, SettingsOverrides
from sessionkit.schema import REQUESTS, frame
from sessionkit.simulate.windowing import windows
from sessionkit.store.corpus import Corpus

__all__ = ["requests"]

_SETTING_COLUMNS = [
    "max_messages",
    "max_tokens",
    "include_timestamps",
    "include_runtime_context",
    "extend_to_user",
    "last_consolidated",
    "context_window",
    "max_output",
]


@dataclass(frozen=True)
class _Turn:
    """One turn's calls apart from the history: tokens of the current message, of each
    call's steps, and the messages the next turn's history would repeat from it."""

    current: int
    steps: tuple[int, ...]
    inferred: bool
    """The current message could not be rebuilt (no kit, or a stored form the release would
    not have sent): the stored message stands in for it."""
    tail: tuple[tuple[int, dict[str, Any]], ...]
    """The current message and the last call's steps as sent, each with the position of its
    stored line (what the next turn's history replays in its place)."""


def _turns(policy: ReplayPolicy, session: Session, kit: Kit | None) -> list[_Turn | None]:
    """Per user turn (None for a command, answered without a call)."""
    out: list[_Turn | None] = []
    positions = [i for i, m in enumerate(session.messages) if policy.is_user_turn(m)]
    ends = [*positions[1:], len(session.messages)]
    for at, stop in zip(positions, ends, strict=True):
        message = session.messages[at]
        try:
            current = None if kit is None else policy.current_message(kit, message, session.key)
        except ValueError:
            current = None
        inferred = current is None
        current = dict(message) if current is None else current
        steps = policy.turn_steps(session.messages[at + 1 : stop])
        counts = tuple(
            sum(policy.estimate_message_tokens(m) for m in step) if step else 0 for step in steps
        )
        sent = (current, *steps[-1])
        out.append(
            _Turn(
                policy.estimate_message_tokens(current),
                counts,
                inferred,
                tuple(zip(range(at, at + len(sent)), sent, strict=True)),
            )
        )
    return out


def _session_kit(
    policy: ReplayPolicy,
    session: Session,
    workspace: Path | None,
    config: Path | None,
    nanobot: Any,
    runtime: Mapping[str, Any] | None,
    missing: set[str],
) -> Kit | None:
    try:
        return _kit_of(policy, session, workspace, config, nanobot, runtime)[0]
    except ReleaseNotInstalled as exc:
        if policy.version not in missing:
            missing.add(policy.version)
            warnings.warn(
                f"sessionkit.requests: {exc}; system prompt and tools are left empty",
                stacklevel=4,
            )
    except ValueError as exc:
        if session.key not in missing:
            missing.add(session.key)
            warnings.warn(f"sessionkit.requests: {exc}", stacklevel=4)
    return None


def _kit_tokens(release: ReplayPolicy, kit: Kit | None) -> tuple[int, int, bool]:
    """System prompt tokens, tool tokens, and whether any system part is inferred."""
    if kit is None:
        return 0, 0, False
    system = count_text(kit.system_text) if kit.system_text else 0
    tools = release.estimate_request([], [dict(t) for t in kit.tools], count_text)
    return system, tools if kit.tools else 0, any(p[2] for p in kit.system)


def requests(
    source: Session | Corpus | Iterable[Session],
    *,
    workspace: str | Path | None = None,
    config: str | Path | None = None,
    policy: str | list[str] | None = None,
    settings: HistorySettings = DEFAULT_SETTINGS,
    nanobot: Any = None,
    runtime: Mapping[str, Any] | None = None,
    block: int | None = None,
    context_window: int | list[int] | None = None,
    max_output: int | list[int] | None = None,
    **overrides: Unpack[SettingsOverrides],
) -> pd.DataFrame:
    """One row per (session, release, setting, turn, step): the request's tokens by part,
    its total, and ``prefix_tokens``, what it shares exactly with the session's previous
    request (tool definitions and system prompt when unchanged, then whole identical
    messages), rounded down to a multiple of ``block`` when given, with ``cache_ratio``.

    Settings and overrides are those of :func:`sessionkit.windows` (each may be a list: the
    frame covers the grid).  Without an installed release (see ``sessionkit releases
    install``) the system and tools parts are 0 and a warning says so once.
    """
    sessions = [source] if isinstance(source, Session) else list(source)
    frame_of_windows = windows(
        sessions,
        settings=settings,
        policy=policy,
        context_window=context_window,
        max_output=max_output,
        **overrides,
    )
    by_key = {s.key: s for s in sessions}
    missing: set[str] = set()
    kits: dict[tuple[str, str], Kit | None] = {}
    turns: dict[tuple[str, str], list[_Turn | None]] = {}
    sizes: dict[tuple[str, str], tuple[int, int, bool]] = {}
    root = Path(workspace) if workspace is not None else None
    chosen_config = Path(config) if config is not None else None
    columns: dict[str, list[Any]] = {c.name: [] for c in REQUESTS}
    w = frame_of_windows
    group_keys = ["session_key", "policy", *_SETTING_COLUMNS]
    w = w.assign(_row=np.arange(len(w)))
    for keys, rows in w.groupby(group_keys, observed=True, sort=False, dropna=False):
        key, name = str(keys[0]), str(keys[1])
        session = by_key[key]
        release = get_policy(name)
        if (key, name) not in kits:
            kits[key, name] = _session_kit(
                release, session, root, chosen_config, nanobot, runtime, missing
            )
            turns[key, name] = _turns(release, session, kits[key, name])
            sizes[key, name] = _kit_tokens(release, kits[key, name])
        system, tools, inferred = sizes[key, name]
        inferred = inferred or kits[key, name] is None
        previous_total = 0
        previous_history: tuple[int, int] | None = None
        previous_turn: _Turn | None = None
        for row in rows.sort_values("turn").itertuples(index=False):
            turn = turns[key, name][row.turn] if row.turn < len(turns[key, name]) else None
            if turn is None or row.command:
                continue
            history = int(row.tokens_kept)
            shared_messages = 0
            if previous_history is not None and previous_history[0] == row.start:
                shared_messages = previous_history[1]
                shared_messages += _repeated(
                    release, kits[key, name], session, previous_turn, row, settings
                )
            for step, step_tokens in enumerate(turn.steps):
                total = system + tools + history + turn.current + step_tokens
                if step > 0:
                    prefix = previous_total
                elif previous_history is None:
                    prefix = 0
                else:
                    prefix = system + tools + shared_messages
                if block:
                    prefix -= prefix % block
                _append(
                    columns,
                    row,
                    step,
                    system,
                    tools,
                    history,
                    turn.current,
                    step_tokens,
                    total,
                    prefix,
                    inferred or turn.inferred,
                )
                previous_total = total
            previous_history = (int(row.start), history)
            previous_turn = turn
    for name in ("session_key", "policy"):
        columns[name] = pd.Categorical(columns[name], categories=w[name].cat.categories)
    return frame(REQUESTS, columns)


def _repeated(
    release: ReplayPolicy,
    kit: Kit | None,
    session: Session,
    turn: _Turn | None,
    row: Any,
    settings: HistorySettings,
) -> int:
    """Tokens of the previous turn's current message and last steps that this turn's history
    repeats exactly on the wire (their leading run), each replayed from its stored line under
    the row's entry setting."""
    if turn is None:
        return 0
    entry = settings.replace(**{release.entry_setting: bool(getattr(row, release.entry_setting))})
    rewrite = release.entry_function(entry)
    shared = 0
    for position, sent in turn.tail:
        if not row.start <= position < row.stop:
            break
        replayed = rewrite(session.messages[position])
        if replayed is None or _on_wire(release, kit, replayed) != _on_wire(release, kit, sent):
            break
        shared += release.estimate_message_tokens(sent)
    return shared


def _on_wire(release: ReplayPolicy, kit: Kit | None, message: dict[str, Any]) -> Any:
    """``message`` as the provider would send it (internal keys dropped), to compare two."""
    return message if kit is None else release.wire_messages(kit, [message])


def _append(columns: dict[str, list[Any]], row: Any, step: int, *values: Any) -> None:
    system, tools, history, current, steps, total, prefix, inferred = values
    for name in ("session_key", "policy", "turn", *_SETTING_COLUMNS):
        columns[name].append(getattr(row, name))
    columns["step"].append(step)
    columns["system_tokens"].append(system)
    columns["tools_tokens"].append(tools)
    columns["history_tokens"].append(history)
    columns["history_messages"].append(int(row.messages_kept))
    columns["current_tokens"].append(current)
    columns["steps_tokens"].append(steps)
    columns["total_tokens"].append(total)
    columns["prefix_tokens"].append(prefix)
    columns["cache_ratio"].append(prefix / total if total else 0.0)
    columns["inferred"].append(inferred)
