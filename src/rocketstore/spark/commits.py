"""Appending staged messages to a store on the driver, exactly once per streaming micro-batch.

``config/sparkSinkCommits.json`` in the store keeps, per streaming sink (the ``sinkId`` option,
else the query), the query that writes it, its checkpoint and the last micro-batch it wrote::

    {"<sink>": {"query": "query:<id>", "checkpoint": "checkpoint:<uri>", "batchId": 7,
                "state": "committed", "logStart": 1234, "count": 100, "queueStarts": {"T": 3}}}

A query is the id Spark keeps in its checkpoint's ``metadata`` (what ``StreamingQuery.id`` says). The driver
reads it there when the checkpoint is local: a path, or a ``file:`` URI (``file:/p``, ``file:///p``). Every
task of a streaming query gets it from Spark too (the local property ``sql.streaming.queryId``) and reports it
with what it staged, so a checkpoint on another file system (``hdfs://``, ``s3a://``) binds the sink to its
query just the same. Only when neither knows it (no task ran, nothing to write: the marker is left alone; or a
Spark that does not set the property) does the checkpoint's URI stand for the query, spelled as Hadoop's
``Path`` spells it (no trailing or doubled slash, the scheme in lower case).

A sink belongs to the query that first wrote it: another query (another checkpoint, or one deleted and made
again at the same place, whose batch ids start over at 0) given the same ``sinkId`` is refused
(SinkInUseError), as its batches would be taken for ones already written and skipped. The same query restarted
from its checkpoint, however its path is written, is not.

Before a batch's messages are appended, the entry becomes ``pending`` with the log's end offset
(``logStart``), written atomically (temporary file, fsync, rename). After the messages are appended and
flushed, it becomes ``committed``. A batch id at or below a committed one is skipped (Spark replays the last
batch after a restart when the crash came between the sink's commit and the checkpoint's). A ``pending`` entry
for the same batch means a crash during the append: the records after ``logStart`` that match the batch's
messages in order, as a put stores them (a delayed one in SCHEDULE_TOPIC_XXXX; an ``asIs`` one as
``put_as_is`` stores it, DELAY kept, in its own topic), are its first messages, and only the rest is appended.
The store's lock is held throughout.

Rows without a queue id go round-robin over their topic's write queues, going on from where the store is: a
commit starts a topic at the sum of its queues' next offsets modulo its write queue count, so one-row jobs and
micro-batches take turns over the queues as a single large one does. The starts are fixed before the
``pending`` entry is written and kept in it (``queueStarts``), so a batch cut short chooses the same queues
when it is replayed.

Spark commits to one store, from this process or another, take turns: each holds ``config/sparkCommit.lock``
(an flock) while it has the store open, and a commit waits for it up to ``lockWaitMs`` (default 60000). A
store lock taken while that lock is held is another program's (a broker, a program with the store open, a
rebuild): the commit fails at once (StoreLockedError), and so does the check a write makes on the driver
before any task runs (``commit_turn``). A commit that fails with nothing appended in a folder that held no
store leaves it as it was (no store, no lock); a folder that held anything keeps it all, and so does a store
another program put messages in meanwhile. A store whose recovery (the open's) would cut the log where intact
records follow is refused, nothing changed, as ``rocketstore produce`` refuses it (CorruptStoreError).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow.compute as pc

from rocketstore.codec.message import Message, StoredMessage
from rocketstore.codec.properties import DELAY, REAL_QID
from rocketstore.codec.topic import SCHEDULE_TOPIC
from rocketstore.config import StoreConfig
from rocketstore.errors import (
    InvalidArgumentError,
    InvalidMessageError,
    SinkInUseError,
    StoreLockedError,
)
from rocketstore.export import delivered_copy_key, skip_delivered
from rocketstore.files.syscalls import fsync_dir
from rocketstore.meta.root import require_store_or_new_folder
from rocketstore.prepare import MessagePreparer
from rocketstore.results import PutResult
from rocketstore.services.wiring import no_cleanup, no_delayed_delivery
from rocketstore.spark.commit_turn import commit_turn, held_elsewhere, holds_nothing, remove_made_store
from rocketstore.spark.schema import option, split_scheme
from rocketstore.spark.staging import staged_batches
from rocketstore.store import MessageStore
from rocketstore.verify.recovery_plan import lossy_cut_guard

log = logging.getLogger(__name__)
MARKER = os.path.join("config", "sparkSinkCommits.json")
DEFAULT_QUEUE_NUMS = 4
DEFAULT_LOCK_WAIT_MS = 60_000


def _normal_path(path: str) -> str:
    """Doubled slashes collapsed and a trailing one removed, as Hadoop's Path normalizes them."""
    while "//" in path:
        path = path.replace("//", "/")
    return path[:-1] if len(path) > 1 and path.endswith("/") else path


def local_checkpoint(checkpoint: str) -> str | None:
    """The local path of a checkpoint given as a path or a ``file:`` URI (``file:/p``, ``file:///p``; no %-escape is
    decoded, Hadoop decodes none either); None for a checkpoint on another file system. A relative path is the
    JVM's, whose working folder the Python workers share."""
    scheme, rest = split_scheme(checkpoint)
    if scheme is None:
        return os.path.abspath(checkpoint)
    if scheme != "file":
        return None
    if rest.startswith("//"):  # file://authority/path: only an empty authority is local
        authority, _, path = rest[2:].partition("/")
        if authority not in ("", "localhost"):
            return None
        rest = "/" + path
    return os.path.abspath(rest)


def checkpoint_binding(checkpoint: str) -> str:
    """``checkpoint:<uri>``: the checkpoint one way however it is written."""
    path = local_checkpoint(checkpoint)
    if path is not None:
        return f"checkpoint:{_normal_path(path)}"
    scheme, rest = split_scheme(checkpoint)
    authority = ""
    if rest.startswith("//"):
        authority, _, path = rest[2:].partition("/")
        rest = "/" + path
    return f"checkpoint:{scheme}://{authority}{_normal_path(rest)}"


def checkpoint_query(options: Mapping[str, str]) -> tuple[str | None, str]:
    """(``query:<id>`` from the checkpoint's metadata, or None when it cannot be read here (a checkpoint on another
    file system), ``checkpoint:<uri>``) of a streaming write."""
    checkpoint = option(options, "checkpointLocation")
    if not checkpoint:
        raise InvalidArgumentError(
            "a streaming write to rocketstore needs the checkpointLocation option (the sink records which "
            "query wrote each batch; spark.sql.streaming.checkpointLocation does not reach it)"
        )
    query = None
    path = local_checkpoint(checkpoint)
    if path is not None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            with open(os.path.join(path, "metadata"), encoding="utf-8") as f:
                found = json.load(f).get("id")
            if found:
                query = f"query:{found}"
    return query, checkpoint_binding(checkpoint)


def _same_checkpoint(binding: str, checkpoint: str | None) -> bool:
    """Whether ``binding`` (``checkpoint:<as written>``, as earlier versions kept it) is ``checkpoint``."""
    return checkpoint is not None and checkpoint_binding(binding[len("checkpoint:") :]) == checkpoint


def check_owner(markers: Mapping[str, Any], sink: str, query: str | None, checkpoint: str | None = None) -> None:
    """Refuse ``sink`` when its marker names another query. ``query`` is this query's ``query:<id>``; or None while
    its id is not known (the driver, with a checkpoint on another file system: the tasks will tell), which refuses
    only a sink bound to another checkpoint; or ``checkpoint:<uri>`` when it cannot be known (tasks Spark did not
    tell), taken for the owner whose marker names the same checkpoint. A sink bound to a checkpoint (by an earlier
    version, or in that last case) is the sink of whichever query that checkpoint is."""
    entry = markers.get(sink) or {}
    owner = entry.get("query")
    if owner is None or owner == query:
        return
    if owner.startswith("checkpoint:"):
        if _same_checkpoint(owner, checkpoint):
            return
    elif query is None or (query.startswith("checkpoint:") and entry.get("checkpoint") == checkpoint):
        return
    raise SinkInUseError(
        f"the store's streaming sink {sink!r} belongs to another query ({owner}), not this one "
        f"({query or checkpoint}): a new checkpoint numbers its batches from 0 again, so they would be taken "
        "for batches already written and skipped. Give this query its own sinkId, or run the original query "
        "from its checkpoint."
    )


def read_markers(root: str) -> dict[str, Any]:
    try:
        with open(os.path.join(root, MARKER), encoding="utf-8") as f:
            obj = json.load(f)
        return obj if isinstance(obj, dict) else {}
    except FileNotFoundError:
        return {}


def _write_markers(root: str, markers: dict[str, Any]) -> None:
    path = os.path.join(root, MARKER)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(markers, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


def _messages(staged: list[Any], as_is: bool = False) -> Iterator[tuple[Message, int | None]]:
    from rocketstore.spark.sink import messages_of

    for batch in staged_batches(staged):
        yield from messages_of(batch, as_is)


class QueueChooser:
    """Queue ids for messages without one: round-robin over the topic's write queues, from ``starts`` (a replay's,
    kept in its marker) or else from the store's state (``start_of``)."""

    def __init__(self, store: MessageStore, starts: Mapping[str, int] | None = None) -> None:
        self.store = store
        self.starts: dict[str, int] = {str(k): int(v) for k, v in (starts or {}).items()}
        self.next: dict[str, int] = {}
        self.count: dict[str, int] = {}

    def __call__(self, topic: str) -> int:
        nums = self.count.get(topic)
        if nums is None:
            cfg = self.store.topics.topic_config_table.get(topic)
            nums = self.count[topic] = max(1, int(cfg["writeQueueNums"])) if cfg else DEFAULT_QUEUE_NUMS
        i = self.next.get(topic)
        if i is None:
            if topic not in self.starts:
                self.starts[topic] = self.start_of(topic, nums)
            i = self.starts[topic]
        self.next[topic] = i + 1
        return i % nums

    def start_of(self, topic: str, nums: int) -> int:
        """Where the topic's round-robin goes on: the sum of its queues' next offsets (as the puts assign them)
        modulo ``nums``; after n messages sent round-robin, queue n % nums."""
        table = dict(self.store.commit_log.topic_queue_table)
        return sum(offset for (name, _), offset in table.items() if name == topic) % nums

    def rewind(self) -> None:
        """Choose the same queues again (with the queue counts and starts read the first time)."""
        self.next.clear()


def _check_space(root: str, staged: list[Any], config: StoreConfig) -> None:
    """Refuse a batch the disk cannot take, before anything is appended."""
    need = sum(os.path.getsize(s.path) for s in staged) * 2 + config.mapped_file_size_commit_log
    free = shutil.disk_usage(root).free
    if free < need:
        raise OSError(f"{root}: {free} bytes free, the staged messages need about {need}")


def check_chosen_queues(store: MessageStore, staged: list[Any], choose: QueueChooser, as_is: bool = False) -> None:
    """Refuse the batch, before anything is appended, if a message is refused with the queue chosen for it here. The
    tasks checked every message, those without a queueId as queue 0; only a delayed one can differ: its queue id
    goes into ``REAL_QID``, and a longer one may not fit (``as_is``: none is delayed, so none differs; the queues
    are only chosen)."""
    from rocketstore.spark.sink import messages_of

    for batch in staged_batches(staged):
        unassigned = pc.is_null(batch.column("queueId")).to_numpy(zero_copy_only=False)
        if not unassigned.any():
            continue
        delayed = pc.is_valid(pc.map_lookup(batch.column("properties"), DELAY, "first"))
        delayed = delayed.to_numpy(zero_copy_only=False)
        topics = batch.column("topic").to_pylist()
        for row in np.flatnonzero(unassigned).tolist():
            queue_id = choose(topics[row])
            if as_is or not delayed[row]:
                continue
            ((message, _),) = messages_of(batch.slice(row, 1))
            refused = store.writer.check(message, queue_id)
            if refused is not None:
                raise InvalidMessageError(
                    f"a delayed {message.topic} message for queue {queue_id}: the store refuses it: {refused.refusal}"
                )


def _stored_as(
    msg: StoredMessage, message: Message, queue_id: int | None, writer: MessagePreparer, as_is: bool = False
) -> bool:
    """Whether ``msg`` is the record a put of ``message`` stored, as the writer places it (a delayed one in
    SCHEDULE_TOPIC_XXXX, with REAL_TOPIC/REAL_QID; ``as_is``, a ``put_as_is``: where it is sent, DELAY kept, born
    time and reconsume times as given). A queue the driver chose is not known here, nor then its REAL_QID."""
    placed = writer.placed(message, 0 if queue_id is None else queue_id, schedule=not as_is)
    if isinstance(placed, PutResult):  # refused: never stored
        return False
    target, target_queue = placed
    if msg.topic != target.topic or msg.body != target.body or msg.flag != target.flag:
        return False
    if as_is and (
        msg.reconsume_times != message.reconsume_times
        or (message.born_timestamp is not None and msg.born_timestamp != message.born_timestamp)
    ):
        return False
    if (queue_id is not None or target is not message) and msg.queue_id != target_queue:
        return False
    props = msg.properties
    return all(props.get(k) == v for k, v in target.properties.items() if k != REAL_QID or queue_id is not None)


def _already_written(store: MessageStore, start: int, staged: list[Any], as_is: bool = False) -> tuple[int, int | None]:
    """How many of the staged messages are the records from ``start`` on, in order; and the
    offset of the record after them when it is not the next staged message (None: the log or
    the staged messages end there)."""
    expected = _messages(staged, as_is)
    offset = start
    matched = 0
    end = store.max_phy_offset
    while offset < end:
        msg: StoredMessage | None = store.look_message_by_offset(offset)
        if msg is None:  # the end-of-file marker: the next segment
            offset = store.commit_log.roll_next_file(offset)
            continue
        want = next(expected, None)
        if want is None:
            break
        if not _stored_as(msg, *want, store.writer, as_is):
            return matched, offset
        matched += 1
        offset += msg.store_size
    return matched, None


def append_staged(
    root: str,
    config: StoreConfig,
    staged: list[Any],
    *,
    sink: str | None,
    batch_id: int | None,
    query: str | None = None,
    checkpoint: str | None = None,
    lock_wait_ms: int = DEFAULT_LOCK_WAIT_MS,
    as_is: bool = False,
) -> int:
    """Append the staged messages (task order) under the store's lock, in turn with other Spark commits (waiting up
    to ``lock_wait_ms``), the store open under ``no_cleanup`` (a filling disk has no file of it deleted, the batch's
    own among them; past the warning ratio puts are refused); returns how many were appended. With ``sink`` and
    ``batch_id``, the write-ahead marker makes this exactly-once; a sink another ``query`` owns is refused
    (SinkInUseError, see ``check_owner``), and so is a store whose recovery would drop intact records
    (CorruptStoreError: ``recovery_plan.lossy_cut_guard``).

    ``as_is`` (the ``asIs`` option) stores each message as ``rocketstore import`` does: with ``put_as_is``, the
    store open under ``no_delayed_delivery`` (no schedule service delivers while the batch is appended), and
    afterwards the delay offsets moved past the units whose delivered copy the batch brought or the store holds
    (``export.skip_delivered``)."""
    if sink is None and not any(s.rows for s in staged):
        return 0
    require_store_or_new_folder(root, config)
    with commit_turn(root, lock_wait_ms) as new:
        if new:  # a new store skips no batch: one the disk cannot take is refused before it is made
            _check_space(root, staged, config)
        try:
            with no_cleanup(), no_delayed_delivery() if as_is else contextlib.nullcontext():
                store = MessageStore.open(root, config, confirm_cut=lossy_cut_guard(root, config))
        except StoreLockedError as exc:  # no Spark commit holds it now (we have the turn)
            raise held_elsewhere(root, exc) from None
        except BaseException:
            if new:
                remove_made_store(root, config)
            raise
        unused = False
        try:
            return _append(store, config, staged, sink, batch_id, query, checkpoint, as_is)
        except BaseException:
            unused = new and holds_nothing(store)
            raise
        finally:
            store.shutdown()
            if unused:  # the store this commit made, nothing put in it: the folder is left as it was
                remove_made_store(root, config)


def _append(
    store: MessageStore,
    config: StoreConfig,
    staged: list[Any],
    sink: str | None,
    batch_id: int | None,
    query: str | None,
    checkpoint: str | None,
    as_is: bool = False,
) -> int:
    skip = 0
    starts = None
    markers = read_markers(store.root) if sink is not None else {}
    entry = markers.get(sink) if sink is not None else None
    if sink is not None and (query is not None or checkpoint is not None):
        check_owner(markers, sink, query, checkpoint)
    if entry is not None and batch_id is not None:
        if entry.get("batchId", -1) > batch_id or (
            entry.get("batchId") == batch_id and entry.get("state") == "committed"
        ):
            log.info("rocketstore sink %s: batch %d was committed before; skipped", sink, batch_id)
            return 0
        if entry.get("batchId") == batch_id and entry.get("state") == "pending":
            skip, other = _already_written(store, int(entry["logStart"]), staged, as_is)
            starts = entry.get("queueStarts")  # the replay chooses the queues the first try chose
            log.warning("rocketstore sink %s: batch %d was cut short; %d messages were in", sink, batch_id, skip)
            if other is not None:  # exactly once needs the replay to give the rows the first try gave
                log.warning(
                    "rocketstore sink %s: batch %d: the record at commit-log offset %d is not the batch's "
                    "next message: another writer's, or the first try's if the query gives other rows when "
                    "a batch runs again (not deterministic); then those stay and the rest of the batch is "
                    "written again after them: duplicates",
                    sink,
                    batch_id,
                    other,
                )
    _check_space(store.root, staged, config)
    choose = QueueChooser(store, starts)
    check_chosen_queues(store, staged, choose, as_is)  # fixes the start of every topic that needs one
    choose.rewind()  # the same queues, their counts and starts read before the first put
    if sink is not None and batch_id is not None:
        owner = (entry or {}).get("query")
        if query is not None and (owner is None or not owner.startswith("query:")):
            owner = query  # a checkpoint's binding gives way to its query's id, never the reverse
        markers[sink] = {
            "query": owner,
            "checkpoint": checkpoint if checkpoint is not None else (entry or {}).get("checkpoint"),
            "batchId": batch_id,
            "state": "pending",
            "logStart": int(entry["logStart"]) if skip else store.max_phy_offset,
            "count": sum(s.rows for s in staged),
            "queueStarts": dict(sorted(choose.starts.items())),
            "time": int(time.time() * 1000),
        }
        _write_markers(store.root, markers)
    appended = 0
    put = store.put_as_is if as_is else store.put
    copies: Counter[int] = Counter()  # as_is: the delivered copies the batch brings (export.delivered_copy_key)
    units = False  # as_is: the batch brings schedule units (their copies may be in the store already)
    try:
        for i, (message, queue_id) in enumerate(_messages(staged, as_is)):
            qid = choose(message.topic) if queue_id is None else queue_id
            if i >= skip:
                result = put(message, qid)
                if not result.ok:
                    raise InvalidMessageError(f"message {i}: {result.refusal}")
                appended += 1
            if as_is and message.topic == SCHEDULE_TOPIC:
                units = True
            elif as_is and (key := delivered_copy_key(message)) is not None:  # stored (now, or by the attempt replayed)
                copies[key] += 1
    except BaseException:
        if copies or units:  # what was stored stays stored: so do its delivered units, as an import's
            try:
                skip_delivered(store, copies)
            except Exception as error:
                log.warning("rocketstore asIs write stopped: the delay offsets were not moved: %s", error)
        raise
    store.flush()
    if copies or units:
        skip_delivered(store, copies)
    if sink is not None and batch_id is not None:
        markers[sink]["state"] = "committed"
        _write_markers(store.root, markers)
    return appended
