"""Session text made safe for each place it is shown: frames, Markdown, plot labels.

Sessions keep their text as nanobot stores it; these helpers make the copy that is *shown*.
Text that cannot be encoded as UTF-8 (a lone surrogate such as ``\\ud800``, or a file name's
undecodable byte) is shown with the escape that names it, and markup in session text never
becomes markup.
"""

from __future__ import annotations

import unicodedata
from typing import Any

__all__ = ["encodable", "markdown_code", "plot_label", "shown"]


def encodable(text: str) -> bool:
    """Whether ``text`` can be encoded as UTF-8 (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(value: Any) -> str | None:
    """``value`` as text that can be written anywhere: None stays None, a value that is not
    a string (a list or dict where a role should be) is its ``str``, and a lone surrogate
    becomes its escape (``\\ud800``)."""
    if value is None:
        return None
    text = value if type(value) is str else str(value)
    if encodable(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


_PLAIN = frozenset("-/, ")
"""ASCII characters no Markdown dialect reads as markup, even in an autolink."""


def _code_char(char: str) -> str:
    if char.isascii() and (char.isalnum() or char in _PLAIN):
        return char
    if char.isascii() or unicodedata.category(char) in {"Cc", "Cf", "Zl", "Zp", "Cs"}:
        if char.isascii() and char.isprintable():
            return f"&#{ord(char)};"
        escaped = char.encode("unicode_escape").decode("ascii")  # \n, \x01, \u202e, \ud800
        return "".join(f"&#{ord(c)};" if not c.isalnum() else c for c in escaped)
    return char


def markdown_code(value: Any) -> str:
    """``value`` as inline code in Markdown (or HTML) that shows it as written.

    Every ASCII character but letters, digits, space, ``-``, ``/`` and ``,`` becomes a
    character reference, so no backtick, ``<``, ``*``, ``[``, ``$``, ``:`` or ``\\`` in
    session text can end the code element, open a tag, a link, an autolink or a formula; line breaks, control and format characters and lone
    surrogates show as their escapes (``\\n``).  The result is one ``<code>`` element.
    """
    return "<code>" + "".join(map(_code_char, str(value))) + "</code>"


def plot_label(value: Any) -> str:
    """``value`` as a matplotlib label shown literally: ``$`` escaped (no mathtext), lone
    surrogates escaped (see :func:`shown`)."""
    return (shown(value) or "").replace("$", r"\$")
