"""The few calls of :func:`sessionkit.requests` its per-message clean-up model cannot say
(a session whose call ids are answered outside their block, a current message the release
merges into the history, a request near the release's own context budget, where it trims
the request itself): each rebuilt with the release's own loop and counted part by part, and
its prefix measured against the call before it.  About as slow as :func:`sessionkit.request`
per call; the frame asks for these only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sessionkit.nanobot.kit import Kit
from sessionkit.nanobot.release import ReplayPolicy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import DEFAULT_SETTINGS
from sessionkit.store.counting import TokenCache, counts_through, token_cache_of

__all__ = ["Call", "RebuiltCall", "rebuild", "shared"]

Message = dict[str, Any]
_PART = "\u0000sessionkit-part"
"""The key that carries each message's part through the release's clean-up."""


@dataclass(frozen=True)
class Call:
    """One call to rebuild: its session's messages ``[start, stop)`` replayed under the entry
    setting ``entry``, the user message at ``at`` and the turn's step ``step``."""

    start: int
    stop: int
    at: int
    step: int
    entry: bool


@dataclass(frozen=True)
class RebuiltCall:
    """A rebuilt call's parts (each message counted alone) and the loop it sent."""

    history: int
    history_messages: int
    current: int
    steps: int
    loop: list[Message]


def _tagged(messages: Sequence[Message], part: str) -> list[Message]:
    return [{**m, _PART: part} for m in messages]


def rebuild(
    policy: ReplayPolicy, session: Session, kit: Kit, system: str, calls: Sequence[Call]
) -> list[RebuiltCall]:
    """Each call of ``session`` as the release's loop sent it."""
    messages = session.messages
    turns = [i for i, m in enumerate(messages) if policy.is_user_turn(m)]
    cache = token_cache_of([session])
    out = []
    for call in calls:
        rewrite = policy.entry_function(
            DEFAULT_SETTINGS.replace(**{policy.entry_setting: call.entry})
        )
        history = [e for m in messages[call.start : call.stop] if (e := rewrite(m)) is not None]
        user = messages[call.at]
        try:
            current = policy.current_message(kit, user, session.key)
        except ValueError:
            current = dict(user)  # as the frame's calls do: the stored message stands in
        after = [t for t in turns if t > call.at]
        stop = after[0] if after else len(messages)
        steps = policy.turn_steps(messages[call.at + 1 : stop])[call.step]
        loop = policy.loop_messages(
            kit,
            session.key,
            system,
            _tagged(history, "history"),
            {**current, _PART: "current"},
            _tagged(steps, "steps"),
        )
        parts, part = [], "system"
        for message in loop[1:]:
            part = message.get(_PART, part)  # a backfilled result belongs with its call
            parts.append(part)
        if "current" not in parts:  # merged into the history's last message: sent as one
            at = max(i for i, p in enumerate(parts) if p == "history")
            parts[at] = "current"
        plain = [{k: v for k, v in m.items() if k != _PART} for m in loop]
        counts = counts_through(plain[1:], cache, workers=1, policy=policy.name)
        totals = {"history": 0, "current": 0, "steps": 0}
        for part, n in zip(parts, counts, strict=True):
            totals[part] += n
        out.append(
            RebuiltCall(
                totals["history"],
                parts.count("history"),
                totals["current"],
                totals["steps"],
                plain,
            )
        )
    return out


def _wire(policy: ReplayPolicy, kit: Kit, message: Message) -> Any:
    """One message as the provider sends it (None where the release would make up a part)."""
    try:
        return policy.wire_messages(kit, [message])
    except ValueError:
        return None


def shared(
    policy: ReplayPolicy,
    kit: Kit,
    before: list[Message],
    now: list[Message],
    cache: TokenCache | None,
) -> int:
    """Tokens of the leading messages after the system prompt that two calls send identically
    (as the provider sends each one), each counted alone (through ``cache``; None: none)."""
    same = []
    for a, b in zip(before[1:], now[1:], strict=False):
        if a != b and _wire(policy, kit, a) != _wire(policy, kit, b):
            break
        same.append(b)
    return sum(counts_through(same, cache, workers=1, policy=policy.name)) if same else 0
