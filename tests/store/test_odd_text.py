"""Odd text in a session (lone surrogates, mathtext, control characters, roles that are not
strings, very long keys) goes through every entry point: kept as nanobot keeps it, shown
escaped where it cannot be encoded, with a problem recorded, and nothing crashes."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest

import sessionkit as sk
from sessionkit.cli import main

META = (
    '{"_type":"metadata",%s"created_at":"2026-01-01T00:00:00",'
    '"updated_at":"2026-01-01T00:00:00","metadata":{"title":%s},"last_consolidated":0}'
)
LINE = '{"role":%s,"content":%s,"timestamp":"2026-01-01T00:00:0%d"}'

# name: (file name as bytes, key as JSON or None for none, role as JSON, title as JSON,
#        what a problem says, or None for no problem)
CASES: dict[str, tuple[bytes, str | None, str, str, str | None]] = {
    "key-surrogate": (b"t_1.jsonl", '"t:\\ud800"', '"user"', '"t"', "session key 't:\\ud800'"),
    "key-surrogate-in-file-name": (b"t_\xff.jsonl", None, '"user"', '"t"', "not valid Unicode"),
    "key-mathtext": (b"t_2.jsonl", json.dumps("t:$\\notacommand{$"), '"user"', '"t"', None),
    "key-control": (b"t_3.jsonl", json.dumps("t:\x01\x1b[31m\n\x7f"), '"user"', '"t"', None),
    "key-long": (b"t_4.jsonl", json.dumps("t:" + "x" * 3000), '"user"', '"t"', None),
    "role-surrogate": (b"t_5.jsonl", '"t:5"', '"us\\ud800er"', '"t"', "role 'us\\ud800er'"),
    "role-list": (b"t_6.jsonl", '"t:6"', '["user"]', '"t"', None),
    "role-dict": (b"t_7.jsonl", '"t:7"', '{"role": "user"}', '"t"', None),
    "role-mathtext": (b"t_8.jsonl", '"t:8"', json.dumps("$\\notacommand{$"), '"t"', None),
    "title-surrogate": (b"t_9.jsonl", '"t:9"', '"user"', '"\\udfff$\\\\x{$"', "title '\\udfff"),
}


def _store(folder: Path, case: str) -> Path:
    name, key, role, title, _ = CASES[case]
    folder.mkdir()
    lines = [
        META % (f'"key":{key},' if key else "", title),
        LINE % (role, '"hi \\ud801 $\\\\y{$"', 1),
        LINE % ('"assistant"', '"yo"', 2),
        LINE % ('"user"', '"again"', 3),
    ]
    (folder / os.fsdecode(name)).write_bytes("\n".join(lines).encode("utf-8") + b"\n")
    return folder


def _drawn(ax: Any) -> None:
    ax.figure.savefig(io.BytesIO(), format="png")  # mathtext is parsed when drawn
    plt.close(ax.figure)


def _sent(app: Any) -> None:
    """What the explorer sends its front-end is UTF-8 (a kernel refuses anything else)."""
    shown = [app.summary.value, app.picker._options_labels, app.transcript.rows]
    json.dumps(shown, ensure_ascii=False).encode("utf-8")
    app.close()


ENTRY_POINTS: dict[str, Callable[[sk.Corpus, str, Path], Any]] = {
    "windows": lambda c, k, p: sk.windows(c),
    "file_cap": lambda c, k, p: sk.file_cap(c),
    "message_states": lambda c, k, p: sk.message_states(c[k]),
    "token_timeline": lambda c, k, p: _drawn(sk.plot.token_timeline(c, k)),
    "explore": lambda c, k, p: _sent(sk.explore(c)),
    "summary": lambda c, k, p: main(["summary", str(p)]),
}


@pytest.mark.parametrize("entry", ["load", *ENTRY_POINTS])
@pytest.mark.parametrize("case", list(CASES))
def test_odd_text_goes_through_every_entry_point(
    tmp_path: Path, case: str, entry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _store(tmp_path / "sessions", case)
    corpus = sk.load(folder)
    assert len(corpus) == 1 and len(corpus.messages) == 3  # nanobot keeps every message
    (key,) = corpus.sessions["key"]  # as nanobot keeps it, surrogates and all
    assert corpus[key].key == key
    reasons = corpus.problems["reason"].tolist()
    expected = CASES[case][4]
    if expected is None:
        assert reasons == []
    else:
        assert len(reasons) == 1 and expected in reasons[0]
    if entry == "load":
        return
    ENTRY_POINTS[entry](corpus, key, folder)
    if entry == "summary":
        out = capsys.readouterr().out
        out.encode("utf-8")
        assert "TOTAL" in out
