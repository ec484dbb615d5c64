"""sessionkit: nanobot conversation histories as pandas DataFrames, simulated exactly.

The names below are the whole public surface; everything else lives in its submodule
(``sessionkit.schema``, ``sessionkit.nanobot``, ...).  ``plot``, ``testing``, ``explore`` and
``synthetic`` load matplotlib or ipywidgets, so they are imported on first use.
"""

import importlib
import importlib.metadata
from typing import Any

from sessionkit.checkup import doctor
from sessionkit.corpus import Corpus, load
from sessionkit.counting import count_tokens
from sessionkit.filecap import file_cap
from sessionkit.forking import fork, fork_many
from sessionkit.nanobot.policies import POLICIES, get_policy
from sessionkit.nanobot.session import Session
from sessionkit.nanobot.settings import HistorySettings
from sessionkit.nanobot.tokens import estimate_message_tokens
from sessionkit.nanobot.writer import save_session
from sessionkit.states import message_states
from sessionkit.windowing import windows

__all__ = [
    "POLICIES",
    "Corpus",
    "HistorySettings",
    "Session",
    "count_tokens",
    "doctor",
    "estimate_message_tokens",
    "explore",
    "file_cap",
    "fork",
    "fork_many",
    "get_policy",
    "load",
    "message_states",
    "save_session",
    "windows",
]

__version__ = importlib.metadata.version("sessionkit")

_SUBMODULES = ("plot", "testing", "schema", "synthetic", "nanobot", "dask")


def __getattr__(name: str) -> Any:
    if name == "explore":
        return importlib.import_module("sessionkit.explorer").explore
    if name in _SUBMODULES:
        return importlib.import_module(f"sessionkit.{name}")
    raise AttributeError(f"module 'sessionkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, *_SUBMODULES])
