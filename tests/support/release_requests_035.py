"""nanobot 0.3.5's own request building, called piece by piece inside its environment.

Run by ``release_harness.py`` (``Release.run("release_requests_035:<name>", cases)``); stdlib
plus the release only.  Each function takes JSON-able arguments and returns what the release's
own code built: the loop's clean-up (``ContextGovernor.prepare_messages_for_model``), the
OpenAI-compatible provider's (``_build_kwargs`` of a ``custom`` provider that is never
called), the whole-request estimate, the stored user message and current message of a turn,
what ``_save_turn`` stores, and the prompt and tools of a loop composed as the gateway
composes it.  Scratch state lives in temporary folders; workspaces are the caller's.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

MODEL = "stub-model"


def _config(workspace: str | None = None) -> Any:
    from nanobot.config.schema import Config

    defaults: dict[str, Any] = {"model": MODEL, "provider": "custom", "timezone": "UTC"}
    if workspace is not None:
        defaults["workspace"] = workspace
    return Config(
        agents={"defaults": defaults},
        providers={"custom": {"apiKey": "sk-never-used", "apiBase": "http://127.0.0.1:9"}},
    )


@cache
def _provider() -> Any:
    """A real ``custom`` OpenAI-compatible provider (its client is never asked to send)."""
    from nanobot.providers.factory import build_provider_snapshot

    return build_provider_snapshot(_config()).provider


@cache
def _loop() -> Any:
    """An agent loop over a scratch workspace, for its persistence and current-message code."""
    from nanobot.agent.loop import AgentLoop
    from nanobot.agent.tools.registry import ToolRegistry
    from nanobot.bus.queue import MessageBus
    from nanobot.session.manager import SessionManager

    root = Path(tempfile.mkdtemp(prefix="sk-loop-"))
    workspace = root / "workspace"
    config = _config(str(workspace))
    return AgentLoop.from_config(
        config,
        MessageBus(),
        provider=_provider(),
        session_manager=SessionManager(workspace, sessions_root=root / "sessions"),
        tool_registry=ToolRegistry(),
    )


def _governance(workspace: str, session_key: str | None, max_chars: int) -> Any:
    from nanobot.agent.context_governance import ContextGovernanceConfig
    from nanobot.agent.tools.registry import ToolRegistry

    return ContextGovernanceConfig(
        provider=_provider(),
        model=MODEL,
        tools=ToolRegistry(),
        workspace=Path(workspace),
        session_key=session_key,
        max_tool_result_chars=max_chars,
    )


def clean_up(
    messages: list[dict[str, Any]],
    first_call: int,
    workspace: str,
    session_key: str | None,
    max_chars: int,
) -> dict[str, Any]:
    """What the runner sends for ``messages``: the first call's list is the first
    ``first_call`` messages, each later call starts at a reply (an assistant message) and
    re-sends the accepted list plus what came since (``ContextCompactionState``'s
    bookkeeping, ``prepare_messages_for_model``'s clean-up).  Returns the last call's list,
    the clean-up of the whole list at once, and the wire's messages for the last call."""
    from nanobot.agent.context_governance import ContextCompactionState, ContextGovernor

    governor = ContextGovernor()
    config = _governance(workspace, session_key, max_chars)
    history_end = first_call - 1
    state = ContextCompactionState(
        raw_messages=messages,
        accepted_messages=copy.deepcopy(messages[:history_end]),
        raw_accepted_boundary=history_end,
        active_summary=None,
        transcript_input=None,
        transcript_builder=None,
        consolidate_history=None,
        consolidate_provider_compaction=None,
    )
    replies = [i for i, m in enumerate(messages) if i > first_call and m.get("role") == "assistant"]
    sent: list[dict[str, Any]] = []
    for count in sorted({first_call, *replies, len(messages)}):
        sent = governor.prepare_messages_for_model(config, state.request_messages(messages[:count]))
        state.accept_request(sent, raw_boundary=count)
    whole = governor.prepare_messages_for_model(config, messages)
    wire = _provider()._build_kwargs(sent, None, MODEL, 4096, 0.1, None, None)["messages"]
    return {"loop": sent, "whole": whole, "wire": wire}


def kit(probe: str, request: dict[str, Any]) -> dict[str, Any]:
    """The probe's kit, built in this process (the probe script loaded as a module)."""
    import importlib.util
    import shutil

    spec = importlib.util.spec_from_file_location("probe_035", probe)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    scratch = Path(tempfile.mkdtemp(prefix="sk-probe-"))
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return module.build_kit(request, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``messages`` the custom provider's request body holds for ``messages``."""
    return _provider()._build_kwargs(messages, None, MODEL, 4096, 0.1, None, None)["messages"]


def estimate(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[Any]:
    """``estimate_prompt_tokens_chain`` with the custom provider: (tokens, source)."""
    from nanobot.utils.helpers import estimate_prompt_tokens_chain

    return list(estimate_prompt_tokens_chain(_provider(), MODEL, messages, tools))


def current(
    text: str, media: list[str], blocks: list[list[str]], workspace: str | None = None
) -> dict[str, Any]:
    """A user turn's input as ``_build_turn`` handles it: attachments referenced, the runtime
    context resolved (given blocks, then an explicitly invoked skill of ``workspace``), the
    message persisted early, and the current message built.  Returns the stored message
    (``None`` when nothing was persisted) and the current one."""
    from nanobot.agent.context import ContextBuilder
    from nanobot.bus.events import InboundMessage
    from nanobot.runtime_context import RuntimeContextBlock, normalize_runtime_context_blocks
    from nanobot.utils.document import reference_non_image_attachments

    loop = _loop()
    builder = ContextBuilder(Path(workspace)) if workspace else loop.context
    msg = InboundMessage("cli", "user", "direct", text, media=list(media))
    if msg.media:
        content, images = reference_non_image_attachments(msg.content, msg.media)
        msg = dataclasses.replace(msg, content=content, media=images)
    resolved = normalize_runtime_context_blocks([RuntimeContextBlock(s, c) for s, c in blocks])
    skill = builder.skills.build_explicit_skill_runtime_context(text)
    if skill is not None and skill not in resolved:
        resolved.append(skill)
    session = loop.sessions.get_or_create(f"cli:{len(loop.sessions._cache)}")
    persisted = loop._persist_user_message_early(msg, session, runtime_context_blocks=resolved)
    built = builder.build_current_message(
        msg.content, media=msg.media or None, runtime_context_blocks=resolved
    )
    return {"stored": session.messages[-1] if persisted else None, "current": built}


def save_turn(
    prior: list[dict[str, Any]],
    transcript: list[dict[str, Any]],
    skip: int,
    checkpoint_at: int | None = None,
) -> list[dict[str, Any]]:
    """What ``_save_turn`` appends to a session holding ``prior`` for the loop's transcript
    (with a governor summary whose boundary is ``checkpoint_at``, when given)."""
    from nanobot.session.manager import Session
    from nanobot.session.summary import SessionSummaryCheckpoint

    session = Session(key="cli:save", messages=[dict(m) for m in prior])
    checkpoint = (
        SessionSummaryCheckpoint(summary="we spoke", transcript_boundary=checkpoint_at)
        if checkpoint_at is not None
        else None
    )
    _loop()._save_turn(
        session,
        transcript,
        skip,
        turn_latency_ms=1234,
        summary_checkpoint=checkpoint,
        input_persisted_early=True,
    )
    return session.messages[len(prior) :]


def template_workspace(path: str) -> list[str]:
    """Fill ``path`` with the workspace templates, as ``nanobot onboard`` and the gateway do."""
    from nanobot.utils.helpers import sync_workspace_templates

    return sync_workspace_templates(Path(path), silent=True)


def composed(
    config_path: str, channel: str | None, summaries: list[Any], updated_at: str
) -> dict[str, Any]:
    """The system prompt (plain, and for each stored ``_last_summary`` value as a turn reads it
    from the session's metadata) and the tool definitions of an agent loop composed as
    ``nanobot gateway`` composes it (provider never called)."""
    from datetime import datetime

    from nanobot.agent.loop import AgentLoop
    from nanobot.agent.model_presets import load_model_preset_catalog
    from nanobot.agent.tools.mcp import MCPProvider
    from nanobot.agent.tools.registry import ToolRegistry
    from nanobot.bus.queue import MessageBus
    from nanobot.cli.runtime_config import _load_runtime_config
    from nanobot.cron.service import CronService
    from nanobot.providers.factory import build_provider_snapshot
    from nanobot.providers.image_generation import image_gen_provider_configs
    from nanobot.session.manager import SessionManager
    from nanobot.triggers.local_store import LocalTriggerStore

    with contextlib.redirect_stdout(sys.stderr):  # it announces the config path on stdout
        config = _load_runtime_config(config_path)
    snapshot = build_provider_snapshot(config)
    tools = ToolRegistry()
    MCPProvider.from_config(config, tools)
    agent = AgentLoop.from_config(
        config,
        MessageBus(),
        provider=snapshot.provider,
        model=snapshot.model,
        context_window_tokens=snapshot.context_window_tokens,
        cron_service=CronService(config.workspace_path / "cron" / "jobs.json"),
        session_manager=SessionManager(config.workspace_path),
        image_generation_provider_configs=image_gen_provider_configs(config),
        preset_catalog_loader=load_model_preset_catalog,
        provider_signature=snapshot.signature,
        local_trigger_store=LocalTriggerStore(config.workspace_path),
        tool_registry=tools,
    )
    from nanobot.session.summary import session_summary_from_metadata

    fallback = datetime.fromisoformat(updated_at)
    result = {
        "system": agent.context.build_system_prompt(channel=channel),
        "summarised": [
            agent.context.build_system_prompt(
                channel=channel,
                session_summary=session_summary_from_metadata(
                    {"_last_summary": value}, fallback_last_active=fallback
                ),
            )
            for value in summaries
        ],
        "tools": agent.tools.get_definitions(),
    }
    asyncio.run(agent.aclose())
    return result


def batch(calls: list[list[Any]]) -> list[dict[str, Any]]:
    """Many calls in one process: ``[[function name, kwargs], ...]`` -> one result each
    (``{"returned": ...}`` or ``{"raised": class name, "message": ...}``)."""
    import json

    results = []
    for name, kwargs in calls:
        try:
            value = globals()[name](**kwargs)
            results.append({"returned": json.loads(json.dumps(value))})
        except Exception as error:  # the release's exception is the result to compare
            results.append({"raised": type(error).__name__, "message": str(error)})
    return results
