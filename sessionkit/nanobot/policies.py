"""nanobot's history policy, exactly: what it replays to the model and what it trims.

This module is sessionkit's ground truth.  It works on plain message lists, reads like the
rules it reproduces, and is checked against nanobot itself
(``tests/nanobot/test_policies_conformance.py``).
The fast sweeps in :mod:`sessionkit.windows` and :mod:`sessionkit.filecap` are checked
against it.

The rules changed between nanobot releases, so they live on a named :class:`Policy` object
(``"nanobot-0.2"``, reproducing nanobot-ai 0.2.2).  A later release gets its own subclass,
registered in :data:`POLICIES`; callers only ever say ``get_policy(name)``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from sessionkit.nanobot.settings import HistorySettings
from sessionkit.nanobot.tokens import estimate_message_tokens

__all__ = [
    "DEFAULT_POLICY",
    "FORK_VOLATILE_METADATA_KEYS",
    "POLICIES",
    "Policy",
    "ReplayPolicy",
    "Trim",
    "fit_budget",
    "find_legal_message_start",
    "get_policy",
    "recent_message_start_index",
    "sanitize_assistant_text",
    "tool_call_ids",
    "tool_result_id",
]

Message = dict[str, Any]

DEFAULT_POLICY = "nanobot-0.2"

FORK_VOLATILE_METADATA_KEYS = frozenset(
    {
        "goal_state",
        "pending_user_turn",
        "runtime_checkpoint",
        "thread_goal",
        "title",
        "title_user_edited",
    }
)
"""Metadata nanobot 0.2.2 and 0.3.0 drop from a fork: run state and the title stay with the
source."""

# Copied onto a replayed entry when the stored message has them.
_REPLAY_FIELDS = ("tool_calls", "tool_call_id", "name", "reasoning_content", "thinking_blocks")
# An assistant message whose text is empty still replays when it carries one of these.
_NON_TEXT_FIELDS = ("tool_calls", "reasoning_content", "thinking_blocks")
_MAX_ATTACHMENTS = 8

# Replay artefacts a model may have learnt to echo: a leading time stamp, a line that is only
# a local image breadcrumb, a line that is only a tool call written out as text.
_LEADING_STAMP = re.compile(r"\[Message Time: [^\]]+\]\n?")
_LOCAL_IMAGE_LINE = re.compile(r"\[image: [/~][^\]]+\]\s*")
_TOOL_ECHO_LINE = re.compile(r"\s*(?:generate_image|message)\([^)]*\)\s*")


def _is_user(message: Message) -> bool:
    return message.get("role") == "user"


def tool_call_ids(message: Message) -> Iterator[str]:
    """Ids an assistant message declares in ``tool_calls`` (as strings, as nanobot compares)."""
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict) and call.get("id"):
            yield str(call["id"])


def tool_result_id(message: Message) -> str | None:
    """The call id a tool result answers, or None when it names none (never an orphan)."""
    answered = message.get("tool_call_id")
    return str(answered) if answered else None


def recent_message_start_index(
    messages: Sequence[Message], max_messages: int, *, extend_to_user: bool = False
) -> int:
    """Where the last ``max_messages`` messages start (nanobot's replay count window).

    ``max_messages <= 0`` selects nothing (returns ``len(messages)``).  With
    ``extend_to_user``, a window holding no user message reaches back to the latest earlier
    user message, and one further to a ``_channel_delivery`` message just before it.
    """
    n = len(messages)
    if max_messages <= 0:
        return n
    start = max(0, n - max_messages)
    if not extend_to_user or start == 0:
        return start
    if any(_is_user(m) for m in messages[start:]):
        return start
    earlier = next((i for i in range(start - 1, -1, -1) if _is_user(messages[i])), None)
    if earlier is None:
        return start
    if earlier > 0 and messages[earlier - 1].get("_channel_delivery"):
        return earlier - 1
    return earlier


def find_legal_message_start(messages: Sequence[Message]) -> int:
    """Index just after the last orphan tool result (0 when there is none).

    A tool result is an orphan when no assistant message since the start, or since the
    previous orphan, declared its call id: each orphan forgets the ids declared before it.
    """
    open_ids: set[str] = set()
    start = 0
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            open_ids.update(tool_call_ids(message))
        elif role == "tool":
            answered = tool_result_id(message)
            if answered is not None and answered not in open_ids:
                start = i + 1
                open_ids = set()
    return start


def sanitize_assistant_text(text: str) -> str:
    """Assistant text as replayed: no leading time stamp, no image or tool-echo lines."""
    stamp = _LEADING_STAMP.match(text)
    if stamp:
        text = text[stamp.end() :]
    lines = [
        line
        for line in text.splitlines()
        if not (_LOCAL_IMAGE_LINE.fullmatch(line) or _TOOL_ECHO_LINE.fullmatch(line))
    ]
    return "\n".join(lines).strip()


def _attachment_names(items: list[Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for item in items[:_MAX_ATTACHMENTS]:
        if isinstance(item, dict):
            name = str(item.get("name") or "").strip().lower()
            if name:
                yield name, item


def _field_or(item: dict[str, Any], key: str, default: str) -> str:
    return str(item.get(key) or default).strip() or default


def _append_lines(text: str, lines: list[str]) -> str:
    block = "\n".join(lines)
    return f"{text}\n{block}" if text else block


def _user_breadcrumbs(message: Message, text: str) -> str:
    """A user turn's text with its media, CLI-app and MCP-preset attachments spelled out."""
    media = message.get("media")
    if isinstance(media, list) and media:
        # Appended even when no entry is a usable path (the text then gains a bare newline).
        paths = [p for p in media if isinstance(p, str) and p]
        text = _append_lines(text, [f"[image: {p}]" for p in paths])
    apps = message.get("cli_apps")
    if isinstance(apps, list) and apps:
        lines = [
            f"[CLI App Attachment: @{name}; tool=run_cli_app; "
            f"entry_point={_field_or(item, 'entry_point', 'unknown')}; "
            f"skill=skills/cli-app-{name}/SKILL.md]"
            for name, item in _attachment_names(apps)
        ]
        if lines:
            text = _append_lines(text, lines)
    presets = message.get("mcp_presets")
    if isinstance(presets, list) and presets:
        lines = [
            f"[MCP Preset Attachment: @{name}; tool_prefix=mcp_{name}_; "
            f"transport={_field_or(item, 'transport', 'mcp')}]"
            for name, item in _attachment_names(presets)
        ]
        if lines:
            text = _append_lines(text, lines)
    return text


def _offset_start(last_consolidated: int, n_messages: int) -> int:
    """Where ``messages[last_consolidated:]`` starts, with Python's slice rules."""
    return slice(last_consolidated, None).indices(n_messages)[0]


def _align_to_user(messages: Sequence[Message], start: int) -> int:
    """Move a window start to its first user message (or the delivery just before it)."""
    first = next((i for i in range(start, len(messages)) if _is_user(messages[i])), None)
    if first is None:
        return start
    if first > start and messages[first - 1].get("_channel_delivery"):
        return first - 1
    return first


@dataclass(frozen=True)
class Trim:
    """What trimming a session to a recent legal suffix did.

    ``retained`` is the input list itself when nothing changed.  ``dropped`` keeps source
    order and may include newest messages (nanobot keeps the window after the latest user
    message when the tail has none).  ``already_consolidated`` counts dropped messages that
    lay below the old offset; ``last_consolidated`` is the new offset.  ``cleared`` means
    ``max_messages <= 0`` emptied the session (nanobot also forgets ``_last_summary``).
    """

    retained: list[Message]
    dropped: list[Message]
    already_consolidated: int
    last_consolidated: int
    cleared: bool = False

    @property
    def archived(self) -> list[Message]:
        """The dropped messages nanobot raw-archives (those not already consolidated)."""
        return self.dropped[self.already_consolidated :]


def _unchanged(messages: list[Message], last_consolidated: int) -> Trim:
    return Trim(messages, [], 0, last_consolidated)


def _keep_range(messages: list[Message], last_consolidated: int, start: int, stop: int) -> Trim:
    below = min(max(last_consolidated, 0), len(messages))
    kept_below = max(0, min(below, stop) - start)
    return Trim(
        retained=messages[start:stop],
        dropped=messages[:start] + messages[stop:],
        already_consolidated=below - kept_below,
        last_consolidated=kept_below,
    )


def fit_budget(
    entries: list[tuple[int, Message]], max_tokens: int, estimate: Callable[[Message], int]
) -> list[tuple[int, Message]]:
    """Keep the newest entries within ``max_tokens``, then restore a legal user start.

    The newest entry is always kept.  If the budget leaves no user message, the latest
    user message is recovered even though that exceeds the budget.
    """
    first = len(entries) - 1
    used = estimate(entries[first][1])
    while first > 0:
        cost = estimate(entries[first - 1][1])
        if used + cost > max_tokens:
            break
        used += cost
        first -= 1
    users = [k for k, (_, entry) in enumerate(entries) if _is_user(entry)]
    first = next((k for k in users if k >= first), users[-1] if users else first)
    kept = entries[first:]
    return kept[find_legal_message_start([entry for _, entry in kept]) :]


@dataclass(frozen=True)
class ReplayPolicy:
    """What every release shares: replay from an offset through a count window, a user-turn
    start, a legal tool-call start and a token budget from the tail.

    A release supplies its entry rewrite (``replay_entry``, taking the one setting named by
    :attr:`entry_setting`), its token estimate, its default count window and, in ``replay``,
    ``get_history``'s exact signature.  Methods never modify their arguments;
    :class:`sessionkit.Session` applies results.
    """

    name: str = DEFAULT_POLICY
    default_max_messages: int = 120
    naming: str = "nanobot-0.2"
    fork_volatile_keys: frozenset[str] = FORK_VOLATILE_METADATA_KEYS
    entry_setting: str = "include_timestamps"
    """The one :class:`HistorySettings` field replayed entries depend on (0.2.2:
    ``include_timestamps``; 0.3.x: ``include_runtime_context``), a keyword of ``replay_entry``
    and ``replay``."""

    def is_user_turn(self, message: Message) -> bool:
        """Whether ``message`` is a user turn: what forks and "before user message k" count."""
        return message.get("role") == "user"

    def fork_copy(self, message: Message) -> Message:
        """The copy of a stored message a fork keeps (0.2.2: the message as it is)."""
        return copy.deepcopy(message)

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

    def estimate_message_tokens(self, message: Message) -> int:
        """This release's prompt-token estimate for one replayed entry."""
        return estimate_message_tokens(message)

    def entry_function(self, settings: HistorySettings) -> Callable[[Message], Message | None]:
        """The rewrite of one stored message into its replayed entry under ``settings``."""
        value = getattr(settings, self.entry_setting)
        return partial(self.replay_entry, **{self.entry_setting: value})  # type: ignore[attr-defined]

    def entry_key(self, settings: HistorySettings) -> tuple[Any, ...]:
        """The settings that change replayed entries (what a replay cache is keyed by)."""
        return (getattr(settings, self.entry_setting),)

    def history_kwargs(self, settings: HistorySettings) -> dict[str, Any]:
        """The keyword arguments this release's ``get_history`` takes for ``settings``."""
        return {
            "max_messages": settings.max_messages,
            "max_tokens": settings.max_tokens,
            "extend_to_user": settings.extend_to_user,
            self.entry_setting: getattr(settings, self.entry_setting),
        }

    def get_history(
        self, messages: Sequence[Message], offset: int, *args: Any, **kwargs: Any
    ) -> list[Message]:
        """The history this release sends the model, entry for entry (``Session.get_history``):
        the entries of ``replay``, whose signature is the release's own (an argument the
        release does not take raises ``TypeError``, as the release does)."""
        return [entry for _, entry in self.replay(messages, offset, *args, **kwargs)]  # type: ignore[attr-defined]

    def count_window(self, max_messages: int) -> int:
        """The count window ``get_history(max_messages)`` applies; 0 means none."""
        return max_messages if max_messages > 0 else self.default_max_messages

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
        start = _offset_start(offset, len(messages))
        count = self.count_window(max_messages)
        if count > 0:
            start += recent_message_start_index(
                messages[start:], count, extend_to_user=extend_to_user
            )
        start = _align_to_user(messages, start)
        start += find_legal_message_start(messages[start:])
        entries = [
            (i, replayed)
            for i in range(start, len(messages))
            if (replayed := entry(messages[i])) is not None
        ]
        if max_tokens > 0 and entries:
            entries = fit_budget(entries, max_tokens, self.estimate_message_tokens)
        return entries


@dataclass(frozen=True)
class Policy(ReplayPolicy):
    """nanobot-ai 0.2.2's replay and trimming rules (``name="nanobot-0.2"``).

    Every method takes the session's ``messages`` and ``last_consolidated`` and leaves them
    untouched; :class:`sessionkit.Session` applies the results.
    """

    file_limit: int = 2000

    def replay_entry(self, message: Message, include_timestamps: bool = False) -> Message | None:
        """The dict one stored message becomes in the model's history, or None if skipped.

        Depends only on the message (never on its neighbours), which is what lets the fast
        path rewrite and count each message once.
        """
        if message.get("_command"):
            return None
        role = message.get("role")
        content = message.get("content", "")
        if isinstance(content, str):
            if role == "assistant":
                content = sanitize_assistant_text(content)
            elif role == "user":
                content = _user_breadcrumbs(message, content)
                stamp = message.get("timestamp")
                if include_timestamps and stamp:
                    content = f"[Message Time: {stamp}]\n{content}"
            empty = role == "assistant" and not content.strip()
            if empty and not any(key in message for key in _NON_TEXT_FIELDS):
                return None
        entry: Message = {"role": message["role"], "content": content}
        entry.update((key, message[key]) for key in _REPLAY_FIELDS if key in message)
        return entry

    def replay(
        self,
        messages: Sequence[Message],
        last_consolidated: int,
        max_messages: int = 120,
        *,
        max_tokens: int = 0,
        include_timestamps: bool = False,
        extend_to_user: bool = False,
    ) -> list[tuple[int, Message]]:
        """``get_history`` with each entry's source index: ``[(index, entry), ...]``."""
        return self.replay_from(
            messages,
            last_consolidated,
            max_messages,
            max_tokens=max_tokens,
            extend_to_user=extend_to_user,
            entry=partial(self.replay_entry, include_timestamps=include_timestamps),
        )

    def retention_value(self, trim: Trim) -> Any:
        """What this release's ``retain_recent_legal_suffix`` returns: 0.2.2's tuple
        ``(dropped, already_consolidated)``."""
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
            return _unchanged(messages, last_consolidated)
        start, stop = n - max_messages, n
        if extend_to_user:
            start = next((i for i in range(start, -1, -1) if _is_user(messages[i])), start)
        first = next((i for i in range(start, n) if _is_user(messages[i])), None)
        if first is not None:
            start = first
        elif not extend_to_user:
            latest = next((i for i in range(n - 1, -1, -1) if _is_user(messages[i])), None)
            if latest is not None:
                start, stop = latest, latest + max_messages
        start += find_legal_message_start(messages[start:stop])
        return _keep_range(messages, last_consolidated, start, stop)

    def file_cap(self, messages: list[Message], last_consolidated: int, limit: int) -> Trim:
        """``enforce_file_cap``: trim to ``limit`` messages once the file grows past it."""
        if limit <= 0 or len(messages) <= limit:
            return _unchanged(messages, last_consolidated)
        return self.retain_recent_legal_suffix(messages, last_consolidated, limit)


POLICIES: dict[str, Policy] = {DEFAULT_POLICY: Policy()}

# Later releases live in their own modules, which import this one's helpers.
from sessionkit.nanobot.policy_030 import Policy030  # noqa: E402
from sessionkit.nanobot.policy_035 import Policy035  # noqa: E402

POLICIES[Policy030.name] = Policy030()
POLICIES[Policy035.name] = Policy035()  # type: ignore[assignment]


def get_policy(name: str = DEFAULT_POLICY) -> Policy:
    """The registered policy called ``name`` (``"nanobot-0.2"`` reproduces nanobot-ai 0.2.2)."""
    try:
        return POLICIES[name]
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown history policy {name!r}; known: {known}") from None
