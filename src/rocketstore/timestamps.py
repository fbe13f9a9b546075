"""Store times given as text: epoch milliseconds or ISO-8601 (the Spark source's
``startingTimestamp`` and ``consume --from-time`` take the same forms)."""

from __future__ import annotations

import datetime

from rocketstore.codec.message import JAVA_LONG

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MILLISECOND = datetime.timedelta(milliseconds=1)


def epoch_millis(text: str) -> int:
    """Epoch milliseconds from ``text``: an integer, or ISO-8601 (UTC when it has no zone; a
    trailing ``Z`` or ``z`` is UTC, as RFC 3339 allows). A time within a millisecond counts from
    the next one, so that the store times at or after it are exactly the ones >= the result.
    ValueError names what was given."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        when = datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "Zz" else text)
    except ValueError:
        raise ValueError(f"{text!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return -((EPOCH - when) // _MILLISECOND)  # in integers: float seconds * 1000 can land 1 ms early


def store_time_millis(text: str) -> int:
    """``epoch_millis`` of a time a store time can be: from 1970 to the last a Java long holds
    (ValueError naming what was given otherwise)."""
    millis = epoch_millis(text)
    if millis < 0:
        raise ValueError(f"{text.strip()!r} is before 1970 (a store time is never negative)")
    if millis > JAVA_LONG[1]:
        raise ValueError(f"{text.strip()!r} is past the last store time a Java long holds")
    return millis
