"""A fork continued by its release's own loop (nanobot 0.3.5's gateway parts; 0.2.2's and
0.3.0's ``nanobot agent`` loop), in a private copy, against a stub on 127.0.0.1: the
continuation loads in sessionkit and in the release, the original workspace and config dir are
byte-identical after, outside tools are off, no key is on disk, and the loop's process opened
no socket except to the stub."""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.e2e import GatewayRun, run_gateway
from support.releases import _harness_env, release
from support.stub_openai import Reply, ScriptedTurn, StubServer
from support.stub_rules import RuleServer

import sessionkit as sk
from sessionkit.writers.forking import ForkIndexError

DATA = Path(__file__).resolve().parents[2] / "data"
KEY = "telegram:alice"
SECRET = "sk-continuation-secret"
EDIT = "Read notes/todo.md and tell me the first item. (cont-edit)"
SCENARIO: dict[str, Any] = {
    "settings": {},
    "files": {"notes/todo.md": "# Todo\n\n- water the plants\n- call the bank\n"},
    "summary": {"text": "Summary.", "usage": {"prompt_tokens": 900, "completion_tokens": 3}},
    "turns": [
        {
            "session": KEY,
            "text": "Hello, who are you? (cont-1)",
            "summaries": [],
            "replies": [
                {"text": "Hi Alice.", "usage": {"prompt_tokens": 8000, "completion_tokens": 3}}
            ],
        },
        {
            "session": KEY,
            "text": "What is in my todo list? (cont-2)",
            "summaries": [],
            "replies": [
                {
                    "text": "Plants and the bank.",
                    "usage": {"prompt_tokens": 8050, "completion_tokens": 5},
                }
            ],
        },
    ],
}
CONTINUATION = ScriptedTurn(
    EDIT,
    (
        Reply.from_json(
            {
                "tool_calls": [{"name": "read_file", "arguments": {"path": "notes/todo.md"}}],
                "usage": {"prompt_tokens": 8100, "completion_tokens": 9},
            }
        ),
        Reply.from_json(
            {
                "text": "The first item is: water the plants.",
                "usage": {"prompt_tokens": 8200, "completion_tokens": 8},
            }
        ),
    ),
)


def _tree(root: Path) -> dict[str, tuple[int, str]]:
    """Every path under ``root``: its mode and its bytes' SHA-256 (a link: its target)."""
    found = {}
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        if path.is_symlink():
            digest = str(path.readlink())
        elif path.is_file():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            digest = "dir"
        found[str(path.relative_to(root))] = (mode, digest)
    return found


def _address(url: str) -> tuple[str, int]:
    """The (host, port) a stub's base URL names, as the socket guard records it."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    return host, int(port)


def _tool_names(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body["tools"]}


def _in_035(run: GatewayRun, done: sk.experiments.continuation.Continuation, home: Path) -> Any:
    """The session as 0.3.5's own SessionManager reads it from the copy."""
    script = (
        "import json, sys\nfrom pathlib import Path\n"
        "from nanobot.session.manager import SessionManager\n"
        "ws, root, key = sys.argv[1:]\n"
        "s = SessionManager(Path(ws), sessions_root=Path(root)).get_or_create(key)\n"
        "print(json.dumps({'messages': s.messages, 'metadata': s.metadata}))\n"
    )
    proc = subprocess.run(
        [
            str(release("0.3.5").python),
            "-I",
            "-c",
            script,
            str(done.workspace),
            str(done.config_dir / "sessions"),
            KEY,
        ],
        capture_output=True,
        text=True,
        env=_harness_env(True, {"HOME": str(home)}),
        timeout=120,
        check=True,
    )
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> GatewayRun:
    return run_gateway(tmp_path_factory.mktemp("original"), SCENARIO)


@pytest.mark.conformance
def test_a_fork_continued_by_the_releases_loop(original, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", _harness_env(True, None)["TIKTOKEN_CACHE_DIR"])
    before = (_tree(original.workspace), _tree(original.data_dir))
    corpus = sk.load(original.workspace, config_dir=original.config, cache=False)
    with StubServer([CONTINUATION], default=Reply.from_json(SCENARIO["summary"])) as stub:
        done = sk.continue_fork(
            corpus,
            KEY,
            before_user_index=1,
            edit=EDIT,
            max_turns=1,
            max_calls=3,
            endpoint=stub.url,
            api_key=SECRET,
            into=tmp_path / "continued",
            nanobot=release("0.3.5").python,
        )
        calls = list(stub.calls)
    assert (_tree(original.workspace), _tree(original.data_dir)) == before

    assert [c.kind for c in calls] == ["scripted", "scripted"]
    assert (done.calls, done.budget_hit, done.replies) == (
        2,
        False,
        [["The first item is: water the plants."]],
    )
    left_out = _tool_names(original.requests[0]) - _tool_names(calls[0].body)
    assert left_out == {
        "exec",
        "exec_session",
        "list_exec_sessions",
        "web_fetch",
        "web_search",
        "run_cli_app",
    }
    assert _tool_names(calls[0].body) <= _tool_names(original.requests[0])

    address = _address(stub.url)
    assert done.connections and all(c["allowed"] for c in done.connections)
    assert {tuple(c["address"]) for c in done.connections} == {address}
    assert {c["event"] for c in done.connections} == {"socket.connect"}

    stored = original.session_lines(KEY)[1:]
    messages = done.continued.messages
    assert messages[:2] == done.fork.messages == stored[:2]
    assert [m["role"] for m in messages[2:]] == ["user", "assistant", "tool", "assistant"]
    assert messages[2]["content"] == EDIT
    assert messages[4]["content"] == (
        "1| # Todo\n2| \n3| - water the plants\n4| - call the bank\n\n(End of file \u2014 4 lines total)"
    )
    assert messages[5]["content"] == "The first item is: water the plants."
    assert done.continued.metadata["sessionkit_fork"]["before_user_index"] == 1

    side = done.side_by_side()
    assert side["position"].tolist() == [2, 3, 4, 5]
    assert side["original"].tolist()[:2] == [stored[2]["content"], "Plants and the bank."]
    assert side["original"].isna().tolist() == [False, False, True, True]
    assert side["continued_role"].tolist() == ["user", "assistant", "tool", "assistant"]
    assert side["continued"].tolist()[3] == "The first item is: water the plants."

    theirs = _in_035(original, done, tmp_path / "home035")
    assert theirs["messages"] == messages

    assert stat.S_IMODE(done.folder.stat().st_mode) == 0o700
    for path in done.folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            raw = path.read_bytes()
            assert SECRET.encode() not in raw and b"sk-stub" not in raw, path


@pytest.mark.conformance
def test_the_budget_caps_the_calls_and_other_addresses_are_refused(
    original, tmp_path, monkeypatch
) -> None:
    """One call allowed: the tool round's second call is never sent.  With no BPE file the
    release's tokenizer tries its download: the lookup is refused before any packet leaves,
    and recorded."""
    empty = tmp_path / "no-bpe"
    empty.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(empty))
    with StubServer([CONTINUATION], default=Reply.from_json(SCENARIO["summary"])) as stub:
        done = sk.continue_fork(
            sk.load(original.workspace, config_dir=original.config, cache=False),
            KEY,
            before_user_index=2,
            edit=EDIT,
            then=["Never sent. (cont-then)"],
            max_turns=2,
            max_calls=1,
            agent_defaults={"maxTokens": 128},
            endpoint=stub.url,
            into=tmp_path / "continued",
            nanobot=release("0.3.5").python,
        )
        calls = list(stub.calls)
    assert [c.kind for c in calls] == ["scripted"]
    assert calls[0].body["max_tokens"] == 128
    assert (done.calls, done.budget_hit, len(done.replies)) == (1, True, 1)
    refused = [c for c in done.connections if not c["allowed"]]
    assert refused and {c["event"] for c in refused} == {"socket.getaddrinfo"}
    assert {c["address"][0] for c in refused} == {"openaipublic.blob.core.windows.net"}
    address = _address(stub.url)
    assert {tuple(c["address"]) for c in done.connections if c["allowed"]} == {address}
    messages = done.continued.messages
    assert len(done.fork.messages) == 4
    assert [m["role"] for m in messages[4:6]] == ["user", "assistant"]
    assert messages[4]["content"] == EDIT
    assert messages[5]["tool_calls"][0]["function"]["name"] == "read_file"
    for path in done.folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert b"sk-stub" not in path.read_bytes(), path


@pytest.mark.conformance
def test_tools_named_in_enable_are_on(original, tmp_path, monkeypatch) -> None:
    """The shell and the web tools when asked for; the loop's connections are then only
    recorded (here: still the stub's alone)."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", _harness_env(True, None)["TIKTOKEN_CACHE_DIR"])
    with StubServer([CONTINUATION], default=Reply.from_json(SCENARIO["summary"])) as stub:
        done = sk.continue_fork(
            sk.load(original.workspace, config_dir=original.config, cache=False),
            KEY,
            before_user_index=1,
            edit=EDIT,
            max_turns=1,
            max_calls=2,
            enable=["exec", "web"],
            endpoint=stub.url,
            into=tmp_path / "continued",
            nanobot=release("0.3.5").python,
        )
        calls = list(stub.calls)
    missing = _tool_names(original.requests[0]) - _tool_names(calls[0].body)
    assert missing == {"run_cli_app"}
    assert (done.calls, done.budget_hit) == (2, False)
    address = _address(stub.url)
    assert {(tuple(c["address"]), c["allowed"]) for c in done.connections} == {(address, True)}


@pytest.fixture
def secretive(tmp_path_factory: pytest.TempPathFactory) -> GatewayRun:
    """A run of its own, whose config the test rewrites."""
    return run_gateway(tmp_path_factory.mktemp("secretive"), SCENARIO)


SECRETS = {
    "channels": {"telegram": {"enabled": True, "token": "123:telegram-secret"}},
    "tools": {
        "web": {"search": {"apiKey": "web-secret"}},
        "mcpServers": {
            "notes": {"command": "false", "env": {"NOTES": "mcp-secret"}, "headers": {}},
        },
    },
}


@pytest.mark.conformance
def test_the_copy_names_every_secret_by_reference(secretive, tmp_path, monkeypatch) -> None:
    """The config's own provider (no endpoint=, no api_key=): the loop runs on the config's
    key, channel token, search key and MCP environment as ${VAR}s; none is in the copy, the
    channel is off and the MCP server gone."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", _harness_env(True, None)["TIKTOKEN_CACHE_DIR"])
    config = json.loads(secretive.config.read_text())
    with StubServer([CONTINUATION], default=Reply.from_json(SCENARIO["summary"])) as stub:
        config["providers"]["custom"] = {"apiKey": "sk-config-secret", "apiBase": stub.url}
        config["channels"] = SECRETS["channels"]
        config["tools"] = SECRETS["tools"]
        secretive.config.write_text(json.dumps(config))
        done = sk.continue_fork(
            sk.load(secretive.workspace, config_dir=secretive.config, cache=False),
            KEY,
            before_user_index=1,
            edit=EDIT,
            max_turns=1,
            max_calls=2,
            into=tmp_path / "continued",
            nanobot=release("0.3.5").python,
        )
        calls = list(stub.calls)
    assert (len(calls), done.calls, done.replies) == (
        2,
        2,
        [["The first item is: water the plants."]],
    )
    copied = json.loads((done.config_dir / "config.json").read_text())
    assert copied["providers"] == {
        "custom": {"apiKey": "${SESSIONKIT_CONTINUATION_SECRET_0}", "apiBase": stub.url}
    }
    assert copied["channels"] == {
        "telegram": {"enabled": False, "token": "${SESSIONKIT_CONTINUATION_SECRET_1}"}
    }
    assert copied["tools"]["mcpServers"] == {}
    assert copied["tools"]["web"] == {
        "search": {"apiKey": "${SESSIONKIT_CONTINUATION_SECRET_2}"},
        "enable": False,
    }
    for path in done.folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            raw = path.read_bytes()
            for secret in ("sk-config-secret", "telegram-secret", "web-secret", "mcp-secret"):
                assert secret.encode() not in raw, (path, secret)


@pytest.mark.conformance
def test_a_workspace_inside_its_config_dir_is_copied_once(tmp_path, monkeypatch) -> None:
    """The bundled 0.3.5 data dir keeps its workspace inside (as ~/.nanobot/workspace) and
    records it relatively: the copy has one workspace, inside the copied config dir."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", _harness_env(True, None)["TIKTOKEN_CACHE_DIR"])
    data = tmp_path / "nanobot-0.3.5"
    shutil.copytree(DATA / "nanobot-0.3.5", data)
    before = _tree(data)
    with StubServer([CONTINUATION], default=Reply.from_json(SCENARIO["summary"])) as stub:
        done = sk.continue_fork(
            sk.load(data / "workspace", config_dir=data, cache=False),
            KEY,
            before_user_index=1,
            edit=EDIT,
            max_turns=1,
            max_calls=4,
            workspace=data / "workspace",
            endpoint=stub.url,
            into=tmp_path / "continued",
            nanobot=release("0.3.5").python,
        )
    assert _tree(data) == before
    assert done.workspace == done.config_dir / "workspace"
    assert sorted(p.name for p in done.folder.iterdir()) == [
        "config",
        "connections.jsonl",
        "home",
    ]
    assert done.replies == [["The first item is: water the plants."]]
    assert [m["role"] for m in done.continued.messages[len(done.fork.messages) :]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


def _sample() -> sk.Corpus:
    return sk.load(
        DATA / "nanobot-0.3.5" / "workspace", config_dir=DATA / "nanobot-0.3.5", cache=False
    )


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (
            {"max_turns": 1, "then": ["and then?"]},
            ValueError,
            "max_turns=1 allows fewer turns than the 2 asked (the edited message plus then=)",
        ),
        ({"max_calls": 0}, ValueError, "max_calls must be an int of 1 or more, not 0"),
        ({"edit": None}, TypeError, "edit and each of then= must be the text of a user message"),
        (
            {"then": "not a list"},
            TypeError,
            "edit and each of then= must be the text of a user message",
        ),
        (
            {"before_user_index": 5},
            ForkIndexError,
            "before_user_index 5 is out of range: session 'telegram:alice' has 4 user messages, "
            "so it must be between 0 and 4 (4 copies the whole session)",
        ),
        (
            {"enable": ["shell", "web"]},
            ValueError,
            "enable= names 'shell', which this config cannot enable; it takes cli_apps, exec, "
            "files, image_generation, web",
        ),
    ],
)
def test_a_continuation_is_refused_before_anything_is_copied(tmp_path, change, error, message):
    asked = {
        "before_user_index": 1,
        "edit": "Again? (refused)",
        "max_turns": 1,
        "max_calls": 2,
        "workspace": DATA / "nanobot-0.3.5" / "workspace",
        "into": tmp_path / "continued",
        **change,
    }
    with pytest.raises(error) as raised:
        sk.continue_fork(_sample(), KEY, **asked)
    assert str(raised.value) == message
    assert list(tmp_path.iterdir()) == []


def test_a_workspace_recorded_where_there_is_none_is_asked_for(tmp_path, monkeypatch):
    """The bundled data dir records its workspace relatively ('workspace'): read from another
    folder, it names none that exists."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as raised:
        sk.continue_fork(_sample(), KEY, before_user_index=1, edit="x", max_turns=1, max_calls=1)
    assert str(raised.value) == (
        f"session 'telegram:alice' records workspace {tmp_path / 'workspace'}, not there: "
        "pass workspace="
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("policy", ["nanobot-0.1.4.post2", "nanobot-0.2.1", "nanobot-0.1.5"])
def test_only_0_3_5_0_3_0_and_0_2_2_sessions_are_continued(tmp_path, policy):
    corpus = sk.load(DATA / "sessions", cache=False, policy=policy)
    with pytest.raises(ValueError) as raised:
        sk.continue_fork(
            corpus,
            "webui:f00d42",
            before_user_index=0,
            edit="x",
            max_turns=1,
            max_calls=1,
            into=tmp_path / "continued",
        )
    assert str(raised.value) == (
        f"session 'webui:f00d42' is a {policy} session; only nanobot 0.3.5, nanobot 0.2.2 and "
        "nanobot 0.3.0 sessions can be continued"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_copy_goes_only_where_asked(tmp_path):
    """``into`` inside the workspace, under a missing folder or not empty is refused, and
    nothing is made."""
    copied = tmp_path / "sample"
    shutil.copytree(DATA / "nanobot-0.3.5", copied)
    corpus = sk.load(copied / "workspace", config_dir=copied, cache=False)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    before = _tree(tmp_path)
    asked = {
        "before_user_index": 1,
        "edit": "Again? (refused)",
        "max_turns": 1,
        "max_calls": 1,
        "workspace": copied / "workspace",
        "config_dir": copied,
    }
    cases = [
        (copied / "workspace" / "c", ValueError, "is inside"),
        (tmp_path / "missing" / "c", FileNotFoundError, "does not exist"),
        (tmp_path / "full", FileExistsError, "is not empty; continuations never overwrite"),
    ]
    for into, error, words in cases:
        with pytest.raises(error) as raised:
            sk.continue_fork(corpus, KEY, into=into, **asked)
        assert words in str(raised.value)
    assert _tree(tmp_path) == before


KEY_022 = "telegram:777"
EDIT_022 = "Read notes/todo.md and tell me the first item. (cont-022)"
USAGE = {"prompt_tokens": 5, "completion_tokens": 1}
OUTSIDE_022 = {
    "exec",
    "write_stdin",
    "list_exec_sessions",
    "web_fetch",
    "web_search",
    "run_cli_app",
    "generate_image",
}
"""0.2.2's tools that reach past the copy, by the names its tools register."""


def _todo_rule(body: dict[str, Any], seen: int) -> Reply:
    """Read the todo list when asked, then say its first item; a call without tools (a
    summary) gets 'Summary.'."""
    if not body.get("tools"):
        return Reply.from_json({"text": "Summary.", "usage": USAGE})
    if body["messages"][-1]["role"] == "tool":
        return Reply.from_json({"text": "The first item is: water the plants.", "usage": USAGE})
    call = {"name": "read_file", "arguments": {"path": "notes/todo.md"}}
    return Reply.from_json({"tool_calls": [call], "usage": USAGE})


def _workspace_022(root: Path) -> Path:
    """The bundled sessions (nanobot 0.2.2's store) in a workspace with a todo list."""
    workspace = root / "workspace"
    shutil.copytree(DATA / "sessions", workspace / "sessions")
    (workspace / "notes").mkdir()
    (workspace / "notes" / "todo.md").write_text(SCENARIO["files"]["notes/todo.md"])
    return workspace


def _in_release(version: str, done: sk.experiments.continuation.Continuation, home: Path) -> Any:
    """The session as the release's own SessionManager reads it from the copy's workspace."""
    script = (
        "import json, sys\nfrom pathlib import Path\n"
        "from nanobot.session.manager import SessionManager\n"
        "s = SessionManager(Path(sys.argv[1])).get_or_create(sys.argv[2])\n"
        "print(json.dumps({'messages': s.messages, 'metadata': s.metadata}))\n"
    )
    proc = subprocess.run(
        [str(release(version).python), "-I", "-c", script, str(done.workspace), KEY_022],
        capture_output=True,
        text=True,
        env=_harness_env(True, {"HOME": str(home)}),
        timeout=120,
        check=True,
    )
    return json.loads(proc.stdout)


@pytest.mark.conformance
@pytest.mark.parametrize(
    ("version", "policy", "renamed"),
    [
        ("0.2.2", "nanobot-0.2", []),
        ("0.3.0", "nanobot-0.3.0", ["dGVsZWdyYW06Nzc3.jsonl", "telegram_777.jsonl"]),
    ],
)
def test_an_older_fork_continued_by_its_releases_loop(
    tmp_path, monkeypatch, version, policy, renamed
):
    """The bundled store, no config, read as a 0.2.2 or a 0.3.0 store: that release's
    ``process_direct`` answers from the stub with the file tools only, the continuation loads
    in sessionkit and in the release, the original is byte-identical, and the loop's process
    connected to the stub alone.  0.3.0 names the fork's file otherwise (base64url): the
    copy holds the session once."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", _harness_env(True, None)["TIKTOKEN_CACHE_DIR"])
    workspace = _workspace_022(tmp_path / "original")
    before = _tree(tmp_path / "original")
    original = sk.load(workspace / "sessions", cache=False, policy=policy)[KEY_022]
    with RuleServer(_todo_rule) as stub:
        done = sk.continue_fork(
            original,
            before_user_index=3,
            edit=EDIT_022,
            max_turns=1,
            max_calls=4,
            endpoint=stub.url,
            api_key=SECRET,
            into=tmp_path / "continued",
            nanobot=release(version).python,
        )
        received = list(stub.received)
    assert _tree(tmp_path / "original") == before
    assert done.continued.policy == policy
    files = {p.name for p in (done.workspace / "sessions").iterdir()}
    assert sorted(files ^ {p.name for p in (workspace / "sessions").iterdir()}) == renamed

    assert [r.authorization for r in received] == [f"Bearer {SECRET}"] * 2
    tools = [{t["function"]["name"] for t in r.body["tools"]} for r in received]
    assert tools[0] == tools[1] and "read_file" in tools[0] and not tools[0] & OUTSIDE_022
    assert (done.calls, done.budget_hit, done.replies) == (
        2,
        False,
        [["The first item is: water the plants."]],
    )
    address = _address(stub.url)
    assert {(c["event"], tuple(c["address"]), c["allowed"]) for c in done.connections} == {
        ("socket.connect", address, True)
    }

    fork_length = len(done.fork.messages)
    messages = done.continued.messages
    assert done.fork.messages == original.messages[:fork_length]
    assert messages[:fork_length] == done.fork.messages
    assert [m["role"] for m in messages[fork_length:]] == ["user", "assistant", "tool", "assistant"]
    assert messages[fork_length]["content"] == EDIT_022
    assert messages[fork_length + 1]["tool_calls"][0]["function"]["name"] == "read_file"
    assert messages[fork_length + 2]["content"].startswith("1| # Todo\n2| \n3| - water the plants")
    assert messages[fork_length + 3]["content"] == "The first item is: water the plants."
    assert done.continued.metadata["sessionkit_fork"]["before_user_index"] == 3

    theirs = _in_release(version, done, tmp_path / "home")
    assert theirs["messages"] == messages

    side = done.side_by_side()
    assert side["position"].tolist()[:4] == list(range(fork_length, fork_length + 4))
    assert side["continued"].tolist()[3] == "The first item is: water the plants."
    assert side["original"].tolist()[0] == original.messages[fork_length]["content"]

    assert stat.S_IMODE(done.folder.stat().st_mode) == 0o700
    copied = json.loads((done.config_dir / "config.json").read_text())
    assert copied["providers"] == {
        "custom": {"apiBase": stub.url, "apiKey": "${SESSIONKIT_CONTINUATION_API_KEY}"}
    }
    for path in done.folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert SECRET.encode() not in path.read_bytes(), path


@pytest.mark.conformance
def test_a_0_2_2_config_dir_is_copied_with_its_tools_off_and_the_budget_caps(
    tmp_path, monkeypatch
) -> None:
    """``~/.nanobot`` with its workspace inside and a config enabling everything: the copy's
    config turns 0.2.2's outside tools and channels off and names its secrets by reference;
    one call allowed, the tool round's second call and the next turn are never sent."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", _harness_env(True, None)["TIKTOKEN_CACHE_DIR"])
    data_dir = tmp_path / ".nanobot"
    workspace = _workspace_022(data_dir)
    with RuleServer(_todo_rule) as stub:
        config = {
            "agents": {"defaults": {"workspace": str(workspace), "model": "stub-model"}},
            "providers": {"custom": {"apiKey": "sk-config-secret", "apiBase": stub.url}},
            "channels": SECRETS["channels"],
            "tools": {**SECRETS["tools"], "exec": {"enable": True}},
        }
        (data_dir / "config.json").write_text(json.dumps(config))
        before = _tree(data_dir)
        done = sk.continue_fork(
            sk.load(workspace / "sessions", cache=False),
            KEY_022,
            before_user_index=2,
            edit=EDIT_022,
            then=["Never sent. (cont-then)"],
            max_turns=2,
            max_calls=1,
            agent_defaults={"maxTokens": 128},
            into=tmp_path / "continued",
            nanobot=release("0.2.2").python,
        )
        received = list(stub.received)
    assert _tree(data_dir) == before
    assert [r.authorization for r in received] == ["Bearer sk-config-secret"]
    assert received[0].body["max_tokens"] == 128
    assert not {t["function"]["name"] for t in received[0].body["tools"]} & OUTSIDE_022
    assert (done.calls, done.budget_hit, done.replies) == (
        1,
        True,
        [["Error calling LLM: sessionkit budget of 1 calls reached"]],
    )
    assert done.workspace == done.config_dir / "workspace"

    copied = json.loads((done.config_dir / "config.json").read_text())
    assert copied["providers"] == {
        "custom": {"apiKey": "${SESSIONKIT_CONTINUATION_SECRET_0}", "apiBase": stub.url}
    }
    assert copied["channels"] == {
        "telegram": {"enabled": False, "token": "${SESSIONKIT_CONTINUATION_SECRET_1}"}
    }
    assert copied["tools"] == {
        "web": {"search": {"apiKey": "${SESSIONKIT_CONTINUATION_SECRET_2}"}, "enable": False},
        "mcpServers": {},
        "exec": {"enable": False},
        "cliApps": {"enable": False},
        "imageGeneration": {"enabled": False},
        "restrictToWorkspace": True,
    }
    assert copied["agents"]["defaults"] == {
        "workspace": str(done.workspace),
        "model": "stub-model",
        "idleCompactAfterMinutes": 0,
        "maxTokens": 128,
    }
    messages = done.continued.messages
    fork_length = len(done.fork.messages)
    assert [m["role"] for m in messages[fork_length:]] == ["user", "assistant", "tool", "assistant"]
    assert messages[fork_length]["content"] == EDIT_022
    assert messages[fork_length + 1]["tool_calls"][0]["function"]["name"] == "read_file"
    assert messages[fork_length + 3]["content"] == (
        "[Assistant reply unavailable due to model error.]"
    )
    for path in done.folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            raw = path.read_bytes()
            for secret in ("sk-config-secret", "telegram-secret", "web-secret", "mcp-secret"):
                assert secret.encode() not in raw, (path, secret)


def test_a_0_2_2_workspace_without_a_config_needs_an_endpoint(tmp_path):
    """The bundled 0.2.2 store has no config: without ``endpoint=`` nothing says where to
    send, and nothing is made."""
    before = _tree(DATA)
    with pytest.raises(ValueError) as raised:
        sk.continue_fork(
            sk.load(DATA / "sessions", cache=False),
            "webui:f00d42",
            before_user_index=1,
            edit="Again? (refused)",
            max_turns=1,
            max_calls=1,
            into=tmp_path / "continued",
        )
    assert str(raised.value) == (
        "no nanobot config found to send the requests with: pass endpoint= (an "
        "OpenAI-compatible base URL such as 'http://127.0.0.1:8000/v1') or config_dir="
    )
    assert list(tmp_path.iterdir()) == []
    assert _tree(DATA) == before


@pytest.mark.conformance
def test_0_2_2_tools_named_in_enable_are_on(tmp_path, monkeypatch) -> None:
    """0.2.2's shell and web tools when asked for; the connections are then only recorded."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", _harness_env(True, None)["TIKTOKEN_CACHE_DIR"])
    workspace = _workspace_022(tmp_path / "original")
    with RuleServer(_todo_rule) as stub:
        done = sk.continue_fork(
            sk.load(workspace / "sessions", cache=False),
            KEY_022,
            before_user_index=1,
            edit=EDIT_022,
            max_turns=1,
            max_calls=2,
            enable=["exec", "web"],
            endpoint=stub.url,
            into=tmp_path / "continued",
            nanobot=release("0.2.2").python,
        )
        received = list(stub.received)
    tools = {t["function"]["name"] for t in received[0].body["tools"]}
    assert tools & OUTSIDE_022 == OUTSIDE_022 - {"run_cli_app", "generate_image"}
    assert (done.calls, done.budget_hit) == (2, False)
    address = _address(stub.url)
    assert {(tuple(c["address"]), c["allowed"]) for c in done.connections} == {(address, True)}
