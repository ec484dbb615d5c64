"""Where an experiment sends its requests: the endpoint, key, model and parameters of the
workspace's nanobot config, or the ones given; in the wire form the config's provider speaks
(an OpenAI-compatible ``chat/completions`` endpoint, or Anthropic's own Messages API)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sessionkit.nanobot.provider_entry import ProviderEntry, provider_entry

__all__ = ["ANTHROPIC_VERSION", "WIRES", "Target", "target"]

WIRES = ("openai", "anthropic")
"""The wire forms an experiment sends in: OpenAI-compatible chat completions, or Anthropic's
Messages API as nanobot 0.3.5's native provider sends it."""
ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header the Anthropic SDK 0.3.5 uses sends."""


@dataclass(frozen=True)
class Target:
    """The URL requests are posted to, its host, the default model, the request parameters,
    the provider genai-prices prices it at, the key (never in the repr) and the wire form."""

    url: str
    host: str
    model: str | None
    params: dict[str, Any]
    provider: str | None
    key: str | None = field(repr=False)
    wire: str = "openai"

    def headers(self) -> dict[str, str]:
        """The HTTP headers of every request: the key as a bearer token (OpenAI-compatible)
        or as ``x-api-key`` with the API version (Anthropic), when there is one."""
        headers = {"Content-Type": "application/json"}
        if self.wire == "anthropic":
            if self.key:
                headers["x-api-key"] = self.key
            headers["anthropic-version"] = ANTHROPIC_VERSION
        elif self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        return headers


def _entry(config: Path | None) -> ProviderEntry | None:
    if config is None:
        return None
    try:
        parsed = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the nanobot config {config}: {exc}") from None
    return provider_entry(parsed if isinstance(parsed, Mapping) else {})


def target(
    config: Path | None,
    endpoint: str | None,
    api_key: str | None,
    params: Mapping[str, Any] | None,
) -> Target:
    """The target of an experiment: ``endpoint`` (an OpenAI-compatible base URL ending in
    ``/v1`` or so), ``api_key`` and ``params`` where given, else what ``config`` (a nanobot
    config file) names (without one, nanobot's default parameters); refused, naming what to
    pass, when no endpoint is known.  The provider priced is the config's, unless
    ``endpoint`` is given.  A config whose provider speaks Anthropic's own API (as 0.3.5
    chooses it) is asked there: ``<base>/v1/messages``, the base without a trailing
    ``/v1`` as the Anthropic SDK takes it."""
    entry = _entry(config)
    provider = None
    if endpoint is None:
        if entry is None:
            raise ValueError(
                "no nanobot config found to send the requests with: pass endpoint= (an "
                "OpenAI-compatible base URL such as 'http://127.0.0.1:8000/v1') or config_dir="
            )
        if entry.api_base is None:
            raise ValueError(
                f"provider {entry.name!r} of {config} names no base URL sessionkit knows: "
                "pass endpoint="
            )
        endpoint, provider = entry.api_base, entry.name if entry.name != "custom" else None
        wire = "anthropic" if entry.family == "anthropic" else "openai"
    else:
        wire = "openai"
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"endpoint must be an http(s) base URL, not {endpoint!r}")
    key = api_key if api_key is not None else (entry.key if entry is not None else None)
    found = entry or provider_entry({})
    chosen = dict(found.agent_params if wire == "anthropic" else found.params)
    chosen.update(params or {})
    base = endpoint.rstrip("/")
    if wire == "anthropic":
        url = base.removesuffix("/v1") + "/v1/messages"
    else:
        url = base + "/chat/completions"
    return Target(
        url=url,
        host=parts.netloc.rsplit("@", 1)[-1],
        model=entry.model if entry is not None else None,
        params=chosen,
        provider=provider,
        key=key,
        wire=wire,
    )
