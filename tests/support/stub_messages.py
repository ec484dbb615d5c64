"""An Anthropic Messages API stub on 127.0.0.1 whose answers follow a rule of the request (a
:class:`support.stub_rules.RuleServer` that answers ``POST /v1/messages`` instead).

``MessagesServer(rule)``: ``base`` is the base URL a nanobot config names for it
(``http://127.0.0.1:<port>``; the Anthropic SDK adds ``/v1/messages``).  Each request's JSON
body and ``x-api-key`` header are recorded (``received``; ``versions``: its
``anthropic-version`` headers) and answered with ``rule(body, seen)`` as the rule stub does: a
:class:`~support.stub_openai.Reply` as one ``message`` object (text and ``tool_use`` blocks,
``stop_reason``, and the usage split as Anthropic reports it: input tokens not read from or
written to the cache, cache reads, cache writes, output), or a
:class:`~support.stub_rules.Misbehave`.
"""

from __future__ import annotations

from email.message import Message
from typing import Any

from sessionkit.testing.local_server import Response, json_response
from support.stub_openai import Reply
from support.stub_rules import RuleServer

__all__ = ["MessagesServer", "message_object"]


def message_object(index: int, model: str, reply: Reply) -> dict[str, Any]:
    """The Messages API ``message`` answering with ``reply`` (tool ids ``toolu_<index>_<i>``)."""
    content: list[dict[str, Any]] = []
    if reply.text is not None:
        content.append({"type": "text", "text": reply.text})
    for at, call in enumerate(reply.tool_calls):
        use = {"type": "tool_use", "id": f"toolu_{index}_{at}", "name": call.name}
        content.append({**use, "input": dict(call.arguments)})
    usage = reply.usage
    written = usage.cache_write_tokens or 0
    return {
        "id": f"msg_{index}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage.prompt_tokens - usage.cached_tokens - written,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": usage.cached_tokens,
            "output_tokens": usage.completion_tokens,
        },
    }


class MessagesServer(RuleServer):
    """The stub: ``with MessagesServer(rule) as stub: ... stub.received``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.versions: list[str | None] = []

    @property
    def base(self) -> str:
        """The base URL to configure: ``http://127.0.0.1:<port>``."""
        return self.url.removesuffix("/v1")

    def reset(self) -> None:
        """Forget every request received (for the next test)."""
        super().reset()
        self.versions.clear()

    def noted(self, headers: Message) -> None:
        """Keep the request's ``anthropic-version`` header."""
        self.versions.append(headers.get("anthropic-version"))

    def messages(self, raw: bytes, headers: Message) -> Response:
        """The rule's answer: a message, or a misbehaviour after its delay."""
        ruled = self.ruled(raw, headers, "x-api-key")
        if isinstance(ruled, Response):
            return ruled
        index, answer = ruled
        return json_response(message_object(index, self.model, answer))
