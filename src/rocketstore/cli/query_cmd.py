"""``rocketstore query``: messages by key (the index), by offset msgId, or by commit-log offset."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import click

from rocketstore.cli.common import Common, ProblemsFound, found_problems, open_store, store_options, topic_names
from rocketstore.cli.messaging import reader_warnings_left_out
from rocketstore.cli.output import print_messages, warn
from rocketstore.codec.ids import decode_offset_msg_id
from rocketstore.codec.message import JAVA_LONG, StoredMessage
from rocketstore.store import MessageStore
from rocketstore.verify.segment_scan import damaged_record_at

_MSG_ID = re.compile(r"[0-9A-Fa-f]{32}|[0-9A-Fa-f]{56}")
EXIT_NOT_FOUND = 1
_UNCAPPED = 2**31 - 1  # maxMsgsNumBatch for the store a key query opens: _by_key sets its batches


def _is_offset_msg_id(value: str) -> bool:
    """An offset msgId's shape: 32 hex characters (an IPv4 store host) or 56 (IPv6)."""
    return _MSG_ID.fullmatch(value) is not None


def _uniq_key_matches(store: MessageStore, topic: str, msg_id: str, want: int, batch: int) -> list[StoredMessage]:
    """The messages of ``topic`` whose UNIQ_KEY is ``msg_id`` as given or, when not found so, in
    upper case (the clients' hex ids are: one typed in lower case hashes to another index slot);
    messages whose KEYS hold it are not, however many newer ones there are."""
    for candidate in dict.fromkeys((msg_id, msg_id.upper())):
        found, _ = _by_key(store, topic, candidate, want, 0, None, batch, lambda m: m.uniq_key == candidate)  # noqa: B023
        if found:
            return found
    return []


def _other_topic(found: StoredMessage | None, topic: str | None) -> str:
    """Words for a record found that is not of the --topic given; else ''."""
    if found is None or not topic or found.topic == topic:
        return ""
    return f" of topic {topic!r}: the record there is of topic {found.topic!r}"


def _at(store: MessageStore, offset: int) -> StoredMessage | None:
    """The record starting at ``offset``, or None (its PHYSICALOFFSET field must say so too)."""
    if offset < 0:
        return None
    msg = store.look_message_by_offset(offset)
    return msg if msg is not None and msg.commit_log_offset == offset else None


def _damaged(store: MessageStore, offset: int) -> str | None:
    """What is wrong with a record at ``offset`` that cannot be read (None: no record starts there,
    or it is past the end of the log as recovery leaves it, but for the bad record it ends at)."""
    report = store.recovery
    at_cut = report is not None and report.stopped_at_bad_record and offset == report.process_offset
    if offset < 0 or (offset >= store.max_phy_offset and not at_cut):
        return None
    return damaged_record_at(store, offset)


def _past_cut(store: MessageStore, offset: int) -> str:
    """Words for an offset past where recovery cut the log (in memory) at a bad record; else ''."""
    report = store.recovery
    if report is None or not report.stopped_at_bad_record or offset < report.process_offset:
        return ""
    return f" (recovery ends the log at {report.process_offset}, where a record fails its checks)"


def _by_key(
    store: MessageStore,
    topic: str,
    key: str,
    max_num: int,
    begin: int,
    end: int | None,
    batch: int,
    keep: Callable[[StoredMessage], bool] | None = None,
) -> tuple[list[StoredMessage], tuple[int, ...]]:
    """The newest ``max_num`` messages of ``topic`` with ``key`` stored within [begin, end] (ms)
    (and for which ``keep`` is true, if given),
    and the commit-log offsets of the hits read for them that do not decode (``unreadable``).
    The index keeps times in whole seconds from its file's start, so it is asked a second wider
    on each side, then the store times decide. It gives the newest hits first, and the second
    after ``end`` may hold more of them than a query asks for (``batch`` at first): while the hits
    fill the query and fewer than ``max_num`` are in range, it is asked again for four times as
    many (``store`` is opened with a maxMsgsNumBatch that lets it give them). As in RocketMQ, the
    first entry of an index file made after a full one has an index time late by the pause
    before it (its time is counted from the previous file's last entry): an ``end`` before that
    index time misses it, as RocketMQ's own query does."""
    wide_end = None if end is None else end + 1000
    limit = max(max_num, batch)
    while True:
        result = store.query_message(topic, key, limit, max(0, begin - 1000), wide_end)
        found = result.messages
        inside = [
            m
            for m in found
            if m.store_timestamp >= begin and (end is None or m.store_timestamp <= end) and (keep is None or keep(m))
        ]
        if len(inside) >= max_num:
            return inside[-max_num:], result.unreadable
        # hits the reader merged (a key twice in a message) or dropped (another key of the same
        # hash) are not in ``found``: only fewer raw hits than asked for mean the index has no more
        if result.index_hits < limit:
            return inside, result.unreadable
        limit *= 4


def _more_match(max_num: int, cap: int) -> str:
    """The warning for a key query that more messages match than it gives (``max_num`` asked for,
    at most ``cap``, maxMsgsNumBatch)."""
    if max_num > cap:
        return (
            f"WARNING: more messages match; at most maxMsgsNumBatch ({cap}) are returned, as in RocketMQ: "
            f"--set maxMsgsNumBatch={max_num} raises it"
        )
    more = "give a higher --max" + (f", and --set maxMsgsNumBatch (now {cap}) as high" if max_num == cap else "")
    return f"WARNING: more messages match; --max {max_num} gives the newest {max_num}: {more}"


@click.command()
@store_options()
@click.option(
    "--topic", callback=topic_names, help="The topic (needed with --key; with --msg-id or --offset, the answer's)."
)
@click.option("--key", help="A key (a KEYS token or a UNIQ_KEY), looked up in the index.")
@click.option(
    "--msg-id",
    help="An offset msgId (32 or 56 hex characters), or with --topic a client's msgId (UNIQ_KEY, any form).",
)
@click.option("--offset", type=click.IntRange(0, JAVA_LONG[1]), help="A commit-log offset where a record starts.")
@click.option(
    "--begin",
    type=click.IntRange(*JAVA_LONG),
    default=0,
    show_default=True,
    help="Key queries: earliest store time (ms, inclusive).",
)
@click.option(
    "--end",
    type=click.IntRange(*JAVA_LONG),
    default=None,
    help="Key queries: latest store time (ms, inclusive; default: no limit).",
)
@click.option(
    "--max",
    "max_num",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Key queries: at most N, and, as in RocketMQ, at most maxMsgsNumBatch (64 by default; --set "
    "maxMsgsNumBatch=N raises it; a result it caps is warned about).",
)
@click.pass_context
def query(
    ctx: click.Context,
    opts: Common,
    topic: str | None,
    key: str | None,
    msg_id: str | None,
    offset: int | None,
    begin: int,
    end: int | None,
    max_num: int,
) -> None:
    """Find messages: --topic T --key K (index query, hash collisions removed), --msg-id ID, or
    --offset N. Prints a table, or export JSON lines (without cqTagsCode and cqSize) with --json;
    exit status 1 when none is found
    (a record there that fails its checks is named, with what is wrong with it), and 1 too when a
    key query finds some while the index also points at records that fail their checks (they are named).
    With --topic, an --msg-id that is not an offset msgId of this store is also looked up as a
    UNIQ_KEY (the id clients call msgId)."""
    given = [name for name, value in (("--key", key), ("--msg-id", msg_id), ("--offset", offset)) if value is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --key, --msg-id and --offset")
    if key is not None and not topic:
        raise click.UsageError("--key needs --topic")
    if msg_id is not None and not msg_id.strip():
        raise click.BadParameter("an empty msgId", param_hint="'--msg-id'")
    if msg_id is not None and not topic and not _is_offset_msg_id(msg_id):
        raise click.BadParameter(
            f"{msg_id!r} is not an offset msgId (32 hex characters for an IPv4 store host, 56 for IPv6); a "
            "client's msgId (the UNIQ_KEY, as a RocketMQ 5 client's 34 characters) is looked up with --topic",
            param_hint="'--msg-id'",
        )
    if end is not None and begin > end:  # an empty range: refused, as spark export refuses one
        raise click.UsageError(f"--begin {begin} is after --end {end} (store times in ms, both inclusive)")
    cap = opts.config.max_msgs_num_batch  # as RocketMQ, a query gives at most maxMsgsNumBatch messages
    want = min(max_num, cap)
    store = open_store(dataclasses.replace(opts, config=opts.config.copy(maxMsgsNumBatch=_UNCAPPED)), read_only=True)
    with store:  # a failed shutdown does not hide an error before it
        messages: list[StoredMessage] = []
        if key is not None:
            assert topic is not None
            with reader_warnings_left_out():  # the damaged hits are told below, with what is wrong
                messages, unreadable = _by_key(store, topic, key, want + 1, begin, end, cap)  # one more: any more?
            if len(messages) > want:  # the newest of them
                messages = messages[-want:]
                warn(_more_match(max_num, cap))
            what = f"no message of topic {topic!r} with key {key!r}"
            if damaged := [problem for phy in unreadable if (problem := _damaged(store, phy)) is not None]:
                hits = (
                    f"the index {'also ' if messages else ''}points at {len(damaged)} record(s) that fail their "
                    f"checks (the message, or one of another key with the same hash): {'; '.join(damaged)}"
                )
                if messages:  # given, and exit status 1: the answer may lack what those held
                    found_problems()
                    print_messages(messages, opts.as_json)
                    raise ProblemsFound(hits)
                what += f" can be read: {hits}"
        elif msg_id is not None and not _is_offset_msg_id(msg_id):
            assert topic is not None
            messages = _uniq_key_matches(store, topic, msg_id, want, cap)
            what = (
                f"no message with msgId {msg_id!r}: it is not an offset msgId (32 or 56 hex characters), nor the "
                f"UNIQ_KEY of a message of topic {topic!r} in the index"
            )
        elif msg_id is not None:
            _host, where = decode_offset_msg_id(msg_id)
            there = _at(store, where)
            found = there if there is not None and there.msg_id == msg_id.upper() else None
            if found is not None and not _other_topic(found, topic):
                messages = [found]
            elif topic:
                messages = _uniq_key_matches(store, topic, msg_id, want, cap)
            what = f"no message with msgId {msg_id!r}"
            damaged = _damaged(store, where) if found is None and not messages else None
            if found is not None:
                what += _other_topic(found, topic)
            elif damaged is not None:
                what += f" can be read: the record at commit-log offset {where} it names fails its checks: {damaged}"
            elif cut := _past_cut(store, where):
                what += f": commit-log offset {where}, which it names, is not in the log{cut}"
            else:
                what += (
                    f": the record at commit-log offset {where}, which it names, has msgId {there.msg_id} (another "
                    "store host)"
                    if there is not None
                    else f": no record starts at commit-log offset {where}, which it names"
                ) + (
                    f", nor is it the UNIQ_KEY of a message of topic {topic!r} in the index"
                    if topic
                    else " (if it is a client msgId, the UNIQ_KEY clients show, give --topic to find it in the index)"
                )
        else:
            assert offset is not None
            found = _at(store, offset)
            messages = [found] if found is not None and not _other_topic(found, topic) else []
            damaged = _damaged(store, offset) if found is None else None
            what = f"no record starts at commit-log offset {offset}{_past_cut(store, offset)}"
            if found is not None:
                what = f"no message at commit-log offset {offset}{_other_topic(found, topic)}"
            elif damaged is not None:
                what = f"the record at commit-log offset {offset} fails its checks: {damaged}"
    if not messages:
        warn(what)
        ctx.exit(EXIT_NOT_FOUND)
    print_messages(messages, opts.as_json)
