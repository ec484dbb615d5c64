"""nanobot 0.3.5's context-governor texts: the archive instruction its summary call appends.

Runs inside the release's interpreter (``python -I probe_035_governor.py``): stdin ``{}``,
stdout ``{"nanobot": version, "archive": {"role": "user", "content": text}}``.  It imports only
the standard library, nanobot and its sibling probing.py (never sessionkit) and asks the release's own
``MemoryArchiver.archive`` for the request it sends, with a provider that records the call and
answers "nothing to keep" (so nothing is written), in a scratch workspace removed afterwards.
The probe checks what the summary request is made of: the accepted messages as given, then
one user message (the instruction), the same tools; and that the instruction does not depend
on how many messages are archived.  On any other shape it exits non-zero with a message.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # isolated mode: find probing.py
from probing import ProbeError, serve  # noqa: E402

RELEASE = "0.3.5"
_TOOLS = [{"type": "function", "function": {"name": "probe", "parameters": {"type": "object"}}}]


class _Recorder:
    """A provider that records each call and answers the archive's "nothing to keep"."""

    def __init__(self, nothing: str) -> None:
        self.calls: list[dict[str, Any]] = []
        self.nothing = nothing

    async def chat_stream_with_retry(self, **kwargs: Any) -> Any:
        from nanobot.providers.base import LLMResponse

        self.calls.append(kwargs)
        return LLMResponse(content=self.nothing)


def _archive_request(scratch: Path, archived: int) -> dict[str, Any]:
    """The request ``MemoryArchiver.archive`` sends for ``archived`` accepted messages."""
    from nanobot.agent.memory import MemoryArchiver, MemoryStore

    history = [{"role": "system", "content": "\u0000SK:system\u0000"}]
    history += [{"role": "user", "content": f"\u0000SK:m{i}\u0000"} for i in range(archived)]
    recorder = _Recorder("(nothing)")
    archiver = MemoryArchiver(MemoryStore(scratch), lambda **_: [], lambda: [])
    runtime = SimpleNamespace(
        provider=recorder,
        model="probe",
        context_window_tokens=0,
        generation=SimpleNamespace(temperature=0.0, max_tokens=16, reasoning_effort=None),
    )
    asyncio.run(
        archiver.archive(
            [dict(m) for m in history[1:]],
            runtime=runtime,
            session_key="probe:governor",
            history=history,
            request_tools=_TOOLS,
        )
    )
    if len(recorder.calls) != 1:
        raise ProbeError(f"the archive made {len(recorder.calls)} calls, not one")
    call = recorder.calls[0]
    messages = call["messages"]
    if messages[:-1] != history or call["tools"] != _TOOLS:
        raise ProbeError("the summary request is not the accepted messages plus one message")
    instruction = messages[-1]
    if set(instruction) != {"role", "content"} or instruction["role"] != "user":
        raise ProbeError(f"the archive instruction is not a plain user message: {instruction}")
    return instruction


def _answer(_request: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """The release's version and its archive instruction, checked not to depend on the count."""
    from importlib.metadata import version

    one, several = _archive_request(scratch, 1), _archive_request(scratch, 3)
    if one != several:
        raise ProbeError("the archive instruction depends on the number of messages")
    return {"nanobot": version("nanobot-ai"), "archive": one}


if __name__ == "__main__":
    serve("probe_035_governor", RELEASE, _answer)
