"""Stored message timestamps read as aware times, as the usage log and the governor need them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from sessionkit.nanobot.timestamps import local_moment

PLUS_2 = timezone(timedelta(hours=2))


@pytest.mark.parametrize(
    ("stamp", "zone", "expected"),
    [
        ("2026-03-01T10:00:00", PLUS_2, datetime(2026, 3, 1, 8, tzinfo=UTC)),
        ("2026-03-01T10:00:00+00:00", PLUS_2, datetime(2026, 3, 1, 10, tzinfo=UTC)),
        ("2026-03-01T10:00:00.250000", UTC, datetime(2026, 3, 1, 10, 0, 0, 250000, tzinfo=UTC)),
        ("yesterday", UTC, None),
        ("", UTC, None),
        (None, UTC, None),
        (1767261600, UTC, None),
    ],
)
def test_naive_stamps_are_read_in_the_zone_given(
    stamp: object, zone: timezone, expected: datetime | None
) -> None:
    assert local_moment(stamp, zone) == expected


def test_without_a_zone_a_naive_stamp_is_this_machines_local_time() -> None:
    moment = local_moment("2026-07-01T12:00:00", None)
    assert moment == datetime(2026, 7, 1, 12).astimezone()
    assert (
        moment is not None
        and moment.utcoffset() == datetime(2026, 7, 1, 12).astimezone().utcoffset()
    )
