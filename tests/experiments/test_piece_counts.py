"""The piece counter counts every text exactly as count_text does, however its newlines fall,
and counts a piece it has met before without tokenizing it again."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionkit.calls.assembly import count_text
from sessionkit.experiments.piece_counts import piece_counter

_ALPHABET = st.sampled_from(list("ab Z9é中'sx.,!-_\n\r\t ") + ["\n\n", "  \n", "ll", "123"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_ALPHABET, max_size=60).map("".join))
def test_the_count_of_any_text_is_count_texts(text: str) -> None:
    assert piece_counter()(text) == count_text(text)


_MARKED = st.sampled_from(["a", "\n", "<", "|", "<|", "<|endoftext|>", "\ud800", "é", " "])


@settings(max_examples=300, deadline=None)
@given(st.lists(_MARKED, max_size=30).map("".join))
def test_special_token_text_raises_and_lone_surrogates_count_as_count_texts(text: str) -> None:
    """Pieces holding "<|" go to count_text (special-token text raises, as tiktoken does);
    the rest to the fastest exact counter, which repairs a lone surrogate as tiktoken does."""
    try:
        expected: int | type = count_text(text)
    except ValueError:
        expected = ValueError
    try:
        found: int | type = piece_counter()(text)
    except ValueError:
        found = ValueError
    assert found == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello\nworld", count_text("hello\nworld")),
        ("ends in a word.\n\nnext", count_text("ends in a word.\n\nnext")),
        ("x  \n y", count_text("x  \n y")),
        ("12345\n678", count_text("12345\n678")),
        ("don't\n's", count_text("don't\n's")),
    ],
)
def test_texts_at_the_cut_edges(text: str, expected: int) -> None:
    count = piece_counter()
    assert count(text) == expected
    assert count(text) == expected  # remembered pieces give the same count


def test_a_repeated_history_reuses_its_pieces() -> None:
    """Two requests sharing a long history: the second adds only its new line's count."""
    history = "\n".join(f"message {i} said something long enough to count" for i in range(200))
    count = piece_counter()
    first = count(history + "\nwhat now")
    assert first == count_text(history + "\nwhat now")
    assert count(history + "\nand then") == count_text(history + "\nand then")
    assert count("\nwhat now") == count_text("\nwhat now")
