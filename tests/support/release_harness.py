"""Run inside a release's venv: call nanobot code once per case, answer in JSON (stdlib only).

Reads ``{"function": F, "cases": [...]}`` on stdin and writes ``{"nanobot": version,
"tiktoken": bool, "results": [...]}`` on stdout.  ``F`` is ``"module:name"`` (called with
the case's ``args`` and ``kwargs``) or ``"module:Class.attr"`` / ``"Class.attr"`` (a class of
``nanobot.session.manager``): the class is built from the case's ``init`` fields, then the
attribute is called (or read, if it is not callable).  A result is ``{"returned": value}``
plus ``"state"`` (the object's fields afterwards; a case may say ``"state": false``) for a
class, or ``{"raised": class name, "message": text}``; a ``kwargs`` value
``{"__callback__": "record"}`` becomes a function whose calls are listed under ``"calls"``.
Values cross as JSON: a dataclass becomes ``{"__type__": name, field: value, ...}``, a
datetime ``{"__datetime__": iso}`` (both ways).
A class case may add ``"then": [{"attr": name, "args": [...], "kwargs": {...}}, ...]``:
further calls on the same object, in order, whose results (each with its ``state``) are
listed under ``"then"``, stopping after one that raises.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from datetime import datetime
from pathlib import PurePath
from typing import Any

_DEFAULT_MODULE = "nanobot.session.manager"


def _encode(value: Any) -> Any:
    """``json.dumps`` hook for what JSON lacks (plain dicts and lists need no walk)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"__type__": type(value).__name__, **fields}
    if isinstance(value, datetime):
        return {"__datetime__": value.isoformat()}
    if isinstance(value, set | frozenset):
        return sorted(value)
    if isinstance(value, PurePath):
        return str(value)
    return {"__repr__": repr(value)}


def _frozen(value: Any) -> Any:
    """A JSON copy of ``value`` taken now, so a later call cannot change what was recorded."""
    return json.loads(json.dumps(value, default=_encode))


def _decode(value: dict[str, Any]) -> Any:
    return datetime.fromisoformat(value["__datetime__"]) if "__datetime__" in value else value


def _resolve(function: str) -> tuple[Any, list[str]]:
    module_name, _, qualified = function.rpartition(":")
    module = importlib.import_module(module_name or _DEFAULT_MODULE)
    return module, qualified.split(".")


def _kwargs(case: dict[str, Any], calls: dict[str, list[Any]]) -> dict[str, Any]:
    kwargs = dict(case.get("kwargs", {}))
    for name, value in kwargs.items():
        if value == {"__callback__": "record"}:
            calls[name] = []
            kwargs[name] = lambda *args, _log=calls[name]: _log.append(_frozen(args))
    return kwargs


def _run_steps(
    instance: Any, steps: list[dict[str, Any]], calls: dict[str, list[Any]]
) -> list[dict[str, Any]]:
    """Further calls on the same object, in order, up to and including one that raises."""
    results: list[dict[str, Any]] = []
    for step in steps:
        try:
            attribute = getattr(instance, step["attr"])
            if callable(attribute):
                attribute = attribute(*step.get("args", []), **_kwargs(step, calls))
            results.append({"returned": _frozen(attribute), "state": _frozen(instance)})
        except Exception as error:
            results.append({"raised": type(error).__name__, "message": str(error)})
            break
    return results


def _run_case(module: Any, path: list[str], case: dict[str, Any]) -> dict[str, Any]:
    calls: dict[str, list[Any]] = {}
    result: dict[str, Any] = {}
    try:
        if len(path) == 1:
            target = getattr(module, path[0])
            result["returned"] = _frozen(target(*case.get("args", []), **_kwargs(case, calls)))
        else:
            instance = getattr(module, path[0])(**case.get("init", {}))
            attribute = getattr(instance, path[1])
            if callable(attribute):
                attribute = attribute(*case.get("args", []), **_kwargs(case, calls))
            result["returned"] = _frozen(attribute)
            if case.get("state", True):
                result["state"] = _frozen(instance)
            if "then" in case:
                result["then"] = _run_steps(instance, case["then"], calls)
    except Exception as error:  # the release's exception is the result to compare
        result = {"raised": type(error).__name__, "message": str(error)}
    if calls:
        result["calls"] = calls
    return result


def _tiktoken_loads() -> bool:
    try:
        import tiktoken

        tiktoken.get_encoding("cl100k_base")
    except Exception:
        return False
    return True


def main() -> None:
    # Scenario modules beside this script (``release_scenarios``) are importable; appended,
    # so the release's own packages always win.
    sys.path.append(str(PurePath(__file__).parent))
    request = json.loads(sys.stdin.read(), object_hook=_decode)
    module, path = _resolve(request["function"])
    results = [_run_case(module, path, case) for case in request["cases"]]
    from importlib.metadata import version

    reply = {"nanobot": version("nanobot-ai"), "tiktoken": _tiktoken_loads(), "results": results}
    sys.stdout.write(json.dumps(reply, default=_encode))


if __name__ == "__main__":
    main()
