"""Reading a whole store in the export's order and shape, and writing it back (import).

``iter_queued`` walks every consume queue (sorted by topic, then queue id) and yields each message
a consumer would get, with its unit's tags code and size; ``iter_log`` walks the commit log
itself. The JSON shape is rocketmq-vectors' ``expected.jsonl``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import IO, Any

from rocketstore.codec import record as rec
from rocketstore.codec.message import JAVA_INT, JAVA_LONG, StoredMessage, check_range, message_from_json
from rocketstore.codec.records import Records
from rocketstore.codec.scan import STOP_BLANK
from rocketstore.errors import InvalidMessageError, RecordError
from rocketstore.log.walk import walk_segment
from rocketstore.store import MessageStore


def iter_queued(
    store: MessageStore, topics: Iterable[str] | None = None
) -> Iterator[tuple[StoredMessage | None, int, int, int]]:
    """(message, queue offset, tags code, unit size) for every consume-queue unit, in export order.

    The message is None when the unit points at a record that cannot be read.
    """
    wanted = set(topics) if topics is not None else None
    get_data = store.commit_log.get_data
    for (topic, _queue_id), cq in sorted(store.queues.table.items()):
        if wanted is not None and topic not in wanted:
            continue
        start, end = cq.min_offset_in_queue(), cq.max_offset_in_queue()
        for first, units in cq.iter_units(start, end):
            for k, (phy, size, tags) in enumerate(units.tolist()):
                data = get_data(phy, size)
                msg = None
                if data is not None:
                    try:
                        msg = rec.decode(data)
                    except RecordError:
                        msg = None
                yield msg, first + k, tags, size


def iter_log(store: MessageStore) -> Iterator[StoredMessage]:
    """Every record of the commit log in log order (what ``mode=commitlog`` reads)."""
    commit_log = store.commit_log
    end = commit_log.max_offset()
    for mapped in commit_log.queue.files:
        if mapped.file_from_offset >= end:
            break
        found: list[Records] = []
        _stop, reason = walk_segment(mapped, 0, mapped.read_position, found.append, check_crc=False)
        for records in found:
            for message in commit_log.read_records(records.offsets.tolist(), records.sizes.tolist()):
                if message is not None:
                    yield message
        if reason != STOP_BLANK:
            break


def export_row(msg: StoredMessage, tags_code: int | None = None, unit_size: int | None = None) -> dict[str, Any]:
    row = msg.to_json_dict()
    if tags_code is not None:
        row["cqTagsCode"] = tags_code
        row["cqSize"] = unit_size
    return row


def dumps_row(row: dict[str, Any]) -> str:
    """One JSON line, compact and with non-ASCII kept, as expected.jsonl is written."""
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"))


def export_jsonl(store: MessageStore, out: IO[str], progress: Any = None) -> int:
    """Write every queued message as a JSON line; returns the number written."""
    count = 0
    for msg, _queue_offset, tags, size in iter_queued(store):
        if msg is None:
            continue
        out.write(dumps_row(export_row(msg, tags, size)))
        out.write("\n")
        count += 1
        if progress is not None:
            progress(msg.store_size)
    return count


# Export fields stored in fixed-width record fields: (name, (lowest, highest)); JSON allows any number.
_INT_FIELDS = (
    ("queueId", (0, JAVA_INT[1])),
    ("flag", JAVA_INT),
    ("sysFlag", JAVA_INT),
    ("bornTimestamp", JAVA_LONG),
    ("reconsumeTimes", JAVA_INT),
    ("preparedTransactionOffset", JAVA_LONG),
)


class ImportLineError(InvalidMessageError):
    """A line ``import_jsonl`` cannot store; the ``imported`` messages of the lines before it are stored."""

    def __init__(self, line: int, reason: str, imported: int) -> None:
        done = f"{imported} message(s) before it stored" if imported else "nothing stored"
        super().__init__(f"line {line}: {reason} (import stopped; {done})")
        self.line = line
        self.imported = imported


def _check_int_fields(obj: dict[str, Any]) -> None:
    """InvalidMessageError unless every integer field is an integer that fits its record field."""
    for name, bounds in _INT_FIELDS:
        value = obj.get(name)
        if value is None:
            continue
        try:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            number = int(value)
        except (ValueError, TypeError, OverflowError):
            raise InvalidMessageError(f"{name} must be an integer, not {value!r}") from None
        check_range(name, number, bounds, value)


def import_jsonl(store: MessageStore, lines: Iterable[str | bytes], progress: Any = None) -> int:
    """Put messages given as export JSON lines (text, or UTF-8 bytes), in order; returns the number
    stored. Stops at the first line that cannot be stored with ImportLineError: the lines before
    it stay stored."""
    count = 0
    for number, line in enumerate(lines, 1):
        size = len(line)
        try:
            text = line.decode("utf-8") if isinstance(line, bytes) else line
            if not text.strip():
                continue
            obj = json.loads(text)
            if not isinstance(obj, dict):
                raise InvalidMessageError("each line is a JSON object")
            _check_int_fields(obj)
            message = message_from_json(obj)
            queue_id = int(obj.get("queueId") or 0)
            result = store.put_as_is(message, queue_id)
        except UnicodeDecodeError as exc:
            raise ImportLineError(number, f"not UTF-8 ({exc})", count) from None
        except (ValueError, TypeError) as exc:  # InvalidMessageError and InvalidTopicError too
            raise ImportLineError(number, str(exc), count) from None
        except RecursionError:
            raise ImportLineError(number, "JSON nested too deeply", count) from None
        if not result.ok:
            raise ImportLineError(number, f"{result.status.value} {result.detail}", count)
        count += 1
        if progress is not None:
            progress(size)
    return count
