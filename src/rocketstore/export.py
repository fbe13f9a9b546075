"""Reading a whole store in the export's order and shape, and writing it back (import).

``iter_queued`` walks every consume queue (sorted by topic, then queue id) and yields each message
a consumer would get, with its unit's tags code and size; ``iter_log`` walks the commit log
itself. The JSON shape is rocketmq-vectors' ``expected.jsonl``.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import sys
from collections import Counter
from collections.abc import Container, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import IO, Any, NamedTuple

from rocketstore.codec import record as rec
from rocketstore.codec.crc import body_crc
from rocketstore.codec.message import Message, StoredMessage
from rocketstore.codec.message_json import JSON_FIELDS, check_int_fields, message_from_json
from rocketstore.codec.multi_dispatch import is_lmq
from rocketstore.codec.properties import UNIQ_KEY
from rocketstore.codec.records import Records
from rocketstore.codec.scan import STOP_BLANK, STOP_LIMIT
from rocketstore.codec.sysflag import goes_to_consume_queue
from rocketstore.codec.topic import SCHEDULE_TOPIC
from rocketstore.errors import ImportLineError, InvalidMessageError, RecordError
from rocketstore.log.walk import walk_segment
from rocketstore.services.schedule import redelivered
from rocketstore.store import MessageStore

log = logging.getLogger(__name__)


class QueuedUnit(NamedTuple):
    """One consume-queue unit and the message it points at (None when that cannot be read, and
    ``reason`` says why)."""

    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    size: int
    tags_code: int
    message: StoredMessage | None
    reason: str | None = None


def exported_queue(topic: str, wanted: Container[str] | None) -> bool:
    """Whether an export of the topics ``wanted`` (None: all) reads the queues of ``topic``: all
    topics leave out light message queues (%LMQ%...), which hold copies of their own topics'
    messages (see ``codec.multi_dispatch``); named, they are read."""
    return not is_lmq(topic) if wanted is None else topic in wanted


def iter_units(store: MessageStore, topics: Iterable[str] | None = None) -> Iterator[QueuedUnit]:
    """Every consume-queue unit of ``topics`` (all but light message queues for None) in export
    order, with its message."""
    wanted = set(topics) if topics is not None else None
    for (topic, queue_id), cq in sorted(store.queues.table.items()):
        if exported_queue(topic, wanted):
            yield from queue_units(store, topic, queue_id, cq.min_offset_in_queue(), cq.max_offset_in_queue())


def queue_units(store: MessageStore, topic: str, queue_id: int, start: int, end: int) -> Iterator[QueuedUnit]:
    """The units of one queue from queue offset ``start`` up to ``end``, with their messages."""
    cq = store.queues.find(topic, queue_id)
    if cq is None:
        return
    get_data = store.commit_log.get_data
    for first, units in cq.iter_units(start, end):
        for k, (phy, size, tags) in enumerate(units.tolist()):
            data = get_data(phy, size)
            msg, reason = None, None
            if data is None:
                reason = "the commit log does not hold it (past its end, or in a missing segment)"
            else:
                try:
                    msg = rec.decode(data)
                except RecordError as exc:
                    reason = str(exc) or type(exc).__name__
            yield QueuedUnit(topic, queue_id, first + k, phy, size, tags, msg, reason)


def iter_queued(
    store: MessageStore, topics: Iterable[str] | None = None
) -> Iterator[tuple[StoredMessage | None, int, int, int]]:
    """(message, queue offset, tags code, unit size) for every consume-queue unit, in export order.

    The message is None when the unit points at a record that cannot be read (:func:`iter_units`
    says why).
    """
    for unit in iter_units(store, topics):
        yield unit.message, unit.queue_offset, unit.tags_code, unit.size


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
        if reason == STOP_LIMIT:  # deleted by cleanup before it could be read: on to the next
            continue
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
    """Write every queued message as a JSON line; returns the number written. A unit whose
    message cannot be read is left out with a warning on this module's logger (where it is and
    why), as ``rocketstore export`` warns about it."""
    count = 0
    for unit in iter_units(store):
        msg = unit.message
        if msg is None:
            log.warning(
                "export: %s/%d queue offset %d (commit-log offset %d) left out: %s",
                unit.topic,
                unit.queue_id,
                unit.queue_offset,
                unit.commit_log_offset,
                unit.reason,
            )
            continue
        out.write(dumps_row(export_row(msg, unit.tags_code, unit.size)))
        out.write("\n")
        count += 1
        if progress is not None:
            progress(msg.store_size)
    return count


class ImportInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``import_jsonl``: the ``imported`` messages of the lines before ``line`` are
    stored, and nothing of ``line`` or after it."""

    def __init__(self, line: int, imported: int) -> None:
        super().__init__(f"interrupted at line {line} ({imported} message(s) before it stored)")
        self.line = line
        self.imported = imported


_FIELDS = frozenset((*JSON_FIELDS, "cqTagsCode", "cqSize"))


def _warn_unknown_fields(obj: dict[str, Any], warned: set[str], line: int) -> None:
    """Warn, once per name, about a field the export does not write (``bornhost`` for
    ``bornHost``): it is ignored, and the message stored without what it meant to say."""
    for name in obj.keys() - _FIELDS - warned:
        warned.add(name)
        close = difflib.get_close_matches(name, _FIELDS, n=1, cutoff=0.7)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        log.warning("import: line %d: field %r is not one of the export's: ignored%s", line, name, hint)


def import_jsonl(
    store: MessageStore,
    lines: Iterable[str | bytes],
    progress: Any = None,
    *,
    guard: AbstractContextManager[Any] = contextlib.nullcontext(),
) -> int:
    """Put messages given as export JSON lines (text, or UTF-8 bytes), in order; returns the number
    stored. Stops at the first line that cannot be stored with ImportLineError: the lines before
    it stay stored. A KeyboardInterrupt becomes ImportInterrupted, naming the first line not
    stored; ``guard`` (re-entered for every line) is held while a message is stored and counted,
    so that a caller's SIGINT handler can defer the interrupt past it (the CLI's DeferInterrupts).

    Delayed messages: a ``SCHEDULE_TOPIC_XXXX`` line is stored as a unit waiting for delivery,
    and the message it was delivered as, if it was, is a line of its real topic with the same
    ``UNIQ_KEY`` (or, without one, the same born timestamp and body), queued as the unit was (a
    transaction's PREPARED or ROLLBACK record is no copy). Once the lines are stored
    (or the import stops), each delay level's offset in ``delayOffset.json`` moves past the units
    at its start whose delivered copy this import stored, or the store held (an import given in
    parts, the units after their copies), one copy for one unit, as twins of one message each get
    their own delivery (:func:`skip_delivered`), so the next
    writer of the store does not deliver them again. Open the store inside
    :func:`rocketstore.services.wiring.no_delayed_delivery` (as ``rocketstore import`` does): a
    schedule service running during the import would deliver units whose copies are still to come.
    ``rocketstore import`` opens it inside :func:`rocketstore.services.wiring.no_cleanup` too: on a
    filling disk, cleanup would delete what the import has stored, and the count would not be what
    the store holds.
    """
    count = 0
    resume = 1  # the first line not stored (nor blank)
    read_all = False
    copies: Counter[int] = Counter()  # delivered_copy_key of every line that may be a copy: how many
    warned: set[str] = set()  # unknown fields already warned about
    try:
        for number, line in enumerate(lines, 1):
            size = len(line)
            try:
                text = line.decode("utf-8") if isinstance(line, bytes) else line
                if number == 1 and text.startswith("\ufeff"):  # a UTF-8 BOM an editor wrote: not data
                    text = text[1:]
                if not text.strip():
                    resume = number + 1
                    continue
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError:
                    raise
                except ValueError:  # the one other: an integer of more digits than Python converts
                    limit = sys.get_int_max_str_digits()
                    raise InvalidMessageError(f"a number of more than {limit} digits: no field takes one") from None
                if not isinstance(obj, dict):
                    raise InvalidMessageError("each line is a JSON object")
                if set(obj) == {"error"} and isinstance(error := obj["error"], dict):  # `export --json > F`
                    what = f"{error.get('type')}: {error.get('message')}"
                    raise InvalidMessageError(
                        f"the error object a command run with --json writes last, not a message ({what})"
                    )
                if set(obj) == {"offsetsMoved"}:  # the last line of `consume --json`: no message
                    log.warning("import: line %d: consume's offsetsMoved line, not a message: skipped", number)
                    resume = number + 1
                    continue
                if obj.get("body") is None:  # export writes one on every line ("" for an empty body)
                    raise InvalidMessageError('no body field (an empty body is "body": "")')
                check_int_fields(obj)
                _warn_unknown_fields(obj, warned, number)
                message = message_from_json(obj)
                queue_id = int(obj.get("queueId") or 0)
                with guard:
                    result = store.put_as_is(message, queue_id)
                    if result.ok:
                        count += 1
                        resume = number + 1
            except UnicodeDecodeError as exc:
                raise ImportLineError(number, f"not UTF-8 ({exc})", count) from None
            except (ValueError, TypeError) as exc:  # InvalidMessageError and InvalidTopicError too
                raise ImportLineError(number, str(exc), count) from None
            except RecursionError:
                raise ImportLineError(number, "JSON nested too deeply", count) from None
            if not result.ok:
                raise ImportLineError(number, result.refusal, count)
            if (key := delivered_copy_key(message)) is not None:
                copies[key] += 1
            if progress is not None:
                progress(size)
        read_all = True
        if count:  # the copies brought, or (units given without them) those an earlier part stored
            skip_delivered(store, copies)
    except BaseException as exc:
        if count and not read_all:  # what was stored stays stored: so do its delivered units
            try:
                skip_delivered(store, copies)
            except Exception as error:
                log.warning("import stopped: the delay offsets could not be moved past delivered units: %s", error)
        if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, ImportInterrupted):
            raise ImportInterrupted(resume, count) from None
        raise
    return count


def copy_key(topic: str, uniq_key: str | None, message: Message | StoredMessage) -> int:
    """A delivered copy's identity, kept small (an import may hold millions): its topic, UNIQ_KEY
    and reconsumeTimes, which delivery keeps (the retries of one message share its UNIQ_KEY and
    differ in reconsumeTimes); for a message without a UNIQ_KEY (a client that sets none), its
    topic, reconsumeTimes, born timestamp and body CRC, which delivery keeps too."""
    if uniq_key is not None:
        return hash((topic, uniq_key, message.reconsume_times))
    crc = message.body_crc if isinstance(message, StoredMessage) else body_crc(message.body)
    return hash((topic, None, message.reconsume_times, message.born_timestamp, crc))


def skip_delivered(store: MessageStore, copies: Iterable[int]) -> dict[int, tuple[int, int]]:
    """Move each delay level's offset past the units at its start that were delivered.

    Each delivered copy (real topic and UNIQ_KEY, :func:`copy_key`) accounts for one unit: those
    of ``copies`` (a Counter gives how many of each key; each key of a set counts once) or, once
    they are used up, those the store holds (an earlier run of an import resumed or split in parts)
    less the units with that key before the levels' offsets. A unit for which delivery would store
    nothing (a half message, no usable real topic or queue) is delivered too. Delivery goes in queue order, so a
    level's walk stops at the first unit with no copy left; an offset never moves back. The
    offsets are persisted; returns ``{level: (old, new)}`` for those that moved."""
    store.wait_for_dispatch()
    offsets = store.delay_offsets
    olds = {level: offsets.get(level) for level in range(1, len(store.delay_millis) + 1)}
    pool = _CopyPool(store, Counter(copies), olds)
    moved: dict[int, tuple[int, int]] = {}
    for level, old in olds.items():
        new = _delivered_end(store, level, old, pool)
        if new > old:
            offsets.set(level, new)
            moved[level] = (old, new)
    if moved:
        offsets.persist()
    return moved


def _delivered_end(store: MessageStore, level: int, old: int, pool: _CopyPool) -> int:
    """The offset past the delivered units of ``level`` from ``old`` on (``old`` if it has no queue)."""
    cq = store.queues.find(SCHEDULE_TOPIC, level - 1)
    if cq is None:
        return old
    new = max(old, cq.min_offset_in_queue())
    for offset, unit in _level_units(store, level, new, cq.max_offset_in_queue()):
        if unit is None or not pool.take(unit):
            break
        new = offset + 1
    return new


def _level_units(store: MessageStore, level: int, start: int, end: int) -> Iterator[tuple[int, StoredMessage | None]]:
    """(queue offset, record or None) of the units of ``level``'s schedule queue in [start, end)."""
    cq = store.queues.find(SCHEDULE_TOPIC, level - 1)
    if cq is None:
        return
    for first, units in cq.iter_units(start, end, chunk=1024):
        for k, (phy, size, _deliver) in enumerate(units.tolist()):
            yield first + k, store.look_message_by_offset(phy, size)


def _unit_key(unit: StoredMessage) -> tuple[str, str | None, int] | None:
    """(real topic, UNIQ_KEY, copy key) of a schedule unit; None when delivery stores nothing (the
    schedule service's own rule: a half message, no usable real topic or queue)."""
    target = redelivered(unit, quiet=True)  # the schedule service says so when it meets it
    if target is None:
        return None
    topic, uniq = target[0].topic, unit.properties.get(UNIQ_KEY)
    return topic, uniq, copy_key(topic, uniq, unit)


def delivered_copy_key(message: Message | StoredMessage) -> int | None:
    """``copy_key`` of ``message`` if it may be the delivered copy of a schedule unit: a record of
    a real topic, queued as the unit was (a transaction's PREPARED or ROLLBACK record is not)."""
    if message.topic == SCHEDULE_TOPIC or not goes_to_consume_queue(message.sys_flag):
        return None
    return copy_key(message.topic, message.properties.get(UNIQ_KEY), message)


class _CopyPool:
    """The delivered copies the walks of :func:`skip_delivered` use up, one a unit: the caller's,
    then (once a key's are used up) the store's less the units before the levels' offsets."""

    def __init__(self, store: MessageStore, brought: Counter[int], olds: dict[int, int]) -> None:
        self.store = store
        self.brought = brought
        self.left = Counter(brought)
        self.olds = olds
        self.stored = _StoredCopies(store)
        self.checked: set[int] = set()
        self._before: Counter[int] | None = None

    def take(self, unit: StoredMessage) -> bool:
        """Whether ``unit`` was delivered, using up its copy if it was."""
        found = _unit_key(unit)
        if found is None:
            return True
        topic, uniq, key = found
        if self.left[key] <= 0 and key not in self.checked:
            self.checked.add(key)
            extra = self.stored.count(topic, uniq, key) - self.brought[key]
            if extra > 0:  # the store holds more: less those of the units already delivered
                self.left[key] = max(0, extra - self.before()[key])
        if self.left[key] <= 0:
            return False
        self.left[key] -= 1
        return True

    def before(self) -> Counter[int]:
        """Copy keys of the units before each level's offset (read once)."""
        if self._before is None:
            self._before = Counter()
            for level, old in self.olds.items():
                for _offset, unit in _level_units(self.store, level, 0, old):
                    found = _unit_key(unit) if unit is not None else None
                    if found is not None:
                        self._before[found[2]] += 1
        return self._before


class _StoredCopies:
    """Delivered copies the store holds already: by UNIQ_KEY through the index, else (no UNIQ_KEY,
    or messageIndexEnable=false) among the copy keys of the topic's messages, read once a topic."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._scanned: dict[str, Counter[int]] = {}

    def count(self, topic: str, uniq: str | None, key: int) -> int:
        """How many messages of ``topic`` have the copy key ``key`` (:func:`copy_key`)."""
        if uniq is not None and self.store.config.message_index_enable:
            cap = self.store.config.max_msgs_num_batch
            found = self.store.query_message(topic, uniq, max_num=cap)
            if found.index_hits < cap:  # all the index holds; at the cap it may hold more: scan
                return sum(delivered_copy_key(m) == key for m in found.messages)
        keys = self._scanned.get(topic)
        if keys is None:
            queued = iter_queued(self.store, [topic])
            keys = self._scanned[topic] = Counter(copy_key(topic, m.uniq_key, m) for m, *_ in queued if m is not None)
        return keys[key]
