"""nanobot 0.3.5's Messages API request: the body its native Anthropic provider sends for the
agent loop's messages, tools, model and parameters (``providers/anthropic_provider.py``,
``_build_kwargs``: the provider's empty-content clean-up, the system prompt split out, tool
calls and results as ``tool_use``/``tool_result`` blocks with ids made valid and unique,
consecutive same-role turns merged, no leading or trailing assistant turn, tools and
``tool_choice`` converted, ``cache_control`` markers, thinking and sampling parameters).

Pure Python.  Where the release would send something random (a tool call without an id gets a
generated one) or something only a JSON repair library reads (tool-call arguments that are not
JSON), it raises :class:`ValueError` naming it rather than guess; so it does where the release
itself would fail.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from sessionkit.nanobot.prompt_cache_035 import anthropic_markers
from sessionkit.nanobot.request_rules import empty_cleaned, without_surrogates

__all__ = ["messages_body", "model_name"]

Message = dict[str, Any]

EMPTY = "(empty)"
"""What the provider sends for empty content (its clean-up's and its user conversion's)."""
OPENER = "(conversation continued)"
"""The user turn the provider puts before a leading assistant turn."""
MARKER = {"type": "ephemeral"}
_RANDOM = "\u0000random tool id "
"""What stands for a generated tool id until the body is known to send none."""
_VALID_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_DATA_URL = re.compile(r"data:(image/\w+);base64,(.+)", re.DOTALL)
_CLAUDE_VERSION = re.compile(
    r"claude-(?P<family>[a-z]+)-(?P<major>\d+)(?:-(?P<minor>\d{1,2})(?=-|$))?"
)
_ADAPTIVE_ONLY = {"opus": (4, 7), "sonnet": (5, 0), "fable": (5, 0), "mythos": (5, 0)}
"""Claude families (and first versions) that take no manual thinking budget nor sampling."""
_THINKING_DISABLE = {"opus": (5, 0), "sonnet": (5, 0)}
"""Families that think by default, so an effort of ``"none"`` disables thinking explicitly."""
_SAMPLING_DEPRECATED = ("claude-mythos-preview",)
_BUDGETS = {"low": 1024, "medium": 4096}
_DEFAULT_BUDGET = 4096
_HIGH_BUDGET = 8192
_BUDGET_ROOM = 4096
"""Output tokens the release allows beyond a thinking budget."""


def model_name(model: str) -> str:
    """The model the body names: ``model`` without an ``anthropic/`` prefix."""
    return model.removeprefix("anthropic/")


def _at_least(model: str, minimum: Mapping[str, tuple[int, int]]) -> bool:
    """Whether ``model`` is a Claude model of a family in ``minimum`` at or past its version."""
    found = _CLAUDE_VERSION.search(model.lower())
    if found is None or found.group("family") not in minimum:
        return False
    version = (int(found.group("major")), int(found.group("minor") or 0))
    return version >= minimum[found.group("family")]


def _valid_id(raw: str) -> str:
    """A tool id in the charset the API takes: as it is when valid, else its characters
    replaced, cut to 48, plus 8 hex digits of its SHA-1."""
    if not raw or _VALID_ID.match(raw):
        return raw
    prefix = re.sub(r"[^a-zA-Z0-9_-]", "_", raw)[:48].strip("_") or "toolu"
    return f"{prefix}_{hashlib.sha1(raw.encode()).hexdigest()[:8]}"


class _Ids:
    """The ids one request's tool calls and results get: each call's valid id, made unique
    with a ``__dedupe_<n>`` suffix; each result takes, in order, the ids given to calls of
    the same raw id, else its own made valid."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.pending: dict[str, deque[str]] = {}
        self.random = 0

    def made_up(self) -> str:
        """A stand-in for the random id the release gives a call without one (no result can
        name it, no other id can take it)."""
        self.random += 1
        return f"{_RANDOM}{self.random}"

    def call(self, value: Any) -> str:
        raw = str(value)
        chosen = _valid_id(raw)
        suffix = 2
        while chosen in self.seen:
            chosen = f"{_valid_id(raw)}__dedupe_{suffix}"
            suffix += 1
        self.seen.add(chosen)
        self.pending.setdefault(raw, deque()).append(chosen)
        return chosen

    def result(self, value: Any) -> str:
        if not value:
            return ""
        raw = str(value)
        queue = self.pending.get(raw)
        if not queue:
            return _valid_id(raw)
        chosen = queue.popleft()
        if not queue:
            del self.pending[raw]
        return chosen


def _typeless(block: Mapping[str, Any]) -> Message:
    """A block without a type, as the text block the provider turns it into."""
    text = json.dumps(block, ensure_ascii=False, sort_keys=True, default=str)
    return {"type": "text", "text": text}


def _image(block: Mapping[str, Any]) -> Message | None:
    """An ``image_url`` block as an image block (a data URL's base64 inline; no URL: none)."""
    image_url = block.get("image_url") or {}
    if not isinstance(image_url, Mapping):
        raise ValueError("an image_url block whose image_url is no object: 0.3.5 fails on it")
    url = image_url.get("url", "")
    if not url:
        return None
    if not isinstance(url, str):
        raise ValueError("an image_url block whose url is no text: 0.3.5 fails on it")
    data = _DATA_URL.match(url)
    if data:
        source = {"type": "base64", "media_type": data.group(1), "data": data.group(2)}
        return {"type": "image", "source": source}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _user_content(content: Any) -> Any:
    """User (or tool-result list) content as blocks: images converted, blocks without a type
    as text, other items as their text; empty as the stand-in."""
    if isinstance(content, str) or content is None:
        return content or EMPTY
    if not isinstance(content, list):
        return str(content)
    out: list[Any] = []
    for item in content:
        if not isinstance(item, dict):
            out.append({"type": "text", "text": str(item)})
        elif item.get("type") == "image_url":
            image = _image(item)
            if image is not None:
                out.append(image)
        elif not item.get("type"):
            out.append(_typeless(item))
        else:
            out.append(item)
    return out or EMPTY


def _replay_input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as the object the provider replays (``{}`` unless an object)."""
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        parsed = json.loads(arguments.strip())
    except (ValueError, RecursionError):
        raise ValueError(
            "a tool call's arguments are not valid JSON: 0.3.5 repairs them with json_repair"
        ) from None
    return parsed if isinstance(parsed, dict) else {}


def _iterated(value: Any, what: str) -> list[Any]:
    """``value or []`` as the items the release iterates (what it cannot iterate: refused)."""
    if not value:
        return []
    if isinstance(value, str | list | tuple | dict):
        return list(value)
    raise ValueError(f"an assistant message whose {what} is {type(value).__name__}: 0.3.5 fails")


def _assistant_blocks(message: Mapping[str, Any], ids: _Ids) -> list[Any]:
    """An assistant message as blocks: thinking, text, then one ``tool_use`` per call."""
    blocks: list[Any] = []
    for block in _iterated(message.get("thinking_blocks"), "thinking_blocks"):
        if isinstance(block, dict) and block.get("type") == "thinking":
            thinking = {
                "thinking": block.get("thinking", ""),
                "signature": block.get("signature", ""),
            }
            blocks.append({"type": "thinking", **thinking})
    content = message.get("content")
    if isinstance(content, str) and content:
        blocks.append({"type": "text", "text": content})
    elif isinstance(content, list):
        for item in content:
            if not isinstance(item, dict):
                blocks.append({"type": "text", "text": str(item)})
            else:
                blocks.append(item if item.get("type") else _typeless(item))
    for call in _iterated(message.get("tool_calls"), "tool_calls"):
        if not isinstance(call, dict):
            continue
        function = call.get("function", {})
        if not isinstance(function, dict):
            raise ValueError("a tool call whose function is no object: 0.3.5 fails on it")
        blocks.append(
            {
                "type": "tool_use",
                "id": ids.call(call["id"]) if call.get("id") else ids.made_up(),
                "name": function.get("name", ""),
                "input": _replay_input(function.get("arguments", "{}")),
            }
        )
    return blocks or [{"type": "text", "text": ""}]


def _tool_result(message: Mapping[str, Any], ids: _Ids) -> Message:
    """A tool message as a ``tool_result`` block."""
    content = message.get("content")
    if isinstance(content, list):
        content = _user_content(content)
    elif not isinstance(content, str):
        content = str(content) if content else ""
    return {
        "type": "tool_result",
        "tool_use_id": ids.result(message.get("tool_call_id", "")),
        "content": content,
    }


def _as_blocks(content: Any) -> Any:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _has_tool_use(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_use" for b in content
    )


def _merged(turns: list[Message]) -> list[Message]:
    """Consecutive same-role turns as one; trailing assistant turns dropped (the last one sent
    as the user's when nothing else is left and it calls no tool); an opener before a leading
    assistant turn that calls no tool."""
    merged: list[Message] = []
    for turn in turns:
        if merged and merged[-1]["role"] == turn["role"]:
            content = _as_blocks(merged[-1]["content"])
            more = _as_blocks(turn["content"])
            if isinstance(more, list):
                content.extend(more)
            merged[-1]["content"] = content
        else:
            merged.append(turn)
    popped = None
    while merged and merged[-1]["role"] == "assistant":
        popped = merged.pop()
    if not merged and popped is not None and not _has_tool_use(popped):
        merged.append({"role": "user", "content": popped.get("content")})
    if merged and merged[0]["role"] == "assistant" and not _has_tool_use(merged[0]):
        merged.insert(0, {"role": "user", "content": OPENER})
    return merged


def _made_up(turn: Message) -> bool:
    """Whether a turn calls a tool by an id the release makes up."""
    content = turn["content"]
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_use" and str(b["id"]).startswith(_RANDOM)
        for b in content
    )


def _converted(messages: list[Message]) -> tuple[Any, list[Message]]:
    """``(system, turns)``: the last system message's content, the rest as Messages turns
    (refused when a turn sent holds a tool id the release makes up)."""
    system: Any = ""
    turns: list[Message] = []
    ids = _Ids()
    for message in messages:
        role, content = message.get("role", ""), message.get("content")
        if role == "system":
            system = content if isinstance(content, list | str) else str(content or "")
        elif role == "tool":
            block = _tool_result(message, ids)
            if turns and turns[-1]["role"] == "user":
                before = turns[-1]["content"]
                if isinstance(before, list):
                    before.append(block)
                else:
                    turns[-1]["content"] = [{"type": "text", "text": before or ""}, block]
            else:
                turns.append({"role": "user", "content": [block]})
        elif role == "assistant":
            turns.append({"role": "assistant", "content": _assistant_blocks(message, ids)})
        elif role == "user":
            turns.append({"role": "user", "content": _user_content(content)})
    merged = _merged(turns)
    if ids.random and any(_made_up(turn) for turn in merged):
        raise ValueError("a tool call without an id: 0.3.5 sends a random one")
    return system, merged


def _tools(tools: Sequence[Mapping[str, Any]] | None) -> list[Message]:
    """Tool definitions as the Messages API takes them (name, input schema, description)."""
    out = []
    for tool in tools or ():
        function = tool.get("function", tool)
        if not isinstance(function, Mapping):
            raise ValueError("a tool whose function is no object: 0.3.5 fails on it")
        entry = {
            "name": function.get("name", ""),
            "input_schema": function.get("parameters", {"type": "object", "properties": {}}),
        }
        if function.get("description"):
            entry["description"] = function["description"]
        if "cache_control" in tool:
            entry["cache_control"] = tool["cache_control"]
        out.append(entry)
    return out


def _with_marker(block: Any) -> Message:
    if not isinstance(block, Mapping):
        raise ValueError("a system prompt block that is no object: 0.3.5 fails on it")
    return {**block, "cache_control": MARKER}


def _marked(system: Any, turns: list[Message], tools: list[Message]) -> Any:
    """The system prompt, turns and tools with ``cache_control`` where 0.3.5 puts it."""
    markers = anthropic_markers(system, turns, tools)
    if markers.system:
        system = [{"type": "text", "text": system}] if isinstance(system, str) else list(system)
        system[-1] = _with_marker(system[-1])
    if markers.message is not None:
        turn = turns[markers.message]
        blocks = list(_as_blocks(turn["content"]))
        blocks[-1] = _with_marker(blocks[-1])
        turns[markers.message] = {**turn, "content": blocks}
    for at in markers.tools:
        tools[at] = {**tools[at], "cache_control": MARKER}
    return system


def _tool_choice(choice: Any, thinking: bool) -> Message | None:
    """``tool_choice`` as the Messages API takes it (None: none sent)."""
    if thinking or choice is None or choice == "auto":
        return {"type": "auto"}
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return None
    if isinstance(choice, Mapping):
        function = choice.get("function", {})
        if not isinstance(function, Mapping):
            raise ValueError("a tool_choice whose function is no object: 0.3.5 fails on it")
        if function.get("name"):
            return {"type": "tool", "name": function["name"]}
    return {"type": "auto"}


def _sampling(
    body: dict[str, Any], model: str, max_tokens: int, temperature: Any, effort: str | None
) -> None:
    """Set the body's thinking, effort, ``temperature`` and thinking-budget ``max_tokens``."""
    thinking = effort not in (None, "", "none")
    adaptive_only = _at_least(model, _ADAPTIVE_ONLY)
    no_temperature = adaptive_only or model.lower() in _SAMPLING_DEPRECATED
    if effort == "none" and _at_least(model, _THINKING_DISABLE):
        body["thinking"] = {"type": "disabled"}
    elif effort == "adaptive":
        body["thinking"] = {"type": "adaptive"}
        if not no_temperature:
            body["temperature"] = 1.0
    elif thinking and adaptive_only:
        body["thinking"] = {"type": "adaptive"}
        body["output_config"] = {"effort": effort}
    elif thinking:
        budget = (
            max(_HIGH_BUDGET, max_tokens)
            if effort == "high"
            else _BUDGETS.get(str(effort), _DEFAULT_BUDGET)
        )
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        body["max_tokens"] = max(max_tokens, budget + _BUDGET_ROOM)
        if not no_temperature:
            body["temperature"] = 1.0
    elif not no_temperature:
        body["temperature"] = temperature


def messages_body(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    model: str,
    *,
    max_tokens: int,
    temperature: float,
    reasoning_effort: str | None = None,
    tool_choice: str | Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Messages API body 0.3.5's Anthropic provider sends for the agent loop's
    ``messages`` (OpenAI chat form, system first) and ``tools`` (its definitions) with
    ``model`` and the agent's parameters, keys in the release's order; prompt caching on,
    as the provider always asks.  Raises :class:`ValueError` where the body is not known
    (see the module docstring)."""
    cleaned = without_surrogates([empty_cleaned(m, EMPTY) for m in messages])
    system, turns = _converted(cleaned)
    converted = _tools(tools)
    system = _marked(system, turns, converted)
    name = model_name(model)
    limit = max(1, max_tokens)
    body: dict[str, Any] = {"model": name, "messages": turns, "max_tokens": limit}
    if system:
        body["system"] = system
    effort = reasoning_effort.lower() if reasoning_effort else None
    _sampling(body, name, limit, temperature, effort)
    if converted:
        body["tools"] = converted
        choice = _tool_choice(tool_choice, effort not in (None, "", "none"))
        if choice is not None:
            body["tool_choice"] = choice
    return body
