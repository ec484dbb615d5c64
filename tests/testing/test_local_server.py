"""The stub servers' base: it serves on 127.0.0.1 while the block runs, routes chat
completions, Messages API requests and model listings to the subclass, answers other paths with its ``not_found``
and GET with 501 when the subclass lists no models, sends JSON and server-sent events with
their exact bytes and headers, and stops serving on exit."""

from __future__ import annotations

import json
from email.message import Message

import httpx
import pytest

from sessionkit.testing.local_server import (
    LocalServer,
    Response,
    chat_completion,
    json_response,
    sse_response,
)


class Echo(LocalServer):
    """Answers a chat request with its body and Authorization header, as JSON."""

    def chat(self, raw: bytes, headers: Message) -> Response:
        return json_response({"body": json.loads(raw), "auth": headers.get("Authorization")})


class Listing(Echo):
    """An echo that also lists models, and answers unknown paths in plain text."""

    not_found = Response(404, b"nothing here", "text/plain")

    def models(self) -> Response:
        return Response(429, b"{}", headers={"Retry-After": "3"})


def test_it_routes_chat_completions_and_answers_other_paths_not_found() -> None:
    with Echo() as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert server.url.endswith("/v1")
        chat = httpx.post(
            f"{server.url}/chat/completions", json={"é": 1}, headers={"Authorization": "k"}
        )
        other = httpx.post(f"{server.url}/embeddings", json={})
        listing = httpx.get(f"{server.url}/models")
    assert (chat.status_code, chat.json()) == (200, {"body": {"é": 1}, "auth": "k"})
    assert chat.headers["content-type"] == "application/json"
    assert (other.status_code, other.content) == (404, b'{"error": {"message": "not found"}}')
    assert listing.status_code == 501  # no models(): GET is not a method it has


class Messages(Echo):
    """An echo that also answers Anthropic's Messages API, with the body and its key."""

    def messages(self, raw: bytes, headers: Message) -> Response:
        return json_response({"messages": json.loads(raw), "key": headers.get("x-api-key")})


def test_it_routes_the_messages_api_to_a_subclass_that_answers_it() -> None:
    with Echo() as plain, Messages() as server:
        unanswered = httpx.post(f"{plain.url}/messages", json={})
        base = server.url.removesuffix("/v1")
        answered = httpx.post(f"{base}/v1/messages/", json={"a": 1}, headers={"x-api-key": "k"})
        chat = httpx.post(f"{server.url}/chat/completions", json={"b": 2})
    assert (unanswered.status_code, unanswered.content) == (
        404,
        b'{"error": {"message": "not found"}}',
    )
    assert (answered.status_code, answered.json()) == (200, {"messages": {"a": 1}, "key": "k"})
    assert chat.json() == {"body": {"b": 2}, "auth": None}


def test_a_subclass_lists_models_and_sets_its_not_found_and_headers() -> None:
    with Listing() as server:
        listing = httpx.get(f"{server.url}/models/")
        other = httpx.get(f"{server.url}/files")
        missing = httpx.post(f"{server.url}/completions", json={})
    assert (listing.status_code, listing.headers["retry-after"], listing.content) == (
        429,
        "3",
        b"{}",
    )
    assert [k for k, _ in listing.headers.items()][-3:] == [
        "content-type",
        "retry-after",
        "content-length",
    ]
    assert (other.status_code, other.headers["content-type"], other.text) == (
        404,
        "text/plain",
        "nothing here",
    )
    assert (missing.status_code, missing.text) == (404, "nothing here")


def test_json_and_sse_answers_are_the_openai_wire_bytes() -> None:
    assert json_response({"a": "é"}, 201) == Response(201, b'{"a": "\\u00e9"}')
    assert json_response({"a": "é"}, ensure_ascii=False).payload == '{"a": "é"}'.encode()
    assert sse_response([{"a": 1}, {"b": []}]) == Response(
        200, b'data: {"a": 1}\n\ndata: {"b": []}\n\ndata: [DONE]\n\n', "text/event-stream"
    )
    called = chat_completion(3, "m", 7, {"role": "assistant", "tool_calls": [{}]}, {"u": 1})
    assert called == {
        "id": "chatcmpl-3",
        "object": "chat.completion",
        "created": 7,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "tool_calls": [{}]},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"u": 1},
    }
    said = chat_completion(0, "m", 0, {"role": "assistant", "content": "hi"}, {})
    assert said["choices"][0]["finish_reason"] == "stop"


def test_it_stops_serving_on_exit() -> None:
    with Echo() as server:
        url = server.url
        assert httpx.post(f"{url}/chat/completions", json=[]).json() == {"body": [], "auth": None}
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{url}/chat/completions", json=[])
