"""nanobot 0.3.5's prompt-cache wire: which form a config's provider and model are sent in, and
where the release puts ``cache_control`` markers (``providers/anthropic_provider.py`` and
``providers/openai_compat_provider.py``, ``_apply_cache_control``; ``providers/base.py``,
``_tool_cache_marker_indices``; the provider chosen as ``config/schema.py``'s
``_match_provider`` chooses it).

Families: ``"anthropic"`` (the native Messages API, markers always), ``"openai-marked"`` (an
OpenAI-compatible gateway whose spec ``supports_prompt_caching``, markers for Claude models
only) and ``"openai"`` (no markers: the provider's automatic prefix cache).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FAMILIES",
    "Markers",
    "anthropic_markers",
    "configured_provider",
    "family_of",
    "marks_second_to_last",
    "openai_markers",
    "tool_markers",
]

FAMILIES = ("openai", "openai-marked", "anthropic")

_ANTHROPIC_BACKEND = ("anthropic", "kimi_coding", "minimax_anthropic")
"""Registry names whose spec's backend is ``"anthropic"``."""
_MARKING_GATEWAYS = ("openrouter",)
"""OpenAI-compatible registry names whose spec ``supports_prompt_caching``."""
_KEYWORDS = {
    "anthropic": ("anthropic", "claude"),
    "openrouter": ("openrouter",),
    "kimi_coding": ("kimi-coding", "kimi_coding", "kimi-for-coding"),
    "minimax_anthropic": ("minimax_anthropic",),
}
"""Model-name keywords of the specs whose wire form is not plain OpenAI-compatible."""
_MESSAGE_MARKER_FROM = 3
"""The second-to-last message is marked once a request holds this many messages."""


def family_of(provider: str | None, model: str | None) -> str:
    """The wire family nanobot 0.3.5 sends ``model`` to ``provider`` (a registry name) in."""
    name = (provider or "").replace("-", "_").lower()
    if name in _ANTHROPIC_BACKEND:
        return "anthropic"
    claude = (model or "").lower().startswith(("anthropic/", "claude"))
    return "openai-marked" if name in _MARKING_GATEWAYS and claude else "openai"


def _keyed(entry: Any) -> bool:
    return isinstance(entry, Mapping) and bool(entry.get("apiKey") or entry.get("api_key"))


def configured_provider(config: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The provider (registry or custom name; None: none matches) and model a config file's
    default agent runs with: the forced provider, else the one the model's ``prefix/`` names,
    else one whose keywords the model holds and that has a key, else the first with a key."""
    agents = config.get("agents")
    defaults = agents.get("defaults") if isinstance(agents, Mapping) else None
    defaults = defaults if isinstance(defaults, Mapping) else {}
    model = defaults.get("model") if isinstance(defaults.get("model"), str) else None
    forced = defaults.get("provider") or "auto"
    found = config.get("providers")
    providers = {
        str(k).replace("-", "_").lower(): v
        for k, v in (found.items() if isinstance(found, Mapping) else ())
    }
    if forced != "auto":
        name = str(forced).replace("-", "_").lower()
        return (name if name in providers else None), model
    lowered = (model or "").lower()
    prefix = lowered.split("/", 1)[0].replace("-", "_") if "/" in lowered else ""
    if prefix and prefix in providers:
        return prefix, model
    for name, keywords in _KEYWORDS.items():
        if _keyed(providers.get(name)) and any(k in lowered for k in keywords):
            return name, model
    return next((n for n, p in providers.items() if _keyed(p)), None), model


@dataclass(frozen=True)
class Markers:
    """Where a request carries ``cache_control``: the system prompt, a message (its index in
    the list the provider sends, None: none) and tools (indices)."""

    system: bool
    message: int | None
    tools: tuple[int, ...]


def _tool_name(tool: Mapping[str, Any]) -> str:
    name = tool.get("name")
    if isinstance(name, str):
        return name
    function = tool.get("function")
    found = function.get("name") if isinstance(function, Mapping) else None
    return found if isinstance(found, str) else ""


def tool_markers(tools: Sequence[Mapping[str, Any]]) -> tuple[int, ...]:
    """The marked tools: the last built-in one (before the ``mcp_`` tools) and the last."""
    if not tools:
        return ()
    last = len(tools) - 1
    builtin = next(
        (i for i in range(last, -1, -1) if not _tool_name(tools[i]).startswith("mcp_")), None
    )
    return tuple(dict.fromkeys(i for i in (builtin, last) if i is not None))


def _markable(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, str) or (isinstance(content, list) and bool(content))


def anthropic_markers(
    system: str | Sequence[Any], messages: Sequence[Mapping[str, Any]], tools: Sequence[Any]
) -> Markers:
    """The native Messages API request's markers (``system`` and ``messages`` as converted)."""
    at = len(messages) - 2
    message = at if len(messages) >= _MESSAGE_MARKER_FROM and _markable(messages[at]) else None
    return Markers(bool(system), message, tool_markers(tools))


def openai_markers(messages: Sequence[Mapping[str, Any]], tools: Sequence[Any]) -> Markers:
    """An OpenAI-compatible request's markers (``messages`` with the system prompt first) for a
    gateway that caches and a Claude model."""
    system = bool(messages) and messages[0].get("role") == "system" and _markable(messages[0])
    at = len(messages) - 2
    message = at if len(messages) >= _MESSAGE_MARKER_FROM and _markable(messages[at]) else None
    return Markers(system, message, tool_markers(tools))


def marks_second_to_last(n_messages: Any) -> Any:
    """Whether a request of ``n_messages`` messages (a number or an array) marks its
    second-to-last one."""
    return n_messages >= _MESSAGE_MARKER_FROM
