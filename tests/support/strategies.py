"""Hypothesis strategies for nanobot sessions, shaped to hit the history policy's edge cases.

Sessions are built from conversational blocks (a user turn, a tool exchange, a command pair,
a proactive delivery, a stray tool result) whose fields vary over what the replay rules read:
tool-call ids (shared, numeric, empty), ``_command`` and ``_channel_delivery`` flags, media,
CLI-app and MCP-preset attachments, reasoning and thinking fields, empty or missing content,
content-block lists, time stamps, and assistant text carrying replay artefacts.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from sessionkit import Session

__all__ = ["message_lists", "messages", "sessions", "texts"]

_FRAGMENTS = (
    "",
    " ",
    "\n",
    "hello",
    "Sure, done.",
    "[Message Time: 2025-01-02 10:00]\nearlier",
    "[image: /tmp/cat.png]",
    "[image: ~/pics/dog.jpg]  ",
    "[image: https://example.com/x.png]",
    "message(chat_id=1)",
    "  generate_image(prompt='a cat') ",
    "message(x) trailing",
    "résumé 日本語 🙂",
    "<|endoftext|>",
    "line\r\nbreak",
    "para\u2028sep",
    "x\x1cy",
    "tab\tthen  spaces   ",
)

_IDS = st.one_of(st.sampled_from(["call_a", "call_b", "call_c", "call_d"]), st.integers(1, 3))
_TIMESTAMPS = st.one_of(
    st.none(), st.just(""), st.sampled_from(["2025-03-01T09:15:00", "2025-03-01T09:16:30.5"])
)


def texts() -> st.SearchStrategy[str]:
    """Short strings mixing plain words with the artefacts the replay rewrite strips."""
    piece = st.one_of(st.sampled_from(_FRAGMENTS), st.text(alphabet="ab \n]", max_size=6))
    return st.lists(piece, max_size=3).map("\n".join)


def _content() -> st.SearchStrategy[Any]:
    block = st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, texts()),
        st.just({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}),
        st.just({"type": "text"}),
    )
    return st.one_of(texts(), texts(), texts(), st.lists(block, max_size=2), st.none())


def _attachments(fields: tuple[str, ...]) -> st.SearchStrategy[list[Any]]:
    name = st.one_of(st.sampled_from(["Git", " jq ", "", "FFMPEG"]), st.none(), st.just(3))
    value = st.one_of(st.none(), st.sampled_from(["", "  ", "main.py", "stdio", "sse"]))
    item = st.fixed_dictionaries(
        {"name": name}, optional={field: value for field in fields}
    ) | st.sampled_from(["git", None])
    return st.lists(item, max_size=10)


def _optional(draw: st.DrawFn, message: dict[str, Any], key: str, values: Any) -> None:
    if draw(st.booleans()):
        message[key] = draw(values)


@st.composite
def _user(draw: st.DrawFn, *, command: bool = False) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "user", "content": draw(_content())}
    if draw(st.integers(0, 9)) == 0:
        del message["content"]
    _optional(draw, message, "timestamp", _TIMESTAMPS)
    if draw(st.integers(0, 3)) == 0:
        paths = st.one_of(st.sampled_from(["/tmp/a.png", "~/b.jpg", ""]), st.just(7))
        message["media"] = draw(st.one_of(st.lists(paths, max_size=3), st.just("x.png")))
    if draw(st.integers(0, 5)) == 0:
        message["cli_apps"] = draw(_attachments(("entry_point",)))
    if draw(st.integers(0, 5)) == 0:
        message["mcp_presets"] = draw(_attachments(("transport",)))
    if command:
        message["_command"] = True
    return message


@st.composite
def _assistant(draw: st.DrawFn, *, calls: list[Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": draw(_content())}
    if draw(st.integers(0, 9)) == 0:
        del message["content"]
    if calls is not None:
        message["tool_calls"] = [
            {"id": c, "type": "function", "function": {"name": "exec", "arguments": "{}"}}
            for c in calls
        ]
    elif draw(st.integers(0, 7)) == 0:
        message["tool_calls"] = draw(st.sampled_from([[], None, [{"id": ""}], ["call_a"]]))
    _optional(draw, message, "reasoning_content", st.sampled_from(["", "thinking...", None]))
    if draw(st.integers(0, 7)) == 0:
        message["thinking_blocks"] = [{"type": "thinking", "thinking": "hmm"}]
    _optional(draw, message, "timestamp", _TIMESTAMPS)
    return message


def _tool(call_id: Any, content: Any = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": "exec", "content": content}


@st.composite
def _tool_exchange(draw: st.DrawFn) -> list[dict[str, Any]]:
    calls = draw(st.lists(_IDS, min_size=1, max_size=3))
    answered = draw(st.lists(st.sampled_from(calls), max_size=len(calls) + 1))
    block = [draw(_assistant(calls=calls)), *(_tool(c, draw(_content())) for c in answered)]
    if draw(st.booleans()):
        block.append(draw(_assistant()))
    return block


@st.composite
def _block(draw: st.DrawFn) -> list[dict[str, Any]]:
    kind = draw(
        st.sampled_from(
            ["user", "user", "user", "assistant", "exchange", "exchange", "command", "delivery"]
            + ["orphan", "system"]
        )
    )
    if kind == "user":
        return [draw(_user())]
    if kind == "assistant":
        return [draw(_assistant())]
    if kind == "exchange":
        return draw(_tool_exchange())
    if kind == "command":
        reply = draw(_assistant())
        reply["_command"] = True
        return [draw(_user(command=True)), reply][: draw(st.integers(1, 2))]
    if kind == "delivery":
        message = draw(_assistant())
        message["_channel_delivery"] = draw(st.sampled_from([True, 1, "yes"]))
        return [message]
    if kind == "orphan":
        return [_tool(draw(st.one_of(_IDS, st.sampled_from(["", None, 0]))))]
    return [{"role": "system", "content": draw(texts())}]


def messages() -> st.SearchStrategy[dict[str, Any]]:
    """One stored message of any kind (blocks give realistic neighbours; this gives variety)."""
    return _block().map(lambda block: block[0])


@st.composite
def message_lists(draw: st.DrawFn, max_blocks: int = 14) -> list[dict[str, Any]]:
    """A session's stored messages: conversational blocks in any order."""
    blocks = draw(st.lists(_block(), max_size=max_blocks))
    return [message for block in blocks for message in block]


@st.composite
def sessions(draw: st.DrawFn, max_blocks: int = 14) -> Session:
    """A sessionkit ``Session`` with a consolidated offset anywhere in (or past) its messages."""
    items = draw(message_lists(max_blocks=max_blocks))
    offset = draw(st.one_of(st.just(0), st.integers(0, len(items) + 2)))
    key = draw(st.sampled_from(["cli:direct", "telegram:42", "slack:C1:T9"]))
    return Session(key=key, messages=items, last_consolidated=offset)
