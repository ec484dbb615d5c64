"""sessionkit: nanobot conversation histories as pandas DataFrames, simulated exactly."""

from sessionkit import schema
from sessionkit.corpus import Corpus, default_data_dir, load
from sessionkit.naming import UnsafeKeyError, key_from_filename, safe_key, storage_key
from sessionkit.session import Session
from sessionkit.store import Problem, SessionPathError, read_session_file
from sessionkit.tokens import (
    TokenCache,
    count_tokens,
    estimate_message_tokens,
    fallback_message_tokens,
)

__all__ = [
    "Corpus",
    "Problem",
    "Session",
    "SessionPathError",
    "TokenCache",
    "UnsafeKeyError",
    "count_tokens",
    "default_data_dir",
    "estimate_message_tokens",
    "fallback_message_tokens",
    "key_from_filename",
    "load",
    "read_session_file",
    "safe_key",
    "schema",
    "storage_key",
]
