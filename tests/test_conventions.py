"""The one signature convention: the README's table is every public function's signature, old
spellings still work (with a warning naming the new one), and a grid is one explicit argument."""

from __future__ import annotations

import inspect
import re
import warnings
from pathlib import Path

import pandas as pd
import pytest

import sessionkit as sk
from sessionkit.conventions import SETTING_NAMES, entry_point, swept

README = Path(__file__).resolve().parents[1] / "README.md"
DATA = Path(__file__).resolve().parents[1] / "data" / "sessions"
KEY = "webui:f00d42"


def _table() -> dict[str, list[str]]:
    """The README's signature table: function name to its parameters, in order."""
    text = README.read_text(encoding="utf-8")
    section = text.split("### One signature convention", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (.+) \|$", section, flags=re.M)
    table = {}
    for name, cell in rows:
        names = []
        for part in (p.strip() for p in cell.split(",")):
            if part == "*the settings*":
                names += SETTING_NAMES
            else:
                names.append(part.strip("`"))
        table[name] = names
    return table


def _signature(function: object) -> list[str]:
    names, star = [], False
    for parameter in inspect.signature(function).parameters.values():  # type: ignore[arg-type]
        if parameter.kind == parameter.KEYWORD_ONLY and not star:
            names.append("*")
            star = True
        names.append(parameter.name)
    return names


def test_the_readme_table_is_every_public_functions_signature() -> None:
    functions = {n: getattr(sk, n) for n in sk.__all__ if inspect.isfunction(getattr(sk, n))}
    table = _table()
    assert sorted(table) == sorted(functions)
    assert {n: _signature(f) for n, f in functions.items()} == table


def test_functions_taking_settings_follow_the_convention() -> None:
    """source, key, then keyword-only policy, settings and the settings in order."""
    for name in ("windows", "requests", "message_states", "file_cap", "explore", "request"):
        params = _signature(getattr(sk, name))
        assert params[:2] == ["source", "key"], name
        after = params[params.index("policy") :]
        assert after[:2] == ["policy", "settings"], name
        settings = [p for p in after if p in SETTING_NAMES]
        expected = [s for s in SETTING_NAMES if s in settings]
        assert settings == expected, name
        defaults = inspect.signature(getattr(sk, name)).parameters
        assert all(defaults[p].default is None for p in ("key", "policy", "settings")), name


def _deprecated(call: object) -> tuple[object, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()  # type: ignore[operator]
    return result, [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.fixture(scope="module")
def corpus() -> sk.Corpus:
    return sk.load(DATA, cache=False)


def test_a_list_keyword_still_sweeps_with_a_warning_naming_grid(corpus: sk.Corpus) -> None:
    session = corpus[KEY]
    old, said = _deprecated(lambda: sk.windows(session, max_tokens=[0, 4000]))
    assert said == [
        "windows(max_tokens=[...]) is deprecated; sweep with grid={'max_tokens': [...]} "
        "(a keyword takes one value)"
    ]
    new = sk.windows(session, grid={"max_tokens": [0, 4000]})
    pd.testing.assert_frame_equal(old, new)  # type: ignore[arg-type]


def test_old_spellings_still_work_with_a_warning(corpus: sk.Corpus) -> None:
    session = corpus[KEY]
    counts, said = _deprecated(lambda: sk.count_tokens(session.messages[:3], method="fallback"))
    assert counts == sk.count_tokens(session.messages[:3], tokens="fallback")
    assert said == [
        "count_tokens(method=...) is deprecated; pass tokens=... (the same value); the old "
        "spelling goes in the next release"
    ]
    caps, said = _deprecated(lambda: sk.file_cap(corpus, [10, 50]))
    pd.testing.assert_frame_equal(caps, sk.file_cap(corpus, grid={"file_cap": [10, 50]}))  # type: ignore[arg-type]
    assert said == [
        "file_cap(source, limits) is deprecated; pass file_cap=<limit> or "
        "grid={'file_cap': [...]} (the second parameter is the session key)"
    ]
    _, said = _deprecated(lambda: sk.file_cap(corpus, limits=10))
    assert said[0].startswith("file_cap(limits=...) is deprecated; pass file_cap=...")
    forked, said = _deprecated(lambda: sk.fork(corpus, "t:1", 1, source_key=KEY))
    assert forked.messages == sk.fork(corpus, "t:1", 1, key=KEY).messages  # type: ignore[attr-defined]
    assert said[0].startswith("fork(source_key=...) is deprecated; pass key=...")
    states, said = _deprecated(lambda: sk.explore(corpus=corpus, key=KEY).states.frame)
    assert said[0].startswith("explore(corpus=...) is deprecated; pass source=...")


def test_both_spellings_at_once_are_refused(corpus: sk.Corpus) -> None:
    with pytest.raises(TypeError, match="fork\\(\\) got source_key= and key=; pass key= only"):
        sk.fork(corpus, "t:1", 1, source_key=KEY, key=KEY)
    with pytest.raises(ValueError, match="max_tokens both as a keyword and in grid="):
        sk.windows(corpus[KEY], max_tokens=0, grid={"max_tokens": [0]})


@pytest.mark.parametrize(
    ("grid", "error", "says"),
    [
        ([("max_tokens", [0])], TypeError, "takes a mapping such as"),
        ({"max_tokenz": [0]}, TypeError, "cannot sweep 'max_tokenz'; it sweeps policy, "),
        ({"max_tokens": []}, ValueError, "takes a non-empty list of values"),
        ({"max_tokens": 0}, ValueError, "takes a non-empty list of values, not 0"),
    ],
)
def test_a_wrong_grid_is_refused(grid: object, error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=re.escape(says)):
        sk.windows(sk.Session("k", [{"role": "user", "content": "q"}]), grid=grid)  # type: ignore[arg-type]


def test_key_narrows_the_source(corpus: sk.Corpus) -> None:
    whole = sk.windows(corpus, grid={"max_tokens": [0, 2000]})
    one = sk.windows(corpus, KEY, grid={"max_tokens": [0, 2000]})
    assert set(one["session_key"].astype(str)) == {KEY}
    mine = whole[whole["session_key"] == KEY]
    assert one["tokens_kept"].tolist() == mine["tokens_kept"].tolist()
    with pytest.raises(KeyError, match="no session of key 'x:y' among those given"):
        sk.windows(list(corpus), "x:y")


def test_entry_point_and_swept_stand_alone() -> None:
    @entry_point(old="new")
    def f(*, new: int = 0) -> int:
        return new

    with pytest.warns(DeprecationWarning, match="f\\(old=...\\) is deprecated; pass new="):
        assert f(old=3) == 3
    assert f(new=4) == 4
    assert swept("f", None, ["a", "b"], a=1) == {"a": 1, "b": None}
    assert swept("f", {"b": (1, 2)}, ["a", "b"]) == {"a": None, "b": [1, 2]}


def test_request_turn_is_the_third_parameter(corpus: sk.Corpus) -> None:
    with pytest.raises(TypeError, match="request\\(\\) needs turn="):
        sk.request(corpus, KEY)


def test_the_readme_names_every_public_name() -> None:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"The public surface is the (\d+) names in `sk.__all__` \(([^)]+)\)", text)
    assert found is not None
    assert int(found.group(1)) == len(sk.__all__)
    named = re.findall(r"`(\w+)`", found.group(2))
    assert sorted(named) == sorted(sk.__all__)


def test_each_deprecation_points_at_the_callers_line(corpus: sk.Corpus) -> None:
    session = corpus[KEY]
    calls = [
        lambda: sk.windows(session, max_tokens=[0, 4000]),
        lambda: sk.requests(session, max_messages=[20, 120]),
        lambda: sk.file_cap(corpus, [10, 50]),
        lambda: sk.file_cap(corpus, limits=10),
        lambda: sk.count_tokens(session.messages[:2], method="fallback"),
        lambda: sk.request(session, 1),
    ]
    for call in calls:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        ours = [w for w in caught if issubclass(w.category, DeprecationWarning)]
        assert ours and all(w.filename == __file__ for w in ours), [
            (w.filename, str(w.message)) for w in ours
        ]
