"""Walking a segment's records in windows, handing dispatch requests to a callback."""

from __future__ import annotations

from collections.abc import Callable

from rocketstore.codec.records import Records
from rocketstore.codec.scan import STOP_END, STOP_LIMIT, scan_records
from rocketstore.files.mapped_file import MappedFile

WINDOW = 16 << 20


def walk_segment(
    mapped: MappedFile,
    start: int,
    end: int,
    on_records: Callable[[Records], None] | None,
    *,
    check_crc: bool,
    prop_crc: bool = False,
    delay_millis: tuple[int, ...] = (),
    window: int = WINDOW,
    strings: bool = False,
    progress: Callable[[int], None] | None = None,
    checked_only_before: int = -1,
) -> tuple[int, int]:
    """Scan ``[start, end)`` of a segment, handing ``Records`` of each window to ``on_records``
    (with the keys as strings too when ``strings``) and the bytes each window advanced to
    ``progress``; returns (stop position, reason) as ``scan_records`` does. The records of a window
    that ends at or before the commit-log offset ``checked_only_before`` are checked alone, their
    properties not parsed (a recovery checking records it does not dispatch).

    The segment is held while it is read, so cleanup cannot unmap it underneath.
    """
    if not mapped.hold():
        return start, STOP_LIMIT
    try:
        mm = mapped.mm
        pos = start
        while True:
            before = pos
            records, pos, reason = scan_records(
                mm,
                pos,
                end,
                mapped.file_from_offset,
                check_crc=check_crc,
                prop_crc=prop_crc,
                delay_millis=delay_millis,
                limit=min(end, pos + window),
                strings=strings,
                properties=mapped.file_from_offset + min(end, pos + window) > checked_only_before,
            )
            if len(records) and on_records is not None:
                on_records(records)
            if progress is not None:
                progress(pos - before)
            if reason != STOP_LIMIT:
                return pos, reason
            if pos >= end:
                return pos, STOP_END
    finally:
        mapped.release()
