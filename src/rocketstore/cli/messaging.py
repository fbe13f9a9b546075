"""``rocketstore produce`` and ``rocketstore consume``."""

from __future__ import annotations

import json

import click
from rich.table import Table

from rocketstore.cli.common import (
    Common,
    cell,
    open_store,
    out_console,
    print_messages,
    progress_bar,
    say,
    store_options,
    warn,
)
from rocketstore.codec.message import Message, StoredMessage
from rocketstore.results import GetMessageStatus, PutResult
from rocketstore.store import MessageStore

_SHOWN_RESULTS = 20
_PULL_BATCH = 32
_END = frozenset(
    {
        GetMessageStatus.NO_MESSAGE_IN_QUEUE,
        GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
        GetMessageStatus.OFFSET_OVERFLOW_ONE,
    }
)


def _properties(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE")
        out[name] = value
    return out


def _result_row(result: PutResult, queue_id: int) -> dict[str, object]:
    return {
        "status": str(result.status),
        "msgId": result.msg_id,
        "uniqKey": result.uniq_key,
        "queueId": queue_id,
        "queueOffset": result.queue_offset,
        "commitLogOffset": result.commit_log_offset,
        "storeTimestamp": result.store_timestamp,
    }


@click.command()
@store_options(must_exist=False, writes=True)
@click.option("--topic", required=True, help="The topic.")
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
@click.option("--queue", "queue_id", type=click.IntRange(min=0), default=0, show_default=True, help="The queue id.")
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
    """Store messages (the store is created if it does not exist; a folder that is not a store but
    holds one is refused, and so is a commit log outside STORE without --external-commit-log).

    A delayed message waits in SCHEDULE_TOPIC_XXXX; it is delivered to its topic while a store
    process has the store open (delivery resumes where it stopped, from delayOffset.json).
    """
    if (body is None) == (body_file is None):
        raise click.UsageError("give exactly one of --body and --body-file")
    data = body.encode("utf-8") if body is not None else body_file.read()  # type: ignore[union-attr]
    key_list = [k for item in keys for k in item.split(" ") if k]
    if delay_level is not None:
        properties = {**properties, "DELAY": str(delay_level)}
    rows = []
    with open_store(opts) as store, progress_bar("produce", count) as advance:
        for _ in range(count):
            message = Message(topic, data, tags=tags, keys=key_list or None, properties=dict(properties) or None)
            result = store.put(message, queue_id).raise_for_status()
            rows.append(_result_row(result, queue_id))
            advance(1)
    if opts.as_json:
        for row in rows:
            click.echo(json.dumps(row, separators=(",", ":")))
        return
    table = Table(title=f"stored {len(rows)} message(s) in {topic}/{queue_id}", title_justify="left")
    columns = ("status", "msgId", "queueOffset", "commitLogOffset", "storeTimestamp")
    for name in columns:
        table.add_column(name, justify="left" if name in ("status", "msgId") else "right")
    for row in rows[:_SHOWN_RESULTS]:
        table.add_row(*(cell(row[c]) for c in columns))
    out_console().print(table)
    if len(rows) > _SHOWN_RESULTS:
        say(f"... and {len(rows) - _SHOWN_RESULTS} more, up to queue offset {rows[-1]['queueOffset']}")


def pull_queue(
    store: MessageStore, group: str, topic: str, queue_id: int, offset: int, max_num: int, tags: str | None
) -> tuple[list[StoredMessage], int]:
    """Up to ``max_num`` messages of one queue from ``offset``; returns them and the next offset."""
    messages: list[StoredMessage] = []
    while len(messages) < max_num:
        result = store.get_message(group, topic, queue_id, offset, min(_PULL_BATCH, max_num - len(messages)), tags)
        if result.status in _END:
            break
        if result.status == GetMessageStatus.OFFSET_OVERFLOW_BADLY:
            offset = result.next_begin_offset
            break
        messages.extend(result.messages)
        if result.next_begin_offset == offset and not result.messages:
            break
        offset = result.next_begin_offset
    return messages, offset


@click.command()
@store_options(writes=True)
@click.option("--topic", required=True, help="The topic.")
@click.option("--group", required=True, help="The consumer group.")
@click.option(
    "--queue", "queue_id", type=click.IntRange(min=0), help="Only this queue (default: every queue of the topic)."
)
@click.option("--tags", help='A tag filter: "*" or "TagA || TagB".')
@click.option("--from-offset", type=click.IntRange(min=0), help="Start at this queue offset.")
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
    from_committed: bool,
    max_num: int,
    commit: bool,
) -> None:
    """Pull messages of a topic as a consumer group would, and with --commit record where it got to.

    Without --commit the store is opened read-only and nothing on disk changes. The messages are
    printed as a table, or as export JSON lines with --json; where each queue got to goes to stderr.
    """
    if from_offset is not None and from_committed:
        raise click.UsageError("give at most one of --from-offset and --from-committed")
    store = open_store(opts, read_only=not commit, create=False)
    try:
        queue_ids = [queue_id] if queue_id is not None else store.queue_ids().get(topic, [])
        messages: list[StoredMessage] = []
        progress: list[str] = []
        for qid in queue_ids:
            if len(messages) >= max_num:
                break
            if from_offset is not None:
                start = from_offset
            else:
                start = store.query_offset(group, topic, qid)
                if start < 0:
                    start = store.get_min_offset_in_queue(topic, qid)
            got, next_offset = pull_queue(store, group, topic, qid, start, max_num - len(messages), tags)
            messages.extend(got)
            if commit:
                store.commit_offset(group, topic, qid, next_offset)
            progress.append(
                f"{topic}/{qid}: {len(got)} message(s), next offset {next_offset}" + (" (committed)" if commit else "")
            )
    finally:
        store.shutdown()
    if not queue_ids:
        warn(f"topic {topic!r} has no consume queue in {opts.store}")
    print_messages(messages, opts.as_json, title=f"{len(messages)} message(s) of {topic} for {group}")
    for line in progress:
        warn(line)
