"""An experiment's budget: calls and dollars reserved before each call is sent and settled
when it ends, so calls in flight never overrun it."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Budget"]


@dataclass
class Budget:
    """At most ``calls`` calls and ``usd`` dollars (None: no limit of that kind).  A call
    reserves one call and its worst-case cost; once it ends it costs what its reported
    usage prices at (its worst case when that is unknown), and nothing when the endpoint
    refused it (an HTTP error status or no connection)."""

    calls: int | None
    usd: float | None
    sent: int = 0
    spent: float = 0.0

    def reserve(self, worst_usd: float) -> bool:
        """Reserve one call of worst-case cost ``worst_usd``; False when it does not fit."""
        if self.calls is not None and self.sent >= self.calls:
            return False
        if self.usd is not None and not self.spent + worst_usd <= self.usd:  # NaN never fits
            return False
        self.sent += 1
        self.spent += 0.0 if self.usd is None else worst_usd
        return True

    def settle(self, worst_usd: float, cost_usd: float, refused: bool) -> None:
        """End a reserved call: refused (nothing owed), or costing ``cost_usd`` (NaN:
        unknown, the reservation stands)."""
        if refused:
            self.sent -= 1
            self.spent -= 0.0 if self.usd is None else worst_usd
        elif self.usd is not None and not math.isnan(cost_usd):
            self.spent += cost_usd - worst_usd
