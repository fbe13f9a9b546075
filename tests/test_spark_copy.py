"""Copying a store with Spark as it is: ``write.option("asIs", "true")`` keeps what a put sets
(born time and host, store host, reconsume times, producer sysFlag bits, prepared offset),
stores delayed messages without delaying them, delivers none during the append, and moves the
delay offsets past the units whose delivered copy it wrote, as ``rocketstore import`` does."""

from __future__ import annotations

import base64
import json
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore
from rocketstore.codec.sysflag import COMPRESSED_FLAG
from rocketstore.codec.topic import SCHEDULE_TOPIC
from rocketstore.spark.commits import MARKER, read_markers
from spark_conftest import (
    SMALL_OPTIONS,
    export_rows,
    small_config,
    spark,  # noqa: F401 - the session fixture
)

pytestmark = pytest.mark.spark

LEVELS = "1s 1h"  # level 1 is delivered in the source, level 2 waits there
OPTIONS = {**SMALL_OPTIONS, "messageDelayLevel": LEVELS}
KEPT = (
    *("topic", "queueId", "queueOffset", "body", "flag", "sysFlag", "properties", "bornTimestamp"),
    *("bornHost", "storeHost", "reconsumeTimes", "preparedTransactionOffset"),
)


def _source(path: Path) -> Path:
    """Plain, tagged and keyed, compressed, delayed and delivered, delayed and waiting (level 2,
    an hour), retried (delivered to %RETRY%G) and dead-lettered messages."""
    with MessageStore.open(path, small_config(messageDelayLevel=LEVELS)) as store:
        service = store.services.schedule
        service.stop()  # delivered below, when asked
        store.put(Message("TopicA", b"plain"), 0).raise_for_status()
        tagged = store.put(
            Message("TopicA", b"tagged", tags="TagA", keys=["k1", "k2"], properties={"p": "v"}, flag=7), 1
        )
        zipped = Message("TopicB", zlib.compress(b"squeezed " * 20), sys_flag=COMPRESSED_FLAG)
        store.put(zipped, 2).raise_for_status()
        store.put(Message("TopicB", b"soon", properties={"DELAY": "1"}), 3).raise_for_status()
        store.put(Message("TopicB", b"later", properties={"DELAY": "2"}), 0).raise_for_status()
        store.wait_for_dispatch()
        first = store.get_message("G", "TopicA", 0, 0).messages[0]
        assert store.send_back("G", first, delay_level=1).ok  # a retry, delivered at level 1
        assert store.send_back("G", tagged.commit_log_offset, delay_level=-1).ok  # to %DLQ%G
        store.wait_for_dispatch()
        assert service.run_once(now=time.time_ns() // 1_000_000 + 60_000) == 2  # level 1's two
        store.wait_for_dispatch()
    return path


def _rows(store: Path, **config: Any) -> list[dict]:
    rows = export_rows(store, small_config(messageDelayLevel=LEVELS, **config))
    return sorted(({k: r[k] for k in KEPT} for r in rows), key=lambda r: (r["topic"], r["queueId"], r["queueOffset"]))


def _bodies(rows: list[dict], topic: str) -> list[bytes]:
    return sorted(base64.b64decode(r["body"]) for r in rows if r["topic"] == topic)


def test_a_store_read_by_spark_is_copied_as_it_is(spark, tmp_path):  # noqa: F811
    source = _source(tmp_path / "source")
    want = _rows(source)
    topics = {r["topic"] for r in want}
    assert {"%RETRY%G", "%DLQ%G", SCHEDULE_TOPIC} <= topics
    assert any(r["sysFlag"] & COMPRESSED_FLAG for r in want)
    assert any(r["reconsumeTimes"] for r in want)
    copy = tmp_path / "copy"
    df = spark.read.format("rocketstore").options(**OPTIONS).load(str(source))
    df.write.format("rocketstore").options(**OPTIONS).option("asIs", "true").mode("append").save(str(copy))
    got = _rows(copy)
    for g, w in zip(got, want, strict=False):
        assert g == w, {k: (g[k], w[k]) for k in KEPT if g[k] != w[k]}
    assert len(got) == len(want)
    # the copy's delay offsets: past level 1's two units (their copies were written), not level 2's
    with MessageStore.open(copy, small_config(messageDelayLevel=LEVELS), read_only=True) as store:
        assert (store.delay_offsets.get(1), store.delay_offsets.get(2)) == (2, 0)

    # opened with level 2 short and delivery running, the copy delivers the waiting one only
    with MessageStore.open(copy, small_config(messageDelayLevel="1s 1s")) as store:
        service = store.services.schedule
        assert service is not None
        assert service.wait_delivered(1, 30)
        store.wait_for_dispatch()
        assert service.delivered == 1
    after = _rows(copy)
    assert _bodies(after, "TopicB") == sorted([zlib.compress(b"squeezed " * 20), b"soon", b"later"])
    assert len(after) == len(want) + 1
    assert _bodies(after, "%RETRY%G") == [b"plain"]  # the retry delivered in the source, not again


def test_an_as_is_copy_written_in_parts_skips_the_delivered_units(spark, tmp_path):  # noqa: F811
    """The messages first, the schedule units in a later job: that job brings no copies, and the
    units whose copies the first one wrote are still past the delay offsets."""
    source = _source(tmp_path / "source")
    copy = tmp_path / "copy"
    df = spark.read.format("rocketstore").options(**OPTIONS).load(str(source))
    for part in (f"topic != '{SCHEDULE_TOPIC}'", f"topic = '{SCHEDULE_TOPIC}'"):
        writer = df.where(part).write.format("rocketstore").options(**OPTIONS).option("asIs", "true")
        writer.mode("append").save(str(copy))
    assert _rows(copy) == _rows(source)
    with MessageStore.open(copy, small_config(messageDelayLevel=LEVELS), read_only=True) as store:
        assert (store.delay_offsets.get(1), store.delay_offsets.get(2)) == (2, 0)


def test_an_as_is_copy_takes_no_transaction_half_for_a_delivered_copy(spark, tmp_path):  # noqa: F811
    """A row of the real topic with a waiting unit's UNIQ_KEY is its delivered copy only when it
    is queued: a COMMIT row moves the level's offset past the unit, a PREPARED one (a half
    message, never served) does not, and the unit is still delivered."""
    from pyspark.sql import functions as F

    source = _source(tmp_path / "source")
    df = spark.read.format("rocketstore").options(**OPTIONS).load(str(source))
    waiting = df.where(f"topic = '{SCHEDULE_TOPIC}' AND queueId = 1")  # level 2's unit ("later")
    for flag, offset in ((8, 1), (4, 0)):
        twin = waiting.withColumn("topic", F.lit("TopicB")).withColumn("queueId", F.lit(0))
        twin = twin.withColumn("sysFlag", F.lit(flag).cast(df.schema["sysFlag"].dataType))
        copy = tmp_path / f"copy{flag}"
        writer = df.unionByName(twin).write.format("rocketstore").options(**OPTIONS).option("asIs", "true")
        writer.mode("append").save(str(copy))
        with MessageStore.open(copy, small_config(messageDelayLevel=LEVELS), read_only=True) as store:
            assert (store.delay_offsets.get(1), store.delay_offsets.get(2)) == (2, offset), flag


def test_without_as_is_a_write_is_a_producer_s_send(spark, tmp_path):  # noqa: F811
    """Unchanged: the delivered delayed message still carries DELAY and is delayed again, and the
    asIs columns are ignored (the store sets born time, hosts and reconsume times)."""
    source = _source(tmp_path / "source")
    copy = tmp_path / "copy"
    df = spark.read.format("rocketstore").options(**OPTIONS).load(str(source)).where("topic = 'TopicB'")
    df.write.format("rocketstore").options(**OPTIONS).mode("append").save(str(copy))
    rows = export_rows(copy, small_config(messageDelayLevel=LEVELS))
    assert _bodies(rows, "TopicB") == [b"squeezed " * 20]  # written decompressed
    delayed = [r for r in rows if r["topic"] == SCHEDULE_TOPIC]
    assert [base64.b64decode(r["body"]) for r in delayed] == [b"soon"]  # delivered in the source
    assert {r["properties"]["REAL_TOPIC"] for r in delayed} == {"TopicB"}
    born = {r["bornTimestamp"] for r in _rows(source) if r["topic"] == "TopicB"}
    assert not born & {r["bornTimestamp"] for r in rows}


def _stream(spark: Any, source: Path, sink: Path, checkpoint: Path) -> None:  # noqa: F811
    query = (
        spark.readStream.format("rocketstore")
        .options(**OPTIONS, startingOffsets="earliest")
        .load(str(source))
        .writeStream.format("rocketstore")
        .options(**OPTIONS, asIs="true", sinkId="copy", checkpointLocation=str(checkpoint))
        .trigger(availableNow=True)
        .start(str(sink))
    )
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()


def _forget_commit(checkpoint: Path, batch: int) -> None:
    """As if the query died before its checkpoint recorded ``batch`` as done."""
    for name in (str(batch), f".{batch}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)


def test_a_streaming_as_is_write_lands_each_row_once_across_restarts(spark, tmp_path):  # noqa: F811
    source = _source(tmp_path / "source")
    want = _rows(source)
    sink, checkpoint = tmp_path / "sink", tmp_path / "ckpt"
    _stream(spark, source, sink, checkpoint)
    assert _rows(sink) == want
    markers = read_markers(str(sink))
    last = markers["copy"]["batchId"]

    _forget_commit(checkpoint, last)  # the sink committed, the checkpoint did not: skipped
    _stream(spark, source, sink, checkpoint)
    assert _rows(sink) == want

    # the messages were appended but the marker still says pending: the replay matches them as
    # put_as_is stored them (DELAY kept, in their own topic, compressed body as is)
    markers["copy"]["state"] = "pending"
    (sink / MARKER).write_text(json.dumps(markers))
    _forget_commit(checkpoint, last)
    _stream(spark, source, sink, checkpoint)
    assert _rows(sink) == want
    assert read_markers(str(sink))["copy"]["state"] == "committed"
    with MessageStore.open(sink, small_config(messageDelayLevel=LEVELS), read_only=True) as store:
        assert (store.delay_offsets.get(1), store.delay_offsets.get(2)) == (2, 0)


def test_as_is_columns_are_checked_on_the_driver_and_bad_values_fail_the_job(spark, tmp_path, hash_tree):  # noqa: F811
    store, refused = tmp_path / "store", tmp_path / "refused"
    for sql, column in (
        ("select 'TopicA' topic, 'b' body, 'yesterday' bornTimestamp", "'bornTimestamp' is string"),
        ("select 'TopicA' topic, 'b' body, 1.5 sysFlag", "'sysFlag' is decimal"),
        ("select 'TopicA' topic, 'b' body, 7 bornHost", "'bornHost' is int"),
        ("select 'TopicA' topic, 'b' body, 1.0D reconsumeTimes", "'reconsumeTimes' is double"),
    ):
        df = spark.sql(sql)
        with pytest.raises(Exception, match=f"InvalidMessageError: column {column}"):
            df.write.format("rocketstore").options(**OPTIONS).option("asIs", "true").mode("append").save(str(refused))
        assert not refused.exists()  # refused before any task ran
        df.write.format("rocketstore").options(**OPTIONS).mode("append").save(str(store))  # ignored without asIs
    assert len(export_rows(store, small_config())) == 4
    with pytest.raises(Exception, match="option asIs must be true or false"):
        spark.sql("select 'TopicA' topic, 'b' body").write.format("rocketstore").options(**OPTIONS).option(
            "asIs", "yes"
        ).mode("append").save(str(store))

    before = hash_tree(store)
    for bad, names, reason in (
        ("cast(4294967296 as bigint) sysFlag", ["sysFlag"], "sysFlag 4294967296 is out of range"),
        ("-1 reconsumeTimes, '' bornHost", ["reconsumeTimes", "bornHost"], "bornHost must be an ip:port string"),
        ("'x' tags, map('TAGS', 'y') properties", ["tags", "properties"], 'tags "x" does not agree'),
        ("'nohost' bornHost", ["bornHost"], "not a host address"),
    ):
        ok = "select 'TopicA' topic, 'ok' body" + "".join(f", null {n}" for n in names)
        df = spark.sql(f"{ok} union all select 'TopicA' topic, 'bad' body, {bad}").coalesce(1)
        with pytest.raises(Exception, match=f"row 1 of partition 0: .*{reason}"):
            df.write.format("rocketstore").options(**OPTIONS).option("asIs", "true").mode("append").save(str(store))
        assert hash_tree(store) == before
    df = spark.sql("select 'TopicA' topic, 'ok' body union all select 'bad topic!' topic, 'x' body").coalesce(1)
    for as_is in ("true", "false"):
        with pytest.raises(Exception, match="InvalidTopicError: row 1 of partition 0: the topic 'bad topic!'"):
            df.write.format("rocketstore").options(**OPTIONS).option("asIs", as_is).mode("append").save(str(store))
        assert hash_tree(store) == before


def _staged_as_is(path: Path, rows: list[dict]) -> Any:
    """Rows staged as an asIs write task stages them."""
    import pyarrow as pa

    from rocketstore.spark.sink import STAGED, Staged

    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, STAGED) as out:
        out.write_batch(pa.RecordBatch.from_pylist(rows, schema=STAGED))
    return Staged(0, str(path), len(rows))


def test_a_copy_the_commit_fails_to_store_does_not_move_its_unit_s_delay_offset(tmp_path):
    """An asIs commit that stops at a row the store refuses moves the delay offsets past the units
    whose delivered copy it stored, not past the unit whose copy it could not store."""
    from rocketstore.errors import InvalidMessageError
    from rocketstore.spark.commits import append_staged

    config = small_config(messageDelayLevel=LEVELS, maxMessageSize=1000)
    unit = {"DELAY": "1", "REAL_TOPIC": "TopicT", "REAL_QID": "0", "UNIQ_KEY": "u1"}
    rows = [
        {"topic": SCHEDULE_TOPIC, "queueId": 0, "body": b"x", "properties": unit},
        {"topic": "TopicT", "queueId": 0, "body": b"x" * 2000, "properties": {"UNIQ_KEY": "u1"}},  # refused: too big
    ]
    with pytest.raises(InvalidMessageError, match="message 1"):
        append_staged(str(tmp_path / "copy"), config, [_staged_as_is(tmp_path / "a.arrow", rows)], sink=None,
                      batch_id=None, as_is=True)  # fmt: skip
    with MessageStore.open(tmp_path / "copy", config, read_only=True) as copy:
        assert copy.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 1
        assert copy.get_max_offset_in_queue("TopicT", 0) == 0
        assert copy.delay_offsets.get(1) == 0  # its copy is not in the store: the unit is delivered later


def test_an_as_is_schedule_row_needs_its_queue_id():
    """A schedule unit's queue is its delay level's: an asIs row of SCHEDULE_TOPIC_XXXX without a
    queueId is refused, not sent round-robin into other levels' queues."""
    import pyarrow as pa

    from rocketstore.errors import InvalidMessageError
    from rocketstore.spark.sink import STAGED, messages_of

    row = {"topic": SCHEDULE_TOPIC, "body": b"x", "properties": {"DELAY": "1", "REAL_TOPIC": "T", "REAL_QID": "0"}}
    batch = pa.RecordBatch.from_pylist([row], schema=STAGED)
    with pytest.raises(InvalidMessageError, match="needs its queueId"):
        list(messages_of(batch, as_is=True))
    assert [q for _m, q in messages_of(pa.RecordBatch.from_pylist([{**row, "queueId": 0}], schema=STAGED), True)] == [0]


def test_staged_rows_with_bad_text_or_a_property_twice_are_refused_by_row():
    """A properties map giving one name twice (Parquet or Arrow data can) kept its last value in
    silence; text that is not UTF-8 (Spark does not check strings) failed the task with a bare
    UnicodeDecodeError naming neither row nor column. Both are InvalidMessageError, raised at the
    row, so the task names it."""
    import pyarrow as pa

    from rocketstore.errors import InvalidMessageError
    from rocketstore.spark.sink import STAGED, messages_of

    twice = pa.array([[("k", "first"), ("k", "second")]], pa.map_(pa.string(), pa.string()))
    rows = pa.RecordBatch.from_pylist([{"topic": "T", "body": b"x"}], schema=STAGED)
    batch = rows.set_column(STAGED.get_field_index("properties"), "properties", twice)
    with pytest.raises(InvalidMessageError, match="property 'k' is given twice"):
        list(messages_of(batch))
    bad = pa.Array.from_buffers(
        pa.string(),
        2,
        [None, pa.py_buffer(b"\x00\x00\x00\x00\x01\x00\x00\x00\x03\x00\x00\x00"), pa.py_buffer(b"ok\xc0")],
    )
    two = pa.RecordBatch.from_pylist([{"topic": "T", "body": b"x"}] * 2, schema=STAGED)
    batch = two.set_column(STAGED.get_field_index("tags"), "tags", bad)
    messages = messages_of(batch)
    assert next(messages)[0].tags == "o"  # the row before it goes through
    with pytest.raises(InvalidMessageError, match="column 'tags': text that is not UTF-8"):
        next(messages)


def test_an_as_is_time_before_1970_is_cut_down_to_its_millisecond():
    """A born time of 1969-12-31 23:59:59.9995 is in millisecond -1; dividing the microseconds
    cut it toward zero, into millisecond 0 (the next one)."""
    import pyarrow as pa

    from rocketstore.spark.sink import _epoch_ms

    us = pa.array([-500, -1500, 1500, -1000], pa.timestamp("us"))
    assert _epoch_ms(us).to_pylist() == [-1, -2, 1, -1]
