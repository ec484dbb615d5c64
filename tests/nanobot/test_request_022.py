"""sessionkit's rebuild of nanobot 0.2.2's whole request against the release's own agent loop.

The release runs in its own venv (``request_driver_022.py``, one long-lived process per local
time zone): its probe gives the kit, its loop builds and cleans each request and its
OpenAI-compatible provider builds the body; sessionkit's ``request_022`` rebuilds the same
from the inputs (hand-made and generated) or from what the loop saved, compared exactly
after a JSON round trip.
"""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.releases import _harness_env, release
from support.sampling import examples

import sessionkit.nanobot.probes
from sessionkit.nanobot import request_022 as rq
from sessionkit.nanobot import tokens
from sessionkit.nanobot.policies import get_policy

pytestmark = pytest.mark.conformance

PROBE = Path(sessionkit.nanobot.probes.__file__).with_name("probe_022.py")
DRIVER = Path(__file__).parents[1] / "support" / "request_driver_022.py"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
KEY = "cli:direct"


def count(text: str) -> int:
    return len(tokens.encoding().encode_ordinary(text))


def _round_trip(value: Any) -> Any:
    return json.loads(json.dumps(value))


class Driver:
    """One release process answering cases line by line."""

    def __init__(self, python: Path, folder: Path) -> None:
        self.log = folder / "driver.log"
        env = _harness_env(True, {"TZ": "UTC", "HOME": str(folder / "home")})
        (folder / "home").mkdir(mode=0o700, exist_ok=True)
        self.proc = subprocess.Popen(
            [str(python), "-I", str(DRIVER), str(PROBE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log.open("w"),
            env=env,
            cwd=folder,
            text=True,
        )

    def __call__(self, **case: Any) -> Any:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the 0.2.2 driver died:\n{self.log.read_text()[-3000:]}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["result"]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


class Lab:
    """Workspaces, config files and kits, made once per module."""

    def __init__(self, folder: Path, driver: Driver) -> None:
        self.folder = folder
        self.driver = driver
        self.kits: dict[tuple[str, str, str | None, str], dict[str, Any]] = {}
        self.sessions = 0
        self.template = self._workspace("template", {})
        self.custom = self._workspace("custom", CUSTOM_FILES)
        self.image = folder / "photo.bin"
        self.image.write_bytes(PNG)

    def _workspace(self, name: str, files: dict[str, str]) -> Path:
        root = self.folder / name
        for relative, text in files.items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(text, encoding="utf-8")
        root.mkdir(exist_ok=True)
        self.driver(op="sync", workspace=str(root))
        return root

    def config(self, defaults: dict[str, Any] | None) -> str | None:
        """A config file with these ``agents.defaults`` (None: no file)."""
        if defaults is None:
            return None
        text = json.dumps({"agents": {"defaults": defaults}}, sort_keys=True)
        path = self.folder / f"config-{hashlib.sha1(text.encode()).hexdigest()[:10]}.json"
        path.write_text(text)
        return str(path)

    def kit(
        self, workspace: Path, config: str | None, zone: str = "UTC", channel: str = "cli"
    ) -> dict[str, Any]:
        """The probe's kit, asked in a process whose local time zone is ``zone``."""
        key = (zone, str(workspace), config, channel)
        if key not in self.kits:
            request = {"workspace": str(workspace), "config": config, "channel": channel}
            self.kits[key] = self.driver(op="kit", request=request, process_zone=zone)
        return self.kits[key]


CUSTOM_FILES = {
    "AGENTS.md": "# Agents\n\nBe brief.\n\n---\n\nNever guess. ☕\n",
    "SOUL.md": "I am a careful helper.\n",
    "USER.md": "The user writes in 日本語 and English.\n",
    "memory/MEMORY.md": "# Memory\n\n- prefers metric units\n",
    "memory/history.jsonl": json.dumps(
        {
            "cursor": 1,
            "timestamp": "2025-01-01 10:00",
            "content": "asked about tides",
            "session_key": KEY,
        }
    )
    + "\n",
    "skills/tide-tables/SKILL.md": "---\nname: tide-tables\ndescription: Read tide tables.\n---\n\nUse the table.\n",
    "skills/always-polite/SKILL.md": "---\nname: always-polite\ndescription: Politeness.\nalways: true\n---\n\nSay please.\n",
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("request022")


@pytest.fixture(scope="module")
def lab(folder: Path) -> Iterator[Lab]:
    driver = Driver(release("0.2.2").python, folder)
    yield Lab(folder, driver)
    driver.close()


def _stamp(clock: datetime, zone: str) -> str:
    """The time stamp ``add_message`` writes at ``clock`` in a process whose zone is ``zone``."""
    return clock.astimezone(ZoneInfo(zone)).replace(tzinfo=None).isoformat()


def _rebuild(kit: dict[str, Any], case: dict[str, Any], zone: str) -> list[dict[str, Any]]:
    user = {
        "role": "user",
        "content": case["text"],
        "timestamp": _stamp(datetime.fromisoformat(case["clock"]), zone),
        "media": case.get("media", []),
    }
    current = rq.current_message(kit, user)
    return rq.loop_messages(
        kit["system_text"],
        case["history"],
        current,
        case.get("steps", []),
        kit=kit,
        session_key=KEY,
    )


def _check_request(lab: Lab, case: dict[str, Any], zone: str = "UTC") -> None:
    workspace = case.pop("workspace", lab.template)
    config = lab.config(case.pop("defaults", None))
    kit = lab.kit(workspace, config, zone)
    call = lab.driver(
        op="request", workspace=str(workspace), config=config, process_zone=zone, **case
    )["calls"][0]
    mine = _rebuild(kit, case, zone)
    assert _round_trip(mine) == call["messages"]
    assert _round_trip(rq.wire_messages(mine, kit=kit)) == call["wire"]
    assert rq.estimate_request(mine, kit["tools"], count) == call["estimate"]
    assert call["tools"] == kit["tools"]


def _calls(*ids: str, args: Any = "{}", name: str = "exec", **extra: Any) -> dict[str, Any]:
    calls = [
        {"id": i, "type": "function", "function": {"name": name, "arguments": args}} for i in ids
    ]
    return {"role": "assistant", "content": "", "tool_calls": calls, **extra}


def _result(call_id: str, content: Any, name: str = "exec") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


USER = {"role": "user", "content": "earlier question"}
CLOCK = "2025-03-09T06:59:30+00:00"
HAND_MADE: dict[str, dict[str, Any]] = {
    "first turn": {"history": [], "text": "hello"},
    "empty assistant text with tool calls": {
        "history": [
            USER,
            _calls("a"),
            _result("a", "fine"),
            {"role": "assistant", "content": "ok"},
        ],
        "text": "next",
        "steps": [_calls("b", "c"), _result("b", "one"), _result("c", "two")],
    },
    "orphan and missing tool results": {
        "history": [USER, _result("zz", "orphan"), _calls("a", "b"), _result("a", "only a")],
        "text": "go on",
        "steps": [_calls("s"), _result("ghost", "no call")],
    },
    "adjacent user messages": {
        "history": [
            USER,
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "still there?"},
        ],
        "text": "hello again",
    },
    "adjacent user with list content": {
        "history": [
            {"role": "user", "content": [{"type": "text", "text": "see", "_meta": {"k": 1}}]}
        ],
        "text": "and this",
    },
    "empty previous user": {"history": [{"role": "user", "content": ""}], "text": "x"},
    "meta keys and extra fields": {
        "history": [
            {"role": "user", "content": "a", "timestamp": "2025-01-01T00:00:00", "_meta": {"x": 1}},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": ""},
                    {"type": "text", "text": "kept", "_meta": {"path": "/p"}},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,AA"},
                        "_meta": {"path": "/i.png"},
                    },
                ],
                "_channel_delivery": True,
            },
        ],
        "text": "b",
    },
    "dict content and empty list": {
        "history": [
            USER,
            {"role": "assistant", "content": {"type": "text", "text": "d"}},
            {"role": "user", "content": []},
        ],
        "text": "c",
    },
    "reasoning fields": {
        "history": [
            USER,
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "think",
                "thinking_blocks": [{"type": "thinking", "thinking": "t"}],
            },
        ],
        "text": "why",
        "steps": [_calls("r", reasoning_content="plan ✓"), _result("r", "done")],
    },
    "unicode": {
        "history": [{"role": "user", "content": "Zürich 🐈 東京 ﷽ e\u0301"}],
        "text": "ça va? 👋🏽",
    },
    "history starts with assistant": {
        "history": [{"role": "assistant", "content": "hi, I'm back"}],
        "text": "yes",
    },
    "duplicate call ids and odd arguments": {
        "history": [USER],
        "text": "dup",
        "steps": [
            {
                "role": "assistant",
                "content": "checking",
                "tool_calls": [
                    {
                        "id": "d",
                        "type": "function",
                        "function": {"name": "exec", "arguments": {"cmd": "ls"}},
                    },
                    {"id": "d", "type": "function", "function": {"name": "exec", "arguments": ""}},
                    {"id": "e", "type": "function", "function": {"name": "exec"}},
                    {
                        "id": "f",
                        "type": "function",
                        "function": {"name": "exec", "arguments": "[1]"},
                    },
                ],
            },
            _result("d", "first"),
            _result("d", "second"),
            _result("e", "third"),
            _result("f", "fourth"),
        ],
    },
    "empty tool results": {
        "history": [USER],
        "text": "e",
        "steps": [
            _calls("1", "2", "3", "4"),
            _result("1", None),
            _result("2", "  "),
            _result("3", []),
            _result("4", [{"type": "text", "text": " "}]),
        ],
    },
    "long tool results offloaded": {
        "history": [
            USER,
            _calls("h"),
            _result("h", "h" * 1500),
            {"role": "assistant", "content": "ok"},
        ],
        "text": "more",
        "steps": [
            _calls("l", "m", "r"),
            _result("l", "é" * 1300),
            _result(
                "m", [{"type": "text", "text": "a" * 700}, {"type": "text", "text": "b" * 700}]
            ),
            _result("r", "r" * 1500, name="read_file"),
        ],
        "defaults": {"maxToolResultChars": 1200},
    },
    "tiny tool result budget": {
        "history": [USER],
        "text": "tiny",
        "steps": [_calls("t"), _result("t", "t" * 900)],
        "defaults": {"maxToolResultChars": 50},
    },
    "microcompact": {
        "history": [USER],
        "text": "many",
        "steps": [
            message
            for i in range(13)
            for message in (
                _calls(f"k{i}", name="grep"),
                _result(f"k{i}", f"{i} " * 300, name="grep"),
            )
        ],
    },
    "special tokens": {"history": [{"role": "user", "content": "say <|endoftext|>"}], "text": "ok"},
    "image in the current message": {
        "history": [],
        "text": "look",
        "media": ["<image>", "/nonexistent.png"],
    },
    "image merged into a user tail": {
        "history": [{"role": "user", "content": "first"}],
        "text": "look",
        "media": ["<image>"],
    },
    "custom workspace": {"history": [USER], "text": "who am I", "workspace": "custom"},
}


@pytest.mark.parametrize("name", sorted(HAND_MADE))
def test_request_hand_made(lab: Lab, name: str) -> None:
    case = copy.deepcopy(HAND_MADE[name])
    case.setdefault("clock", CLOCK)
    case["media"] = [str(lab.image) if m == "<image>" else m for m in case.get("media", [])]
    if case.get("workspace") == "custom":
        case["workspace"] = lab.custom
    _check_request(lab, case)


@pytest.mark.parametrize("tight", [0, 300, 2500])
def test_request_trimmed_to_the_block_limit(lab: Lab, tight: int) -> None:
    kit = lab.kit(lab.template, None)
    fixed = rq.estimate_request(
        [{"role": "system", "content": kit["system_text"]}], kit["tools"], count
    )
    history = []
    for i in range(12):
        history += [{"role": "user", "content": f"question {i} " * 20}, _calls(f"q{i}")]
        history += [
            _result(f"q{i}", f"answer {i} " * 40),
            {"role": "assistant", "content": f"done {i}"},
        ]
    case = {
        "history": history,
        "text": "last",
        "clock": CLOCK,
        "defaults": {"contextBlockLimit": fixed + tight},
    }
    _check_request(lab, case)


CLOCKS = [
    "2024-03-10T06:59:59+00:00",
    "2024-03-10T07:00:00+00:00",
    "2024-11-03T05:30:00+00:00",
]
ZONES = ["UTC", "America/New_York", "Asia/Kolkata", "", "Not/AZone"]


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_clock_in_the_runtime_context(lab: Lab, zone: str) -> None:
    """The clock line for a process in ``zone`` and each configured zone (set on the loop's
    context builder as the config sets it; the config route is checked once below)."""
    kit = lab.kit(lab.template, None, zone)
    for configured in ZONES:
        zoned = {**kit, "settings": {**kit["settings"], "timezone": configured}}
        for clock in CLOCKS:
            case = {"history": [], "text": "t", "clock": clock}
            call = lab.driver(
                op="request",
                workspace=str(lab.template),
                timezone=configured,
                process_zone=zone,
                **case,
            )
            assert _round_trip(_rebuild(zoned, case, zone)) == call["calls"][0]["messages"]


def test_clock_zone_from_the_config(lab: Lab) -> None:
    case = {
        "history": [],
        "text": "t",
        "clock": CLOCKS[2],
        "defaults": {"timezone": "Asia/Kolkata"},
    }
    _check_request(lab, case, "America/New_York")


def _probe(workspace: Path, runtime: dict[str, Any], home: Path) -> dict[str, Any]:
    """The probe as sessionkit runs it: its own process, the request on stdin."""
    request = {"workspace": str(workspace), "config": None, "channel": "cli", "runtime": runtime}
    env = _harness_env(True, {"TZ": "UTC", "HOME": str(home)})
    proc = subprocess.run(
        [str(release("0.2.2").python), "-I", str(PROBE)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


TEMPLATE_PARTS = ["identity", "bootstrap", "tool contract", "active skills", "skills summary"]
CUSTOM_PARTS = TEMPLATE_PARTS[:3] + ["memory", *TEMPLATE_PARTS[3:], "recent history"]


@pytest.mark.parametrize(
    ("name", "channel"), [("template", "cli"), ("custom", "cli"), ("template", "api")]
)
def test_probe_kit_is_the_loops_prompt_and_tools(lab: Lab, name: str, channel: str) -> None:
    workspace = getattr(lab, name)
    kit = lab.kit(workspace, None, channel=channel)
    assert [p["part"] for p in kit["system"]] == (
        CUSTOM_PARTS if name == "custom" else TEMPLATE_PARTS
    )
    assert kit["joiner"].join(p["text"] for p in kit["system"]) == kit["system_text"]
    turn = {"text": "hi", "clock": CLOCK, "replies": [{"content": "hello"}]}
    chat_id = kit["runtime"]["chat_id"]
    done = lab.driver(
        op="converse",
        workspace=str(workspace),
        turns=[turn],
        session_key=f"{channel}:{chat_id}",
        channel=channel,
        chat_id=chat_id,
    )
    (call,) = done["turns"][0]
    assert call["messages"][0] == {"role": "system", "content": kit["system_text"]}
    assert call["tools"] == kit["tools"]
    stored_user = next(m for m in done["session"]["messages"] if m["role"] == "user")
    assert call["messages"][-1] == rq.current_message(kit, stored_user)
    if name == "custom":
        texts = {p["part"]: p["text"] for p in kit["system"]}
        assert "Never guess. ☕" in texts["bootstrap"]
        assert "prefers metric units" in texts["memory"]
        assert "Say please." in texts["active skills"]
        assert "tide-tables" in texts["skills summary"]
        assert "asked about tides" in texts["recent history"]


def test_probe_process_only_reads_and_takes_overrides(lab: Lab, folder: Path) -> None:
    """The probe as its own process: the workspace's bytes and the home folder untouched, the
    process facts overridden in the identity and the runtime, everything else as in-process."""
    home = folder / "probe-home"
    before = _tree(lab.custom)
    runtime = {
        "system": "Darwin",
        "machine": "arm64",
        "python_version": "3.12.1",
        "timezone": "Asia/Tokyo",
        "chat_id": "c9",
        "sender_id": "u7",
    }
    kit = _probe(lab.custom, runtime, home)
    assert _tree(lab.custom) == before
    assert not (home / ".nanobot").exists()
    plain = lab.kit(lab.custom, None)
    assert kit["runtime"] == {**plain["runtime"], **runtime}
    assert "macOS arm64, Python 3.12.1" in kit["system"][0]["text"]
    assert kit["system"][0]["text"] != plain["system"][0]["text"]
    assert {**kit, "system": kit["system"][1:], "system_text": "", "runtime": {}} == {
        **plain,
        "system": plain["system"][1:],
        "system_text": "",
        "runtime": {},
    }
    user = {"role": "user", "content": "hi", "timestamp": "2025-01-01T09:00:00"}
    text = rq.current_message(kit, user)["content"]
    assert "2025-01-01 00:00 (Wednesday) (UTC, UTC+00:00)" in text
    assert "Chat ID: c9\nSender ID: u7" in text


def _tree(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
        for p in sorted(root.rglob("*"))
    }


def _converse(lab: Lab, turns: list[dict[str, Any]], tools: list[str]) -> dict[str, Any]:
    """``turns`` through the release's loop on a session of its own (one shared workspace)."""
    workspace = lab.folder / "talk"
    if not workspace.exists():
        lab._workspace("talk", {})
    lab.sessions += 1
    key = f"cli:talk{lab.sessions}"
    done = lab.driver(
        op="converse", workspace=str(workspace), tools=tools, turns=turns, session_key=key
    )
    return {"kit": lab.kit(workspace, None), "key": key, **done}


def _rebuilt_turns(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every recorded call next to sessionkit's rebuild of it from the saved session."""
    messages = result["session"]["messages"]
    kit = {**result["kit"], "tools": result["turns"][0][0]["tools"]}
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    limits = kit["settings"]
    rebuilt = []
    for turn, start in enumerate(users):
        end = users[turn + 1] if turn + 1 < len(users) else len(messages)
        history = get_policy("nanobot-0.2").get_history(
            messages[:start],
            result["session"]["last_consolidated"],
            limits["max_messages"],
            max_tokens=limits["history_max_tokens"],
            include_timestamps=True,
            extend_to_user=False,
        )
        current = rq.current_message(kit, messages[start])
        steps = rq.turn_steps(messages[start + 1 : end])
        assert len(steps) == len(result["turns"][turn])
        for step, call in zip(steps, result["turns"][turn], strict=True):
            mine = rq.loop_messages(
                kit["system_text"], history, current, step, kit=kit, session_key=result["key"]
            )
            rebuilt.append(
                {
                    "call": call,
                    "messages": _round_trip(mine),
                    "wire": _round_trip(rq.wire_messages(mine, kit=kit)),
                    "estimate": rq.estimate_request(mine, kit["tools"], count),
                }
            )
    return rebuilt


def _tool_call(call_id: str, name: str, result: Any) -> dict[str, Any]:
    arguments = {} if result is None else {"result": result}
    return {"id": call_id, "name": name, "arguments": arguments}


CONVERSATION = [
    {
        "text": "find the tide",
        "clock": "2025-06-01T08:00:00+00:00",
        "replies": [
            {
                "content": "",
                "tool_calls": [_tool_call("a1", "exec", "low at 6"), _tool_call("a2", "grep", "")],
            },
            {
                "content": "Let me look.",
                "reasoning_content": "need more",
                "tool_calls": [_tool_call("a3", "note", None)],
            },
            {"content": "Low tide at 6. 🌊"},
        ],
    },
    {
        "text": "and a long listing",
        "clock": "2025-06-01T08:05:10+00:00",
        "media": ["<image>"],
        "replies": [
            {"content": None, "tool_calls": [_tool_call("b1", "exec", "line\n" * 4000)]},
            {
                "content": "",
                "tool_calls": [
                    _tool_call("b2", "web_fetch", [{"type": "text", "text": "page " * 10}])
                ],
            },
            {"content": "Here it is.", "thinking_blocks": [{"type": "thinking", "thinking": "ok"}]},
        ],
    },
    {
        "text": "thanks — 谢谢",
        "clock": "2025-06-02T21:00:00+00:00",
        "replies": [{"content": "Any time."}],
    },
]


def test_converse_rebuilds_every_call(lab: Lab) -> None:
    turns = copy.deepcopy(CONVERSATION)
    turns[1]["media"] = [str(lab.image)]
    result = _converse(lab, turns, ["exec", "grep", "note", "web_fetch"])
    rebuilt = _rebuilt_turns(result)
    assert len(rebuilt) == 7
    for one in rebuilt:
        assert one["messages"] == one["call"]["messages"]
        assert one["wire"] == one["call"]["wire"]
        assert one["estimate"] == one["call"]["estimate"]


def test_a_long_read_file_result_is_cut_at_save(lab: Lab) -> None:
    long = "x" * 20_000
    turns = [
        {
            "text": "read it",
            "clock": CLOCK,
            "replies": [
                {"content": "", "tool_calls": [_tool_call("r1", "read_file", long)]},
                {"content": "read"},
            ],
        }
    ]
    result = _converse(lab, turns, ["read_file"])
    first, second = _rebuilt_turns(result)
    assert first["messages"] == first["call"]["messages"]
    saved = next(m for m in result["session"]["messages"] if m["role"] == "tool")
    assert rq.changed_at_save(saved, result["kit"])
    cut = long[:16_000] + result["kit"]["markers"]["truncated_suffix"]
    assert second["call"]["messages"][-1]["content"] == long
    assert second["messages"][-1]["content"] == cut
    assert second["messages"][:-1] == second["call"]["messages"][:-1]


def test_turn_steps_and_save_only_keys() -> None:
    a = {"role": "assistant", "content": "", "tool_calls": [{"id": "1"}], "timestamp": "t"}
    t = {"role": "tool", "tool_call_id": "1", "name": "n", "content": "r", "timestamp": "t"}
    b = {**a, "tool_calls": [{"id": "2"}]}
    final = {"role": "assistant", "content": "end", "timestamp": "t", "latency_ms": 5}
    bare = [{k: v for k, v in m.items() if k != "timestamp"} for m in (a, t, b, t)]
    assert rq.turn_steps([a, t, b, t, final]) == [[], bare[:2], bare]
    assert rq.turn_steps([final]) == [[]]
    assert rq.turn_steps([]) == [[]]
    assert rq.turn_steps([t, final]) == [[]]


def test_changed_at_save_tells_cut_results_the_loop_kept_whole(lab: Lab) -> None:
    kit = lab.kit(lab.template, None)
    cut = "x" * 16_000 + kit["markers"]["truncated_suffix"]
    assert rq.changed_at_save(_result("r", cut, name="read_file"), kit)
    assert rq.changed_at_save(_result("r", [{"type": "text", "text": cut}]), kit)
    assert not rq.changed_at_save(_result("r", cut), kit)
    assert not rq.changed_at_save(_result("r", cut[:-1], name="read_file"), kit)
    assert not rq.changed_at_save({"role": "assistant", "content": cut}, kit)


@pytest.mark.parametrize("workspace", ["template", "custom"])
def test_system_prompt_with_the_archived_summary(lab: Lab, workspace: str) -> None:
    root = getattr(lab, workspace)
    kit = lab.kit(root, None)
    assert rq.system_prompt(kit, None) == kit["system_text"]
    for text, active in (
        ("We spoke of tides. 🌊", "2025-06-01T08:05:10.123456"),
        ("", "2025-06-01 08:05"),
    ):
        summary = {"text": text, "last_active": active}
        wanted = lab.driver(
            op="system", workspace=str(root), summary=text, last_active=active, session_key=KEY
        )
        assert rq.system_prompt(kit, summary) == wanted


# Generated requests: histories, steps and settings drawn from small vocabularies so that
# ids collide, results go missing or orphaned, and texts hit every clean-up rule.
TEXT = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30),
    st.sampled_from(["", " ", "ok", "<|endoftext|>", "naïve 🐈 東京", "x" * 600, "é" * 1300]),
)
IDS = st.sampled_from(["a", "b", "c", "a:b"])
NAMES = st.sampled_from(["exec", "grep", "read_file", "note", "web_fetch"])
BLOCK = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, TEXT),
    st.builds(lambda t: {"type": "text", "text": t, "_meta": {"path": "/m"}}, TEXT),
    st.just(
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64,AAAA"},
            "_meta": {"path": "/i.png"},
        }
    ),
)
CONTENT = st.one_of(TEXT, st.lists(BLOCK, max_size=3), st.none())
CALL = st.builds(
    lambda i, n, a: {"id": i, "type": "function", "function": {"name": n, "arguments": a}},
    IDS,
    NAMES,
    st.sampled_from(["{}", '{"q": "x"}', "", {"k": 1}]),
)
ASSISTANT = st.builds(
    lambda content, calls, extra: {
        "role": "assistant",
        "content": content,
        **({"tool_calls": calls} if calls else {}),
        **extra,
    },
    st.one_of(TEXT, st.none()),
    st.lists(CALL, max_size=2),
    st.sampled_from(
        [
            {},
            {"reasoning_content": "hm"},
            {"thinking_blocks": [{"type": "thinking", "thinking": "t"}]},
        ]
    ),
)
TOOL = st.builds(
    lambda i, n, c: {"role": "tool", "tool_call_id": i, "name": n, "content": c},
    IDS,
    NAMES,
    CONTENT,
)
USER_MESSAGE = st.builds(lambda c: {"role": "user", "content": c}, CONTENT)
HISTORY = st.lists(st.one_of(USER_MESSAGE, ASSISTANT, TOOL), max_size=8)
ROUND = st.builds(
    lambda a, results: [a, *results],
    ASSISTANT.filter(lambda m: m.get("tool_calls")),
    st.lists(TOOL, max_size=2),
)
STEPS = st.builds(lambda rounds: [m for r in rounds for m in r], st.lists(ROUND, max_size=3))
CLOCK_DRAW = st.datetimes(
    min_value=datetime(2001, 1, 1), max_value=datetime(2035, 1, 1), timezones=st.just(UTC)
)
DEFAULTS = st.sampled_from(
    [None, {"maxToolResultChars": 500, "timezone": "Europe/Berlin"}, {"contextBlockLimit": 1}]
)


def _generated(lab: Lab, data: tuple[Any, ...]) -> None:
    history, text, steps, clock, defaults, media = data
    case = {
        "history": history,
        "text": text,
        "steps": steps,
        "clock": clock.isoformat(),
        "defaults": defaults,
    }
    if media:
        case["media"] = [str(lab.image)]
    _check_request(lab, case)


REQUESTS = st.tuples(HISTORY, TEXT, STEPS, CLOCK_DRAW, DEFAULTS, st.booleans())


@settings(max_examples=12)
@given(data=REQUESTS)
def test_request_generated(lab: Lab, data: tuple[Any, ...]) -> None:
    _generated(lab, data)


@pytest.mark.sampled
@settings(max_examples=examples(1000, 20))
@given(data=REQUESTS)
def test_request_generated_more(lab: Lab, data: tuple[Any, ...]) -> None:
    _generated(lab, data)


RESULT = st.one_of(st.none(), st.sampled_from(["", "ok", "x" * 700, "日本 🐈"]), TEXT)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Turns of scripted replies: tool rounds (unique ids, fake tools) then a final text."""
    turns = []
    for turn in range(draw(st.integers(1, 3))):
        replies = []
        for rnd in range(draw(st.integers(0, 3))):
            names = draw(
                st.lists(
                    st.sampled_from(["exec", "grep", "note", "read_file"]), min_size=1, max_size=2
                )
            )
            calls = [_tool_call(f"t{turn}r{rnd}c{i}", n, draw(RESULT)) for i, n in enumerate(names)]
            extra = draw(st.sampled_from([{}, {"reasoning_content": "why"}]))
            replies.append(
                {
                    "content": draw(st.sampled_from(["", None, "Checking."])),
                    "tool_calls": calls,
                    **extra,
                }
            )
        replies.append({"content": draw(TEXT.filter(str.strip))})
        clock = datetime(2025, 6, 1, 8, tzinfo=UTC).replace(minute=turn * 7)
        turns.append(
            {"text": draw(TEXT.filter(str.strip)), "clock": clock.isoformat(), "replies": replies}
        )
    return turns


@pytest.mark.sampled
@settings(max_examples=examples(100, 2))
@given(turns=conversations())
def test_converse_generated(lab: Lab, turns: list[dict[str, Any]]) -> None:
    result = _converse(lab, turns, ["exec", "grep", "note", "read_file"])
    for one in _rebuilt_turns(result):
        assert one["messages"] == one["call"]["messages"]
        assert one["wire"] == one["call"]["wire"]
        assert one["estimate"] == one["call"]["estimate"]
