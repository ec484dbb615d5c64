"""Message timestamps as nanobot stores them: naive local times unless a release wrote an offset."""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

__all__ = ["local_moment"]


def local_moment(stamp: Any, zone: tzinfo | None) -> datetime | None:
    """A stored timestamp as an aware datetime, a naive one read as local time in ``zone``
    (None: this machine's, daylight saving included); None when it is no ISO timestamp."""
    if not isinstance(stamp, str):
        return None
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return moment.astimezone() if zone is None else moment.replace(tzinfo=zone)
    return moment
