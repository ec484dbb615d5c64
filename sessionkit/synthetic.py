"""Deterministic synthetic nanobot 0.2.2 sessions, so tests and benchmarks never need real chats.

Everything is driven by a seeded :class:`random.Random` passed in by the caller (no global
random state, no wall clock), so one seed always gives the same bytes.  Files are written
exactly as nanobot 0.2.2's ``SessionManager.save`` writes them: one
``json.dumps(record, ensure_ascii=False)`` line per record, metadata first.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

from sessionkit.nanobot.naming import Naming, session_filename, storage_key
from sessionkit.nanobot.writer import jsonl_line

__all__ = [
    "SAMPLE_SEED",
    "CorpusStats",
    "FeatureMix",
    "generate_corpus",
    "generate_session",
    "to_jsonl",
    "write_sample_data",
    "write_store",
]

SAMPLE_SEED = 20261130
MEDIA_DIR = "/home/u/.nanobot/media"
Record = dict[str, Any]
SessionData = tuple[Record, list[Record]]


@dataclass(frozen=True)
class FeatureMix:
    """How often each realistic feature appears; probabilities are per user turn.

    ``verbosity`` scales every text length (1.0 gives about 1.2 KB per stored line, like the
    reference corpus; the bundled sample uses less to stay small).
    """

    tool_turn: float = 0.45
    extra_tool_round: float = 0.3
    parallel_calls: float = 0.25
    long_tool_output: float = 0.45
    orphan_tool: float = 0.01
    command: float = 0.03
    delivery: float = 0.03
    media: float = 0.04
    image_only: float = 0.35
    blocks: float = 0.03
    reasoning: float = 0.2
    chinese: float = 0.1
    code: float = 0.15
    time_prefix: float = 0.02
    echo: float = 0.02
    title: float = 0.6
    consolidated: float = 0.5
    verbosity: float = 1.0


@dataclass(frozen=True)
class CorpusStats:
    """What :func:`generate_corpus` wrote."""

    n_sessions: int
    n_messages: int
    n_bytes: int
    paths: list[Path] = field(repr=False)


# ---------------------------------------------------------------------------------------------
# Text banks: fixed data, combined by the caller's rng.

_TOPICS = (
    ("nginx", "web-01"),
    ("postgres", "db-02"),
    ("the backup job", "nas"),
    ("redis", "cache-1"),
    ("the blog build", "ci"),
    ("docker compose", "homelab"),
)
_CITIES = ("Berlin", "Lisbon", "Tokyo", "Toronto", "Nairobi", "Austin")
_USER_EN = (
    "Can you check why {svc} keeps failing on {host}?",
    "Summarise the last {n} commits in the repo please.",
    "What's the weather going to be like in {city} tomorrow?",
    "Remind me to renew the domain at {h}:30.",
    "Write a Python function that {fn}.",
    "How do I {howto}?",
    "Look through ~/notes and tell me what I planned for {city}.",
    "Can you search for the latest release notes of {svc}?",
    "Why is {svc} on {host} using so much memory?",
    "Draft a short reply to Sam saying the {svc} migration slips to Friday.",
    "ok",
    "thanks!",
    "go on",
    "perfect, ship it",
    "hmm, that didn't work. same error as before",
)
_FUNCS = (
    "parses ISO dates with timezones",
    "deduplicates a list while keeping order",
    "retries an HTTP call with exponential backoff",
    "reads a CSV and sums one column",
)
_HOWTOS = (
    "rotate the nginx logs weekly",
    "undo the last git commit but keep my changes",
    "mount the NAS share at boot",
    "see which process holds port 8080",
)
_USER_ZH = (
    "帮我总结一下今天的会议记录。",
    "明天东京的天气怎么样？",
    "把这段代码改成异步的，谢谢。",
    "提醒我下午三点给妈妈打电话。",
    "解释一下什么是向量数据库，越简单越好。",
    "这个报错是什么意思：ConnectionResetError: [Errno 104]",
    "帮我查一下 {svc} 为什么在 {host} 上一直重启。",
    "好的，继续。",
    "谢谢！",
)
_ASSISTANT_EN = (
    "I checked the service status and the unit restarted three times in the last hour.",
    "The logs show a permission error when it tries to open the socket.",
    "Here is a short summary of what changed.",
    "The most likely cause is the expired certificate on the upstream.",
    "You can fix this by adding the user to the docker group and logging in again.",
    "I have updated the configuration and reloaded the service; it is healthy now.",
    "Tomorrow looks mild with light rain in the afternoon, so take an umbrella.",
    "I set the reminder and will message you when it is due.",
    "Three of the commits touch the scheduler, the rest are documentation fixes.",
    "Memory grows because the worker cache has no upper bound.",
    "If you want, I can also add a health check so this is caught earlier.",
    "That error usually means the remote side closed the connection before replying.",
    "I could not find a newer release than the one you are running.",
    "Let me know if you want the longer version with every step.",
    "Done — the draft is below, feel free to tweak the tone.",
    "The backup finished, but it skipped two folders because the disk was full.",
)
_ASSISTANT_ZH = (
    "我查看了服务状态，过去一小时内它重启了三次。",
    "日志显示在打开套接字时出现了权限错误。",
    "下面是今天会议的简要总结。",
    "向量数据库把文本转换成向量，然后按相似度检索。",
    "提醒已经设置好了，到时间我会通知你。",
    "明天东京多云，最高气温十八度，下午可能有小雨。",
    "这个错误通常表示对方在回复之前关闭了连接。",
    "我已经把函数改成了异步版本，并补充了错误处理。",
    "如果需要，我还可以帮你加上健康检查。",
)
_PREFACES_EN = (
    "Let me check.",
    "I'll look at the logs first.",
    "Searching now.",
    "One moment, reading the file.",
)
_PREFACES_ZH = ("我先看一下。", "稍等，我查一下日志。")
_REASONING = (
    "The user wants a quick answer, so I should check the service state before anything else.",
    "I need the recent logs; listing the directory first tells me which file is current.",
    "The error mentions a socket, so permissions or a stale pid file are likely.",
    "A web search is needed because my knowledge of this release may be outdated.",
    "I should keep the reply short and offer the detailed steps only if asked.",
    "用户需要中文回答，我应该先确认问题再给出步骤。",
)
_TITLES_EN = (
    "Fixing nginx restarts",
    "Weekly git summary",
    "Trip planning for Lisbon",
    "Backup job disk space",
    "Python retry helper",
)
_TITLES_ZH = ("会议记录总结", "东京天气", "异步代码改写", "向量数据库入门")
_DELIVERIES = (
    "⏰ Reminder: renew the domain today.",
    "Good morning! Today: 2 meetings, rain after 3 pm.",
    "The nightly backup finished: 14.2 GB, no errors.",
    "Heads-up: disk usage on nas is at 91%.",
    "⏰ 提醒：下午三点给妈妈打电话。",
    "Your package was delivered at 10:42.",
)
_COMMANDS = ("/status", "/help", "/model", "/history")
_MODELS = ("anthropic/claude-sonnet-4", "openai/gpt-4.1", "deepseek/deepseek-chat")
_SNIPPETS = (
    (
        "python",
        "import time\n\n\ndef retry(call, attempts=5, base=0.5):\n"
        "    for i in range(attempts):\n        try:\n            return call()\n"
        "        except OSError:\n            time.sleep(base * 2**i)\n"
        "    raise RuntimeError('gave up')",
    ),
    (
        "bash",
        "sudo systemctl status nginx --no-pager\nsudo journalctl -u nginx -n 50\n"
        "sudo nginx -t && sudo systemctl reload nginx",
    ),
    (
        "python",
        "def dedupe(items):\n    seen = set()\n    return [x for x in items if not (x in seen or seen.add(x))]",
    ),
    (
        "sql",
        "SELECT pid, state, query_start, left(query, 60)\nFROM pg_stat_activity\n"
        "WHERE state <> 'idle'\nORDER BY query_start;",
    ),
    (
        "javascript",
        "async function fetchJson(url) {\n  const res = await fetch(url);\n"
        "  if (!res.ok) throw new Error(`HTTP ${res.status}`);\n  return res.json();\n}",
    ),
)
_TOOL_NAMES = (
    "read_file",
    "list_dir",
    "exec",
    "web_search",
    "web_fetch",
    "write_file",
    "edit_file",
    "grep",
    "cron",
    "message",
)
_PATHS = (
    "/home/u/project/src/app.py",
    "/home/u/project/README.md",
    "/etc/nginx/nginx.conf",
    "/home/u/notes/trip.md",
    "/home/u/.nanobot/workspace/memory/MEMORY.md",
)
_SHELL = (
    "git log --oneline -n 20",
    "systemctl status nginx --no-pager",
    "df -h",
    "journalctl -u backup -n 80 --no-pager",
    "ps aux --sort=-%mem | head",
)
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


@dataclass(frozen=True)
class _Pool:
    """A long text and its line start offsets, so slicing N lines costs one string slice."""

    text: str
    starts: tuple[int, ...]

    def lines(self, rng: random.Random, n: int) -> str:
        n = max(1, min(n, len(self.starts) - 1))
        i = rng.randrange(len(self.starts) - n)
        return self.text[self.starts[i] : self.starts[i + n] - 1]


def _pool(lines: list[str]) -> _Pool:
    text = "\n".join(lines) + "\n"
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    return _Pool(text, tuple(starts))


@lru_cache(maxsize=1)
def _pools() -> dict[str, _Pool]:
    """Long tool outputs (listings, code, logs, pages, search hits), built once from a fixed seed."""
    r = random.Random(7)
    dirs = ("src", "tests", "docs", "scripts", "assets", "config", "build", "notes")
    stems = ("app", "main", "utils", "models", "server", "cli", "config", "index", "report")
    exts = (".py", ".md", ".json", ".ts", ".yaml", ".txt", ".sh")
    listing = []
    for i in range(700):
        if r.random() < 0.2:
            listing.append(f"📁 {r.choice(dirs)}{i % 7 or ''}")
        else:
            size = r.randint(120, 90_000)
            listing.append(f"📄 {r.choice(stems)}_{i}{r.choice(exts)}  ({size:,} bytes)")
    code = []
    for i in range(40):
        for snippet_line in _SNIPPETS[i % len(_SNIPPETS)][1].splitlines():
            code.append(snippet_line.replace("retry", f"retry_{i}"))
        code.append("")
    logs = []
    for i in range(600):
        ts = f"Nov {1 + i // 40:02d} {i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}"
        sha = "".join(r.choice("0123456789abcdef") for _ in range(7))
        if r.random() < 0.5:
            logs.append(f"{sha} {r.choice(_ASSISTANT_EN)[:60]}")
        else:
            unit = r.choice(("nginx", "backup", "postgres", "sshd"))
            logs.append(f"{ts} web-01 {unit}[{r.randint(300, 9999)}]: {r.choice(_REASONING)}")
    page = [r.choice(_ASSISTANT_EN) + " " + r.choice(_ASSISTANT_EN) for _ in range(400)]
    hits = []
    for i in range(300):
        hits.append(f"{i % 10 + 1}. {r.choice(_TITLES_EN)} - https://example.org/post/{i}")
        hits.append(f"   {r.choice(_ASSISTANT_EN)}")
    return {
        "listing": _pool(listing),
        "code": _pool(code),
        "logs": _pool(logs),
        "page": _pool(page),
        "hits": _pool(hits),
    }


# ---------------------------------------------------------------------------------------------
# Session generation.


class _Clock:
    """Strictly increasing naive timestamps, in nanobot's ``datetime.isoformat()`` form."""

    def __init__(self, rng: random.Random, start: datetime) -> None:
        self.rng = rng
        self.now = start

    def tick(self, low: float, high: float) -> str:
        step = self.rng.uniform(low, high)
        self.now += timedelta(seconds=step, microseconds=self.rng.randint(1_000, 999_999))
        return self.now.isoformat()

    def user_gap(self) -> str:
        u = self.rng.random()
        if u < 0.03:
            return self.tick(86_400, 5 * 86_400)
        if u < 0.18:
            return self.tick(3_600, 36_000)
        return self.tick(20, 900)


class _Builder:
    """Builds one session's messages in nanobot 0.2.2's stored key order."""

    def __init__(self, rng: random.Random, mix: FeatureMix, clock: _Clock, channel: str) -> None:
        self.rng = rng
        self.mix = mix
        self.clock = clock
        self.channel = channel
        self.pools = _pools()
        self.media_count = 0
        self.last_user_ts = clock.now.isoformat()

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def scaled(self, low: int, high: int) -> int:
        return max(1, int(self.rng.randint(low, high) * self.mix.verbosity))

    def call_id(self) -> str:
        return "call_" + "".join(self.rng.choices(_ALNUM, k=24))

    def prose(self, zh: bool, low: int, high: int) -> str:
        bank = _ASSISTANT_ZH if zh else _ASSISTANT_EN
        parts = self.rng.choices(bank, k=self.scaled(low, high))
        if len(parts) > 3 and self.chance(0.4):
            return parts[0] + "\n\n" + "\n".join(f"- {p}" for p in parts[1:])
        return ("" if zh else " ").join(parts)

    def user_text(self, zh: bool) -> str:
        rng = self.rng
        svc, host = rng.choice(_TOPICS)
        template = rng.choice(_USER_ZH if zh else _USER_EN)
        return template.format(
            svc=svc,
            host=host,
            n=rng.randint(3, 30),
            city=rng.choice(_CITIES),
            h=rng.randint(8, 21),
            fn=rng.choice(_FUNCS),
            howto=rng.choice(_HOWTOS),
        )

    def media_path(self) -> str:
        self.media_count += 1
        return f"{MEDIA_DIR}/img_{self.media_count}.png"

    def user(self, zh: bool) -> Record:
        """A user message: plain text, text or image-only with ``media``, or content blocks."""
        text = self.user_text(zh)
        ts = self.last_user_ts = self.clock.user_gap()
        if self.chance(self.mix.media):
            content = "" if self.chance(self.mix.image_only) else text
            return {
                "role": "user",
                "content": content,
                "timestamp": ts,
                "media": [self.media_path()],
            }
        if self.chance(self.mix.blocks):
            self.media_count += 1
            url = f"https://files.example.com/u/photo_{self.media_count}.jpg"
            blocks = [
                {"type": "text", "text": text},
                {"type": "image_url", "image_url": {"url": url}},
            ]
            return {"role": "user", "content": blocks, "timestamp": ts}
        return {"role": "user", "content": text, "timestamp": ts}

    def tool_call(self) -> tuple[dict[str, Any], str]:
        """One OpenAI-shaped call and the text its tool returned."""
        rng, pools = self.rng, self.pools
        name = rng.choice(_TOOL_NAMES)
        long = self.chance(self.mix.long_tool_output)
        n_lines = self.scaled(80, 400) if long else self.scaled(2, 14)
        if name == "read_file":
            args: dict[str, Any] = {"path": rng.choice(_PATHS)}
            result = pools["code"].lines(rng, n_lines)
        elif name == "list_dir":
            args = {"path": rng.choice(("/home/u/project", "/home/u/notes", "/var/log"))}
            result = pools["listing"].lines(rng, n_lines)
        elif name == "exec":
            args = {"command": rng.choice(_SHELL), "working_dir": "/home/u/project"}
            result = pools["logs"].lines(rng, n_lines)
        elif name == "web_search":
            args = {"query": self.user_text(False)[:60], "count": 5}
            result = pools["hits"].lines(rng, min(n_lines, 10) * 2)
        elif name == "web_fetch":
            args = {"url": f"https://example.org/post/{rng.randint(1, 999)}"}
            result = pools["page"].lines(rng, n_lines)
        elif name == "write_file":
            lang, code = rng.choice(_SNIPPETS)
            args = {"path": f"/home/u/project/scratch.{lang[:2]}", "content": code}
            result = f"Successfully wrote {len(code)} bytes to {args['path']}"
        elif name == "edit_file":
            args = {"path": rng.choice(_PATHS), "old_text": "base=0.5", "new_text": "base=1.0"}
            result = f"Successfully edited {args['path']}"
        elif name == "grep":
            args = {"pattern": "retry", "path": "/home/u/project"}
            result = pools["code"].lines(rng, n_lines)
        elif name == "cron":
            args = {"action": "add", "message": rng.choice(_DELIVERIES), "cron_expr": "30 9 * * *"}
            result = f"Created job (id: {rng.randrange(16**6):06x})"
        else:
            args = {"content": rng.choice(_DELIVERIES), "channel": self.channel}
            result = f"Message sent to {self.channel}"
        call = {
            "id": self.call_id(),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
        }
        return call, result

    def tool_round(self, zh: bool) -> list[Record]:
        """An assistant message with 1-3 tool calls (content often empty), then their results."""
        n_calls = 1 + sum(self.chance(self.mix.parallel_calls) for _ in range(2))
        calls = [self.tool_call() for _ in range(n_calls)]
        preface = self.rng.choice(_PREFACES_ZH if zh else _PREFACES_EN)
        content = preface if self.chance(0.4) else ""
        msg: Record = {"role": "assistant", "content": content}
        msg["tool_calls"] = [call for call, _ in calls]
        if self.chance(self.mix.reasoning):
            msg["reasoning_content"] = self.rng.choice(_REASONING)
        msg["timestamp"] = self.clock.tick(1, 20)
        out = [msg]
        for call, result in calls:
            out.append(self.tool_result(call["id"], call["function"]["name"], result))
        return out

    def tool_result(self, call_id: str, name: str, content: str) -> Record:
        """A ``role: tool`` message in nanobot's key order."""
        ts = self.clock.tick(0.05, 8)
        return {
            "role": "tool",
            "tool_call_id": call_id,
            "name": name,
            "content": content,
            "timestamp": ts,
        }

    def reply(self, zh: bool) -> Record:
        """The turn's final answer, sometimes with code, reasoning or replay artifacts."""
        text = self.prose(zh, 2, 12)
        if self.chance(self.mix.code):
            lang, code = self.rng.choice(_SNIPPETS)
            text = f"{text}\n\n```{lang}\n{code}\n```"
        if self.chance(self.mix.time_prefix):
            text = f"[Message Time: {self.last_user_ts}]\n{text}"
        if self.chance(self.mix.echo):
            echo = self.rng.choice(_DELIVERIES).replace("(", "").replace(")", "")
            text = f'{text}\nmessage(content="{echo}", channel="{self.channel}")'
        msg: Record = {"role": "assistant", "content": text}
        if self.chance(self.mix.reasoning):
            msg["reasoning_content"] = " ".join(self.rng.choices(_REASONING, k=self.scaled(1, 4)))
        msg["timestamp"] = self.clock.tick(2, 45)
        msg["latency_ms"] = self.rng.randint(800, 45_000)
        return msg

    def chat_turn(self) -> list[Record]:
        """User message, optional tool rounds, final reply, rarely a stray tool result."""
        zh = self.chance(self.mix.chinese)
        out = [self.user(zh)]
        if self.chance(self.mix.tool_turn):
            out.extend(self.tool_round(zh))
            rounds = 1
            while rounds < 4 and self.chance(self.mix.extra_tool_round):
                out.extend(self.tool_round(zh))
                rounds += 1
        out.append(self.reply(zh))
        if self.chance(self.mix.orphan_tool):
            out.append(self.tool_result(self.call_id(), "exec", "Error: process was terminated"))
        return out

    def command_turn(self) -> list[Record]:
        """A slash command and its reply, both ``_command`` so replay skips them (not /new,
        which clears the session instead of being stored)."""
        command = self.rng.choice(_COMMANDS)
        ts = self.last_user_ts = self.clock.user_gap()
        user = {"role": "user", "content": command, "timestamp": ts, "_command": True}
        if command == "/status":
            model = self.rng.choice(_MODELS)
            text = (
                f"🐈 nanobot v0.2.2\n🧠 Model: {model}\n💬 Session: {self.rng.randint(5, 900)} msgs"
            )
        elif command == "/model":
            text = f"Current model: {self.rng.choice(_MODELS)}"
        elif command == "/history":
            text = f"{self.rng.randint(5, 900)} messages in this session."
        else:
            text = "Commands: /new /stop /status /model /history /help"
        reply = {"role": "assistant", "content": text, "timestamp": self.clock.tick(0.1, 1)}
        reply["_command"] = True
        return [user, reply]

    def delivery(self) -> Record:
        """A proactive ``_channel_delivery`` message (reminder, cron result) sent unprompted."""
        ts = self.clock.tick(600, 7_200)
        msg: Record = {
            "role": "assistant",
            "content": self.rng.choice(_DELIVERIES),
            "timestamp": ts,
        }
        msg["_channel_delivery"] = True
        if self.chance(0.1):
            msg["media"] = [self.media_path()]
        return msg


def _as_rng(rng_or_seed: random.Random | int | str) -> random.Random:
    if isinstance(rng_or_seed, random.Random):
        return rng_or_seed
    return random.Random(rng_or_seed)


def _random_metadata(
    rng: random.Random, mix: FeatureMix, messages: list[Record], last_consolidated: int
) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if rng.random() < mix.title:
        zh = rng.random() < mix.chinese * 2
        title = rng.choice(_TITLES_ZH if zh else _TITLES_EN)
        kind = rng.random()
        if kind < 0.3:
            title = f"<think>{rng.choice(_REASONING)}</think>{title}"
        meta["title"] = title
        if kind > 0.8:
            meta["title_user_edited"] = True
    if last_consolidated and rng.random() < 0.85:
        stamp = messages[last_consolidated - 1]["timestamp"]
        text = " ".join(rng.choices(_ASSISTANT_EN, k=3))
        meta["_last_summary"] = {"text": text, "last_active": stamp}
    return meta


def _pick_offset(rng: random.Random, messages: list[Record]) -> int:
    """A user-turn boundary in the middle 60% of the session, or 0 when there is none."""
    n = len(messages)
    users = [i for i in range(n * 2 // 10, n * 8 // 10) if messages[i]["role"] == "user"]
    return rng.choice(users) if users else 0


def generate_session(
    rng_or_seed: random.Random | int | str,
    key: str,
    n_turns: int,
    *,
    mix: FeatureMix = FeatureMix(),
    start: datetime | None = None,
    assistant_only: bool = False,
    leading_orphan: bool = False,
    last_consolidated: int | None = None,
    metadata: dict[str, Any] | None = None,
) -> SessionData:
    """Generate one realistic nanobot 0.2.2 session: its metadata record and its messages.

    Parameters
    ----------
    rng_or_seed
        A :class:`random.Random` (advanced in place) or a seed for a fresh one.
    key
        Session key, ``channel:chat_id``; the channel shows up in ``message`` tool calls.
    n_turns
        Number of user turns (each becomes 2 or more messages), or of deliveries when
        ``assistant_only``.
    mix
        Per-turn feature probabilities and text length scale.
    start
        Time of the first message; drawn from the rng (in 2026) when omitted.
    assistant_only
        Only proactive ``_channel_delivery`` assistant messages, no user turn at all.
    leading_orphan
        Start with a tool result whose call is not in the file (as after a trim).
    last_consolidated
        Stored offset; by default 0 or, with probability ``mix.consolidated``, the index of a
        user message in the middle of the session.
    metadata
        The session's ``metadata`` dict; by default a random title / ``_last_summary``.

    Returns
    -------
    tuple[dict, list[dict]]
        ``({"_type": "metadata", "key", "created_at", "updated_at", "metadata",
        "last_consolidated"}, messages)`` in nanobot's key order.
    """
    rng = _as_rng(rng_or_seed)
    if start is None:
        start = datetime(2026, 1, 1) + timedelta(
            days=rng.randint(0, 300), seconds=rng.randint(0, 86_399)
        )
    clock = _Clock(rng, start)
    builder = _Builder(rng, mix, clock, key.split(":", 1)[0])
    created_at = clock.tick(0, 0)
    messages: list[Record] = []
    if leading_orphan:
        messages.append(builder.tool_result(builder.call_id(), "read_file", "(trimmed output)"))
    for _ in range(n_turns):
        if assistant_only:
            messages.append(builder.delivery())
            continue
        if builder.chance(mix.delivery):
            messages.append(builder.delivery())
        if builder.chance(mix.command):
            messages.extend(builder.command_turn())
        else:
            messages.extend(builder.chat_turn())
    if last_consolidated is None:
        consolidate = not assistant_only and rng.random() < mix.consolidated
        last_consolidated = _pick_offset(rng, messages) if consolidate else 0
    if metadata is None:
        metadata = _random_metadata(rng, mix, messages, last_consolidated)
    record = {
        "_type": "metadata",
        "key": key,
        "created_at": created_at,
        "updated_at": clock.tick(0, 2),
        "metadata": metadata,
        "last_consolidated": last_consolidated,
    }
    return record, messages


# ---------------------------------------------------------------------------------------------
# Writing stores.


def to_jsonl(records: Iterable[Record]) -> str:
    """Records as nanobot 0.2.2's ``SessionManager.save`` writes them: one JSON line each."""
    return "".join(map(jsonl_line, records))


def write_store(
    sessions_dir: str | Path,
    sessions: Iterable[SessionData],
    *,
    naming: Naming = "nanobot-0.2",
) -> list[Path]:
    """Write sessions as ``<stem>.jsonl`` files, byte-identical to nanobot's own save.

    Parameters
    ----------
    sessions_dir
        Folder to write into (created if missing).
    sessions
        ``(metadata_record, messages)`` pairs, as :func:`generate_session` returns.
    naming
        ``"nanobot-0.2"`` (safe key, ``telegram_123.jsonl``) or ``"nanobot-0.3"``
        (base64url of the key without padding).

    Returns
    -------
    list[Path]
        The files written, in input order.

    Raises
    ------
    ValueError
        When two keys map to the same file name.
    """
    folder = Path(sessions_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for record, messages in sessions:
        path = folder / session_filename(record["key"], naming)
        if path in paths:
            raise ValueError(f"two sessions map to {path.name}")
        path.write_bytes(to_jsonl([record, *messages]).encode("utf-8"))
        paths.append(path)
    return paths


_CORPUS_CHANNELS = ("telegram", "discord", "slack", "webui", "cli", "feishu", "whatsapp", "email")


def generate_corpus(
    out_dir: str | Path,
    *,
    n_sessions: int = 1000,
    target_messages: int = 400_000,
    seed: int = 0,
    mix: FeatureMix = FeatureMix(),
) -> CorpusStats:
    """Write a benchmark store of about ``target_messages`` messages over ``n_sessions`` files.

    Session lengths are skewed (a few very long, many short) like real stores; each
    session's turn count is set from the budget still left, so the total lands close to
    the target.  At the default ``mix`` lines average about 1.2 KB.

    Parameters
    ----------
    out_dir
        The sessions folder to write (nanobot 0.2 file names).
    n_sessions, target_messages
        Corpus shape.
    seed
        Seed for the whole corpus.
    mix
        Feature probabilities and text length scale.

    Returns
    -------
    CorpusStats
        Sessions, messages and bytes written, and the file paths.
    """
    rng = random.Random(seed)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    n_messages = n_bytes = 0
    per_turn = 3.5
    turns_done = 0
    for i in range(n_sessions):
        left = max(target_messages - n_messages, n_sessions - i)
        want = left / (n_sessions - i) * min(rng.lognormvariate(-0.4, 0.9), 8.0)
        n_turns = max(1, round(want / per_turn))
        key = f"{_CORPUS_CHANNELS[i % len(_CORPUS_CHANNELS)]}:{100_000 + i}"
        record, messages = generate_session(rng, key, n_turns, mix=mix)
        data = to_jsonl([record, *messages]).encode("utf-8")
        path = folder / session_filename(key)
        path.write_bytes(data)
        paths.append(path)
        n_messages += len(messages)
        n_bytes += len(data)
        turns_done += n_turns
        per_turn = n_messages / turns_done
    return CorpusStats(n_sessions, n_messages, n_bytes, paths)


# ---------------------------------------------------------------------------------------------
# The bundled sample store (``data/``): what each file exercises is listed in data/README.md.

_SAMPLE_MIX = FeatureMix(verbosity=0.25, long_tool_output=0.2, title=0.0)


@dataclass(frozen=True)
class _Sample:
    """One bundled session: how to generate it and how to lay it out on disk."""

    key: str
    n_turns: int
    mix: dict[str, float] = field(default_factory=dict)
    title: str | None = None
    user_edited: bool = False
    consolidated: bool = False
    layout: str = "jsonl"
    assistant_only: bool = False
    leading_orphan: bool = False


_SAMPLES = (
    _Sample("telegram:12345", 640, consolidated=True, title="Homelab helper"),
    _Sample("cli:direct", 200, {"tool_turn": 0.8, "code": 0.4, "long_tool_output": 0.35}),
    _Sample(
        "webui:abc123",
        120,
        {"media": 0.15, "blocks": 0.1},
        title="<think>The user is asking about nginx restarts.</think>Fixing nginx restarts",
        consolidated=True,
    ),
    _Sample("webui:f00d42", 80, title="My Lisbon trip", user_edited=True),
    _Sample("discord:987", 100, {"command": 0.2}),
    _Sample(
        "slack:C01:thread",
        100,
        {"echo": 0.15, "time_prefix": 0.15},
        title="Weekly git summary",
        consolidated=True,
    ),
    _Sample(
        "telegram:777",
        90,
        {"chinese": 0.9},
        title="<think>用户想改标题</think>会议记录",
        user_edited=True,
    ),
    _Sample(
        "feishu:ou_5f3a",
        90,
        {"chinese": 0.7, "reasoning": 0.5},
        title="<think>用户在问天气。</think>东京天气",
        consolidated=True,
    ),
    _Sample("whatsapp:+15551234567", 80, {"media": 0.3, "image_only": 0.6}),
    _Sample("email:alice@example.com", 60, {"verbosity": 0.5, "delivery": 0.1}),
    _Sample("dingtalk:staff42", 90, {"orphan_tool": 0.05}, leading_orphan=True),
    _Sample("telegram:42", 200, assistant_only=True),
    _Sample("qq:10001", 80, layout="no-metadata"),
    _Sample("webui:def456", 90, title="Provider state demo", layout="provider-state"),
    _Sample("cli:legacy", 50, layout="legacy-json"),
)


def _sample_session(spec: _Sample, seed: int) -> SessionData:
    mix = replace(_SAMPLE_MIX, consolidated=float(spec.consolidated), **spec.mix)
    record, messages = generate_session(
        f"{seed}:{spec.key}",
        spec.key,
        spec.n_turns,
        mix=mix,
        assistant_only=spec.assistant_only,
        leading_orphan=spec.leading_orphan,
    )
    head: dict[str, Any] = {}
    if spec.title is not None:
        head["title"] = spec.title
    if spec.user_edited:
        head["title_user_edited"] = True
    record["metadata"] = head | record["metadata"]
    return record, messages


def _write_sample(folder: Path, spec: _Sample, seed: int) -> Path:
    record, messages = _sample_session(spec, seed)
    if spec.layout == "jsonl":
        return write_store(folder, [(record, messages)])[0]
    if spec.layout == "no-metadata":
        path = folder / session_filename(spec.key)
        path.write_bytes(to_jsonl(messages).encode("utf-8"))
        return path
    if spec.layout == "provider-state":
        later = {k: v for k, v in record.items() if k != "last_consolidated"}
        later |= {"last_archived": 0, "last_consolidated": record["last_consolidated"]}
        response_id = "resp_" + "".join(random.Random(spec.key).choices("0123456789abcdef", k=32))
        state = {
            "kind": "openai_responses",
            "provider": "openai:default",
            "model": "gpt-5",
            "version": 1,
            "payload": {"response_id": response_id},
            "pending_messages": [],
        }
        path = folder / f"{storage_key(spec.key)}.jsonl"
        lines = [later, {"_type": "provider_state", "state": state}, *messages]
        path.write_bytes(to_jsonl(lines).encode("utf-8"))
        return path
    legacy = {"key": spec.key, "created_at": record["created_at"], "history": messages}
    path = folder / "legacy_chat.json"
    path.write_bytes((json.dumps(legacy, ensure_ascii=False, indent=2) + "\n").encode("utf-8"))
    return path


def _damaged_files(seed: int) -> dict[str, bytes]:
    """File name -> bytes for each deliberately damaged session (one problem each, mostly)."""

    def lines(name: str, **changes: Any) -> list[bytes]:
        """A small valid session's lines, with ``changes`` applied to its metadata record."""
        key = f"damaged:{name}"
        mix = replace(_SAMPLE_MIX, verbosity=0.15, consolidated=0.0)
        record, messages = generate_session(f"{seed}:{key}", key, 8, mix=mix)
        record.update(changes)
        return [line.encode("utf-8") for line in to_jsonl([record, *messages]).splitlines()]

    def joined(parts: list[bytes]) -> bytes:
        return b"".join(p + b"\n" for p in parts)

    def cut(line: bytes, n: int) -> bytes:
        """The first ``n`` bytes of a line, dropping a split UTF-8 character (one problem only)."""
        return line[:n].decode("utf-8", "ignore").encode("utf-8")

    def with_line(name: str, bad: bytes) -> bytes:
        parts = lines(name)
        parts.insert(len(parts) // 2, bad)
        return joined(parts)

    files: dict[str, bytes] = {}
    parts = lines("truncated_last_line")
    files["truncated_last_line"] = joined(parts[:-1]) + cut(parts[-1], len(parts[-1]) // 2)
    files["not_json_line"] = with_line("not_json_line", b"<<<<<<< HEAD")
    files["non_object_array"] = with_line("non_object_array", b"[1, 2]")
    files["non_object_string"] = with_line("non_object_string", b'"text"')
    parts = lines("invalid_utf8")
    stamp = json.loads(parts[len(parts) // 2 - 1])["timestamp"]
    latin1 = {"role": "user", "content": "café crème, s'il vous plaît", "timestamp": stamp}
    parts.insert(len(parts) // 2, json.dumps(latin1, ensure_ascii=False).encode("latin-1"))
    files["invalid_utf8"] = joined(parts)
    files["last_consolidated_string"] = joined(
        lines("last_consolidated_string", last_consolidated="7")
    )
    files["last_consolidated_out_of_range"] = joined(
        lines("last_consolidated_out_of_range", last_consolidated=999_999)
    )
    files["empty"] = b""
    files["blank_lines"] = b"\n\n   \n\t\n\n"
    files["crlf_line_endings"] = joined(lines("crlf_line_endings")).replace(b"\n", b"\r\n")
    files["created_at_not_iso"] = joined(lines("created_at_not_iso", created_at="30/11/2026 09:15"))
    parts = lines("several_problems", created_at="yesterday", last_consolidated=999_999)
    parts[3] = parts[3] + b"\r"
    parts.insert(5, b"")
    parts.insert(6, b"not json at all")
    files["several_problems"] = joined(parts[:-1]) + cut(parts[-1], 40)
    return {session_filename(f"damaged:{name}"): data for name, data in files.items()}


def write_sample_data(out_dir: str | Path, *, seed: int = SAMPLE_SEED) -> list[Path]:
    """Regenerate the bundled sample: ``<out_dir>/sessions`` and ``<out_dir>/damaged``.

    Both folders are replaced, so a rerun gives byte-identical output and no stale files.

    Parameters
    ----------
    out_dir
        The data folder (``data/`` in the repository).
    seed
        Seed; the committed data uses :data:`SAMPLE_SEED`.

    Returns
    -------
    list[Path]
        Every file written, sessions first.
    """
    root = Path(out_dir)
    sessions, damaged = root / "sessions", root / "damaged"
    for folder in (sessions, damaged):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    paths = [_write_sample(sessions, spec, seed) for spec in _SAMPLES]
    for name, data in _damaged_files(seed).items():
        path = damaged / name
        path.write_bytes(data)
        paths.append(path)
    return paths
