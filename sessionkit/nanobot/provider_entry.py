"""Where a nanobot config sends its model's calls: the provider entry nanobot 0.3.5 chooses
(:func:`~sessionkit.nanobot.prompt_cache_035.configured_provider`), its base URL and key, and
the request parameters its agent defaults set (``config/schema.py``, ``config/loader.py``,
``providers/registry.py``).  Reads only; never prints a key."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sessionkit.nanobot.prompt_cache_035 import configured_provider, family_of

__all__ = ["ProviderEntry", "provider_entry"]

_REGISTRY = {
    "openai": ("OPENAI_API_KEY", "https://api.openai.com/v1"),
    "openrouter": ("OPENROUTER_API_KEY", "https://openrouter.ai/api/v1"),
    "deepseek": ("DEEPSEEK_API_KEY", "https://api.deepseek.com"),
    "gemini": ("GEMINI_API_KEY", "https://generativelanguage.googleapis.com/v1beta/openai/"),
    "moonshot": ("MOONSHOT_API_KEY", "https://api.moonshot.ai/v1"),
    "dashscope": ("DASHSCOPE_API_KEY", "https://dashscope.aliyuncs.com/compatible-mode/v1"),
    "zhipu": ("ZAI_API_KEY", "https://open.bigmodel.cn/api/paas/v4"),
    "minimax": ("MINIMAX_API_KEY", "https://api.minimax.io/v1"),
    "siliconflow": ("OPENAI_API_KEY", "https://api.siliconflow.cn/v1"),
    "huggingface": ("HF_TOKEN", "https://router.huggingface.co/v1"),
    "anthropic": ("ANTHROPIC_API_KEY", "https://api.anthropic.com"),
    "kimi_coding": ("KIMI_CODING_API_KEY", "https://api.kimi.com/coding/v1"),
    "minimax_anthropic": ("MINIMAX_API_KEY", "https://api.minimax.io/anthropic"),
}
"""0.3.5's registry: each provider's key variable and default base URL (Anthropic's own: the
one its SDK takes when nanobot names none)."""
_DEFAULT_MAX_TOKENS = 8192
_DEFAULT_TEMPERATURE = 0.1
"""0.3.5's ``AgentDefaults``."""
_NO_TEMPERATURE = ("gpt-5", "o1", "o3", "o4")
"""Model-name parts whose requests carry no ``temperature`` (nor does a request with a
reasoning effort)."""
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class ProviderEntry:
    """The provider a config runs its default model with: name, wire family, base URL (None:
    neither the entry nor the registry names one), key (never in the repr) and where it
    came from, the request parameters in the order nanobot's OpenAI-compatible provider sends
    them, and the parameters its agent hands every provider (which Anthropic's own turns into
    its body, :mod:`~sessionkit.nanobot.anthropic_wire_035`)."""

    name: str | None
    family: str
    model: str | None
    api_base: str | None
    key: str | None = field(repr=False)
    key_source: str
    params: dict[str, Any]
    agent_params: dict[str, Any] = field(default_factory=dict)


def _get(entry: Mapping[str, Any], camel: str, snake: str) -> Any:
    return entry.get(camel, entry.get(snake))


def _expanded(value: Any) -> str | None:
    """A config string with its ``${VAR}`` references resolved from the environment (None
    when one is unset, as nanobot then leaves the provider without a key)."""
    if not isinstance(value, str) or not value:
        return None
    names = _ENV_REF.findall(value)
    if any(name not in os.environ for name in names):
        return None
    return _ENV_REF.sub(lambda m: os.environ[m.group(1)], value)


def _agent_params(defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``temperature``, ``max_tokens`` and ``reasoning_effort`` (when set) as the agent hands
    them to its provider."""
    effort = _get(defaults, "reasoningEffort", "reasoning_effort")
    temperature = defaults.get("temperature", _DEFAULT_TEMPERATURE)
    max_tokens = _get(defaults, "maxTokens", "max_tokens") or _DEFAULT_MAX_TOKENS
    given = {"temperature": temperature, "max_tokens": int(max_tokens)}
    return given | ({"reasoning_effort": effort} if isinstance(effort, str) else {})


def _params(defaults: Mapping[str, Any], model: str | None) -> dict[str, Any]:
    """``temperature``, ``max_tokens`` and ``reasoning_effort`` as the agent defaults set them."""
    effort = _get(defaults, "reasoningEffort", "reasoning_effort")
    temperature = defaults.get("temperature", _DEFAULT_TEMPERATURE)
    max_tokens = _get(defaults, "maxTokens", "max_tokens") or _DEFAULT_MAX_TOKENS
    params: dict[str, Any] = {}
    reasons = isinstance(effort, str) and effort.lower() != "none"
    if not (reasons or any(p in (model or "").lower() for p in _NO_TEMPERATURE)):
        params["temperature"] = temperature
    params["max_tokens"] = max(1, int(max_tokens))
    if reasons:
        params["reasoning_effort"] = effort
    return params


def provider_entry(config: Mapping[str, Any]) -> ProviderEntry:
    """The provider entry of a parsed config file: its ``apiBase`` (else the registry's
    default), its ``apiKey`` (``${VAR}`` resolved) or else the registry's key variable."""
    name, model = configured_provider(config)
    providers = config.get("providers")
    entries = {
        str(k).replace("-", "_").lower(): v
        for k, v in (providers.items() if isinstance(providers, Mapping) else ())
    }
    found = entries.get(name or "")
    entry: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    variable, default_base = _REGISTRY.get(name or "", ("", None))
    base = _expanded(_get(entry, "apiBase", "api_base")) or default_base
    key, source = _expanded(_get(entry, "apiKey", "api_key")), "config"
    if key is None and variable and os.environ.get(variable):
        key, source = os.environ[variable], f"${variable}"
    agents = config.get("agents")
    defaults = agents.get("defaults") if isinstance(agents, Mapping) else None
    defaults = defaults if isinstance(defaults, Mapping) else {}
    return ProviderEntry(
        name=name,
        family=family_of(name, model),
        model=model,
        api_base=base,
        key=key,
        key_source=source if key is not None else "none",
        params=_params(defaults, model),
        agent_params=_agent_params(defaults),
    )
