"""Continue a fork with nanobot 0.2.2's or 0.3.0's own loop in a private copy (stdlib + nanobot).

Runs INSIDE the 0.2.2 or 0.3.0 release venv (``<release python> -I continue_022.py``; both
build ``nanobot agent`` from the same parts), with the stdin and stdout of
``continue_035.py`` (whose socket audit hook and call budget it loads from
beside itself: ``-I`` puts no script folder on ``sys.path``).

The loop is built as ``nanobot agent`` builds it (its ``_load_runtime_config`` with the
copy's config and workspace, ``sync_workspace_templates``, the workspace's cron store,
``AgentLoop.from_config`` with image-generation providers), on a provider from the release's
``make_provider`` whose ``chat``/``chat_stream`` the budget wraps (past ``max_calls`` the
release records a failed call; no request leaves).  Each turn is one
``AgentLoop.process_direct`` on the session's channel and chat id, as ``nanobot agent -m``
runs it; its replies are what the loop put on the bus for the channel (progress and retry
notices left out), then its answer.
Background work (consolidation) is awaited by ``close_mcp`` before the process ends.
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from typing import Any

_SHARED = Path(__file__).with_name("continue_035.py")
_TRACE = ("_progress", "_retry_wait", "_stream_delta", "_stream_end")
"""Flags of 0.2.2's bus messages that report progress to a channel rather than say something."""


def _shared() -> Any:
    """``continue_035``'s module (its process, ``run``, with the socket guard and call
    budget), loaded from its file."""
    spec = importlib.util.spec_from_file_location("sessionkit_continue_035", _SHARED)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {_SHARED}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _drive(request: dict[str, Any], budget: Any) -> list[dict[str, Any]]:
    from nanobot.agent.loop import AgentLoop
    from nanobot.bus.queue import MessageBus
    from nanobot.cli.commands import _load_runtime_config
    from nanobot.cron.service import CronService
    from nanobot.providers.factory import make_provider
    from nanobot.providers.image_generation import image_gen_provider_configs
    from nanobot.utils.helpers import sync_workspace_templates

    config = _load_runtime_config(request["config"], request["workspace"])
    sync_workspace_templates(config.workspace_path)
    bus = MessageBus()
    provider = make_provider(config)
    budget.wrap(provider)
    agent = AgentLoop.from_config(
        config,
        bus,
        provider=provider,
        cron_service=CronService(config.workspace_path / "cron" / "jobs.json"),
        image_generation_provider_configs=image_gen_provider_configs(config),
    )
    key = request["session"]
    channel, chat_id = key.split(":", 1)
    done: list[dict[str, Any]] = []
    try:
        for text in request["turns"]:
            if budget.calls >= budget.limit:
                break
            answer = await asyncio.wait_for(
                agent.process_direct(text, session_key=key, channel=channel, chat_id=chat_id),
                timeout=request["timeout"],
            )
            replies = []
            while bus.outbound_size:
                out = await bus.consume_outbound()
                said = getattr(out, "event", None) is None  # 0.3.0: progress is an event
                if said and out.content and not any(out.metadata.get(f) for f in _TRACE):
                    replies.append(out.content)
            if answer is not None and answer.content:
                replies.append(answer.content)
            done.append({"text": text, "outcome": None, "replies": replies})
    finally:
        await agent.close_mcp()
    return done


if __name__ == "__main__":
    _shared().run(_drive)
