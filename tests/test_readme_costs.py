"""The README's worked cost example, run as written on copies of the bundled 0.3.5 data dir at
two checkout paths: the figures its text states are the ones it computes, on either path."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.releases import release  # tests/ is on sys.path under pytest

import sessionkit as sk

REPO = Path(__file__).resolve().parent.parent
SECTION = "#### What would this have cost?"

FIGURES = {
    "prompt_tokens": r"counted ([\d,]+) prompt tokens",
    "cached_tokens": r"([\d,]+) of them cache reads",
    "completion_tokens": r"and ([\d,]+) completion tokens",
    "logged_usd": r"\*\*\$(\d\.\d+)\*\* at genai-prices",
    "logged_agent_usd": r"\$(\d\.\d+) of it the \d+ agent calls",
    "agent_calls": r"of it the (\d+) agent calls",
    "ran_usd": r"about \$(\d\.\d+) as they ran",
    "max_messages_2_usd": r"\$(\d\.\d+) with `max_messages=2`",
    "max_messages_6_usd": r"\$(\d\.\d+) with `max_messages=6`",
    "idle_breaks": r"\((\d+) of the \d+ calls break `idle past the TTL`\)",
    "forever_usd": r"they come to \$(\d\.\d+), \$\d\.\d+ and \$\d\.\d+\.",
    "forever_2_usd": r"they come to \$\d\.\d+, \$(\d\.\d+) and \$\d\.\d+\.",
    "forever_6_usd": r"they come to \$\d\.\d+, \$\d\.\d+ and \$(\d\.\d+)\.",
    "answer_tokens": r"The stored answers count ([\d,]+) tokens",
    "reported_answer_tokens": r"where the provider reported ([\d,]+)",
    "calibrated_answer_tokens": r"which brings them to ([\d,]+)\.",
    "fixed_percent": r"are (\d+)% of the tokens sent",
    "history_percent": r"and the history (\d+)%",
}
"""Each figure the section states, as a pattern of its (whitespace-normalised) text."""


def _section() -> tuple[str, str]:
    """The worked example's code block and its prose, whitespace normalised."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n### ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, "the worked example has no python block"
    prose = section[code.end() :]
    return code.group(1), " ".join(prose.split())


def _stated() -> dict[str, str]:
    """The README's figures as written (thousands separators dropped)."""
    _, prose = _section()
    out = {}
    for name, pattern in FIGURES.items():
        found = re.search(pattern, prose)
        assert found is not None, f"the README no longer states {name} ({pattern})"
        out[name] = found.group(1).replace(",", "")
    return out


def _without_ttl(code: str) -> ast.Expression:
    """The block's ``costs = sk.cost(...)`` call with ``cache_ttl=None`` added."""
    for node in ast.parse(code).body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "costs":
            call = node.value
            assert isinstance(call, ast.Call)
            call.keywords.append(ast.keyword("cache_ttl", ast.Constant(None)))
            return ast.fix_missing_locations(ast.Expression(call))
    raise AssertionError("the worked example assigns no costs")


def _computed(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The section's figures as the block computes them in a checkout at ``checkout``."""
    shutil.copytree(REPO / "data" / "nanobot-0.3.5", checkout / "data" / "nanobot-0.3.5")
    monkeypatch.chdir(checkout)
    code, _ = _section()
    names: dict[str, Any] = {"sk": sk}
    exec(compile(code, "README.md", "exec"), names)
    forever = eval(compile(_without_ttl(code), "README.md", "eval"), names)
    calls, frame, costs = names["calls"], names["frame"], names["costs"]
    agent = calls[calls["kind"] == "agent"]
    ran = frame[(frame["max_messages"] == 0) & (frame["max_tokens"] == 0)]
    settings = ["max_messages", "max_tokens"]
    per = costs.groupby(settings)["cost_usd"].sum()
    per_forever = forever.groupby(settings)["cost_usd"].sum()
    answers = agent["estimated_completion_tokens"].to_numpy(dtype=float)
    total = ran["total_tokens"].sum()
    return {
        "prompt_tokens": int(calls["prompt_tokens"].sum()),
        "cached_tokens": int(calls["cached_tokens"].sum()),
        "completion_tokens": int(calls["completion_tokens"].sum()),
        "logged_usd": float(calls["cost_usd"].sum()),
        "logged_agent_usd": float(agent["cost_usd"].sum()),
        "agent_calls": len(agent),
        "ran_usd": float(per[(0, 0)]),
        "max_messages_2_usd": float(per[(2, 0)]),
        "max_messages_6_usd": float(per[(6, 0)]),
        "idle_breaks": int((ran["cache_break"] == "idle past the TTL").sum()),
        "forever_usd": float(per_forever[(0, 0)]),
        "forever_2_usd": float(per_forever[(2, 0)]),
        "forever_6_usd": float(per_forever[(6, 0)]),
        "answer_tokens": int(answers.sum()),
        "reported_answer_tokens": int(agent["completion_tokens"].sum()),
        "calibrated_answer_tokens": float(
            sk.calibrate(calls).predict_output(answers, "gpt-4o-mini").sum()
        ),
        "fixed_percent": float((ran["system_tokens"] + ran["tools_tokens"]).sum() / total * 100),
        "history_percent": float(ran["history_tokens"].sum() / total * 100),
    }


def _as_stated(value: Any, stated: str) -> str:
    """``value`` rounded and written as the README writes ``stated``."""
    if "." in stated:
        return f"{value:.{len(stated.split('.')[1])}f}"
    return str(round(value))


@pytest.mark.conformance
def test_readme_cost_figures_are_computed_the_same_on_any_checkout_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two checkouts, paths of different lengths: the same figures, and the README's."""
    release("0.3.5")
    short = _computed(tmp_path / "a", monkeypatch)
    long = _computed(tmp_path / "a-checkout-folder-with-a-much-longer-name" / "nested", monkeypatch)
    assert short == long
    stated = _stated()
    assert {k: _as_stated(v, stated[k]) for k, v in short.items()} == stated
