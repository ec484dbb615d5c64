"""The release objects of nanobot-ai 0.1.4 to 0.2.1 against each release's own code.

Each version runs in its own venv holding only its session and token modules
(``support.older_releases``): its ``Session.get_history`` over a settings grid,
``retain_recent_legal_suffix`` and ``enforce_file_cap`` where it has a file cap,
``estimate_message_tokens`` with and without tiktoken, ``SessionManager._load`` of intact and
damaged files, and its file names, on hand-made edge cases and seeded hypothesis sessions.
``make test`` runs one version per release object; ``SESSIONKIT_FULL_CHECKS=1`` runs every
version, so each alias is proven to behave as the object it names.
"""

from __future__ import annotations

import copy
import io
import itertools
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.older_releases import IMPORTS, VERSIONS, session_release
from support.releases import Release
from support.sampling import examples
from support.strategies import message_lists

import sessionkit as sk
from sessionkit.nanobot.loss import nanobot_load, split_lines
from sessionkit.nanobot.naming import session_filename
from sessionkit.nanobot.policies import CappedPolicy, get_policy
from sessionkit.nanobot.reader import read_session_file
from sessionkit.nanobot.session import Session

pytestmark = pytest.mark.conformance

Message = dict[str, Any]
MAX_MESSAGES = (0, -2, 1, 2, 5, 120)
MAX_TOKENS = (0, 1, 5, 50, 500)
RETAIN_SIZES = (-1, 0, 1, 2, 3, 5, 120)
FILE_LIMITS = (0, 1, 2, 3, 5, 10, 2000)
METADATA = {"title": "t", "_last_summary": {"text": "old"}}


def _user(text: str = "hi", **extra: Any) -> Message:
    return {"role": "user", "content": text, "timestamp": "2025-01-01T10:00:00", **extra}


def _assistant(text: str = "ok", **extra: Any) -> Message:
    return {"role": "assistant", "content": text, **extra}


def _call(*ids: Any) -> Message:
    calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    return _assistant("", tool_calls=calls)


def _tool(call_id: Any, text: str = "result") -> Message:
    return {"role": "tool", "tool_call_id": call_id, "name": "f", "content": text}


LONG = "word " * 60
EDGE_CASES: list[tuple[list[Message], int]] = [
    ([], 0),
    ([_assistant("a"), _call("x"), _tool("x"), _assistant("b")], 0),
    ([_user(LONG), _assistant(LONG)] + [_call(f"c{i}") for i in range(3)] + [_assistant(LONG)], 0),
    ([_user(), _call("a", "b"), _tool("a"), _tool("b"), _user(), _tool("zz"), _assistant()], 2),
    ([_user(), _call("a", "b"), _tool("a"), _tool("nope"), _tool("b"), _assistant(), _user()], 0),
    (
        [_user(), _assistant("x"), _assistant("ping", _channel_delivery=True), _user("re")]
        + [_assistant("[Message Time: 2025-01-01]\nanswer\n[image: /tmp/a.png]")],
        1,
    ),
    (
        [_user("look", media=["/tmp/a.png", "", 3]), _assistant("", reasoning_content="r")]
        + [_user("/new", _command=True), _assistant("done", _command=True)]
        + [_user("apps", cli_apps=[{"name": "Git"}], mcp_presets=[{"name": "fs"}])]
        + [_assistant("  ", thinking_blocks=[{"type": "thinking", "thinking": "x"}])]
        + [_assistant(" "), _assistant("media", media=["/b.png"], timestamp="2025-01-02")],
        3,
    ),
    ([{"content": "no role"}, _user(), _assistant()], 0),
    ([_user(f"q{i}") if i % 3 == 0 else _assistant(f"a{i}") for i in range(20)], 7),
    ([_user("<|endoftext|> résumé 🙂"), {"role": "assistant", "content": [{"type": "text"}]}], 0),
]


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


@pytest.fixture(scope="module")
def generated() -> list[tuple[list[Message], int]]:
    """Seeded hypothesis sessions with an offset within their messages (40 of them unless
    ``SESSIONKIT_FULL_CHECKS=1``), collected for batching."""
    drawn: list[tuple[list[Message], int]] = []

    @settings(max_examples=examples(150, 40))
    @given(message_lists().flatmap(lambda ms: st.tuples(st.just(ms), st.integers(0, len(ms)))))
    def collect(session: tuple[list[Message], int]) -> None:
        drawn.append(_json(session))

    collect()
    return drawn


def _history_grid(version: str) -> list[dict[str, Any]]:
    """Every ``get_history`` call of the grid the release's signature takes, plus one keyword
    it does not take."""
    parameters = get_policy(f"nanobot-{version}").history_signature.parameters
    if "max_tokens" not in parameters:
        return [{}, {"max_tokens": 5}] + [{"max_messages": m} for m in MAX_MESSAGES]
    grid = itertools.product(MAX_MESSAGES, MAX_TOKENS, (False, True))
    calls = [{"max_messages": m, "max_tokens": t, "include_timestamps": s} for m, t, s in grid]
    return [{}, {"extend_to_user": True}, *calls]


def _ours(version: str, messages: list[Message], offset: int, attr: str, **kw: Any) -> Any:
    session = Session(
        key="cli:direct",
        messages=copy.deepcopy(messages),
        metadata=copy.deepcopy(METADATA),
        last_consolidated=offset,
        policy=f"nanobot-{version}",
    )
    calls: list[Any] = []
    if "on_archive" in kw:
        kw["on_archive"] = lambda dropped: calls.append([dropped])
    try:
        returned = getattr(session, attr)(**kw)
    except (TypeError, KeyError, AttributeError) as error:
        return {"raised": type(error).__name__}
    state = {"m": session.messages, "o": session.last_consolidated, "md": session.metadata}
    return _json({"returned": returned, "state": state, "calls": calls})


def _theirs(
    release: Release,
    sessions: list[tuple[list[Message], int]],
    attr: str,
    calls: list[dict[str, Any]],
) -> list[Any]:
    cases = [
        {
            "init": {
                "key": "cli:direct",
                "messages": ms,
                "last_consolidated": o,
                "metadata": METADATA,
            },
            "kwargs": kw,
        }
        for ms, o in sessions
        for kw in calls
    ]
    out = []
    for result in release.run(f"Session.{attr}", cases):
        if "raised" in result:
            out.append({"raised": result["raised"]})
            continue
        state = result["state"]
        out.append(
            {
                "returned": result["returned"],
                "state": {
                    "m": state["messages"],
                    "o": state["last_consolidated"],
                    "md": state["metadata"],
                },
                "calls": result.get("calls", {}).get("on_archive", []),
            }
        )
    return out


def _compare(
    version: str, sessions: list[tuple[list[Message], int]], attr: str, calls: list[dict[str, Any]]
) -> None:
    theirs = _theirs(session_release(version), sessions, attr, calls)
    ours = [_ours(version, ms, o, attr, **copy.deepcopy(kw)) for ms, o in sessions for kw in calls]
    differences = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    assert differences == [], (ours[differences[0]], theirs[differences[0]], differences[:5])


@pytest.mark.parametrize("version", VERSIONS)
def test_get_history_equals_the_release(version: str) -> None:
    _compare(version, EDGE_CASES, "get_history", _history_grid(version))


@pytest.mark.sampled
@pytest.mark.parametrize("version", VERSIONS)
def test_get_history_generated(version: str, generated: list[tuple[list[Message], int]]) -> None:
    _compare(version, generated, "get_history", _history_grid(version))


def _capped(version: str) -> bool:
    return isinstance(get_policy(f"nanobot-{version}"), CappedPolicy)


CAPPED = [v for v in VERSIONS if _capped(v)]


@pytest.mark.parametrize("version", CAPPED)
def test_file_cap_equals_the_release(
    version: str, generated: list[tuple[list[Message], int]]
) -> None:
    cap = [{"limit": n, "on_archive": {"__callback__": "record"}} for n in FILE_LIMITS]
    _compare(version, EDGE_CASES + generated, "enforce_file_cap", cap)
    retain = [{"max_messages": n} for n in RETAIN_SIZES] + [
        {"max_messages": 3, "extend_to_user": True}
    ]
    _compare(version, EDGE_CASES + generated, "retain_recent_legal_suffix", retain)


def test_the_capped_releases() -> None:
    """0.1.5.post3 brought ``enforce_file_cap``; the releases before it have none."""
    assert [v for v in IMPORTS if _capped(v)] == ["0.1.5.post3", "0.2.0", "0.2.1"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("tiktoken", [True, False])
def test_token_estimates_equal_the_release(
    version: str, tiktoken: bool, generated: list[tuple[list[Message], int]]
) -> None:
    """Each message's estimate, exact with tiktoken and by the release's fallback without; the
    releases before 0.1.4.post5 have no estimator (sessionkit counts them as 0.1.4.post6)."""
    policy = get_policy(f"nanobot-{version}")
    messages = [m for ms, _ in EDGE_CASES + generated for m in ms]
    results = session_release(version).run(
        "nanobot.utils.helpers:estimate_message_tokens",
        [{"args": [m]} for m in messages],
        tiktoken=tiktoken,
    )
    if not policy.estimates:
        assert {r.get("raised") for r in results} == {"AttributeError"}
        return
    ours = policy.estimate_message_tokens if tiktoken else policy.fallback_message_tokens
    expected: list[dict[str, Any]] = []
    for message in messages:
        try:
            expected.append({"returned": ours(message)})
        except TypeError:
            expected.append({"raised": "TypeError"})
    theirs = [{k: v for k, v in r.items() if k != "message"} for r in results]
    assert theirs == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_frames_count_as_the_release(
    version: str, generated: list[tuple[list[Message], int]], tmp_path: Path
) -> None:
    """A load replayed with the release holds, message by message, the release's own
    ``estimate_message_tokens`` (<NA> where it raises, and for a release without one)."""
    folder = tmp_path / "ws" / "sessions"
    folder.mkdir(parents=True)
    for n, (messages, offset) in enumerate(generated):
        meta = {"_type": "metadata", "key": f"cli:{n}", "created_at": "2025-01-01T10:00:00"}
        lines = [meta | {"metadata": {}, "last_consolidated": offset}, *messages]
        text = "".join(json.dumps(line) + "\n" for line in lines)
        (folder / f"cli_{n}.jsonl").write_text(text, encoding="utf-8")
    corpus = sk.load(tmp_path / "ws", policy=f"nanobot-{version}", cache=False, progress=False)
    stored = [m for session in corpus for m in session.messages]
    results = session_release(version).run(
        "nanobot.utils.helpers:estimate_message_tokens", [{"args": [m]} for m in stored]
    )
    theirs = [r.get("returned", pd.NA) for r in results]
    assert len(stored) > 100
    assert corpus.messages["tokens"].tolist() == theirs


KEYS = ["cli:direct", "telegram:42", 'a<b>c:"d"|g?h*i', " spaced: key "]


@pytest.mark.parametrize("version", VERSIONS)
def test_file_names_equal_the_release(version: str) -> None:
    naming = get_policy(f"nanobot-{version}").naming
    results = session_release(version).run(
        "nanobot.utils.helpers:safe_filename", [{"args": [k.replace(":", "_")]} for k in KEYS]
    )
    assert [r["returned"] + ".jsonl" for r in results] == [
        session_filename(k, naming) for k in KEYS
    ]


_META = {"_type": "metadata", "key": "cli:direct", "created_at": "2025-01-01T10:00:00"}
FILES: dict[str, list[str]] = {
    "intact": [
        json.dumps({**_META, "metadata": {"title": "é"}, "last_consolidated": 1}),
        json.dumps(_user("héllo 🙂"), ensure_ascii=False),
        json.dumps(_assistant("ok")),
    ],
    "no metadata": [json.dumps(_user()), json.dumps(_assistant())],
    "a line not JSON": [
        json.dumps(_META),
        json.dumps(_user()),
        "{not json",
        json.dumps(_assistant()),
    ],
    "a line not an object": [json.dumps(_META), json.dumps(_user()), "[1, 2]"],
    "a bad created_at": [json.dumps({**_META, "created_at": "yesterday"}), json.dumps(_user())],
    "only damage": ["{oops"],
}


@pytest.mark.parametrize("version", VERSIONS)
def test_load_equals_the_release(version: str, tmp_path: Path) -> None:
    """Intact files load as sessionkit reads them; a damaged one is lost where the release's
    loader loses it: from 0.1.5.post2 by 0.2.2's rule (``loss_rule``), before it whenever a
    line or ``created_at`` fails to parse (no repair pass)."""
    policy = get_policy(f"nanobot-{version}")
    sessions = tmp_path / "ws" / "sessions"
    sessions.mkdir(parents=True)
    cases = []
    for name, lines in FILES.items():
        (sessions / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        cases.append({"args": [str(tmp_path / "ws"), name]})
    results = session_release(version).run(
        "older_scenarios:load", cases, env={"HOME": str(tmp_path / "home")}
    )
    for (name, lines), result in zip(FILES.items(), results, strict=True):
        load = nanobot_load(split_lines(io.BytesIO("\n".join(lines).encode())))
        lost = load.lost if policy.loss_rule else load.repaired
        assert (result["returned"] is None) == lost, name
        if not lost:
            session, _ = read_session_file(sessions / f"{name}.jsonl")
            assert session is not None
            assert result["returned"]["messages"] == session.messages, name
            assert result["returned"]["metadata"] == session.metadata, name
            assert result["returned"]["last_consolidated"] == session.last_consolidated, name
