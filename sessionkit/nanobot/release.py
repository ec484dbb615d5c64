"""What a nanobot release is to sessionkit: one object answering every per-release question.

:class:`ReplayPolicy` holds what every release shares (replay from an offset through a count
window, a user-turn start, a legal tool-call start and a token budget from the tail) and the
attributes the layers above ask instead of comparing release names: ``label``, ``colour``,
``naming``, the temp-file rule, the token payload and fallback, the settings defaults, the
agent loop's call, checkpoints, the governor and the file cap (``None`` where a release has
none).  :class:`CappedPolicy` adds ``enforce_file_cap`` and ``retain_recent_legal_suffix``
for the releases that have them.  Each release subclasses one of these in its own module.
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import tzinfo
from functools import cached_property, partial
from pathlib import Path
from typing import Any, ClassVar, Protocol

from sessionkit.nanobot import tokens
from sessionkit.nanobot.call_forms import CallForms
from sessionkit.nanobot.entry_changes import EntryFacts
from sessionkit.nanobot.history import (
    FORK_VOLATILE_METADATA_KEYS,
    Message,
    Trim,
    align_to_user,
    find_legal_message_start,
    fit_budget,
    is_hidden_history,
    is_user,
    keep_range,
    offset_start,
    recent_message_start_index,
    unchanged,
)
from sessionkit.nanobot.kit import Kit
from sessionkit.nanobot.naming import Naming
from sessionkit.nanobot.settings import HistorySettings

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "SAFETY_BUFFER",
    "CappedPolicy",
    "LoopCall",
    "ReplayPolicy",
    "WindowRefused",
    "WindowRule",
]

DEFAULT_MAX_OUTPUT = 8192
"""nanobot's default ``max_tokens`` (the model's output reserve) in every release's config."""
SAFETY_BUFFER = 1024
"""What every release's agent loop keeps free besides the output reserve."""


@dataclass(frozen=True)
class LoopCall:
    """What a release's agent loop passes to ``get_history`` for one context window.

    ``governor_budget`` is the whole-request budget of a release with a context governor (0
    for the others, whose budget is ``max_tokens``).
    """

    max_messages: int
    max_tokens: int
    governor_budget: int = 0


def replay_token_budget(context_window: int, max_output: int) -> int:
    """The ``max_tokens`` 0.2.2's and 0.3.0's agent loops pass (0, no budget, without a
    context window): ``ctx - max(1, max_output) - 1024``, or ``max(128, ctx // 2)`` when that
    is not positive."""
    if context_window <= 0:
        return 0
    budget = context_window - max(1, max_output) - SAFETY_BUFFER
    return budget if budget > 0 else max(128, context_window // 2)


class WindowRefused(ValueError):
    """A candidate policy's window refused: which candidate, where and why."""

    def __init__(self, candidate: str, turn: int, why: str, session: str | None = None) -> None:
        self.candidate, self.turn, self.why, self.session = candidate, turn, why, session
        where = f"turn {turn}" if session is None else f"session {session!r}, turn {turn}"
        super().__init__(f"candidate {candidate!r} refused at {where}: {why}")

    def at(self, session: str) -> WindowRefused:
        """The same refusal naming ``session``."""
        return WindowRefused(self.candidate, self.turn, self.why, session)


class WindowRule(Protocol):
    """A candidate policy's window (``sessionkit.candidates``): where it starts ``get_history``'s
    window, the release's alignment applied."""

    @property
    def base(self) -> str:
        """The release whose rules, replays and counts the candidate shares."""
        ...

    @property
    def identity(self) -> str | None:
        """What the candidate is in any process (None: it cannot be told, so nothing keeps it)."""
        ...

    def exact_start(
        self,
        release: ReplayPolicy,
        messages: Sequence[Message],
        offset: int,
        max_messages: int,
        *,
        extend_to_user: bool,
        entry: Callable[[Message], Message | None],
    ) -> int:
        """The legal start of the window of ``messages`` (as :meth:`ReplayPolicy.window_start`)."""
        ...


@dataclass(frozen=True, repr=False)
class ReplayPolicy:
    """One nanobot release: its replay rules and every fact the layers above ask about it.

    A release supplies its entry rewrite (``replay_entry``, taking the one setting named by
    :attr:`entry_setting`), its payload and fallback count, its default settings and, in
    ``replay``, ``get_history``'s exact signature.  Methods never modify their arguments;
    :class:`sessionkit.Session` applies results.
    """

    name: str = ""
    label: str = ""
    """How plots, tables and widgets name the release (``"nanobot 0.2.2"``)."""
    colour: str = "#7f7f7f"
    """The release's colour in every plot and widget."""
    default_max_messages: int = 120
    """The count window ``get_history`` applies for ``max_messages <= 0`` (0: none)."""
    naming: Naming = "nanobot-0.2"
    """The file naming scheme a fork of this release's session uses (``sessionkit.nanobot.naming``)."""
    temp_name: str = r"[^/]*\.jsonl\.tmp"
    """The name of the temporary file this release's save writes (a regex, matched whole)."""
    plain_count: str = "cl100k_base+4"
    """How this release counts a plain message exactly (``content`` a string or missing, no
    ``<|`` in any field): its payload's cl100k_base tokens plus 4 framing tokens.  Releases
    naming the same rule share those counts in the token cache (a grid over releases counts
    each such message once)."""
    counts_as: str = ""
    """The release whose token counts (exact and estimates) this one's equal, by name, when it
    is another (0.1.5 and 0.2.1 count as 0.2.2): loads keep that one's counts, not its own."""
    estimates: bool = True
    """Whether the release estimates tokens at all: 0.1.4 to 0.1.4.post4 have no estimator,
    so frames hold <NA> for their sessions' tokens (:meth:`estimate_message_tokens` still
    counts as 0.1.4.post6 for replays)."""
    fork_volatile_keys: frozenset[str] = FORK_VOLATILE_METADATA_KEYS
    entry_setting: str = "include_timestamps"
    """The one :class:`HistorySettings` field replayed entries depend on (0.2.2:
    ``include_timestamps``; 0.3.x: ``include_runtime_context``), a keyword of ``replay_entry``
    and ``replay``."""
    entry_default: bool = False
    """``get_history``'s default for :attr:`entry_setting` (0.2.2 ``include_timestamps=False``,
    0.3.x ``include_runtime_context=True``)."""
    defaults: HistorySettings = HistorySettings()
    """The value of each history setting left ``None``: what ``get_history`` takes by default
    and what the agent loop passes besides the limits it derives from the model."""
    ignored: frozenset[str] = frozenset()
    """Settings this release does not take: always its default, whatever was asked."""
    hidden_turns: bool = True
    """Whether a user message marked hidden (:func:`~sessionkit.nanobot.history.is_hidden_history`)
    still counts as a turn (0.3.5: no, its checkpoint and automation messages are not turns)."""
    checkpoints: bool = False
    """Whether summaries leave hidden checkpoint messages the replay offset points to."""
    governed: bool = False
    """Whether a context governor budgets the whole request (``LoopCall.governor_budget``)."""
    windowed: bool = True
    """Whether the window arithmetic (``windows``, ``message_states``) reproduces this release's
    ``get_history``; 0.1.4 to 0.1.5.post2's count slices only :meth:`replay` reproduces."""
    rule: WindowRule | None = None
    """A candidate policy's window rule (``sessionkit.candidate``); None for a release."""
    loss_rule: bool = False
    """Whether :mod:`sessionkit.nanobot.loss` reproduces this release's loader (what it loses
    of a damaged file: 0.2.2's loader, the same from 0.1.5.post2 on)."""
    file_cap: ClassVar[Callable[..., Trim] | None] = None
    governor_probe: str = ""
    """The script of :mod:`sessionkit.nanobot.probes` run inside that release for its context
    governor's texts (the archive instruction of its summary call); empty without a governor."""
    version: str = ""
    """The ``nanobot-ai`` version on PyPI whose rules these are (what is installed to ask it
    for its prompt and tools)."""
    probe: str = ""
    """The script of :mod:`sessionkit.nanobot.probes` run inside that release for its kit."""
    """``enforce_file_cap``'s rule, ``None`` for a release without a file cap."""

    def __repr__(self) -> str:
        """Short: the release and its registry name (its fields are its documentation)."""
        return f"<{self.label or type(self).__name__} ({self.name})>"

    def resolve(self, settings: HistorySettings) -> HistorySettings:
        """``settings`` with every ``None`` (and every setting this release ignores) replaced by
        this release's default: the settings in force under this release."""
        chosen = {
            f.name: (
                getattr(self.defaults, f.name)
                if f.name in self.ignored or getattr(settings, f.name) is None
                else getattr(settings, f.name)
            )
            for f in fields(HistorySettings)
        }
        return HistorySettings(**chosen)

    def loop_call(self, context_window: int, max_output: int, max_messages: int) -> LoopCall:
        """The ``get_history`` arguments the agent loop derives from a model's limits
        (``max_messages``: the configured count window, for a release that passes one)."""
        return LoopCall(max_messages, replay_token_budget(context_window, max_output))

    def is_user_turn(self, message: Message) -> bool:
        """Whether ``message`` is a user turn: what forks, frames and views count as turns."""
        return message.get("role") == "user" and (
            self.hidden_turns or not is_hidden_history(message)
        )

    def is_temp_file(self, name: str) -> bool:
        """Whether a file called ``name`` is this release's leftover temporary save file."""
        return re.fullmatch(self.temp_name, name, re.DOTALL) is not None

    def fork_copy(self, message: Message) -> Message:
        """The copy of a stored message a fork keeps (0.2.2: the message as it is)."""
        return copy.deepcopy(message)

    def records_after_clear(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The extra file records ``clear()`` keeps (every one, unless a release drops some)."""
        return records

    def rewrite_on_load(self, messages: list[Message], metadata: dict[str, Any]) -> bool:
        """Rewrite a file's messages and metadata in place as this release does when it loads
        them; whether anything changed (its extra records then are ``records_after_clear``'s)."""
        return False

    def metadata_record(
        self, key: str, created_at: str, updated_at: str, metadata: Any, offset: int
    ) -> dict[str, Any]:
        """The first line of a session file as this release writes it."""
        return {
            "_type": "metadata",
            "key": key,
            "created_at": created_at,
            "updated_at": updated_at,
            "metadata": metadata,
            "last_consolidated": offset,
        }

    def channel(self, key: str) -> str | None:
        """The channel a session key names (what the release's prompt adapts to)."""
        return key.split(":", 1)[0] if ":" in key else None

    def system_prompt(self, kit: Kit, session: Any) -> str:
        """The system prompt of a request answering the next turn of ``session`` (as stored
        before that turn)."""
        return kit.system_text

    def current_message(self, kit: Kit, user: Message, session_key: str) -> Message:
        """The stored user message of session ``session_key`` as the loop sent it."""
        raise NotImplementedError(f"{self.label} has no request rules")

    def turn_steps(self, turn: list[Message]) -> list[list[Message]]:
        """The stored messages of one turn after its user message -> what the loop had
        appended before each of its calls (``[0]`` is empty)."""
        raise NotImplementedError(f"{self.label} has no request rules")

    def loop_messages(
        self,
        kit: Kit,
        session_key: str,
        system: str,
        history: list[Message],
        current: Message,
        steps: list[Message],
        count: Callable[[str], int] | None = None,
    ) -> list[Message]:
        """The list the agent loop handed its provider for one call (``count``: a cl100k_base
        count for the loop's own estimates, such as a plan's shared one; None: the release's)."""
        raise NotImplementedError(f"{self.label} has no request rules")

    def wire_messages(self, kit: Kit, loop: list[Message]) -> list[Message]:
        """The ``messages`` of the OpenAI-compatible HTTP body (the provider's clean-up)."""
        raise NotImplementedError(f"{self.label} has no request rules")

    def estimate_request(
        self, messages: list[Message], tools: list[Message], count: Callable[[str], int]
    ) -> int:
        """The release's own estimate of a whole request (``count``: cl100k tokens)."""
        raise NotImplementedError(f"{self.label} has no request rules")

    def call_forms(
        self,
        kit: Kit,
        messages: Sequence[Message],
        entry: Callable[[Message], Message | None],
        session_key: str,
    ) -> CallForms | None:
        """What this release's per-call clean-up makes of each stored message (``entry``: its
        history rewrite of one), for frames that add requests up; None where the clean-up is
        not modelled (messages then count as replayed)."""
        return None

    def governed_turn(
        self,
        messages: Sequence[Message],
        user_index: int,
        stop: int,
        metadata: Mapping[str, Any],
        *,
        texts: Sequence[str | None] | None = None,
        zone: tzinfo | None = None,
    ) -> Any:
        """Where this release's context governor summarised in the turn whose user message is
        ``messages[user_index]`` (``stop``: the next one's, or the end) and what the turn
        began from; ``None`` for a release whose governor never summarises within a turn."""
        return None

    def summary_journal(self, workspace: Path, session_key: str) -> list[str] | None:
        """The summaries this release's memory journal in ``workspace`` holds for one session,
        oldest first (``None``: the release keeps none, or the journal cannot be read)."""
        return None

    def summary_system_prompt(
        self, kit: Kit, last_summary: Mapping[str, Any] | None, updated_at: Any
    ) -> str:
        """The system prompt carrying ``last_summary`` (``{"text", "last_active"}``) as this
        release's governor rebuilds it after a summary."""
        raise NotImplementedError(f"{self.label} has no context governor")

    def governed_loop_messages(
        self,
        kit: Kit,
        session_key: str,
        *,
        system: str,
        history: list[Message],
        current: Message,
        steps: list[list[Message]],
        step: int,
        summary_step: int | None = None,
        summary_system: str | None = None,
        measured: bool = False,
    ) -> list[Message]:
        """The loop's messages of call ``step`` of a turn (``steps``: what each call had
        appended) when a summary preceded call ``summary_step`` (``summary_system``: the prompt
        carrying it); ``measured``: what the governor measured there instead (before any
        summary at that call)."""
        if summary_step is not None and not (measured and step == summary_step):
            raise NotImplementedError(f"{self.label} has no context governor")
        return self.loop_messages(kit, session_key, system, history, current, steps[step])

    def summary_loop_messages(
        self,
        kit: Kit,
        session_key: str,
        archive: Mapping[str, Any],
        *,
        system: str,
        history: list[Message],
        current: Message,
        steps: list[list[Message]],
        step: int,
    ) -> list[Message]:
        """The messages of the governor's summary call before call ``step`` of a turn
        (``archive``: the release's archive instruction, from :attr:`governor_probe`)."""
        raise NotImplementedError(f"{self.label} has no context governor")

    def governor_verdict(self, tokens: int, context_window: int, max_output: int) -> bool | None:
        """Whether this release's governor summarises before a call it measured at ``tokens``
        (``None``: the release has no governor)."""
        return None

    def archive_fits(self, tokens: int, context_window: int, max_output: int) -> bool | None:
        """Whether a governor summary call measured at ``tokens`` goes out rather than the
        release keeping the raw messages (``None``: no governor)."""
        return None

    def message_payload(self, message: Message) -> str:
        """The text this release tokenizes for one message (before 4 framing tokens)."""
        return tokens.message_payload(message)

    def fallback_tokens(self, payload: str) -> int:
        """This release's count of a payload it cannot encode (or without tiktoken)."""
        return tokens.byte_fallback_tokens(payload)

    def estimate_message_tokens(self, message: Message) -> int:
        """This release's prompt-token estimate for one replayed entry."""
        return tokens.byte_fallback_estimate(self.message_payload(message))

    def encoded_tokens(self, n: int) -> int:
        """This release's exact count of a payload of ``n`` cl100k_base tokens holding no
        special-token text (an empty one: ``n`` 0): ``n`` plus 4 framing tokens."""
        return max(tokens.FRAMING_TOKENS, n + tokens.FRAMING_TOKENS)

    def fallback_message_tokens(self, message: Message) -> int:
        """This release's estimate on a machine where tiktoken cannot load."""
        return self.fallback_tokens(self.message_payload(message))

    def entry_function(self, settings: HistorySettings) -> Callable[[Message], Message | None]:
        """The rewrite of one stored message into its replayed entry under ``settings``."""
        value = getattr(self.resolve(settings), self.entry_setting)
        return partial(self.replay_entry, **{self.entry_setting: value})  # type: ignore[attr-defined]  # replay_entry is each release's own (its keyword differs)

    def changed_entries(self, facts: EntryFacts, settings: HistorySettings) -> set[int] | None:
        """The messages of ``facts`` whose replayed entry under ``settings`` may not hold
        their own role, content and replayed fields (:mod:`~sessionkit.nanobot.entry_changes`):
        only those need rewriting.  None: any may (this default, and a release with a
        rewrite of its own)."""
        return None

    def entry_key(self, settings: HistorySettings) -> tuple[Any, ...]:
        """The settings that change replayed entries (what a replay cache is keyed by)."""
        return (getattr(self.resolve(settings), self.entry_setting),)

    def history_kwargs(self, settings: HistorySettings) -> dict[str, Any]:
        """The keyword arguments this release's ``get_history`` takes for ``settings``."""
        resolved = self.resolve(settings)
        return {
            name: getattr(resolved, name)
            for name in ("max_messages", "max_tokens", "extend_to_user", self.entry_setting)
            if name in self.history_signature.parameters
        }

    @cached_property
    def history_signature(self) -> inspect.Signature:
        """``get_history``'s own signature in this release (without ``self``):
        ``(max_messages=<default>, *, max_tokens=0, extend_to_user=False, <entry setting>)``."""
        keyword = inspect.Parameter.KEYWORD_ONLY
        return inspect.Signature(
            [
                inspect.Parameter(
                    "max_messages",
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    default=self.default_max_messages,
                ),
                inspect.Parameter("max_tokens", keyword, default=0),
                inspect.Parameter("extend_to_user", keyword, default=False),
                inspect.Parameter(self.entry_setting, keyword, default=self.entry_default),
            ]
        )

    def replay(
        self, messages: Sequence[Message], offset: int, *args: Any, **kwargs: Any
    ) -> list[tuple[int, Message]]:
        """``get_history`` with each entry's source index: ``[(index, entry), ...]``.

        Takes the arguments of :attr:`history_signature`; one the release does not take
        raises ``TypeError``, as the release does, and has its no-op value (no budget, no
        extension, the entry setting's default).
        """
        arguments = self.history_signature.bind(*args, **kwargs)
        arguments.apply_defaults()
        given = arguments.arguments
        flag = given.get(self.entry_setting, self.entry_default)
        return self.replay_from(
            messages,
            offset,
            given["max_messages"],
            max_tokens=given.get("max_tokens", 0),
            extend_to_user=given.get("extend_to_user", False),
            entry=partial(self.replay_entry, **{self.entry_setting: flag}),  # type: ignore[attr-defined]  # replay_entry is each release's own (its keyword differs)
        )

    def get_history(
        self, messages: Sequence[Message], offset: int, *args: Any, **kwargs: Any
    ) -> list[Message]:
        """The history this release sends the model, entry for entry (``Session.get_history``),
        with the release's own arguments (:meth:`replay`)."""
        return [entry for _, entry in self.replay(messages, offset, *args, **kwargs)]

    def count_window(self, max_messages: int) -> int:
        """The count window ``get_history(max_messages)`` applies; 0 means none."""
        return max_messages if max_messages > 0 else self.default_max_messages

    @property
    def release_name(self) -> str:
        """The release whose replays and token counts this object's are (a candidate's base)."""
        return self.name if self.rule is None else self.rule.base

    def count_start(
        self, messages: Sequence[Message], start: int, max_messages: int, *, extend_to_user: bool
    ) -> int:
        """Where the count window of ``messages[start:]`` starts, before any alignment."""
        count = self.count_window(max_messages)
        if count > 0:
            start += recent_message_start_index(
                messages[start:], count, extend_to_user=extend_to_user
            )
        return start

    def aligned_start(self, messages: Sequence[Message], start: int) -> int:
        """A window start moved to a user turn, then past any orphan tool result."""
        start = align_to_user(messages, start)
        return start + find_legal_message_start(messages[start:])

    def window_start(
        self,
        messages: Sequence[Message],
        offset: int,
        max_messages: int,
        *,
        extend_to_user: bool,
        entry: Callable[[Message], Message | None],
    ) -> int:
        """Where ``get_history``'s window starts before the token budget: the count window
        from the offset (a candidate's :attr:`rule` instead), aligned."""
        if self.rule is not None:
            return self.rule.exact_start(
                self, messages, offset, max_messages, extend_to_user=extend_to_user, entry=entry
            )
        first = offset_start(offset, len(messages))
        start = self.count_start(messages, first, max_messages, extend_to_user=extend_to_user)
        return self.aligned_start(messages, start)

    def new_message(
        self, role: str, content: Any, timestamp: str, extra: Mapping[str, Any]
    ) -> Message:
        """The dict ``add_message(role, content, **extra)`` appends (``extra`` may override
        the timestamp's value, not its place)."""
        return {"role": role, "content": content, "timestamp": timestamp, **extra}

    def replay_from(
        self,
        messages: Sequence[Message],
        offset: int,
        max_messages: int,
        *,
        max_tokens: int,
        extend_to_user: bool,
        entry: Callable[[Message], Message | None],
    ) -> list[tuple[int, Message]]:
        """``get_history`` with each entry's source index: ``[(index, entry), ...]``."""
        start = self.window_start(
            messages, offset, max_messages, extend_to_user=extend_to_user, entry=entry
        )
        entries = [
            (i, replayed)
            for i in range(start, len(messages))
            if (replayed := entry(messages[i])) is not None
        ]
        if max_tokens > 0 and entries:
            entries = fit_budget(entries, max_tokens, self.estimate_message_tokens)
        return entries


@dataclass(frozen=True, repr=False)
class CappedPolicy(ReplayPolicy):
    """A release with nanobot's file cap: ``enforce_file_cap`` and
    ``retain_recent_legal_suffix`` (0.2.2, 0.3.0)."""

    file_limit: int = 2000

    def retention_value(self, trim: Trim) -> Any:
        """What this release's ``retain_recent_legal_suffix`` returns for ``trim``."""
        return trim.dropped, trim.already_consolidated

    def retain_recent_legal_suffix(
        self,
        messages: list[Message],
        last_consolidated: int,
        max_messages: int,
        *,
        extend_to_user: bool = False,
    ) -> Trim:
        """Trim to at most ``max_messages`` recent messages starting at a user turn.

        Without ``extend_to_user``, a tail holding no user message is replaced by the
        ``max_messages`` messages from the latest user message on (newer ones are dropped).
        With it, the suffix reaches back to a user message and may exceed ``max_messages``.
        """
        n = len(messages)
        if max_messages <= 0:
            return Trim([], list(messages), min(last_consolidated, n), 0, cleared=True)
        if n <= max_messages:
            return unchanged(messages, last_consolidated)
        start, stop = n - max_messages, n
        if extend_to_user:
            start = next((i for i in range(start, -1, -1) if is_user(messages[i])), start)
        first = next((i for i in range(start, n) if is_user(messages[i])), None)
        if first is not None:
            start = first
        elif not extend_to_user:
            latest = next((i for i in range(n - 1, -1, -1) if is_user(messages[i])), None)
            if latest is not None:
                start, stop = latest, latest + max_messages
        start += find_legal_message_start(messages[start:stop])
        return keep_range(messages, last_consolidated, start, stop)

    def file_cap(self, messages: list[Message], last_consolidated: int, limit: int) -> Trim:
        """``enforce_file_cap``: trim to ``limit`` messages once the file grows past it."""
        if limit <= 0 or len(messages) <= limit:
            return unchanged(messages, last_consolidated)
        return self.retain_recent_legal_suffix(messages, last_consolidated, limit)
