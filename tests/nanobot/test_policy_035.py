"""The "nanobot-0.3.5" policy: exact values, then nanobot-ai 0.3.5's own code on the same inputs.

The differential tests run 0.3.5 in its own environment (``releases.py``) over JSON and
compare results as JSON text, so dict key order counts.  Each test asserts how many cases it
compared, so a harness that silently returns nothing fails.
"""

from __future__ import annotations

import itertools
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.releases import Release, release
from support.sampling import examples
from support.strategies import message_lists, messages, texts

from sessionkit.nanobot import tokens
from sessionkit.nanobot.policies import POLICIES, get_policy
from sessionkit.nanobot.policy_035 import (
    CONTINUATION_TEXT,
    Policy035,
    SessionState,
    estimate_message_tokens,
    fallback_message_tokens,
    media_breadcrumbs,
    public_message,
)
from sessionkit.nanobot.workspace import sessions_dir_035, sessions_root_035, workspace_id_035

POLICY = Policy035()
UPDATED = datetime(2026, 1, 2, 3, 4, 5)
ACTIVE = datetime(2025, 12, 31, 23, 0, 0, 123456)
CONTEXT = (
    "[Runtime Context — metadata only, not instructions]\nCurrent Time: 10:00\n[/Runtime Context]"
)
SUFFIX_MARKER = {"version": 1, "sources": ["clock"], "suffix": CONTEXT}
BLOCKS_MARKER = {"version": 1, "sources": ["clock"], "blocks": [{"type": "text", "text": CONTEXT}]}
HISTORY_GRID = [
    {"max_messages": m, "max_tokens": t, "extend_to_user": e, "include_runtime_context": r}
    for m, t, e, r in itertools.product((0, -1, 1, 3, 50), (0, 1, 30, 400), *[(False, True)] * 2)
]
# Without tiktoken only the token budget differs, and each estimate retries the encoder.
BUDGET_GRID = [kwargs for kwargs in HISTORY_GRID if kwargs["max_tokens"] > 0]


def _user(text: Any = "hi", **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": "2026-01-01T10:00:00", **extra}


def _assistant(text: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


def _call(*ids: Any) -> dict[str, Any]:
    calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    return _assistant("", tool_calls=calls)


def _tool(call_id: Any, text: str = "result") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": "f", "content": text}


def _hidden() -> dict[str, Any]:
    return {
        "role": "user",
        "content": CONTINUATION_TEXT,
        "_hidden_history": True,
        "timestamp": "2026-01-01T11:00:00",
    }


def _with_context(text: str, marker: Any = SUFFIX_MARKER, **extra: Any) -> dict[str, Any]:
    content = f"{text}\n\n{CONTEXT}" if text else CONTEXT
    return _user(content, _runtime_context=marker, **extra)


LONG = "word " * 60
APPS = [{"name": " Git ", "entry_point": " main.py "}, {"name": ""}, "x", {"name": "JQ"}]
EDGE_CASES: dict[str, tuple[list[dict[str, Any]], int]] = {
    "empty": ([], 0),
    "checkpoint": (
        [
            _user("a"),
            _assistant("b"),
            _user("c"),
            _assistant("d"),
            _hidden(),
            _user("e"),
            _assistant("f"),
        ],
        4,
    ),
    "checkpoint is the last message": ([_user("a"), _assistant("b"), _hidden()], 2),
    "checkpoint before a tool result": (
        [_user(), _call("a"), _hidden(), _tool("a"), _assistant()],
        2,
    ),
    "offset past the end resets": ([_user(), _assistant()], 5),
    "no user message": ([_assistant("a"), _call("x"), _tool("x"), _assistant("b")], 0),
    "assistant-only tail": (
        [_user(LONG), _assistant(LONG)] + [_call(f"c{i}") for i in range(3)] + [_assistant(LONG)],
        0,
    ),
    "orphan at the cut": (
        [_user(), _call("a", "b"), _tool("a"), _tool("b"), _user(), _tool("zz")],
        0,
    ),
    "delivery before user": (
        [
            _user(),
            _assistant("x"),
            _assistant("ping", _channel_delivery=True),
            _user("re"),
            _assistant(),
        ],
        0,
    ),
    "commands": ([_user("/status", _command=True), _assistant("up", _command=True), _user()], 0),
    "media": (
        [
            _user("look", media=[7, "", None]),
            _user("", media=["/a.png", "", 3, "~/b.jpg"]),
            _user("", media=[]),
            _user("x", media="x.png"),
            _user(["block"], media=["/a.png"]),
            _assistant("seen", media=["/a.png"]),
        ],
        0,
    ),
    "cli apps": (
        [
            _user("run", cli_apps=APPS * 3),
            _user("", cli_apps=[{"name": "git", "entry_point": "  "}]),
            _user("none", cli_apps=[{"name": None}, 3]),
            _with_context("ctx", cli_apps=APPS),
            _with_context("junk marker", marker="x", cli_apps=APPS),
            _user("presets", mcp_presets=[{"name": "fs"}]),
        ],
        0,
    ),
    "runtime context": (
        [
            _with_context("hello", media=["/m.png"]),
            _with_context(""),
            _user(f"stale\n\n{CONTEXT}\nmore", _runtime_context=SUFFIX_MARKER),
            _user(CONTEXT, _runtime_context={**SUFFIX_MARKER, "version": 2}),
            _user(
                [{"type": "text", "text": "q"}, *BLOCKS_MARKER["blocks"]],
                _runtime_context=BLOCKS_MARKER,
            ),
            _user(
                [{"type": "text", "text": CONTEXT}],
                _runtime_context={"version": 1, "suffix": CONTEXT},
            ),
            _user(f"x\n\n{CONTEXT}", _runtime_context={"version": 1, "suffix": ""}),
            _assistant("reply", _runtime_context=SUFFIX_MARKER),
        ],
        0,
    ),
    "replay artefacts": (
        [_user(), _assistant("[Message Time: 2025-01-01]\nhi\n[image: /tmp/a.png]\nmessage(a)")],
        0,
    ),
    "empty assistants": ([_user(), _assistant("  "), _assistant("", reasoning_content=None)], 0),
    "special tokens": ([_user("<|endoftext|> " * 20), _assistant("x <|fim_prefix|>"), _user()], 0),
    "long tool chain": ([_user(LONG)] + [m for i in range(8) for m in (_call(i), _tool(i))], 0),
    "missing role": ([_user(), {"content": "no role"}], 0),
}


def _as_json(value: Any) -> str:
    return json.dumps(value)


def _outcome(call: Any) -> dict[str, Any]:
    try:
        return {"returned": json.loads(json.dumps(call()))}
    except Exception as error:
        return {"raised": type(error).__name__}


def _summary(result: dict[str, Any]) -> dict[str, Any]:
    """A harness result without what cannot match: exception messages and object state."""
    if "raised" in result:
        return {"raised": result["raised"]}
    return {"returned": result["returned"]}


def _valid_offset(offset: Any, n_messages: int) -> int:
    """0.3.5's ``Session`` resets an offset that is not an int in ``[0, len]`` to 0."""
    ok = isinstance(offset, int) and not isinstance(offset, bool) and 0 <= offset <= n_messages
    return offset if ok else 0


def _history_cases(
    sessions: list[tuple[list[dict[str, Any]], int]], grid: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    return [
        {
            "init": {"key": "cli:direct", "messages": items, "last_consolidated": offset},
            "kwargs": kwargs,
        }
        for items, offset in sessions
        for kwargs in grid
    ]


def _ours_history(case: dict[str, Any]) -> dict[str, Any]:
    items = case["init"]["messages"]
    offset = _valid_offset(case["init"]["last_consolidated"], len(items))
    return _outcome(lambda: POLICY.get_history(items, offset, **case["kwargs"]))


def _compare_history(
    nb035: Release, sessions: list[tuple[list[dict[str, Any]], int]], *, tiktoken: bool = True
) -> int:
    """Differences between 0.3.5's get_history and ours over the grid; returns the case count."""
    sessions = json.loads(json.dumps(sessions))  # what crosses to the release, exactly
    cases = _history_cases(sessions, HISTORY_GRID if tiktoken else BUDGET_GRID)
    theirs = nb035.run("Session.get_history", cases, tiktoken=tiktoken)
    if tiktoken:
        ours = [_ours_history(case) for case in cases]
    else:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tokens, "encoding", _no_encoder)
            ours = [_ours_history(case) for case in cases]
    differences = [
        (case, _summary(t), o)
        for case, t, o in zip(cases, theirs, ours, strict=True)
        if _as_json(_summary(t)) != _as_json(o)
    ]
    assert not differences, differences[:3]
    return len(cases)


def _no_encoder() -> Any:
    raise OSError("no BPE file")


@pytest.fixture(scope="module")
def nb035() -> Release:
    return release("0.3.5")


# --- exact values -------------------------------------------------------------------------


def test_registered_under_its_release_name() -> None:
    assert get_policy("nanobot-0.3.5") is POLICIES["nanobot-0.3.5"]
    assert POLICIES["nanobot-0.3.5"] == Policy035(name="nanobot-0.3.5", default_max_messages=0)


def test_replay_starts_at_the_hidden_continuation() -> None:
    items, offset = EDGE_CASES["checkpoint"]
    assert POLICY.get_history(items, offset) == [
        {"role": "user", "content": CONTINUATION_TEXT},
        {"role": "user", "content": "e"},
        {"role": "assistant", "content": "f"},
    ]
    assert [i for i, _ in POLICY.replay(items, offset, 2)] == [5, 6]


def test_no_count_limit_by_default() -> None:
    items = [m for i in range(300) for m in (_user(str(i)), _assistant(str(i)))]
    assert len(POLICY.get_history(items, 0)) == 600
    assert len(POLICY.get_history(items, 0, -5)) == 600
    assert len(POLICY.get_history(items, 0, 120)) == 120


def test_media_breadcrumbs_only_for_usable_paths() -> None:
    assert media_breadcrumbs("user", "look", [7, "", None]) == "look"
    assert media_breadcrumbs("user", "", ["/a.png", 3, "~/b"]) == "[image: /a.png]\n[image: ~/b]"
    assert media_breadcrumbs("user", "x", ["/a.png"]) == "x\n[image: /a.png]"
    assert media_breadcrumbs("assistant", "x", ["/a.png"]) == "x"
    assert media_breadcrumbs("user", ["x"], ["/a.png"]) == ["x"]


def test_runtime_context_is_stripped_only_when_asked() -> None:
    message = _with_context("hello", media=["/m.png"], cli_apps=APPS)
    assert POLICY.replay_entry(message) == {
        "role": "user",
        "content": f"hello\n\n{CONTEXT}\n[image: /m.png]",
    }
    assert POLICY.replay_entry(message, include_runtime_context=False) == {
        "role": "user",
        "content": "hello\n[image: /m.png]",
    }
    assert public_message(message) == {
        "role": "user",
        "content": "hello",
        "timestamp": "2026-01-01T10:00:00",
        "media": ["/m.png"],
        "cli_apps": APPS,
    }


def test_cli_app_breadcrumbs() -> None:
    entry = POLICY.replay_entry(_user("run", cli_apps=APPS))
    assert entry == {
        "role": "user",
        "content": "run\n"
        "[CLI App Attachment: @git; tool=run_cli_app; entry_point=main.py; "
        "skill=skills/cli-app-git/SKILL.md]\n"
        "[CLI App Attachment: @jq; tool=run_cli_app; entry_point=unknown; "
        "skill=skills/cli-app-jq/SKILL.md]",
    }
    assert POLICY.replay_entry(_user("run", cli_apps=APPS), include_runtime_context=False) == {
        "role": "user",
        "content": "run",
    }


def test_estimator_counts_bytes_without_the_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    message = {"role": "user", "content": "héllo 日本"}
    assert estimate_message_tokens(message) == 9
    assert fallback_message_tokens(message) == 17  # 13 UTF-8 bytes + 4
    assert POLICY.fallback_message_tokens(message) == 17
    assert estimate_message_tokens({"role": "user", "content": "<|endoftext|>"}) == 17
    assert estimate_message_tokens({"content": [{"type": "text", "text": 5}]}) == 4
    monkeypatch.setattr(tokens, "encoding", _no_encoder)
    assert estimate_message_tokens(message) == 17
    assert POLICY.estimate_message_tokens(message) == 17
    with pytest.raises(UnicodeEncodeError):
        estimate_message_tokens({"content": "\ud800"})


def test_surrogate_with_special_text_raises_even_with_the_encoder() -> None:
    with pytest.raises(UnicodeEncodeError):
        estimate_message_tokens({"content": "\ud800<|endoftext|>"})
    assert estimate_message_tokens({"content": "\ud800"}) == 5


def test_commit_summary_checkpoint_values() -> None:
    items = [_user("a"), _assistant("b")]
    metadata = {"title": "t", "_last_summary": {"text": "old"}, "z": 1}
    state = POLICY.commit_summary_checkpoint(
        items, metadata, "sum", insert_at=1, last_active=ACTIVE, now=UPDATED
    )
    assert state == SessionState(
        [
            items[0],
            {
                "role": "user",
                "content": CONTINUATION_TEXT,
                "_hidden_history": True,
                "timestamp": "2026-01-02T03:04:05",
            },
            items[1],
        ],
        1,
        {"title": "t", "_last_summary": {"text": "sum", "last_active": ACTIVE.isoformat()}, "z": 1},
    )
    assert list(state.metadata) == ["title", "_last_summary", "z"]
    assert items == [_user("a"), _assistant("b")]
    assert metadata["_last_summary"] == {"text": "old"}
    far = POLICY.commit_summary_checkpoint(
        items, {}, "s", insert_at=9, last_active=ACTIVE, now=UPDATED
    )
    assert (len(far.messages), far.last_archived, far.messages[-1]["content"]) == (
        3,
        9,
        CONTINUATION_TEXT,
    )


def test_clear_and_new_message() -> None:
    state = POLICY.clear({"a": 1, "_last_summary": {}, "b": 2})
    assert state == SessionState([], 0, {"a": 1, "b": 2})
    assert POLICY.new_message("user", "x", "T", {"timestamp": "mine", "k": 1}) == {
        "role": "user",
        "content": "x",
        "timestamp": "mine",
        "k": 1,
    }


def test_unknown_keyword_raises_type_error() -> None:
    with pytest.raises(TypeError):
        POLICY.get_history([], 0, include_timestamps=True)  # type: ignore[call-arg]


# --- differential: 0.3.5's own code ----------------------------------------------------------


@st.composite
def _context_user(draw: st.DrawFn) -> dict[str, Any]:
    """A user turn carrying a runtime-context marker, matching its content or not."""
    text = draw(texts())
    suffix = draw(st.sampled_from([CONTEXT, "[Runtime Context]\nx\n[/Runtime Context]", ""]))
    kind = draw(st.sampled_from(["suffix", "suffix", "blocks", "stale", "version", "junk"]))
    if kind == "blocks":
        blocks = [{"type": "text", "text": suffix}]
        content: Any = [{"type": "text", "text": text}, *blocks][draw(st.integers(0, 1)) :]
        marker: Any = {"version": 1, "sources": ["s"], "blocks": blocks}
    else:
        content = f"{text}\n\n{suffix}" if text else suffix
        if kind == "stale":
            content += draw(st.sampled_from(["\n", " tail"]))
        marker = {"version": 2 if kind == "version" else 1, "sources": ["s"], "suffix": suffix}
        if kind == "junk":
            marker = draw(st.sampled_from(["x", None, {"version": 1}, [1]]))
    message = _user(content, _runtime_context=marker)
    if draw(st.booleans()):
        message["cli_apps"] = draw(st.sampled_from([APPS, [], [{"name": "git"}]]))
    if draw(st.booleans()):
        message["media"] = draw(st.sampled_from([["/a.png"], [3, ""], "p.png"]))
    return message


@st.composite
def sessions_035(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int]:
    """Messages in 0.3.5's shape (checkpoints, runtime context) and an offset to replay from."""
    items = draw(message_lists(max_blocks=10))
    for _ in range(draw(st.integers(0, 3))):
        items.insert(draw(st.integers(0, len(items))), draw(_context_user()))
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), _hidden())
    checkpoints = [i for i, m in enumerate(items) if m.get("_hidden_history") is True]
    offset = draw(st.one_of(st.sampled_from(checkpoints or [0]), st.integers(-1, len(items) + 2)))
    return items, offset


@pytest.mark.conformance
def test_edge_cases_equal_0_3_5(nb035: Release) -> None:
    assert _compare_history(nb035, list(EDGE_CASES.values())) == 80 * len(EDGE_CASES)


@pytest.mark.conformance
def test_edge_cases_equal_0_3_5_without_tiktoken(nb035: Release) -> None:
    assert _compare_history(nb035, list(EDGE_CASES.values()), tiktoken=False) == 60 * len(
        EDGE_CASES
    )


@pytest.mark.conformance
@pytest.mark.sampled
@settings(max_examples=examples(5, 2))
@given(batch=st.lists(sessions_035(), min_size=30, max_size=30))
def test_generated_sessions_equal_0_3_5(nb035: Release, batch: list[Any]) -> None:
    assert _compare_history(nb035, batch) == 30 * 80


@pytest.mark.conformance
@settings(max_examples=2)
@given(batch=st.lists(sessions_035(), min_size=20, max_size=20))
def test_generated_sessions_equal_0_3_5_without_tiktoken(nb035: Release, batch: list[Any]) -> None:
    assert _compare_history(nb035, batch, tiktoken=False) == 20 * 60


ESTIMATOR_CASES = [
    {"role": "user", "content": "héllo 日本"},
    {"content": "<|endoftext|> and <|fim_suffix|>"},
    {"content": "<|im_start|>"},
    {"content": "\ud800"},
    {"content": "\ud800<|endoftext|>"},
    {"content": [{"type": "text", "text": 5}, {"type": "text", "text": ""}, {"type": "text"}]},
    {"content": [{"type": "image_url", "image_url": {"url": "x"}}, "s", 3, None]},
    {"content": {"a": [1, 2.5, None]}},
    {"content": 0},
    {"content": None, "name": "n", "tool_call_id": "c", "tool_calls": [{"id": "x"}]},
    {"content": "", "reasoning_content": "why", "name": 3},
    {},
]


def _compare_estimates(nb035: Release, batch: list[dict[str, Any]], *, tiktoken: bool) -> int:
    batch = json.loads(json.dumps(batch))
    theirs = nb035.run(
        "nanobot.utils.helpers:estimate_message_tokens",
        [{"args": [m]} for m in batch],
        tiktoken=tiktoken,
    )
    with pytest.MonkeyPatch.context() as patch:
        if not tiktoken:
            patch.setattr(tokens, "encoding", _no_encoder)
        ours = [_outcome(lambda m=m: POLICY.estimate_message_tokens(m)) for m in batch]
    assert [_summary(t) for t in theirs] == ours
    return len(batch)


@pytest.mark.conformance
@pytest.mark.parametrize("tiktoken", [True, False])
def test_estimator_equals_0_3_5(nb035: Release, tiktoken: bool) -> None:
    assert _compare_estimates(nb035, ESTIMATOR_CASES, tiktoken=tiktoken) == 12


PAYLOAD_FRAGMENTS = ["\ud800", "\udfff", "<|endoftext|>", "<|endofprompt|>", "<|im_start|>", "日本"]
payload_texts = st.lists(
    st.one_of(st.sampled_from(PAYLOAD_FRAGMENTS), st.text(max_size=8)), max_size=4
).map("".join)
payload_messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"])},
    optional={
        "content": st.one_of(
            payload_texts,
            st.lists(st.builds(lambda t: {"type": "text", "text": t}, payload_texts), max_size=2),
        ),
        "name": payload_texts,
        "tool_call_id": payload_texts,
        "reasoning_content": payload_texts,
    },
)


@pytest.mark.conformance
@settings(max_examples=4)
@given(
    batch=st.lists(st.one_of(messages(), payload_messages), min_size=100, max_size=100),
    tiktoken=st.booleans(),
)
def test_generated_estimates_equal_0_3_5(nb035: Release, batch: list[Any], tiktoken: bool) -> None:
    assert _compare_estimates(nb035, batch, tiktoken=tiktoken) == 100


def _init(items: list[dict[str, Any]], offset: int, metadata: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": "telegram:42",
        "messages": items,
        "last_consolidated": offset,
        "metadata": metadata,
        "updated_at": {"__datetime__": UPDATED.isoformat()},
    }


def _state(result: dict[str, Any]) -> dict[str, Any]:
    state = result["state"]
    return {k: state[k] for k in ("messages", "last_consolidated", "metadata", "provider_state")}


def _insert_position(n_messages: int, at: int) -> int:
    return len(range(n_messages)[:at])


@pytest.mark.conformance
def test_commit_then_history_equals_0_3_5(nb035: Release) -> None:
    """``commit_summary_checkpoint`` then ``get_history`` on the same live session."""
    base, _ = EDGE_CASES["checkpoint"]
    metadatas = [
        {},
        {"title": "t", "_last_summary": {"text": "old"}, "z": 1},
        {"_last_summary": None},
    ]
    combos = list(itertools.product((None, 0, 2, 7, 8, -1, -9, 12), (None, ACTIVE), metadatas))
    history = [{"attr": "get_history", "kwargs": kwargs} for kwargs in HISTORY_GRID[::7]]
    cases = [
        {
            "init": _init(base, 4, metadata),
            "args": ["summary text"],
            "kwargs": {
                "insert_at": at,
                "last_active": None if active is None else {"__datetime__": active.isoformat()},
            },
            "then": [*history, {"attr": "last_archived"}],
        }
        for at, active, metadata in combos
    ]
    theirs = nb035.run("Session.commit_summary_checkpoint", json.loads(json.dumps(cases)))
    compared = 0
    for (at, active, metadata), result in zip(combos, theirs, strict=True):
        position = _insert_position(len(base), len(base) if at is None else at)
        stamp = result["state"]["messages"][position]["timestamp"]
        ours = POLICY.commit_summary_checkpoint(
            base,
            metadata,
            "summary text",
            insert_at=at,
            last_active=active or UPDATED,
            now=datetime.fromisoformat(stamp),
        )
        assert _as_json(_state(result)) == _as_json(
            {
                "messages": ours.messages,
                "last_consolidated": ours.last_archived,
                "metadata": ours.metadata,
                "provider_state": None,
            }
        )
        expected = [
            _outcome(
                lambda s=step, o=ours: POLICY.get_history(
                    o.messages, o.last_archived, **s["kwargs"]
                )
            )
            for step in history
        ]
        assert [_summary(step) for step in result["then"][:-1]] == expected
        assert result["then"][-1]["returned"] == ours.last_archived
        compared += 1 + len(history)
    assert compared == len(combos) * 13


@pytest.mark.conformance
def test_add_message_and_clear_equal_0_3_5(nb035: Release) -> None:
    items, _ = EDGE_CASES["runtime context"]
    metadata = {"a": 1, "_last_summary": {"text": "s", "last_active": "x"}, "b": [2]}
    extras = [{}, {"timestamp": "mine", "media": ["/x.png"]}, {"_runtime_context": SUFFIX_MARKER}]
    cases = [
        {
            "init": _init(items, 3, metadata),
            "args": ["user", "new"],
            "kwargs": extra,
            "then": [{"attr": "get_history"}, {"attr": "clear"}, {"attr": "get_history"}],
        }
        for extra in extras
    ]
    theirs = nb035.run("Session.add_message", json.loads(json.dumps(cases)))
    for extra, result in zip(extras, theirs, strict=True):
        added = result["state"]["messages"][-1]
        expected = POLICY.new_message("user", "new", added["timestamp"], extra)
        assert _as_json(added) == _as_json(expected)
        assert "timestamp" in extra or datetime.fromisoformat(added["timestamp"]) > UPDATED
        assert result["then"][0]["returned"] == POLICY.get_history([*items, expected], 3)
        cleared = POLICY.clear(metadata)
        assert _as_json(_state(result["then"][1])) == _as_json(
            {
                "messages": [],
                "last_consolidated": 0,
                "metadata": cleared.metadata,
                "provider_state": None,
            }
        )
        assert result["then"][2]["returned"] == []


@pytest.mark.conformance
def test_unknown_keywords_raise_like_0_3_5(nb035: Release) -> None:
    cases = [
        {"init": _init([], 0, {}), "kwargs": {k: True}} for k in ("include_timestamps", "limit")
    ]
    theirs = nb035.run("Session.get_history", cases)
    ours = [_outcome(lambda c=c: POLICY.get_history([], 0, **c["kwargs"])) for c in cases]
    assert [_summary(t) for t in theirs] == ours == [{"raised": "TypeError"}] * 2


# --- the sessions folder ---------------------------------------------------------------------


def _store_dir(nb035: Release, workspace: Path, home: Path, root: Path | None) -> str:
    init: dict[str, Any] = {"workspace": str(workspace)}
    if root is not None:
        init["sessions_root"] = str(root)
    [result] = nb035.run(
        "JsonlSessionStore.sessions_dir", [{"init": init}], env={"HOME": str(home)}
    )
    return result["returned"]


@pytest.mark.conformance
def test_sessions_folder_equals_0_3_5(
    nb035: Release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, workspace, config = tmp_path / "home", tmp_path / "ws", tmp_path / "cfg"
    monkeypatch.setenv("HOME", str(home))
    assert sessions_dir_035(workspace) is None
    assert not workspace.exists() and not home.exists()

    made = _store_dir(nb035, workspace, home, None)
    workspace_id = (workspace / ".nanobot" / "workspace-id").read_text().strip()
    assert made == str(home / ".nanobot" / "sessions" / workspace_id)
    assert sessions_root_035() == home / ".nanobot" / "sessions"
    assert sessions_dir_035(workspace) == Path(made)
    assert workspace_id_035(workspace) == workspace_id

    assert sessions_dir_035(workspace, config_dir=config) is None
    elsewhere = _store_dir(nb035, workspace, home, config / "sessions")
    assert elsewhere == str(config / "sessions" / workspace_id)
    assert sessions_dir_035(workspace, config_dir=config) == Path(elsewhere)


@pytest.mark.conformance
def test_lost_workspace_id_is_recovered_read_only(nb035: Release, tmp_path: Path) -> None:
    workspace, root = tmp_path / "ws", tmp_path / "cfg" / "sessions"
    made = _store_dir(nb035, workspace, tmp_path, root)
    (workspace / ".nanobot" / "workspace-id").unlink()
    assert sessions_dir_035(workspace, config_dir=tmp_path / "cfg") == Path(made)
    assert not (workspace / ".nanobot" / "workspace-id").exists()
    assert _store_dir(nb035, workspace, tmp_path, root) == made


@pytest.mark.conformance
def test_copied_workspace_gets_a_new_namespace(nb035: Release, tmp_path: Path) -> None:
    workspace, copy, root = tmp_path / "ws", tmp_path / "copy", tmp_path / "cfg" / "sessions"
    _store_dir(nb035, workspace, tmp_path, root)
    (copy / ".nanobot").mkdir(parents=True)
    marker = workspace / ".nanobot" / "workspace-id"
    (copy / ".nanobot" / "workspace-id").write_text(marker.read_text())
    assert sessions_dir_035(copy, config_dir=tmp_path / "cfg") is None
    assert Path(_store_dir(nb035, copy, tmp_path, root)).name != marker.read_text().strip()


def test_refusals(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    with pytest.raises(RuntimeError):
        sessions_dir_035(workspace, config_dir=workspace / "cfg")
    (workspace / ".nanobot").mkdir(parents=True)
    (workspace / ".nanobot" / "workspace-id").write_text("not-an-id\n")
    with pytest.raises(RuntimeError):
        sessions_dir_035(workspace, config_dir=tmp_path / "cfg")
