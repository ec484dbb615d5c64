"""One LLM call rebuilt whole: the release's system prompt and tools (its kit), the history it
replayed, the current message and the turn's earlier tool steps, cleaned up as the release's
agent loop and its OpenAI-compatible provider clean them up."""

from __future__ import annotations

import copy
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import pandas as pd

from sessionkit.calls.governor_kit import governor_texts
from sessionkit.calls.installs import find_release
from sessionkit.calls.kits import kit_for
from sessionkit.conventions import entry_point
from sessionkit.nanobot.governor_035 import GovernedTurn, is_checkpoint
from sessionkit.nanobot.kit import Kit
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.release import ReplayPolicy
from sessionkit.nanobot.session import Session, turn_number
from sessionkit.nanobot.settings import DEFAULT_SETTINGS, HistorySettings, Offset
from sessionkit.nanobot.tokens import count_cl100k
from sessionkit.nanobot.workspace import config_file, recorded_workspace
from sessionkit.schema import REQUEST_PARTS, frame
from sessionkit.store.corpus import Corpus, resolve_session
from sessionkit.store.counting import token_cache_of

__all__ = [
    "Request",
    "TurnCalls",
    "call_list",
    "count_text",
    "kit_of",
    "request",
    "turn_calls",
    "workspace_of",
]


count_text = count_cl100k


@dataclass(frozen=True)
class Request:
    """The request one LLM call carried, and where its tokens go."""

    session_key: str
    release: str
    turn: int
    step: int
    messages: list[dict[str, Any]]
    """The ``messages`` of the HTTP body, after the provider's clean-up."""
    loop_messages: list[dict[str, Any]]
    """The list the agent loop handed its provider."""
    tools: list[dict[str, Any]]
    parts: pd.DataFrame
    tokens: int
    """The release's own whole-request estimate, of the loop's messages and the tools (what
    0.3.5's governor compares with its budget)."""
    as_of_now: bool = False
    """True when the workspace files the prompt reads changed after the turn was stored: the
    system prompt is today's, not the one sent then."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    kind: str = "agent"
    """``"agent"``: a call of the agent loop; ``"summary"``: the context governor's summary
    call made before agent call ``step``."""

    def body(self) -> dict[str, Any]:
        """The request as JSON-ready data: messages and tools."""
        return {"messages": self.messages, "tools": self.tools}

    def to_json(self, indent: int | None = 2) -> str:
        """The request as the JSON text ``sessionkit request --format json`` prints."""
        return json.dumps(self.body(), ensure_ascii=False, indent=indent)


@dataclass(frozen=True)
class TurnCalls:
    """A user turn as the agent loop ran it: where its user message is, the history and
    current message of its first call, and what each later call added."""

    user_index: int
    history: list[dict[str, Any]]
    current: dict[str, Any]
    steps: list[list[dict[str, Any]]]
    """``steps[k]``: every message the loop appended before call ``k`` (all earlier rounds)."""
    governor: Any = None
    """What the release's context governor found and did in the turn
    (:meth:`~sessionkit.nanobot.release.ReplayPolicy.governed_turn`), ``None`` without one."""


class LoopPieces(TypedDict):
    """What a governed release's loop-message builders take of a turn by keyword: the system
    prompt, the history and the current message."""

    system: str
    history: list[dict[str, Any]]
    current: dict[str, Any]


class _StepPieces(LoopPieces):
    """:class:`LoopPieces` and the call: what each call had appended, and which call."""

    steps: list[list[dict[str, Any]]]
    step: int


def workspace_of(session: Session) -> Path | None:
    """The workspace a session file belongs to, read from where nanobot keeps it: the folder
    holding ``sessions/`` (0.2.2, 0.3.0), or the workspace a 0.3.5 namespace records."""
    if not session.path:
        return None
    folder = Path(session.path).parent
    recorded = recorded_workspace(folder)
    if recorded is not None:
        return recorded
    return folder.parent if folder.name == "sessions" else None


def config_of(workspace: Path, session: Session) -> Path | None:
    """The config file next to the sessions' config dir (0.3.5: ``<config dir>/sessions/<id>/``)
    or next to the workspace (``~/.nanobot/workspace`` beside ``~/.nanobot/config.json``)."""
    candidates = []
    if session.path:
        folder = Path(session.path).parent
        if folder.parent.name == "sessions":
            candidates.append(folder.parent.parent / "config.json")
    candidates.append(workspace.parent / "config.json")
    return next((c for c in candidates if c.is_file()), None)


def kit_persistence(session: Session) -> bool | None:
    """``cache_dir`` for the kits of ``session``'s requests: False (keep none on disk) for a
    session of a ``cache=False`` load, else None (as the persistence switch says)."""
    return False if token_cache_of([session]) is None else None


def kit_of(
    policy: ReplayPolicy,
    session: Session,
    workspace: str | os.PathLike[str] | None,
    config: str | os.PathLike[str] | None,
    nanobot: str | os.PathLike[str] | None,
    runtime: Mapping[str, Any] | None,
    cache_dir: Path | None | bool = None,
) -> tuple[Kit, Path]:
    """The release's kit for the session's workspace (found from its path unless given), and
    that workspace; kept on disk as :func:`kit_persistence` says unless ``cache_dir`` is
    given."""
    root = Path(workspace) if workspace is not None else workspace_of(session)
    if root is None:
        raise ValueError(
            f"session {session.key!r} has no workspace sessionkit can find (it was not loaded "
            "from a nanobot workspace): pass workspace=<the workspace folder>"
        )
    chosen = Path(config) if config is not None else config_of(root, session)
    python = find_release(policy.version, nanobot)
    kit = kit_for(
        policy.version,
        policy.probe,
        python,
        root,
        config=chosen,
        channel=policy.channel(session.key),
        runtime=runtime,
        cache_dir=kit_persistence(session) if cache_dir is None else cache_dir,
    )
    return kit, root


def turn_calls(
    session: Session,
    turn: int,
    kit: Kit,
    *,
    policy: ReplayPolicy | None = None,
    settings: HistorySettings = DEFAULT_SETTINGS,
    texts: list[str] | None = None,
) -> TurnCalls:
    """The history, current message and per-call steps of user turn ``turn`` (zero-based, as
    in :func:`sessionkit.windows`).

    Under a release whose governor summarises within a turn, the history is the one the turn
    began with (a checkpoint the turn itself inserted before its user message is not in it)
    and :attr:`TurnCalls.governor` says where it summarised (``texts``: the session's summary
    texts oldest first, for summaries its metadata no longer holds); it replays from the
    latest checkpoint before the turn, or from a recorded offset an earlier release wrote
    when that lies later within the turn's messages (0.3.5 reads it as ``last_archived``).
    """
    policy = policy or get_policy(session.policy)
    turn = turn_number(turn, "turn")
    n_turns = session.n_user_turns
    if not 0 <= turn < n_turns:
        raise IndexError(
            f"turn {turn} is out of range: session {session.key!r} has {n_turns} user turns"
        )
    before = session.before_user(turn)
    at = len(before.messages)
    after = session.before_user(turn + 1) if turn + 1 < n_turns else session
    stop = len(after.messages) if turn + 1 < n_turns else len(session.messages)
    resolved = policy.resolve(settings)
    metadata = session.metadata if isinstance(session.metadata, dict) else {}
    governor = policy.governed_turn(session.messages, at, stop, metadata, texts=texts)
    messages, offset = before.messages, before.replay_offset(resolved.last_consolidated)
    if governor is not None:
        messages = governor.before
        if resolved.last_consolidated in (None, "recorded"):
            offset = _archived_at_start(governor, session.messages, offset)
        offset = offset if offset <= len(messages) else 0
    history = policy.get_history(messages, offset, **policy.history_kwargs(resolved))
    user = session.messages[at]
    if user.get("_command"):
        raise ValueError(
            f"turn {turn} of session {session.key!r} is a command "
            f"({str(user.get('content'))[:40]!r}): nanobot answered it without calling the model"
        )
    current = policy.current_message(kit, user, session.key)
    steps = policy.turn_steps(session.messages[at + 1 : stop])
    return TurnCalls(at, history, current, steps, governor)


def _archived_at_start(
    governor: GovernedTurn, messages: list[dict[str, Any]], recorded: int
) -> int:
    """``last_archived`` when a governed turn began: its latest checkpoint before the turn, or
    the recorded offset when later and not at a checkpoint (one an earlier release wrote, which
    0.3.5 reads as ``last_archived``, as :func:`sessionkit.windows` takes it); a recorded offset
    at a checkpoint is the governor's to place (a turn's own turn-start one is not yet in force)."""
    at_checkpoint = recorded < len(messages) and is_checkpoint(messages[recorded])
    if at_checkpoint or recorded > len(governor.before):
        return governor.offset
    return max(governor.offset, recorded)


def call_list(
    source: Session | Corpus,
    turn: int,
    *,
    key: str | None = None,
    policy: str | None = None,
) -> list[tuple[int, str]]:
    """Every LLM call of user turn ``turn`` in the order the release made them, as
    ``(step, kind)``: ``"agent"`` calls, and the context governor's ``"summary"`` call, which
    carries the step of the agent call it precedes (what :func:`request` takes)."""
    session = resolve_session(source, key)
    chosen = get_policy(policy or session.policy)
    turn = turn_number(turn, "turn")
    n_turns = session.n_user_turns
    if not 0 <= turn < n_turns:
        raise IndexError(
            f"turn {turn} is out of range: session {session.key!r} has {n_turns} user turns"
        )
    at = len(session.before_user(turn).messages)
    stop = len(session.before_user(turn + 1).messages) if turn + 1 < n_turns else len(session)
    if session.messages[at].get("_command"):
        return []
    metadata = session.metadata if isinstance(session.metadata, dict) else {}
    governor = chosen.governed_turn(session.messages, at, stop, metadata)
    summary_step = governor.summary_step if governor is not None else None
    listed = []
    for step in range(len(chosen.turn_steps(session.messages[at + 1 : stop]))):
        if step == summary_step:
            listed.append((step, "summary"))
        listed.append((step, "agent"))
    return listed


@dataclass(frozen=True)
class _Layout:
    """The messages of one request by part (before the clean-ups), and whether its archived
    summary holds a value not on disk."""

    history: list[dict[str, Any]]
    current: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    summary_inferred: bool = False
    instruction: list[dict[str, Any]] = field(default_factory=list)


def _parts(
    policy: ReplayPolicy,
    kit: Kit,
    system: str,
    layout: _Layout,
    tools: list[dict[str, Any]],
) -> pd.DataFrame:
    """One row per part: the system prompt's parts, tools, history, current, steps (and a
    summary call's archive instruction)."""

    def estimate(messages: list[dict[str, Any]], with_tools: list[dict[str, Any]]) -> int:
        if not messages and not with_tools:
            return 0
        return policy.estimate_request(messages, with_tools, count_text)

    rows = []
    for name, text, inferred in kit.system:
        rows.append((f"system: {name}", 0, count_text(text), inferred))
    extra = system[len(kit.system_text) :] if system.startswith(kit.system_text) else ""
    if extra:
        rows.append(("system: archived summary", 0, count_text(extra), layout.summary_inferred))
    rows.append(("tools", 0, estimate([], tools), False))
    rows.append(("history", len(layout.history), estimate(layout.history, []), False))
    current = layout.current
    rows.append(("current", len(current), estimate(current, []), "time" in kit.sentinels))
    rows.append(("steps", len(layout.steps), estimate(layout.steps, []), False))
    if layout.instruction:
        rows.append(("archive instruction", 1, estimate(layout.instruction, []), False))
    columns = list(zip(*rows, strict=True))
    return frame(
        REQUEST_PARTS,
        {
            "part": list(columns[0]),
            "messages": list(columns[1]),
            "tokens": list(columns[2]),
            "inferred": list(columns[3]),
        },
    )


@entry_point(config="config_dir")
def request(
    source: Session | Corpus,
    key: str | None = None,
    turn: int | None = None,
    *,
    step: int = 0,
    policy: str | None = None,
    settings: HistorySettings | None = None,
    max_messages: int | None = None,
    max_tokens: int | None = None,
    include_timestamps: bool | None = None,
    include_runtime_context: bool | None = None,
    extend_to_user: bool | None = None,
    last_consolidated: Offset | None = None,
    file_cap: int | None = None,
    workspace: str | os.PathLike[str] | None = None,
    config_dir: str | os.PathLike[str] | None = None,
    nanobot: str | os.PathLike[str] | None = None,
    runtime: Mapping[str, Any] | None = None,
    summary: bool = False,
    last_active: str | None = None,
) -> Request:
    """The exact request the release sent for call ``step`` of user turn ``turn``.

    Parameters
    ----------
    source, key
        A session, or a Corpus and the key of one of its sessions.
    turn
        Zero-based user message being answered (as in :func:`sessionkit.windows`).  The old
        call ``request(source, turn)`` (the turn second) still works, with a
        ``DeprecationWarning``.
    step
        Zero-based agent call within the turn (0: the first, before any tool ran).
    policy, settings
        The release (default: the session's own) and history settings (default: its own).
    max_messages, max_tokens, include_timestamps, include_runtime_context, extend_to_user, \
last_consolidated, file_cap
        Overrides of ``settings``, one value each (None: the setting's).
    workspace, config_dir
        The workspace whose files the prompt reads and its nanobot config file, or that
        file's folder (``config.json`` there; ``config=`` is the deprecated spelling); by
        default found where nanobot keeps them, from the session's path.
    nanobot
        The interpreter or venv of the installed release (default: found, see
        :func:`sessionkit.calls.installs.find_release`).
    runtime
        Overrides of the process facts the release writes into the prompt (``system``,
        ``machine``, ``python_version``, ...), else this machine's; ``workspace_path``: the
        path the prompt names for the workspace (where nanobot ran it), else where it lies;
        ``release_path``: the path it names for nanobot's package, else the install's.
    summary
        The context governor's summary call made before agent call ``step`` (see
        :func:`call_list`) rather than that agent call.
    last_active
        The ``last active`` time of the archived summary this request's system prompt
        carries, where the files do not hold it (the clock right after a summary within the
        turn, or a summary a later one overwrote); by default the nearest stored time,
        marked ``inferred`` in ``.parts``.
    """
    if isinstance(key, int) and not isinstance(key, bool) and turn is None:
        warnings.warn(
            f"request(source, {key}) is deprecated; pass request(source, turn={key}) "
            "(the second parameter is the session key)",
            DeprecationWarning,
            stacklevel=3,
        )
        key, turn = None, key
    if turn is None:
        raise TypeError("request() needs turn=, the zero-based user turn answered")
    settings = (DEFAULT_SETTINGS if settings is None else settings).replace(
        max_messages=max_messages,
        max_tokens=max_tokens,
        include_timestamps=include_timestamps,
        include_runtime_context=include_runtime_context,
        extend_to_user=extend_to_user,
        last_consolidated=last_consolidated,
        file_cap=file_cap,
    )
    config = None if config_dir is None else config_file(config_dir)
    session = resolve_session(source, key)
    chosen = get_policy(policy or session.policy)
    kit, root = kit_of(chosen, session, workspace, config, nanobot, runtime)
    texts = chosen.summary_journal(root, session.key)
    calls = turn_calls(session, turn, kit, policy=chosen, settings=settings, texts=texts)
    step = turn_number(step, "step")
    if not 0 <= step < len(calls.steps):
        raise IndexError(
            f"step {step} is out of range: turn {turn} of session {session.key!r} made "
            f"{len(calls.steps)} calls"
        )
    if calls.governor is None:
        if summary:
            raise ValueError(f"{chosen.label} makes no summary call within a turn")
        system = chosen.system_prompt(kit, session.before_user(turn))
        stepped = copy.deepcopy(calls.steps[step])
        loop = chosen.loop_messages(kit, session.key, system, calls.history, calls.current, stepped)
        layout = _Layout(calls.history, [calls.current], calls.steps[step])
        notes: tuple[str, ...] = ()
    else:
        if summary and calls.governor.summary_step != step:
            raise ValueError(
                f"turn {turn} of session {session.key!r} made no summary call before step {step}"
            )
        archive = None
        if summary:
            archive = governor_texts(chosen, find_release(chosen.version, nanobot))["archive"]
        system, loop, layout, notes = _governed(
            chosen, kit, session, calls, step, archive, last_active
        )
    wire = chosen.wire_messages(kit, loop)
    tools = [dict(t) for t in kit.tools]
    stored_at = _stored_time(session.messages[calls.user_index])
    as_of_now = stored_at is not None and kit.inputs_changed_at > stored_at
    if as_of_now:
        notes = (
            *notes,
            f"the workspace files the prompt reads changed after the turn; rebuilt from {root} as it is now",
        )
    return Request(
        session_key=session.key,
        release=chosen.name,
        turn=turn,
        step=step,
        messages=wire,
        loop_messages=loop,
        tools=tools,
        parts=_parts(chosen, kit, system, layout, tools),
        tokens=chosen.estimate_request(loop, tools, count_text),
        as_of_now=as_of_now,
        notes=notes,
        kind="summary" if summary else "agent",
    )


def _remaining(inferred: tuple[str, ...], last_active: str | None) -> tuple[str, ...]:
    """The values of a summary still inferred once ``last_active`` is given (when it is)."""
    return tuple(v for v in inferred if v != "last_active" or last_active is None)


def _governed(
    policy: ReplayPolicy,
    kit: Kit,
    session: Session,
    calls: TurnCalls,
    step: int,
    archive: Mapping[str, Any] | None,
    last_active: str | None,
) -> tuple[str, list[dict[str, Any]], _Layout, tuple[str, ...]]:
    """The system prompt, loop messages, parts and notes of one call of a turn under a
    release whose governor may have summarised in it (``archive``: make the summary call)."""
    plan = calls.governor
    if plan.summary_step is not None and plan.summary is None:
        raise ValueError("the turn's summary text is not on disk")
    start, start_inferred = plan.last_summary, plan.last_summary_inferred
    if start is not None and "last_active" in start_inferred and last_active is not None:
        start = {**start, "last_active": last_active}
    system = policy.summary_system_prompt(kit, start, session.updated_at)
    pieces: _StepPieces = {
        "system": system,
        "history": calls.history,
        "current": calls.current,
        "steps": calls.steps,
        "step": step,
    }
    inferred = _remaining(start_inferred, last_active)
    if archive is not None:
        loop = policy.summary_loop_messages(kit, session.key, archive, **pieces)
        current = [calls.current] if step else []
        earlier = calls.steps[step - 1] if step else []
        layout = _Layout(calls.history, current, earlier, bool(inferred), [dict(archive)])
    elif plan.summary_step is not None and step >= plan.summary_step:
        held = plan.summary.as_metadata()
        if last_active is not None:
            held["last_active"] = last_active
        system = policy.summary_system_prompt(kit, held, session.updated_at)
        loop = policy.governed_loop_messages(
            kit,
            session.key,
            **pieces,
            summary_step=plan.summary_step,
            summary_system=system,
        )
        continuation = {"role": "user", "content": kit.raw["loop"]["continuation"]}
        base = plan.summary_step
        delta = calls.steps[step][len(calls.steps[base - 1]) :] if base else calls.steps[step]
        inferred = _remaining(plan.summary.inferred, last_active)
        layout = _Layout([continuation], [] if base else [calls.current], delta, bool(inferred))
    else:
        loop = policy.governed_loop_messages(kit, session.key, **pieces)
        layout = _Layout(calls.history, [calls.current], calls.steps[step], bool(inferred))
    notes = []
    if "last_active" in inferred:
        notes.append(
            "the archived summary's last active time is not on disk (the clock right after a "
            "summary within the turn, or a summary a later one overwrote): the nearest stored "
            "time stands in"
        )
    if "text" in inferred:
        notes.append("the archived summary's text was overwritten on disk by a later one: inferred")
    return system, loop, layout, tuple(notes)


def _stored_time(message: Mapping[str, Any]) -> float | None:
    """The POSIX time of a message's ``timestamp`` (naive: local time), else None."""
    stamp = message.get("timestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return pd.Timestamp(stamp).to_pydatetime().timestamp()
    except (ValueError, OverflowError):
        return None
