"""The exact nanobot-0.2 policy on hand-made cases, each with its expected result spelt out."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionkit.nanobot import history
from sessionkit.nanobot.policies import (
    POLICIES,
    Policy,
    find_legal_message_start,
    get_policy,
    recent_message_start_index,
    sanitize_assistant_text,
)
from sessionkit.nanobot.tokens import estimate_message_tokens

POLICY = get_policy("nanobot-0.2")


def user(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assistant(text: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


def call(*ids: Any) -> dict[str, Any]:
    return assistant("", tool_calls=[{"id": i, "type": "function"} for i in ids])


def tool(call_id: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "r"}


def contents(history: list[dict[str, Any]]) -> list[Any]:
    return [entry["content"] for entry in history]


def test_registry_names_the_reference_release() -> None:
    assert get_policy() is POLICIES["nanobot-0.2"]
    assert isinstance(POLICY, Policy) and POLICY.name == "nanobot-0.2"
    with pytest.raises(ValueError, match="nanobot-0.2"):
        get_policy("nanobot-9")


@pytest.mark.parametrize(
    ("messages", "size", "extend", "expected"),
    [
        ([user(), assistant()], 0, False, 2),
        ([user(), assistant()], -3, True, 2),
        ([user(), assistant()], 5, True, 0),
        ([user(), assistant(), assistant(), assistant()], 2, False, 2),
        ([user(), assistant(), assistant(), assistant()], 2, True, 0),
        ([assistant(), assistant(), assistant()], 1, True, 2),
        ([user(), user("u2"), assistant(), assistant()], 2, True, 1),
        ([user(), assistant(_channel_delivery=True), user(), assistant(), assistant()], 2, True, 1),
        ([assistant(_channel_delivery=True), user(), assistant(), assistant()], 2, True, 0),
    ],
)
def test_recent_message_start_index(
    messages: list[dict[str, Any]], size: int, extend: bool, expected: int
) -> None:
    assert recent_message_start_index(messages, size, extend_to_user=extend) == expected


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([], 0),
        ([user(), assistant()], 0),
        ([tool("a"), user()], 1),
        ([call("a"), tool("a"), tool("b"), user()], 3),
        # an orphan forgets earlier declarations, so "a" is an orphan too
        ([call("a", "b"), tool("b"), tool("x"), tool("a"), user()], 4),
        ([call(1), tool("1"), tool(1)], 0),
        ([tool(""), tool(None), tool(0), user()], 0),
        ([call("a"), tool("x"), call("a"), tool("a")], 2),
    ],
)
def test_find_legal_message_start(messages: list[dict[str, Any]], expected: int) -> None:
    assert find_legal_message_start(messages) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[Message Time: 2025-01-01 10:00]\nHello", "Hello"),
        ("Hi [Message Time: x]\nthere", "Hi [Message Time: x]\nthere"),
        ("see\n[image: /tmp/a.png]\n[image: ~/b.png]  \ndone", "see\ndone"),
        ("[image: https://x/a.png]", "[image: https://x/a.png]"),
        ("message(chat_id=1)\n  generate_image(a) \nreal", "real"),
        ("message(a) and more", "message(a) and more"),
        ("  padded \n\n", "padded"),
    ],
)
def test_sanitize_assistant_text(text: str, expected: str) -> None:
    assert sanitize_assistant_text(text) == expected


_PIECES = st.sampled_from(
    ["a", " ", "\n", "\r", "\x0b", "\u2028", "(", ")", "[image: ", "/x.png]", "~", "]"]
    + ["message(", "generate_image(", "[Message Time: t]\n", "\u00e9"]
    + ["\nmessage(a)\n", "\n generate_image(b) \n", "\n[image: /p.png]\n", "\n[image: ~/q]\n"]
)


@given(st.lists(_PIECES, max_size=30).map("".join))
def test_sanitize_assistant_text_skips_no_line_it_would_drop(text: str) -> None:
    """Text without the markers a dropped line holds is only re-joined: the same as
    matching every line against both patterns."""
    stamp = history._LEADING_STAMP.match(text)
    rest = text[stamp.end() :] if stamp else text
    kept = [
        line
        for line in rest.splitlines()
        if not (
            history._LOCAL_IMAGE_LINE.fullmatch(line) or history._TOOL_ECHO_LINE.fullmatch(line)
        )
    ]
    assert sanitize_assistant_text(text) == "\n".join(kept).strip()


def test_replay_entry_skips_commands_and_empty_assistants() -> None:
    assert POLICY.replay_entry(user("/status", _command=True)) is None
    assert POLICY.replay_entry(assistant(" \n")) is None
    assert POLICY.replay_entry(assistant("[image: /a.png]")) is None
    assert POLICY.replay_entry({"role": "assistant"}) is None
    assert POLICY.replay_entry(assistant("", reasoning_content=None)) == {
        "role": "assistant",
        "content": "",
        "reasoning_content": None,
    }
    assert POLICY.replay_entry(assistant(None)) == {"role": "assistant", "content": None}


def test_replay_entry_copies_only_replay_fields() -> None:
    message = tool("a") | {"name": "exec", "timestamp": "t", "_n": 3}
    assert POLICY.replay_entry(message, True) == {
        "role": "tool",
        "content": "r",
        "tool_call_id": "a",
        "name": "exec",
    }


def test_replay_entry_spells_out_user_attachments() -> None:
    message = user(
        "look",
        timestamp="2025-01-01T10:00:00",
        media=["/a.png", "", 3],
        cli_apps=[{"name": " Git ", "entry_point": " "}, {"name": ""}, "x"],
        mcp_presets=[{"name": "FS"}],
    )
    assert POLICY.replay_entry(message, True)["content"] == (
        "[Message Time: 2025-01-01T10:00:00]\nlook\n[image: /a.png]\n"
        "[CLI App Attachment: @git; tool=run_cli_app; entry_point=unknown; "
        "skill=skills/cli-app-git/SKILL.md]\n"
        "[MCP Preset Attachment: @fs; tool_prefix=mcp_fs_; transport=mcp]"
    )
    assert POLICY.replay_entry(user("", media=["/a.png"]))["content"] == "[image: /a.png]"
    # a media list without a usable path still appends its (empty) line
    assert POLICY.replay_entry(user("x", media=[7]))["content"] == "x\n"
    assert POLICY.replay_entry(user("x", media=[]))["content"] == "x"
    many = [{"name": f"a{i}"} for i in range(10)]
    assert POLICY.replay_entry(user("", cli_apps=many))["content"].count("\n") == 7


def test_replay_entry_stamps_only_user_text() -> None:
    stamped = "[Message Time: T]\nhi"
    assert POLICY.replay_entry(user("hi", timestamp="T"), True)["content"] == stamped
    assert POLICY.replay_entry(user("hi", timestamp="T"), False)["content"] == "hi"
    assert POLICY.replay_entry(user("hi", timestamp=""), True)["content"] == "hi"
    assert POLICY.replay_entry(assistant("hi", timestamp="T"), True)["content"] == "hi"
    blocks = [{"type": "text", "text": "hi"}]
    assert POLICY.replay_entry(user(blocks, timestamp="T"), True)["content"] == blocks


def test_history_starts_after_consolidated_offset_at_a_user_turn() -> None:
    messages = [user("u0"), assistant("a0"), assistant("a1"), user("u1"), assistant("a2")]
    assert contents(POLICY.get_history(messages, 1)) == ["u1", "a2"]
    assert contents(POLICY.get_history(messages, 0)) == ["u0", "a0", "a1", "u1", "a2"]
    assert POLICY.get_history(messages, 5) == []
    # past the end behaves like a slice past the end: nothing to replay
    assert POLICY.get_history(messages, 9) == []


def test_history_count_window_and_non_positive_count() -> None:
    messages = [m for i in range(70) for m in (user(f"u{i}"), assistant(f"a{i}"))]
    assert contents(POLICY.get_history(messages, 0, 3)) == ["u69", "a69"]
    assert len(POLICY.get_history(messages, 0, 0)) == 120
    assert len(POLICY.get_history(messages, 0, -5)) == 120


def test_history_keeps_a_delivery_before_the_first_user_turn() -> None:
    messages = [
        user("u0"),
        assistant("x"),
        assistant("ping", _channel_delivery=True),
        user("u1"),
        assistant("a1"),
    ]
    assert contents(POLICY.get_history(messages, 0, 3)) == ["ping", "u1", "a1"]
    # ... unless a token budget is set: its own realignment starts at the user turn
    assert contents(POLICY.get_history(messages, 0, 3, max_tokens=10_000)) == ["u1", "a1"]


def test_history_without_user_turns_keeps_the_tail() -> None:
    messages = [assistant("a"), call("c"), tool("c"), assistant("b")]
    assert contents(POLICY.get_history(messages, 0, 3)) == ["", "r", "b"]
    assert contents(POLICY.get_history(messages, 0, 2)) == ["b"]
    assert contents(POLICY.get_history(messages, 0, 2, max_tokens=1)) == ["b"]


def test_history_drops_orphans_at_the_cut() -> None:
    messages = [user("u"), call("a", "b"), tool("a"), tool("b"), assistant("done")]
    assert contents(POLICY.get_history(messages, 0, 2)) == ["done"]
    assert contents(POLICY.get_history(messages, 2)) == ["done"]


def test_token_budget_keeps_the_newest_and_recovers_a_user_turn() -> None:
    long = "word " * 100
    messages = [user("question"), assistant(long), assistant(long)]
    tail = estimate_message_tokens(messages[-1])
    # the budget fits one long reply only: no user left, so the user turn is recovered
    history = POLICY.get_history(messages, 0, max_tokens=tail)
    assert contents(history) == ["question", long.strip(), long.strip()]
    # a budget too small for even the newest message still keeps it (then recovers)
    assert len(POLICY.get_history(messages, 0, max_tokens=1)) == 3


def test_token_budget_aligns_to_the_first_kept_user_turn() -> None:
    messages = [user("u0"), assistant("a0"), user("u1"), assistant("a1")]
    budget = sum(estimate_message_tokens(POLICY.replay_entry(m)) for m in messages[1:])
    assert contents(POLICY.get_history(messages, 0, max_tokens=budget)) == ["u1", "a1"]
    total = budget + estimate_message_tokens(messages[0])
    assert len(POLICY.get_history(messages, 0, max_tokens=total)) == 4


def test_token_budget_counts_the_rewritten_entries() -> None:
    stamped = user("hi", timestamp="2025-01-01T10:00:00")
    entry = POLICY.replay_entry(stamped, True)
    assert estimate_message_tokens(entry) > estimate_message_tokens(stamped)
    messages = [user("first"), stamped]
    assert len(POLICY.get_history(messages, 0, max_tokens=estimate_message_tokens(stamped))) == 1


def test_replay_reports_source_indices() -> None:
    messages = [user("u", _command=True), assistant("a", _command=True), user("v"), assistant(" ")]
    assert [i for i, _ in POLICY.replay(messages, 0)] == [2]


def test_retain_keeps_the_input_when_it_fits() -> None:
    messages = [user(), assistant()]
    trim = POLICY.retain_recent_legal_suffix(messages, 1, 2)
    assert trim.retained is messages
    assert (trim.dropped, trim.already_consolidated, trim.last_consolidated) == ([], 0, 1)


def test_retain_non_positive_clears() -> None:
    messages = [user(), assistant(), user()]
    trim = POLICY.retain_recent_legal_suffix(messages, 2, 0)
    assert trim.cleared and trim.retained == [] and trim.dropped == messages
    assert (trim.already_consolidated, trim.last_consolidated) == (2, 0)


def test_retain_starts_at_a_user_turn_and_shifts_the_offset() -> None:
    messages = [user("u0"), assistant("a0"), user("u1"), assistant("a1"), assistant("a2")]
    trim = POLICY.retain_recent_legal_suffix(messages, 3, 4)
    assert contents(trim.retained) == ["u1", "a1", "a2"]
    assert contents(trim.dropped) == ["u0", "a0"]
    assert (trim.already_consolidated, trim.last_consolidated) == (2, 1)


def test_retain_without_user_in_tail_keeps_the_window_after_the_latest_user() -> None:
    messages = [user("u0"), assistant("a0"), assistant("a1"), assistant("a2"), assistant("a3")]
    trim = POLICY.retain_recent_legal_suffix(messages, 5, 2)
    # nanobot keeps [u0, a0] and drops the newest replies
    assert contents(trim.retained) == ["u0", "a0"]
    assert contents(trim.dropped) == ["a1", "a2", "a3"]
    assert (trim.already_consolidated, trim.last_consolidated) == (3, 2)
    assert contents(trim.archived) == []


def test_retain_extended_to_user_may_exceed_the_count() -> None:
    messages = [assistant("a"), user("u0"), assistant("a0"), assistant("a1"), assistant("a2")]
    trim = POLICY.retain_recent_legal_suffix(messages, 0, 2, extend_to_user=True)
    assert contents(trim.retained) == ["u0", "a0", "a1", "a2"]
    assert contents(trim.dropped) == ["a"]


def test_retain_drops_orphans_after_the_cut() -> None:
    messages = [user(), call("a"), tool("a"), user("u1"), tool("zz"), assistant("end")]
    trim = POLICY.retain_recent_legal_suffix(messages, 0, 3)
    assert contents(trim.retained) == ["end"]
    assert len(trim.dropped) == 5


def test_file_cap_only_past_the_limit() -> None:
    messages = [user(), assistant(), user(), assistant()]
    assert POLICY.file_cap(messages, 0, 4).retained is messages
    assert POLICY.file_cap(messages, 0, 0).retained is messages
    trim = POLICY.file_cap(messages, 1, 3)
    assert len(trim.retained) == 2 and len(trim.archived) == 1


def test_the_registry_prints_short() -> None:
    assert repr(POLICIES) == (
        "{'nanobot-0.2': <nanobot 0.2.2 (nanobot-0.2)>, "
        "'nanobot-0.3.0': <nanobot 0.3.0 (nanobot-0.3.0)>, "
        "'nanobot-0.3.5': <nanobot 0.3.5 (nanobot-0.3.5)>}"
    )
