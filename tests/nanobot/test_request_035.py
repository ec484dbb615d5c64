"""nanobot 0.3.5's whole request: sessionkit's rebuild (``request_035``) and kit (``probe_035``)
against the release's own code on the same inputs.

The release runs in its own environment (``releases.py``): its context builder and tool
registry composed as the gateway composes them, its loop clean-up, its provider's clean-up,
its estimate, its persistence of a turn (``release_requests_035``).  Results are compared as
JSON text, so key order counts.  Each differential test asserts how many cases it compared.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from support.releases import REPO, Release, release
from support.sampling import examples

from sessionkit.nanobot import request_035 as rq
from sessionkit.nanobot.tokens import encoding

PROBE = REPO / "sessionkit" / "nanobot" / "probes" / "probe_035.py"
SCENARIOS = "release_requests_035:batch"
PLACEHOLDER, CONTINUATION = "<placeholder>", "<continuation>"
"""Stand-ins for nanobot's texts in hand-made and generated cases, swapped for the kit's."""

AGENTS_MD = "# Rules\n\nUse tabs.\n\n---\n\nNever push on Fridays. 日本語 🙂\n"
SKILL_TIDY = (
    "---\nname: tidy\ndescription: Keep the workspace tidy.\n"
    'metadata: \'{"nanobot": {"always": true}}\'\n---\n\n# Tidy\n\nPut files away.\n'
)
SKILL_SKETCH = (
    "---\nname: sketch\ndescription: Draw quick diagrams.\n---\n\n# Sketch\n\nUse boxes.\n"
)
CUSTOM_FILES = {
    "AGENTS.md": AGENTS_MD,
    "SOUL.md": "I am terse.\n",
    "USER.md": "The user is Ada.\n",
    "memory/MEMORY.md": "- likes trains\n",
    "skills/tidy/SKILL.md": SKILL_TIDY,
    "skills/sketch/SKILL.md": SKILL_SKETCH,
}
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True)


@cache
def _count() -> Callable[[str], int]:
    enc = encoding()
    return lambda text: len(enc.encode(text))


def _failing_count(text: str) -> int:
    raise ValueError("no encoder here")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["HOME"] = str(home)
    return env


def _probe(nb: Release, request: dict[str, Any], home: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [str(nb.python), "-I", str(PROBE)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=_env(home),
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _listing(*roots: Path) -> list[tuple[str, str]]:
    """Every path under ``roots`` with a digest of its bytes (folders: "dir")."""
    found = []
    for root in roots:
        for path in sorted(root.rglob("*")):
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
            found.append((str(path), digest))
    return found


def _config(path: Path, workspace: Path, tools: dict[str, Any] | None = None) -> Path:
    config = {
        "agents": {
            "defaults": {
                "workspace": str(workspace),
                "model": "stub-model",
                "provider": "custom",
                "timezone": "UTC",
            }
        },
        "providers": {"custom": {"apiKey": "sk-never-used", "apiBase": "http://127.0.0.1:9"}},
    }
    if tools:
        config["tools"] = tools
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def nb035() -> Release:
    return release("0.3.5")


@pytest.fixture(scope="module")
def world(nb035: Release, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A template workspace and a customised one, each with its config, probed once; the
    release's own results for every hand-made case, asked in one process."""
    root = tmp_path_factory.mktemp("requests035")
    home = root / "home"
    home.mkdir()
    template, custom = root / "template" / "workspace", root / "custom" / "workspace"
    template.mkdir(parents=True)
    for name, text in CUSTOM_FILES.items():
        (custom / name).parent.mkdir(parents=True, exist_ok=True)
        (custom / name).write_text(text, encoding="utf-8")
    configs = {
        "template": _config(template.parent / "config.json", template),
        "custom": _config(custom.parent / "config.json", custom, {"web": {"enable": False}}),
    }
    request = {
        "workspace": str(template),
        "config": str(configs["template"]),
        "channel": "telegram",
    }
    overrides = {"system": "Darwin", "machine": "arm64", "python_version": "3.12.1"}
    made = [
        ["template_workspace", {"path": str(template)}],
        ["kit", {"probe": str(PROBE), "request": {**request, "runtime": {}}}],
        ["kit", {"probe": str(PROBE), "request": {**request, "runtime": overrides}}],
    ]
    [reply] = nb035.run(SCENARIOS, [{"args": [made]}], env={"HOME": str(home)})
    synced, plain, overridden = (r["returned"] for r in reply["returned"])
    assert synced, reply
    kits = {"template": plain, "overridden": overridden}
    before = _listing(custom.parent, home)
    request = {"workspace": str(custom), "config": str(configs["custom"]), "channel": "telegram"}
    kits["custom"] = _probe(nb035, {**request, "runtime": {}}, home)
    residue = (before, _listing(custom.parent, home))
    cases = _hand_made_calls(kits["template"], template, custom, configs, root)
    [reply] = nb035.run(
        SCENARIOS, [{"args": [[call for _, call in cases]]}], env={"HOME": str(home)}
    )
    theirs = dict(zip([name for name, _ in cases], reply["returned"], strict=True))
    return {
        "kits": kits,
        "residue": residue,
        "theirs": theirs,
        "template": template,
        "custom": custom,
        "media": root / "media",
    }


# --- hand-made cases ------------------------------------------------------------------------


def _call(*ids: str, name: Any = "exec", arguments: Any = "{}") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": name, "arguments": arguments}}
            for i in ids
        ],
    }


def _result(call_id: Any, content: Any = "ok", name: str = "exec") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def _marked(text: str, *blocks: str, sources: list[str] | None = None) -> dict[str, Any]:
    suffix = "\n\n".join(blocks)
    marker = {"version": 1, "sources": sources or ["ctx"] * len(blocks), "suffix": suffix}
    content = f"{text}\n\n{suffix}" if text else suffix
    return {"role": "user", "content": content, "_meta": {"runtime_context": marker}}


CONTEXT = "[Runtime Context]\nGoal: ship it\n[/Runtime Context]"
BLOCKS_MARKER = {"version": 1, "sources": ["a"], "blocks": [{"type": "text", "text": CONTEXT}]}

LOOP_CASES: dict[str, dict[str, Any]] = {
    "plain": {
        "history": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        "current": {"role": "user", "content": "how are you?"},
        "steps": [],
    },
    "tool round, empty assistant text": {
        "history": [],
        "current": _marked("list files", CONTEXT),
        "steps": [_call("c1", "c2"), _result("c1", "a.txt"), _result("c2", "b.txt")],
    },
    "orphan and duplicate tool results": {
        "history": [
            _result("ghost"),
            {"role": "user", "content": "go"},
            _call("c1"),
            _result("c1"),
            _result("c1", "again"),
            _result(""),
            {"role": "assistant", "content": "done"},
        ],
        "current": {"role": "user", "content": "next"},
        "steps": [_call("c9"), _result("c8")],
    },
    "missing tool results backfilled": {
        "history": [{"role": "user", "content": "go"}, _call("c1", "c2", "c3"), _result("c2")],
        "current": {"role": "user", "content": "and?"},
        "steps": [_call("s1", "s2"), _result("s2")],
    },
    "adjacent user messages": {
        "history": [
            {"role": "user", "content": "first"},
            {"role": "user", "content": ""},
            {"role": "user", "content": f"second\n\n{CONTEXT}"},
        ],
        "current": _marked("third", CONTEXT, "Note: b"),
        "steps": [],
    },
    "adjacent users with markers on both": {
        "history": [
            _marked("left", "L1"),
            {"role": "assistant", "content": "x"},
            _marked("", "L2"),
        ],
        "current": _marked("right", "R1", "R2", sources=["r1", "r2"]),
        "steps": [{"role": "user", "content": "injected", "_meta": {"other": 1}}],
    },
    "block markers and list contents": {
        "history": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "see"}, {"type": "text", "text": CONTEXT}],
                "_meta": {"runtime_context": BLOCKS_MARKER, "x": 1},
            }
        ],
        "current": {
            "role": "user",
            "content": [
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,AAAA"},
                    "_meta": {"path": "/tmp/p.png"},
                },
                {"type": "text", "text": "what is it?"},
                {"type": "text", "text": ""},
                {"type": "text", "text": CONTEXT},
            ],
            "_meta": {"runtime_context": BLOCKS_MARKER},
        },
        "steps": [],
    },
    "marker that no longer matches": {
        "history": [{"role": "user", "content": "a", "_meta": {"runtime_context": BLOCKS_MARKER}}],
        "current": {
            "role": "user",
            "content": "b",
            "_meta": {"runtime_context": {"version": 2, "suffix": "b"}},
        },
        "steps": [],
    },
    "state boundary and hidden messages do not merge": {
        "history": [
            {"role": "user", "content": "a", "_meta": {"provider_state_boundary": True}},
            {"role": "user", "content": "b"},
            {"role": "user", "content": CONTINUATION, "_hidden_history": True},
            {"role": "user", "content": "c", "_automation_turn": {"kind": "cron"}},
            {"role": "user", "content": "d", "_cron_turn": True},
        ],
        "current": {"role": "user", "content": "e"},
        "steps": [],
    },
    "reasoning fields and meta keys": {
        "history": [
            {"role": "user", "content": "think"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "because",
                "thinking_blocks": [{"type": "thinking", "thinking": "hmm"}],
                "extra_content": {"google": {"thought": True}},
                "_meta": {"provider_state_output": True},
                "timestamp": "2026-01-01T00:00:00",
            },
            {"role": "assistant", "content": "answer", "reasoning_content": None},
        ],
        "current": {"role": "user", "content": "more", "name": "ada"},
        "steps": [
            {**_call("r1"), "reasoning_content": "plan", "_meta": {"x": True}},
            {**_result("r1"), "_meta": {"y": 1}},
        ],
    },
    "unicode": {
        "history": [
            {"role": "user", "content": "résumé 日本語 🙂 \ud83d alone"},
            {"role": "assistant", "content": "emoji \U0001f600 and \udc00"},
        ],
        "current": {"role": "user", "content": "Ω≈ç √ \u2028 done"},
        "steps": [_call("u1", arguments='{"q": "日本"}'), _result("u1", "ünïcödé \ud800")],
    },
    "placeholders and malformed tool calls": {
        "history": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": f"  {PLACEHOLDER} "},
            {**_call("m1"), "content": PLACEHOLDER},
            _result("m1"),
            _call("m2", name=None),
            _result("m2"),
            {**_call("m3", name=""), "content": "kept text"},
            _result("m3"),
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "m4", "function": {"name": "exec", "arguments": "{}"}},
                    {"id": "m5", "name": "flat"},
                    {"id": "m6", "function": {"name": 3}},
                    "junk",
                ],
            },
            _result("m4"),
            _result("m5"),
            _result("m6"),
        ],
        "current": {"role": "user", "content": "y"},
        "steps": [],
    },
    "tool results over the limit": {
        "history": [
            {"role": "user", "content": "read"},
            _call("big1", "big2", "big3"),
            _result("big1", "x" * 17_000),
            _result("big2", "y" * 17_000, name="read_file"),
            _result("big3", [{"type": "text", "text": "z" * 16_500}, {"type": "image_url"}]),
        ],
        "current": {"role": "user", "content": "ok?"},
        "steps": [_call("a/b:c*1"), _result("a/b:c*1", "w" * 16_001)],
    },
    "tool results over a small limit": {
        "history": [{"role": "user", "content": "read"}, _call("s1", "s2")],
        "current": {"role": "user", "content": "ok?"},
        "steps": [
            _call("t1", "t2", "t3"),
            _result("t1", "q" * 90),
            _result("t2", "short"),
            _result("t3", [{"type": "text", "text": "p" * 2000}, {"type": "text", "text": 5}]),
        ],
        "max_chars": 60,
        "session_key": None,
    },
    "empty tool results": {
        "history": [{"role": "user", "content": "run"}, _call("e1", "e2", "e3", "e4", "e5")],
        "current": {"role": "user", "content": "and"},
        "steps": [
            _call("f1"),
            _result("e1", ""),
            _result("e2", None),
            _result("e3", [{"type": "text", "text": " "}]),
            _result("e4", []),
            {"role": "tool", "tool_call_id": "e5", "content": "  \n"},
            _result("f1", [{"type": "image_url", "image_url": {"url": "u"}}]),
        ],
    },
    "trailing assistants and a leading assistant": {
        "history": [{"role": "assistant", "content": "I start"}, {"role": "user", "content": "u"}],
        "current": {"role": "user", "content": "again"},
        "steps": [{"role": "assistant", "content": "cut"}, {"role": "assistant", "content": "off"}],
    },
    "only assistants": {
        "history": [{"role": "assistant", "content": "lonely"}],
        "current": {"role": "user", "content": "", "_hidden_history": True},
        "steps": [{"role": "assistant", "content": "tail"}],
    },
    "duplicate tool call ids in one message": {
        "history": [],
        "current": {"role": "user", "content": "twice"},
        "steps": [_call("d1", "d1", "d2"), _result("d1", "first"), _result("d2")],
    },
    "tool call arguments": {
        "history": [],
        "current": {"role": "user", "content": "args"},
        "steps": [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "a1",
                        "type": "function",
                        "function": {"name": "x", "arguments": {"k": 1}},
                    },
                    {"id": "a2", "type": "function", "function": {"name": "x", "arguments": ""}},
                    {"id": "a3", "type": "function", "function": {"name": "x", "arguments": "[1]"}},
                    {"id": "a4", "type": "function", "function": {"name": "x"}},
                    {"id": "a5", "function": {"name": "x", "arguments": ' {"a" :  "é"} '}},
                    {"id": "a6", "function": {"name": "x", "arguments": "null"}},
                    {"id": "a7", "function": "not a dict", "extra": 1},
                ],
            },
            *(_result(f"a{i}") for i in range(1, 8)),
        ],
    },
    "consecutive assistants and dict content": {
        "history": [
            {"role": "user", "content": {"type": "text", "text": "dict"}},
            {"role": "assistant", "content": "one"},
            {"role": "assistant", "content": [{"type": "text", "text": "two"}]},
            {"role": "assistant"},
            _call("k1"),
            {"role": "assistant", "content": "after calls"},
            _result("k1"),
            {"role": "user", "content": ["plain", 3]},
            {"role": "user", "content": None},
            {"role": "user", "content": "  spaced  "},
        ],
        "current": {"role": "user", "content": ""},
        "steps": [],
    },
}


def _materialised(value: Any, kit: dict[str, Any]) -> Any:
    """``value`` with the stand-ins for nanobot's texts replaced by the kit's."""
    texts = {
        PLACEHOLDER: kit["loop"]["placeholder_assistant"][0],
        CONTINUATION: kit["loop"]["continuation"],
    }
    text = json.dumps(value)
    for stand_in, real in texts.items():
        text = text.replace(json.dumps(stand_in)[1:-1], json.dumps(real)[1:-1])
    return json.loads(text)


def _loop_call(case: dict[str, Any], kit: dict[str, Any], workspace: Path) -> list[Any]:
    system = {"role": "system", "content": "You are a test.\n\n---\n\nBe exact."}
    messages = [system, *case["history"], case["current"], *case["steps"]]
    kwargs = {
        "messages": _materialised(messages, kit),
        "first_call": 2 + len(case["history"]),
        "workspace": str(workspace),
        "session_key": case.get("session_key", "telegram:ada/42"),
        "max_chars": case.get("max_chars", kit["loop"]["max_tool_result_chars"]),
    }
    return ["clean_up", kwargs]


CURRENT_CASES: dict[str, dict[str, Any]] = {
    "plain": {"text": "hello", "media": [], "blocks": []},
    "empty text, one block": {"text": "", "media": [], "blocks": [["goal", CONTEXT]]},
    "blank text, one block": {"text": "  ", "media": [], "blocks": [["goal", CONTEXT]]},
    "unicode, two blocks": {
        "text": "Grüße 日本 🙂",
        "media": [],
        "blocks": [["goal", "G: one"], ["cli_apps", "[CLI] two"]],
    },
    "a block with blank lines": {"text": "hi", "media": [], "blocks": [["goal", "A\n\nB"]]},
    "explicit skill": {"text": "please $sketch it", "media": [], "blocks": [], "custom": True},
    "images and attachments": {
        "text": "look",
        "media": ["pic.png", "notes.txt", "drawing.svg", "gone.jpg"],
        "blocks": [["goal", CONTEXT]],
    },
    "image only": {"text": "", "media": ["pic.png"], "blocks": []},
    "image and two blocks": {
        "text": "both",
        "media": ["pic.png"],
        "blocks": [["goal", "one"], ["cli_apps", "two"]],
    },
    "image and an ambiguous context": {
        "text": "x",
        "media": ["pic.png"],
        "blocks": [["goal", "A\n\nB"], ["cli_apps", "C"]],
    },
    "nothing at all": {"text": "", "media": [], "blocks": []},
}


def _media_folder(root: Path) -> Path:
    folder = root / "media"
    folder.mkdir(exist_ok=True)
    (folder / "pic.png").write_bytes(PNG)
    (folder / "notes.txt").write_text("notes\n", encoding="utf-8")
    (folder / "drawing.svg").write_text("<svg/>", encoding="utf-8")
    return folder


def _current_call(case: dict[str, Any], custom: Path, media: Path) -> list[Any]:
    kwargs = {
        "text": case["text"],
        "media": [str(media / name) for name in case["media"]],
        "blocks": case["blocks"],
        "workspace": str(custom) if case.get("custom") else None,
    }
    return ["current", kwargs]


USER = {"role": "user", "content": "do it", "timestamp": "2026-01-01T10:00:00"}
INJECTED = {
    "role": "user",
    "content": f"also this\n\n{CONTEXT}",
    "_meta": {"runtime_context": {"version": 1, "sources": ["goal"], "suffix": CONTEXT}},
    "_recovery_followup_id": "f1",
}
SUBAGENT = {
    "role": "user",
    "content": "subagent says hi",
    "_hidden_history": {"kind": "subagent_result", "subagent_task_id": "t1"},
    "subagent_task_id": "t1",
    "injected_event": "subagent_result",
}
SAVE_CASES: dict[str, dict[str, Any]] = {
    "one answer": {"appended": [{"role": "assistant", "content": "done"}]},
    "tool rounds": {
        "appended": [
            {**_call("c1", "c2"), "reasoning_content": "plan", "thinking_blocks": [{"t": 1}]},
            _result("c1", "one"),
            _result("c2", [{"type": "text", "text": "two"}]),
            _call("c3"),
            _result("c3", "three"),
            {"role": "assistant", "content": "finished"},
        ]
    },
    "injections, recovery, error": {
        "appended": [
            _call("c1"),
            _result("c1"),
            INJECTED,
            SUBAGENT,
            {"role": "assistant", "content": "partial"},
            {"role": "user", "content": "continue please"},
            {"role": "assistant", "content": "rest"},
            INJECTED,
            {"role": "assistant", "content": "[error placeholder]"},
        ]
    },
    "summary inside the turn": {
        "appended": [_call("c1"), _result("c1"), {"role": "assistant", "content": "ok"}],
        "checkpoint_at": 2,
    },
    "a delivery mirrored into the turn": {
        "prior": [{"role": "assistant", "content": "sent", "_channel_delivery": True}],
        "appended": [_call("c1"), _result("c1"), {"role": "assistant", "content": "ok"}],
    },
}


def _save_call(case: dict[str, Any]) -> list[Any]:
    history = [{"role": "user", "content": "before"}, {"role": "assistant", "content": "b"}]
    current = {"role": "user", "content": "do it"}
    transcript = [{"role": "system", "content": "s"}, *history, current, *case["appended"]]
    skip = 2 + len(history)
    checkpoint = case.get("checkpoint_at")
    kwargs = {
        "prior": [USER, *case.get("prior", [])],
        "transcript": transcript,
        "skip": skip,
        "checkpoint_at": None if checkpoint is None else skip + checkpoint,
    }
    return ["save_turn", kwargs]


ESTIMATE_CASES: dict[str, list[dict[str, Any]]] = {
    "empty": [],
    "one empty user": [{"role": "user", "content": ""}],
    "mixed": [
        {"role": "system", "content": "sys 日本"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}]},
        {**_call("c1"), "reasoning_content": "why", "name": "bot"},
        _result("c1", "res"),
        {"role": "user", "content": None, "name": 3, "tool_call_id": ""},
    ],
    "special tokens": [{"role": "user", "content": "say <|endoftext|> now"}],
}


UPDATED_AT = "2026-01-03T04:05:06.123456"


def _summaries(kit: dict[str, Any]) -> list[Any]:
    """Stored ``_last_summary`` values: usable, skipped, empty, odd times, not a mapping."""
    return [
        {"text": "we spoke of trains", "last_active": "2026-01-02T03:04:05+00:00"},
        {"text": "naïve time", "last_active": "2026-01-02 03:04"},
        {"text": kit["summary_skipped"], "last_active": "2026-01-02T03:04:05"},
        {"text": "", "last_active": "2026-01-02T03:04:05"},
        {"text": "no time"},
        {"text": "bad time", "last_active": "yesterday"},
        {"text": 5, "last_active": "2026-01-02T03:04:05"},
        "just text",
        None,
    ]


def _hand_made_calls(
    kit: dict[str, Any], template: Path, custom: Path, configs: dict[str, Path], root: Path
) -> list[tuple[str, list[Any]]]:
    media = _media_folder(root)
    tools = kit["tools"][:3]
    composed = {"channel": "telegram", "summaries": _summaries(kit), "updated_at": UPDATED_AT}
    calls: list[tuple[str, list[Any]]] = [
        (f"composed:{name}", ["composed", {"config_path": str(path), **composed}])
        for name, path in configs.items()
    ]
    calls += [(f"loop:{n}", _loop_call(c, kit, template)) for n, c in LOOP_CASES.items()]
    calls += [(f"current:{n}", _current_call(c, custom, media)) for n, c in CURRENT_CASES.items()]
    calls += [(f"save:{n}", _save_call(c)) for n, c in SAVE_CASES.items()]
    calls += [
        (
            f"estimate:{n}:{with_tools}",
            ["estimate", {"messages": m, "tools": tools if with_tools else None}],
        )
        for n, m in ESTIMATE_CASES.items()
        for with_tools in (False, True)
    ]
    return calls


def _returned(world: dict[str, Any], name: str) -> Any:
    result = world["theirs"][name]
    assert "returned" in result, result
    return result["returned"]


# --- the probe --------------------------------------------------------------------------------

PARTS = {
    "template": ["identity", "bootstrap", "tool contract", "skills summary"],
    "custom": [
        "identity",
        "bootstrap",
        "tool contract",
        "memory",
        "active skills",
        "skills summary",
    ],
}


@pytest.mark.conformance
@pytest.mark.parametrize("name", ["template", "custom"])
def test_probe_parts_join_to_the_release_prompt(world: dict[str, Any], name: str) -> None:
    kit, composed = world["kits"][name], _returned(world, f"composed:{name}")
    texts = [part["text"] for part in kit["system"]]
    assert [part["part"] for part in kit["system"]] == PARTS[name]
    assert kit["joiner"].join(texts) == kit["system_text"] == composed["system"]
    assert [p["inferred"] for p in kit["system"]] == [
        n in ("identity", "active skills", "skills summary") for n in PARTS[name]
    ]
    updated = datetime.fromisoformat(UPDATED_AT)
    ours = [rq.system_prompt(kit, value, updated_at=updated) for value in _summaries(kit)]
    assert ours == composed["summarised"]
    added = [p != kit["system_text"] for p in ours]
    assert added == [True, True, False, False, True, True, False, False, False]
    assert kit["current"] == {"role": "user", "content": "\u0000SK:text\u0000"}
    assert kit["sentinels"] == ["text"]


@pytest.mark.conformance
def test_probe_bootstrap_files_join_to_their_part(world: dict[str, Any]) -> None:
    bootstrap = world["kits"]["custom"]["system"][1]
    assert [f["part"] for f in bootstrap["files"]] == [
        "bootstrap:AGENTS.md",
        "bootstrap:SOUL.md",
        "bootstrap:USER.md",
    ]
    assert bootstrap["separator"].join(f["text"] for f in bootstrap["files"]) == bootstrap["text"]
    assert bootstrap["files"][0]["text"].endswith(AGENTS_MD)
    template = world["kits"]["template"]["system"][1]
    assert [f["part"] for f in template["files"]] == ["bootstrap:SOUL.md"]


@pytest.mark.conformance
@pytest.mark.parametrize(("name", "count"), [("template", 23), ("custom", 21)])
def test_probe_tools_equal_the_composed_registry(
    world: dict[str, Any], name: str, count: int
) -> None:
    tools = world["kits"][name]["tools"]
    assert _json(tools) == _json(_returned(world, f"composed:{name}")["tools"])
    assert len(tools) == count


@pytest.mark.conformance
def test_probe_leaves_workspace_and_home_as_they_were(world: dict[str, Any]) -> None:
    before, after = world["residue"]
    assert after == before
    assert len(before) > 2


@pytest.mark.conformance
def test_probe_runtime_overrides(world: dict[str, Any]) -> None:
    plain, overridden = world["kits"]["template"], world["kits"]["overridden"]
    assert {k: overridden["runtime"][k] for k in ("system", "machine", "python_version")} == {
        "system": "Darwin",
        "machine": "arm64",
        "python_version": "3.12.1",
    }
    assert "arm64, Python 3.12.1" in overridden["system"][0]["text"]
    assert overridden["system"][0]["text"] != plain["system"][0]["text"]
    assert [p["text"] for p in overridden["system"][1:]] == [p["text"] for p in plain["system"][1:]]
    assert overridden["tools"] == plain["tools"]


# --- the request functions against the release ----------------------------------------------


def _loop_kit(kit: dict[str, Any], max_chars: int) -> dict[str, Any]:
    return {**kit, "loop": {**kit["loop"], "max_tool_result_chars": max_chars}}


def _ours(case: dict[str, Any], kit: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    case = _materialised(case, kit)
    loop = rq.loop_messages(
        "You are a test.\n\n---\n\nBe exact.",
        case["history"],
        case["current"],
        case["steps"],
        kit=_loop_kit(kit, case.get("max_chars", kit["loop"]["max_tool_result_chars"])),
        session_key=case.get("session_key", "telegram:ada/42"),
    )
    loop = json.loads(json.dumps(loop))
    return loop, json.loads(json.dumps(rq.wire_messages(loop, kit=kit)))


def _compare_loop(kit: dict[str, Any], case: dict[str, Any], theirs: dict[str, Any]) -> None:
    loop, wire = _ours(case, kit)
    assert _json(loop) == _json(theirs["loop"])
    assert _json(wire) == _json(theirs["wire"])


@pytest.mark.conformance
@pytest.mark.parametrize("name", list(LOOP_CASES))
def test_loop_and_wire_messages_equal_0_3_5(world: dict[str, Any], name: str) -> None:
    _compare_loop(world["kits"]["template"], LOOP_CASES[name], _returned(world, f"loop:{name}"))


@pytest.mark.conformance
def test_hand_made_cases_reach_every_clean_up_rule(world: dict[str, Any]) -> None:
    kit = world["kits"]["template"]
    loops = {n: _returned(world, f"loop:{n}") for n in LOOP_CASES}
    wires = json.dumps([r["wire"] for r in loops.values()])
    loop_text = json.dumps([r["loop"] for r in loops.values()])
    assert json.dumps(kit["loop"]["backfill"])[1:-1] in loop_text
    assert "[tool output persisted]" not in json.dumps(LOOP_CASES)
    assert str(world["template"].resolve() / ".nanobot" / "tool-results") in loop_text
    assert json.dumps(kit["wire"]["synthetic_user"])[1:-1] in wires
    assert json.dumps(kit["wire"]["empty_content"])[1:-1] in wires
    assert '"content": null' in wires and "_meta" not in wires and "_meta" in loop_text


@pytest.mark.conformance
@pytest.mark.parametrize("name", list(CURRENT_CASES))
def test_current_message_equals_0_3_5(world: dict[str, Any], name: str) -> None:
    kit, theirs = world["kits"]["template"], _returned(world, f"current:{name}")
    stored = theirs["stored"] or {"role": "user", "content": "", "timestamp": "2026-01-01T00:00:00"}
    if name == "image and an ambiguous context":
        with pytest.raises(rq.NotOnDisk, match="blank lines"):
            rq.current_message(kit, stored)
        return
    assert _json(rq.current_message(kit, stored)) == _json(theirs["current"])
    assert (theirs["stored"] is None) == (name == "nothing at all")


@pytest.mark.conformance
def test_current_message_images_are_read_as_they_are_now(world: dict[str, Any]) -> None:
    kit, theirs = world["kits"]["template"], _returned(world, "current:image only")
    stored = theirs["stored"]
    assert stored["media"] == [str(world["media"] / "pic.png")]
    assert _json(rq.current_message(kit, stored)) == _json(theirs["current"])
    assert rq.current_message(kit, stored, images=[]) == {"role": "user", "content": ""}


def _in_memory_steps(appended: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """What the loop held before each call: everything before each assistant reply."""
    held = [m for m in appended]
    return [held[:i] for i, m in enumerate(held) if m["role"] == "assistant"]


def _without(message: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in keys}


@pytest.mark.conformance
@pytest.mark.parametrize("name", list(SAVE_CASES))
def test_turn_steps_undo_what_0_3_5_saved(world: dict[str, Any], name: str) -> None:
    case = SAVE_CASES[name]
    saved = _returned(world, f"save:{name}")
    turn = [*case.get("prior", []), *saved]
    expected = [
        [_without(m, "_recovery_followup_id") for m in step]
        for step in _in_memory_steps(case["appended"])
    ]
    assert _json(rq.turn_steps(turn)) == _json(expected)
    assert all("timestamp" in m for m in saved)


@pytest.mark.conformance
def test_saving_moves_the_runtime_marker_and_adds_a_checkpoint(world: dict[str, Any]) -> None:
    saved = _returned(world, "save:injections, recovery, error")
    assert saved[2]["_runtime_context"] == INJECTED["_meta"]["runtime_context"]
    assert "_meta" not in saved[2] and saved[-1]["latency_ms"] == 1234
    checkpoint = _returned(world, "save:summary inside the turn")
    assert [m.get("_hidden_history") for m in checkpoint] == [None, None, True, None]


@pytest.mark.conformance
@pytest.mark.parametrize("name", list(ESTIMATE_CASES))
@pytest.mark.parametrize("with_tools", [False, True])
def test_estimate_equals_0_3_5(world: dict[str, Any], name: str, with_tools: bool) -> None:
    tokens, source = _returned(world, f"estimate:{name}:{with_tools}")
    tools = world["kits"]["template"]["tools"][:3] if with_tools else []
    assert rq.estimate_request(ESTIMATE_CASES[name], tools, _count()) == tokens
    assert source == ("heuristic" if name == "special tokens" else "tiktoken" if tokens else "none")


@pytest.mark.conformance
def test_estimate_equals_0_3_5_without_tiktoken(nb035: Release, world: dict[str, Any]) -> None:
    tools = world["kits"]["template"]["tools"][:3]
    cases = [(m, t) for m in ESTIMATE_CASES.values() for t in (None, tools)]
    calls = [["estimate", {"messages": m, "tools": t}] for m, t in cases]
    [reply] = nb035.run(SCENARIOS, [{"args": [calls]}], tiktoken=False)
    theirs = [r["returned"][0] for r in reply["returned"]]
    ours = [rq.estimate_request(m, t or [], _failing_count) for m, t in cases]
    assert ours == theirs and len(ours) == 8


# --- exact values and refusals (no release needed) ------------------------------------------

KIT = {
    "current": {"role": "user", "content": "\u0000SK:text\u0000"},
    "loop": {"continuation": "CONT", "placeholder_assistant": ["PH"], "backfill": "BF"},
    "wire": {"empty_content": "(E)", "synthetic_user": "(S)"},
}


def test_turn_steps_of_a_turn_without_replies() -> None:
    assert rq.turn_steps([]) == [[]]
    command = [{"role": "assistant", "content": "help text", "_command": True}]
    assert rq.turn_steps(command) == []


def test_current_message_refuses_automation_and_non_text() -> None:
    for user in (
        {"role": "user", "content": "cron", "_automation_turn": {"kind": "cron"}},
        {"role": "user", "content": "cron", "_cron_turn": True},
        {"role": "user", "content": [{"type": "text", "text": "x"}]},
    ):
        with pytest.raises(rq.NotOnDisk):
            rq.current_message(KIT, user)


def test_current_message_fills_the_template_once() -> None:
    user = {"role": "user", "content": "\u0000SK:text\u0000 literal", "timestamp": "t"}
    assert rq.current_message(KIT, user) == {"role": "user", "content": user["content"]}


def test_wire_refuses_what_it_cannot_rebuild() -> None:
    unrepaired = [_call("c1", arguments='{"a": 1'), _result("c1")]
    unnamed = [{"role": "assistant", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}]
    numbered = [_call(7)]  # type: ignore[arg-type]
    for messages in (unrepaired, unnamed, numbered):
        with pytest.raises(rq.NotOnDisk):
            rq.wire_messages([{"role": "user", "content": "u"}, *messages], kit=KIT)


def test_image_block_reads_magic_bytes_then_the_name() -> None:
    png = rq.image_block("a/./b.jpg", PNG)
    assert png is not None and png["image_url"]["url"].startswith("data:image/png;base64,")
    assert png["_meta"] == {"path": "a/b.jpg"}
    assert rq.image_block("x.webp", b"RIFF\x00\x00\x00\x00WEBPVP8 ")["image_url"]["url"][:16] == (
        "data:image/webp;"
    )
    assert rq.image_block("plain.txt", b"hello") is None
    assert rq.image_block("photo.jpeg", b"hello")["image_url"]["url"].startswith("data:image/jpeg")


# --- generated cases ------------------------------------------------------------------------

_TEXT = st.sampled_from(
    ["", " ", "hi", "a\n\nb", "résumé 日本語 🙂", "\ud83d", "<|endoftext|>", PLACEHOLDER, "x" * 130]
)
_IDS = st.sampled_from(["c1", "c2", "c3", "call/4"])
_ARGS = st.sampled_from(["{}", '{"a": 1}', ' {"p": "x"} ', "", "[1]", None, {"k": "v"}])


def _block() -> st.SearchStrategy[Any]:
    return st.one_of(
        _TEXT.map(lambda t: {"type": "text", "text": t}),
        st.just({"type": "text"}),
        st.just({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}),
        st.just({"type": "image_url", "image_url": {"url": "u"}, "_meta": {"path": "/p.png"}}),
    )


_CONTENT = st.one_of(
    _TEXT, _TEXT, st.lists(_block(), max_size=3), st.none(), st.just({"type": "text", "text": "d"})
)


@st.composite
def _user(draw: st.DrawFn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "user", "content": draw(_CONTENT)}
    kind = draw(st.integers(0, 9))
    if kind < 3:
        blocks = draw(st.lists(_TEXT.filter(bool), min_size=1, max_size=2))
        text = draw(_TEXT)
        suffix = "\n\n".join(blocks)
        message["content"] = f"{text}\n\n{suffix}" if text else suffix
        if kind == 2:
            message["content"] = draw(_TEXT)  # a marker the content no longer ends with
        marker = {"version": 1, "sources": ["s"] * len(blocks), "suffix": suffix}
        message["_meta"] = {"runtime_context": marker}
    elif kind == 3:
        block = {"type": "text", "text": draw(_TEXT)}
        message["content"] = [*draw(st.lists(_block(), max_size=2)), block]
        message["_meta"] = {"runtime_context": {"version": 1, "sources": ["b"], "blocks": [block]}}
    elif kind == 4:
        message["_hidden_history"] = True
    elif kind == 5:
        message["content"] = CONTINUATION
    elif kind == 6:
        message["_meta"] = {"provider_state_boundary": draw(st.booleans())}
    return message


@st.composite
def _assistant(draw: st.DrawFn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": draw(_CONTENT)}
    if draw(st.booleans()):
        ids = draw(st.lists(_IDS, min_size=1, max_size=3))
        names = st.sampled_from(["exec", "read_file", "", None])
        message["tool_calls"] = [
            {
                "id": i,
                "type": "function",
                "function": {"name": draw(names), "arguments": draw(_ARGS)},
            }
            for i in ids
        ]
    if draw(st.integers(0, 3)) == 0:
        message["reasoning_content"] = draw(st.sampled_from(["", "why", None]))
    if draw(st.integers(0, 5)) == 0:
        message["_meta"] = {"x": 1}
    if draw(st.integers(0, 9)) == 0:
        del message["content"]
    return message


@st.composite
def _tool(draw: st.DrawFn) -> dict[str, Any]:
    content = draw(st.one_of(_CONTENT, st.integers(100, 250).map(lambda n: "L" * n)))
    message = {
        "role": "tool",
        "tool_call_id": draw(st.one_of(_IDS, st.just(""))),
        "content": content,
    }
    if draw(st.integers(0, 4)):
        message["name"] = draw(st.sampled_from(["exec", "read_file"]))
    return message


_MESSAGE = st.one_of(_user(), _assistant(), _assistant(), _tool(), _tool())


@st.composite
def _loop_case(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "history": draw(st.lists(_MESSAGE, max_size=8)),
        "current": draw(_user()),
        "steps": draw(st.lists(_MESSAGE, max_size=5)),
        "max_chars": draw(st.sampled_from([16_000, 120])),
        "session_key": draw(st.sampled_from(["cli:direct", "slack:C1:T9", None])),
    }


def _generated_cases(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` examples of 5 generated requests each, drawn by hypothesis from a fixed seed
    and compared in one process of the release (an example per process would take minutes;
    a failure names its case instead of shrinking it)."""
    cases: list[dict[str, Any]] = []

    @hypothesis.seed(seed)
    @settings(max_examples=count, phases=(Phase.generate,), database=None)
    @given(batch=st.lists(_loop_case(), min_size=5, max_size=5))
    def collect(batch: list[dict[str, Any]]) -> None:
        cases.extend(batch)

    collect()
    return cases


def _compare_generated(nb035: Release, world: dict[str, Any], batch: list[dict[str, Any]]) -> int:
    kit, workspace = world["kits"]["template"], world["template"]
    compared = []
    for case in batch:
        try:
            _ours(case, kit)
        except rq.NotOnDisk:
            continue  # a random tool-call id, or arguments only json_repair reads (none drawn)
        compared.append(case)
    calls = [_loop_call(case, kit, workspace) for case in compared]
    [reply] = nb035.run(SCENARIOS, [{"args": [calls]}])
    for case, theirs in zip(compared, reply["returned"], strict=True):
        assert "returned" in theirs, theirs
        try:
            _compare_loop(kit, case, theirs["returned"])
        except AssertionError as error:
            raise AssertionError(f"case {json.dumps(case)}:\n{error}") from None
    return len(compared)


@pytest.mark.conformance
def test_generated_requests_equal_0_3_5(nb035: Release, world: dict[str, Any]) -> None:
    cases = _generated_cases(12, seed=35)
    assert len(cases) == 60
    assert _compare_generated(nb035, world, cases) == 60


@pytest.mark.conformance
@pytest.mark.sampled
def test_more_generated_requests_equal_0_3_5(nb035: Release, world: dict[str, Any]) -> None:
    cases = _generated_cases(examples(200, 40), seed=36)
    assert _compare_generated(nb035, world, cases) == len(cases)
