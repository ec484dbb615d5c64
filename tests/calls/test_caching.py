"""The prompt cache per family on constructed sessions with known gaps: after an idle gap over
the TTL a session's cache reads nothing; within it a call reads the prefix it shares with the
previous call, rounded by the family's rule; under breakpoints reads and writes stop at one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.request_rows import request_rows

from sessionkit.calls.caching import (
    cache_columns,
    checked,
    minimum_tokens,
    resolve_rules,
    write_premium,
)

START = pd.Timestamp("2026-03-01T09:00Z")


@st.composite
def sessions(draw: st.DrawFn) -> dict:
    """One session's calls: growing requests, each sharing some prefix with the previous, with
    gaps (seconds) before each call."""
    n = draw(st.integers(1, 8))
    tools, system = draw(st.integers(0, 3000)), draw(st.integers(0, 3000))
    head = tools + system
    totals, prefixes, lasts = [], [], []
    total = head + draw(st.integers(1, 3000))
    for i in range(n):
        shared = 0 if i == 0 else draw(st.integers(0, totals[-1]))
        total = max(shared + draw(st.integers(1, 2000)), head + 1)
        totals.append(total)
        prefixes.append(shared)
        lasts.append(draw(st.integers(1, total - head)))
    gaps = draw(st.lists(st.integers(0, 1200), min_size=n, max_size=n))
    return {
        "n": n,
        "tools_tokens": tools,
        "system_tokens": system,
        "turn": list(range(n)),
        "total_tokens": totals,
        "prefix_tokens": prefixes,
        "last_tokens": lasts,
        "last_results_tokens": lasts,
        "history_messages": [2 * i for i in range(n)],
        "time": list(START + pd.to_timedelta(np.cumsum(gaps), unit="s")),
    }


def _columns(session: dict, family: str, ttl: float | None, scope: str = "session") -> dict:
    columns = {k: v for k, v in session.items() if k != "n"}
    n = max(len(v) for v in columns.values() if isinstance(v, list))
    rows = request_rows(n, **columns)
    minimum = minimum_tokens(family, None)
    return cache_columns(rows, np.full(n, family, dtype=object), np.full(n, minimum), ttl, scope)


def _gaps(session: dict) -> np.ndarray:
    times = pd.DatetimeIndex(session["time"]).as_unit("ns")
    return np.r_[np.inf, np.diff(times.asi8) / 1e9]


@given(sessions(), st.sampled_from([60.0, 300.0, 3600.0]))
def test_openai_reads_the_shared_prefix_in_128_token_steps_within_the_ttl(session, ttl) -> None:
    found = _columns(session, "openai", ttl)
    shared = np.array(session["prefix_tokens"])
    rounded = np.where(shared >= 1024, shared // 128 * 128, 0)
    within = _gaps(session) <= ttl
    assert found["cache_read_tokens"].tolist() == np.where(within, rounded, 0).tolist()
    assert not found["cache_write_tokens"].any()
    idle = ~within
    idle[0] = False
    assert (found["cache_break"][idle] == "idle past the TTL").all()
    assert found["cache_break"][0] == "first call"


@given(
    sessions(), st.sampled_from(["anthropic", "openai-marked"]), st.sampled_from([300.0, 3600.0])
)
def test_breakpoint_reads_and_writes_stop_at_a_breakpoint(session, family, ttl) -> None:
    found = _columns(session, family, ttl)
    read, write = found["cache_read_tokens"], found["cache_write_tokens"]
    tools, head = session["tools_tokens"], session["tools_tokens"] + session["system_tokens"]
    totals, lasts = np.array(session["total_tokens"]), np.array(session["last_tokens"])
    history = np.array(session["history_messages"])
    messages = history + 1 if family == "anthropic" else history + 2
    points = np.stack(
        [
            np.full(len(totals), tools),
            np.full(len(totals), head if head > tools else 0),
            np.where(messages >= 3, totals - lasts, 0),
        ],
        axis=1,
    )
    points = np.where(points >= 1024, points, 0)
    top = points.max(axis=1)
    assert ((read + write == top) | ((read == 0) & (write == 0) & (top == 0))).all()
    assert (read <= np.array(session["prefix_tokens"])).all()
    for i in range(1, len(totals)):  # each read is where the previous call read or marked
        assert read[i] == 0 or read[i] in {*points[i - 1], read[i - 1]}
    assert not read[_gaps(session) > ttl].any()


FOUR_CALLS = {
    "tools_tokens": 2000,
    "system_tokens": 3000,
    "turn": [0, 1, 2, 3],
    "history_messages": [0, 2, 4, 6],
    "total_tokens": [5100, 5400, 5700, 6000],
    "prefix_tokens": [0, 5100, 5400, 5700],
    "last_tokens": [100, 100, 100, 100],
    "last_results_tokens": [100, 100, 100, 100],
}
"""A session of four turns of one call each, without times (each test gives its own)."""


def test_a_session_within_the_ttl_and_after_it_exact_values() -> None:
    session = {
        **FOUR_CALLS,
        "history_start": [0, 0, 0, 2],
        "time": [START + pd.Timedelta(seconds=s) for s in (0, 240, 900, 1000)],
    }
    openai = _columns(session, "openai", 300.0)
    assert openai["cache_read_tokens"].tolist() == [0, 4992, 0, 5632]
    assert openai["cache_break"].tolist() == ["first call", "none", "idle past the TTL", "none"]
    anthropic = _columns(session, "anthropic", 300.0)
    # breakpoints: tools 2000, system 5000, second-to-last message once three are sent
    assert anthropic["cache_read_tokens"].tolist() == [0, 5000, 0, 5600]
    assert anthropic["cache_write_tokens"].tolist() == [5000, 300, 5600, 300]
    forever = _columns(session, "anthropic", None)
    assert forever["cache_read_tokens"].tolist() == [0, 5000, 5300, 5600]
    slid = dict(session, prefix_tokens=[0, 5100, 5400, 5000])
    assert _columns(slid, "openai", None)["cache_break"].tolist()[3] == "window slid"


def test_a_dropped_marker_leaves_the_entry_written_before_it_to_the_next_call() -> None:
    session = {
        **FOUR_CALLS,
        "marker_dropped": [False, False, True, False],  # call 2: a tool call without text
        "time": [START + pd.Timedelta(seconds=s) for s in (0, 60, 120, 180)],
    }
    marked = _columns(session, "openai-marked", 300.0)
    # call 2 marks tools and system only; call 3 reads what call 1 marked (5,300), alive
    assert marked["cache_read_tokens"].tolist() == [0, 5000, 5000, 5300]
    assert marked["cache_write_tokens"].tolist() == [5000, 300, 0, 600]
    expired = _columns(session, "openai-marked", 100.0)  # 120 s after call 1: gone
    assert expired["cache_read_tokens"].tolist() == [0, 5000, 5000, 5000]
    assert expired["cache_write_tokens"].tolist() == [5000, 300, 0, 900]
    far = dict(session, history_messages=[0, 2, 4, 26])  # 22 blocks on: past the lookback
    assert _columns(far, "openai-marked", 300.0)["cache_read_tokens"].tolist()[3] == 5000
    native = _columns(session, "anthropic", 300.0)  # its blocks always carry the marker
    assert native["cache_read_tokens"].tolist() == [0, 5000, 5300, 5600]


def test_deployment_scope_shares_tools_and_system_across_sessions() -> None:
    two = {
        "session_key": ["cli:a", "cli:b"],
        "tools_tokens": 2000,
        "system_tokens": 3000,
        "total_tokens": [5100, 5200],
        "time": [START, START + pd.Timedelta(seconds=60)],
    }
    alone = _columns(two, "openai", 300.0)
    shared = _columns(two, "openai", 300.0, "deployment")
    assert alone["cache_read_tokens"].tolist() == [0, 0]
    assert shared["cache_read_tokens"].tolist() == [0, 4992]
    assert _columns(two, "anthropic", 300.0, "deployment")["cache_read_tokens"].tolist() == [
        0,
        5000,
    ]
    late = dict(two, time=[START, START + pd.Timedelta(seconds=600)])
    assert _columns(late, "openai", 300.0, "deployment")["cache_read_tokens"].tolist() == [0, 0]


def test_deployment_scope_shares_the_tools_whatever_the_system_prompt() -> None:
    """Tools come first in the prefix (Anthropic: tools, system, messages): another session's
    system prompt leaves the tools entry, and the tools breakpoint's, to share."""
    two = {
        "session_key": ["cli:a", "cli:b"],
        "tools_tokens": 2000,
        "system_tokens": [3000, 3100],
        "total_tokens": [5100, 5200],
        "time": [START, START + pd.Timedelta(seconds=60)],
    }
    assert _columns(two, "openai", 300.0, "deployment")["cache_read_tokens"].tolist() == [0, 1920]
    for family in ("anthropic", "openai-marked"):
        found = _columns(two, family, 300.0, "deployment")
        assert found["cache_read_tokens"].tolist() == [0, 2000]
        assert found["cache_write_tokens"].tolist() == [5000, 3100]
        alone = _columns(two, family, 300.0)
        assert alone["cache_read_tokens"].tolist() == [0, 0]
    other = dict(two, tools_tokens=[2000, 2100])  # other tools: nothing shared
    assert _columns(other, "anthropic", 300.0, "deployment")["cache_read_tokens"].tolist() == [
        0,
        0,
    ]


def test_rules_minimums_and_premiums() -> None:
    assert resolve_rules("anthropic", None) == ("anthropic", None)
    assert resolve_rules(None, None) == ("openai", None)
    assert resolve_rules("openrouter", None) == ("openai", None)  # markers for Claude only
    assert resolve_rules("kimi_coding", None) == ("anthropic", None)
    assert minimum_tokens("anthropic", "claude-haiku-4-5") == 4096
    assert minimum_tokens("anthropic", "claude-3-5-haiku-latest") == 2048
    assert minimum_tokens("anthropic", "claude-sonnet-4-5") == 1024
    assert minimum_tokens("openai", "gpt-4o") == 1024
    assert (write_premium(300), write_premium(3600), write_premium(None)) == (1.25, 2.0, 1.25)
    with pytest.raises(ValueError, match="cache_rules"):
        resolve_rules("", None)


def test_rules_follow_the_config_files_provider(tmp_path) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        '{"agents": {"defaults": {"model": "anthropic/claude-haiku-4-5"}},'
        ' "providers": {"openrouter": {"apiKey": "sk-or-1"}}}'
    )
    assert resolve_rules(None, config) == ("openai-marked", "anthropic/claude-haiku-4-5")
    assert resolve_rules("openai", config) == ("openai", "anthropic/claude-haiku-4-5")
    assert resolve_rules(None, tmp_path / "missing.json") == ("openai", None)


@pytest.mark.parametrize(
    ("ttl", "scope", "message"),
    [
        (0, "session", "cache_ttl must be"),
        (True, "session", "cache_ttl must be"),
        (300, "workspace", "cache_scope must be one of session, deployment"),
    ],
)
def test_wrong_ttls_and_scopes_are_refused(ttl, scope, message) -> None:
    with pytest.raises(ValueError, match=message):
        checked(ttl, scope)


@given(
    st.lists(sessions(), min_size=1, max_size=4),
    st.sampled_from(["openai", "anthropic", "openai-marked"]),
    st.sampled_from([60.0, 300.0, None]),
    st.sampled_from(["session", "deployment"]),
    st.randoms(use_true_random=False),
)
def test_columns_follow_each_session_whatever_the_row_order_and_minimums_form(
    drawn, family, ttl, scope, rng
) -> None:
    """One minimum for every row or one per row give the same columns; under session scope,
    so do sessions laid out in runs (a requests frame's order) or shuffled (deployment scope
    orders calls made at the same moment as the rows do)."""
    parts = []
    for i, session in enumerate(drawn):
        columns = {k: v for k, v in session.items() if k != "n"}
        parts.append(request_rows(session["n"], session_key=f"cli:{i}", **columns))
    rows = pd.concat(parts, ignore_index=True)
    rows["session_key"] = rows["session_key"].astype("category")
    n, least = len(rows), minimum_tokens(family, None)
    names = np.full(n, family, dtype=object)
    in_order = cache_columns(rows, names, np.full(n, least), ttl, scope)
    assert in_order.keys() == cache_columns(rows, names, least, ttl, scope).keys()
    for name, values in cache_columns(rows, names, least, ttl, scope).items():
        assert np.asarray(values).tolist() == np.asarray(in_order[name]).tolist()
    if scope != "session":
        return
    shuffled = rng.sample(range(n), n)
    found = cache_columns(rows.take(shuffled).reset_index(drop=True), names, least, ttl, scope)
    for name, values in found.items():
        assert np.asarray(values).tolist() == np.asarray(in_order[name])[shuffled].tolist()
