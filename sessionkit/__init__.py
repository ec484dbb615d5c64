"""sessionkit: nanobot conversation histories as pandas DataFrames, simulated exactly."""

from sessionkit.naming import UnsafeKeyError, key_from_filename, safe_key, storage_key
from sessionkit.session import Session
from sessionkit.tokens import (
    count_tokens,
    estimate_message_tokens,
    fallback_message_tokens,
)

__all__ = [
    "Session",
    "UnsafeKeyError",
    "count_tokens",
    "estimate_message_tokens",
    "fallback_message_tokens",
    "key_from_filename",
    "safe_key",
    "storage_key",
]
