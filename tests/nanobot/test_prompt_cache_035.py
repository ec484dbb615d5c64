"""nanobot 0.3.5's prompt-cache wire: the markers sessionkit places are where the release's own
``_apply_cache_control`` places them (native Anthropic and OpenAI-compatible gateways), on the
same messages and tools; the provider a config runs with as its ``_match_provider`` picks it."""

from __future__ import annotations

from typing import Any

import pytest
from support.releases import release

from sessionkit.nanobot.prompt_cache_035 import (
    Markers,
    anthropic_markers,
    configured_provider,
    family_of,
    openai_markers,
)

_CONTENTS: list[Any] = ["text", [{"type": "text", "text": "a"}], [], None, ""]
_TOOLS = [
    [],
    [{"name": "read_file"}],
    [{"name": "read_file"}, {"name": "mcp_fs_list"}],
    [{"name": "mcp_a"}, {"name": "mcp_b"}],
    [{"name": "exec"}, {"name": "mcp_a"}, {"name": "web"}],
]


def _cases() -> list[tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]]:
    """Systems, message lists of 0 to 5 messages with every content shape at the
    second-to-last place, and tool lists with and without MCP tools."""
    cases = []
    for n in range(6):
        for content in _CONTENTS:
            roles = ["user", "assistant"] * 3
            messages: list[dict[str, Any]] = [
                {"role": roles[i], "content": f"m{i}"} for i in range(n)
            ]
            if n >= 2:
                messages[-2] = {**messages[-2], "content": content}
            for tools in _TOOLS:
                for system in ("system prompt", "", [{"type": "text", "text": "s"}]):
                    cases.append((system, messages, tools))
    return cases


def _marked(item: Any) -> bool:
    content = item.get("content") if isinstance(item, dict) else None
    blocks = content if isinstance(content, list) else []
    return "cache_control" in item or any("cache_control" in b for b in blocks)


def _found(system: Any, messages: list[Any], tools: list[Any] | None) -> Markers:
    """Where a request the release returned carries ``cache_control`` (the system prompt
    apart: Anthropic's ``system``, or an OpenAI-compatible list's first message)."""
    if system is None:
        system = [messages[0]] if messages and messages[0].get("role") == "system" else []
        at = [i for i, m in enumerate(messages) if _marked(m) and not (i == 0 and system)]
        system_marked = bool(system) and _marked(system[0])
    else:
        at = [i for i, m in enumerate(messages) if _marked(m)]
        system_marked = isinstance(system, list) and any("cache_control" in b for b in system)
    assert len(at) <= 1
    return Markers(
        system_marked,
        at[0] if at else None,
        tuple(i for i, t in enumerate(tools or []) if "cache_control" in t),
    )


@pytest.mark.conformance
def test_anthropic_markers_are_the_releases() -> None:
    cases = _cases()
    results = release("0.3.5").run(
        "nanobot.providers.anthropic_provider:AnthropicProvider._apply_cache_control",
        [{"init": {"api_key": "sk-test"}, "args": [s, m, t], "state": False} for s, m, t in cases],
    )
    for (system, messages, tools), result in zip(cases, results, strict=True):
        assert "returned" in result, result
        got_system, got_messages, got_tools = result["returned"]
        assert _found(got_system, got_messages, got_tools) == anthropic_markers(
            system, messages, tools
        ), (system, messages, tools)


@pytest.mark.conformance
def test_gateway_markers_are_the_releases() -> None:
    cases = [
        ([{"role": "system", "content": s}, *m] if s != "" else m, t)
        for s, m, t in _cases()
        if isinstance(s, str)
    ]
    results = release("0.3.5").run(
        "nanobot.providers.openai_compat_provider:OpenAICompatProvider._apply_cache_control",
        [{"init": {"api_key": "sk-test"}, "args": [m, t], "state": False} for m, t in cases],
    )
    for (messages, tools), result in zip(cases, results, strict=True):
        assert "returned" in result, result
        got_messages, got_tools = result["returned"]
        found = _found(None, got_messages, got_tools)
        assert found == openai_markers(messages, tools), (messages, tools)


def test_the_configured_provider_and_its_family() -> None:
    keyed = {"apiKey": "k"}

    def config(model: str, provider: str = "auto", **providers: Any) -> dict[str, Any]:
        return {
            "agents": {"defaults": {"model": model, "provider": provider}},
            "providers": providers,
        }

    assert configured_provider(config("gpt-4o-mini", "custom", custom=keyed)) == (
        "custom",
        "gpt-4o-mini",
    )
    assert configured_provider(config("anthropic/claude-sonnet-4-5", anthropic=keyed))[0] == (
        "anthropic"
    )
    assert (
        configured_provider(config("claude-sonnet-4-5", openrouter=keyed, anthropic=keyed))[0]
        == "anthropic"
    )
    assert configured_provider(config("claude-sonnet-4-5", openrouter=keyed))[0] == "openrouter"
    assert configured_provider(config("gpt-4o", "deepseek"))[0] is None
    assert configured_provider({}) == (None, None)
    assert family_of("anthropic", "claude-sonnet-4-5") == "anthropic"
    assert family_of("minimax_anthropic", "MiniMax-M2") == "anthropic"
    assert family_of("openrouter", "anthropic/claude-sonnet-4-5") == "openai-marked"
    assert family_of("openrouter", "openai/gpt-4o") == "openai"
    assert family_of("custom", "claude-sonnet-4-5") == "openai"
    assert family_of(None, None) == "openai"
