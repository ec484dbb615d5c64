"""Token counts of many overlapping request texts, exact and fast: each text is cut where
cl100k_base's pre-tokenizer surely cuts it, and each piece is counted once per plan (by the
fastest exact counter installed), since an experiment's requests repeat the same history
again and again."""

from __future__ import annotations

import re
from collections.abc import Callable

from sessionkit.calls.assembly import count_text
from sessionkit.nanobot.tokens import has_marker
from sessionkit.store.counting import text_tokens

__all__ = ["piece_counter"]

_CUT = re.compile(r"\n(?<=[^\W_]\n)")
"""At a newline that follows a letter or digit (``[^\\W_]`` is exactly Unicode's L and N
categories).  No pre-token of cl100k_base's pattern holds both a letter or digit and a newline,
none looks behind, and the one looking ahead (``\\s+(?!\\S)``) sees no further than a
whitespace run's next character: so the tokens of ``a + "\\n" + b`` are those of ``a`` then
those of ``"\\n" + b``.  No special token holds a newline, so a text with one still raises.
(The pattern starts with the newline, which ``re`` finds fast, and looks behind it.)"""


class _Pieces(dict[str, int]):
    """Counts by piece, each counted on first use, of ``lead + piece``."""

    def __init__(self, lead: str) -> None:
        super().__init__()
        self.lead = lead

    def __missing__(self, piece: str) -> int:
        text = self.lead + piece
        # Text without "<|" holds no special token: the fastest exact counter counts it;
        # text with it goes to count_text, which raises on special-token text as tiktoken does.
        counted = count_text(text) if has_marker(text) else text_tokens([text])[0]
        self[piece] = counted
        return counted


def piece_counter() -> Callable[[str], int]:
    """A counter equal to :func:`sessionkit.calls.assembly.count_text` on every text, that
    counts each piece of text (see :data:`_CUT`) only the first time it meets it."""
    first, later = _Pieces(""), _Pieces("\n")

    def count(text: str) -> int:
        pieces = _CUT.split(text)
        return first[pieces[0]] + sum(map(later.__getitem__, pieces[1:]))

    return count
