"""sessionkit: nanobot conversation histories as pandas DataFrames, simulated exactly.

The names below are the whole public surface; everything else lives in its submodule
(``sessionkit.schema``, ``sessionkit.nanobot``, ...).  Every name is imported on first use,
so ``import sessionkit.nanobot`` (the pandas-free core) loads no pandas, numpy, matplotlib or
ipywidgets.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sessionkit.accounting.calibration import Calibration, calibrate
    from sessionkit.accounting.ledger import usage
    from sessionkit.accounting.pricing import cost
    from sessionkit.calls.assembly import Request, request
    from sessionkit.calls.frame import requests
    from sessionkit.experiments.continuation import continue_fork
    from sessionkit.experiments.experiment import experiment
    from sessionkit.experiments.judging import ModelJudge
    from sessionkit.nanobot.policies import POLICIES, get_policy
    from sessionkit.nanobot.session import Session
    from sessionkit.nanobot.settings import HistorySettings
    from sessionkit.nanobot.tokens import estimate_message_tokens
    from sessionkit.nanobot.writer import save_session
    from sessionkit.simulate.candidates import candidate
    from sessionkit.simulate.filecap import file_cap
    from sessionkit.simulate.states import message_states
    from sessionkit.simulate.windowing import windows
    from sessionkit.store.corpus import Corpus
    from sessionkit.store.counting import count_tokens
    from sessionkit.store.loading import load
    from sessionkit.views.explorer import explore
    from sessionkit.writers.checkup import doctor
    from sessionkit.writers.forking import fork, fork_many

_HOMES = {
    "Calibration": "sessionkit.accounting.calibration",
    "calibrate": "sessionkit.accounting.calibration",
    "candidate": "sessionkit.simulate.candidates",
    "continue_fork": "sessionkit.experiments.continuation",
    "cost": "sessionkit.accounting.pricing",
    "usage": "sessionkit.accounting.ledger",
    "POLICIES": "sessionkit.nanobot.policies",
    "Corpus": "sessionkit.store.corpus",
    "HistorySettings": "sessionkit.nanobot.settings",
    "ModelJudge": "sessionkit.experiments.judging",
    "Request": "sessionkit.calls.assembly",
    "Session": "sessionkit.nanobot.session",
    "count_tokens": "sessionkit.store.counting",
    "doctor": "sessionkit.writers.checkup",
    "estimate_message_tokens": "sessionkit.nanobot.tokens",
    "experiment": "sessionkit.experiments.experiment",
    "explore": "sessionkit.views.explorer",
    "file_cap": "sessionkit.simulate.filecap",
    "fork": "sessionkit.writers.forking",
    "fork_many": "sessionkit.writers.forking",
    "get_policy": "sessionkit.nanobot.policies",
    "load": "sessionkit.store.loading",
    "message_states": "sessionkit.simulate.states",
    "request": "sessionkit.calls.assembly",
    "requests": "sessionkit.calls.frame",
    "save_session": "sessionkit.nanobot.writer",
    "windows": "sessionkit.simulate.windowing",
}
"""Each public name and the module that defines it."""

__all__ = [
    "POLICIES",
    "Calibration",
    "Corpus",
    "HistorySettings",
    "ModelJudge",
    "Request",
    "Session",
    "calibrate",
    "candidate",
    "continue_fork",
    "cost",
    "count_tokens",
    "doctor",
    "estimate_message_tokens",
    "experiment",
    "explore",
    "file_cap",
    "fork",
    "fork_many",
    "get_policy",
    "load",
    "message_states",
    "request",
    "requests",
    "save_session",
    "usage",
    "windows",
]

_SUBMODULES = ("plot", "testing", "schema", "synthetic", "nanobot", "dask")

__version__ = importlib.metadata.version("sessionkit")


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES or importlib.util.find_spec(f"sessionkit.{name}") is not None:
        return importlib.import_module(f"sessionkit.{name}")
    raise AttributeError(f"module 'sessionkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, *_SUBMODULES])
