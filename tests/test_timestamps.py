"""Store times given as text (rocketstore.timestamps): the Spark source's timestamps and consume --from-time."""

from __future__ import annotations

import pytest

from rocketstore.timestamps import epoch_millis


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1079337347472", 1079337347472),
        (" -1 ", -1),
        ("2004-03-15T07:55:47.472Z", 1079337347472),
        ("2004-03-15T07:55:47.472z", 1079337347472),  # RFC 3339 allows a lower-case z
        ("2004-03-15T07:55:47.472", 1079337347472),  # no zone: UTC
        ("2004-03-15T08:55:47.472+01:00", 1079337347472),
        ("2004-03-15T07:55:47.4721", 1079337347473),  # within a millisecond: from the next one
    ],
)
def test_epoch_millis(text: str, ms: int) -> None:
    assert epoch_millis(text) == ms


@pytest.mark.parametrize("text", ["yesterday", "2004-13-01", "", "12.5"])
def test_what_is_no_time_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match=f"{text!r} is neither epoch milliseconds nor an ISO-8601 time"):
        epoch_millis(text)
