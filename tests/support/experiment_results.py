"""Experiment results frames made by hand (sk.schema.EXPERIMENTS), for the code that reads
them: each row names only what a test is about, the rest a plain answered call."""

from __future__ import annotations

from typing import Any

import pandas as pd

from sessionkit.schema import EXPERIMENTS, frame

DEFAULTS: dict[str, Any] = {
    "call": 0,
    "session_key": "cli:direct",
    "policy": "nanobot-0.2.2",
    "turn": 0,
    "step": 0,
    "max_messages": 20,
    "max_tokens": 0,
    "include_timestamps": True,
    "include_runtime_context": True,
    "extend_to_user": False,
    "last_consolidated": "stored",
    "context_window": None,
    "max_output": None,
    "edit": None,
    "model": "gpt-4o-mini",
    "sample": 0,
    "host": "127.0.0.1:8000",
    "outcome": "answered",
    "estimated_prompt_tokens": 1000,
    "max_completion_tokens": 100,
    "worst_cost_usd": 0.001,
    "answer_text": "hello",
    "tool_calls": None,
    "finish_reason": "stop",
    "prompt_tokens": 1000,
    "cached_tokens": 0,
    "cache_write_tokens": None,
    "completion_tokens": 10,
    "latency_s": 0.1,
    "cost_usd": 0.0002,
    "error": None,
    "original_text": "hello",
    "original_tool_calls": None,
    "same_action": True,
    "text_similarity": 1.0,
    "judge_score": float("nan"),
    "agreement": 1.0,
}


def results(*rows: dict[str, Any]) -> pd.DataFrame:
    """An EXPERIMENTS frame with one row per mapping (the rest of each row from DEFAULTS)."""
    filled = [DEFAULTS | row for row in rows]
    return frame(EXPERIMENTS, {c.name: [r[c.name] for r in filled] for c in EXPERIMENTS})
