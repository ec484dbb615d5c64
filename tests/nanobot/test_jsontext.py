"""sessionkit.nanobot.jsontext: JSON read as nanobot's json reads it, and read or written
exactly, the same from any caller's stack."""

from __future__ import annotations

import json
import math
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from sessionkit.nanobot.jsontext import TooDeep, dumps_exact, loads_as_nanobot, loads_exact
from sessionkit.nanobot.reader import read_session_file


def _at_depth(depth: int, call: Any) -> Any:
    return call() if depth <= 0 else _at_depth(depth - 1, call)


def _nested(levels: int, inner: str = "") -> str:
    return "[" * levels + inner + "]" * levels


HUGE = -(10**5000) - 7
PLAIN = [
    {"a": [1, 2.5, None, True, False, "é \ud800 \n"], "b": {}, "c": []},
    {7: "int key", None: "null key", True: "bool key", 1.5: "float key"},
    [float("inf"), -float("inf"), -0.0, 1e-320, 18446744073709551617, -(2**63) - 1],
    "text",
    7,
    None,
]


@pytest.mark.parametrize("value", PLAIN)
def test_what_json_writes_is_written_the_same_either_way(value: Any) -> None:
    assert dumps_exact(value) == json.dumps(value)
    forced = dumps_exact([value, HUGE])  # json refuses the integer: built without json
    assert forced == f"[{json.dumps(value)}, -1{'0' * 4999}7]"


def test_what_json_refuses_is_written_as_its_text() -> None:
    value = {"n": HUGE, HUGE: [HUGE], "deep": json.loads(_nested(3)), "s": "\ud800"}
    text = '{"n": -1' + "0" * 4999 + '7, "-1' + "0" * 4999 + '7": [-1' + "0" * 4999 + "7], "
    assert dumps_exact(value) == text + '"deep": [[[]]], "s": "\\ud800"}'
    deep = json.loads(_nested(900))
    assert _at_depth(500, lambda: dumps_exact(deep)) == _nested(900)
    assert dumps_exact(json.loads(_nested(5))) == _nested(5)


def test_what_json_cannot_hold_is_refused() -> None:
    loop: list[Any] = [1]
    loop.append([loop])
    with pytest.raises(ValueError, match="Circular reference detected"):
        dumps_exact({"n": HUGE, "loop": loop})
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_exact({"n": HUGE, "x": object()})
    with pytest.raises(TypeError, match="keys must be str, int, float, bool or None, not tuple"):
        dumps_exact({"n": HUGE, (1,): 2})


@pytest.mark.parametrize("depth", [0, 850])
def test_exact_text_reads_back_exactly_from_any_stack(depth: int) -> None:
    value = {"n": HUGE, "m": 2**64 + 1, "x": float("nan"), "z": -0.0, "s": "\ud800", "k": []}
    value["k"] = json.loads(_nested(880, "18446744073709551617"))
    text = dumps_exact(value).encode("ascii")
    back = _at_depth(depth, lambda: loads_exact(text))
    assert list(back) == list(value)
    assert [k for k in value if back[k] != value[k]] == ["x"]  # NaN != NaN
    assert math.isnan(back["x"]) and math.copysign(1.0, back["z"]) == -1.0
    assert type(back["m"]) is int


def test_exact_reading_of_what_json_reads() -> None:
    assert loads_exact(b'{"a": 1.5, "b": [true, null], "c": "\\u00e9"}') == {
        "a": 1.5,
        "b": [True, None],
        "c": "é",
    }
    assert loads_exact(b"[1" + b"0" * 30 + b"]") == [10**30]
    with pytest.raises(ValueError, match="Expecting value"):
        loads_exact(b"[1, ")


@pytest.mark.parametrize("depth", [0, 400, 880])
def test_nanobots_reading_is_the_same_from_any_stack(depth: int) -> None:
    shallow, deep = _nested(850), _nested(950, "18446744073709551617")
    assert _at_depth(depth, lambda: loads_as_nanobot(shallow.encode(), shallow)) == json.loads(
        shallow
    )
    with pytest.raises(TooDeep) as raised:
        _at_depth(depth, lambda: loads_as_nanobot(deep.encode(), deep))
    assert (raised.value.depth, str(raised.value)) == (
        950,
        "nested 950 levels deep, deeper than nanobot's json reads",
    )
    inner = raised.value.value
    for _ in range(950 - 1):
        (inner,) = inner
    assert inner == [18446744073709551617]
    huge = '{"n": 1' + "0" * 5000 + "}"
    with pytest.raises(ValueError, match="Exceeds the limit"):
        loads_as_nanobot(huge.encode(), huge)
    lifted = loads_as_nanobot(huge.encode(), huge, parse_int=lambda s: int(Decimal(s)))
    assert lifted == {"n": 10**5000}


def test_nesting_no_parser_here_reads_is_too_deep_of_unknown_depth() -> None:
    text = '{"c": ' + _nested(50_000) + "}"
    with pytest.raises(TooDeep) as raised:
        loads_as_nanobot(text.encode(), text)
    assert (raised.value.depth, raised.value.value) == (None, None)
    assert str(raised.value) == "nested over 900 levels deep, deeper than nanobot's json reads"


def _odd_store(folder: Path) -> Path:
    """A session whose lines sit at Python's limits: nested 850 deep (nanobot reads it) and
    950 deep (it does not), an integer of 1,000 digits (it converts) and 5,000 (it does not)."""
    path = folder / "telegram_1.jsonl"
    lines = [
        '{"_type": "metadata", "key": "telegram:1"}',
        '{"role": "user", "content": "q", "deep": ' + "[" * 849 + "]" * 849 + "}",
        '{"role": "user", "content": "q", "deeper": ' + "[" * 949 + "]" * 949 + "}",
        '{"role": "user", "content": "q", "n": ' + "7" * 1000 + "}",
        '{"role": "user", "content": "q", "n": ' + "7" * 5000 + "}",
        '{"role": "assistant", "content": "a"}',
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("recursion", "digits"), [(1000, 4300), (300, 640), (20_000, 0), (1000, 100_000)]
)
def test_a_file_reads_the_same_under_any_interpreter_limits(
    tmp_path: Path, recursion: int, digits: int
) -> None:
    """What nanobot (CPython's default limits) reads is what sessionkit reads, whatever this
    process's recursion limit and int-string limit."""
    path = _odd_store(tmp_path)
    before = (sys.getrecursionlimit(), sys.get_int_max_str_digits())
    try:
        sys.setrecursionlimit(recursion)
        sys.set_int_max_str_digits(digits)
        session, problems = read_session_file(path)
    finally:
        sys.setrecursionlimit(before[0])
        sys.set_int_max_str_digits(before[1])
    assert sys.getrecursionlimit() == before[0]
    assert session is not None
    assert [sorted(m) for m in session.messages] == [
        ["content", "deep", "role"],
        ["content", "n", "role"],
        ["content", "role"],
    ]
    assert session.messages[1]["n"] == int("7" * 1000)
    assert [position for position, _ in session.held_lines] == [1, 2]
    beyond = (
        ": nanobot 0.2.2 cannot parse this line, and its repair fails on it too and loses the "
        "whole session; sessionkit holds the line as it is: replays leave it out, and forks "
        "write it back unchanged"
    )
    assert [(p.line_no, p.reason) for p in problems] == [
        (
            3,
            "valid JSON, but nested 950 levels deep, deeper than Python's json reads on "
            "nanobot's stack" + beyond,
        ),
        (
            5,
            "valid JSON, but an integer of more than 4,300 digits, past Python's int-string "
            "limit" + beyond,
        ),
    ]
