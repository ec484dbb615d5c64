"""Run nanobot 0.3.5's own gateway agent loop against the local stub: ``run_gateway(tmp_path, scenario)``.

A scenario (plain JSON-able dict) holds the settings, the workspace files, the reply to
requests the script does not cover (the governor's summary calls) and the user turns in
order; each turn names its session (``channel:chat_id``), its text, the scripted replies its
agent calls take, in order, and the steps before which the governor makes a summary call
(0: at the turn's start; k > 0: mid-turn, after k agent calls)::

    {"settings": {"context_window_tokens": int, "max_tokens": int},
     "files": {"notes/todo.md": "..."},
     "summary": {"text": "...", "usage": {...}},
     "turns": [{"session": "telegram:alice", "text": "...", "summaries": [],
                "replies": [{"text"?: "...", "tool_calls"?: [{"name", "arguments"}],
                             "usage": {"prompt_tokens", "completion_tokens", "cached_tokens"}}]}]}

Each turn's text must be unique in the run and must not occur in nanobot's own prompts: the
stub tells a turn's first agent call from a summary call by it (``stub_openai``).

Optional keys: ``"gaps"`` (seconds the clock jumps before each turn, the release's and the
stub's alike: ``gateway_035.py``), ``"provider"`` (the config's provider entry pointed at the
stub, default ``"custom"``; ``"openrouter"`` makes 0.3.5 send a Claude model's
``cache_control`` markers) and ``"model"`` (default :data:`MODEL`).  ``run_gateway(...,
cache=)`` gives the stub a prompt cache (``support.provider_caches``) whose counts replace the
scripted usage numbers.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.releases import _harness_env, release
from support.stub_openai import Cache, Call, Reply, ScriptedTurn, StubServer, Usage

__all__ = ["SCENARIO_BASIC", "SCENARIO_CACHE", "SCENARIO_GOVERNOR", "GatewayRun", "run_gateway"]

DRIVER = Path(__file__).with_name("gateway_035.py")
MODEL = "stub-model"


@dataclass(frozen=True)
class GatewayRun:
    """What one run of 0.3.5's gateway loop sent, and what it left on disk.

    ``requests[i]`` is the JSON body of the i-th provider call, in arrival order;
    ``kinds[i]`` is ``"scripted"`` (an agent call) or ``"default"`` (a governor summary
    call); ``usage[i]`` the usage the stub reported for it; ``turns[i]`` the index of the
    scenario turn it happened in (turns run one after another, so each call falls inside
    exactly one turn's time window); ``steps[i]`` the zero-based agent call within that turn
    that the call belongs to (a summary call belongs to the step it precedes).

    Facts observed in these runs (what a rebuild of the requests must honour):

    - Bodies: ``model``, ``messages``, ``tools`` (the same 23 definitions on every call,
      summary calls included), ``tool_choice: "auto"``, ``max_tokens`` (the config's),
      ``temperature``, ``stream: true`` and ``stream_options: {"include_usage": true}``
      on every call.  Tool-call ids are sent as the provider returned them.
    - Turn and step: a turn with k tool rounds makes k + 1 agent calls; step j's messages
      are step j-1's plus the assistant tool-call message and the tool results of round
      j-1 (no summary between).  Step 0 is ``[system, *history, current]``.
    - Saved vs sent: saved messages add ``timestamp`` (all), ``latency_ms`` (the turn's last
      assistant message) and ``_runtime_context`` (a user message that got a runtime-context
      suffix: here an explicit ``$memory`` skill block); the wire keeps role, content,
      tool_calls, tool_call_id, name only.  An assistant tool-call message saved with content
      ``""`` is sent with ``null``.  The runtime-context suffix is saved inside the content and
      replayed unchanged in later history.  A tool result over ``max_tool_result_chars``
      (16,000, not ``read_file``) is offloaded to ``<workspace>/.nanobot/tool-results/`` before
      it enters the transcript: the reference text (absolute path + preview) is both sent and
      saved.  Consecutive user messages are merged on the wire, joined by a blank line and
      the result ``strip()``-ped (a trailing newline typed by the user is saved, not sent).
    - Governor (``SCENARIO_GOVERNOR``: window 10,680, max_tokens 256, budget 9,400): a summary
      call is the accepted prefix H plus nanobot's archive instruction as a user message.
      Mid-turn (before step k > 0) H is step k-1's request, so on the wire the instruction is
      merged into the current user message (step 1) — the current message then is in the
      summary and gone from the continuation.  At a turn's start H is system + history
      (the current message is not in it).  The call after it is [system + "archived
      summary" part whose ``last active`` is the clock at that moment (aware ISO time, stored
      nowhere), the continuation user message (the checkpoint's text), the delta (mid-turn:
      the step's assistant tool call + results; turn start: the current message, merged on
      the wire into the continuation message)].  Summary calls log ``source = "dream"`` and
      get the stub's default reply; the summary text is appended to
      ``memory/history.jsonl`` (cursor, session_key).
    - Saved checkpoint: ``{"role": "user", "content": <continuation text>,
      "_hidden_history": true, "timestamp"}`` inserted at the boundary — mid-turn after the
      turn's user message, at a turn's start before it (stamped later than the message
      after it).  ``last_archived == last_consolidated`` = its index (metadata line not
      counted); ``metadata._last_summary = {text, last_active}`` with ``last_active`` the
      session's ``updated_at`` when committed (naive ISO), overwritten by the next summary:
      an earlier summary's ``last_active`` (used by the next turn-start summary call's system
      prompt) is no longer on disk.  The next turn's history starts at the checkpoint, which
      is replayed as a user message (merged on the wire with a user message after it).
    - ``metadata._last_usage``: the sum over the session's last turn's agent calls
      (``input_tokens`` = prompt tokens, cached tokens reported separately).
    """

    workspace: Path
    data_dir: Path
    config: Path
    home: Path
    requests: list[dict[str, Any]]
    kinds: list[str]
    usage: list[Usage]
    turns: list[int]
    steps: list[int]
    output: dict[str, Any]

    @property
    def usage_db(self) -> Path:
        return self.data_dir / "llm_usage.sqlite3"

    @property
    def sessions_dir(self) -> Path:
        """``<data dir>/sessions/<workspace id>/``, where 0.3.5 keeps this workspace's sessions."""
        workspace_id = (self.workspace / ".nanobot" / "workspace-id").read_text().strip()
        return self.data_dir / "sessions" / workspace_id

    def session_file(self, key: str) -> Path:
        """The JSONL file of one session (base64url of the key, no padding)."""
        name = base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")
        return self.sessions_dir / f"{name}.jsonl"

    def session_lines(self, key: str) -> list[dict[str, Any]]:
        """The parsed lines of one session file (metadata line first)."""
        lines = self.session_file(key).read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def _write_private(path: Path, text: str) -> None:
    _private_dir(path.parent)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)


def _config(scenario: dict[str, Any], workspace: Path, url: str) -> dict[str, Any]:
    settings = scenario.get("settings", {})
    provider = scenario.get("provider", "custom")
    defaults = {
        "workspace": str(workspace),
        "model": scenario.get("model", MODEL),
        "provider": provider,
        "timezone": "UTC",
        **{
            k: v
            for k, v in (
                ("maxTokens", settings.get("max_tokens")),
                ("contextWindowTokens", settings.get("context_window_tokens")),
            )
            if v is not None
        },
    }
    return {
        "agents": {"defaults": defaults},
        "providers": {provider: {"apiKey": "sk-stub", "apiBase": url}},
    }


def _environment(home: Path) -> dict[str, str]:
    """A minimal environment: no proxies, no NANOBOT_* settings, HOME in the run's folder."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "NO_PROXY": "127.0.0.1,localhost",
        "TIKTOKEN_CACHE_DIR": _harness_env(True, None)["TIKTOKEN_CACHE_DIR"],
    }


def _place(calls: list[Call], turns: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """Each call's turn (by the turn windows) and step (agent calls before it in its turn)."""
    turn_of: list[int] = []
    step_of: list[int] = []
    for call in calls:
        inside = [
            i for i, t in enumerate(turns) if t["started_ns"] <= call.received_ns <= t["ended_ns"]
        ]
        if len(inside) != 1:
            raise RuntimeError(f"call {call.index} falls in turns {inside}")
        earlier = [
            c
            for c, t in zip(calls[: call.index], turn_of, strict=True)
            if t == inside[0] and c.kind == "scripted"
        ]
        turn_of.append(inside[0])
        step_of.append(len(earlier))
    return turn_of, step_of


def run_gateway(tmp_path: Path, scenario: dict[str, Any], cache: Cache | None = None) -> GatewayRun:
    """Run the scenario's turns through 0.3.5's gateway loop against a fresh stub (with
    ``cache``, its prompt cache)."""
    python = release("0.3.5").python
    root = _private_dir(tmp_path / "gateway")
    home, data, workspace = (_private_dir(root / name) for name in ("home", "data", "workspace"))
    for name, text in scenario.get("files", {}).items():
        _write_private(workspace / name, text)
    turns = scenario["turns"]
    script = [ScriptedTurn(t["text"], tuple(map(Reply.from_json, t["replies"]))) for t in turns]
    summary = Reply.from_json(scenario["summary"])
    gaps = scenario.get("gaps")
    with StubServer(script, default=summary, gaps=gaps, cache=cache) as stub:
        config = data / "config.json"
        _write_private(config, json.dumps(_config(scenario, workspace, stub.url), indent=2))
        request = {
            "config": str(config),
            "turns": [{"session": t["session"], "text": t["text"]} for t in turns],
            "gaps": gaps,
        }
        proc = subprocess.run(
            [str(python), "-I", str(DRIVER)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=_environment(home),
            cwd=root,
            timeout=300,
            check=False,
        )
        calls = list(stub.calls)
    if proc.returncode != 0:
        raise RuntimeError(f"gateway driver failed:\n{proc.stderr[-4000:]}")
    output = json.loads(proc.stdout)
    if output["nanobot"] != "0.3.5" or not output["tiktoken"]:
        raise RuntimeError(f"driver ran nanobot {output['nanobot']}, tiktoken={output['tiktoken']}")
    turn_of, step_of = _place(calls, output["turns"])
    return GatewayRun(
        workspace=workspace,
        data_dir=data,
        config=config,
        home=home,
        requests=[c.body for c in calls],
        kinds=[c.kind for c in calls],
        usage=[c.reply.usage if c.reply else Usage(0, 0) for c in calls],
        turns=turn_of,
        steps=step_of,
        output=output,
    )


def _usage(prompt: int, completion: int, cached: int = 0) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": cached}


CTX, ALPHA, BETA, DRAFT = 10_680, 60, 40, 55

_TODO = "# Todo\n\n- water the plants\n- call the bank about the card\n- book the train to Lyon\n"

_WORDS = [
    "river",
    "stone",
    "lantern",
    "orchard",
    "copper",
    "meadow",
    "harbour",
    "violet",
    "engine",
    "candle",
    "ledger",
    "tundra",
    "pepper",
    "saddle",
    "beacon",
    "marble",
    "willow",
    "thunder",
    "parcel",
    "glacier",
]


def _prose(tag: str, lines: int) -> str:
    """Deterministic filler text: ``lines`` numbered lines of ten words each."""
    return "".join(
        f"{tag} {i:03d}: "
        + " ".join(_WORDS[(i * 7 + j * 3) % len(_WORDS)] for j in range(10))
        + "\n"
        for i in range(lines)
    )


SCENARIO_BASIC: dict[str, Any] = {
    "settings": {},
    "files": {
        "notes/todo.md": _TODO,
        "notes/ideas.txt": "a garden of herbs\nshelves\n",
        **{
            f"archive/{i:03d}-{'-'.join(_WORDS[i % 8 : i % 8 + 12])}.txt": "x\n" for i in range(180)
        },
    },
    "summary": {"text": "Summary: nothing to keep.", "usage": _usage(900, 12)},
    "turns": [
        {
            "session": "telegram:alice",
            "text": "Hello there, who are you? (basic-1)",
            "summaries": [],
            "replies": [{"text": "Hi Alice, I am your assistant.", "usage": _usage(8101, 9)}],
        },
        {
            "session": "telegram:alice",
            "text": "What is in my notes folder? (basic-2)",
            "summaries": [],
            "replies": [
                {
                    "tool_calls": [{"name": "list_dir", "arguments": {"path": "notes"}}],
                    "usage": _usage(8160, 21, 8064),
                },
                {
                    "text": "Let me open the todo list.",
                    "tool_calls": [{"name": "read_file", "arguments": {"path": "notes/todo.md"}}],
                    "usage": _usage(8230, 30, 8128),
                },
                {
                    "text": "You have three things to do: plants, bank, train.",
                    "usage": _usage(8330, 14, 8192),
                },
            ],
        },
        {
            "session": "slack:C42",
            "text": "Read notes/ideas.txt and my todo list, please. (basic-3)",
            "summaries": [],
            "replies": [
                {
                    "tool_calls": [
                        {"name": "read_file", "arguments": {"path": "notes/ideas.txt"}},
                        {"name": "read_file", "arguments": {"path": "notes/todo.md"}},
                    ],
                    "usage": _usage(8120, 40),
                },
                {
                    "text": "Herbs and shelves; plus your three errands.",
                    "usage": _usage(8290, 11, 7936),
                },
            ],
        },
        {
            "session": "telegram:alice",
            "text": "Thanks! Anything else for $memory? (basic-4)",
            "summaries": [],
            "replies": [{"text": "No, that is all.", "usage": _usage(8400, 6, 8320)}],
        },
        {
            "session": "slack:C42",
            "text": "List everything under archive/ please. (basic-5)",
            "summaries": [],
            "replies": [
                {
                    "tool_calls": [{"name": "list_dir", "arguments": {"path": "archive"}}],
                    "usage": _usage(8350, 18, 8256),
                },
                {"text": "There are 180 entries.", "usage": _usage(8900, 7, 8320)},
            ],
        },
        {
            "session": "telegram:alice",
            "text": "Bye for now. (basic-6)",
            "summaries": [],
            "replies": [{"text": "Bye, Alice.", "usage": _usage(8460, 4, 8384)}],
        },
    ],
}

SCENARIO_GOVERNOR: dict[str, Any] = {
    "settings": {"context_window_tokens": CTX, "max_tokens": 256},
    "files": {"docs/alpha.md": _prose("alpha", ALPHA), "docs/beta.md": _prose("beta", BETA)},
    "summary": {"text": "Summary: the user had alpha and beta read.", "usage": _usage(7300, 12)},
    "turns": [
        {
            "session": "telegram:gov",
            "text": "Please read docs/alpha.md for me. (gov-1)",
            "summaries": [],
            "replies": [
                {
                    "tool_calls": [{"name": "read_file", "arguments": {"path": "docs/alpha.md"}}],
                    "usage": _usage(7850, 20),
                },
                {"text": "Alpha is read.", "usage": _usage(9400, 5, 7808)},
            ],
        },
        {
            "session": "telegram:gov",
            "text": "Now read docs/beta.md as well. (gov-2)",
            "summaries": [1],
            "replies": [
                {
                    "tool_calls": [{"name": "read_file", "arguments": {"path": "docs/beta.md"}}],
                    "usage": _usage(9450, 20, 9344),
                },
                {"text": "Beta is read too.", "usage": _usage(8900, 6)},
            ],
        },
        {
            "session": "telegram:gov",
            "text": "Here is my long draft, keep it in mind. (gov-3)\n" + _prose("draft", DRAFT),
            "summaries": [0],
            "replies": [{"text": "Noted your draft.", "usage": _usage(8950, 5)}],
        },
        {
            "session": "telegram:gov",
            "text": "What did we do so far? (gov-4)",
            "summaries": [],
            "replies": [
                {"text": "We read two files and your draft.", "usage": _usage(9000, 9, 8896)}
            ],
        },
    ],
}


def _placeholder(completion: int) -> dict[str, int]:
    """A placeholder: the stub's cache replaces the prompt and cache numbers."""
    return {"prompt_tokens": 1, "completion_tokens": completion}


SCENARIO_CACHE: dict[str, Any] = {
    "files": {"notes/todo.md": "# Todo\n\n- water the plants\n- call the bank\n"},
    "summary": {"text": "Summary.", "usage": _placeholder(3)},
    "gaps": [0, 60, 420, 200, 30, 600],
    "turns": [
        {
            "session": "telegram:cache",
            "text": "Hello there, who are you? (cache-1)",
            "replies": [{"text": "Hi, I am your assistant.", "usage": _placeholder(7)}],
        },
        {
            "session": "telegram:cache",
            "text": "What is in my notes folder? (cache-2)",
            "replies": [
                {
                    "text": "Let me look.",
                    "tool_calls": [{"name": "list_dir", "arguments": {"path": "notes"}}],
                    "usage": _placeholder(12),
                },
                {
                    "text": "Let me open the todo list.",
                    "tool_calls": [{"name": "read_file", "arguments": {"path": "notes/todo.md"}}],
                    "usage": _placeholder(20),
                },
                {"text": "Two things: plants and the bank.", "usage": _placeholder(9)},
            ],
        },
        {
            "session": "telegram:cache",
            "text": "Read the todo list again, please. (cache-3)",
            "replies": [
                {
                    "text": "Opening it.",
                    "tool_calls": [{"name": "read_file", "arguments": {"path": "notes/todo.md"}}],
                    "usage": _placeholder(15),
                },
                {"text": "Still plants and the bank.", "usage": _placeholder(8)},
            ],
        },
        {
            "session": "telegram:cache",
            "text": "Which one comes first? (cache-4)",
            "replies": [{"text": "The plants.", "usage": _placeholder(4)}],
        },
        {
            "session": "telegram:cache",
            "text": "And then? (cache-5)",
            "replies": [{"text": "The bank.", "usage": _placeholder(3)}],
        },
        {
            "session": "telegram:cache",
            "text": "Thanks, bye for now. (cache-6)",
            "replies": [{"text": "Bye.", "usage": _placeholder(2)}],
        },
    ],
}
"""One session of six turns (nine agent calls, no summary) for a stub with a prompt cache
(``support.provider_caches``): the clock jumps 1, 7, 3.3, 0.5 and 10 minutes before turns 1-5
(nanobot's idle compaction waits 15); each tool call comes with text, so 0.3.5 can mark the
message before a step's one tool result (``sessionkit.calls.caching``)."""
