"""What a release's per-call clean-up makes of each stored message, as per-message forms a
whole-store frame can add up with prefix sums instead of cleaning every request: the type a
release object's ``call_forms`` returns (0.2.2's model is :mod:`call_forms_022`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sessionkit.nanobot.history import Message

__all__ = ["CallForms", "Form"]

Form = list[Message]
"""The messages one stored message becomes in a request (itself, then any backfilled
results that follow its tool block)."""


@dataclass(frozen=True)
class CallForms:
    """Per stored message that the clean-up can change: its history and step forms.

    ``changed[i]`` is ``(weight, history, history_compacted, step, step_compacted)`` for
    message ``i``: how many results of compactable tools it puts in a request (itself and
    the backfilled results after it), its plain forms as a history entry and as a step of
    the running turn (``None``: sent as replayed / as stored), and their compacted forms
    (``None``: never compacted).  Messages not listed are sent as they are and count for
    nothing.
    """

    changed: dict[int, tuple[int, Form | None, Form | None, Form | None, Form | None]]
    keep: int
    """How many of the newest compactable results every request keeps whole."""
    budget: int | None
    """The context budget over which the release trims the request itself (None: never)."""
    regular: bool
    """False when a result's call id is answered outside its own tool block (backfilling
    then depends on which other messages the request holds)."""
