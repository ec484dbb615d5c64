"""One generated session: turns, tool rounds, media, reasoning and metadata, in nanobot 0.2.2's
stored key order, from a seeded rng."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sessionkit.synthetic.vocabulary import (
    ALNUM,
    ASSISTANT_EN,
    ASSISTANT_ZH,
    CITIES,
    COMMANDS,
    DELIVERIES,
    FUNCS,
    HOWTOS,
    MODELS,
    PATHS,
    PREFACES_EN,
    PREFACES_ZH,
    REASONING,
    SHELL,
    SNIPPETS,
    TITLES_EN,
    TITLES_ZH,
    TOOL_NAMES,
    TOPICS,
    USER_EN,
    USER_ZH,
    pools,
)

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
        self.pools = pools()
        self.media_count = 0
        self.last_user_ts = clock.now.isoformat()

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def scaled(self, low: int, high: int) -> int:
        return max(1, int(self.rng.randint(low, high) * self.mix.verbosity))

    def call_id(self) -> str:
        return "call_" + "".join(self.rng.choices(ALNUM, k=24))

    def prose(self, zh: bool, low: int, high: int) -> str:
        bank = ASSISTANT_ZH if zh else ASSISTANT_EN
        parts = self.rng.choices(bank, k=self.scaled(low, high))
        if len(parts) > 3 and self.chance(0.4):
            return parts[0] + "\n\n" + "\n".join(f"- {p}" for p in parts[1:])
        return ("" if zh else " ").join(parts)

    def user_text(self, zh: bool) -> str:
        rng = self.rng
        svc, host = rng.choice(TOPICS)
        template = rng.choice(USER_ZH if zh else USER_EN)
        return template.format(
            svc=svc,
            host=host,
            n=rng.randint(3, 30),
            city=rng.choice(CITIES),
            h=rng.randint(8, 21),
            fn=rng.choice(FUNCS),
            howto=rng.choice(HOWTOS),
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
        name = rng.choice(TOOL_NAMES)
        long = self.chance(self.mix.long_tool_output)
        n_lines = self.scaled(80, 400) if long else self.scaled(2, 14)
        if name == "read_file":
            args: dict[str, Any] = {"path": rng.choice(PATHS)}
            result = pools["code"].lines(rng, n_lines)
        elif name == "list_dir":
            args = {"path": rng.choice(("/home/u/project", "/home/u/notes", "/var/log"))}
            result = pools["listing"].lines(rng, n_lines)
        elif name == "exec":
            args = {"command": rng.choice(SHELL), "working_dir": "/home/u/project"}
            result = pools["logs"].lines(rng, n_lines)
        elif name == "web_search":
            args = {"query": self.user_text(False)[:60], "count": 5}
            result = pools["hits"].lines(rng, min(n_lines, 10) * 2)
        elif name == "web_fetch":
            args = {"url": f"https://example.org/post/{rng.randint(1, 999)}"}
            result = pools["page"].lines(rng, n_lines)
        elif name == "write_file":
            lang, code = rng.choice(SNIPPETS)
            args = {"path": f"/home/u/project/scratch.{lang[:2]}", "content": code}
            result = f"Successfully wrote {len(code)} bytes to {args['path']}"
        elif name == "edit_file":
            args = {"path": rng.choice(PATHS), "old_text": "base=0.5", "new_text": "base=1.0"}
            result = f"Successfully edited {args['path']}"
        elif name == "grep":
            args = {"pattern": "retry", "path": "/home/u/project"}
            result = pools["code"].lines(rng, n_lines)
        elif name == "cron":
            args = {"action": "add", "message": rng.choice(DELIVERIES), "cron_expr": "30 9 * * *"}
            result = f"Created job (id: {rng.randrange(16**6):06x})"
        else:
            args = {"content": rng.choice(DELIVERIES), "channel": self.channel}
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
        preface = self.rng.choice(PREFACES_ZH if zh else PREFACES_EN)
        content = preface if self.chance(0.4) else ""
        msg: Record = {"role": "assistant", "content": content}
        msg["tool_calls"] = [call for call, _ in calls]
        if self.chance(self.mix.reasoning):
            msg["reasoning_content"] = self.rng.choice(REASONING)
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
            lang, code = self.rng.choice(SNIPPETS)
            text = f"{text}\n\n```{lang}\n{code}\n```"
        if self.chance(self.mix.time_prefix):
            text = f"[Message Time: {self.last_user_ts}]\n{text}"
        if self.chance(self.mix.echo):
            echo = self.rng.choice(DELIVERIES).replace("(", "").replace(")", "")
            text = f'{text}\nmessage(content="{echo}", channel="{self.channel}")'
        msg: Record = {"role": "assistant", "content": text}
        if self.chance(self.mix.reasoning):
            msg["reasoning_content"] = " ".join(self.rng.choices(REASONING, k=self.scaled(1, 4)))
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
        command = self.rng.choice(COMMANDS)
        ts = self.last_user_ts = self.clock.user_gap()
        user = {"role": "user", "content": command, "timestamp": ts, "_command": True}
        if command == "/status":
            model = self.rng.choice(MODELS)
            text = (
                f"🐈 nanobot v0.2.2\n🧠 Model: {model}\n💬 Session: {self.rng.randint(5, 900)} msgs"
            )
        elif command == "/model":
            text = f"Current model: {self.rng.choice(MODELS)}"
        elif command == "/history":
            text = f"{self.rng.randint(5, 900)} messages in this session."
        else:
            text = "Commands: /new /stop /status /model /history /help"
        reply: Record = {"role": "assistant", "content": text, "timestamp": self.clock.tick(0.1, 1)}
        reply["_command"] = True
        return [user, reply]

    def delivery(self) -> Record:
        """A proactive ``_channel_delivery`` message (reminder, cron result) sent unprompted."""
        ts = self.clock.tick(600, 7_200)
        msg: Record = {
            "role": "assistant",
            "content": self.rng.choice(DELIVERIES),
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
        title = rng.choice(TITLES_ZH if zh else TITLES_EN)
        kind = rng.random()
        if kind < 0.3:
            title = f"<think>{rng.choice(REASONING)}</think>{title}"
        meta["title"] = title
        if kind > 0.8:
            meta["title_user_edited"] = True
    if last_consolidated and rng.random() < 0.85:
        stamp = messages[last_consolidated - 1]["timestamp"]
        text = " ".join(rng.choices(ASSISTANT_EN, k=3))
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
