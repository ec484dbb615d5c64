"""An endpoint's answer (or why there is none), read from a chat-completions or Messages API
response, and where answers are kept between runs: files in the private cache, keyed by a
digest of the exact request, under sessionkit's persistence switch."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sessionkit.store.cachedir import (
    cache_dir_problem,
    default_cache_dir,
    name_digest,
    persistence_on,
    write_private,
)

__all__ = [
    "ANSWERS_FOLDER",
    "Answer",
    "AnswerStore",
    "Failure",
    "answer_key",
    "read_answer",
    "read_messages_answer",
    "reader",
    "usage_counts",
]

ANSWERS_FOLDER = "answers-1"
"""The folder of the cache folder experiment answers are kept in (its format's version)."""


@dataclass(frozen=True)
class Answer:
    """One answer: text, tool calls (``{"name", "arguments"}``), finish reason, the usage
    reported (None: not reported; ``prompt_tokens`` counts the cached and cache-written ones),
    the model that answered and the seconds it took."""

    text: str | None
    tool_calls: list[dict[str, str]]
    finish_reason: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    model: str | None
    latency_s: float
    cache_write_tokens: int | None = None


@dataclass(frozen=True)
class Failure:
    """Why a call has no answer, and whether the endpoint may have billed it (an answer it
    sent that could not be read, or none in time) or surely not (it refused the call)."""

    error: str
    billed: bool


def usage_counts(result: Answer | Failure | None) -> list[int]:
    """The usage an answer reported as price counts: input, cache read, cache write and
    output tokens (-1: unknown, so no price)."""
    if not isinstance(result, Answer):
        return [-1, 0, 0, -1]
    prompt, completion = result.prompt_tokens, result.completion_tokens
    return [
        -1 if prompt is None else prompt,
        result.cached_tokens or 0,
        result.cache_write_tokens or 0,
        -1 if completion is None else completion,
    ]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(content: Any) -> str | None:
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return content if isinstance(content, str) else None


def read_answer(data: Any, latency_s: float) -> Answer | Failure:
    """The answer in a parsed chat-completions response (its first choice)."""
    choices = data.get("choices") if isinstance(data, Mapping) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, Mapping) else None
    if not isinstance(message, Mapping):
        return Failure("the answer holds no choices[0].message", billed=True)
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            return Failure("a tool call of the answer has no function", billed=True)
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append({"name": str(function.get("name")), "arguments": arguments})
    usage = data.get("usage")
    usage = usage if isinstance(usage, Mapping) else {}
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    model = data.get("model")
    return Answer(
        text=_text(message.get("content")),
        tool_calls=calls,
        finish_reason=first.get("finish_reason") if isinstance(first, Mapping) else None,
        prompt_tokens=_int(usage.get("prompt_tokens")),
        cached_tokens=_int(details.get("cached_tokens")),
        completion_tokens=_int(usage.get("completion_tokens")),
        model=model if isinstance(model, str) else None,
        latency_s=latency_s,
    )


_STOPS = {"tool_use": "tool_calls", "end_turn": "stop", "max_tokens": "length"}
"""Messages API stop reasons under the names 0.3.5's Anthropic provider gives them (any other
kept as it is)."""


def read_messages_answer(data: Any, latency_s: float) -> Answer | Failure:
    """The answer in a parsed Messages API response: its text blocks joined, its
    ``tool_use`` blocks as tool calls (the input as JSON), the stop reason as 0.3.5 names
    it, and the usage (input counting cache reads and writes, as 0.3.5 counts it)."""
    content = data.get("content") if isinstance(data, Mapping) else None
    if not isinstance(content, list):
        return Failure("the answer holds no content list", billed=True)
    texts, calls = [], []
    for block in content:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input"), ensure_ascii=False)
            calls.append({"name": str(block.get("name")), "arguments": arguments})
    usage = data.get("usage")
    usage = usage if isinstance(usage, Mapping) else {}
    fresh, output = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
    read = _int(usage.get("cache_read_input_tokens"))
    written = _int(usage.get("cache_creation_input_tokens"))
    stop, model = data.get("stop_reason"), data.get("model")
    return Answer(
        text="".join(texts) or None,
        tool_calls=calls,
        finish_reason=_STOPS.get(stop, stop) if isinstance(stop, str) and stop else "stop",
        prompt_tokens=None if fresh is None else fresh + (read or 0) + (written or 0),
        cached_tokens=read,
        completion_tokens=output,
        model=model if isinstance(model, str) else None,
        latency_s=latency_s,
        cache_write_tokens=written,
    )


def reader(wire: str) -> Callable[[Any, float], Answer | Failure]:
    """How answers of a wire form (:data:`~sessionkit.experiments.endpoint.WIRES`) are read."""
    return read_messages_answer if wire == "anthropic" else read_answer


def answer_key(url: str, body: Mapping[str, Any], sample: int) -> str:
    """The digest an answer is kept under: the endpoint, the exact body (model and
    parameters in it) and the sample (never the key)."""
    text = json.dumps([url, body, sample], ensure_ascii=False, sort_keys=True)
    return name_digest(text)


class AnswerStore:
    """Answers by digest: files (0600) in ``<cache folder>/answers-1/`` (0700) when persistence
    is on and the folder is safe, else this run's memory only (:attr:`why_not`)."""

    def __init__(self, cache: object) -> None:
        self._memory: dict[str, Answer] = {}
        self.folder: Path | None = None
        self.why_not: str | None = None
        if not persistence_on(cache):
            self.why_not = "persistence is off (cache=False or SESSIONKIT_CACHE=off)"
            return
        root = default_cache_dir()
        problem = cache_dir_problem(root)
        if problem is not None:
            self.why_not = f"the cache folder {root} {problem}"
            return
        self.folder = root / ANSWERS_FOLDER

    def get(self, digest: str) -> Answer | None:
        """The answer kept under ``digest`` (an unreadable file: None, asked again)."""
        if digest in self._memory or self.folder is None:
            return self._memory.get(digest)
        try:
            data = json.loads((self.folder / f"{digest}.json").read_text(encoding="utf-8"))
            return Answer(**data)
        except (OSError, ValueError, TypeError):
            return None

    def put(self, digest: str, answer: Answer) -> None:
        """Keep ``answer``: written atomically, readable by the user only (a folder that
        cannot take it: in memory only, :attr:`why_not` says why)."""
        self._memory[digest] = answer
        if self.folder is None:
            return
        try:
            write_private(
                self.folder / f"{digest}.json",
                json.dumps(asdict(answer), ensure_ascii=False).encode(),
            )
        except OSError as exc:
            self.why_not = f"answers could not be written to {self.folder} ({exc.strerror})"
