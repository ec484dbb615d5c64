"""Run nanobot 0.3.5's own agent loop as its gateway composes it, for scripted user turns (stdlib + nanobot).

Runs INSIDE the 0.3.5 release venv (``<release python> -I gateway_035.py``): stdin
``{"config": "/abs/config.json", "turns": [{"session": "telegram:alice", "text": "..."}, ...],
"gaps": [0, 120, ...]}`` (``gaps`` optional),
stdout ``{"nanobot": version, "tiktoken": bool, "turns": [{"session", "text",
"started_ns", "ended_ns", "outcome", "replies"}, ...]}``.  The caller points HOME, the
config file (its folder is nanobot's data dir) and the workspace at temporary folders, and
the config's provider at a local stub; nothing here opens any other connection.

Composition follows ``nanobot/cli/gateway_runtime.py`` of 0.3.5: the config is loaded the way
``nanobot gateway --config`` loads it (``_load_runtime_config``: the config path becomes the
process's config path, so the data dir is its folder); workspace templates are synced; the
provider snapshot gets ``set_llm_call_observer(record_llm_call)`` (so every call lands in
``<data dir>/llm_usage.sqlite3``); ``SessionManager(workspace)``, the workspace cron store,
the local trigger store, ``TurnDeliveryFactory`` with the WebUI route policy, the MCP provider
over the shared tool registry, the recovery coordinator and ``AgentLoop.from_config`` with
the same arguments.  The agent loop runs as the gateway runs it (``agent.run()`` consuming the
bus, after ``mcp_provider.connect()``); each user turn is published on the bus as a channel
would publish it (``InboundMessage(channel, "user", chat_id, text)``).  Left out, because
nothing in a run of seconds reaches them: the channel manager (no channel is enabled; this
script reads the outbound queue itself), the health server, the WebUI, the config watcher,
and the cron / Dream / heartbeat timers (the cron service is built, so its tool is registered,
but not started).

Turns run SEQUENTIALLY: each is published only after the previous turn's session went idle
(its ``TurnRunStatusChanged(status="idle")`` event), so every provider call falls inside the
``[started_ns, ended_ns]`` window of exactly one turn.  Concurrency is tested elsewhere.
Within a turn the user message is saved (and stamped) before the first call, the rest of the
turn after the last one; the usage log stamps each call with its start (UTC epoch ms).  What
the recorded requests and files showed is written down in ``e2e.GatewayRun``.

The clock: the process's wall clock is the real one plus an offset (``time.time``,
``time.time_ns`` and ``datetime.datetime.now``/``utcnow``/``today``, replaced before nanobot is
imported, so its message stamps, session times, usage log and prompt all read it); before turn
i is published the offset grows by ``gaps[i]`` seconds, so turn i starts ``gaps[i]`` seconds
after the previous one ended, with no waiting.  ``asyncio`` and every timeout run on
``time.monotonic``, which is left alone.  The stub (``StubServer(gaps=...)``) adds the same
offsets to its own clock for the calls of each turn, so the stub's cache lifetimes and the
times nanobot stored agree.  ``started_ns``/``ended_ns`` are on the shifted clock.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

_OFFSET_NS = [0]
"""Nanoseconds the process's wall clock runs ahead of the real one."""


def _install_clock() -> None:
    """Make ``time.time``/``time_ns`` and ``datetime.datetime``'s clock read real time plus
    ``_OFFSET_NS`` (datetime by a subclass that ``isinstance`` still matches, as freezegun does)."""
    import datetime as dt

    real_ns, real_datetime = time.time_ns, dt.datetime

    def time_ns() -> int:
        return real_ns() + _OFFSET_NS[0]

    class _Meta(type):
        def __instancecheck__(cls, obj: object) -> bool:
            return isinstance(obj, real_datetime)

        def __subclasscheck__(cls, sub: type) -> bool:
            return issubclass(sub, real_datetime)

    class ShiftedDatetime(real_datetime, metaclass=_Meta):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return real_datetime.fromtimestamp(time_ns() / 1e9, tz)

        @classmethod
        def utcnow(cls) -> Any:
            return real_datetime.fromtimestamp(time_ns() / 1e9, dt.UTC).replace(tzinfo=None)

        @classmethod
        def today(cls) -> Any:
            return cls.now()

    time.time_ns = time_ns
    time.time = lambda: time_ns() / 1e9
    dt.datetime = ShiftedDatetime  # type: ignore[misc]


async def _drive(
    config_path: Path, turns: list[dict[str, Any]], gaps: list[float]
) -> list[dict[str, Any]]:
    from nanobot.agent.hooks import create_file_edit_activity_hook
    from nanobot.agent.loop import AgentLoop
    from nanobot.agent.model_presets import load_model_preset_catalog
    from nanobot.agent.tools.mcp import MCPProvider
    from nanobot.agent.tools.registry import ToolRegistry
    from nanobot.agent.turn_delivery import TurnDeliveryFactory
    from nanobot.bus.events import InboundMessage
    from nanobot.bus.queue import MessageBus
    from nanobot.bus.runtime_events import TurnCompleted, TurnRunStatusChanged
    from nanobot.cli.gateway_runtime import _MCPReadinessHook
    from nanobot.cli.runtime_config import _load_runtime_config
    from nanobot.cron.service import CronService
    from nanobot.llm_usage import record_llm_call
    from nanobot.providers.factory import build_provider_snapshot
    from nanobot.providers.image_generation import image_gen_provider_configs
    from nanobot.session.manager import SessionManager
    from nanobot.session.recovery import RecoveryCoordinator
    from nanobot.session.webui_turns import WebuiTurnRoutePolicy
    from nanobot.triggers.local_store import LocalTriggerStore
    from nanobot.utils.helpers import sync_workspace_templates

    config = _load_runtime_config(str(config_path))
    sync_workspace_templates(config.workspace_path)
    bus = MessageBus()
    snapshot = build_provider_snapshot(config)
    snapshot.provider.set_llm_call_observer(record_llm_call)
    sessions = SessionManager(config.workspace_path)
    cron = CronService(config.workspace_path / "cron" / "jobs.json")
    triggers = LocalTriggerStore(config.workspace_path)
    delivery = TurnDeliveryFactory(bus, route_policy=WebuiTurnRoutePolicy(sessions))
    tools = ToolRegistry()
    mcp = MCPProvider.from_config(config, tools)
    recovery = RecoveryCoordinator(
        sessions=sessions, bus=bus, unified_session=config.agents.defaults.unified_session
    )
    agent = AgentLoop.from_config(
        config,
        bus,
        provider=snapshot.provider,
        model=snapshot.model,
        context_window_tokens=snapshot.context_window_tokens,
        cron_service=cron,
        session_manager=sessions,
        image_generation_provider_configs=image_gen_provider_configs(config),
        preset_catalog_loader=load_model_preset_catalog,
        turn_delivery_factory=delivery,
        provider_signature=snapshot.signature,
        local_trigger_store=triggers,
        hooks=[_MCPReadinessHook(mcp)],
        hook_factories=[create_file_edit_activity_hook],
        tool_registry=tools,
        recovery_admission=recovery,
    )

    idle: dict[str, asyncio.Event] = {}
    outcomes: dict[str, str] = {}

    def on_status(event: TurnRunStatusChanged) -> None:
        if event.status == "idle" and event.context.session_key in idle:
            idle[event.context.session_key].set()

    def on_completed(event: TurnCompleted) -> None:
        outcomes[event.context.session_key] = event.outcome

    bus.subscribe(on_status, TurnRunStatusChanged)
    bus.subscribe(on_completed, TurnCompleted)

    await recovery.scan()
    await mcp.connect()
    loop_task = asyncio.create_task(agent.run(), name="nanobot-agent-loop")
    done: list[dict[str, Any]] = []
    try:
        for turn, gap in zip(turns, gaps, strict=True):
            _OFFSET_NS[0] += int(gap * 1_000_000_000)
            channel, chat_id = turn["session"].split(":", 1)
            idle[turn["session"]] = asyncio.Event()
            started = time.time_ns()
            await bus.publish_inbound(InboundMessage(channel, "user", chat_id, turn["text"]))
            await asyncio.wait_for(idle[turn["session"]].wait(), timeout=120)
            ended = time.time_ns()
            replies = []
            while bus.outbound_size:
                out = await bus.consume_outbound()
                if out.event is None and out.content:
                    replies.append(out.content)
            done.append(
                {
                    **turn,
                    "started_ns": started,
                    "ended_ns": ended,
                    "outcome": outcomes.pop(turn["session"], None),
                    "replies": replies,
                }
            )
    finally:
        agent.stop()
        loop_task.cancel()
        await asyncio.gather(loop_task, return_exceptions=True)
        await agent.aclose()
        await mcp.aclose()
        agent.sessions.flush_all()
    return done


def _tiktoken_loads() -> bool:
    """Whether cl100k_base loads here (else nanobot's estimates fall back to byte counts)."""
    try:
        import tiktoken

        tiktoken.get_encoding("cl100k_base")
    except Exception:
        return False
    return True


def main() -> None:
    """Read the request on stdin, drive the turns, print the JSON answer on the real stdout."""
    request = json.load(sys.stdin)
    _install_clock()
    answer_fd = os.dup(1)
    os.dup2(2, 1)  # nanobot's console output goes to stderr; stdout carries only the answer
    import nanobot
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    gaps = request.get("gaps") or [0] * len(request["turns"])
    turns = asyncio.run(_drive(Path(request["config"]), request["turns"], gaps))
    answer = {
        "nanobot": nanobot.__version__,
        "tiktoken": _tiktoken_loads(),
        "turns": turns,
    }
    with os.fdopen(answer_fd, "w") as out:
        json.dump(answer, out)


if __name__ == "__main__":
    main()
