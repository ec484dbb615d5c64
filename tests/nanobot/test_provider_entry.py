"""The provider entry a nanobot config runs its model with: base URL, key and where it came
from, and the request parameters of its agent defaults."""

from __future__ import annotations

import pytest

from sessionkit.nanobot.provider_entry import provider_entry


def test_the_key_comes_from_the_entry_its_variable_or_the_registrys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("UNSET_FOR_TEST", raising=False)
    monkeypatch.setenv("DEEPSEEK_API_KEY", "from-registry")
    monkeypatch.setenv("MY_KEY", "from-variable")
    config = {"agents": {"defaults": {"model": "deepseek-chat", "provider": "deepseek"}}}
    unset = provider_entry({**config, "providers": {"deepseek": {"apiKey": "${UNSET_FOR_TEST}"}}})
    assert (unset.key, unset.key_source) == ("from-registry", "$DEEPSEEK_API_KEY")
    assert unset.api_base == "https://api.deepseek.com"
    named = provider_entry({**config, "providers": {"deepseek": {"api_key": "${MY_KEY}"}}})
    assert (named.key, named.key_source) == ("from-variable", "config")
    monkeypatch.delenv("DEEPSEEK_API_KEY")
    none = provider_entry({**config, "providers": {"deepseek": {}}})
    assert (none.key, none.key_source, none.family) == (None, "none", "openai")
    assert "from-" not in repr(named)


def test_parameters_follow_the_agent_defaults() -> None:
    def params(defaults: dict[str, object]) -> dict[str, object]:
        return provider_entry({"agents": {"defaults": defaults}}).params

    assert params({}) == {"temperature": 0.1, "max_tokens": 8192}
    assert params({"model": "gpt-5-mini", "max_tokens": 0}) == {"max_tokens": 8192}
    assert params({"model": "o3", "reasoningEffort": "high"}) == {
        "max_tokens": 8192,
        "reasoning_effort": "high",
    }
    assert params({"temperature": 1.0, "maxTokens": 100, "reasoningEffort": "none"}) == {
        "temperature": 1.0,
        "max_tokens": 100,
    }


def test_the_agent_hands_every_provider_its_three_parameters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a native Anthropic provider turns into its body itself: temperature, max_tokens
    and any reasoning effort as set, whatever the model."""

    def agent(defaults: dict[str, object]) -> dict[str, object]:
        return provider_entry({"agents": {"defaults": defaults}}).agent_params

    assert agent({}) == {"temperature": 0.1, "max_tokens": 8192}
    assert agent({"model": "o3", "reasoningEffort": "none", "maxTokens": 100}) == {
        "temperature": 0.1,
        "max_tokens": 100,
        "reasoning_effort": "none",
    }
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-registry")
    native = provider_entry(
        {
            "agents": {
                "defaults": {
                    "model": "claude-opus-4-7",
                    "temperature": 0.5,
                    "provider": "anthropic",
                }
            },
            "providers": {"anthropic": {}},
        }
    )
    assert (native.name, native.family, native.api_base) == (
        "anthropic",
        "anthropic",
        "https://api.anthropic.com",
    )
    assert (native.key, native.key_source) == ("from-registry", "$ANTHROPIC_API_KEY")
    assert native.agent_params == {"temperature": 0.5, "max_tokens": 8192}
