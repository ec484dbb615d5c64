"""sessionkit.store.text: session text shown safely in frames, Markdown and plot labels."""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
from hypothesis import given
from hypothesis import strategies as st
from nbconvert.filters.markdown_mistune import markdown2html_mistune

from sessionkit.store.text import markdown_code, plot_label, shown

HOSTILE = [
    "`",
    "a ``` b",
    "<script>alert(1)</script>",
    '<img src="x" onerror="alert(1)">',
    "[x](javascript:alert(1))",
    "https://example.com www.example.com a@example.com",
    "$x$ $$y$$ \\(z\\)",
    "*a* _b_ ~~c~~ # d",
    "line\n<script>alert(1)</script>\n",
    "t:\ud800",
    "\x00\x1b[31m\u202e\u2028",
]


def _rendered(text: str) -> str:
    return markdown2html_mistune(f"- see {markdown_code(text)} here").strip()


@given(st.one_of(st.sampled_from(HOSTILE), st.text(), st.text(alphabet="`<>[]()*_$\\:/!&\n")))
def test_markdown_code_is_one_code_element_whatever_the_text(text: str) -> None:
    html = _rendered(text)
    tags = re.findall(r"</?([a-z0-9]+)", html)
    assert tags == ["ul", "li", "code", "code", "li", "ul"]


def test_markdown_code_shows_the_text_as_written() -> None:
    assert _rendered("a`b <i>").count("<code>a`b &lt;i&gt;</code>") == 1
    assert "<code>t:\\ud800</code>" in _rendered("t:\ud800")
    assert "<code>a\\nb</code>" in _rendered("a\nb")
    assert markdown_code("telegram-1/a, b") == "<code>telegram-1/a, b</code>"


def test_plot_labels_from_session_text_are_literal() -> None:
    fig, ax = plt.subplots()
    try:
        ax.set_title(plot_label("$\\notacommand{$"))
        ax.plot([0, 1], label=plot_label("us\ud800er $\\x{$"))
        ax.legend()
        fig.canvas.draw()
        assert ax.get_title() == "\\$\\notacommand{\\$"
    finally:
        plt.close(fig)


def test_shown() -> None:
    assert shown(None) is None
    assert shown("t:1") == "t:1"
    assert shown("t:\ud800") == "t:\\ud800"
    assert shown(["user"]) == "['user']"
    assert shown({"r": "\udfff"}) == "{'r': '\\udfff'}"
