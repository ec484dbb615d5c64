"""JSON text at Python's limits: read as nanobot's ``json`` reads it, and read or written
exactly, with the same answer from any caller's stack.

Python's ``json`` refuses integers past its int-string limit (4,300 digits) and recurses
once per level of nesting, so whether a deep text parses would depend on how deep the
caller's stack already is, and on the caller's ``sys.setrecursionlimit`` and
``sys.set_int_max_str_digits``.  Here a deep text is parsed on a fresh stack under the
recursion limit nanobot runs with (CPython's default), nesting past :func:`json_depth` levels
is what nanobot cannot read, and an integer longer than :data:`NANOBOT_INT_DIGITS` digits is
what it cannot convert: the same answer whoever asks, from any stack, under any settings.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import suppress
from decimal import Decimal
from functools import partial
from types import FrameType
from typing import Any

import orjson

__all__ = [
    "DEEP",
    "LONG_NUMBER",
    "NANOBOT_INT_DIGITS",
    "NANOBOT_RECURSION_LIMIT",
    "SHAPE",
    "TooDeep",
    "dumps_exact",
    "exact_int",
    "has_long_number",
    "json_depth",
    "loads_as_nanobot",
    "loads_exact",
    "nanobot_int",
    "nesting",
]

SHAPE = bytes(0x30 if 0x30 <= b <= 0x39 else 0x5B if b in b"[{" else 0x2E for b in range(256))
"""Digits to ``0``, opening brackets to ``[``, anything else to ``.``: a text's shape."""
LONG_NUMBER = b"0" * 19
"""The shortest integer orjson may turn into a float (it keeps -2**63 .. 2**64-1)."""
DEEP = 800
"""Brackets from which Python's ``json`` (and so nanobot) may refuse a text that orjson
(1024 levels) still reads."""


NANOBOT_RECURSION_LIMIT = 1000
"""The recursion limit nanobot runs with: CPython's default, which it never changes."""
NANOBOT_INT_DIGITS: int = sys.int_info.default_max_str_digits
"""The longest integer (in digits) nanobot's ``json`` converts: CPython's default limit."""
_FEWEST_INT_DIGITS: int = sys.int_info.str_digits_check_threshold
"""No int-string limit can be set below this many digits: shorter integers convert under any."""
_LIMIT_LOCK = threading.Lock()


def json_depth() -> int:
    """The deepest nesting taken as readable by nanobot's ``json``: its recursion limit less
    room for nanobot's own frames.  Fixed, so a file reads the same from any stack and under
    any ``sys.setrecursionlimit``."""
    return NANOBOT_RECURSION_LIMIT - 100


class TooDeep(RecursionError):
    """A text nested deeper than nanobot's ``json`` reads: ``depth`` when known, and
    ``value``, the text read exactly all the same where sessionkit can (else None)."""

    def __init__(self, depth: int | None, value: Any = None) -> None:
        levels = f"over {json_depth():,}" if depth is None else f"{depth}"
        super().__init__(f"nested {levels} levels deep, deeper than nanobot's json reads")
        self.depth = depth
        self.value = value


def nesting(value: Any) -> int:
    """How deeply ``value``'s lists and dicts nest (0 for a scalar), without recursion."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if type(item) is dict else item
        deepest = max(deepest, depth)
        pending.extend((c, depth + 1) for c in children if type(c) is dict or type(c) is list)
    return deepest if type(value) is dict or type(value) is list else 0


def has_long_number(data: bytes) -> bool:
    """Whether ``data`` holds a run of 19 digits: an integer orjson may have rounded."""
    return data.translate(SHAPE).find(LONG_NUMBER) >= 0


def _stack_depth() -> int:
    frame: FrameType | None
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def _on_fresh_stack(parse: Callable[[str], Any], text: str) -> Any:
    """``parse(text)`` in a new thread, whose stack is always as deep, under nanobot's
    recursion limit (set for the parse, the caller's restored after): a deeply nested text
    reads the same (or fails the same) whatever the caller's stack depth and limit."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((parse(text), None))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller
            outcome.append((None, exc))

    worker = threading.Thread(target=run, name="sessionkit-json")
    with _LIMIT_LOCK:
        before = sys.getrecursionlimit()
        sys.setrecursionlimit(NANOBOT_RECURSION_LIMIT)
        try:
            worker.start()
            worker.join()
        finally:
            sys.setrecursionlimit(before)
    value, error = outcome[0]
    if error is not None:
        raise error
    return value


def exact_int(digits: str) -> int:
    """An integer of any length, exactly, under any int-string limit (lifted for this one)."""
    return int(digits) if len(digits) <= _FEWEST_INT_DIGITS else int(Decimal(digits))


def nanobot_int(digits: str) -> int:
    """``int(digits)`` as nanobot's ``json`` converts it: ``ValueError`` past
    :data:`NANOBOT_INT_DIGITS` digits, whatever this process's own limit."""
    if len(digits) - digits.startswith("-") > NANOBOT_INT_DIGITS:
        raise ValueError(
            f"Exceeds the limit ({NANOBOT_INT_DIGITS} digits) for integer string conversion"
        )
    return exact_int(digits)


def _json_loads(text: str, brackets: int, **lifted: Any) -> Any:
    """``json.loads(text)``: inline when ``brackets`` (an upper bound on its nesting) leaves
    room on this stack under both this process's recursion limit and nanobot's, else on a
    fresh stack (:func:`_on_fresh_stack`)."""
    parse: Callable[[str], Any] = partial(json.loads, **lifted) if lifted else json.loads
    limit = min(sys.getrecursionlimit(), NANOBOT_RECURSION_LIMIT)
    if brackets < limit - _stack_depth() - 100:
        return parse(text)
    return _on_fresh_stack(parse, text)


def _read_anyway(text: str) -> Any:
    """A text too deep for nanobot read exactly on a fresh stack, else None."""
    with suppress(ValueError, RecursionError):
        return _on_fresh_stack(partial(json.loads, parse_int=exact_int), text)
    return None


def loads_as_nanobot(line: bytes, text: str, **lifted: Any) -> Any:
    """``json.loads(text, **lifted)`` as nanobot's loader meets ``line`` (``text`` is the line
    decoded and stripped), the same from any caller: :class:`TooDeep` for nesting past
    :func:`json_depth`, else what ``json`` gives or raises (on a fresh stack when deep).

    Brackets bound the nesting; from :data:`DEEP` of them orjson reads the line to count
    it exactly (brackets inside strings do not nest).
    """
    shape = line.translate(SHAPE)
    if not lifted and shape.find(b"0" * _FEWEST_INT_DIGITS) >= 0:
        lifted = {"parse_int": nanobot_int}  # nanobot's int-string limit, not this process's
    bound = shape.count(b"[")
    if bound >= DEEP:
        with suppress(orjson.JSONDecodeError):
            quick = orjson.loads(line)
            bound = nesting(quick)
            if bound > json_depth():
                raise TooDeep(bound, _read_anyway(text) if has_long_number(line) else quick)
    try:
        value = _json_loads(text, bound, **lifted)
    except RecursionError:
        raise TooDeep(None) from None
    if bound > json_depth() and (depth := nesting(value)) > json_depth():
        raise TooDeep(depth, value)
    return value


_SIGNED_SHAPE = bytes(0x30 if 0x30 <= b <= 0x39 else b if b == 0x2D else 0x2E for b in range(256))
"""Digits to ``0``, ``-`` kept, anything else to ``.``: where a text's integers are."""


def _past_orjson(data: bytes) -> bool:
    """Whether ``data`` may hold an integer orjson reads as a float (it keeps -2**63 ..
    2**64-1 exactly): a run of 20 digits, or of 19 after a minus."""
    shape = data.translate(_SIGNED_SHAPE)
    return shape.find(LONG_NUMBER + b"0") >= 0 or shape.find(b"-" + LONG_NUMBER) >= 0


def loads_exact(data: bytes) -> Any:
    """JSON read exactly (integers of any length, NaN, lone surrogates as ``\\ud800``), the
    same from any caller: orjson where it is exact, else ``json`` (on a fresh stack when
    deep).  Raises ValueError for text that is not JSON, RecursionError past the nesting a
    fresh stack holds (about 990 levels; 1,024 when no integer is long)."""
    if not _past_orjson(data):
        with suppress(orjson.JSONDecodeError):
            return orjson.loads(data)
    brackets = data.translate(SHAPE).count(b"[")
    return _json_loads(data.decode("utf-8"), brackets, parse_int=exact_int)


class _Text(str):
    """A piece of JSON text already written (never a value: the class is private)."""


class _Close(_Text):
    """The text that closes a container, which is then no longer open."""

    container: int


def _closing(text: str, container: Any) -> _Close:
    close = _Close(text)
    close.container = id(container)
    return close


def _int_text(value: int) -> str:
    """An integer's digits, past Python's int-string limit too (through Decimal)."""
    try:
        return int.__repr__(value)
    except ValueError:
        return str(Decimal(int(value)))


def _key_text(key: Any) -> str:
    """A dict key as ``json.dumps`` writes it: strings as they are, scalars as their text."""
    if isinstance(key, str):
        return json.dumps(key)
    if isinstance(key, int) and not isinstance(key, bool):
        return json.dumps(_int_text(key))
    if key is None or isinstance(key, bool | float):
        return json.dumps(json.dumps(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _pieces(value: Any) -> Iterator[str]:
    """``json.dumps(value)``'s text in pieces, without recursion or the int-string limit."""
    pending: list[Any] = [value]
    open_ids: set[int] = set()
    while pending:
        item = pending.pop()
        if isinstance(item, _Text):
            if type(item) is _Close:
                open_ids.discard(item.container)
            yield item
        elif isinstance(item, int) and not isinstance(item, bool):
            yield _int_text(item)
        elif isinstance(item, dict | list | tuple):
            if id(item) in open_ids:
                raise ValueError("Circular reference detected")
            open_ids.add(id(item))
            if isinstance(item, dict):
                parts: list[Any] = [_Text("{")]
                for n, (key, child) in enumerate(item.items()):
                    parts += [_Text(f"{', ' if n else ''}{_key_text(key)}: "), child]
                parts.append(_closing("}", item))
            else:
                parts = [_Text("[")]
                for n, child in enumerate(item):
                    parts += [_Text(", "), child] if n else [child]
                parts.append(_closing("]", item))
            pending.extend(reversed(parts))
        else:
            yield json.dumps(item)


def dumps_exact(value: Any) -> str:
    """ASCII JSON text that :func:`loads_exact` reads back as ``value`` exactly: the text of
    ``json.dumps``, built without recursion where ``json`` refuses (an integer past Python's
    int-string limit, nesting deeper than the caller's stack allows).  Raises TypeError for
    what JSON cannot hold and ValueError for a circular reference."""
    with suppress(ValueError, RecursionError):
        return json.dumps(value)
    return "".join(_pieces(value))
