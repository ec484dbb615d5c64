"""Run inside nanobot 0.3.0's venv (through ``release_harness.py``): one scripted user turn
through the release's own context builder, agent runner, context governor, OpenAI-compatible
provider and session saving, recording every request the runner handed its provider.

``batch(jobs)`` runs several of this module's functions in one process.  ``run_turn(case)`` takes ``workspace``, ``key``, ``channel``, ``stored`` (the session's messages
before the turn), ``history_kwargs`` (for ``Session.get_history``), ``user`` (``content``,
``media``, ``blocks``: runtime-context ``[source, content]`` pairs), ``summary`` (``text``,
``last_active``, or null), ``settings`` (``context_window_tokens``, ``max_tokens``,
``context_block_limit``, ``max_tool_result_chars``), ``rounds`` (the scripted answers: each
``content``, ``calls`` ``[{id, name, arguments}]``, optional ``reasoning_content``,
``thinking_blocks``, ``finish_reason``) and ``results`` (tool output per call, keyed by the
call's ``q`` argument).  The ids the provider makes up for tool calls without one are
numbered per request instead of random (``fresh_id``).  It returns the history, the stored messages after the turn and, per
call, the messages the runner handed the provider (``loop``), the body's ``messages``
(``wire``), its ``tools`` and the release's whole-request estimate of ``loop``.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from nanobot.agent.autocompact import AutoCompact
from nanobot.agent.context import ContextBuilder
from nanobot.agent.loop import AgentLoop
from nanobot.agent.runner import AgentRunner, AgentRunSpec
from nanobot.agent.tools.base import Tool
from nanobot.agent.tools.registry import ToolRegistry
from nanobot.bus.events import InboundMessage
from nanobot.providers import openai_compat_provider
from nanobot.providers.base import LLMResponse, ToolCallRequest
from nanobot.providers.openai_compat_provider import OpenAICompatProvider
from nanobot.runtime_context import RuntimeContextBlock
from nanobot.session.manager import Session, SessionManager
from nanobot.utils.helpers import estimate_prompt_tokens_chain
from nanobot.utils.llm_runtime import LLMRuntime

TOOL_NAMES = ("exec", "read_file", "web_fetch", "notes")


def fresh_id(count: list[int]) -> str:
    """The n-th id of a request's id-less tool calls (in place of the release's random ids)."""
    count[0] += 1
    return f"rnd{count[0]:06d}"


class _Scripted(Tool):
    """A tool answering from the case's results, by its ``q`` argument."""

    def __init__(self, name: str, results: dict[str, Any]) -> None:
        self._name = name
        self._results = results

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return f"scripted {self._name}"

    @property
    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "properties": {"q": {"type": "string"}}}

    async def execute(self, **kwargs: Any) -> Any:
        return copy.deepcopy(self._results.get(str(kwargs.get("q")), f"ran {kwargs}"))


class _Recording(OpenAICompatProvider):
    """The plain OpenAI-compatible provider, answering from a script instead of the network."""

    def __init__(self, rounds: list[dict[str, Any]], max_tokens: int) -> None:
        super().__init__(api_key="none", api_base="http://127.0.0.1:9", default_model="model")
        self.generation = dataclasses.replace(self.generation, max_tokens=max_tokens)
        self._rounds = list(rounds)
        self.calls: list[dict[str, Any]] = []

    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> LLMResponse:
        count = [0]
        openai_compat_provider._short_tool_id = lambda: fresh_id(count)
        body = self._build_kwargs(
            messages,
            kwargs.get("tools"),
            kwargs.get("model"),
            kwargs.get("max_tokens") or 4096,
            kwargs.get("temperature") or 0.1,
            kwargs.get("reasoning_effort"),
            kwargs.get("tool_choice"),
        )
        tools = kwargs.get("tools")
        estimate, _ = estimate_prompt_tokens_chain(self, "model", messages, tools)
        self.calls.append(
            copy.deepcopy(
                {"loop": messages, "wire": body["messages"], "tools": tools, "estimate": estimate}
            )
        )
        answer = self._rounds.pop(0) if self._rounds else {"content": "done"}
        calls = [
            ToolCallRequest(id=c["id"], name=c["name"], arguments=c.get("arguments", {}))
            for c in answer.get("calls", [])
        ]
        finish = answer.get("finish_reason") or ("tool_calls" if calls else "stop")
        return LLMResponse(
            content=answer.get("content"),
            tool_calls=calls,
            finish_reason=finish,
            reasoning_content=answer.get("reasoning_content"),
            thinking_blocks=answer.get("thinking_blocks"),
        )


_CONTEXTS: dict[Path, ContextBuilder] = {}


def _context(workspace: Path) -> ContextBuilder:
    """One context builder per workspace, its system prompts remembered by their arguments:
    the workspace does not change during a batch, and rendering a prompt (its skills' YAML
    front matter) is what a turn here costs most."""
    if workspace not in _CONTEXTS:
        context = ContextBuilder(workspace, timezone="UTC")
        build = context.build_system_prompt
        prompts: dict[str, str] = {}

        def remembered(*args: Any, **kwargs: Any) -> str:
            key = repr((args, sorted(kwargs.items())))
            if key not in prompts:
                prompts[key] = build(*args, **kwargs)
            return prompts[key]

        context.build_system_prompt = remembered  # type: ignore[method-assign]
        _CONTEXTS[workspace] = context
    return _CONTEXTS[workspace]


def _saver(sessions: SessionManager, max_chars: int) -> AgentLoop:
    """An agent loop carrying only what persisting a turn reads."""
    loop = AgentLoop.__new__(AgentLoop)
    loop.max_tool_result_chars = max_chars
    loop.sessions = sessions
    return loop


def _summary(case: dict[str, Any]) -> str | None:
    summary = case.get("summary")
    if not summary:
        return None
    moment = datetime.fromisoformat(summary["last_active"])
    return AutoCompact._format_summary(summary["text"], moment)


async def _turn(case: dict[str, Any]) -> dict[str, Any]:
    workspace = Path(case["workspace"])
    settings = case["settings"]
    key = case["key"]
    sessions = SessionManager(Path(tempfile.mkdtemp(prefix="sk-scenario-")))
    saver = _saver(sessions, settings["max_tool_result_chars"])
    session = Session(key=key, messages=copy.deepcopy(case["stored"]))
    history = session.get_history(**case["history_kwargs"])
    user = case["user"]
    blocks = [RuntimeContextBlock(source=s, content=c) for s, c in user.get("blocks", [])]
    message = InboundMessage(
        channel=case["channel"],
        sender_id="user",
        chat_id="direct",
        content=user["content"],
        media=list(user.get("media", [])),
    )
    context = _context(workspace)
    initial = context.build_messages(
        history=history,
        current_message=message.content,
        media=message.media or None,
        channel=case["channel"],
        chat_id="direct",
        session_summary=_summary(case),
        runtime_context_blocks=blocks,
        session_key=key,
    )
    before = len(session.messages)
    saver._persist_user_message_early(message, session, runtime_context_blocks=blocks)
    tools = ToolRegistry()
    for name in TOOL_NAMES:
        tools.register(_Scripted(name, case["results"]))
    provider = _Recording(case["rounds"], settings["max_tokens"])
    runtime = LLMRuntime.capture(
        provider, "model", context_window_tokens=settings["context_window_tokens"]
    )
    result = await AgentRunner().run(
        AgentRunSpec(
            initial_messages=initial,
            tools=tools,
            runtime=runtime,
            max_iterations=case.get("max_iterations", 12),
            max_tool_result_chars=settings["max_tool_result_chars"],
            concurrent_tools=True,
            workspace=workspace,
            session_key=key,
            context_block_limit=settings["context_block_limit"],
        )
    )
    saver._save_turn(session, result.messages, len(initial))
    return {
        "history": history,
        "stored": session.messages[before:],
        "calls": provider.calls,
        "stop_reason": result.stop_reason,
    }


def run_turn(case: dict[str, Any]) -> dict[str, Any]:
    """One scripted turn, as the release ran it (see the module docstring)."""
    return asyncio.run(_turn(case))


def system_prompt(
    workspace: str, channel: str | None, key: str | None, summary: dict[str, Any] | None
) -> str:
    """The system prompt the release's context builder writes for one session's turn."""
    return _context(Path(workspace)).build_system_prompt(
        channel=channel, session_key=key, session_summary=_summary({"summary": summary})
    )


def consolidation(
    workspace: str,
    key: str,
    stored: list[dict[str, Any]],
    metadata: dict[str, Any],
    last_consolidated: int,
    settings: dict[str, Any],
) -> dict[str, Any]:
    """The consolidator's whole-request estimate for one session, with the history it read and
    the messages it estimated."""
    from nanobot.agent.memory import Consolidator

    context = _context(Path(workspace))
    seen: dict[str, Any] = {}

    def build(**kwargs: Any) -> list[dict[str, Any]]:
        messages = context.build_messages(**kwargs)
        seen.update(copy.deepcopy({"history": kwargs["history"], "messages": messages}))
        return messages

    tools = ToolRegistry()
    for name in TOOL_NAMES:
        tools.register(_Scripted(name, {}))
    consolidator = Consolidator(
        store=context.memory,
        sessions=SessionManager(Path(tempfile.mkdtemp(prefix="sk-scenario-"))),
        build_messages=build,
        get_tool_definitions=tools.get_definitions,
    )
    session = Session(
        key=key,
        messages=copy.deepcopy(stored),
        metadata=copy.deepcopy(metadata),
        last_consolidated=last_consolidated,
    )
    provider = _Recording([], settings["max_tokens"])
    runtime = LLMRuntime.capture(
        provider, "model", context_window_tokens=settings["context_window_tokens"]
    )
    estimate, _ = consolidator.estimate_session_prompt_tokens(session, runtime=runtime)
    return {**seen, "estimate": estimate, "tools": tools.get_definitions()}


def agent_tools(workspace: str, config: str | None) -> list[dict[str, Any]]:
    """The tool definitions of the agent loop ``nanobot agent -c CONFIG -w WORKSPACE`` runs."""
    from nanobot.bus.queue import MessageBus
    from nanobot.config.loader import load_config, resolve_config_env_vars
    from nanobot.cron.service import CronService
    from nanobot.providers.factory import make_provider
    from nanobot.providers.image_generation import image_gen_provider_configs

    path = Path(config) if config else Path(tempfile.mkdtemp()) / "absent.json"
    loaded = resolve_config_env_vars(load_config(path))
    loaded.agents.defaults.workspace = workspace
    sessions = SessionManager(Path(tempfile.mkdtemp(prefix="sk-scenario-")))
    loop = AgentLoop.from_config(
        loaded,
        MessageBus(),
        provider=make_provider(loaded),
        cron_service=CronService(loaded.workspace_path / "cron" / "jobs.json"),
        session_manager=sessions,
        image_generation_provider_configs=image_gen_provider_configs(loaded),
    )
    return loop.tools.get_definitions()


def template_workspace(path: str) -> list[str]:
    """A workspace as ``nanobot agent`` first lays it out (the release's templates)."""
    from nanobot.utils.helpers import sync_workspace_templates

    return sync_workspace_templates(Path(path), silent=True)


def batch(jobs: list[list[Any]]) -> list[dict[str, Any]]:
    """Several calls of this module's functions in one process: each job is ``[name, args]``;
    each result ``{"returned": value}`` or ``{"raised": class name, "message": text}``."""
    results: list[dict[str, Any]] = []
    for name, args in jobs:
        try:
            results.append({"returned": globals()[name](*args)})
        except Exception as error:  # the release's exception is the result to compare
            results.append({"raised": type(error).__name__, "message": str(error)})
    return results
