"""Writes: ``df.write.format("rocketstore").mode("append").save(STORE)`` and streaming writes.

A store has one writer, so tasks never touch it: each task checks its rows (every message is
built and validated as ``store.put`` would take it) and stages them in an Arrow file of the job's
staging folder. Only when every task succeeded does the driver take the store's lock and append
the staged messages in task order. A batch write is atomic against failed tasks and failed jobs:
a job with a failed task, a refused row, or a commit refused before its first put (no space, no
turn within ``lockWaitMs``) is aborted and leaves no message behind. It is not atomic against
its driver being killed during the commit's append (nor a put failing part-way, a failing
disk): nothing takes back the messages appended so far (9,737 of 200,000 in one measured case),
and a batch write keeps no marker, so running the job again appends all of its rows again:
at-least-once on a re-run. Streaming writes land each micro-batch exactly once (below). Either
way the job's staged files are deleted once it is committed or aborted (see ``_Writer._discard``).
A job whose driver is killed is neither: its folder names the driver process, and the next job
staging beside it removes the folder once that process is gone (``staging``).
Streaming writes add a write-ahead marker per micro-batch (see ``commits``), which makes each
batch land exactly once even across restarts and crashes.

Columns: ``topic`` (or the ``topic`` option) and ``body`` (binary or string) are required;
``queueId`` and ``flag`` (tinyint, smallint, int or bigint), ``tags``, ``keys`` (a string or an
array of strings, whose nulls are dropped) and ``properties`` (a map of strings) are optional;
other columns are not written (one named as these but for its case is refused: Spark matches names
case-insensitively, the sink exactly). Types are checked by kind: a string of any collation is a string,
and an empty ``array()`` literal (array<void>) is an array of strings. A column of another type
(a double queueId among them) is refused on the driver. Rows without a queueId go round-robin
over the topic's write queues, going on across jobs and micro-batches (see ``commits``).

``asIs=true`` copies rows as they were (a DataFrame read from a store, unchanged): each is made
into the message ``rocketstore import`` makes of an export line (``message_from_fields``, after
the import's ``check_int_fields``) and stored with ``put_as_is``. It also takes
``bornTimestamp`` (timestamp, or integral ms), ``bornHost`` and ``storeHost`` (strings),
``sysFlag``, ``reconsumeTimes`` and ``preparedTransactionOffset`` (integral; ``AS_IS_TYPES``),
ignored without it. The sysFlag's producer bits are kept and a compressed body stays compressed;
DELAY is kept without delaying, a SCHEDULE_TOPIC_XXXX row is a unit of its queueId's queue (required), and
UNIQ_KEY is kept. The commit opens the store under ``no_delayed_delivery`` and afterwards moves
the delay offsets past the units whose delivered copy was written (``export.skip_delivered``),
as the import does (``commits.append_staged``).

Several jobs or streaming queries may write one store at once: their commits take turns, each
waiting up to the ``lockWaitMs`` option (default 60000) for the others. A store another program
holds open (a broker) is refused on the driver before any task runs, and so are a setting a
writable store refuses (``config_values.refuse_unsupported``: ``enableDLegerCommitLog``, ...),
``brokerRole=SLAVE`` (a SLAVE store takes no puts), files of other sizes than the settings give
(CorruptStoreError naming every setting to give) and a store whose recovery would cut the log where
intact records follow (CorruptStoreError, as ``rocketstore produce`` refuses it; the commit
refuses it too, nothing changed).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from rocketstore.codec.message import Message, join_keys
from rocketstore.codec.message_json import check_int_fields, message_from_fields
from rocketstore.codec.sysflag import COMPRESSED_FLAG, decompress
from rocketstore.codec.topic import SCHEDULE_TOPIC, send_refusal
from rocketstore.config import StoreConfig
from rocketstore.config_values import refuse_unsupported
from rocketstore.errors import ConfigError, InvalidArgumentError, InvalidMessageError, InvalidTopicError, RecordError
from rocketstore.meta.root import holds_store, require_store_or_new_folder
from rocketstore.prepare import MessagePreparer
from rocketstore.spark import commit_turn, commits
from rocketstore.spark.schema import flag_option, int_option, option, store_config, store_path
from rocketstore.spark.staging import OWNER, claim_folder, driver_tag, sweep_staging
from rocketstore.verify.layout import check_sizes
from rocketstore.verify.recovery_plan import cut_refused, plan_recovery

log = logging.getLogger(__name__)
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # the local property Spark sets to the streaming query's id

STAGED = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("queueId", pa.int32()),
        pa.field("tags", pa.string()),
        pa.field("keys", pa.string()),
        pa.field("properties", pa.map_(pa.string(), pa.string())),
        pa.field("body", pa.binary()),
        pa.field("flag", pa.int32()),
        # asIs only (null otherwise): staged wide, the import's range checks refuse them by name
        pa.field("bornTimestamp", pa.int64()),  # ms
        pa.field("bornHost", pa.string()),
        pa.field("storeHost", pa.string()),
        pa.field("sysFlag", pa.int64()),
        pa.field("reconsumeTimes", pa.int64()),
        pa.field("preparedTransactionOffset", pa.int64()),
    ]
)
AS_IS_COLUMNS = ("bornTimestamp", "bornHost", "storeHost", "sysFlag", "reconsumeTimes", "preparedTransactionOffset")


def _string(dt: Any) -> bool:
    """A string of any collation (``string collate UTF8_LCASE``), char(n) or varchar(n)."""
    from pyspark.sql.types import CharType, StringType, VarcharType

    return isinstance(dt, (StringType, CharType, VarcharType))


def _null(dt: Any) -> bool:
    from pyspark.sql.types import NullType

    return isinstance(dt, NullType)


def _integral(dt: Any) -> bool:
    """tinyint, smallint, int or bigint (a value past an int is refused by the task, by name)."""
    from pyspark.sql.types import IntegralType

    return isinstance(dt, IntegralType)


def _timestamp_or_integral(dt: Any) -> bool:
    """A timestamp (as the read source gives ``bornTimestamp``), or ms since the epoch."""
    from pyspark.sql.types import TimestampType

    return isinstance(dt, TimestampType) or _integral(dt)


def _binary_or_string(dt: Any) -> bool:
    from pyspark.sql.types import BinaryType

    return isinstance(dt, BinaryType) or _string(dt)


def _keys(dt: Any) -> bool:
    """A string, or an array of strings (``array()``, an array<void>, is an empty one)."""
    from pyspark.sql.types import ArrayType

    return _string(dt) or (isinstance(dt, ArrayType) and (_string(dt.elementType) or _null(dt.elementType)))


def _string_map(dt: Any) -> bool:
    from pyspark.sql.types import MapType

    return isinstance(dt, MapType) and all(_string(t) or _null(t) for t in (dt.keyType, dt.valueType))


# the Spark types each column may have (compared by kind: any collation, any integral width),
# and how the refusal names them; the tasks cast each to the staged Arrow type
WRITE_TYPES: dict[str, tuple[Any, str]] = {
    "topic": (_string, "string"),
    "body": (_binary_or_string, "binary or string"),
    "queueId": (_integral, "an integral type (tinyint, smallint, int or bigint)"),
    "tags": (_string, "string"),
    "keys": (_keys, "string or array<string>"),
    "properties": (_string_map, "map<string,string>"),
    "flag": (_integral, "an integral type (tinyint, smallint, int or bigint)"),
}
# the columns an ``asIs`` write takes besides (ignored without it)
AS_IS_TYPES: dict[str, tuple[Any, str]] = {
    "bornTimestamp": (_timestamp_or_integral, "timestamp or an integral number of ms"),
    "bornHost": (_string, "string (ip:port)"),
    "storeHost": (_string, "string (ip:port)"),
    "sysFlag": WRITE_TYPES["flag"],
    "reconsumeTimes": WRITE_TYPES["flag"],
    "preparedTransactionOffset": WRITE_TYPES["flag"],
}


def _refuse_send(topic: str) -> None:
    """InvalidMessageError for a row (or topic option) the broker would refuse a producer's send of."""
    refusal = send_refusal(topic)
    if refusal:
        raise InvalidMessageError(f"{refusal} A write is a producer's send (asIs=true stores such rows, as import)")


def check_columns(schema: Any, topic_option: str | None, as_is: bool = False) -> None:
    """Refuse, on the driver, a DataFrame without topic/body, with a column of a type the sink
    cannot write, or with one named as a column it writes but for its case (InvalidMessageError
    naming the column); a null-typed column is all nulls. The ``asIs`` columns (``AS_IS_TYPES``)
    are checked only when they are written."""
    types = {**WRITE_TYPES, **AS_IS_TYPES} if as_is else WRITE_TYPES
    if topic_option and not as_is:
        _refuse_send(topic_option)
    names = set(schema.fieldNames())
    ours = {name.lower(): name for name in types}
    for name in names - set(types):  # Spark matches names case-insensitively, the sink exactly
        if (known := ours.get(name.lower())) is not None:
            raise InvalidMessageError(
                f"column {name!r} is not rocketstore's {known!r} (names are matched exactly, and a column of "
                "another name is not written)"
            )
    if "body" not in names or ("topic" not in names and not topic_option):
        raise InvalidMessageError("writing to rocketstore needs topic and body columns (topic may be an option)")
    for field in schema.fields:
        rule = types.get(field.name)
        if rule is None or _null(field.dataType) or (field.name == "topic" and topic_option):
            continue
        accepts, wanted = rule
        if not accepts(field.dataType):
            kind = field.dataType.simpleString()
            raise InvalidMessageError(f"column {field.name!r} is {kind}: rocketstore writes it from {wanted}")


def default_staging(store: str) -> str:
    """Next to the store, not in it: a write job changes nothing in the store until it commits."""
    parent, name = os.path.split(os.path.abspath(store))
    return os.path.join(parent, f".{name}.spark-staging")


def stream_job(store: str, checkpoint: str) -> str:
    """The job folder of a streaming write to ``store``, named after its checkpoint
    (``commits.checkpoint_binding``) and its driver (``staging.driver_tag``). Spark stages every
    micro-batch with the writer it made when the query started, but commits or aborts each with a
    writer it makes anew: a random name would differ between them, and the committing one could
    not find what the tasks staged."""
    digest = hashlib.sha256(f"{os.path.abspath(store)}\0{checkpoint}".encode()).hexdigest()
    return f"stream-{digest[:32]}{driver_tag()}"


@dataclass
class Staged(WriterCommitMessage):
    """What one task staged: its file, how many messages it holds, and (a streaming write) the
    id of the query, which Spark gives every task of it."""

    partition: int
    path: str
    rows: int
    query: str | None = None


def _normalize(batch: pa.RecordBatch, topic_option: str | None, as_is: bool = False) -> pa.RecordBatch:
    """The incoming columns as the staged schema (missing optional columns are nulls; the
    ``AS_IS_COLUMNS`` are nulls unless ``as_is``)."""
    names = batch.schema.names
    n = batch.num_rows

    def column(name: str) -> pa.Array | None:
        if name in AS_IS_COLUMNS and not as_is:
            return None
        return batch.column(name) if name in names else None

    topic = column("topic")
    if topic_option:
        topic = pa.array([topic_option] * n, pa.string())
    if topic is None:
        raise ValueError("writing to rocketstore needs a topic column (or the topic option)")
    body = column("body")
    if body is None:
        raise ValueError("writing to rocketstore needs a body column (binary or string)")
    if not as_is:  # as is, a compressed body stays compressed, with its sysFlag saying so
        body = _decompressed(body, batch.column("sysFlag") if "sysFlag" in names else None)
    keys = column("keys")
    if keys is not None and pa.types.is_list(keys.type):
        keys = pa.array([None if k is None else _joined(k) for k in keys.to_pylist()], pa.string())
    out = []
    for field in STAGED:
        value = {"topic": topic, "body": body, "keys": keys}.get(field.name, column(field.name))
        if field.name == "bornTimestamp" and value is not None:
            value = _epoch_ms(value)
        if value is None:
            value = pa.nulls(n, field.type)
        elif not value.type.equals(field.type):
            try:
                value = pc.cast(value, field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:  # a bigint queueId past 2**31-1
                raise InvalidMessageError(f"column {field.name!r}: {exc}") from None
        out.append(value)
    return pa.RecordBatch.from_arrays(out, schema=STAGED)


def _epoch_ms(value: pa.Array) -> pa.Array:
    """A timestamp column as ms since the epoch (a finer one cut to the ms); numbers as they are."""
    if not pa.types.is_timestamp(value.type):
        return value
    raw = pc.cast(value, pa.int64())
    per_ms = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}[value.type.unit]
    if per_ms is None:
        return pc.multiply(raw, 1000)
    if per_ms == 1:
        return raw
    cut = pc.divide(raw, per_ms)  # toward zero: one before 1970 with a fraction goes a ms down
    return pc.subtract(cut, pc.cast(pc.greater(pc.multiply(cut, per_ms), raw), pa.int64()))


def _decompressed(body: pa.Array, sys_flag: pa.Array | None) -> pa.Array:
    """The bodies a ``sysFlag`` column (a DataFrame read from a store) marks compressed, as their
    producer wrote them: a write stores the body it is given without that flag, so a compressed
    one reached consumers as compressed bytes."""
    if sys_flag is None or not pa.types.is_integer(sys_flag.type) or pa.types.is_string(body.type):
        return body
    marked = pc.not_equal(pc.bit_wise_and(sys_flag, pa.scalar(COMPRESSED_FLAG, sys_flag.type)), 0)
    if not pc.any(marked).as_py():
        return body
    try:
        out = [
            decompress(b, f) if b is not None and f is not None and f & COMPRESSED_FLAG else b
            for b, f in zip(body.to_pylist(), sys_flag.to_pylist(), strict=True)
        ]
    except RecordError as exc:
        raise InvalidMessageError(f"column body (sysFlag marks it compressed): {exc}") from None
    return pa.array(out, body.type)


def _joined(keys: list[str | None]) -> str | None:
    """A keys array as KEYS, its null elements dropped (None if none is left); InvalidMessageError
    for a key ``Message`` refuses in a list (empty, or with a space: it would read back as two)."""
    try:
        return join_keys([k for k in keys if k is not None]) or None
    except InvalidMessageError as exc:
        raise InvalidMessageError(f"column 'keys': {exc}") from None


def _values(column: pa.Array, name: str) -> Iterable[Any]:
    """A column's values as Python objects; text that is not UTF-8 (Spark does not check strings)
    is InvalidMessageError at its own row, so that the caller names it."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        return _one_by_one(column, name)


def _one_by_one(column: pa.Array, name: str) -> Iterator[Any]:
    for value in column:
        try:
            yield value.as_py()
        except UnicodeDecodeError as exc:
            raise InvalidMessageError(f"column {name!r}: text that is not UTF-8 ({exc.reason})") from None


def messages_of(batch: pa.RecordBatch, as_is: bool = False) -> Iterator[tuple[Message, int | None]]:
    """(message, queue id or None) for each staged row; InvalidMessageError for a row the store
    would refuse. ``as_is``: the message ``rocketstore import`` makes of the row as an export
    line (``message_from_fields``, after the import's range checks), keeping born time, hosts,
    producer sysFlag bits, reconsume times and prepared offset."""
    columns = [_values(batch.column(i), batch.schema.names[i]) for i in range(batch.num_columns)]
    for topic, queue_id, tags, keys, props, body, flag, *extra in zip(*columns, strict=True):
        if topic is None or body is None:
            raise InvalidMessageError("topic and body may not be null")
        properties = dict(props) if props else None  # (a map column's pairs)
        if properties is not None and len(properties) != len(props):
            names = [name for name, _value in props]
            twice = next(name for name in names if names.count(name) > 1)
            raise InvalidMessageError(f"column 'properties': property {twice!r} is given twice")
        if as_is:
            if topic == SCHEDULE_TOPIC and queue_id is None:  # its queue is its delay level's: no round-robin
                raise InvalidMessageError(f"a {SCHEDULE_TOPIC} row needs its queueId (its delay level - 1)")
            fields = dict(zip(AS_IS_COLUMNS, extra, strict=True))
            obj = {"topic": topic, "queueId": queue_id, "tags": tags, "keys": keys, "flag": flag, **fields}
            obj["properties"] = properties or {}
            check_int_fields(obj)
            yield message_from_fields(obj, body), queue_id
            continue
        _refuse_send(topic)
        yield (
            Message(topic, body, tags=tags, keys=keys, properties=properties, flag=flag or 0),
            queue_id,
        )


class _Writer:
    """The shared part of batch and streaming writers (pickled to every task).

    Only the driver makes a job's folder and records its ``OWNER`` in it, after removing the
    folders of jobs whose driver was killed (``sweep_staging``); tasks only write part files."""

    keeps_folder = False  # a streaming query's folder (and its OWNER) stays between micro-batches

    def __init__(self, options: Any, schema: Any, overwrite: bool) -> None:
        if overwrite:
            raise InvalidArgumentError("rocketstore appends messages: use mode('append'); a store is never overwritten")
        self.path = os.path.abspath(store_path(options))
        self.config: StoreConfig = store_config(options)
        require_store_or_new_folder(self.path, self.config)  # on the driver, before any task runs
        refuse_unsupported(self.config)  # as the commit's writable open would, after every task staged
        if self.config.broker_role == "SLAVE":  # as every put of the commit would be
            raise ConfigError("brokerRole=SLAVE: a SLAVE store takes no puts (SERVICE_NOT_AVAILABLE)")
        try:
            wait = int_option(options, "lockWaitMs", commits.DEFAULT_LOCK_WAIT_MS)
        except InvalidArgumentError:  # not an integer: a bad option, as a negative one
            wait = None
        if wait is None or wait < 0:
            raise ConfigError(f"option lockWaitMs must be an integer from 0, not {option(options, 'lockWaitMs')!r}")
        self.lock_wait_ms = wait
        commit_turn.check_unheld(self.path)  # a broker has it open: refused before any task runs
        self.topic = option(options, "topic")
        self.as_is = flag_option(options, "asIs", False)
        self.staging_root = os.path.abspath(option(options, "stagingDir") or default_staging(self.path))
        self._set_job(uuid.uuid4().hex)
        check_columns(schema, self.topic, self.as_is)
        self._check_store()

    def _check_store(self) -> None:
        """Refuse, before any task runs, a store the commit's open would refuse after they all ran: a
        store's files of other sizes than the settings give (every setting to give named at once, as the
        command line names them: ``check_sizes``), and a recovery that would drop intact records
        (``recovery_plan.cut_refused``). Records a Spark commit appended while the plan was made would
        look like ones the recovery drops: such a plan is made again in the commits' turn. The commit
        checks again (the store may change meanwhile)."""
        rooted = self.config.copy(storePathRootDir=self.path)
        if not holds_store(self.path, rooted.commit_log_folders):
            return
        check_sizes(self.path, rooted)
        plan = plan_recovery(self.path, self.config)
        if plan.loses_data and os.path.exists(os.path.join(self.path, commit_turn.COMMIT_LOCK)):
            with commit_turn.commit_turn(self.path, self.lock_wait_ms):
                plan = plan_recovery(self.path, self.config)
        if plan.loses_data:
            raise cut_refused(plan)

    def _set_job(self, job: str) -> None:
        self.job = job
        self.staging = os.path.join(self.staging_root, job)

    def _stage(self, batches: Iterator[pa.RecordBatch], prefix: str = "") -> Staged:
        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        self._staging_folder()
        path = os.path.join(self.staging, f"{prefix}part-{part:05d}-{attempt}-{uuid.uuid4().hex[:8]}.arrow")
        try:
            rows = self._write_staged(path, batches, part)
        except FileNotFoundError as exc:
            if os.path.isdir(self.staging):
                raise
            raise FileNotFoundError(
                f"{self.staging}: the job's staging folder is gone: the job was aborted, or the stagingDir "
                "option names a folder the driver and the executors do not share"
            ) from exc
        except BaseException:  # a failed task leaves nothing staged (its job is aborted)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        if not os.path.isdir(self.staging):  # the job was aborted while this task ran
            with contextlib.suppress(OSError):
                os.unlink(path)
        query = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
        return Staged(part, path, rows, query or None)

    def _staging_folder(self) -> None:
        """Make the job's staging folder (a task of a streaming write: see ``BatchWriter``)."""
        os.makedirs(self.staging, exist_ok=True)

    def _write_staged(self, path: str, batches: Iterator[pa.RecordBatch], part: int) -> int:
        rows = 0
        check = MessagePreparer(self.config).check  # the put's own checks: refuse what the store would
        schedule = not self.as_is  # a put_as_is keeps a DELAY without delaying
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, STAGED) as out:
            for batch in batches:
                staged = _normalize(batch, self.topic, self.as_is)
                messages = messages_of(staged, self.as_is)
                for i in range(rows, rows + staged.num_rows):
                    try:
                        message, queue_id = next(messages)
                        # a queue the driver chooses is checked as queue 0 (commits.check_chosen_queues)
                        refused = check(message, 0 if queue_id is None else queue_id, schedule=schedule)
                    except (InvalidMessageError, InvalidTopicError) as exc:  # a null or bad topic, an asIs field
                        kind = InvalidTopicError if isinstance(exc, InvalidTopicError) else InvalidMessageError
                        raise kind(f"row {i} of partition {part}: {exc}") from None
                    if refused is not None:
                        raise InvalidMessageError(
                            f"row {i} of partition {part} ({message.topic}): the store refuses it: {refused.refusal}"
                        )
                out.write_batch(staged)
                rows += staged.num_rows
        return rows

    def _discard(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete what the job staged, once its commit is over (done or failed) or it is aborted:
        the files its tasks report, then the job's folder with whatever else is in it (a file a
        failed or killed task left; a streaming query's folder stays, holding its ``OWNER``), then
        the staging folder when no other job stages there. A job whose driver is killed runs
        none of this: the next job staging beside it removes its folder (``sweep_staging``).

        No later commit needs any of it: a commit reads only the files its own tasks report, and
        a batch Spark runs again (after a failure or a crash, between staging and commit or during
        the append) is staged again by its new tasks; the marker in the store (``commits``), not
        the staged files, tells what of it is already in. A streaming job's folder is its
        query's (``stream_job``), and Spark runs one micro-batch of a query at a time."""
        folders = {self.staging}
        for m in messages:
            if isinstance(m, Staged):
                with contextlib.suppress(OSError):
                    os.unlink(m.path)
                folders.add(os.path.dirname(m.path))
        for folder in sorted(folders):
            if folder == self.staging and self.keeps_folder:
                self._empty(folder)
            elif folder == self.staging:
                shutil.rmtree(folder, ignore_errors=True)
            else:  # reported from another folder (never, with this version's tasks): only if emptied
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
        for root in sorted({os.path.dirname(f) for f in folders}):
            with contextlib.suppress(OSError):
                os.rmdir(root)  # only when no other job stages there

    @staticmethod
    def _empty(folder: str) -> None:
        """Delete what is in a streaming query's folder but its ``OWNER`` record."""
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in list(entries):
                if entry.name == OWNER:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)


class BatchWriter(_Writer, DataSourceArrowWriter):
    """The job's staging folder is made here, on the driver, before any task runs, and never by
    a task: a task Spark started just before the job was aborted, whose staging comes after the
    abort deleted the folder, then fails instead of leaving its file behind."""

    def __init__(self, options: Any, schema: Any, overwrite: bool) -> None:
        super().__init__(options, schema, overwrite)
        sweep_staging(self.staging_root, keep=self.staging)
        claim_folder(self.staging)

    def _staging_folder(self) -> None:
        pass

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self._stage(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        try:
            staged = sorted((m for m in messages if isinstance(m, Staged)), key=lambda m: m.partition)
            commits.append_staged(
                self.path,
                self.config,
                staged,
                sink=None,
                batch_id=None,
                lock_wait_ms=self.lock_wait_ms,
                as_is=self.as_is,
            )
        finally:
            self._discard(messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._discard(messages)


class StreamWriter(_Writer, DataSourceStreamArrowWriter):
    """Each micro-batch is committed once: see ``commits`` for the write-ahead marker and how a
    sink is bound to its query.

    The query's staging folder (``stream_job``) stays between micro-batches with its ``OWNER``
    record (the driver names itself again at each commit); what each batch staged is deleted. A
    task makes the folder again if it is gone: no driver code runs before a micro-batch's tasks."""

    keeps_folder = True

    def __init__(self, options: Any, schema: Any, overwrite: bool) -> None:
        super().__init__(options, schema, overwrite)
        self.sink_id = option(options, "sinkId")
        # the query's id when the checkpoint is local (else the tasks report it), and the checkpoint
        self.query, self.checkpoint = commits.checkpoint_query(options)
        # the same folder for the writer whose tasks stage and the one that commits (stream_job)
        self._set_job(stream_job(self.path, self.checkpoint))
        sink = self.sink_id or self.query
        if sink is not None:  # before any task runs, when the query is known here
            commits.check_owner(commits.read_markers(self.path), sink, self.query, self.checkpoint)
        sweep_staging(self.staging_root, keep=self.staging)
        claim_folder(self.staging)  # at the query's start and again at each commit (a new writer)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self._stage(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        try:
            staged = sorted((m for m in messages if isinstance(m, Staged)), key=lambda m: m.partition)
            query = next((f"query:{m.query}" for m in staged if m.query), self.query)
            if query is None and not any(m.rows for m in staged):
                # no task ran and the checkpoint cannot be read here: nothing to write, and no
                # query to bind the sink to (the marker stays as it is; a replay is empty too)
                return
            query = query or self.checkpoint  # a Spark whose tasks do not get the query id
            commits.append_staged(
                self.path,
                self.config,
                staged,
                sink=self.sink_id or query,
                batch_id=batchId,
                query=query,
                checkpoint=self.checkpoint,
                lock_wait_ms=self.lock_wait_ms,
                as_is=self.as_is,
            )
        finally:
            self._discard(messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._discard(messages)
