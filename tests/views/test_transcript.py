"""The transcript widget without a browser: its rows, its status table and its front-end files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import sessionkit
from sessionkit.schema import STATUSES, contrast_ratio
from sessionkit.views.transcript import MAX_TEXT_CHARS, TranscriptWidget, transcript_rows

WIDGETS = Path(__file__).resolve().parents[2] / "widgets"


def test_transcript_rows() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"p": 1}'}}
    session = sessionkit.Session(
        "t:rows",
        [
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}]},
            {"role": "assistant", "content": "", "tool_calls": [call, call]},
            {"role": "tool", "content": "a\n  b " + "z" * MAX_TEXT_CHARS, "name": "read"},
            {"role": "user", "content": "again"},
        ],
    )
    rows = transcript_rows(session, [1, 2, 3, 4])
    assert [r["user"] for r in rows] == [0, -1, -1, 1]
    assert rows[0]["text"] == "hi" and rows[0]["tokens"] == 1
    assert rows[1]["summary"] == "2 tool calls: read, read"
    assert rows[1]["calls"] == ['read({"p": 1})'] * 2
    assert rows[2]["summary"] == "read: a b " + "z" * 116 + "… (3,884 more characters)"
    assert rows[2]["text"] == "a\n  b " + "z" * (MAX_TEXT_CHARS - 6) + "… (6 more characters)"


def test_the_widget_receives_the_status_table() -> None:
    statuses = TranscriptWidget().statuses
    assert statuses == [
        {"name": s.name, "label": s.label, "color": s.color, "text": s.text_color} for s in STATUSES
    ]
    assert statuses[0] == {
        "name": "in_window",
        "label": "in window",
        "color": "#2ca02c",
        "text": "#000000",
    }
    assert [s["name"] for s in statuses] == [
        "in_window",
        "trimmed_count",
        "trimmed_tokens",
        "consolidated",
        "command",
        "skipped",
        "file_cap",
        "later",
    ]


def test_the_front_end_holds_no_status_colour() -> None:
    """Every status colour the transcript shows is the one its status table sends."""
    css = (WIDGETS / "transcript.css").read_text().lower()
    script = (WIDGETS / "transcript.js").read_text().lower()
    assert [s.color for s in STATUSES if s.color in css or s.color in script] == []
    assert re.findall(r'\[data-status="(\w+)"\]', css) == ["later", "later"]
    assert css.count("var(--sk-status-color, transparent)") == 2
    assert 'model.get("statuses")' in script and '"--sk-status-color"' in script
    assert css.count("var(--sk-status-text") == 1 and '"--sk-status-text"' in script


def test_every_status_chip_reads_at_wcag_aa() -> None:
    """Each transcript chip: the text colour its status table sends against the status
    colour, a contrast ratio of at least 4.5:1; no rule fades the chip (opacity would lower it)."""
    for status in TranscriptWidget().statuses:
        ratio = contrast_ratio(status["text"], status["color"])
        assert ratio >= 4.5, f"{status['name']}: {status} has contrast {ratio:.2f}"
    css = (WIDGETS / "transcript.css").read_text()
    faded = [rule for rule in css.split("}") if "opacity" in rule]
    assert faded and all(":not(.sk-status)" in rule or "~ *" in rule for rule in faded), faded


def test_the_widget_points_at_the_front_end_files() -> None:
    widget = TranscriptWidget()
    assert widget._esm == (WIDGETS / "transcript.js").read_text()
    assert widget._css == (WIDGETS / "transcript.css").read_text()


def test_import_reads_no_front_end_file() -> None:
    """The widget's files are read when a widget is made, not when the module is imported."""
    script = """
import json, sys
opened = []
sys.addaudithook(lambda event, args: event == "open" and opened.append(str(args[0])))
import sessionkit.views.transcript
on_import = [p for p in opened if p.endswith(("transcript.js", "transcript.css"))]
sessionkit.views.transcript.TranscriptWidget()
on_widget = [p for p in opened if p.endswith(("transcript.js", "transcript.css"))]
print(json.dumps([on_import, sorted(on_widget)]))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    on_import, on_widget = json.loads(done.stdout)
    assert on_import == []
    assert on_widget == [str(WIDGETS / "transcript.css"), str(WIDGETS / "transcript.js")]
