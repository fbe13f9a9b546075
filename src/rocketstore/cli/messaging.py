"""``rocketstore produce`` and ``rocketstore consume``."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
from collections.abc import Iterator
from typing import IO

import click
from rich.table import Table

from rocketstore.cli.common import (
    CommandError,
    Common,
    ProblemsFound,
    UnreadableUnits,
    known_topics,
    open_store,
    open_store_checked,
    require_topics,
    store_options,
    topic_names,
    with_notes,
)
from rocketstore.cli.output import cell, out_console, print_messages, progress_bar, say, warn
from rocketstore.cli.stops import (
    DeferStops,
    done_storing,
    shut_down_whole,
    stopped_by,
)
from rocketstore.codec.message import JAVA_INT, JAVA_LONG, Message, StoredMessage
from rocketstore.codec.properties import DELAY, PROPERTY_CRC32
from rocketstore.codec.topic import SCHEDULE_TOPIC, send_refusal, validate_group
from rocketstore.config_values import java_trim
from rocketstore.export import QueuedUnit, queue_units
from rocketstore.prepare import MessagePreparer
from rocketstore.results import GetMessageStatus, GetResult, PutMessageStatus, PutResult
from rocketstore.store import MessageStore
from rocketstore.timestamps import store_time_millis

_SHOWN_RESULTS = 20
_PULL_BATCH = 32
_END = frozenset(
    {
        GetMessageStatus.NO_MESSAGE_IN_QUEUE,
        GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
        GetMessageStatus.OFFSET_OVERFLOW_ONE,
    }
)


# MessageConst.STRING_HASH_SET of RocketMQ 4.9: names the client's putUserProperty refuses ("The
# Property<%s> is used by system"); the client sets them itself (import takes them as stored).
# And 5's __CRC32#: a store appends it (enabledAppendPropCRC) and import drops it as the source's
_SYSTEM_PROPERTIES = frozenset(
    {
        *("TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID"),
        *("TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG"),
        *("CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME"),
        *("INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER"),
        *("MSG_TYPE", PROPERTY_CRC32),
    }
)
_OPTION_FOR = {"TAGS": "--tags", "KEYS": "--keys", "DELAY": "--delay-level"}


def _properties(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    """--property NAME=VALUE items, refused as RocketMQ's client refuses a user property: a name
    it sets itself, a blank name or value."""
    out = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE")
        if not java_trim(name) or not java_trim(value):  # String.trim().isEmpty(), as the client asks
            raise click.BadParameter(f"{item!r}: the name or value of a property is blank")
        if name in _SYSTEM_PROPERTIES:
            option = _OPTION_FOR.get(name)
            raise click.BadParameter(
                f"{name} is a property RocketMQ sets itself (its client refuses it as a user property)"
                + (f": give {option}" if option else "")
            )
        out[name] = value
    return out


def _result_row(result: PutResult, where: dict[str, object]) -> dict[str, object]:
    return {
        "status": str(result.status),
        "msgId": result.msg_id,
        "uniqKey": result.uniq_key,
        "topic": where["topic"],
        "queueId": where["queueId"],
        "queueOffset": result.queue_offset,
        "commitLogOffset": result.commit_log_offset,
        "storeTimestamp": result.store_timestamp,
        **{k: v for k, v in where.items() if k not in ("topic", "queueId")},
    }


def _placement(store: MessageStore, message: Message, queue_id: int) -> dict[str, object]:
    """Where a put stores ``message``, as the store places it: a delayed one in SCHEDULE_TOPIC_XXXX
    queue level-1 (the level capped at the highest), with the topic and queue it is delivered to.
    A message the store will refuse is left to the put to report."""
    placed = store.writer.placed(message, queue_id)
    if isinstance(placed, PutResult) or placed[0].topic != SCHEDULE_TOPIC or message.topic == SCHEDULE_TOPIC:
        return {"topic": message.topic, "queueId": queue_id}
    stored, schedule_queue = placed
    level = int(stored.properties[DELAY])
    delays = store.config.message_delay_level.split()
    return {
        "topic": SCHEDULE_TOPIC,
        "queueId": schedule_queue,
        "realTopic": message.topic,
        "realQueueId": queue_id,
        "delayLevel": level,
        "delay": delays[level - 1] if level <= len(delays) else None,
    }


def _say_when_delivered(where: dict[str, object], asked: str) -> None:
    """Warn when a delay level was capped, and say that delivery needs a running store."""
    level, delay = where["delayLevel"], where["delay"]
    capped = False
    with contextlib.suppress(ValueError):
        capped = int(asked) > level  # type: ignore[operator]
    if capped:
        warn(
            f"WARNING: delay level {asked} is above the highest level of messageDelayLevel: capped at {level} "
            f"({delay}), as RocketMQ does"
        )
    warn(
        f"note: it reaches {where['realTopic']}/{where['realQueueId']} after {delay} only while a process keeps "
        "the store open for writing (the schedule service starts 1 s after open); this command closes it at once"
    )


@click.command()
@store_options(must_exist=False, writes=True)
@click.option("--topic", required=True, callback=topic_names, help="The topic.")
@click.option("--tags", help="The message's tags (TAGS).")
@click.option("--keys", "keys", multiple=True, help="A key (KEYS; repeatable, or several separated by spaces).")
@click.option(
    "--property",
    "properties",
    multiple=True,
    callback=_properties,
    metavar="NAME=VALUE",
    help="A user property (repeatable).",
)
@click.option(
    "--queue", "queue_id", type=click.IntRange(0, JAVA_INT[1]), default=0, show_default=True, help="The queue id."
)
@click.option(
    "--delay-level",
    type=click.IntRange(min=1),
    help="Deliver after this delay level (DELAY; level 3 is 10 s with the default messageDelayLevel).",
)
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True, help="Store the message N times.")
@click.option("--body", help="The body, as UTF-8 text.")
@click.option("--body-file", type=click.File("rb"), help="The body, read from a file ('-' for stdin).")
def produce(
    opts: Common,
    topic: str,
    tags: str | None,
    keys: tuple[str, ...],
    properties: dict[str, str],
    queue_id: int,
    delay_level: int | None,
    count: int,
    body: str | None,
    body_file: click.utils.LazyFile | None,
) -> None:
    """Store messages (the store is created if it does not exist or is an empty folder; a folder
    that holds files but no store is refused, and so is a commit log outside STORE without
    --external-commit-log).

    A delayed message waits in SCHEDULE_TOPIC_XXXX queue level-1 (a level above the highest is
    capped at it, with a warning); it is delivered to its topic while a store process has the
    store open for writing (delivery resumes where it stopped, from delayOffset.json). The output
    names where the messages are stored; with --json one line per message as it is stored
    (topic and queueId where it is stored; realTopic, realQueueId, delayLevel and delay for a
    delayed one).

    As RocketMQ's client refuses them in putUserProperty, --property names it sets itself
    (UNIQ_KEY, WAIT, TAGS, KEYS, DELAY, ...: MessageConst.STRING_HASH_SET) and blank names or
    values are refused, and so is an empty body. As RocketMQ's broker refuses a send to them,
    topics only the store writes are refused
    (SCHEDULE_TOPIC_XXXX, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT); `import` takes them.
    """
    if (body is None) == (body_file is None):
        raise click.UsageError("give exactly one of --body and --body-file")
    refusal = send_refusal(topic)  # as the broker refuses a send (import takes them: exports hold them)
    if refusal:
        raise CommandError(refusal)
    try:
        data = body.encode("utf-8") if body is not None else _read_body(body_file, opts.config.max_message_size)
    except UnicodeEncodeError:  # bytes that are not UTF-8 in argv, surrogate-escaped
        raise CommandError("--body is not UTF-8 text (use --body-file for bytes)") from None
    if not data:  # Validators.checkMessage: "the message body length is zero"
        raise click.BadParameter(
            "the body is empty: RocketMQ's client refuses a message body of length zero (`import` stores one)",
            param_hint="--body" if body is not None else "--body-file",
        )
    key_list = [k for item in keys for k in item.split(" ") if k]
    if delay_level is not None:
        properties = {**properties, "DELAY": str(delay_level)}
    # the message is checked before the store is opened (a new one created): a bad topic raises
    # here, and what put would refuse (a body over maxMessageSize, ...) is refused with its reason
    refused = MessagePreparer(opts.config).check(_message(topic, data, tags, key_list, properties), queue_id)
    if refused is not None:
        refused.raise_for_status()
    shown: list[dict[str, object]] = []  # the table's rows (--json prints each as it is stored)
    last: dict[str, object] | None = None
    stored = 0
    guard = DeferStops()  # Ctrl-C and SIGTERM land between two messages, or after the shutdown
    try:
        with (
            guard.installed(),
            shut_down_whole(open_store(opts), guard) as store,
            # no bar between its lines on a terminal
            progress_bar("produce", count, enabled=not (opts.as_json and sys.stdout.isatty())) as advance,
        ):
            where = _placement(store, _message(topic, data, tags, key_list, properties), queue_id)
            if "delayLevel" in where:
                _say_when_delivered(where, properties[DELAY])
            for _ in range(count):
                message = _message(topic, data, tags, key_list, properties)
                with guard:  # a Ctrl-C waits until the message stored is counted (and its line printed)
                    last = _result_row(store.put(message, queue_id).raise_for_status(), where)
                    stored += 1
                    if opts.as_json:
                        click.echo(json.dumps(last, separators=(",", ":")))  # flushed: a killed run said what it stored
                if not opts.as_json and len(shown) < _SHOWN_RESULTS:
                    shown.append(last)
                advance(1)
    except BaseException as exc:  # Ctrl-C, SIGTERM, a closed stdout, an error: what was stored, with or without --json
        if stored and last is not None:
            warn(
                f"{stored} message(s) stored in {_place(last)} before this stopped (up to queue offset "
                f"{last['queueOffset']})"
            )
        if isinstance(exc, KeyboardInterrupt) and guard.signal == signal.SIGTERM:
            raise with_notes(stopped_by(signal.SIGTERM), exc) from None
        raise
    # every message stored and the store shut down: a closed stdout now cuts only the table
    done_storing(f"{stored} message(s) stored" + (f" in {_place(last)}" if last else ""))
    if not opts.as_json:
        _show_stored(stored, shown, last, where)


def _read_body(body_file: IO[bytes], limit: int) -> bytes:
    """The body in ``body_file``: at most ``limit`` (maxMessageSize) bytes are read, and one more
    to tell a body too big (refused, MESSAGE_ILLEGAL): an endless input is not read whole."""
    data = body_file.read(limit + 1)
    if len(data) > limit:
        why = f"--body-file holds more than maxMessageSize ({limit} bytes)"
        PutResult.refused(PutMessageStatus.MESSAGE_ILLEGAL, why).raise_for_status()
    return data


def _show_stored(
    stored: int, shown: list[dict[str, object]], last: dict[str, object] | None, where: dict[str, object]
) -> None:
    """produce's table: the first results, and how many more up to which queue offset."""
    table = Table(title=cell(f"stored {stored} message(s) in {_place(where)}"), title_justify="left")
    columns = ("status", "msgId", "queueOffset", "commitLogOffset", "storeTimestamp")
    id_width = max((len(str(row["msgId"])) for row in shown), default=0)
    for name in columns:
        if name == "msgId":  # whole, on one line, to be copied: the other columns fold to make room
            table.add_column(name, no_wrap=True, min_width=id_width)
        else:
            table.add_column(name, justify="left" if name == "status" else "right", overflow="fold")
    for row in shown:
        table.add_row(*(cell(row[c]) for c in columns))
    out_console().print(table)
    if stored > len(shown) and last is not None:
        say(f"... and {stored - len(shown)} more, up to queue offset {last['queueOffset']}")


def _message(topic: str, data: bytes, tags: str | None, keys: list[str], properties: dict[str, str]) -> Message:
    return Message(topic, data, tags=tags, keys=keys or None, properties=dict(properties) or None)


def _place(where: dict[str, object]) -> str:
    """``Topic/queue``; for a delayed message, the schedule queue and where it is delivered."""
    place = f"{where['topic']}/{where['queueId']}"
    if "delayLevel" in where:
        place += (
            f" (delay level {where['delayLevel']}, {where['delay']}): delivered to "
            f"{where['realTopic']}/{where['realQueueId']} when due"
        )
    return place


def _queues_to_read(opts: Common, store: MessageStore, topic: str, queue_id: int | None) -> list[int]:
    """The queues ``consume`` reads: ``queue_id`` or every queue of ``topic``. A topic the store
    does not know (no consume queue, no topics.json entry) or a queue it does not have (neither a
    consume queue nor below the topic's readQueueNums) is refused, as ``export`` refuses a topic."""
    present = store.queue_ids()
    require_topics(opts.root, known_topics(store), topic.__eq__, f"--topic {topic!r}")
    if queue_id is None:
        return present.get(topic, [])
    config = store.topics.find(topic)
    reads = int(config.get("readQueueNums", 0)) if config else 0  # up to 2^31 - 1: never listed
    stray = sorted(q for q in present.get(topic, []) if not 0 <= q < reads)
    if not 0 <= queue_id < reads and queue_id not in stray:
        span = [f"0-{reads - 1}" if reads > 1 else "0"] if reads else []
        shown = ", ".join([*span, *map(str, stray)]) or "none"
        raise CommandError(f"topic {topic!r} of {opts.root} has no queue {queue_id} (its queues: {shown})")
    return [queue_id]


_OUTSIDE = frozenset(
    {
        GetMessageStatus.OFFSET_TOO_SMALL,
        GetMessageStatus.OFFSET_OVERFLOW_BADLY,
        GetMessageStatus.NO_MESSAGE_IN_QUEUE,
    }
)


def pull_queue(
    store: MessageStore,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    max_num: int,
    tags: str | None,
    unreadable: UnreadableUnits | None = None,
) -> tuple[list[StoredMessage], int, GetResult | None]:
    """Up to ``max_num`` messages of one queue from ``offset``; returns them, the next offset, and
    the pull whose ``next_begin_offset`` moved ``offset`` into the queue because it was outside it
    (before its min offset, past its max offset: as RocketMQ's broker moves a consumer), or None.
    The units a pull passed over because their message cannot be read go to ``unreadable`` (the
    reader's warning about them is then left out: ``unreadable`` says more)."""
    messages: list[StoredMessage] = []
    moved: GetResult | None = None
    while len(messages) < max_num:
        with reader_warnings_left_out() if unreadable is not None else contextlib.nullcontext():
            result = store.get_message(group, topic, queue_id, offset, min(_PULL_BATCH, max_num - len(messages)), tags)
        if unreadable is not None:
            for unit in _passed_over(store, topic, queue_id, result):
                unreadable.add(unit)
        if result.status in _OUTSIDE and result.next_begin_offset != offset:
            moved = moved or result
            offset = result.next_begin_offset
            if result.status == GetMessageStatus.OFFSET_TOO_SMALL:
                continue  # read from the min offset
            break  # past the end: read from there next time
        if result.status in _END or result.status == GetMessageStatus.OFFSET_OVERFLOW_BADLY:
            break
        messages.extend(result.messages)
        if result.next_begin_offset == offset and not result.messages:
            break
        offset = result.next_begin_offset
    return messages, offset, moved


@contextlib.contextmanager
def reader_warnings_left_out() -> Iterator[None]:
    """The reader's warnings (about the units a pull passed over, the hits a key query could not
    read) are not logged within: the command says more about them."""
    reader_log = logging.getLogger("rocketstore.reader")
    was, reader_log.disabled = reader_log.disabled, True
    try:
        yield
    finally:
        reader_log.disabled = was


def _passed_over(store: MessageStore, topic: str, queue_id: int, result: GetResult) -> list[QueuedUnit]:
    """The units a pull moved past because their message cannot be read (``result.unreadable``),
    each read again to say where it is and why."""
    return [
        unit
        for queue_offset in result.unreadable
        for unit in queue_units(store, topic, queue_id, queue_offset, queue_offset + 1)
        if unit.message is None
    ]


def _moved_text(topic: str, queue_id: int, asked: str, moved: GetResult) -> str:
    if moved.status == GetMessageStatus.OFFSET_TOO_SMALL:
        where = f"before the queue's min offset {moved.min_offset}"
    else:
        where = f"past the queue's max offset {moved.max_offset}"
    return f"WARNING: {topic}/{queue_id}: {asked} is {where}; read from {moved.next_begin_offset}"


def _parse_time(_ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return store_time_millis(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param=param) from None


def _started_from(from_offset: int | None, from_time: int | None) -> str:
    """How ``consume`` chose a queue's first offset, as its --json ``offsetsMoved`` says."""
    if from_offset is not None:
        return "--from-offset"
    return "--from-time" if from_time is not None else "committed"


@click.command()
@store_options(writes=True)
@click.option("--topic", required=True, callback=topic_names, help="The topic.")
@click.option("--group", required=True, help="The consumer group.")
@click.option(
    "--queue",
    "queue_id",
    type=click.IntRange(0, JAVA_INT[1]),
    help="Only this queue (default: every queue of the topic).",
)
@click.option("--tags", help='A tag filter: "*" or "TagA || TagB".')
@click.option("--from-offset", type=click.IntRange(0, JAVA_LONG[1]), help="Start at this queue offset.")
@click.option(
    "--from-time",
    callback=_parse_time,
    help="Start at each queue's first message stored at or after this time: epoch ms, or ISO-8601 "
    "(UTC without a zone), as RocketMQ 5's CONSUME_FROM_TIMESTAMP (4.9's lookup may start at the "
    "message just before it).",
)
@click.option(
    "--from-committed",
    is_flag=True,
    help="Start at the group's committed offset (the default; a queue without one starts at its first message).",
)
@click.option(
    "--max", "max_num", type=click.IntRange(min=1), default=32, show_default=True, help="At most N messages in all."
)
@click.option("--commit", is_flag=True, help="Commit the next offset of each queue read for the group.")
def consume(
    opts: Common,
    topic: str,
    group: str,
    queue_id: int | None,
    tags: str | None,
    from_offset: int | None,
    from_time: int | None,
    from_committed: bool,
    max_num: int,
    commit: bool,
) -> None:
    """Pull messages of a topic as a consumer group would, and with --commit record where it got to.

    Without --commit the store is opened read-only and nothing on disk changes. The messages are
    printed as a table, or with --json as export JSON lines without the queue unit's cqTagsCode and
    cqSize (import takes them as they are); where each queue got to goes to stderr.

    --from-time starts each queue at its first message stored at or after the time (past its last
    message: at its max offset, so only what comes later is read).

    An offset outside a queue (--from-offset, or the group's committed offset) is moved as RocketMQ's
    broker moves a consumer: before the queue's min offset (retention deleted those messages) to the
    min offset, past its max offset to the max offset; a warning on stderr says so, and with --json
    a last line {"offsetsMoved": [{topic, queueId, offset, from, movedTo, minOffset, maxOffset}]}.

    A message whose consume-queue unit points at no record that decodes is skipped, as the pull
    skips it, and named in a warning on stderr (where, and why, as export names it); the exit
    status is then 1. --commit commits past it, as a consumer's offset would move past it.
    """
    if (from_offset is not None) + (from_time is not None) + from_committed > 1:
        raise click.UsageError("give at most one of --from-offset, --from-time and --from-committed")
    validate_group(group)  # before --commit opens the store to write (a crashed store is not recovered by a typo)
    # it commits only what it wrote out: a closed stdout ends it quietly, as a consumer stops
    store = open_store_checked(
        opts,
        lambda store: _queues_to_read(opts, store, topic, queue_id),  # refused before --commit opens it to write
        read_only=not commit,
        create=False,
        closed_pipe_interrupts=False,
    )
    with store:  # a failed shutdown does not hide an error before it
        queue_ids = _queues_to_read(opts, store, topic, queue_id)
        unreadable = UnreadableUnits("not consumed" + (" (--commit commits past them)" if commit else ""))
        messages: list[StoredMessage] = []
        next_offsets: dict[int, int] = {}
        progress: list[str] = []
        moves: list[dict[str, object]] = []  # --json: where an offset outside its queue was moved
        for qid in queue_ids:
            if len(messages) >= max_num:
                break
            if from_offset is not None:
                start, asked = from_offset, f"offset {from_offset}"
            elif from_time is not None:
                start = store.get_offset_in_queue_by_time(topic, qid, from_time)
                asked = f"the offset {start} of time {from_time}"
            else:
                start = store.query_offset(group, topic, qid)
                asked = f"the committed offset {start} of group {group!r}"
                if start < 0:
                    start = store.get_min_offset_in_queue(topic, qid)
            got, next_offsets[qid], moved = pull_queue(
                store, group, topic, qid, start, max_num - len(messages), tags, unreadable
            )
            if moved is not None:
                warn(_moved_text(topic, qid, asked, moved))
                moves.append(
                    {
                        "topic": topic,
                        "queueId": qid,
                        "offset": start,
                        "from": _started_from(from_offset, from_time),
                        "movedTo": moved.next_begin_offset,
                        "minOffset": moved.min_offset,
                        "maxOffset": moved.max_offset,
                    }
                )
            messages.extend(got)
            progress.append(
                f"{topic}/{qid}: {len(got)} message(s), next offset {next_offsets[qid]}"
                + (" (committed)" if commit else "")
            )
        if not queue_ids:
            warn(f"topic {topic!r} has no consume queue in {opts.store}")

        def acknowledge(msg: StoredMessage) -> None:  # it is out on stdout: consumed
            store.commit_offset(group, topic, msg.queue_id, msg.queue_offset + 1)

        # offsets are committed as the messages are written out: a closed pipe or a Ctrl-C while
        # printing leaves the rest to the next run, as a consumer acknowledges what it processed
        title = f"{len(messages)} message(s) of {topic} for {group}"
        print_messages(messages, opts.as_json, title=title, written=acknowledge if commit else None)
        for qid, offset in next_offsets.items() if commit else ():
            store.commit_offset(group, topic, qid, offset)  # past the messages the tag filter skipped
        if opts.as_json and moves:  # after the messages, as an error object is
            click.echo(json.dumps({"offsetsMoved": moves}, separators=(",", ":")))
    for line in progress:
        warn(line)
    unreadable.close()
    if unreadable.count:
        raise ProblemsFound(
            f"{unreadable.count} message(s) could not be read and were skipped (the warnings above say which)"
            + ("; the committed offsets are past them, as a consumer's would be" if commit else "")
            + f"; {len(messages)} consumed"
        )
