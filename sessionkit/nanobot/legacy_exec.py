"""nanobot 0.3.5's load-time rewrite of legacy exec tool records, exactly.

Releases before 0.3.2 had a ``write_stdin`` tool, which became ``exec_session`` with renamed
arguments (``chars`` -> ``input``; ``yield_time_ms`` / ``wait_timeout_ms`` -> ``timeout_ms``;
``max_output_chars`` / ``max_output_tokens`` dropped).  0.3.5's session manager rewrites every
such record of a file it loads (``_migrate_legacy_exec_session_records``), in memory only:
this module does the same to a session's messages and metadata.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["migrate_exec_records"]

_EXEC_NAMES = ("write_stdin", "exec_session")
_DROPPED = ("yield_time_ms", "wait_timeout_ms", "max_output_chars", "max_output_tokens")


def _migrate_arguments(container: dict[str, Any]) -> bool:
    """A call's ``arguments`` (a dict, or JSON text, rewritten as compact JSON) in 0.3.5's
    form; whether they changed."""
    raw = container.get("arguments")
    encoded = isinstance(raw, str)
    decoded = raw
    if isinstance(raw, str):
        try:
            decoded = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON: left as it is (0.3.5 too, or it fails)
            return False
    if not isinstance(decoded, dict):
        return False
    changed = False
    if "chars" in decoded:
        decoded.setdefault("input", decoded["chars"])
        decoded.pop("chars")
        changed = True
    waits = decoded.get("wait_for") or decoded.get("until_exit")
    wait_key = "wait_timeout_ms" if waits else "yield_time_ms"
    if "timeout_ms" not in decoded and wait_key in decoded:
        decoded["timeout_ms"] = decoded[wait_key]
    for key in _DROPPED:
        if key in decoded:
            decoded.pop(key)
            changed = True
    if changed and encoded:
        container["arguments"] = json.dumps(decoded, ensure_ascii=False, separators=(",", ":"))
    return changed


def _migrate_call(value: Any) -> bool:
    """One tool call (its ``function``, or the call itself) renamed and its arguments
    rewritten when it is an exec call; whether it changed."""
    if not isinstance(value, dict):
        return False
    function = value.get("function")
    target = function if isinstance(function, dict) else value
    name = target.get("name")
    if type(name) is not str or name not in _EXEC_NAMES:
        return False
    renamed = name == "write_stdin"
    if renamed:
        target["name"] = "exec_session"
    return _migrate_arguments(target) or renamed


def _migrate_message(message: dict[str, Any]) -> bool:
    changed = False
    if message.get("name") == "write_stdin":
        message["name"] = "exec_session"
        changed = True
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            changed = _migrate_call(call) or changed
    return changed


def migrate_exec_records(messages: list[dict[str, Any]], metadata: dict[str, Any]) -> bool:
    """Rewrite ``messages`` and ``metadata``'s ``runtime_checkpoint`` in place as 0.3.5 does on
    load; whether anything changed (0.3.5 then forgets the session's provider state)."""
    changed = False
    for message in messages:
        changed = _migrate_message(message) or changed
    checkpoint = metadata.get("runtime_checkpoint")
    if not isinstance(checkpoint, dict):
        return changed
    assistant = checkpoint.get("assistant_message")
    if isinstance(assistant, dict):
        changed = _migrate_message(assistant) or changed
    pending = checkpoint.get("pending_tool_calls")
    if isinstance(pending, list):
        for call in pending:
            changed = _migrate_call(call) or changed
    completed = checkpoint.get("completed_tool_results")
    if isinstance(completed, list):
        for result in completed:
            if isinstance(result, dict) and result.get("name") == "write_stdin":
                result["name"] = "exec_session"
                changed = True
    return changed
