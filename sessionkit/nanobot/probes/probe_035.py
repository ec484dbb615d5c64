"""nanobot 0.3.5's kit for one workspace: its system prompt in parts, current-message wrapper,
tool definitions and the texts its request clean-up inserts, as the release itself renders them.

Runs inside the release's interpreter (``python -I probe_035.py``): a JSON request on stdin
(``workspace``, ``config``, ``channel``, ``runtime`` overrides, optional ``project``), the kit
as JSON on stdout.  It imports only the standard library, nanobot and its sibling probing.py (never sessionkit), builds
the agent loop the way 0.3.5's gateway composes it (config, provider snapshot, cron service,
trigger store, tool registry) with a provider it never calls, and asks the loop's own
``ContextBuilder`` and ``ToolRegistry``.  Folders the release creates while being built (the
workspace's ``memory/``, the data dir's ``cli-apps/``) are removed again when left empty, and the
session store it needs lives in a scratch folder, so the probe leaves the workspace as it found
it.  On any mismatch between the parts and the prompt it exits non-zero with a message.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
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

RELEASE = "0.3.5"


def _config(path: str | None, workspace: Path, runtime: dict[str, Any]) -> Any:
    """The config as 0.3.5's CLI loads it (env references resolved), workspace overridden."""
    from nanobot.config.loader import load_config, resolve_config_env_vars, set_config_path
    from nanobot.config.schema import Config

    if path is not None:
        config_path = Path(path).expanduser().resolve()
        set_config_path(config_path)
        config = resolve_config_env_vars(load_config(config_path))
    else:
        config = Config()
    defaults = config.agents.defaults
    defaults.workspace = str(workspace)
    if "timezone" in runtime and defaults.timezone_mode == "auto":
        defaults.timezone = str(runtime["timezone"])
    return config


def _snapshot_loader(config: Any) -> Callable[..., Any]:
    """The gateway's provider loader: the configured provider, else the unconfigured one."""
    from nanobot.providers.factory import (
        build_unconfigured_provider_snapshot,
        load_provider_snapshot,
    )

    def load(*args: Any, **kwargs: Any) -> Any:
        try:
            return load_provider_snapshot(*args, **kwargs)
        except ValueError as exc:
            return build_unconfigured_provider_snapshot(config, str(exc))

    return load


def _agent(config: Any, workspace: Path, scratch: Path) -> tuple[Any, Any]:
    """The agent loop as 0.3.5's gateway composes it; its provider is never called."""
    from nanobot.agent.loop import AgentLoop
    from nanobot.agent.model_presets import load_model_preset_catalog
    from nanobot.agent.tools.mcp import MCPProvider
    from nanobot.agent.tools.registry import ToolRegistry
    from nanobot.bus.queue import MessageBus
    from nanobot.cron.service import CronService
    from nanobot.providers.factory import (
        build_provider_snapshot,
        build_unconfigured_provider_snapshot,
    )
    from nanobot.providers.image_generation import image_gen_provider_configs
    from nanobot.session.manager import SessionManager
    from nanobot.triggers.local_store import LocalTriggerStore

    try:
        snapshot = build_provider_snapshot(config)
    except ValueError as exc:
        snapshot = build_unconfigured_provider_snapshot(config, str(exc))
    tools = ToolRegistry()
    mcp = MCPProvider.from_config(config, tools)
    agent = AgentLoop.from_config(
        config,
        MessageBus(),
        provider=snapshot.provider,
        model=snapshot.model,
        context_window_tokens=snapshot.context_window_tokens,
        cron_service=CronService(workspace / "cron" / "jobs.json"),
        session_manager=SessionManager(scratch / "workspace", sessions_root=scratch / "sessions"),
        image_generation_provider_configs=image_gen_provider_configs(config),
        provider_snapshot_loader=_snapshot_loader(config),
        preset_catalog_loader=load_model_preset_catalog,
        provider_signature=snapshot.signature,
        local_trigger_store=LocalTriggerStore(workspace),
        tool_registry=tools,
    )
    return agent, mcp


def _labels(context: Any, root: Path, workspace: Path) -> list[tuple[str, bool]]:
    """(name, inferred) of each part 0.3.5 puts in this workspace's prompt, in its order."""
    labels = [("identity", True)]
    if context._load_bootstrap_files(root):
        labels.append(("bootstrap", False))
    labels.append(("tool contract", False))
    if root.expanduser().resolve() != workspace.expanduser().resolve():
        labels.append(("project", False))
    memory = context.memory.read_memory()
    if memory and not context._is_template_content(memory, "memory/MEMORY.md"):
        labels.append(("memory", False))
    always = context.skills.get_always_skills()
    if always and context.skills.load_skills_for_context(always):
        labels.append(("active skills", True))
    if context.skills.build_skills_summary(exclude=set(always), workspace=root):
        labels.append(("skills summary", True))
    return labels


def _system(context: Any, channel: str | None, root: Path, workspace: Path) -> dict[str, Any]:
    """The system prompt, its parts (checked against it) and the archived-summary part."""
    from nanobot.utils.prompt_templates import render_template

    code = context.build_system_prompt.__code__
    text, parts = captured_parts(
        lambda: context.build_system_prompt(channel=channel, workspace=root), code
    )
    labels = _labels(context, root, workspace)
    if len(labels) != len(parts):
        raise ProbeError(f"expected parts {[n for n, _ in labels]}, the release built {len(parts)}")
    checks = {
        "identity": context._get_identity(channel=channel, workspace=root),
        "bootstrap": context._load_bootstrap_files(root),
        "tool contract": render_template("agent/tool_contract.md"),
    }
    system = []
    for (name, inferred), part in zip(labels, parts, strict=True):
        if name in checks and checks[name] != part:
            raise ProbeError(f"the {name} part is not what the release renders for it")
        entry: dict[str, Any] = {"part": name, "text": part, "inferred": inferred}
        if name == "bootstrap":
            entry["files"] = bootstrap_files(context, root, part)
            entry["separator"] = "\n\n"
        system.append(entry)
    summary = {"text": SENTINEL.format("text"), "last_active": SENTINEL.format("last_active")}
    summarised, with_summary = captured_parts(
        lambda: context.build_system_prompt(
            channel=channel, workspace=root, session_summary=summary
        ),
        code,
    )
    if with_summary[:-1] != parts or len(with_summary) != len(parts) + 1:
        raise ProbeError("the archived summary did not come as one part after the others")
    joiner = summarised[len(text) : len(summarised) - len(with_summary[-1])]
    if joiner.join(parts) != text or text + joiner + with_summary[-1] != summarised:
        raise ProbeError("the parts do not join to the system prompt")
    return {
        "system": system,
        "joiner": joiner,
        "system_text": text,
        "summary": with_summary[-1],
        "summary_skipped": _skipped_summary(context, channel, root, text),
    }


def _skipped_summary(context: Any, channel: str | None, root: Path, text: str) -> str:
    """The summary text the prompt leaves out (the archive's "nothing to keep" answer): the one
    text constant of ``build_system_prompt`` that, as a summary, adds no part."""
    found = [
        const
        for const in context.build_system_prompt.__code__.co_consts
        if isinstance(const, str)
        and const.strip()
        and context.build_system_prompt(
            channel=channel,
            workspace=root,
            session_summary={"text": const, "last_active": SENTINEL.format("last_active")},
        )
        == text
    ]
    if len(found) != 1:
        raise ProbeError(f"expected one summary text the prompt skips, found {len(found)}")
    return found[0]


def _loop_texts(agent: Any, root: Path) -> dict[str, Any]:
    """What 0.3.5's loop clean-up inserts or recognises, and its tool-result limit."""
    from nanobot.agent import context_governance as governance
    from nanobot.session.summary import SUMMARY_CONTINUATION_TEXT
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
        "tool_results_root": str((root / helpers._TOOL_RESULTS_DIR).resolve()),
        "preview_chars": helpers._TOOL_RESULT_PREVIEW_CHARS,
        "offload_exempt_tools": sorted(governance.TOOL_RESULT_OFFLOAD_EXEMPT_TOOLS),
        "placeholder_assistant": sorted(governance.PLACEHOLDER_TEXTS),
        "backfill": governance.BACKFILL_CONTENT,
        "continuation": SUMMARY_CONTINUATION_TEXT,
        "empty_tool_result": empty_tool_result_message(SENTINEL.format("name")),
        "tool_result_reference": reference(False),
        "tool_result_reference_cut": reference(True),
        "tool_result_too_long": helpers._render_tool_result_reference(
            SENTINEL.format("path"),
            original_size=0,
            preview="",
            truncated_preview=False,
            max_chars=1,
        ),
    }


def _wire_texts() -> dict[str, str]:
    """What 0.3.5's OpenAI-compatible clean-up inserts: the empty-content and lone-assistant
    stand-ins."""
    from nanobot.providers import base

    empty = base.LLMProvider._sanitize_empty_content([{"role": "user", "content": ""}])
    return {"empty_content": empty[0]["content"], "synthetic_user": base._SYNTHETIC_USER_CONTENT}


def build_kit(request: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """The kit of one (workspace, config, channel, runtime) as 0.3.5 renders it."""
    from importlib.metadata import version

    workspace = Path(request["workspace"])
    runtime = dict(request.get("runtime") or {})
    apply_runtime(runtime)
    config = _config(request.get("config"), workspace, runtime)
    agent, mcp = _agent(config, workspace, scratch)
    root = Path(request.get("project") or workspace)
    channel = request.get("channel")
    context = agent.context
    kit: dict[str, Any] = {"nanobot": version("nanobot-ai")}
    kit.update(_system(context, channel, root, workspace))
    kit["current"] = context.build_current_message(SENTINEL.format("text"))
    kit["sentinels"] = ["text"]
    kit["tools"] = agent.tools.get_definitions()
    kit["loop"] = _loop_texts(agent, root)
    kit["wire"] = _wire_texts()
    kit["runtime"] = {
        "system": platform.system(),
        "machine": platform.machine(),
        "python_version": platform.python_version(),
        "timezone": config.agents.defaults.timezone,
        "path": os.environ.get("PATH", ""),
        "mcp_servers_not_connected": sorted(mcp.configured_server_names),
    }
    return kit


def _answer(request: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """The kit, built with no folder left behind."""
    with no_new_folders():
        return build_kit(request, scratch)


if __name__ == "__main__":
    serve("probe_035", RELEASE, _answer)
