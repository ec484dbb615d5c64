"""Two providers' prompt caches as the stub model server applies them, written from the
providers' dated documentation, apart from sessionkit's model (``sessionkit.calls.caching``),
so a test can hold sessionkit's prediction against them call by call.

- :class:`OpenAIPrefixCache`, OpenAI, "Prompt caching"
  (https://developers.openai.com/api/docs/guides/prompt-caching, read 2026-12-07): prompts of
  1,024 tokens or more are cached automatically; a request is served the longest prefix an
  earlier request computed, counted in 128-token increments from 1,024 on
  (``usage.prompt_tokens_details.cached_tokens``); a prefix is cleared after some minutes of
  inactivity (here ``ttl`` seconds after its last use); nothing is reported as written.
- :class:`BreakpointCache`, Anthropic, "Prompt caching"
  (https://platform.claude.com/docs/en/build-with-claude/prompt-caching, read 2026-12-07), as
  an OpenAI-compatible gateway forwards it (OpenRouter reports the writes in
  ``prompt_tokens_details.cache_write_tokens``): the prompt is tools, then system, then
  messages; each ``cache_control`` breakpoint caches the prefix up to it, if that is at least
  the model's minimum (1,024 tokens for Claude Sonnet); a request reads the longest cached
  prefix ending at a block boundary at most 20 blocks before one of its breakpoints, and
  writes the rest up to its last breakpoint; an entry lives ``ttl`` seconds (5 minutes by
  default), refreshed each time it is used.

Both count a request the way nanobot's own estimate counts it, as the requests frame counts
its parts, so their numbers and sessionkit's are in the same unit: the tool definitions as
one JSON text (``json.dumps``, markers removed), the system prompt's text, and each other
message's payload (its text, name, tool_call_id and tool calls' JSON joined by newlines, as
nanobot holds the message: an assistant tool call's null content is its ``""``) plus 4
framing tokens, all in cl100k_base.  A block is the tool list, the system prompt or one
message: a prefix is shared in whole blocks, and markers and the string-or-blocks form of a
content are not part of what is compared.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionkit.nanobot.tokens import encoding

__all__ = ["Block", "BreakpointCache", "OpenAIPrefixCache", "blocks"]

_FRAMING = 4
_LOOKBACK = 20


@dataclass(frozen=True)
class Block:
    """One block of a request: its key (a digest of the whole prompt up to and including
    it), the prompt's tokens up to its end, and whether it carries a breakpoint."""

    key: str
    tokens: int
    marked: bool


def _text(content: Any) -> tuple[str, bool]:
    """A content's text (a string, or its text blocks joined) and whether it is marked; a
    marker anywhere but on the last block is refused (nanobot marks the last one)."""
    if isinstance(content, str) or content is None:
        return content or "", False
    marks = [bool(b.get("cache_control")) for b in content]
    if any(marks[:-1]):
        raise ValueError("a cache_control marker on a content block that is not the last")
    return "\n".join(b["text"] for b in content if b.get("type") == "text"), bool(
        marks[-1:] == [True]
    )


def _payload(message: Mapping[str, Any], text: str) -> str:
    """nanobot's per-message payload: text, name, tool_call_id, tool calls' JSON.  A content
    string takes its part even when empty, and so does the null content of an assistant
    tool-call message: nanobot holds it as ``""`` and sends it as null."""
    held = message.get("content") is not None or bool(message.get("tool_calls"))
    parts = [text] if text or held else []
    parts += [message[k] for k in ("name", "tool_call_id") if message.get(k)]
    if message.get("tool_calls"):
        parts.append(json.dumps(message["tool_calls"], ensure_ascii=False))
    return "\n".join(parts)


def blocks(body: Mapping[str, Any]) -> list[Block]:
    """The blocks of an OpenAI-style request body, in cache order (tools, system, messages)."""
    tools = [dict(t) for t in body.get("tools") or []]
    marked_tools = [i for i, t in enumerate(tools) if t.pop("cache_control", None)]
    if marked_tools and marked_tools != [len(tools) - 1]:
        raise ValueError(f"tool markers at {marked_tools}: only the last tool is expected")
    digest = hashlib.sha256()
    out: list[Block] = []
    tokens = 0

    def add(kind: str, canonical: Any, count: int, marked: bool) -> None:
        nonlocal tokens
        digest.update(json.dumps([kind, canonical], sort_keys=True).encode())
        tokens += count
        out.append(Block(digest.copy().hexdigest(), tokens, marked))

    enc = encoding()
    if tools:
        rendered = json.dumps(tools, ensure_ascii=False)
        add("tools", rendered, len(enc.encode(rendered)), bool(marked_tools))
    for i, message in enumerate(body.get("messages") or []):
        text, marked = _text(message.get("content"))
        if i == 0 and message.get("role") == "system":
            add("system", text, len(enc.encode(text)), marked)
            continue
        payload = _payload(message, text)
        count = max(_FRAMING, len(enc.encode(payload)) + _FRAMING)
        canonical = {k: v for k, v in message.items() if k != "content"} | {"content": text}
        add("message", canonical, count, marked)
    return out


@dataclass
class OpenAIPrefixCache:
    """OpenAI's automatic prefix cache: ``cache(body, now) -> (prompt, cached, None)``."""

    ttl: float
    minimum: int = 1024
    step: int = 128
    used: dict[str, float] = field(default_factory=dict)

    def __call__(self, body: Mapping[str, Any], now: float) -> tuple[int, int, int | None]:
        found = blocks(body)
        alive = {k for k, at in self.used.items() if now - at <= self.ttl}
        hit = max((b.tokens for b in found if b.key in alive), default=0)
        for block in found:
            self.used[block.key] = now
        cached = hit - hit % self.step if hit >= self.minimum else 0
        return (found[-1].tokens if found else 0), cached, None


@dataclass
class BreakpointCache:
    """Anthropic's breakpoint cache: ``cache(body, now) -> (prompt, read, written)``."""

    ttl: float
    minimum: int = 1024
    used: dict[str, float] = field(default_factory=dict)

    def _read(self, found: Sequence[Block], marks: Sequence[int], now: float) -> Block | None:
        """The longest live entry at a boundary up to 20 blocks before a breakpoint."""
        hits = [
            found[i]
            for m in marks
            for i in range(m, max(m - _LOOKBACK, -1), -1)
            if now - self.used.get(found[i].key, -float("inf")) <= self.ttl
        ]
        return max(hits, key=lambda b: b.tokens, default=None)

    def __call__(self, body: Mapping[str, Any], now: float) -> tuple[int, int, int | None]:
        found = blocks(body)
        marks = [i for i, b in enumerate(found) if b.marked and b.tokens >= self.minimum]
        hit = self._read(found, marks, now)
        read = hit.tokens if hit else 0
        if hit:
            self.used[hit.key] = now
        for i in marks:
            self.used[found[i].key] = now
        last = max((found[i].tokens for i in marks), default=0)
        return (found[-1].tokens if found else 0), read, max(last - read, 0)
