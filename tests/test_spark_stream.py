"""Streaming reads: availableNow, rate limits, restarts from the checkpoint, data loss."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rocketstore import MessageStore
from rocketstore.spark.stream import from_json, rate_limit
from spark_conftest import (
    SMALL_OPTIONS,
    TOPICS,
    as_export,
    damage_record,
    export_rows,
    interleaved_store,
    make_store,
    small_config,
    sort_key,
    spark,  # noqa: F401 - the session fixture
    strip_cq,
    write_messages,
)

pytestmark = pytest.mark.spark


class Collector:
    """A foreachBatch sink (runs in this process) keeping every batch's rows."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[dict]]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        self.batches.append((batch_id, [as_export(r) for r in df.collect()]))

    @property
    def rows(self) -> list[dict]:
        return sorted((r for _, rows in self.batches for r in rows), key=sort_key)


def run_stream(spark: Any, store: Path, checkpoint: Path, trigger: dict | None = None, **options: str) -> Collector:  # noqa: F811
    sink = Collector()
    df = spark.readStream.format("rocketstore").options(**SMALL_OPTIONS, **options).load(str(store))
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**(trigger or {"availableNow": True}))
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    sink.progress = query.recentProgress  # type: ignore[attr-defined]
    return sink


def all_rows(store: Path) -> list[dict]:
    return sorted((strip_cq(r) for r in export_rows(store, small_config())), key=sort_key)


def test_rate_limit_splits_by_backlog():
    start = {("T", 0): 0, ("T", 1): 10}
    end = {("T", 0): 100, ("T", 1): 12, ("T", 2): 1}
    got = rate_limit(start, end, {("T", 2): 0}, 10)
    assert got == {("T", 0): 9, ("T", 1): 11, ("T", 2): 1}  # at least one for each queue with data
    assert rate_limit(start, end, {}, 1000) == end


def test_available_now_reads_everything_once_then_only_new(spark, tmp_path):  # noqa: F811
    store = make_store(tmp_path / "store", 240)
    checkpoint = tmp_path / "ckpt"
    first = run_stream(spark, store, checkpoint, startingOffsets="earliest")
    assert first.rows == all_rows(store)
    # more messages, one of them in a queue the query has not seen: only those are read
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 60, start=240)
        write_messages(s, 5, start=1000, topics=("NewTopic",))
        s.wait_for_dispatch()
    before = {(r["topic"], r["queueId"], r["queueOffset"]) for r in first.rows}
    second = run_stream(spark, store, checkpoint, startingOffsets="earliest")
    assert second.rows == [r for r in all_rows(store) if (r["topic"], r["queueId"], r["queueOffset"]) not in before]
    assert len(second.rows) == 65
    # nothing new: no rows at all
    assert run_stream(spark, store, checkpoint).rows == []


def test_max_offsets_per_trigger_and_latest_start(spark, tmp_path):  # noqa: F811
    store = make_store(tmp_path / "store", 300)
    sink = run_stream(spark, store, tmp_path / "ckpt", startingOffsets="earliest", maxOffsetsPerTrigger="70")
    sizes = [len(rows) for _, rows in sink.batches if rows]
    assert len(sizes) >= 4 and max(sizes) <= 70 + 12  # 12 queues: at most one extra each
    assert sink.rows == all_rows(store)
    assert [b for b, _ in sink.batches] == sorted({b for b, _ in sink.batches})
    # startingOffsets=latest (the streaming default) reads nothing that was already there
    assert run_stream(spark, store, tmp_path / "ckpt2").rows == []


def test_starting_timestamp_and_offsets_json(spark, tmp_path):  # noqa: F811
    store = make_store(tmp_path / "store", 200)
    rows = all_rows(store)
    times = sorted({r["storeTimestamp"] for r in rows})
    cut = times[len(times) // 2]
    got = run_stream(spark, store, tmp_path / "c1", startingTimestamp=str(cut), topics="TopicA").rows
    assert got == [r for r in rows if r["topic"] == "TopicA" and r["storeTimestamp"] >= cut]
    start = json.dumps({"TopicB": {"0": 5, "1": -1}})
    got = run_stream(spark, store, tmp_path / "c2", startingOffsets=start, topics="TopicB", queues="0,1").rows
    assert got == [r for r in rows if (r["topic"], r["queueId"]) == ("TopicB", 0) and r["queueOffset"] >= 5]


def test_a_tag_filter_that_leaves_no_message_gives_no_rows(spark, tmp_path):  # noqa: F811
    store = make_store(tmp_path / "store", 60)
    assert run_stream(spark, store, tmp_path / "ckpt", startingOffsets="earliest", tags="NoSuchTag").rows == []


def test_ending_options_are_refused(spark, tmp_path):  # noqa: F811
    """An option refused as the reader is made ends the query with that error last, not PySpark
    4.3's UnboundLocalError (its runner's finally stops a reader the constructor never gave)."""
    store = make_store(tmp_path / "store", 10)
    for name, value, reason in (
        ("endingOffsets", "latest", "option endingOffsets is for batch reads only"),
        ("endingTimestamp", "0", "option endingTimestamp is for batch reads only"),
        ("maxOffsetsPerTrigger", "0", "option maxOffsetsPerTrigger must be a positive"),
    ):
        with pytest.raises(Exception, match=reason) as info:
            run_stream(spark, store, tmp_path / name, startingOffsets="earliest", **{name: value})
        assert "UnboundLocalError" not in str(info.value), str(info.value)[-400:]


def test_processing_time_trigger_sees_new_messages(spark, tmp_path):  # noqa: F811
    store = make_store(tmp_path / "store", 30)
    sink = Collector()
    df = spark.readStream.format("rocketstore").options(**SMALL_OPTIONS, startingOffsets="earliest").load(str(store))
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        with MessageStore.open(store, small_config()) as s:
            write_messages(s, 40, start=30)
            s.wait_for_dispatch()
        query.processAllAvailable()
    finally:
        query.stop()
    assert sink.rows == all_rows(store)


def _trim_log(store: Path, keep: int) -> None:
    """Retention: remove every commit-log segment but the last ``keep``."""
    segments = sorted((store / "commitlog").iterdir())
    for seg in segments[:-keep]:
        seg.unlink()


def test_data_loss_fails_or_skips(spark, tmp_path):  # noqa: F811
    store = make_store(tmp_path / "store", 60)
    checkpoint = tmp_path / "ckpt"
    assert len(run_stream(spark, store, checkpoint, startingOffsets="earliest").rows) == 60
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 600, start=60)
        s.wait_for_dispatch()
    _trim_log(store, 2)  # messages the query never read are gone
    remaining = all_rows(store)
    assert len(remaining) < 600
    sink = Collector()
    df = spark.readStream.format("rocketstore").options(**SMALL_OPTIONS).load(str(store))
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    query = query.trigger(availableNow=True).start()
    with pytest.raises(Exception, match="removed from the store"):
        query.awaitTermination(120)
    assert sink.rows == []
    skipped = run_stream(spark, store, checkpoint, failOnDataLoss="false")
    assert skipped.rows == remaining

    # the topics deleted and created again: the store's deletion marks, which the offsets keep,
    # tell that every queue started over (its offsets below the checkpoint's, or not)
    with MessageStore.open(store, small_config()) as s:
        s.delete_topics(list(TOPICS))
        write_messages(s, 24, start=700)
        s.wait_for_dispatch()
    started_over = r"OrderTopic \(queues 0, 1, 2, 3\): the topic was deleted and created again since the last"
    with pytest.raises(Exception, match=started_over):
        run_stream(spark, store, checkpoint)
    # failOnDataLoss=false reads the topics created again from their earliest offsets (a warning)
    assert run_stream(spark, store, checkpoint, failOnDataLoss="false").rows == all_rows(store)
    assert run_stream(spark, store, checkpoint).rows == []  # the checkpoint holds the new offsets
    recreated = {(r["topic"], r["queueId"], r["queueOffset"]) for r in all_rows(store)}
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 12, start=724)
        s.wait_for_dispatch()
    newer = [r for r in all_rows(store) if (r["topic"], r["queueId"], r["queueOffset"]) not in recreated]
    assert len(newer) == 12 and run_stream(spark, store, checkpoint).rows == newer


def test_a_store_replaced_by_an_older_copy_is_not_read_again(spark, tmp_path):  # noqa: F811
    """Every queue's max offset went back below the checkpoint's: failOnDataLoss=false must not
    deliver again what the older copy holds (all of it was delivered before); messages stored
    after it are read from the queue's max offset on."""
    import shutil

    store = make_store(tmp_path / "store", 36)  # 3 per queue
    shutil.copytree(store, tmp_path / "older")
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 36, start=36)
        s.wait_for_dispatch()
    checkpoint = tmp_path / "ckpt"
    assert len(run_stream(spark, store, checkpoint, startingOffsets="earliest").rows) == 72
    shutil.rmtree(store)
    shutil.copytree(tmp_path / "older", store)
    with pytest.raises(Exception, match=r"the checkpointed offset 6 is above the queue's max offset 3"):
        run_stream(spark, store, checkpoint)
    assert run_stream(spark, store, checkpoint, failOnDataLoss="false").rows == []
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 24, start=100)
        s.wait_for_dispatch()
    assert run_stream(spark, store, checkpoint).rows == [r for r in all_rows(store) if r["queueOffset"] >= 3]


def test_an_end_offset_past_the_queue_is_never_checkpointed(tmp_path):
    """A queue that shrank between latestOffset and partitions fails the batch (or is read up
    to its end with a warning): the batch's end offset must not pass what it reads."""
    from pyspark.sql.types import StructType

    from rocketstore.errors import DataLossError
    from rocketstore.spark.stream import StreamReader

    store = tmp_path / "store"
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 12, topics=("TopicA",))  # 3 messages in each queue
        s.wait_for_dispatch()
    options = {**SMALL_OPTIONS, "path": str(store), "topics": "TopicA", "queues": "0"}
    start, end = {"TopicA": {"0": 0}}, {"TopicA": {"0": 7}}
    with pytest.raises(DataLossError, match="TopicA/0: the end offset 7 is above the queue's max offset 3"):
        StreamReader(options, StructType()).partitions(start, end)
    (part,) = StreamReader({**options, "failOnDataLoss": "false"}, StructType()).partitions(start, end)
    assert [(q.start, q.end) for q in part.slices] == [(0, 3)]


def test_a_record_that_fails_its_checks_fails_the_stream(spark, tmp_path):  # noqa: F811
    """A damaged record fails the query naming it (failOnDataLoss, the default); false skips it."""
    store = make_store(tmp_path / "store", 400)
    damage_record(store, "TopicB", 2, 3)
    with pytest.raises(Exception, match=r"DataLossError: TopicB/2 queue offset 3 \(commit-log offset"):
        run_stream(spark, store, tmp_path / "ckpt", startingOffsets="earliest")
    skipped = run_stream(spark, store, tmp_path / "ckpt2", startingOffsets="earliest", failOnDataLoss="false")
    assert len(skipped.rows) == 399


def test_a_deleted_queue_is_data_loss_and_dropped_from_the_offsets(spark, tmp_path):  # noqa: F811
    """A queue gone from the store (its topic deleted) fails the query, or (failOnDataLoss=false)
    is dropped from the offsets: a topic created again is read from its start."""
    store = make_store(tmp_path / "store", 24)
    checkpoint = tmp_path / "ckpt"
    assert len(run_stream(spark, store, checkpoint, startingOffsets="earliest", topics="TopicA").rows) == 8
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 60, start=24)  # 20 TopicA messages the query never reads
        s.delete_topics(["TopicA"])
    with pytest.raises(Exception, match=r"TopicA/0, TopicA/1, TopicA/2, TopicA/3: the queues are gone"):
        run_stream(spark, store, checkpoint, topics="TopicA")
    assert run_stream(spark, store, checkpoint, topics="TopicA", failOnDataLoss="false").rows == []
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 12, start=500, topics=("TopicA",))  # offsets 0..2 of each queue
        s.wait_for_dispatch()
    recreated = [r for r in all_rows(store) if r["topic"] == "TopicA"]
    assert len(recreated) == 12 and run_stream(spark, store, checkpoint, topics="TopicA").rows == recreated


def test_a_new_queue_whose_start_was_removed_is_data_loss(spark, tmp_path):  # noqa: F811
    """A queue first seen mid-stream whose min offset is above 0 lost messages to retention: Kafka's
    "Added partition ... starts from Y instead of 0" fails the query, or is read from its min offset."""
    store = make_store(tmp_path / "store", 12)
    checkpoint = tmp_path / "ckpt"
    assert len(run_stream(spark, store, checkpoint, startingOffsets="earliest", topics="Topic.*").rows) == 8
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 400, start=1000, topics=("TopicNew",))  # while the query is down
        s.wait_for_dispatch()
    _trim_log(store, 2)
    remaining = [r for r in all_rows(store) if r["topic"] == "TopicNew"]
    assert 0 < len(remaining) < 400
    with pytest.raises(Exception, match=r"TopicNew/0: the queue, new to the stream, starts at offset \d+ instead of 0"):
        run_stream(spark, store, checkpoint, topics="Topic.*")
    assert run_stream(spark, store, checkpoint, topics="Topic.*", failOnDataLoss="false").rows == remaining


def test_a_starting_offset_past_the_queue_end_waits_for_it(spark, tmp_path):  # noqa: F811
    """startingOffsets past a queue's end is kept (not clamped to the max offset, nor taken for a
    queue that started over): the stream reads from it once the queue gets there."""
    store = make_store(tmp_path / "store", 24)  # TopicA/0 holds offsets 0..1
    checkpoint = tmp_path / "ckpt"
    start = json.dumps({"TopicA": {"0": 10}})
    assert run_stream(spark, store, checkpoint, startingOffsets=start, topics="TopicA", queues="0").rows == []
    for begin, offsets in ((24, []), (84, [10, 11])):  # TopicA/0 gets to offset 6, then to 11
        with MessageStore.open(store, small_config()) as s:
            write_messages(s, 60, start=begin)
            s.wait_for_dispatch()
        got = run_stream(spark, store, checkpoint, topics="TopicA", queues="0").rows
        assert [r["queueOffset"] for r in got] == offsets


def test_starting_offsets_json_that_leaves_out_a_queue_is_refused(spark, tmp_path):  # noqa: F811
    """As Kafka's source ("you must specify all TopicPartitions"): a new query's startingOffsets JSON
    that leaves out a queue the stream selects (and the store has) fails the query before any batch,
    naming the queues and the -2/-1 to give; it read them from earliest. JSON naming every queue
    (-2 earliest, -1 latest) starts each where it says."""
    store = make_store(tmp_path / "store", 120)  # 3 topics x 4 queues, 10 each
    rows = all_rows(store)
    partial = json.dumps({"TopicA": {"0": 8}})
    with pytest.raises(Exception) as info:
        run_stream(spark, store, tmp_path / "c1", startingOffsets=partial, topics="TopicA,TopicB")
    text = str(info.value)
    assert (
        "InvalidArgumentError: option startingOffsets gives no offset for TopicA/1, TopicA/2, TopicA/3, "
        "TopicB/0, TopicB/1, TopicB/2, TopicB/3: " in text
    )
    assert "give -2 for a queue to read from its earliest offset or -1 for its latest" in text
    with pytest.raises(Exception, match=r"gives no offset for OrderTopic/0, .*TopicA/3, TopicB/0 and 3 more: "):
        run_stream(spark, store, tmp_path / "c2", startingOffsets=partial)
    start = json.dumps({"TopicA": {"0": 8, "1": -2, "2": -1, "3": 9}})
    got = run_stream(spark, store, tmp_path / "c3", startingOffsets=start, topics="TopicA").rows
    first = {0: 8, 1: 0, 2: 10**9, 3: 9}
    assert got == [r for r in rows if r["topic"] == "TopicA" and r["queueOffset"] >= first[r["queueId"]]]


def test_a_queue_created_after_the_stream_started_is_read_from_its_earliest(spark, tmp_path):  # noqa: F811
    """The startingOffsets JSON is checked against the queues the store has when the query starts;
    a queue created later (not in the JSON, nor in the checkpoint) is read from its earliest offset,
    also when the query restarts with the same option."""
    store = make_store(tmp_path / "store", 24)
    checkpoint = tmp_path / "ckpt"
    start = json.dumps({"TopicA": {"0": -1, "1": -1, "2": -1, "3": -1}})
    assert run_stream(spark, store, checkpoint, startingOffsets=start, topics="Topic(A|New)").rows == []
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 8, start=100, topics=("TopicNew",))
        write_messages(s, 4, start=200, topics=("TopicA",))
        s.wait_for_dispatch()
    got = run_stream(spark, store, checkpoint, startingOffsets=start, topics="Topic(A|New)").rows
    new = [r for r in all_rows(store) if r["topic"] == "TopicNew" or (r["topic"] == "TopicA" and r["queueOffset"] >= 2)]
    assert got == new
    assert len(got) == 12 and {r["topic"] for r in got} == {"TopicA", "TopicNew"}
    # the same within one run: a queue that appears after initialOffset is read from offset 0
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from rocketstore.spark.schema import spark_schema
    from rocketstore.spark.stream import StreamReader

    options = {**SMALL_OPTIONS, "path": str(store), "startingOffsets": start, "topics": "Topic(A|B)"}
    with pytest.raises(Exception, match="option startingOffsets gives no offset for TopicB/0, "):
        StreamReader(options, spark_schema()).initialOffset()
    options["topics"] = "Topic(A|Later)"
    stream = StreamReader(options, spark_schema())
    begin = stream.initialOffset()
    at_a = {"TopicA": {str(q): 3 for q in range(4)}}
    assert begin == {**at_a, "@initial": True, "@deleted": {}}  # a new query's start: its batch 0 end keeps it
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 4, start=300, topics=("TopicLater",))
        s.wait_for_dispatch()
    end = stream.latestOffset(begin, ReadAllAvailable())
    at_a_start = {**at_a, "@deleted": {}}
    assert set(end.pop("@last")) == {"TopicA", "TopicLater"}  # the message below each queue's end
    assert end == {**at_a, "TopicLater": {str(q): 1 for q in range(4)}, "@start": at_a_start, "@deleted": {}}
    held = stream._snapshot  # latestOffset's view of the store: the batch's partitions use it (one open a trigger)
    assert held is not None and not held.store.closed
    slices = [(x.topic, x.queue_id, x.start, x.end) for p in stream.partitions(begin, end) for x in p.slices]
    assert sorted(slices) == [("TopicLater", q, 0, 1) for q in range(4)]
    assert stream._snapshot is None and held.store.closed
    assert stream.latestOffset(end, ReadAllAvailable()) == end  # nothing new: no batch, nothing held open
    assert stream._snapshot is None
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 4, start=400, topics=("TopicLater",))
        s.wait_for_dispatch()
    assert stream.latestOffset(end, ReadAllAvailable()) != end
    held = stream._snapshot
    stream.stop()  # a query stopped between its latestOffset and its partitions leaves nothing open
    assert stream._snapshot is None and held.store.closed


def test_retention_while_a_batch_runs_loses_only_what_it_removed(spark, tmp_path):  # noqa: F811
    """Retention between a micro-batch's planning and its tasks (failOnDataLoss=false): the batch
    delivers every message the store still holds; only the removed ones are skipped."""
    import time

    store = interleaved_store(tmp_path / "store")
    got: list[int] = []

    def sink(df: Any, batch_id: int) -> None:
        if batch_id == 0:  # planned: retention now, before the tasks read
            with MessageStore.open(store, small_config(fileReservedTime=0)) as s:
                s.clean_expired_files(now=time.time() + 3600)
        got.extend(r.queueOffset for r in df.collect())

    options = {**SMALL_OPTIONS, "topics": "T1", "startingOffsets": "earliest", "failOnDataLoss": "false"}
    query = (
        spark.readStream.format("rocketstore")
        .options(**options)
        .load(str(store))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    left = [r["queueOffset"] for r in all_rows(store) if r["topic"] == "T1"]
    assert left[0] > 0 and left[-1] == 99
    assert sorted(got) == left


def _failing_batch_zero(spark: Any, store: Path, checkpoint: Path, **options: str) -> list[dict]:  # noqa: F811
    """A new query whose sink fails in batch 0 (after seeing its rows): batch 0's end offsets are
    in the checkpoint, its commit is not. The rows batch 0 had."""
    seen: list[dict] = []

    def sink(df: Any, batch_id: int) -> None:
        seen.extend(as_export(r) for r in df.collect())
        raise RuntimeError("the sink is down")

    df = spark.readStream.format("rocketstore").options(**SMALL_OPTIONS, **options).load(str(store))
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    query = query.trigger(availableNow=True).start()
    with pytest.raises(Exception, match="the sink is down"):
        query.awaitTermination(120)
    assert (checkpoint / "offsets" / "0").exists() and not (checkpoint / "commits" / "0").exists()
    return sorted(seen, key=sort_key)


def test_a_restart_replays_an_uncommitted_batch_zero_from_where_it_started(spark, tmp_path):  # noqa: F811
    """Spark keeps batch 0's end offsets but not its start, and asks initialOffset again for the
    replay: 'latest' then (the restart's default, or messages stored since) is past batch 0's end.
    The replay delivers exactly what the first attempt had, then what came after."""
    store = make_store(tmp_path / "store", 48)
    checkpoint = tmp_path / "ckpt"
    first = _failing_batch_zero(spark, store, checkpoint, startingOffsets="earliest")
    assert first == all_rows(store)
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 24, start=48)
        s.wait_for_dispatch()
    sink = run_stream(spark, store, checkpoint)  # startingOffsets: latest, the default
    assert sorted(sink.batches[0][1], key=sort_key) == first
    assert sink.rows == all_rows(store)
    assert run_stream(spark, store, checkpoint).rows == []


def test_a_replayed_batch_zero_whose_start_retention_removed_is_data_loss(spark, tmp_path):  # noqa: F811
    """startingOffsets=earliest, batch 0 failed, retention ran before the restart: the replay
    starts where batch 0 started, below the queues' min offsets now (DataLossError), not at the
    new earliest offsets (which silently skipped the removed messages of batch 0)."""
    store = make_store(tmp_path / "store", 600)  # 50 messages in each queue
    checkpoint = tmp_path / "ckpt"
    assert len(_failing_batch_zero(spark, store, checkpoint, startingOffsets="earliest")) == 600
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 60, start=600)
        s.wait_for_dispatch()
    _trim_log(store, 2)
    remaining = all_rows(store)
    assert 0 < min(r["queueOffset"] for r in remaining) < 50  # within batch 0
    with pytest.raises(Exception, match=r"the stored offset 0 is below the queue's minimum offset \d+: \d+ messages"):
        run_stream(spark, store, checkpoint, startingOffsets="earliest")
    assert run_stream(spark, store, checkpoint, failOnDataLoss="false").rows == remaining


def test_the_start_of_batch_zero_travels_in_its_end_offset(tmp_path):
    """As Spark drives a reader: initialOffset, latestOffset, then (a new reader: the restart)
    partitions of batch 0 with a fresh initialOffset as the start. The start latestOffset was
    given is in batch 0's end offset, and the replay reads from it; the next batch starts at the
    end, and an unchanged store plans no batch."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import StructType

    from rocketstore.spark.stream import StreamReader

    store = make_store(tmp_path / "store", 24)
    options = {**SMALL_OPTIONS, "path": str(store), "topics": "TopicA"}
    first = StreamReader(options, StructType())
    start = first.initialOffset()  # latest: offsets 2 of each TopicA queue
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 24, start=24)  # offsets 2, 3 of each queue
        s.wait_for_dispatch()
    end = json.loads(json.dumps(first.latestOffset(start, ReadAllAvailable())))  # Spark keeps it as JSON
    assert {k: v for k, v in end.items() if not k.startswith("@")} == {"TopicA": {str(q): 4 for q in range(4)}}
    assert first.latestOffset(end, ReadAllAvailable()) == end  # nothing new: no batch 1
    first.stop()
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 24, start=48)  # offsets 4, 5: latest is past batch 0's end now
        s.wait_for_dispatch()
    restarted = StreamReader(options, StructType())
    slices = [
        (x.queue_id, x.start, x.end) for p in restarted.partitions(restarted.initialOffset(), end) for x in p.slices
    ]
    assert sorted(slices) == [(q, 2, 4) for q in range(4)]
    nxt = restarted.latestOffset(end, ReadAllAvailable())
    assert {k: v for k, v in nxt.items() if k != "@last"} == {"TopicA": {str(q): 6 for q in range(4)}, "@deleted": {}}
    slices = [(x.queue_id, x.start, x.end) for p in restarted.partitions(end, nxt) for x in p.slices]
    assert sorted(slices) == [(q, 4, 6) for q in range(4)]
    assert restarted.latestOffset(nxt, ReadAllAvailable()) == nxt
    restarted.stop()


def test_a_starting_timestamp_after_every_message_delivers_none_stored_before_it(spark, tmp_path):  # noqa: F811
    """startingTimestamp later than every stored message starts each queue at its max offset; the
    messages stored after that but before the timestamp are not delivered (a batch read with the
    timestamp reads none of them either), also after a restart without the option (the
    checkpoint keeps it) and in a queue created later."""
    import time

    store = make_store(tmp_path / "store", 24)
    checkpoint = tmp_path / "ckpt"
    later = str(int(time.time() * 1000) + 3_600_000)
    assert run_stream(spark, store, checkpoint, startingTimestamp=later).rows == []
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 24, start=24)
        write_messages(s, 4, start=100, topics=("TopicNew",))
        s.wait_for_dispatch()
    assert run_stream(spark, store, checkpoint, startingTimestamp=later).rows == []
    assert run_stream(spark, store, checkpoint).rows == []
    assert (
        spark.read.format("rocketstore").options(**SMALL_OPTIONS, startingTimestamp=later).load(str(store)).count() == 0
    )


def test_the_trigger_budget_counts_only_messages_the_store_still_holds(tmp_path):
    """maxOffsetsPerTrigger with failOnDataLoss=false after retention: the budget is measured from
    the queue's min offset, not from the checkpoint's offset below it (batches of messages already
    removed read nothing, one empty batch after another)."""
    import time

    from pyspark.sql.streaming.datasource import ReadMaxRows
    from pyspark.sql.types import StructType

    from rocketstore.spark.stream import StreamReader

    store = interleaved_store(tmp_path / "store")
    with MessageStore.open(store, small_config(fileReservedTime=0)) as s:
        s.clean_expired_files(now=time.time() + 3600)
        lo = s.get_min_offset_in_queue("T1", 0)
    assert 10 < lo < 90
    options = {**SMALL_OPTIONS, "path": str(store), "topics": "T1", "failOnDataLoss": "false"}
    stream = StreamReader(options, StructType())
    start = {"T1": {"0": 0}}  # the checkpoint's offset: retention removed 0..lo-1 since
    end = stream.latestOffset(start, ReadMaxRows(10))
    assert {k: v for k, v in end.items() if k != "@last"} == {"T1": {"0": lo + 10}, "@deleted": {}}
    assert [(x.start, x.end) for p in stream.partitions(start, end) for x in p.slices] == [(lo, lo + 10)]


def test_a_queue_cut_back_and_written_again_past_the_checkpoint_is_data_loss(tmp_path, caplog):
    """A recovery cut a queue back below the checkpoint's offset (a torn record after a crash),
    then puts took it past that offset again: the messages stored since the cut below the
    checkpoint's offset were never read, and nothing said so (the queue's max was back above it).
    The offsets keep what the message below each queue's offset was (its commit-log offset and
    store time): a different one there is data loss, or (failOnDataLoss=false) a warning."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import StructType

    from rocketstore import Message
    from rocketstore.errors import DataLossError
    from rocketstore.spark.stream import StreamReader

    store = tmp_path / "store"
    with MessageStore.open(store, small_config()) as s:
        for i in range(20):
            s.put(Message("T", b"old %d" % i)).raise_for_status()
    options = {**SMALL_OPTIONS, "path": str(store), "topics": "T", "startingOffsets": "earliest"}
    reader = StreamReader(options, StructType())
    end = json.loads(json.dumps(reader.latestOffset(reader.initialOffset(), ReadAllAvailable())))
    reader.stop()
    assert from_json(end) == {("T", 0): 20}
    damage_record(store, "T", 0, 15)  # torn: recovery ends the log there, the queue back to 15
    with MessageStore.open(store, small_config()) as s:
        assert s.get_max_offset_in_queue("T", 0) == 15
        for i in range(10):
            s.put(Message("T", b"new %d" % i)).raise_for_status()  # offsets 15..24: new 0..4 below 20
    failing = StreamReader(options, StructType())
    with pytest.raises(DataLossError, match=r"T/0: the message at offset 19, the last the stream read, is not"):
        failing.latestOffset(end, ReadAllAvailable())
    failing.stop()
    going_on = StreamReader({**options, "failOnDataLoss": "false"}, StructType())
    with caplog.at_level("WARNING", logger="rocketstore.spark"):
        nxt = going_on.latestOffset(end, ReadAllAvailable())
    assert from_json(nxt) == {("T", 0): 25}
    assert any("is not the one it read" in r.getMessage() for r in caplog.records)
    assert going_on.latestOffset(json.loads(json.dumps(nxt)), ReadAllAvailable()) == json.loads(json.dumps(nxt))
    going_on.stop()


def test_a_topic_deleted_and_created_again_between_batches_is_read_from_its_start(tmp_path):
    """The offsets keep the store's deletion marks (deletedTopics.json): a topic deleted and
    written again since the last batch, whose new queues already reach past the old offsets, is
    data loss (messages of it may have been missed) and, with failOnDataLoss=false, read from its
    new earliest offsets, not from the old ones (which skipped its first messages). A restarted
    reader, given the checkpointed offset, sees it too."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import StructType

    from rocketstore.errors import DataLossError
    from rocketstore.spark.stream import StreamReader

    store = make_store(tmp_path / "store", 24)  # TopicA: offsets 0, 1 of each queue
    options = {**SMALL_OPTIONS, "path": str(store), "topics": "TopicA", "startingOffsets": "earliest"}
    reader = StreamReader(options, StructType())
    end = json.loads(json.dumps(reader.latestOffset(reader.initialOffset(), ReadAllAvailable())))
    assert from_json(end) == {("TopicA", q): 2 for q in range(4)}
    reader.stop()
    # another query started at an offset queue 0 had not reached (kept "ahead" until it does)
    waiting = {
        **options,
        "failOnDataLoss": "false",
        "startingOffsets": '{"TopicA": {"0": 50, "1": -2, "2": -2, "3": -2}}',
    }
    ahead = StreamReader(waiting, StructType())
    ahead_start = json.loads(json.dumps(ahead.initialOffset()))
    ahead.stop()
    with MessageStore.open(store, small_config()) as s:
        s.delete_topics(["TopicA"])
        write_messages(s, 20, start=100, topics=("TopicA",))  # offsets 0..4 of each queue: past 2
        s.wait_for_dispatch()
    failing = StreamReader(options, StructType())  # the marks travel in the offsets: any reader sees it
    with pytest.raises(DataLossError, match=r"TopicA \(queues 0, 1, 2, 3\): the topic was deleted and created"):
        failing.latestOffset(end, ReadAllAvailable())
    failing.stop()
    going_on = StreamReader({**options, "failOnDataLoss": "false"}, StructType())
    nxt = json.loads(json.dumps(going_on.latestOffset(end, ReadAllAvailable())))
    assert from_json(nxt) == {("TopicA", q): 5 for q in range(4)}
    slices = [(x.queue_id, x.start, x.end) for p in going_on.partitions(end, nxt) for x in p.slices]
    assert sorted(slices) == [(q, 0, 5) for q in range(4)]
    assert going_on.latestOffset(nxt, ReadAllAvailable()) == nxt  # seen once: no batch planned again
    going_on.stop()
    ahead = StreamReader(waiting, StructType())  # the queue created again: from 0, not from 50
    ahead_end = ahead.latestOffset(ahead_start, ReadAllAvailable())
    assert from_json(ahead_end) == {("TopicA", q): 5 for q in range(4)} and "(ahead)" not in ahead_end
    ahead.stop()
    # a replay of that batch after a restart (partitions alone, from the checkpointed offsets) reads the same
    replayed = StreamReader({**options, "failOnDataLoss": "false"}, StructType())
    slices = [(x.queue_id, x.start, x.end) for p in replayed.partitions(end, nxt) for x in p.slices]
    assert sorted(slices) == [(q, 0, 5) for q in range(4)]
    replayed.stop()


def _recreate_topic_a(store: Path, count: int = 40) -> None:
    with MessageStore.open(store, small_config()) as s:
        s.delete_topics(["TopicA"])
        write_messages(s, count, start=100, topics=("TopicA",))  # offsets 0..count/4-1 of each queue
        s.wait_for_dispatch()


def test_a_replayed_batch_of_a_topic_created_again_since_is_not_read_twice(tmp_path, caplog):
    """A batch planned, then the topic deleted and created again, then the batch replayed (a
    restart: partitions on a new reader): its planned offsets are the old topic's, so the replay
    reads nothing of it (data loss: it fails, or warns), and the next batch reads the topic
    created again from its earliest offsets, once."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import StructType

    from rocketstore.errors import DataLossError
    from rocketstore.spark.stream import StreamReader

    store = make_store(tmp_path / "store", 24)
    options = {**SMALL_OPTIONS, "path": str(store), "topics": "TopicA", "startingOffsets": "earliest"}
    lenient = {**options, "failOnDataLoss": "false"}
    reader = StreamReader(options, StructType())
    end0 = json.loads(json.dumps(reader.latestOffset(reader.initialOffset(), ReadAllAvailable())))
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 24, start=24, topics=("TopicA",))  # offsets 2..7
        s.wait_for_dispatch()
    end1 = json.loads(json.dumps(reader.latestOffset(end0, ReadAllAvailable())))  # planned, never run
    reader.stop()
    gone_only = tmp_path / "gone"
    import shutil

    shutil.copytree(store, gone_only)
    with MessageStore.open(gone_only, small_config()) as s:  # deleted, not written again: gone, and said so
        s.delete_topics(["TopicA"])
    gone_options = {**options, "path": str(gone_only)}
    with pytest.raises(DataLossError, match=r"TopicA/0, .*: the queues are gone from .*after this batch was planned"):
        StreamReader(gone_options, StructType()).partitions(end0, end1)
    _recreate_topic_a(store)  # offsets 0..9 of each queue
    with pytest.raises(DataLossError, match=r"deleted and created again since the last batch, .*after this batch"):
        StreamReader(options, StructType()).partitions(end0, end1)
    replay = StreamReader(lenient, StructType())
    with caplog.at_level("WARNING", logger="rocketstore.spark.plan"):
        assert [x for p in replay.partitions(end0, end1) for x in p.slices] == []
    assert "after this batch was planned" in caplog.text
    end2 = replay.latestOffset(end1, ReadAllAvailable())
    slices = [(x.queue_id, x.start, x.end) for p in replay.partitions(end1, end2) for x in p.slices]
    assert sorted(slices) == [(q, 0, 10) for q in range(4)]
    replay.stop()


def test_the_marks_a_snapshot_reads_are_those_of_its_queues(tmp_path, monkeypatch):
    """A topic deleted and created again while the stream's snapshot of the store is opening
    (after deletedTopics.json was read, before the queues): the snapshot is taken again, so the
    offsets pair the new queues with the new marks, and the topic is not taken for deleted again
    (and read twice) by the next batch."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import StructType

    from rocketstore.queues.consume_queues import ConsumeQueueStore
    from rocketstore.spark.stream import StreamReader

    store = make_store(tmp_path / "store", 24)
    options = {**SMALL_OPTIONS, "path": str(store), "topics": "TopicA", "startingOffsets": "earliest"}
    lenient = {**options, "failOnDataLoss": "false"}
    reader = StreamReader(lenient, StructType())
    end0 = json.loads(json.dumps(reader.latestOffset(reader.initialOffset(), ReadAllAvailable())))
    original, done = ConsumeQueueStore.load, []

    def load_after_a_deletion(self, *args, **kwargs):
        if not done and self.mode != "rw":  # the reader's snapshot, not the writer below
            done.append(True)
            _recreate_topic_a(store)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ConsumeQueueStore, "load", load_after_a_deletion)
    end1 = json.loads(json.dumps(reader.latestOffset(end0, ReadAllAvailable())))
    read = sorted((x.queue_id, x.start, x.end) for p in reader.partitions(end0, end1) for x in p.slices)
    assert done and read == [(q, 0, 10) for q in range(4)]  # the topic created again, from 0
    end2 = reader.latestOffset(end1, ReadAllAvailable())
    assert [x for p in reader.partitions(end1, end2) for x in p.slices] == []  # not again
    reader.stop()


def test_deleted_since_takes_a_changed_a_new_and_a_vanished_mark_for_a_deletion():
    """deleted_since compares the marks a start offset kept with the store's for the start's
    topics: a changed mark, a new one and one gone since (dropped when its topic had no queue:
    deleted meanwhile) are deletions; an offset kept before the marks were tells nothing."""
    from rocketstore.spark.stream import deleted_since

    begin = {("A", 0): 5, ("B", 0): 5, ("C", 1): 2, ("D", 0): 1}
    start = {"@deleted": {"A": 100, "C": 300, "D": 400}}
    now = {"A": 100, "B": 200, "C": 350, "E": 10}
    assert deleted_since(start, now, begin) == ["B", "C", "D"]
    assert deleted_since({}, now, begin) == []
    assert deleted_since(start, None, begin) == []
