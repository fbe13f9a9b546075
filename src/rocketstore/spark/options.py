"""The source's own options, parsed once on the driver into plain, picklable values.

``topics``: comma-separated names; an entry with characters a topic cannot have (``.*?[]()^$+{}\\``)
is a regular expression matched against whole topic names (commas inside its ``()``, ``[]`` or
``{}`` do not separate entries: ``Topic[AB]{1,2}`` is one). ``topics`` that match no topic of the
store refuse a batch read of the consume queues (as ``rocketstore spark export --topics`` does);
a stream or a commit-log read warns. ``queues``: ``0,2`` for every topic or JSON
``{"TopicA":[0,1]}``; a queue the store does not have among the topics read (``{"TopicTst":[1]}``,
or an id of ``0,9`` that none of them has) is refused in the same way: a batch read of the
consume queues fails with InvalidArgumentError naming it and the queues the store has, a stream
or a commit-log read warns (a stream reads the queue once it is created; the log may still hold a
deleted queue's records). Offsets are Kafka's: ``earliest``/``latest`` or JSON
``{"TopicA":{"0":23,"1":-1}}`` with -2 = earliest and -1 = latest; ending offsets are exclusive. A
batch read refuses a starting offset of latest (it would read nothing), and JSON naming a queue the
read does not cover (a typo'd topic). JSON offsets must also name every queue the read covers
that the store has (Kafka's "you must specify all TopicPartitions"): a batch read and a new stream
refuse JSON that leaves one out (``plan.unlisted_queues``). A starting offset after the ending
offset given for the same queue is an error; a starting offset past a queue's end reads nothing
from it (a stream reads the queue from that offset once the queue gets there).
``maxPartitionBytes``, ``minPartitions``, ``maxRecordsPerBatch`` and ``maxOffsetsPerTrigger`` are
positive integers. Timestamps are epoch
milliseconds of the store time, or ISO-8601 text (UTC unless it names a zone; a fraction of a
millisecond counts from the next one).

Precedence, as in Kafka's source (whose ``getKafkaOffsetRangeLimit`` takes ``startingTimestamp``
before ``startingOffsetsByTimestamp`` before ``startingOffsets``, and refuses none of them given
together): ``startingTimestamp`` wins over ``startingOffsets`` and ``endingTimestamp`` over
``endingOffsets``; the offsets given with them are not read (nor checked, as Kafka's
``validateBatchOptions`` does not), and a warning says they are not used. Option keys compare
case-insensitively (Spark lower-cases them); a key that is neither an option above nor a store
setting is ignored with a warning (``schema.warn_unknown_options``).
An option refused raises InvalidArgumentError; a bad store setting, or a ``config`` file that
cannot be read, ConfigError (``schema.store_config``): both are RocketStoreErrors and ValueErrors.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rocketstore.codec.ids import java_hash
from rocketstore.codec.message import JAVA_INT, JAVA_LONG
from rocketstore.codec.multi_dispatch import is_lmq
from rocketstore.config import StoreConfig
from rocketstore.errors import InvalidArgumentError, shown
from rocketstore.reader import subscription_tags
from rocketstore.spark.schema import COLUMN_NAMES, flag_option, int_option, option, store_config, store_path
from rocketstore.timestamps import store_time_millis

log = logging.getLogger(__name__)
EARLIEST, LATEST = -2, -1
MODES = ("consumequeue", "commitlog")
_TOPIC_CHARS = re.compile(r"[%|a-zA-Z0-9_-]+")
DEFAULT_PARTITION_BYTES = 128 << 20
DEFAULT_BATCH_ROWS = 32768

Offsets = str | dict[str, dict[int, int]]  # "earliest" / "latest" or topic -> queue id -> offset


@dataclass
class Selection:
    """Which topics and queues to read."""

    names: frozenset[str] | None = None
    patterns: tuple[re.Pattern[str], ...] = ()
    queues: frozenset[int] | None = None
    queues_by_topic: dict[str, frozenset[int]] | None = None

    def topic_ok(self, topic: str) -> bool:
        """Whether ``topic`` is read: all topics but light message queues (%LMQ%..., copies of
        other topics' messages) when neither names nor patterns are given, as ``export`` reads."""
        if self.names is None and not self.patterns:
            return not is_lmq(topic)
        return (self.names is not None and topic in self.names) or any(p.fullmatch(topic) for p in self.patterns)

    def queue_ok(self, topic: str, queue_id: int) -> bool:
        if self.queues is not None and queue_id not in self.queues:
            return False
        if self.queues_by_topic is not None:
            wanted = self.queues_by_topic.get(topic)
            return wanted is not None and queue_id in wanted
        return True

    def narrowed(self, topics: frozenset[str] | None, queues: frozenset[int] | None) -> Selection:
        """This selection further limited by pushed-down filters."""
        names = self.names
        if topics is not None:
            names = frozenset(t for t in topics if self.topic_ok(t))
        qs = self.queues
        if queues is not None:
            qs = queues if qs is None else qs & queues
        return Selection(names, () if topics is not None else self.patterns, qs, self.queues_by_topic)


@dataclass
class ReadOptions:
    path: str
    config: StoreConfig
    mode: str = "consumequeue"
    selection: Selection = field(default_factory=Selection)
    starting: Offsets = "earliest"
    ending: Offsets = "latest"
    starting_ts: int | None = None
    ending_ts: int | None = None
    tags: frozenset[str] | None = None
    partition_bytes: int = DEFAULT_PARTITION_BYTES
    min_partitions: int = 1
    fail_on_data_loss: bool = True
    batch_rows: int = DEFAULT_BATCH_ROWS
    max_offsets_per_trigger: int | None = None
    columns: list[str] = field(default_factory=lambda: list(COLUMN_NAMES))

    @property
    def tag_codes(self) -> frozenset[int] | None:
        return None if self.tags is None else frozenset(java_hash(t) for t in self.tags)


def split_topics(text: str) -> list[str]:
    """``text`` cut at its commas outside ``()``, ``{}`` and ``[]`` (and not escaped)."""
    items, depth, in_class, escaped, start = [], 0, False, False, 0
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch in "({":
            depth += 1
        elif ch in ")}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return items


def parse_topics(text: str | None) -> tuple[frozenset[str] | None, tuple[re.Pattern[str], ...]]:
    if text is None or not text.strip():
        return None, ()
    names: set[str] = set()
    patterns = []
    for item in (t.strip() for t in split_topics(text)):
        if not item:
            continue
        if _TOPIC_CHARS.fullmatch(item):
            names.add(item)
        else:
            try:
                patterns.append(re.compile(item))
            except re.error as exc:
                raise InvalidArgumentError(
                    f"option topics: {item!r} is neither a topic name nor a pattern ({exc})"
                ) from None
    return frozenset(names), tuple(patterns)


def parse_queues(text: str | None) -> tuple[frozenset[int] | None, dict[str, frozenset[int]] | None]:
    if text is None or not text.strip():
        return None, None
    text = text.strip()
    if text.startswith("{"):
        obj = _json(text, "queues")
        out = {}
        for topic, ids in obj.items():
            if not isinstance(ids, list):
                raise InvalidArgumentError(f"option queues: {topic} must map to a list of queue ids")
            out[str(topic)] = _queue_ids(ids)
        return None, out
    return _queue_ids(q for q in text.split(",") if q.strip()), None


def _whole(value: object) -> int | None:
    """A JSON integer or the text of one; None for anything else (5.9, true, "x")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value.strip())
    return None


def _queue_ids(values: Iterable[object]) -> frozenset[int]:
    ids = set()
    for value in values:
        queue_id = _whole(value)
        if queue_id is None or queue_id < 0:
            raise InvalidArgumentError(f"option queues: {json.dumps(value)} is not a queue id (an integer from 0)")
        ids.add(queue_id)
    return frozenset(ids)


def parse_offsets(
    text: str | None, name: str, default: str, *, ending: bool = False, batch_start: bool = False
) -> Offsets:
    """``earliest``/``latest`` or per-queue JSON offsets. An ending offset is never earliest (-2),
    and a batch read's starting offset never latest (-1), as Kafka's source refuses them."""
    if text is None or not text.strip():
        return default
    text = text.strip()
    allowed = "latest" if ending else "earliest" if batch_start else "earliest, latest"
    example = '{"TopicA":{"0":23,"1":-1}}' if ending else '{"TopicA":{"0":23,"1":-2}}'
    if text.lower() in ("earliest", "latest"):
        if ending and text.lower() == "earliest":
            raise InvalidArgumentError(
                f"option {name}: earliest is not an ending offset (give {allowed} or JSON {example})"
            )
        if batch_start and text.lower() == "latest":
            raise InvalidArgumentError(
                f"option {name}: latest is not allowed for a batch read, which would read nothing (give "
                f"{allowed}, JSON {example} or startingTimestamp)"
            )
        return text.lower()
    if not text.startswith("{"):
        raise InvalidArgumentError(
            f"option {name} must be {allowed} or a JSON object like {example}, not {shown(text)}"
        )
    obj = _json(text, name)
    out: dict[str, dict[int, int]] = {}
    for topic, queues in obj.items():
        if not isinstance(queues, dict):
            raise InvalidArgumentError(f'option {name}: {topic} must map to {{"queueId": offset}}')
        per = {}
        for qid, off in queues.items():
            queue_id, offset = _whole(qid), _whole(off)
            if queue_id is None or not 0 <= queue_id <= JAVA_INT[1]:
                raise InvalidArgumentError(
                    f"option {name}: {topic}/{qid}: {qid!r} is not a queue id (an integer from 0, a Java int)"
                )
            if offset is None:
                raise InvalidArgumentError(
                    f"option {name}: {topic}/{qid}: {json.dumps(off)} is not an offset (an integer)"
                )
            if offset < EARLIEST or offset > JAVA_LONG[1] or (ending and offset == EARLIEST):
                raise InvalidArgumentError(f"option {name}: {topic}/{qid}: {off} is not a valid offset")
            if batch_start and offset == LATEST:
                raise InvalidArgumentError(
                    f"option {name}: {topic}/{qid}: -1 (latest) is not allowed for a batch read, which would "
                    "read nothing of that queue"
                )
            per[queue_id] = offset
        out[str(topic)] = per
    return out


def parse_timestamp(text: str | None, name: str) -> int | None:
    """Epoch milliseconds, or ISO-8601 text (UTC when it has no zone), of a time a store time can
    be (1970 to Long.MAX_VALUE); None when not given."""
    if text is None or not str(text).strip():
        return None
    try:
        return store_time_millis(str(text))
    except ValueError as exc:
        raise InvalidArgumentError(f"option {name}: {exc}") from None


def _check_order(starting: Offsets, ending: Offsets) -> None:
    """A starting offset after the ending offset given for the same queue is an error."""
    if not isinstance(starting, dict) or not isinstance(ending, dict):
        return
    for topic, per in starting.items():
        for queue_id, start in per.items():
            end = ending.get(topic, {}).get(queue_id)
            if end is not None and start > end >= 0:
                raise InvalidArgumentError(
                    f"option startingOffsets: {topic}/{queue_id} starts at {start}, after its ending offset {end}"
                )


def _positive(options: Mapping[str, str], name: str) -> int | None:
    """An option that is a positive integer; None when it is not given."""
    value = int_option(options, name, None)
    if value is not None and value <= 0:
        raise InvalidArgumentError(f"option {name} must be a positive integer, not {option(options, name)!r}")
    return value


def _json(text: str, name: str) -> dict:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise InvalidArgumentError(f"option {name}: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise InvalidArgumentError(f"option {name}: expected a JSON object")
    return obj


def parse_options(options: Mapping[str, str], *, streaming: bool = False) -> ReadOptions:
    """Every option of a read (batch or stream), checked."""
    mode = (option(options, "mode", "consumequeue") or "consumequeue").strip().lower()
    if mode not in MODES:
        raise InvalidArgumentError(f"option mode must be consumequeue or commitlog, not {shown(mode)}")
    names, patterns = parse_topics(option(options, "topics") or option(options, "topic"))
    queues, by_topic = parse_queues(option(options, "queues"))
    tags_text = option(options, "tags")
    tags = subscription_tags(tags_text)  # as a pull's subscription: FilterAPI's rules
    starting_text, ending_text = option(options, "startingOffsets"), option(options, "endingOffsets")
    overridden = []  # offsets a timestamp given with them overrides: not read (nor checked)
    if (option(options, "startingTimestamp") or "").strip():
        overridden += [("startingOffsets", "startingTimestamp")] if (starting_text or "").strip() else []
        starting_text = None
    if (option(options, "endingTimestamp") or "").strip():
        overridden += [("endingOffsets", "endingTimestamp")] if (ending_text or "").strip() else []
        ending_text = None
    starting = parse_offsets(
        starting_text, "startingOffsets", "latest" if streaming else "earliest", batch_start=not streaming
    )
    ending = parse_offsets(ending_text, "endingOffsets", "latest", ending=True)
    _check_order(starting, ending)
    for name in ("endingOffsets", "endingTimestamp"):
        if streaming and option(options, name) is not None:
            raise InvalidArgumentError(f"option {name} is for batch reads only: a stream reads on as messages arrive")
    if mode == "commitlog" and streaming:  # first: a stream's default start (latest) is an offset
        raise InvalidArgumentError("streaming reads use mode=consumequeue")
    if mode == "commitlog" and (starting != "earliest" or ending != "latest"):
        raise InvalidArgumentError(
            "startingOffsets/endingOffsets need mode=consumequeue: commitlog mode reads the whole log "
            "(narrow it with startingTimestamp/endingTimestamp, topics and queues)"
        )
    for off_name, ts_name in overridden:
        log.warning("option %s is not used: %s takes precedence (as in Kafka's source)", off_name, ts_name)
    opts = ReadOptions(
        path=store_path(options),
        config=store_config(options),
        mode=mode,
        selection=Selection(names, patterns, queues, by_topic),
        starting=starting,
        ending=ending,
        starting_ts=parse_timestamp(option(options, "startingTimestamp"), "startingTimestamp"),
        ending_ts=parse_timestamp(option(options, "endingTimestamp"), "endingTimestamp"),
        tags=tags,
        partition_bytes=_positive(options, "maxPartitionBytes") or DEFAULT_PARTITION_BYTES,
        min_partitions=_positive(options, "minPartitions") or 1,
        fail_on_data_loss=flag_option(options, "failOnDataLoss", True),
        batch_rows=_positive(options, "maxRecordsPerBatch") or DEFAULT_BATCH_ROWS,
        max_offsets_per_trigger=_positive(options, "maxOffsetsPerTrigger"),
    )
    return opts
