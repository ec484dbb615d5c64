"""Run inside nanobot 0.2.2's venv: its own request building, recorded (stdlib + nanobot only).

Started as ``<python> -I request_driver_022.py <path of probe_022.py>``; reads one JSON case
per line on stdin and answers each with one JSON line on stdout (``{"result": ...}`` or
``{"error": traceback}``).  A case's ``process_zone`` (default UTC) is this process's local
time zone while it runs.  A case names an ``op``:

- ``"sync"``: ``sync_workspace_templates(workspace)``, the templates ``nanobot agent`` writes.
- ``"kit"``: the probe's kit for ``request`` (in this process).
- ``"request"``: one call of the agent loop: the loop built from ``config`` (a file path or
  null) for ``workspace``, as the probe loads them (``timezone``, when given, replaces the
  configured clock zone the context builder holds), builds its first messages for ``history`` and the inbound message
  (``text``, ``media``, with the clock stopped at ``clock``, an aware ISO instant), appends
  ``steps``, and runs; the provider records the call and answers with plain text.
- ``"system"``: the system prompt with the archived summary AutoCompact formats from
  ``summary`` and ``last_active``.
- ``"converse"``: ``turns`` of ``process_direct`` on a session (one loop per workspace,
  config, tools and channel serves every conversation); each turn's ``replies`` are the
  model's answers in order (text, tool calls, reasoning); the fake tools ``tools`` (names)
  return their ``result`` argument.  The clock stops at each turn's ``clock``.

Every recorded call is ``{"messages", "tools", "wire", "estimate"}``: what the loop handed the
provider, the tool definitions, the ``messages`` of the body the OpenAI-compatible provider
builds for them, and the release's whole-request estimate.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any


class StoppedClock(datetime):
    """``datetime`` whose ``now`` is the instant the driver set (aware, any zone)."""

    instant: datetime | None = None

    @classmethod
    def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
        moment = cls.instant
        if moment is None:
            return datetime.now(tz)
        return moment.astimezone(tz) if tz else moment.astimezone().replace(tzinfo=None)


class StoppedTime:
    """The ``time`` module, except that ``strftime`` without a time formats the stopped one."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def strftime(self, format: str, moment: Any = None) -> str:
        if moment is None and StoppedClock.instant is not None:
            moment = time.localtime(StoppedClock.instant.timestamp())
        return time.strftime(format, moment) if moment is not None else time.strftime(format)


def _stop_clocks() -> None:
    from nanobot.session import manager
    from nanobot.utils import helpers

    helpers.datetime = StoppedClock
    helpers.time = StoppedTime()
    manager.datetime = StoppedClock


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, ensure_ascii=False))


def _recording_provider(model: str, generation: Any) -> Any:
    from nanobot.providers.base import LLMResponse, ToolCallRequest
    from nanobot.providers.openai_compat_provider import OpenAICompatProvider
    from nanobot.utils.helpers import estimate_prompt_tokens_chain

    class Recorder(OpenAICompatProvider):
        def __init__(self) -> None:
            super().__init__(api_key="sk-test", api_base="http://127.0.0.1:9", default_model=model)
            self.generation = generation
            self.calls: list[dict[str, Any]] = []
            self.replies: list[dict[str, Any]] = []

        async def chat(self, messages: Any, tools: Any = None, **kwargs: Any) -> Any:
            sent = _json(messages)
            wire = self._build_kwargs(
                messages,
                tools,
                kwargs.get("model"),
                kwargs.get("max_tokens") or 1,
                kwargs.get("temperature") or 0.0,
                kwargs.get("reasoning_effort"),
                kwargs.get("tool_choice"),
            )["messages"]
            estimate, _ = estimate_prompt_tokens_chain(self, model, messages, tools)
            self.calls.append(
                {"messages": sent, "tools": _json(tools), "wire": _json(wire), "estimate": estimate}
            )
            usage = {"prompt_tokens": 1, "completion_tokens": 1}  # spares the loop's estimate
            if tools is None or not self.replies:
                return LLMResponse(content="noted", finish_reason="stop", usage=usage)
            reply = self.replies.pop(0)
            calls = [
                ToolCallRequest(id=c["id"], name=c["name"], arguments=c.get("arguments", {}))
                for c in reply.get("tool_calls", [])
            ]
            return LLMResponse(
                content=reply.get("content"),
                tool_calls=calls,
                finish_reason=reply.get("finish_reason", "tool_calls" if calls else "stop"),
                reasoning_content=reply.get("reasoning_content"),
                thinking_blocks=reply.get("thinking_blocks"),
                usage=usage,
            )

        async def chat_stream(self, messages: Any, tools: Any = None, **kwargs: Any) -> Any:
            kwargs = {k: v for k, v in kwargs.items() if not k.startswith("on_")}
            return await self.chat(messages, tools, **kwargs)

    return Recorder()


def _fake_tool(tool_name: str) -> Any:
    from nanobot.agent.tools.base import Tool

    class Scripted(Tool):
        @property
        def name(self) -> str:
            return tool_name

        @property
        def description(self) -> str:
            return f"returns its result argument ({tool_name})"

        @property
        def parameters(self) -> dict[str, Any]:
            return {"type": "object", "properties": {"result": {}}}

        async def execute(self, **kwargs: Any) -> Any:
            return kwargs.get("result")

    return Scripted()


def _loop(case: dict[str, Any], probe: Any, scratch: Path) -> Any:
    """The loop as ``nanobot agent`` builds it (``nanobot serve`` for the ``api`` channel:
    no cron service), its provider recording."""
    from nanobot.agent.loop import AgentLoop
    from nanobot.bus.queue import MessageBus
    from nanobot.cron.service import CronService
    from nanobot.providers.image_generation import image_gen_provider_configs

    config = probe._load_config(case.get("config"), case["workspace"], scratch)
    resolved = config.resolve_preset()
    provider = _recording_provider(resolved.model, resolved.to_generation_settings())
    cron = CronService(config.workspace_path / "cron" / "jobs.json")
    loop = AgentLoop.from_config(
        config,
        MessageBus(),
        provider=provider,
        cron_service=None if case.get("channel") == "api" else cron,
        image_generation_provider_configs=image_gen_provider_configs(config),
    )
    for name in case.get("tools", []):
        loop.tools.register(_fake_tool(name))
    return loop


async def _request(case: dict[str, Any], loop: Any) -> dict[str, Any]:
    from nanobot.bus.events import InboundMessage
    from nanobot.session.manager import Session

    key = case.get("session_key", "cli:direct")
    channel, chat_id = case.get("channel", "cli"), case.get("chat_id", "direct")
    message = InboundMessage(
        channel=channel,
        sender_id=case.get("sender_id", "user"),
        chat_id=chat_id,
        content=case["text"],
        media=case.get("media", []),
    )
    session = Session(key=key)
    loop.context.timezone = case.get("timezone", loop.configured_timezone)
    StoppedClock.instant = datetime.fromisoformat(case["clock"])
    initial = loop._build_initial_messages(message, session, copy.deepcopy(case["history"]), None)
    initial += copy.deepcopy(case.get("steps", []))
    loop.provider.calls.clear()
    await loop._run_agent_loop(
        initial, session=session, channel=channel, chat_id=chat_id, session_key=key
    )
    return {"calls": loop.provider.calls[:1]}


async def _converse(case: dict[str, Any], loop: Any) -> dict[str, Any]:
    key = case.get("session_key", "cli:direct")
    turns = []
    for turn in case["turns"]:
        StoppedClock.instant = datetime.fromisoformat(turn["clock"])
        loop.provider.replies = copy.deepcopy(turn["replies"])
        first = len(loop.provider.calls)
        await loop.process_direct(
            turn["text"],
            session_key=key,
            channel=case.get("channel", "cli"),
            chat_id=case.get("chat_id", "direct"),
            media=turn.get("media"),
        )
        turns.append([c for c in loop.provider.calls[first:] if c["tools"] is not None])
    session = loop.sessions.get_or_create(key)
    stored = {"messages": _json(session.messages), "last_consolidated": session.last_consolidated}
    return {"turns": turns, "session": stored, "metadata": _json(session.metadata)}


def _remember_system_prompts(builder: Any) -> None:
    """Build each distinct system prompt once (the workspace does not change between
    requests; parsing every skill's front matter again costs a tenth of a second)."""
    build = builder.build_system_prompt
    built: dict[str, str] = {}

    def remembered(*args: Any, **kwargs: Any) -> str:
        key = json.dumps([args, kwargs], default=str, sort_keys=True)
        if key not in built:
            built[key] = build(*args, **kwargs)
        return built[key]

    builder.build_system_prompt = remembered


class Driver:
    """Answers cases; one agent loop per (workspace, config) serves every ``request``."""

    def __init__(self, probe: Any, scratch: Path) -> None:
        self.probe = probe
        self.scratch = scratch
        self.loops: dict[tuple[str, str | None, tuple[str, ...]], Any] = {}
        self.talks: dict[tuple[Any, ...], Any] = {}
        self.events = asyncio.new_event_loop()

    def request_loop(self, case: dict[str, Any]) -> Any:
        key = (case["workspace"], case.get("config"), tuple(case.get("tools", [])))
        if key not in self.loops:
            loop = _loop(case, self.probe, self.scratch)
            loop.sessions.save = lambda *args, **kwargs: None
            _remember_system_prompts(loop.context)
            loop.configured_timezone = loop.context.timezone
            self.loops[key] = loop
        return self.loops[key]

    def run(self, case: dict[str, Any]) -> Any:
        zone = case.get("process_zone", "UTC")
        if os.environ.get("TZ") != zone:
            os.environ["TZ"] = zone
            time.tzset()
        op = case["op"]
        if op == "sync":
            from nanobot.utils.helpers import sync_workspace_templates

            return sync_workspace_templates(Path(case["workspace"]), silent=True)
        if op == "kit":
            return self.probe.kit(case["request"], self.scratch)
        if op == "request":
            return self.events.run_until_complete(_request(case, self.request_loop(case)))
        if op == "system":
            from nanobot.agent.autocompact import AutoCompact

            loop = self.request_loop(case)
            active = datetime.fromisoformat(case["last_active"])
            summary = AutoCompact._format_summary(case["summary"], active)
            return loop.context.build_system_prompt(
                None,
                channel="cli",
                session_summary=summary,
                workspace=loop.workspace_scopes.default().project_path,
                session_key=case["session_key"],
                unified_session=loop._unified_session,
            )
        if op == "converse":
            key = (case["workspace"], case.get("config"), tuple(case.get("tools", [])))
            key += (case.get("channel"),)
            if key not in self.talks:
                self.talks[key] = _loop(case, self.probe, self.scratch)
            return self.events.run_until_complete(_converse(case, self.talks[key]))
        raise ValueError(f"unknown op {op!r}")


def main() -> None:
    import tempfile
    import traceback

    from loguru import logger

    logger.remove()
    spec = importlib.util.spec_from_file_location("probe_022", sys.argv[1])
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    _stop_clocks()
    stdout, sys.stdout = sys.stdout, sys.stderr
    with tempfile.TemporaryDirectory() as scratch:
        driver = Driver(probe, Path(scratch))
        for line in sys.stdin:
            try:
                answer = {"result": driver.run(json.loads(line))}
            except Exception:
                answer = {"error": traceback.format_exc()}
            stdout.write(json.dumps(answer, ensure_ascii=True) + "\n")
            stdout.flush()


if __name__ == "__main__":
    main()
