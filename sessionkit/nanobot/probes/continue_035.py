"""Continue a forked session with nanobot 0.3.5's own agent loop, in a private copy (stdlib + nanobot).

Runs INSIDE the 0.3.5 release venv (``<release python> -I continue_035.py``): stdin
``{"config": "/copy/config.json", "workspace": "/copy/workspace", "session": "telegram:alice",
"turns": ["text", ...], "max_calls": int, "allowed": [[host, port], ...] | null,
"connections": "/copy/connections.jsonl", "timeout": seconds per turn}``; stdout
``{"nanobot": version, "turns": [{"text", "outcome", "replies"}, ...], "calls": int,
"budget_hit": bool}``.

Before nanobot is imported, an audit hook (:func:`sys.addaudithook`, process-wide) appends
every socket connect and name lookup of this process to ``connections`` (JSON lines:
``{"event", "address", "allowed"}``) and, when ``allowed`` is given, refuses any other address
with ``PermissionError`` before a packet leaves.  Processes nanobot starts (the shell tool, MCP
servers over stdio) are not covered: they are off unless the caller enabled them by name.
:func:`guard` and :class:`Budget` are public: ``continue_022.py`` loads them from this file.

The loop is composed as ``gateway_035`` of the test suite composes it (``nanobot gateway``'s
own parts: ``_load_runtime_config``, ``AgentLoop.from_config`` with the session manager, cron
store, trigger store, MCP provider and recovery coordinator); the provider's ``chat`` and
``chat_stream`` refuse to send once ``max_calls`` calls were made, which nanobot records as a
failed call (no request leaves), so the budget is a hard cap.  Each turn is published as its
channel would publish it and awaited until the session is idle; turns stop at the budget.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TextIO

_EVENTS = ("socket.connect", "socket.getaddrinfo", "socket.sendto", "socket.sendmsg")


def guard(allowed: list[list[Any]] | None, log: TextIO) -> None:
    """Record (and, with ``allowed``, refuse other) connects and lookups of this process."""
    names: set[str] = set()
    addresses: set[tuple[str, int]] = set()
    for host, port in allowed or []:
        names.add(host)
        for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            names.add(str(info[4][0]))
            addresses.add((str(info[4][0]), int(port)))

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event not in _EVENTS:
            return
        if event == "socket.getaddrinfo":
            address: Any = [args[0], args[1]]
            ok = args[0] is None or args[0] in names
        else:
            target = args[1]
            if target is None:
                return  # a send on a connected socket: its connect was checked
            if isinstance(target, tuple) and len(target) >= 2:
                address = [str(target[0]), target[1]]
                ok = (str(target[0]), target[1]) in addresses
            else:
                address = str(target)
                ok = False
        passed = allowed is None or ok
        log.write(json.dumps({"event": event, "address": address, "allowed": passed}) + "\n")
        log.flush()
        if not passed:
            raise PermissionError(f"sessionkit continuation: no connection to {address} allowed")

    sys.addaudithook(hook)


class Budget:
    """At most ``limit`` provider calls: past it, ``chat``/``chat_stream`` raise, unsent."""

    def __init__(self, limit: int) -> None:
        self.limit, self.calls, self.hit = limit, 0, False

    def wrap(self, provider: Any) -> None:
        for name in ("chat", "chat_stream"):
            original = getattr(provider, name)

            async def limited(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                if self.calls >= self.limit:
                    self.hit = True
                    raise RuntimeError(f"sessionkit budget of {self.limit} calls reached")
                self.calls += 1
                return await _original(*args, **kwargs)

            setattr(provider, name, limited)


async def _drive(request: dict[str, Any], budget: Budget) -> list[dict[str, Any]]:
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

    config = _load_runtime_config(request["config"], request["workspace"])
    sync_workspace_templates(config.workspace_path)
    bus = MessageBus()
    snapshot = build_provider_snapshot(config)
    snapshot.provider.set_llm_call_observer(record_llm_call)
    budget.wrap(snapshot.provider)
    sessions = SessionManager(config.workspace_path)
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
        cron_service=CronService(config.workspace_path / "cron" / "jobs.json"),
        session_manager=sessions,
        image_generation_provider_configs=image_gen_provider_configs(config),
        preset_catalog_loader=load_model_preset_catalog,
        turn_delivery_factory=TurnDeliveryFactory(bus, route_policy=WebuiTurnRoutePolicy(sessions)),
        provider_signature=snapshot.signature,
        local_trigger_store=LocalTriggerStore(config.workspace_path),
        hooks=[_MCPReadinessHook(mcp)],
        hook_factories=[create_file_edit_activity_hook],
        tool_registry=tools,
        recovery_admission=recovery,
    )
    key = request["session"]
    idle = asyncio.Event()
    outcomes: list[str] = []

    def on_status(event: TurnRunStatusChanged) -> None:
        if event.status == "idle" and event.context.session_key == key:
            idle.set()

    def on_completed(event: TurnCompleted) -> None:
        if event.context.session_key == key:
            outcomes.append(event.outcome)

    bus.subscribe(on_status, TurnRunStatusChanged)
    bus.subscribe(on_completed, TurnCompleted)
    await mcp.connect()
    loop_task = asyncio.create_task(agent.run(), name="nanobot-agent-loop")
    channel, chat_id = key.split(":", 1)
    done: list[dict[str, Any]] = []
    try:
        for text in request["turns"]:
            if budget.calls >= budget.limit:
                break
            idle.clear()
            await bus.publish_inbound(InboundMessage(channel, "user", chat_id, text))
            await asyncio.wait_for(idle.wait(), timeout=request["timeout"])
            replies = []
            while bus.outbound_size:
                out = await bus.consume_outbound()
                if out.event is None and out.content:
                    replies.append(out.content)
            done.append(
                {"text": text, "outcome": outcomes.pop() if outcomes else None, "replies": replies}
            )
    finally:
        agent.stop()
        loop_task.cancel()
        await asyncio.gather(loop_task, return_exceptions=True)
        await agent.aclose()
        await mcp.aclose()
        agent.sessions.flush_all()
    return done


def run(
    drive: Callable[[dict[str, Any], Budget], Coroutine[Any, Any, list[dict[str, Any]]]],
) -> None:
    """Read the request on stdin, guard the sockets, ``drive`` the turns (a release's loop),
    print the answer: every continuation probe's process."""
    request = json.load(sys.stdin)
    answer_fd = os.dup(1)
    os.dup2(2, 1)  # nanobot's console output goes to stderr; stdout carries only the answer
    log = Path(request["connections"]).open("a", encoding="utf-8")  # noqa: SIM115 (process-long)
    guard(request["allowed"], log)
    import nanobot
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    budget = Budget(int(request["max_calls"]))
    turns = asyncio.run(drive(request, budget))
    answer = {
        "nanobot": nanobot.__version__,
        "turns": turns,
        "calls": budget.calls,
        "budget_hit": budget.hit,
    }
    with os.fdopen(answer_fd, "w") as out:
        json.dump(answer, out)


if __name__ == "__main__":
    run(_drive)
