"""Window invariants: sound on the exact policy and the fast path, each one caught when broken."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.sampling import examples
from support.strategies import sessions

from sessionkit import Session, load
from sessionkit.nanobot.settings import HistorySettings
from sessionkit.schema import VIOLATIONS
from sessionkit.simulate.windowing import windows
from sessionkit.testing import InvariantViolation, assert_window_invariants, check_window_invariants


def user(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assistant(text: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


def call(*ids: str) -> dict[str, Any]:
    return assistant("", tool_calls=[{"id": i, "type": "function"} for i in ids])


def tool(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "r"}


def claimed(at: int, start: int, stop: int, **setting: Any) -> pd.DataFrame:
    """A one-row windows frame claiming ``[start, stop)`` is the window of ``messages[:at]``."""
    row = {
        "session_key": "cli:x",
        "at": at,
        "turn": 0,
        "consolidated": 0,
        "start": start,
        "stop": stop,
        "max_messages": 120,
        "max_tokens": 0,
        "include_timestamps": False,
        "extend_to_user": False,
    }
    return pd.DataFrame([row | setting])


def broken(messages: list[dict[str, Any]], frame: pd.DataFrame) -> list[tuple[str, Any]]:
    found = check_window_invariants(frame, corpus=[Session("cli:x", messages)])
    return list(zip(found["invariant"], found["idx"], strict=True))


def starts(session: Session, **setting: Any) -> list[int]:
    frame = windows(session, include_timestamps=True, **setting)
    return frame["start"].tolist()


def test_bundled_store_windows_are_sound() -> None:
    corpus = load()
    found = check_window_invariants(corpus, max_messages=[40, 120], max_tokens=[0, 2000, 32000])
    assert found.empty
    assert found.dtypes.astype(str).tolist() == [c.dtype for c in VIOLATIONS]
    assert check_window_invariants(corpus["discord:987"], exact=True, max_tokens=[0, 500]).empty


def test_delivery_start_and_legal_tool_boundary_are_allowed() -> None:
    delivered = Session("cli:x", [user(), assistant(), assistant("news", _channel_delivery=True)])
    delivered.messages += [user("re"), user("next")]
    assert starts(delivered, max_messages=2)[-1] == 2
    assert check_window_invariants(delivered, max_messages=2).empty
    orphaned = Session("cli:x", [user(), call("a"), tool("a"), tool("zz"), assistant("after")])
    orphaned.messages += [user("next"), user("end")]
    assert starts(orphaned)[-1] == 4
    assert check_window_invariants(orphaned).empty
    assert check_window_invariants(orphaned, exact=True).empty


def test_budget_recovery_is_allowed_but_a_plain_overrun_is_not() -> None:
    recovering = Session("cli:x", [user("q " * 50), assistant("a " * 400), user("end")])
    frame = windows(recovering, max_tokens=50, include_timestamps=True)
    assert frame[["start", "stop", "recovered"]].values.tolist()[-1] == [0, 2, True]
    assert check_window_invariants(recovering, max_tokens=50).empty
    two_users = [user("q " * 400), assistant("a"), user("b"), assistant("c")]
    found = check_window_invariants(
        claimed(4, 0, 4, max_tokens=50), corpus=[Session("cli:x", two_users)]
    )
    assert found["invariant"].tolist() == ["token_budget"]
    assert found["detail"].str.contains("tokens > max_tokens=50").all()


def test_each_broken_rule_is_caught() -> None:
    messages = [user(), call("a"), tool("a"), assistant("x"), user("y"), assistant("z")]
    assert broken(messages, claimed(6, 0, 6)) == []
    assert broken(messages, claimed(6, 0, 5)) == [("tail", 0)]
    assert broken(messages, claimed(6, 0, 6, consolidated=1)) == [("tail", 0)]
    assert broken(messages, claimed(6, 0, 6, max_messages=2)) == [("max_messages", 0)]
    assert broken(messages, claimed(6, 3, 6)) == [("user_start", 3)]
    assert broken(messages, claimed(6, 2, 6)) == [("user_start", 2), ("orphan_tool_result", 2)]


def test_a_frame_needs_its_corpus_and_columns() -> None:
    with pytest.raises(TypeError, match="corpus="):
        check_window_invariants(claimed(1, 0, 1))
    with pytest.raises(ValueError, match=r"\['stop'\] are missing"):
        check_window_invariants(claimed(1, 0, 1).drop(columns="stop"), corpus=[])


def test_assert_form_summarises_the_violations() -> None:
    session = Session("cli:x", [user(), assistant(), user(), assistant(), user()])
    assert_window_invariants(session, max_messages=[1, 2], max_tokens=[0, 5])
    frame = pd.concat([claimed(5, 1, 5), claimed(5, 3, 5)], ignore_index=True)
    with pytest.raises(InvariantViolation, match=r"2 window invariant violations \(user_start: 2"):
        assert_window_invariants(frame, corpus=[session])


@pytest.mark.sampled
@settings(max_examples=examples(100, 40), deadline=None)
@given(
    sessions(),
    st.integers(-1, 12),
    st.sampled_from([0, 1, 8, 30, 200]),
    st.booleans(),
    st.booleans(),
)
def test_no_window_breaks_an_invariant(
    session: Session, max_messages: int, max_tokens: int, extend: bool, exact: bool
) -> None:
    found = check_window_invariants(
        session,
        exact=exact,
        max_messages=max_messages,
        max_tokens=max_tokens,
        extend_to_user=extend,
    )
    assert found.empty, found.to_string()


def test_settings_value_and_keywords_check_the_same_windows() -> None:
    session = load()["discord:987"]
    tight = HistorySettings(max_messages=30, max_tokens=2000, last_consolidated="none")
    for exact in (False, True):
        assert check_window_invariants(session, settings=tight, exact=exact).empty
    broken = windows(session, settings=tight).assign(start=0)
    by_value = check_window_invariants(broken, corpus=[session], settings=tight)
    by_keywords = check_window_invariants(broken, corpus=[session], max_messages=30)
    pd.testing.assert_frame_equal(by_value, by_keywords)
    assert set(by_value["invariant"]) == {"max_messages", "token_budget", "orphan_tool_result"}
