"""nanobot 0.3.0's whole request: sessionkit's rebuild (``request_030``) and kit (``probe_030``)
against the release's own code on the same inputs.

The release runs in its own environment (``releases.py``): each case is one user turn run by
its own context builder, agent runner (context governor included) and session saving, with an
OpenAI-compatible provider that answers from a script and records every request
(``request_scenarios_030``).  sessionkit rebuilds every recorded call from what the turn left
on disk (the stored user message and the turn's stored messages) plus the kit, and each
rebuilt list must equal the recorded one as JSON text (key order included).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import json_repair
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.releases import REPO, Release, release
from support.sampling import examples
from support.strategies import message_lists, texts

from sessionkit.nanobot import request_030 as rq
from sessionkit.nanobot.tokens import encoding

pytestmark = pytest.mark.conformance

PROBE = REPO / "sessionkit" / "nanobot" / "probes" / "probe_030.py"
RUN_TURN = "request_scenarios_030:run_turn"
KEY = "cli:direct"
DEFAULTS = {
    "context_window_tokens": 200_000,
    "max_tokens": 8192,
    "context_block_limit": None,
    "max_tool_result_chars": 16_000,
}
SKILL_ALWAYS = (
    "---\nname: tidy\ndescription: Keep the workspace tidy.\n"
    'metadata: \'{"nanobot": {"always": true}}\'\n---\n\n# Tidy\n\nPut files away.\n'
)
SKILL_PLAIN = "---\nname: sketch\ndescription: Draw quick diagrams.\n---\n\n# Sketch\n\nBoxes.\n"
HISTORY_LOG = [
    {"cursor": 1, "timestamp": "2026-01-02 10:00", "content": "talked trains", "session_key": KEY},
    {"cursor": 2, "timestamp": "2026-01-02 11:00", "content": "other chat", "session_key": "cli:x"},
    {
        "cursor": 3,
        "timestamp": "2026-01-03 09:30",
        "content": "日本語 notes 🙂",
        "session_key": KEY,
    },
]
CUSTOM_FILES = {
    "AGENTS.md": "# Rules\n\nUse tabs.\n\n---\n\nNever push on Fridays.\n",
    "SOUL.md": "I am terse.\n",
    "USER.md": "The user is Ada.\n",
    "memory/MEMORY.md": "- likes trains\n",
    "memory/history.jsonl": "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in HISTORY_LOG),
    "skills/tidy/SKILL.md": SKILL_ALWAYS,
    "skills/sketch/SKILL.md": SKILL_PLAIN,
}
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
SENTINEL_PATH = "\u0000SK:path\u0000"
CONTEXT = "[Runtime Context]\nGoal: ship it\n[/Runtime Context]"


def _named(template: str, message: dict[str, Any]) -> str:
    return template.replace("\u0000SK:name\u0000", str(message.get("name")))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True)


@cache
def _count() -> Callable[[str], int]:
    enc = encoding()
    return lambda text: len(enc.encode(text))


def _numbered_ids() -> Callable[[], str]:
    """Ids for id-less tool calls, numbered as the release side numbers them per request."""
    count = [0]

    def fresh() -> str:
        count[0] += 1
        return f"rnd{count[0]:06d}"

    return fresh


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


def _listing(root: Path) -> list[tuple[str, str]]:
    """Every path under ``root`` with a digest of its bytes (folders: "dir")."""
    return [
        (str(p), hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
        for p in sorted(root.rglob("*"))
    ]


def _config(path: Path, tools: dict[str, Any] | None = None) -> Path:
    config: dict[str, Any] = {
        "agents": {
            "defaults": {
                "model": "stub-model",
                "provider": "custom",
                "contextWindowTokens": 32_000,
                "maxTokens": 2048,
            }
        },
        "providers": {"custom": {"apiKey": "sk-never-used", "apiBase": "http://127.0.0.1:9/v1"}},
    }
    if tools:
        config["tools"] = tools
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def nb030() -> Release:
    return release("0.3.0")


@pytest.fixture(scope="module")
def world(nb030: Release, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A template workspace (laid out by the release) and a customised one with their configs;
    the release's side of the differential tests, asked in one process; then each workspace
    probed (and listed before and after)."""
    root = tmp_path_factory.mktemp("requests030")
    home = root / "home"
    home.mkdir()
    custom = root / "custom"
    for name, text in CUSTOM_FILES.items():
        (custom / name).parent.mkdir(parents=True, exist_ok=True)
        (custom / name).write_text(text, encoding="utf-8")
    configs = {
        "template": _config(root / "template.json"),
        "custom": _config(
            root / "custom.json", {"web": {"enable": False}, "my": {"enable": False}}
        ),
    }
    made = {
        "root": root,
        "home": home,
        "template": root / "template",
        "custom": custom,
        "configs": configs,
    }
    made["theirs"] = _release_side(nb030, made)
    kits, residue = {}, {}
    for name in ("template", "custom"):
        before = _listing(made[name])
        request = {"workspace": str(made[name]), "config": str(configs[name]), "channel": "cli"}
        kits[name] = _probe(nb030, {**request, "runtime": {}}, home)
        residue[name] = (before, _listing(made[name]))
    overrides = {"system": "Windows", "machine": "ARM64", "python_version": "3.12.1"}
    request = {"workspace": str(made["template"]), "config": None, "channel": "telegram"}
    kits["overridden"] = _probe(nb030, {**request, "runtime": overrides}, home)
    return {**made, "kits": kits, "residue": residue}


@pytest.fixture(scope="module")
def theirs(world: dict[str, Any]) -> dict[str, Any]:
    return world["theirs"]


# --- the probe --------------------------------------------------------------------------------


def test_probe_leaves_the_workspace_as_it_was(world: dict[str, Any]) -> None:
    for before, after in world["residue"].values():
        assert after == before


@pytest.mark.parametrize("name", ["template", "custom", "overridden"])
def test_probe_parts_join_to_the_prompt(world: dict[str, Any], name: str) -> None:
    kit = world["kits"][name]
    assert kit["nanobot"] == "0.3.0"
    assert kit["joiner"].join(p["text"] for p in kit["system"]) == kit["system_text"]
    for part in kit["system"]:
        if part["part"] == "bootstrap":
            files = [f["text"] for f in part["files"]]
            assert part["separator"].join(files) == part["text"]


def test_probe_part_names(world: dict[str, Any]) -> None:
    names = {n: [p["part"] for p in k["system"]] for n, k in world["kits"].items()}
    assert names["template"] == ["identity", "bootstrap", "tool contract", "skills summary"]
    assert names["custom"] == [
        "identity",
        "bootstrap",
        "tool contract",
        "memory",
        "active skills",
        "skills summary",
    ]
    [boot] = [p for p in world["kits"]["custom"]["system"] if p["part"] == "bootstrap"]
    assert [f["part"] for f in boot["files"]] == [
        "bootstrap:AGENTS.md",
        "bootstrap:SOUL.md",
        "bootstrap:USER.md",
    ]
    inferred = {p["part"]: p["inferred"] for p in world["kits"]["custom"]["system"]}
    assert inferred == {
        "identity": True,
        "bootstrap": False,
        "tool contract": False,
        "memory": False,
        "active skills": True,
        "skills summary": True,
    }


def test_probe_runtime_overrides(world: dict[str, Any]) -> None:
    kit = world["kits"]["overridden"]
    assert kit["runtime"]["system"] == "Windows"
    assert kit["system"][0]["text"].startswith("## Runtime\nWindows ARM64, Python 3.12.1\n")
    assert kit["system_text"] != world["kits"]["template"]["system_text"]


def test_probe_budget_and_texts_from_config(world: dict[str, Any]) -> None:
    loop = world["kits"]["custom"]["loop"]
    assert (loop["context_window_tokens"], loop["max_tokens"]) == (32_000, 2048)
    assert loop["tool_results_root"] == str(world["custom"].resolve() / ".nanobot/tool-results")
    defaults = world["kits"]["overridden"]["loop"]
    assert (defaults["context_window_tokens"], defaults["max_tokens"]) == (200_000, 8192)
    assert world["kits"]["custom"]["wire"]["spec"] == "custom"
    for kit in world["kits"].values():
        assert kit["current"] == {"role": "user", "content": "\u0000SK:text\u0000"}
        assert "\u0000SK:text\u0000" in kit["summary"]
        assert "\u0000SK:last_active\u0000" in kit["summary"]


def _system_cases(world: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    summary = {"text": "We planned the trip.", "last_active": "2026-01-03T09:30:00.000000"}
    return [
        (name, key, metadata)
        for name in ("template", "custom")
        for key in (KEY, "cli:x", "cli:nobody")
        for metadata in ({}, {"_last_summary": summary})
    ]


def test_system_prompt_equals_the_release(world: dict[str, Any], theirs: dict[str, Any]) -> None:
    cases = _system_cases(world)
    for (name, key, metadata), reply in zip(cases, theirs["system"], strict=True):
        mine = rq.system_prompt(world["kits"][name], key, metadata)
        assert mine == reply["returned"], (name, key, metadata)
    assert len(cases) == 12
    assert world["kits"]["custom"]["recent_history"].keys() == {KEY, "cli:x"}


def test_consolidation_request_equals_the_release(
    world: dict[str, Any], theirs: dict[str, Any]
) -> None:
    cases = _consolidation_cases(world)
    for case, reply in zip(cases, theirs["consolidation"], strict=True):
        workspace, key, _, metadata, _, _ = case
        recorded = reply["returned"]
        kit = world["kits"]["custom" if workspace == str(world["custom"]) else "template"]
        mine = rq.consolidation_messages(kit, key, metadata, recorded["history"])
        assert _json(mine) == _json(recorded["messages"]), case
        assert rq.estimate_request(mine, recorded["tools"], _count()) == recorded["estimate"]
    assert len(cases) == 36


@pytest.mark.parametrize("name", ["template", "custom"])
def test_probe_tools_equal_the_agent_loop(
    world: dict[str, Any], theirs: dict[str, Any], name: str
) -> None:
    reply = theirs["tools"][name]
    assert _json(world["kits"][name]["tools"]) == _json(reply["returned"])
    names = [t["function"]["name"] for t in reply["returned"]]
    expected = (True, True) if name == "template" else (False, False)
    assert ("web_fetch" in names, "my" in names) == expected


# --- whole turns ----------------------------------------------------------------------------------


def _turn(
    workspace: Path,
    *,
    user: dict[str, Any] | None = None,
    rounds: list[dict[str, Any]] | None = None,
    results: dict[str, Any] | None = None,
    stored: list[dict[str, Any]] | None = None,
    summary: dict[str, Any] | None = None,
    **changes: Any,
) -> dict[str, Any]:
    return {
        "workspace": str(workspace),
        "key": KEY,
        "channel": "cli",
        "stored": stored or [],
        "history_kwargs": {},
        "user": user or {"content": "hi"},
        "summary": summary,
        "settings": {**DEFAULTS, **changes},
        "rounds": rounds or [{"content": "hello"}],
        "results": results or {},
    }


def _calls(*specs: tuple[str, str] | tuple[str, str, Any]) -> list[dict[str, Any]]:
    """Tool calls (id, tool name[, raw arguments]) answering by their ``q`` argument = id."""
    out = []
    for spec in specs:
        call_id, name = spec[0], spec[1]
        arguments = spec[2] if len(spec) > 2 else {"q": call_id}
        out.append({"id": call_id, "name": name, "arguments": arguments})
    return out


def _stored_call(*ids: str, name: Any = "exec") -> dict[str, Any]:
    calls = [
        {"id": i, "type": "function", "function": {"name": name, "arguments": "{}"}} for i in ids
    ]
    return {"role": "assistant", "content": "", "tool_calls": calls}


def _stored_result(call_id: str, content: Any = "ok", name: str = "exec") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def _words(n: int, seed: str = "w") -> str:
    return " ".join(f"{seed}{i}" for i in range(n))


def _hand_made(world: dict[str, Any]) -> dict[str, dict[str, Any]]:
    template, custom = world["template"], world["custom"]
    image = world["root"] / "pixel.png"
    image.write_bytes(PNG)
    stored_big = "x" * 16_000 + "\n... (truncated)"
    return {
        "plain answer": _turn(template),
        "custom workspace, recent history and summary": _turn(
            custom, summary={"text": "Earlier: trains.", "last_active": "2026-01-03T09:30:00"}
        ),
        "empty assistant text with tool calls": _turn(
            template,
            rounds=[{"content": "", "calls": _calls(("c1", "exec"))}, {"content": "done"}],
            results={"c1": "a.txt\nb.txt"},
        ),
        "text beside parallel calls, three rounds": _turn(
            template,
            rounds=[
                {"content": "let me look", "calls": _calls(("a1", "exec"), ("a2", "web_fetch"))},
                {"content": "", "calls": _calls(("b1", "read_file"))},
                {"content": "final"},
            ],
            results={"a1": "one", "a2": "two", "b1": "three"},
        ),
        "orphan and missing results in history": _turn(
            template,
            stored=[
                {"role": "user", "content": "go"},
                _stored_call("x", "y"),
                _stored_result("x"),
                _stored_result("zz"),
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "again"},
                _stored_call("q"),
                {"role": "assistant", "content": "sorry"},
            ],
            rounds=[{"content": "", "calls": _calls(("n1", "notes"))}, {"content": "fine"}],
        ),
        "adjacent user messages": _turn(
            template,
            stored=[
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"},
                {"role": "user", "content": f"d\n\n{CONTEXT}"},
            ],
            user={"content": "e", "blocks": [["goal", CONTEXT]]},
        ),
        "placeholder and malformed calls in history": _turn(
            template,
            stored=[
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "  [Previous assistant message omitted.] "},
                _stored_call("m1", name=None),
                _stored_result("m1"),
                {**_stored_call("m2", name=""), "content": "kept text"},
                _stored_result("m2"),
                {"role": "assistant", "content": "end"},
            ],
        ),
        "runtime context, two blocks": _turn(
            template,
            user={"content": "ship", "blocks": [["webui_quote", CONTEXT], ["cli_apps", "[a]\nb"]]},
            rounds=[{"content": "", "calls": _calls(("g1", "exec"))}, {"content": "ok"}],
        ),
        "runtime context without text": _turn(
            template, user={"content": "", "blocks": [["goal", CONTEXT]]}
        ),
        "image with runtime context": _turn(
            template,
            user={"content": "what is it?", "media": [str(image)], "blocks": [["goal", CONTEXT]]},
        ),
        "image whose file is gone": _turn(
            template, user={"content": "and this?", "media": [str(world["root"] / "gone.png")]}
        ),
        "reasoning fields": _turn(
            template,
            rounds=[
                {
                    "content": "",
                    "calls": _calls(("r1", "exec")),
                    "reasoning_content": "plan <think>deep</think>",
                    "thinking_blocks": [{"type": "thinking", "thinking": "hmm", "signature": "s"}],
                },
                {"content": "answer", "reasoning_content": "because"},
            ],
        ),
        "unicode and lone surrogates": _turn(
            template,
            user={"content": "résumé 日本語 🙂 \u2028 עברית"},
            rounds=[{"content": "", "calls": _calls(("u1", "exec"))}, {"content": "Ω≈ç √"}],
            results={"u1": "ünïcödé \ud800 and \U0001f600"},
        ),
        "special-token text": _turn(
            template,
            user={"content": "say <|endoftext|> please"},
            rounds=[{"content": "", "calls": _calls(("s1", "exec"))}, {"content": "ok"}],
            results={"s1": "<|fim_prefix|>"},
        ),
        "large results offloaded, a stored truncated result": _turn(
            template,
            stored=[
                {"role": "user", "content": "dump"},
                _stored_call("old"),
                _stored_result("old", stored_big),
                {"role": "assistant", "content": "dumped"},
            ],
            rounds=[
                {"content": "", "calls": _calls(("big1", "exec"), ("big2", "web_fetch"))},
                {"content": "done"},
            ],
            results={"big1": _words(4000), "big2": [{"type": "text", "text": _words(4000, "v")}]},
        ),
        "empty and list results": _turn(
            template,
            rounds=[
                {
                    "content": "",
                    "calls": _calls(
                        ("e1", "exec"), ("e2", "notes"), ("e3", "exec"), ("e4", "exec")
                    ),
                },
                {"content": "done"},
            ],
            results={
                "e1": "",
                "e2": [],
                "e3": [{"type": "text", "text": " "}],
                "e4": [
                    {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}},
                    {"type": "text", "text": "caption"},
                ],
            },
        ),
        "small budget: history snipped": _turn(
            template,
            stored=[
                m
                for i in range(12)
                for m in (
                    {"role": "user", "content": _words(60, f"u{i}-")},
                    {"role": "assistant", "content": _words(60, f"a{i}-")},
                )
            ],
            rounds=[{"content": "", "calls": _calls(("h1", "exec"))}, {"content": "ok"}],
            results={"h1": _words(80)},
            context_window_tokens=4000,
            max_tokens=500,
        ),
        "small budget: results compacted across calls": _turn(
            template,
            rounds=[
                {"content": "", "calls": _calls(("k1", "exec"), ("k2", "web_fetch"))},
                {"content": "", "calls": _calls(("k3", "exec"))},
                {"content": "", "calls": _calls(("k4", "web_fetch"))},
                {"content": "done"},
            ],
            results={k: _words(700, k) for k in ("k1", "k2", "k3", "k4")},
            context_window_tokens=9000,
            max_tokens=1000,
        ),
        "context block limit": _turn(
            template,
            stored=[
                {"role": "user", "content": _words(400)},
                {"role": "assistant", "content": "ok"},
            ],
            rounds=[{"content": "", "calls": _calls(("l1", "exec"))}, {"content": "ok"}],
            results={"l1": _words(900)},
            context_block_limit=3000,
        ),
        "repeated call ids": _turn(
            template,
            rounds=[
                {"content": "", "calls": _calls(("d", "exec"), ("d", "exec"))},
                {"content": "", "calls": _calls(("d", "notes"))},
                {"content": "done"},
            ],
        ),
        "malformed arguments": _turn(
            template,
            rounds=[
                {
                    "content": "",
                    "calls": _calls(("j1", "exec", '{"q": "j1",'), ("j2", "exec", "[1]")),
                },
                {"content": "done"},
            ],
        ),
        "length recovery": _turn(
            template,
            rounds=[{"content": "partial", "finish_reason": "length"}, {"content": "rest"}],
        ),
    }


def _consolidation_cases(world: dict[str, Any]) -> list[tuple[Any, ...]]:
    """(workspace, key, stored, metadata, last_consolidated, settings) for the consolidator."""
    stored = [
        {"role": "user", "content": "plan a trip", "timestamp": "2026-01-01T10:00:00"},
        {"role": "assistant", "content": "", "tool_calls": [_stored_call("t1")["tool_calls"][0]]},
        _stored_result("t1", _words(50)),
        {"role": "assistant", "content": "Here is a plan."},
        {"role": "user", "content": f"and back?\n\n{CONTEXT}"},
    ]
    summaries: list[dict[str, Any]] = [
        {},
        {"_last_summary": {"text": "Trains 🙂", "last_active": "2026-01-01T09:00:00"}},
        {"_last_summary": "a bare summary"},
    ]
    return [
        (str(world[name]), KEY, messages, metadata, offset, DEFAULTS)
        for name in ("template", "custom")
        for messages in (stored, stored[:4], [])
        for metadata in summaries
        for offset in (0, 2)
    ]


def _read_file_case(world: dict[str, Any]) -> dict[str, Any]:
    return _turn(
        world["template"],
        rounds=[{"content": "", "calls": _calls(("f1", "read_file"))}, {"content": "read"}],
        results={"f1": "r" * 900},
        max_tool_result_chars=500,
    )


def _release_side(nb030: Release, world: dict[str, Any]) -> dict[str, Any]:
    """The release's side of every differential test but the sampled one, in one process: the
    template workspace laid out, its system prompts, its agent loop's tools, the hand-made
    turns, the read_file turn and the generated turns."""
    made = [["template_workspace", [str(world["template"])]]]
    system = [
        ["system_prompt", [str(world[name]), "cli", key, metadata.get("_last_summary")]]
        for name, key, metadata in _system_cases(world)
    ]
    tools = [
        ["agent_tools", [str(world[n]), str(world["configs"][n])]] for n in ("template", "custom")
    ]
    consolidations = [["consolidation", list(case)] for case in _consolidation_cases(world)]
    hand = _hand_made(world)
    generated = _collect(40, world)
    turns = [["run_turn", [case]] for case in [*hand.values(), _read_file_case(world), *generated]]
    [reply] = nb030.run(
        "request_scenarios_030:batch",
        [{"args": [made + system + tools + consolidations + turns]}],
        env={"HOME": str(world["home"])},
    )
    results = reply["returned"]
    assert "SOUL.md" in results[0]["returned"], results[0]
    results = results[1:]
    n_system, n_hand, n_consolidations = len(system), len(hand), len(consolidations)
    turn_results = results[n_system + 2 + n_consolidations :]
    return {
        "system": results[:n_system],
        "tools": dict(zip(("template", "custom"), results[n_system : n_system + 2], strict=True)),
        "hand_made": [
            (name, case, reply)
            for (name, case), reply in zip(hand.items(), turn_results[:n_hand], strict=True)
        ],
        "consolidation": results[n_system + 2 : n_system + 2 + n_consolidations],
        "read_file": (_read_file_case(world), turn_results[n_hand]),
        "generated": list(zip(generated, turn_results[n_hand + 1 :], strict=True)),
    }


def _kit_for(world: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    return world["kits"]["custom" if case["workspace"] == str(world["custom"]) else "template"]


def _rebuilt(
    kit: dict[str, Any], case: dict[str, Any], theirs: dict[str, Any]
) -> list[dict[str, Any]]:
    """sessionkit's rebuild of every call the release recorded for one turn."""
    stored = theirs["stored"]
    if stored and stored[0]["role"] == "user":
        user, turn = stored[0], stored[1:]
    else:  # nothing to store: blank text, no media, no runtime context
        assert not case["user"]["content"].strip() and not case["user"].get("blocks")
        user, turn = {"role": "user", "content": case["user"]["content"]}, stored
    current = rq.current_message(kit, user)
    steps = rq.turn_steps(turn)
    metadata = {"_last_summary": case["summary"]} if case["summary"] else {}
    system = rq.system_prompt(kit, case["key"], metadata)
    out = []
    for k, call in enumerate(theirs["calls"]):
        loop_settings = rq.LoopSettings.from_kit(
            kit, session_key=case["key"], count=_count(), tools=call["tools"], **case["settings"]
        )
        loop = rq.loop_messages(system, theirs["history"], current, steps[k], loop_settings)
        out.append(
            {
                "loop": loop,
                "wire": rq.wire_messages(
                    loop, kit["wire"], repair=json_repair.loads, new_id=_numbered_ids()
                ),
                "tools": call["tools"],
                "estimate": rq.estimate_request(loop, call["tools"], _count()),
            }
        )
    assert len(steps) == len(theirs["calls"])
    return out


def _check(world: dict[str, Any], cases: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> int:
    compared = 0
    for name, case, reply in cases:
        assert "returned" in reply, (name, reply)
        theirs = reply["returned"]
        mine = _rebuilt(_kit_for(world, case), case, theirs)
        for k, (ours, recorded) in enumerate(zip(mine, theirs["calls"], strict=True)):
            for field in ("loop", "wire", "estimate"):
                assert _json(ours[field]) == _json(recorded[field]), (name, k, field)
            compared += 1
    return compared


def test_hand_made_turns(world: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert _check(world, theirs["hand_made"]) == 41


def test_hand_made_turns_reach_their_edges(world: dict[str, Any], theirs: dict[str, Any]) -> None:
    """The hand-made cases do reach what they are named after (in the release's own record)."""
    recorded = {name: reply["returned"] for name, _, reply in theirs["hand_made"]}
    loop = world["kits"]["template"]["loop"]
    notice = loop["tool_result_compacted"]
    reference = loop["tool_result_reference"].split(SENTINEL_PATH)[0]
    snipped = recorded["small budget: history snipped"]["calls"][0]["loop"]
    assert len(snipped) < 2 + 24
    compacted = recorded["small budget: results compacted across calls"]["calls"][-1]["loop"]
    names = [m.get("name") for m in compacted if m.get("content") == _named(notice, m)]
    assert names == ["exec", "web_fetch"]
    offloaded = recorded["large results offloaded, a stored truncated result"]["calls"][-1]["loop"]
    assert sum(str(m.get("content")).startswith(reference) for m in offloaded) == 3
    merged = recorded["adjacent user messages"]["calls"][0]["wire"]
    assert [m["role"] for m in merged] == ["system", "user", "assistant", "user"]
    image = recorded["image with runtime context"]["calls"][0]["loop"][-1]
    assert image["content"][0]["type"] == "image_url" and "_meta" in image
    recovered = recorded["length recovery"]["calls"][1]["loop"]
    assert recovered[-1]["role"] == "user"


def test_read_file_past_the_limit_is_stored_truncated(
    world: dict[str, Any], theirs: dict[str, Any]
) -> None:
    """The one change saving makes to a text step: a ``read_file`` result over the limit was
    sent whole and stored truncated, so the rebuild of the next call carries the stored text."""
    case, reply = theirs["read_file"]
    recorded = reply["returned"]
    [ours] = _rebuilt(world["kits"]["template"], case, recorded)[1:]
    sent = recorded["calls"][1]["loop"][-1]["content"]
    rebuilt = ours["loop"][-1]["content"]
    assert sent == "r" * 900
    assert rebuilt == "r" * 500 + world["kits"]["template"]["loop"]["truncated_suffix"]
    assert ours["loop"][:-1] == recorded["calls"][1]["loop"][:-1]


def test_unreproducible_parts_say_so(world: dict[str, Any]) -> None:
    kit = world["kits"]["template"]
    no_id = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "", "function": {"name": "exec"}}],
        },
        {"role": "user", "content": "y"},
    ]
    with pytest.raises(rq.Unreproducible, match="random"):
        rq.wire_messages(no_id, kit["wire"])
    assert (
        rq.wire_messages(no_id, kit["wire"], new_id=lambda: "abcdefghi")[1]["tool_calls"][0]["id"]
        == "abcdefghi"
    )
    call = {"id": "a", "function": {"arguments": "{x"}}
    broken = [{"role": "assistant", "content": "", "tool_calls": [call]}]
    with pytest.raises(rq.Unreproducible, match="json_repair"):
        rq.wire_messages(broken, kit["wire"])
    marker = {"version": 1, "sources": ["goal", "cli_apps"], "suffix": "a\n\nb\n\nc"}
    user = {
        "role": "user",
        "content": "t\n\na\n\nb\n\nc",
        "_runtime_context": marker,
        "media": [str(world["root"] / "pixel.png")],
    }
    with pytest.raises(rq.Unreproducible, match="blank lines"):
        rq.current_message(kit, user)


def test_turn_steps_stop_where_no_call_was_made() -> None:
    assert rq.turn_steps([]) == [[]]
    assert rq.turn_steps([{"role": "assistant", "content": "/help", "_command": True}]) == []
    turn = [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a"}], "timestamp": "t"},
        {"role": "tool", "tool_call_id": "a", "content": "r", "timestamp": "t"},
        {"role": "assistant", "content": "done", "timestamp": "t", "latency_ms": 5},
        {"role": "assistant", "content": "sub", "injected_event": "subagent_result"},
        {"role": "assistant", "content": "later"},
    ]
    assert rq.turn_steps(turn) == [
        [],
        [
            {"role": "assistant", "content": "", "tool_calls": [{"id": "a"}]},
            {"role": "tool", "tool_call_id": "a", "content": "r"},
        ],
    ]


# --- generated turns ------------------------------------------------------------------------------

_CALL_IDS = st.sampled_from(["c1", "c2", "c3", "call_9", "x"])
_TOOL = st.sampled_from(["exec", "read_file", "web_fetch", "notes"])
_BLOCK_TEXT = st.sampled_from(["[Runtime Context]\nGoal: ok\n[/Runtime Context]", "é 🙂", "a\nb"])
_PIECES = st.sampled_from(["word ", "日本語 ", "line\n", "<|endoftext|>", " \t"])


def _result_values(limit: int) -> st.SearchStrategy[Any]:
    size = st.sampled_from([0, 3, 400, limit - 1, limit + 5, 3 * limit])
    text = st.builds(lambda n, piece: (piece * (n // len(piece) + 1))[:n], size, _PIECES)
    return st.one_of(
        text,
        texts(),
        st.just(None),
        st.lists(st.builds(lambda t: {"type": "text", "text": t}, texts()), max_size=2),
    )


_RESULTS = {limit: _result_values(limit) for limit in (16_000, 700)}
_STORED = message_lists(max_blocks=6)


@st.composite
def _generated_turn(draw: st.DrawFn) -> dict[str, Any]:
    changes = {
        "context_window_tokens": draw(st.sampled_from([200_000, 3000, 6000])),
        "max_tokens": draw(st.sampled_from([500, 1000, 8192])),
        "context_block_limit": draw(st.sampled_from([None, None, 2500])),
        "max_tool_result_chars": draw(st.sampled_from([16_000, 700])),
    }
    limit = changes["max_tool_result_chars"]
    rounds, results = [], {}
    for r in range(draw(st.integers(0, 4))):
        calls = []
        for c in range(draw(st.integers(1, 3))):
            call_id = draw(_CALL_IDS)
            name = draw(_TOOL)
            q = f"{r}.{c}"
            calls.append({"id": call_id, "name": name, "arguments": {"q": q}})
            value = draw(_RESULTS[limit])
            if name == "read_file" and isinstance(value, str):
                value = value[:limit]
            results[q] = value
        answer: dict[str, Any] = {
            "content": draw(st.sampled_from(["", "", "checking"])),
            "calls": calls,
        }
        if draw(st.booleans()):
            answer["reasoning_content"] = draw(texts())
        rounds.append(answer)
    rounds.append({"content": draw(st.sampled_from(["done", "Here you go 🙂", "ok\n\nbye"]))})
    blocks = draw(
        st.lists(st.tuples(st.sampled_from(["goal", "cli_apps"]), _BLOCK_TEXT), max_size=2)
    )
    summary = draw(
        st.sampled_from([None, {"text": "Before: trains.", "last_active": "2026-01-01T08:00:00.5"}])
    )
    return {
        "workspace": None,
        "key": KEY,
        "channel": "cli",
        "stored": draw(_STORED),
        "history_kwargs": {"max_tokens": draw(st.sampled_from([0, 0, 300]))},
        "user": {"content": draw(texts()), "blocks": [list(b) for b in blocks]},
        "summary": summary,
        "settings": {**DEFAULTS, **changes},
        "rounds": rounds,
        "results": results,
    }


def _collect(n: int, world: dict[str, Any]) -> list[dict[str, Any]]:
    drawn: list[dict[str, Any]] = []

    @settings(max_examples=n)
    @given(_generated_turn())
    def collect(case: dict[str, Any]) -> None:
        drawn.append({**json.loads(json.dumps(case)), "workspace": str(world["template"])})

    collect()
    return drawn


def _check_generated(world: dict[str, Any], pairs: list[tuple[dict[str, Any], Any]]) -> int:
    failed = [(case, reply) for case, reply in pairs if "returned" not in reply]
    assert not failed, failed[:1]
    named = [(f"generated {i}", case, reply) for i, (case, reply) in enumerate(pairs)]
    return _check(world, named)


def test_generated_turns(world: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert _check_generated(world, theirs["generated"]) >= 40


@pytest.mark.sampled
def test_generated_turns_sampled(nb030: Release, world: dict[str, Any]) -> None:
    cases = _collect(examples(full=1500, sampled=150), world)
    replies = nb030.run(RUN_TURN, [{"args": [c]} for c in cases], env={"HOME": str(world["home"])})
    assert _check_generated(world, list(zip(cases, replies, strict=True))) >= len(cases)
