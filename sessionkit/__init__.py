"""sessionkit: nanobot conversation histories as pandas DataFrames, simulated exactly.

``sessionkit.plot`` and ``sessionkit.testing`` load matplotlib, so they are imported on first
use: loading, counting and the command line start without it.
"""

import importlib
from types import ModuleType

from sessionkit import schema, synthetic
from sessionkit.corpus import Corpus, default_data_dir, load
from sessionkit.explore import explore
from sessionkit.filecap import file_cap
from sessionkit.fork import LINEAGE_KEY, VOLATILE_METADATA_KEYS, ForkIndexError, fork, fork_many
from sessionkit.naming import UnsafeKeyError, key_from_filename, safe_key, storage_key
from sessionkit.policy import (
    POLICIES,
    Policy,
    Trim,
    find_legal_message_start,
    get_policy,
    recent_message_start_index,
    sanitize_assistant_text,
)
from sessionkit.session import Session
from sessionkit.states import message_states, summarize
from sessionkit.store import Problem, SessionPathError, read_session_file
from sessionkit.tokens import (
    TokenCache,
    count_tokens,
    estimate_message_tokens,
    fallback_message_tokens,
)
from sessionkit.windows import clear_cache as clear_window_cache
from sessionkit.windows import windows
from sessionkit.writer import LOCK_FILENAME, save_session, session_lines, session_path

__all__ = [
    "clear_window_cache",
    "sanitize_assistant_text",
    "explore",
    "file_cap",
    "message_states",
    "plot",
    "summarize",
    "testing",
    "windows",
    "LINEAGE_KEY",
    "LOCK_FILENAME",
    "VOLATILE_METADATA_KEYS",
    "ForkIndexError",
    "fork",
    "fork_many",
    "session_lines",
    "POLICIES",
    "Corpus",
    "Policy",
    "Problem",
    "Session",
    "SessionPathError",
    "TokenCache",
    "Trim",
    "UnsafeKeyError",
    "count_tokens",
    "default_data_dir",
    "estimate_message_tokens",
    "fallback_message_tokens",
    "find_legal_message_start",
    "get_policy",
    "key_from_filename",
    "load",
    "read_session_file",
    "recent_message_start_index",
    "safe_key",
    "save_session",
    "schema",
    "session_path",
    "storage_key",
    "synthetic",
]

_ON_FIRST_USE = ("plot", "testing")


def __getattr__(name: str) -> ModuleType:
    if name in _ON_FIRST_USE:
        return importlib.import_module(f"sessionkit.{name}")
    raise AttributeError(f"module 'sessionkit' has no attribute {name!r}")
