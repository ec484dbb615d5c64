"""Where an experiment sends: the config's provider entry, or what is given; the key only in
the header."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessionkit.experiments.endpoint import target

SECRET = "sk-endpoint-test-SECRET"


def config(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def test_the_config_names_url_key_model_and_parameters(tmp_path: Path) -> None:
    found = target(
        config(
            tmp_path,
            {
                "agents": {"defaults": {"model": "m", "maxTokens": 512, "temperature": 0.7}},
                "providers": {"custom": {"apiKey": SECRET, "apiBase": "http://127.0.0.1:9/v1/"}},
            },
        ),
        None,
        None,
        {"temperature": 0.0},
    )
    assert found.url == "http://127.0.0.1:9/v1/chat/completions"
    assert (found.host, found.model, found.provider) == ("127.0.0.1:9", "m", None)
    assert found.params == {"temperature": 0.0, "max_tokens": 512}
    assert found.headers()["Authorization"] == f"Bearer {SECRET}"
    assert SECRET not in repr(found)


def test_a_registry_provider_takes_its_default_url_and_key_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", SECRET)
    path = config(
        tmp_path,
        {
            "agents": {"defaults": {"model": "openrouter/openai/gpt-5", "reasoningEffort": "low"}},
            "providers": {"openrouter": {"apiKey": "${OPENROUTER_API_KEY}"}},
        },
    )
    found = target(path, None, None, None)
    assert found.url == "https://openrouter.ai/api/v1/chat/completions"
    assert found.provider == "openrouter"
    assert found.params == {"max_tokens": 8192, "reasoning_effort": "low"}
    assert found.headers()["Authorization"] == f"Bearer {SECRET}"
    given = target(path, "http://127.0.0.1:8000/v1", "other", None)
    assert (given.host, given.provider) == ("127.0.0.1:8000", None)
    assert given.headers()["Authorization"] == "Bearer other"


def test_what_cannot_be_sent_to_is_refused_naming_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no nanobot config found .* pass endpoint="):
        target(None, None, None, None)
    anthropic = config(
        tmp_path,
        {
            "agents": {"defaults": {"model": "anthropic/claude-sonnet-4"}},
            "providers": {"anthropic": {"apiKey": SECRET}},
        },
    )
    native = target(anthropic, None, None, None)
    assert (native.url, native.wire) == ("https://api.anthropic.com/v1/messages", "anthropic")
    with pytest.raises(ValueError, match=r"endpoint must be an http\(s\) base URL"):
        target(None, "127.0.0.1:8000", None, None)
    nothing = target(None, "http://localhost:1/v1", None, None)
    assert "Authorization" not in nothing.headers()
    assert nothing.params == {"temperature": 0.1, "max_tokens": 8192}
