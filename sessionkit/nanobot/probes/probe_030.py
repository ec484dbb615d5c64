"""nanobot 0.3.0's kit for one workspace: its system prompt in parts, current-message wrapper,
tool definitions and the texts and limits its request clean-up uses, as the release renders them.

Runs inside the release's interpreter (``python -I probe_030.py``): a JSON request on stdin
(``workspace``, ``config``, ``channel``, ``runtime`` overrides, optional ``project``), the kit
as JSON on stdout.  It imports only the standard library, nanobot and its sibling probing.py (never sessionkit), builds
the agent loop the way ``nanobot agent`` composes it (config, provider, cron service, tool
registry) with a provider it never calls, and asks the loop's own ``ContextBuilder`` and
``ToolRegistry``.  Folders the release creates while being built (the workspace's ``memory/``)
are removed again when left empty, and its session store lives in a scratch folder, so the
probe leaves the workspace as it found it.  On any mismatch between the parts and the prompt it
exits non-zero with a message.

0.3.0 specifics the kit carries besides the shared contract: ``recent_history`` (per session
key, the "# Recent History" part 0.3.0 appends from ``memory/history.jsonl`` entries newer than
the Dream cursor, as of now), ``loop`` (the runner's clean-up texts, constants and budget
settings), ``consolidation`` (what the consolidator's own whole-request estimate adds) and ``wire`` (the OpenAI-compatible provider's stand-in texts and which provider the
config selects).
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # isolated mode: find probing.py
from probing import (  # noqa: E402
    SENTINEL,
    ProbeError,
    apply_runtime,
    bootstrap_files,
    captured_parts,
    no_new_folders,
    serve,
)

RELEASE = "0.3.0"


class _Moment:
    """Stands in for the summary's datetime: its ``isoformat`` is the ``last_active`` sentinel."""

    def isoformat(self) -> str:
        return SENTINEL.format("last_active")


def _config(path: str | None, workspace: Path) -> Any:
    """The config as ``nanobot agent -c PATH -w WORKSPACE`` loads it; defaults without a file."""
    from nanobot.config.loader import load_config, resolve_config_env_vars, set_config_path
    from nanobot.config.schema import Config

    if path is not None:
        config_path = Path(path).expanduser().resolve()
        if not config_path.is_file():
            raise ProbeError(f"config file not found: {config_path}")
        set_config_path(config_path)
        config = resolve_config_env_vars(load_config(config_path))
    else:
        config = Config()
    config.agents.defaults.workspace = str(workspace)
    return config


def _agent(config: Any, scratch: Path) -> tuple[Any, Any]:
    """The agent loop as ``nanobot agent`` composes it, and the provider snapshot it runs."""
    from nanobot.agent.loop import AgentLoop
    from nanobot.bus.queue import MessageBus
    from nanobot.cron.service import CronService
    from nanobot.providers.factory import (
        build_provider_snapshot,
        build_unconfigured_provider_snapshot,
    )
    from nanobot.providers.image_generation import image_gen_provider_configs
    from nanobot.session.manager import SessionManager

    try:
        snapshot = build_provider_snapshot(config)
    except ValueError as exc:
        snapshot = build_unconfigured_provider_snapshot(config, str(exc))
    agent = AgentLoop.from_config(
        config,
        MessageBus(),
        provider=snapshot.provider,
        model=snapshot.model,
        context_window_tokens=snapshot.context_window_tokens,
        cron_service=CronService(config.workspace_path / "cron" / "jobs.json"),
        session_manager=SessionManager(scratch),
        image_generation_provider_configs=image_gen_provider_configs(config),
    )
    return agent, snapshot


def _parts(context: Any, channel: str | None, root: Path) -> list[dict[str, Any]]:
    """The prompt's parts, each rendered by the release's own builder, in its order."""
    from nanobot.utils.prompt_templates import render_template

    parts: list[dict[str, Any]] = [
        {
            "part": "identity",
            "text": context._get_identity(channel=channel, workspace=root),
            "inferred": True,
        }
    ]
    bootstrap = context._load_bootstrap_files(root)
    if bootstrap:
        parts.append(
            {
                "part": "bootstrap",
                "text": bootstrap,
                "inferred": False,
                "files": bootstrap_files(context, root, bootstrap),
                "separator": "\n\n",
            }
        )
    parts.append(
        {
            "part": "tool contract",
            "text": render_template("agent/tool_contract.md"),
            "inferred": False,
        }
    )
    memory = context.memory.get_memory_context()
    if memory and not context._is_template_content(
        context.memory.read_memory(), "memory/MEMORY.md"
    ):
        parts.append({"part": "memory", "text": f"# Memory\n\n{memory}", "inferred": False})
    always = context.skills.get_always_skills()
    if always:
        body = context.skills.load_skills_for_context(always)
        if body:
            parts.append(
                {"part": "active skills", "text": f"# Active Skills\n\n{body}", "inferred": True}
            )
    summary = context.skills.build_skills_summary(exclude=set(always))
    if summary:
        text = render_template("agent/skills_section.md", skills_summary=summary)
        parts.append({"part": "skills summary", "text": text, "inferred": True})
    return parts


def _system(agent: Any, config: Any, channel: str | None, root: Path) -> dict[str, Any]:
    """The system prompt, its parts (checked against it), the archived-summary part and the
    per-session recent-history parts."""
    context = agent.context
    method = context.build_system_prompt
    text, built = captured_parts(
        lambda: method(channel=channel, workspace=root, include_memory_recent_history=False),
        method.__code__,
    )
    parts = _parts(context, channel, root)
    if [p["text"] for p in parts] != built:
        raise ProbeError(f"expected parts {[p['part'] for p in parts]}, the release built others")
    summary = agent.auto_compact._format_summary(SENTINEL.format("text"), _Moment())
    summarised, with_summary = captured_parts(
        lambda: method(
            channel=channel,
            workspace=root,
            include_memory_recent_history=False,
            session_summary=summary,
        ),
        method.__code__,
    )
    if with_summary[:-1] != built:
        raise ProbeError("the archived summary did not come as one part after the others")
    joiner = summarised[len(text) : len(summarised) - len(with_summary[-1])]
    if joiner.join(built) != text or text + joiner + with_summary[-1] != summarised:
        raise ProbeError("the parts do not join to the system prompt")
    unified = bool(config.agents.defaults.unified_session)
    recent = _recent_history(context, channel, root, text, joiner, unified)
    return {
        "system": parts,
        "joiner": joiner,
        "system_text": text,
        "summary": with_summary[-1],
        "recent_history": recent,
    }


def _recent_history(
    context: Any, channel: str | None, root: Path, base: str, joiner: str, unified: bool
) -> dict[str, str]:
    """Per session key: the memory-history part 0.3.0 appends for that session now."""
    from nanobot.session.keys import UNIFIED_SESSION_KEY

    memory = context.memory
    entries = memory.read_unprocessed_history(since_cursor=memory.get_last_dream_cursor())
    keys = {e.get("session_key") for e in entries if isinstance(e.get("session_key"), str)}
    if unified:
        keys.add(UNIFIED_SESSION_KEY)
    found: dict[str, str] = {}
    for key in sorted(keys):
        full = context.build_system_prompt(
            channel=channel, workspace=root, session_key=key, unified_session=unified
        )
        if full == base:
            continue
        if not full.startswith(base + joiner):
            raise ProbeError(f"the recent-history part of {key!r} is not appended to the prompt")
        found[key] = full[len(base) + len(joiner) :]
    return found


def _consolidation(agent: Any, channel: str | None, joiner: str) -> dict[str, Any]:
    """What the consolidator's whole-request estimate puts in its synthetic request: the
    current message's text and the archived-summary part (the summary text bare)."""
    from nanobot.agent.memory import Consolidator
    from nanobot.session.manager import Session

    seen: dict[str, Any] = {}

    def capture(**kwargs: Any) -> list[dict[str, Any]]:
        seen.update(kwargs)
        return []

    consolidator = Consolidator(
        store=agent.context.memory,
        sessions=agent.sessions,
        build_messages=capture,
        get_tool_definitions=list,
    )
    summary = {"text": SENTINEL.format("text"), "last_active": "2026-01-01T00:00:00"}
    session = Session(key="probe", messages=[], metadata={"_last_summary": summary})
    consolidator.estimate_session_prompt_tokens(session, runtime=agent.runtime_resolver.runtime)
    context = agent.context
    base = context.build_system_prompt(channel=channel, include_memory_recent_history=False)
    summarised = context.build_system_prompt(
        channel=channel,
        include_memory_recent_history=False,
        session_summary=seen["session_summary"],
    )
    if not summarised.startswith(base + joiner):
        raise ProbeError("the consolidator's summary is not appended to the prompt")
    return {"current": seen["current_message"], "summary": summarised[len(base) + len(joiner) :]}


def _loop(agent: Any, snapshot: Any, project: Path) -> dict[str, Any]:
    """What 0.3.0's runner clean-up inserts or recognises, its constants and its budget."""
    from nanobot.agent import context_governance as governance
    from nanobot.utils import helpers
    from nanobot.utils.runtime import empty_tool_result_message

    def reference(cut: bool) -> str:
        return helpers._render_tool_result_reference(
            SENTINEL.format("path"),
            original_size=SENTINEL.format("size"),
            preview=SENTINEL.format("preview"),
            truncated_preview=cut,
        )

    return {
        "max_tool_result_chars": agent.max_tool_result_chars,
        "context_window_tokens": agent.context_window_tokens,
        "max_tokens": snapshot.generation.max_tokens,
        "context_block_limit": agent.context_block_limit,
        "tool_results_root": str(project / helpers._TOOL_RESULTS_DIR),
        "preview_chars": helpers._TOOL_RESULT_PREVIEW_CHARS,
        "offload_exempt_tools": sorted(governance.TOOL_RESULT_OFFLOAD_EXEMPT_TOOLS),
        "compactable_tools": sorted(governance.COMPACTABLE_TOOLS),
        "compact_min_chars": governance.MICROCOMPACT_MIN_CHARS,
        "compact_target_ratio": governance.INFLIGHT_COMPACT_TARGET_RATIO,
        "safety_buffer": governance.SNIP_SAFETY_BUFFER,
        "placeholder_assistant": sorted(governance.PLACEHOLDER_TEXTS),
        "backfill": governance.BACKFILL_CONTENT,
        "empty_tool_result": empty_tool_result_message(SENTINEL.format("name")),
        "tool_result_reference": reference(False),
        "tool_result_reference_cut": reference(True),
        "tool_result_compacted": governance.ContextGovernor._tool_result_compaction_message(
            {"name": SENTINEL.format("name")}
        ),
        "truncated_suffix": helpers.truncate_text("ab", 1)[1:],
    }


def _wire(snapshot: Any) -> dict[str, Any]:
    """What the OpenAI-compatible clean-up inserts, and the provider the config selects (its
    quirks change the wire messages; sessionkit rebuilds the plain OpenAI-compatible ones)."""
    from nanobot.providers import base

    empty = base.LLMProvider._sanitize_empty_content([{"role": "user", "content": ""}])
    spec = getattr(snapshot.provider, "_spec", None)
    return {
        "empty_content": empty[0]["content"],
        "synthetic_user": base._SYNTHETIC_USER_CONTENT,
        "provider": type(snapshot.provider).__name__,
        "spec": getattr(spec, "name", None),
    }


def build_kit(request: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """The kit of one (workspace, config, channel, runtime) as 0.3.0 renders it."""
    from importlib.metadata import version

    workspace = Path(request["workspace"])
    apply_runtime(dict(request.get("runtime") or {}))
    config = _config(request.get("config"), workspace)
    agent, snapshot = _agent(config, scratch)
    channel = request.get("channel")
    scope = agent.workspace_scopes.default()
    root = Path(request["project"]) if request.get("project") else scope.project_path
    kit: dict[str, Any] = {"nanobot": version("nanobot-ai")}
    kit.update(_system(agent, config, channel, root))
    kit["current"] = agent.context.build_messages(
        history=[],
        current_message=SENTINEL.format("text"),
        channel=channel,
        workspace=root,
        include_memory_recent_history=False,
    )[-1]
    kit["sentinels"] = ["text"]
    kit["tools"] = agent.tools.get_definitions()
    kit["loop"] = _loop(agent, snapshot, root)
    kit["consolidation"] = _consolidation(agent, channel, kit["joiner"])
    kit["wire"] = _wire(snapshot)
    kit["runtime"] = {
        "system": platform.system(),
        "machine": platform.machine(),
        "python_version": platform.python_version(),
        "timezone": config.agents.defaults.timezone,
        "path": os.environ.get("PATH", ""),
        "mcp_servers_not_connected": sorted(config.tools.mcp_servers),
    }
    return kit


def _answer(request: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """The kit, built with the release's log output silenced and no folder left behind."""
    from loguru import logger

    logger.remove()
    with no_new_folders():
        return build_kit(request, scratch)


if __name__ == "__main__":
    serve("probe_030", RELEASE, _answer)
