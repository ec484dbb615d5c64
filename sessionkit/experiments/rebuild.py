"""The messages and tools of many rows' requests, each exactly what :func:`sessionkit.request`
rebuilds for it, with what rows share built once: a kit per release, workspace, config and
channel, a turn's calls per setting, its system prompt.  A governed release's rows (0.3.5's
context governor) and a session without a kit are rebuilt by :func:`sessionkit.request`."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from sessionkit.calls.assembly import TurnCalls, request, turn_calls
from sessionkit.calls.storekits import StoreKits
from sessionkit.nanobot.kit import Kit
from sessionkit.nanobot.policies import get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import HistorySettings
from sessionkit.nanobot.workspace import config_file

__all__ = ["Rebuilder", "Rebuilt"]

Message = dict[str, Any]


class Rebuilt(NamedTuple):
    """One request as sent: its release, the body's messages and its tools, and the list the
    agent loop handed its provider (what another provider's wire form is built from)."""

    release: str
    messages: list[Message]
    tools: list[Message]
    loop: list[Message]


class Rebuilder:
    """Rebuild rows' requests from ``sessions`` by key (``rebuild``: the keywords
    :func:`sessionkit.request` takes besides a row's own: workspace, config_dir, nanobot,
    runtime; ``count``: the cl100k_base count the releases' loops trim by, shared across rows,
    such as :func:`~sessionkit.experiments.piece_counts.piece_counter`'s; None: their own)."""

    def __init__(
        self,
        sessions: Mapping[str, Session],
        rebuild: Mapping[str, Any],
        count: Callable[[str], int] | None = None,
    ) -> None:
        self.sessions, self.rebuild, self.count = sessions, rebuild, count
        folder, config = rebuild.get("workspace"), rebuild.get("config_dir")
        self.kits = StoreKits(
            None if folder is None else Path(folder),
            None if config is None else config_file(config),
            rebuild.get("nanobot"),
            rebuild.get("runtime"),
        )
        self.turns: dict[tuple[str, str, int, HistorySettings], TurnCalls] = {}
        self.systems: dict[tuple[str, str, int], str] = {}

    def _kit(self, name: str, session: Session) -> Kit | None:
        """The session's kit under release ``name`` (None: let sessionkit.request say why)."""
        policy = get_policy(name)
        return None if policy.governed else self.kits.of(policy, session)[0]

    def kit_digest(self, key: str, policy: str) -> str | None:
        """The digest of the kit session ``key``'s requests are rebuilt with under release
        ``policy`` (None: a governed release or no kit, rebuilt by :func:`sessionkit.request`)."""
        chosen = get_policy(policy)
        return None if chosen.governed else self.kits.of(chosen, self.sessions[key])[1]

    def request(
        self, key: str, policy: str, turn: int, step: int, settings: HistorySettings
    ) -> Rebuilt:
        """The request of one row; raises as :func:`sessionkit.request` does."""
        session = self.sessions[key]
        kit = self._kit(policy, session)
        if kit is None:
            built = request(
                session, turn=turn, step=step, policy=policy, settings=settings, **self.rebuild
            )
            return Rebuilt(built.release, built.messages, built.tools, built.loop_messages)
        chosen = get_policy(policy)
        at = (key, policy, turn, settings)
        if at not in self.turns:
            self.turns[at] = turn_calls(session, turn, kit, policy=chosen, settings=settings)
        calls = self.turns[at]
        if not 0 <= step < len(calls.steps):
            raise IndexError(
                f"step {step} is out of range: turn {turn} of session {session.key!r} made "
                f"{len(calls.steps)} calls"
            )
        if at[:3] not in self.systems:
            self.systems[at[:3]] = chosen.system_prompt(kit, session.before_user(turn))
        stepped = copy.deepcopy(calls.steps[step])
        loop = chosen.loop_messages(
            kit,
            session.key,
            self.systems[at[:3]],
            calls.history,
            calls.current,
            stepped,
            self.count,
        )
        tools = [dict(t) for t in kit.tools]
        return Rebuilt(chosen.name, chosen.wire_messages(kit, loop), tools, loop)
