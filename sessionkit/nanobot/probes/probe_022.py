"""nanobot 0.2.2's kit, asked from the release itself: ``<python> -I probe_022.py``.

Reads ``{"workspace", "config", "channel", "runtime"}`` as JSON on stdin and writes the kit
(system prompt parts, current-message templates, tools, the loop's settings and the short
texts its clean-up inserts) as JSON on stdout.  Runs inside the release's interpreter and
imports only the standard library and nanobot: the agent loop is built the way
``nanobot agent`` builds it, with a provider that is never called, and every text comes
from the release's own builders.  Per-request values are left as sentinels
(``"\\u0000SK:<name>\\u0000"``).  The empty folders the release creates while it is built
(``memory/``, ``sessions/``, ``~/.nanobot/cli-apps`` ...) are removed again, so the
workspace is only read.  Any failed self-check exits non-zero with a message on stderr.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import io
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

PROBE_RUNTIME_KEYS = (
    "system",
    "machine",
    "python_version",
    "timezone",
    "path",
    "chat_id",
    "sender_id",
    "session_key",
)
_PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


class ProbeError(RuntimeError):
    """A self-check failed: the kit would not reproduce the release."""


def sentinel(name: str) -> str:
    """The placeholder a per-request value leaves in a template."""
    return f"\u0000SK:{name}\u0000"


class _Formatted:
    """Formats as a sentinel wherever the release formats a number or date."""

    def __init__(self, name: str) -> None:
        self.text = sentinel(name)

    def __format__(self, spec: str) -> str:
        return self.text

    def isoformat(self) -> str:
        return self.text


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise ProbeError(what)


def _local_zone() -> str | None:
    """The IANA name of this process's local time zone, when it can be told."""
    candidates: list[str] = []
    tz = os.environ.get("TZ")
    if tz:
        candidates.append(tz[1:] if tz.startswith(":") else tz)
    with contextlib.suppress(OSError):
        link = os.readlink("/etc/localtime")
        if "zoneinfo/" in link:
            candidates.append(link.split("zoneinfo/", 1)[1])
    with contextlib.suppress(OSError):
        candidates.append(Path("/etc/timezone").read_text(encoding="utf-8").strip())
    now = datetime.now().astimezone()
    for name in candidates:
        try:
            zone = ZoneInfo(name)
        except Exception:
            continue
        if now.astimezone(zone).utcoffset() == now.utcoffset():
            return name
    return None


def _apply_process_overrides(runtime: dict[str, Any]) -> None:
    """Make this process look like the one that wrote the session (before nanobot loads)."""
    if runtime.get("timezone"):
        os.environ["TZ"] = str(runtime["timezone"])
        time.tzset()
    if runtime.get("path") is not None:
        os.environ["PATH"] = str(runtime["path"])
    for key, attribute in (
        ("system", "system"),
        ("machine", "machine"),
        ("python_version", "python_version"),
    ):
        if runtime.get(key):
            value = str(runtime[key])
            setattr(platform, attribute, lambda value=value: value)


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name = value`` for the duration of the block."""
    missing = object()
    old = owner.__dict__.get(name, missing) if hasattr(owner, "__dict__") else missing
    setattr(owner, name, value)
    try:
        yield
    finally:
        if old is missing:
            delattr(owner, name)
        else:
            setattr(owner, name, old)


@contextlib.contextmanager
def _only_reads(paths: list[Path]) -> Iterator[None]:
    """Remove again each of ``paths`` (children first) that the block created empty."""
    existed = {path: path.exists() for path in paths}
    try:
        yield
    finally:
        for path in paths:
            if not existed[path] and path.is_dir() and not any(path.iterdir()):
                path.rmdir()


def _load_config(config: str | None, workspace: str, scratch: Path) -> Any:
    from nanobot.config.loader import load_config, resolve_config_env_vars, set_config_path

    if config:
        path = Path(config).expanduser().resolve()
        _check(path.exists(), f"config file not found: {path}")
        set_config_path(path)
    else:
        path = scratch / "no-config.json"
    loaded = resolve_config_env_vars(load_config(path))
    loaded.agents.defaults.workspace = workspace
    return loaded


def _build_loop(config: Any, channel: str) -> Any:
    """The agent loop as ``nanobot agent`` and the gateway build it (``nanobot serve``, the
    ``api`` channel, without the cron service), with a provider that is never called."""
    from nanobot.agent.loop import AgentLoop
    from nanobot.bus.queue import MessageBus
    from nanobot.cron.service import CronService
    from nanobot.providers.base import LLMProvider
    from nanobot.providers.image_generation import image_gen_provider_configs

    resolved = config.resolve_preset()

    class SilentProvider(LLMProvider):
        async def chat(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("the probe's provider is never called")

        def get_default_model(self) -> str:
            return resolved.model

    provider = SilentProvider()
    provider.generation = resolved.to_generation_settings()
    cron = None if channel == "api" else CronService(config.workspace_path / "cron" / "jobs.json")
    return AgentLoop.from_config(
        config,
        MessageBus(),
        provider=provider,
        cron_service=cron,
        image_generation_provider_configs=image_gen_provider_configs(config),
    )


def _read_skills_once(skills: Any) -> None:
    """Parse each skill's front matter once per probe (the prompt is built a dozen times
    here; the files do not change meanwhile)."""
    read = skills.get_skill_metadata
    parsed: dict[str, Any] = {}

    def remembered(name: str) -> Any:
        if name not in parsed:
            parsed[name] = read(name)
        return copy.deepcopy(parsed[name])

    skills.get_skill_metadata = remembered


def _split_system(
    build: Callable[..., str], loop: Any, channel: str, root: Path
) -> tuple[list[dict[str, Any]], str, str]:
    """The system prompt's parts in the release's order, each text cut from the release's
    own prompt (an optional part is what disappears when its source is emptied)."""
    from nanobot.agent import context as context_module

    builder = loop.context
    full = build()
    identity = builder._get_identity(channel=channel, workspace=root)
    bootstrap = builder._load_bootstrap_files(root)
    contract = context_module.render_template("agent/tool_contract.md")
    _check(full.startswith(identity), "the system prompt does not start with the identity")
    following = bootstrap or contract
    joiner = full[len(identity) : full.index(following, len(identity))]
    _check(bool(joiner), "no joiner between identity and the next part")
    parts = [{"part": "identity", "text": identity, "inferred": True}]

    def fixed(name: str, text: str, **extra: Any) -> None:
        prefix = joiner.join(p["text"] for p in parts)
        _check(full.startswith(prefix + joiner + text), f"part {name!r} not where expected")
        parts.append({"part": name, "text": text, "inferred": False, **extra})

    def optional(name: str, inferred: bool, ablated: str) -> None:
        if ablated == full:
            return
        prefix = joiner.join(p["text"] for p in parts)
        start = len(prefix) + len(joiner)
        text = full[start : start + len(full) - len(ablated) - len(joiner)]
        _check(full == prefix + joiner + text + ablated[len(prefix) :], f"cannot cut {name!r}")
        parts.append({"part": name, "text": text, "inferred": inferred})

    if bootstrap:
        files = [name for name in builder.BOOTSTRAP_FILES if (root / name).exists()]
        fixed("bootstrap", bootstrap, files=files)
    fixed("tool contract", contract)
    with _patched(builder.memory, "get_memory_context", lambda: ""):
        optional("memory", False, build())
    with _patched(builder.skills, "load_skills_for_context", lambda names: ""):
        optional("active skills", True, build())
    with _patched(builder.skills, "build_skills_summary", lambda exclude=None: ""):
        optional("skills summary", True, build())
    optional("recent history", False, build(include_memory_recent_history=False))
    _check(joiner.join(p["text"] for p in parts) == full, "the parts do not join to the prompt")
    return parts, joiner, full


def _current_templates(
    loop: Any, channel: str, session: Any, scratch: Path, system_text: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The current message as the loop builds it, text-only and with one image."""
    from nanobot.agent import context as context_module
    from nanobot.bus.events import InboundMessage

    def build(media: list[str]) -> dict[str, Any]:
        message = InboundMessage(
            channel=channel,
            sender_id=sentinel("sender_id"),
            chat_id=sentinel("chat_id"),
            content=sentinel("text"),
            media=media,
        )
        clock = lambda timezone=None: sentinel("time")  # noqa: E731
        with _patched(context_module, "current_time_str", clock):
            initial = loop._build_initial_messages(message, session, [], None)
        _check(len(initial) == 2, "the loop's first messages are not [system, current]")
        _check(initial[0]["content"] == system_text, "the loop's system prompt differs")
        return initial[1]

    current = build([])
    image = scratch / "probe.png"
    image.write_bytes(_PNG)
    with_image = build([str(image)])
    blocks = with_image["content"]
    _check(isinstance(blocks, list) and len(blocks) == 3, "unexpected image message shape")
    url = blocks[0]["image_url"]["url"]
    _check(url.endswith(base64.b64encode(_PNG).decode()), "image block without the bytes")
    _check(blocks[0]["_meta"] == {"path": str(image)}, "image block without its path")
    blocks[0]["image_url"]["url"] = sentinel("image_url")
    blocks[0]["_meta"]["path"] = sentinel("image_path")
    return current, with_image


def _summary_template(build: Callable[..., str], system_text: str, joiner: str) -> str:
    """The archived-summary part, as AutoCompact formats a stored summary."""
    from nanobot.agent.autocompact import AutoCompact

    stored = AutoCompact._format_summary(sentinel("text"), _Formatted("last_active"))
    with_summary = build(session_summary=stored)
    _check(with_summary.startswith(system_text + joiner), "the summary is not the last part")
    return with_summary[len(system_text) + len(joiner) :]


def _markers() -> dict[str, str]:
    """The short texts the loop's and the provider's clean-up put into a request."""
    from nanobot.agent.runner import AgentRunner
    from nanobot.providers.base import LLMProvider
    from nanobot.utils import helpers
    from nanobot.utils.runtime import ensure_nonempty_tool_result

    call = {"id": "c", "type": "function", "function": {"name": "n", "arguments": "{}"}}
    backfilled = AgentRunner._backfill_missing_tool_results(
        [{"role": "assistant", "content": "", "tool_calls": [call]}]
    )
    alternated = LLMProvider._enforce_role_alternation(
        [
            {"role": "system", "content": "s"},
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": "u"},
        ]
    )
    _check(len(alternated) == 4 and alternated[1]["role"] == "user", "no synthetic user turn")
    compacted = {}
    for name in ("exec", "grep"):
        tools = [{"role": "tool", "name": name, "content": "x" * 4096} for _ in range(64)]
        text = AgentRunner._microcompact(tools)[0]["content"]
        _check(text.count(name) == 1, "compacted result does not name its tool once")
        compacted[name] = text.replace(name, sentinel("name"))
    _check(compacted["exec"] == compacted["grep"], "compacted text depends on the tool")

    def reference(more: bool) -> str:
        return helpers._render_tool_result_reference(
            Path(sentinel("path")),
            original_size=_Formatted("size"),
            preview=sentinel("preview"),
            truncated_preview=more,
        )

    return {
        "empty_content": LLMProvider._sanitize_empty_content([{"role": "user", "content": ""}])[0][
            "content"
        ],
        "synthetic_user": alternated[1]["content"],
        "backfilled_result": backfilled[1]["content"],
        "truncated_suffix": helpers.truncate_text("xx", 1)[1:],
        "empty_tool_result": ensure_nonempty_tool_result(sentinel("name"), ""),
        "compacted_result": compacted["exec"],
        "tool_reference": reference(False),
        "tool_reference_more": reference(True),
    }


def _settings(loop: Any, config: Any, root: Path) -> dict[str, Any]:
    """The loop's settings that shape a request (from the config, as the loop holds them)."""
    return {
        "max_tool_result_chars": loop.max_tool_result_chars,
        "context_window_tokens": loop.context_window_tokens,
        "context_block_limit": loop.context_block_limit,
        "max_tokens": loop.provider.generation.max_tokens,
        "max_messages": loop._max_messages,
        "history_max_tokens": loop._replay_token_budget(),
        "timezone": loop.context.timezone,
        "unified_session": loop._unified_session,
        "workspace": str(root),
        "model": loop.model,
        "provider": config.get_provider_name(loop.model),
    }


def _default_chat_id(channel: str) -> str:
    """The chat id ``nanobot agent -m`` (``direct``) or ``nanobot serve`` passes."""
    if channel == "api":
        from nanobot.api.server import API_CHAT_ID

        return API_CHAT_ID
    return "direct"


def kit(request: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """Ask the release for everything it sends besides the history."""
    import nanobot
    from loguru import logger
    from nanobot.session.manager import Session

    logger.remove()
    runtime = dict(request.get("runtime") or {})
    channel = request.get("channel") or "cli"
    session_key = runtime.get("session_key") or "cli:direct"
    config = _load_config(request.get("config"), request["workspace"], scratch)
    loop = _build_loop(config, channel)
    _read_skills_once(loop.context.skills)
    session = Session(key=session_key)
    root = loop.workspace_scopes.default().project_path

    def build(**kwargs: Any) -> str:
        return loop.context.build_system_prompt(
            None,
            channel=channel,
            workspace=root,
            session_key=session_key,
            unified_session=loop._unified_session,
            **kwargs,
        )

    parts, joiner, system_text = _split_system(build, loop, channel, root)
    current, current_media = _current_templates(loop, channel, session, scratch, system_text)
    tools = json.loads(json.dumps(loop.tools.get_definitions()))
    asyncio.run(loop.close_mcp())
    return {
        "nanobot": nanobot.__version__,
        "system": parts,
        "joiner": joiner,
        "system_text": system_text,
        "summary": _summary_template(build, system_text, joiner),
        "current": current,
        "current_media": current_media,
        "sentinels": ["text", "time", "chat_id", "sender_id", "last_active"],
        "tools": tools,
        "markers": _markers(),
        "settings": _settings(loop, config, root),
        "runtime": {
            "platform": sys.platform,
            "system": platform.system(),
            "machine": platform.machine(),
            "python_version": platform.python_version(),
            "timezone": _local_zone(),
            "path": os.environ.get("PATH", ""),
            "channel": channel,
            "chat_id": runtime.get("chat_id") or _default_chat_id(channel),
            "sender_id": runtime.get("sender_id") or "user",
            "session_key": session_key,
            "mcp_servers": sorted(config.tools.mcp_servers),
        },
    }


def main() -> int:
    request = json.loads(sys.stdin.read())
    unknown = set(request.get("runtime") or {}) - set(PROBE_RUNTIME_KEYS)
    if unknown:
        print(f"probe_022: unknown runtime keys {sorted(unknown)}", file=sys.stderr)
        return 2
    _apply_process_overrides(dict(request.get("runtime") or {}))
    workspace = Path(request["workspace"]).expanduser()
    home = Path.home() / ".nanobot"
    created = [workspace / name for name in ("memory", "sessions", "cron", ".nanobot")]
    created += [workspace, home / "cli-apps", home]
    stdout, sys.stdout = sys.stdout, io.StringIO()
    try:
        with tempfile.TemporaryDirectory() as folder, _only_reads(created):
            answer = kit(request, Path(folder))
    except ProbeError as error:
        print(f"probe_022: {error}", file=sys.stderr)
        return 1
    finally:
        sys.stdout = stdout
    json.dump(answer, sys.stdout, ensure_ascii=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
