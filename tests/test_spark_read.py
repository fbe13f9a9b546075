"""Batch reads through the ``rocketstore`` Spark data source (a real local session)."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import pytest

from spark_conftest import (
    SMALL_OPTIONS,
    TOPICS,
    VECTOR_OPTIONS,
    as_export,
    assert_rows_equal,
    damage_record,
    export_rows,
    interleaved_store,
    log_rows,
    make_store,
    reader,
    small_config,
    sort_key,
    spark,  # noqa: F401 - the session fixture
    spark_rows,
    strip_cq,
)

pytestmark = pytest.mark.spark


def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A rocketstore-written store: 3 topics x 4 queues, 16 KiB commit-log segments."""
    return make_store(tmp_path_factory.mktemp("read") / "store", 400)


@pytest.fixture(scope="module")
def everything(store: Path) -> list[dict]:
    return sorted((strip_cq(r) for r in export_rows(store, small_config())), key=sort_key)


# -- the RocketMQ vectors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sample", "expected"), [("sample-clean", "expected.jsonl"), ("sample-crash", "recovered.jsonl")]
)
def test_vectors_consumequeue_mode(spark, vectors, hash_tree, sample, expected):  # noqa: F811
    """Rows equal what RocketMQ served (sample-crash: after its abnormal recovery, whose queue
    tails exist only in the driver's memory), and the vector folders do not change."""
    root = vectors / sample / "store"
    before = hash_tree(root)
    df = reader(spark, VECTOR_OPTIONS).load(str(root))
    assert_rows_equal(spark_rows(df), _jsonl(vectors / sample / expected))
    assert hash_tree(root) == before


@pytest.mark.parametrize("sample", ["sample-clean", "sample-crash"])
def test_vectors_commitlog_mode(spark, vectors, vector_config, rmqread_export, hash_tree, sample):  # noqa: F811
    """mode=commitlog: every record of the (recovered) log, as the independent reader reads it;
    split into byte ranges smaller than a segment, the rows stay the same."""
    root = vectors / sample / "store"
    before = hash_tree(root)
    want = rmqread_export(root, vector_config, "--via", "commitlog")
    whole = reader(spark, VECTOR_OPTIONS, mode="commitlog").load(str(root))
    assert_rows_equal(spark_rows(whole), want)
    split = reader(spark, VECTOR_OPTIONS, mode="commitlog", maxPartitionBytes="20000").load(str(root))
    assert split.rdd.getNumPartitions() > 14 * 3
    assert_rows_equal(spark_rows(split), want)
    assert hash_tree(root) == before


# -- registration and schema --------------------------------------------------------------------------


def test_found_without_registration_and_registered_explicitly(spark, store, everything):  # noqa: F811
    """The session never registered the source: PySpark found the installed pyspark_rocketstore
    module. Explicit registration works as well, also as a SQL table."""
    from pyspark.sql.datasource import DataSource

    import pyspark_rocketstore
    from rocketstore.spark import RocketStoreDataSource

    assert issubclass(pyspark_rocketstore.DefaultSource, DataSource)
    assert reader(spark).load(str(store)).count() == len(everything)
    other = spark.newSession()
    other.dataSource.register(RocketStoreDataSource)
    options = ", ".join(f"{k} '{v}'" for k, v in SMALL_OPTIONS.items())
    other.sql(f"CREATE TEMP VIEW msgs USING rocketstore OPTIONS (path '{store}', {options})")
    assert other.sql("SELECT count(*) AS n FROM msgs").collect()[0]["n"] == len(everything)


def test_schema_and_rocketstore_written_store(spark, store, everything):  # noqa: F811
    df = reader(spark).load(str(store))
    assert [f.name for f in df.schema.fields][:4] == ["topic", "queueId", "queueOffset", "commitLogOffset"]
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert types["properties"] == "map<string,string>"
    assert types["body"] == "binary" and types["storeTimestamp"] == "timestamp"
    assert_rows_equal(spark_rows(df), everything)


def test_user_schema_reads_only_those_columns(spark, store, everything):  # noqa: F811
    df = reader(spark).schema("body binary, `keys` string, queueOffset bigint").load(str(store))
    got = sorted((r["queueOffset"], r["keys"] or "", r["body"]) for r in df.collect())
    want = sorted((r["queueOffset"], r["keys"] or "", __import__("base64").b64decode(r["body"])) for r in everything)
    assert got == want
    with pytest.raises(Exception, match="no column"):
        reader(spark).schema("nope string").load(str(store)).collect()


def test_user_schema_with_non_nullable_columns_is_refused(spark, store):  # noqa: F811
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("topic", StringType(), False), StructField("queueOffset", LongType(), False)])
    with pytest.raises(Exception, match="declare topic, queueOffset without NOT NULL"):
        reader(spark).schema(schema).load(str(store)).collect()


def test_partitions_are_large_and_configurable(spark, store, everything):  # noqa: F811
    assert reader(spark).load(str(store)).rdd.getNumPartitions() == 1
    df = reader(spark, maxPartitionBytes="4000").load(str(store))
    assert df.rdd.getNumPartitions() > 4
    assert_rows_equal(spark_rows(df), everything)
    assert reader(spark, minPartitions="3").load(str(store)).rdd.getNumPartitions() == 3
    # never more partitions than messages (in commitlog mode: about the log's size / average record)
    for mode in ("consumequeue", "commitlog"):
        for asked in ({"minPartitions": "100000"}, {"maxPartitionBytes": "1"}):
            parts = reader(spark, mode=mode, **asked).load(str(store)).rdd.getNumPartitions()
            assert len(everything) / 2 < parts <= len(everything) + 4, (mode, asked, parts)


# -- options --------------------------------------------------------------------------------------------


def test_topics_and_queues(spark, store, everything):  # noqa: F811
    def rows(**options: str) -> list[dict]:
        return spark_rows(reader(spark, **options).load(str(store)))

    assert rows(topics="TopicA") == [r for r in everything if r["topic"] == "TopicA"]
    assert rows(topics="TopicA,OrderTopic") == [r for r in everything if r["topic"] in ("TopicA", "OrderTopic")]
    assert rows(topics="Topic.*") == [r for r in everything if re.fullmatch("Topic.*", r["topic"])]
    # a comma inside a pattern's {} / [] / () does not separate topics
    assert rows(topics="Topic[AB]{1,2}") == [r for r in everything if r["topic"] != "OrderTopic"]
    assert rows(topics="(Order|X)Topic,TopicA") == [r for r in everything if r["topic"] != "TopicB"]
    with pytest.raises(Exception, match=r"InvalidArgumentError: option topics: no topic of \S+ matches 'Nope,T\[AB"):
        rows(topics="T[AB]{1,2},Nope")
    assert rows(queues="1,3") == [r for r in everything if r["queueId"] in (1, 3)]
    assert rows(queues='{"TopicB": [0]}') == [r for r in everything if (r["topic"], r["queueId"]) == ("TopicB", 0)]
    for mode in ("consumequeue", "commitlog"):
        got = rows(topics="Order.*", queues="2", mode=mode)
        assert got == [r for r in everything if r["topic"] == "OrderTopic" and r["queueId"] == 2]


def _every_queue(default: int, **given: dict[int, int]) -> str:
    """Offsets JSON naming every queue of the module's store (3 topics x 4 queues): ``default``
    for each, ``given`` (topic -> queue id -> offset) instead where given."""
    return json.dumps({t: {str(q): given.get(t, {}).get(q, default) for q in range(4)} for t in TOPICS})


def test_starting_and_ending_offsets(spark, store, everything):  # noqa: F811
    # JSON offsets name every queue read (-2 earliest, -1 latest): one left out is refused (below)
    start = _every_queue(-2, TopicA={0: 3, 1: 1000})
    end = _every_queue(-1, TopicA={0: 7}, TopicB={2: 5})
    got = spark_rows(reader(spark, startingOffsets=start, endingOffsets=end).load(str(store)))

    def wanted(r: dict) -> bool:
        key = (r["topic"], r["queueId"])
        lo = {("TopicA", 0): 3, ("TopicA", 1): 10**9}.get(key, 0)
        hi = {("TopicA", 0): 7, ("TopicB", 2): 5}.get(key, 10**9)
        return lo <= r["queueOffset"] < hi

    assert got == [r for r in everything if wanted(r)]
    with pytest.raises(Exception, match="earliest is not an ending offset"):
        reader(spark, endingOffsets="earliest").load(str(store)).collect()
    # as Kafka's source: latest is no batch start, and offsets of queues the read does not cover are refused
    with pytest.raises(Exception, match="latest is not allowed for a batch read"):
        reader(spark, startingOffsets="latest").load(str(store)).collect()
    typo = json.dumps({"TopicZ": {"0": 5}, "TopicA": {"9": 3, "0": 1}})
    other = json.dumps({"TopicA": {"0": 3, "1": 1000}, "TopicB": {"2": -2}})
    for options in ({"startingOffsets": typo}, {"endingOffsets": typo}, {"startingOffsets": other, "topics": "TopicA"}):
        with pytest.raises(
            Exception, match=r"InvalidArgumentError: option \w+Offsets names (TopicA/9, TopicZ/0|TopicB/2)"
        ):
            reader(spark, **options).load(str(store)).collect()


def test_offsets_json_that_leaves_out_a_queue_read_is_refused(spark, store, everything):  # noqa: F811
    """As Kafka's source ("you must specify all TopicPartitions"): startingOffsets or endingOffsets
    JSON that leaves out a queue the read covers is refused before any task runs, naming the
    queues left out (a handful, then how many more) and the -2/-1 to give; it read every queue it
    left out from earliest (to latest). The queues left out are those topics/queues select."""
    with pytest.raises(Exception) as info:
        reader(spark, startingOffsets=json.dumps({"TopicA": {"0": 8}})).load(str(store)).collect()
    text = str(info.value)
    assert (
        "InvalidArgumentError: option startingOffsets gives no offset for OrderTopic/0, OrderTopic/1, "
        "OrderTopic/2, OrderTopic/3, TopicA/1, TopicA/2, TopicA/3, TopicB/0 and 3 more: " in text
    )
    assert "give -2 for a queue to read from its earliest offset" in text
    with pytest.raises(Exception, match=r"option endingOffsets gives no offset for TopicB/1: .*give -1 for a queue"):
        end = json.dumps({"TopicB": {"0": 5, "2": -1, "3": 4}})
        reader(spark, topics="TopicB", endingOffsets=end).load(str(store)).collect()
    with pytest.raises(Exception, match=r"option startingOffsets gives no offset for TopicA/2, TopicB/2: "):
        start = json.dumps({"TopicA": {"0": 1}, "TopicB": {"0": 2}})
        reader(spark, topics="Topic[AB]", queues="0,2", startingOffsets=start).load(str(store)).collect()
    # every queue named (-2 / -1 where it does not matter): read as given
    start = json.dumps({"TopicB": {"0": 2, "2": -2}})
    end = json.dumps({"TopicB": {"0": -1, "2": 3}})
    df = reader(spark, topics="TopicB", queues="0,2", startingOffsets=start, endingOffsets=end).load(str(store))
    wanted = {("TopicB", 0): range(2, 10**9), ("TopicB", 2): range(3)}
    got = spark_rows(df)
    assert got == [r for r in everything if r["queueOffset"] in wanted.get((r["topic"], r["queueId"]), ())]
    assert {r["queueId"] for r in got} == {0, 2}
    # offsets a timestamp takes precedence over are not used, nor checked for this
    first = min(r["storeTimestamp"] for r in everything)
    assert reader(spark, startingTimestamp=str(first), startingOffsets=json.dumps({"TopicA": {"0": 8}})).load(
        str(store)
    ).count() == len(everything)


def test_an_invalid_option_fails_the_read(spark, store):  # noqa: F811
    with pytest.raises(Exception, match="maxPartitionBytes must be a positive integer"):
        reader(spark, maxPartitionBytes="0").load(str(store)).collect()


def test_timestamps_tags_and_pushdown(spark, store, everything):  # noqa: F811
    from pyspark.sql import functions as F

    times = sorted({r["storeTimestamp"] for r in everything})
    assert len(times) > 3
    lo, hi = times[len(times) // 3], times[2 * len(times) // 3]
    want = [r for r in everything if lo <= r["storeTimestamp"] < hi]
    for mode in ("consumequeue", "commitlog"):
        got = spark_rows(reader(spark, startingTimestamp=str(lo), endingTimestamp=str(hi), mode=mode).load(str(store)))
        assert got == want
    assert spark_rows(reader(spark, tags="TagA || TagC").load(str(store))) == [
        r for r in everything if r["tags"] in ("TagA", "TagC")
    ]
    # filters pushed down (pushFilters=true: topic, queueId, storeTimestamp) give the rows Spark keeps
    df = reader(spark, pushFilters="true").load(str(store))
    lo_ts = F.lit(lo / 1000).cast("timestamp")
    picked = df.where((F.col("topic") == "TopicB") & F.col("queueId").isin(1, 2) & (F.col("storeTimestamp") > lo_ts))
    assert sorted((as_export(r) for r in picked.collect()), key=sort_key) == [
        r for r in everything if r["topic"] == "TopicB" and r["queueId"] in (1, 2) and r["storeTimestamp"] > lo
    ]
    # ... and only the queues they select are planned
    whole = reader(spark, pushFilters="true", maxPartitionBytes="2000").load(str(store))
    narrowed = reader(spark, pushFilters="true", maxPartitionBytes="2000").load(str(store))
    narrowed = narrowed.where((F.col("topic") == "TopicB") & (F.col("queueId") == 1))
    assert narrowed.rdd.getNumPartitions() * 6 < whole.rdd.getNumPartitions()


def test_the_tags_option_keeps_units_whose_tags_code_is_a_consume_queue_ext_address(spark, tmp_path):  # noqa: F811
    """With enableConsumeQueueExt a unit's tags code below Integer.MIN_VALUE is an address in
    consumequeue_ext, not read here: the records' TAGS decide, as for get_message (the units were
    dropped by the hash filter, in silence)."""
    import struct

    path = make_store(tmp_path / "ext", 24)  # TopicA..C x 4 queues: 2 messages in each queue
    queue = path / "consumequeue" / "TopicB" / "0" / f"{0:020d}"
    data = bytearray(queue.read_bytes())
    for i in range(2):
        struct.pack_into(">q", data, i * 20 + 12, -(2**63) + i * 64)
    queue.write_bytes(bytes(data))
    want = [r for r in export_rows(path, small_config(), ["TopicB"]) if r["queueId"] == 0 and r["tags"] == "TagB"]
    assert want  # TopicB/0 holds TagB messages
    got = spark_rows(reader(spark, topics="TopicB", queues="0", tags="TagB").load(str(path)))
    assert [r["queueOffset"] for r in got] == [r["queueOffset"] for r in want]


def test_a_tag_filter_that_leaves_no_message_gives_no_rows(spark, store):  # noqa: F811
    """Partitions whose units the tag filter removes entirely read as empty (TopicA has only TagA)."""
    assert reader(spark, tags="NoSuchTag").load(str(store)).count() == 0
    assert reader(spark, tags="TagB", topics="TopicA", maxPartitionBytes="2000").load(str(store)).count() == 0


def test_pushdown_leaves_negated_filters_to_spark(spark, store, everything):  # noqa: F811
    """Spark passes != and NOT IN as Not(...): not pushed, applied by Spark."""
    from pyspark.sql import functions as F

    df = reader(spark, pushFilters="true").load(str(store))
    picked = df.where((F.col("queueOffset") != 5) & ~F.col("topic").isin("TopicA", "TopicB"))
    assert spark_rows(picked) == [r for r in everything if r["queueOffset"] != 5 and r["topic"] == "OrderTopic"]


def test_iso_timestamps_are_exact_milliseconds():
    """ISO-8601 text is converted in integers: float seconds read some times 1 ms early."""
    import datetime

    from rocketstore.spark.options import parse_timestamp
    from rocketstore.timestamps import epoch_millis

    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    for ms in (1079337347472, *range(1_700_000_000_000, 1_700_000_001_000)):
        text = (epoch + datetime.timedelta(milliseconds=ms)).isoformat()
        assert parse_timestamp(text, "startingTimestamp") == ms, text
    assert epoch_millis((epoch - datetime.timedelta(milliseconds=1)).isoformat()) == -1  # (no store time)
    # within a millisecond: store times from the next one are at or after it
    assert parse_timestamp("2004-03-15T07:55:47.4721", "endingTimestamp") == 1079337347473


def test_commitlog_mode_reads_every_record(spark, store):  # noqa: F811
    want = log_rows(store, small_config())
    assert_rows_equal(spark_rows(reader(spark, mode="commitlog").load(str(store))), want)


def test_commitlog_mode_splits_a_log_the_queues_mostly_do_not_serve(spark, tmp_path):  # noqa: F811
    """A deleted topic's records stay in the log without queue units: the partition budget's floor
    (about one record) must not become the log's size over the few units left, which planned the
    whole log as one partition. The floor still keeps partitions to about one per record."""
    from rocketstore import MessageStore
    from spark_conftest import write_messages

    store = tmp_path / "store"
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 400, topics=("Bulk",))
        write_messages(s, 1, start=400, topics=("TopicA",))
        s.wait_for_dispatch()
        s.delete_topics(["Bulk"])
    segments = len(list((store / "commitlog").iterdir()))
    assert segments >= 4
    want = log_rows(store, small_config())
    assert len(want) == 401
    for topics in ({"topics": "TopicA"}, {}):
        df = reader(spark, mode="commitlog", maxPartitionBytes="16384", **topics).load(str(store))
        assert df.rdd.getNumPartitions() >= segments - 1, topics
        assert_rows_equal(spark_rows(df), [r for r in want if r["topic"] == "TopicA"] if topics else want)
    parts = reader(spark, mode="commitlog", maxPartitionBytes="1").load(str(store)).rdd.getNumPartitions()
    assert len(want) / 2 < parts <= len(want) + segments


def test_offsets_below_the_minimum(spark, store, tmp_path):  # noqa: F811
    """A starting offset retention already removed: an error, or the minimum with failOnDataLoss=false."""
    import shutil

    from spark_conftest import export_rows as rows_of

    copy = tmp_path / "trimmed"
    shutil.copytree(store, copy)
    segments = sorted((copy / "commitlog").iterdir())
    for seg in segments[:2]:  # retention removed the two oldest commit-log segments
        seg.unlink()
    left = sorted((strip_cq(r) for r in rows_of(copy, small_config())), key=sort_key)
    first = min(r["queueOffset"] for r in left if (r["topic"], r["queueId"]) == ("TopicA", 0))
    assert first > 0
    start = json.dumps({"TopicA": {"0": 0}})
    with pytest.raises(Exception, match="removed from the store"):
        reader(spark, startingOffsets=start, topics="TopicA", queues="0").load(str(copy)).collect()
    got = spark_rows(
        reader(spark, startingOffsets=start, topics="TopicA", queues="0", failOnDataLoss="false").load(str(copy))
    )
    assert got == [r for r in left if (r["topic"], r["queueId"]) == ("TopicA", 0)]


# -- the column decoder against the record decoder -------------------------------------------------------


def _record(
    topic: bytes, body: bytes, props: bytes, *, born: bytes = b"", store: bytes = b"", v2: bool = False
) -> bytes:
    from rocketstore.codec import record as rec

    born = born or bytes([10, 0, 0, 1]) + (5000).to_bytes(4, "big")
    store = store or bytes([192, 168, 0, 10]) + (10911).to_bytes(4, "big")
    prepared = rec.prepare(topic, body, props, 3, 7, 0, 1_700_000_000_123, born, store, 2, 99, v2=v2)
    return rec.render(prepared, 42, 0, 1_795_000_000_456)


def _negative_body_len(record: bytes) -> bytes:
    """An empty body's BODYLEN read as -1: Java reads no body for a length <= 0, so the record is valid."""
    return record[:84] + (-1).to_bytes(4, "big", signed=True) + record[88:]


def test_column_decoder_equals_record_decoder():
    """Odd records decode to exactly what ``StoredMessage.to_json_dict`` says: duplicate property
    names, bytes that are not UTF-8, 5.x trailing separators, IPv6 hosts, V2 records, empty bodies."""
    import numpy as np
    import pyarrow as pa

    from rocketstore.codec import record as rec
    from rocketstore.spark.columns import decode_window
    from rocketstore.spark.schema import COLUMN_NAMES, arrow_schema

    v6 = bytes(range(16)) + (1234).to_bytes(4, "big")
    windows = [
        [
            _record(b"TopicA", b"hello", b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC"),
            _record(b"TopicA", b"", b""),
            _record(b"TopicB", b"x" * 300, b"TAGS\x01t\x02KEYS\x01k\x02", born=v6),
            _record(b"T\xffpic", b"\x00\x01", b"note\x01\xff\xfe\x02seq\x011", store=v6),
            _record(b"TopicV2", b"body", b"\x01v\x02n\x01\x02TAGS\x01t\x01x", v2=True, born=v6, store=v6),
        ],
        [_record(b"TopicA", b"dup", b"TAGS\x01a\x02KEYS\x01k\x02TAGS\x01b")],  # decoded record by record
        [_negative_body_len(_record(b"TopicA", b"", b"KEYS\x01k")), _record(b"TopicA", b"after", b"")],
    ]
    for records in windows:
        buf = b"".join(records)
        starts = np.cumsum([0] + [len(r) for r in records[:-1]]).astype(np.int64)
        batch, ok = decode_window(
            np.frombuffer(buf, np.uint8), pa.py_buffer(buf), starts, len(buf), list(COLUMN_NAMES), arrow_schema()
        )
        assert ok.all()
        got = [as_export(r) for r in batch.to_pylist()]
        for row, raw in zip(got, records, strict=True):
            want = rec.decode_record(raw).to_json_dict()
            assert row == want
    # a unit whose size is not its record's is no record
    buf = windows[0][0]
    _, ok = decode_window(
        np.frombuffer(buf, np.uint8),
        pa.py_buffer(buf),
        np.array([0]),
        len(buf),
        ["topic"],
        arrow_schema(["topic"]),
        sizes=np.array([len(buf) - 1]),
    )
    assert not ok.any()


def test_a_record_that_fails_its_checks_fails_the_read_or_is_skipped(spark, tmp_path):  # noqa: F811
    """failOnDataLoss (the default) fails the read naming the message, in both modes; false skips
    it (the export lists it: test_spark_jobs)."""
    store = make_store(tmp_path / "store", 400)
    offset = damage_record(store, "TopicA", 0, 1)
    named = {
        "consumequeue": rf"DataLossError: TopicA/0 queue offset 1 \(commit-log offset {offset}, \d+ bytes\)",
        "commitlog": rf"DataLossError: commit-log offset {offset}: a record that fails its checks",
    }
    for mode, error in named.items():
        with pytest.raises(Exception, match=error):
            reader(spark, mode=mode).load(str(store)).count()
        assert reader(spark, mode=mode, failOnDataLoss="false").load(str(store)).count() == 399


# -- option checks: queues the store lacks, file: URIs, misspelt keys -----------------------------------


def test_queues_naming_a_queue_the_store_lacks_is_refused(spark, store, everything, tmp_path, caplog):  # noqa: F811
    """As a typo'd topic in startingOffsets or topics: a batch read of the consume queues refuses
    a ``queues`` entry the store does not have among the topics read (it read 0 rows), naming it
    and what the store has; commitlog mode and a stream only warn (a stream reads the queue once it
    is created)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from rocketstore import Message, MessageStore
    from rocketstore.spark.schema import spark_schema
    from rocketstore.spark.stream import StreamReader

    def rows(**options: str) -> list[dict]:
        return spark_rows(reader(spark, **options).load(str(store)))

    has = "it has: OrderTopic 0-3, TopicA 0-3, TopicB 0-3"
    for options, named in (
        ({"queues": '{"TopicZ": [1], "TopicA": [1]}'}, "TopicZ/1"),
        ({"queues": "1,9"}, "queue id 9"),
        ({"queues": '{"TopicA": [7]}'}, "TopicA/7"),
        ({"queues": '{"TopicA": [1]}', "topics": "TopicB"}, r"TopicA/1: .*it has: TopicB 0-3\)"),
    ):
        with pytest.raises(Exception, match=rf"InvalidArgumentError: option queues names {named}") as info:
            rows(**options)
        if "topics" not in options:
            assert has in str(info.value)
    assert rows(queues='{"TopicA": [1]}') == [r for r in everything if (r["topic"], r["queueId"]) == ("TopicA", 1)]
    assert rows(queues="9", mode="commitlog") == []  # a deleted queue's records may be in the log: warned
    # a stream warns and reads the queue once it appears
    small = make_store(tmp_path / "small", 6)
    options = {**SMALL_OPTIONS, "path": str(small), "queues": '{"TopicA": [9]}', "startingOffsets": "earliest"}
    stream = StreamReader(options, spark_schema())
    with caplog.at_level("WARNING", logger="rocketstore.spark.stream"):
        start = stream.initialOffset()
    assert "option queues names TopicA/9" in caplog.text
    with MessageStore.open(small, small_config()) as live:
        live.put(Message("TopicA", b"new queue"), queue_id=9).raise_for_status()
        live.wait_for_dispatch()
    assert start == {"@initial": True, "@deleted": {}}  # no queue yet
    end = stream.latestOffset(start, ReadAllAvailable())
    assert set(end.pop("@last")) == {"TopicA"}
    assert end == {"TopicA": {"9": 1}, "@start": {"@deleted": {}}, "@deleted": {}}


def test_a_store_given_as_a_file_uri_is_read_and_written(spark, store, everything, tmp_path):  # noqa: F811
    """``load``/``save`` take a local store as a ``file:`` URI too (it was taken for a relative
    path: "no store at /cwd/file:/..."); a URI of another file system or host is refused clearly."""
    for given in (f"file://{store}", f"file:{store}", f"file://localhost{store}"):
        assert reader(spark).load(given).count() == len(everything), given
    for given in ("hdfs://namenode/store", "s3a://bucket/store", "file://otherhost/store"):
        with pytest.raises(Exception, match=r"InvalidArgumentError: .*local file system only"):
            reader(spark).load(given).count()
    written = tmp_path / "written"
    df = spark.createDataFrame([("TopicW", b"via a file: URI")], "topic string, body binary")
    df.write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(f"file://{written}")
    assert [r["topic"] for r in log_rows(written, small_config())] == ["TopicW"]
    with pytest.raises(Exception, match=r"InvalidArgumentError: .*local file system only"):
        df.write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save("hdfs://namenode/store")
    from rocketstore.errors import InvalidArgumentError
    from rocketstore.spark.schema import local_path

    assert local_path("relative/store") == "relative/store"
    assert local_path("file:relative/store") == "relative/store"
    with pytest.raises(InvalidArgumentError, match="local file system only"):
        local_path("file://otherhost/store")


def test_an_option_key_neither_the_source_s_nor_a_store_setting_is_warned_about(caplog):
    """A misspelt key (``startingOffset``) was ignored without a word: it is still ignored, as
    Kafka's source ignores unknown keys, but with a warning and the closest key. Keys arrive
    lower-cased from Spark; Spark's own (path, paths, checkpointLocation, queryName), store
    settings by either name, and the sink's options are not warned about. Timestamps win over
    offsets (as in Kafka's source) with a warning that the offsets are not used."""
    from rocketstore.spark.options import parse_options
    from rocketstore.spark.schema import store_config

    given = {
        **{k.lower(): v for k, v in SMALL_OPTIONS.items()},
        "path": "/stores/a",
        "paths": '["/stores/a"]',
        "checkpointlocation": "/ck",
        "queryname": "q",
        "flush_disk_type": "SYNC_FLUSH",
        "startingoffset": '{"TopicA": {"0": 5}}',
        "TOPICS": "TopicA",
        "NoSuchThing": "1",
    }
    with caplog.at_level("WARNING", logger="rocketstore.spark"):
        opts = parse_options(given)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 2, warned
    assert "option 'startingoffset' is neither" in warned[0] and "did you mean 'startingOffsets'?" in warned[0]
    assert "option 'NoSuchThing' is neither" in warned[1] and "did you mean" not in warned[1]
    assert opts.starting == "earliest" and opts.selection.names == {"TopicA"}
    caplog.clear()
    with caplog.at_level("WARNING", logger="rocketstore.spark"):
        store_config({"lockwaitms": "5", "stagingdir": "/s", "sinkid": "s", "topic": "T", "config": ""})
        assert not caplog.records
        store_config({"stagingDirectory": "/s", "flushDiskTyp": "SYNC_FLUSH"})
    warned = [r.getMessage() for r in caplog.records]
    assert "did you mean 'stagingDir'?" in warned[0] and "did you mean 'flushDiskType'?" in warned[1]
    caplog.clear()
    with caplog.at_level("WARNING", logger="rocketstore.spark"):
        opts = parse_options({"path": "/s", "startingTimestamp": "1000", "startingOffsets": '{"TopicA": {"0": 5}}'})
    assert opts.starting_ts == 1000
    assert "option startingOffsets is not used: startingTimestamp takes precedence" in caplog.text
    # offsets a timestamp overrides are not checked either, as Kafka's validateBatchOptions skips them
    opts = parse_options(
        {
            "path": "/s",
            "startingOffsets": "latest",  # no batch start on its own
            "startingTimestamp": "1000",
        }
    )
    assert opts.starting == "earliest" and opts.starting_ts == 1000
    overridden = {"startingOffsets": '{"T":{"0":500}}', "endingOffsets": '{"T":{"0":100}}'}  # start after end
    opts = parse_options({"path": "/s", **overridden, "startingTimestamp": "1000", "endingTimestamp": "9000"})
    assert (opts.starting, opts.ending, opts.starting_ts, opts.ending_ts) == ("earliest", "latest", 1000, 9000)


def test_a_kafka_source_option_is_warned_about_as_one(caplog):
    """Kafka's options got the generic warning with a near name ("minOffsetsPerTrigger": did you
    mean 'maxOffsetsPerTrigger'?), pointing a user to an option that does something else."""
    from rocketstore.spark.options import parse_options

    given = {"path": "/s", "minOffsetsPerTrigger": "5", "startingOffsetsByTimestamp": "{}", "subscribe": "T"}
    with caplog.at_level("WARNING", logger="rocketstore.spark"):
        parse_options(given)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 3, warned
    assert all("a Kafka source option" in w and "did you mean" not in w for w in warned), warned
    assert "no read limit bound by a delay" in warned[0]
    assert "set startingTimestamp" in warned[1] and "set topics" in warned[2]


def test_every_option_the_source_reads_is_a_known_option():
    """``warn_unknown_options`` keeps its own list of the source's options: an option read by name
    anywhere in the Spark package and missing there would be warned about as unknown."""
    from rocketstore.spark.schema import SOURCE_OPTIONS, SPARK_OPTIONS

    package = Path(__file__).resolve().parents[1] / "src" / "rocketstore" / "spark"
    pattern = re.compile(r"\b(?:flag_option|int_option|option|_positive)\([a-z_.]+, \"([A-Za-z]+)\"")
    read = {name for path in package.glob("*.py") for name in pattern.findall(path.read_text())}
    assert {"maxPartitionBytes", "startingOffsets", "lockWaitMs"} <= read
    assert read - set(SOURCE_OPTIONS) - set(SPARK_OPTIONS) == set()


def test_a_pre_45_file_size_option_is_ignored_as_rocketmq_ignores_it(caplog):
    """``mapedFileSizeCommitLog`` (RocketMQ before 4.5) set the size as the store's options did not:
    a read would then refuse a good store. Ignored, with a warning naming the key to use."""
    from rocketstore.spark.schema import store_config

    with caplog.at_level("WARNING", logger="rocketstore.spark"):
        config = store_config({"mapedfilesizecommitlog": "65536", "mappedfilesizeconsumequeue": "2000"})
    assert config.mapped_file_size_commit_log == 1 << 30 and config.mapped_file_size_consume_queue == 2000
    assert "set 'mappedFileSizeCommitLog' instead" in caplog.text


def test_the_tags_option_trims_as_java_trims():
    """Each tag of the ``tags`` option is trimmed as RocketMQ's FilterAPI trims it (String.trim:
    characters up to U+0020), so a read selects what a pull with the same expression gets."""
    from rocketstore.spark.options import parse_options

    opts = parse_options({"path": "/s", "tags": "TagA\x01 || \u00a0TagB || TagC\u2003 ||\t"})
    assert opts.tags == {"TagA", "\u00a0TagB", "TagC\u2003"}
    # and, as FilterAPI, only "" and "*" mean every message: " * " is the tag "*", blanks no tag at all
    assert parse_options({"path": "/s", "tags": "*"}).tags is None
    assert parse_options({"path": "/s", "tags": ""}).tags is None
    assert parse_options({"path": "/s", "tags": "\x1f*\x00"}).tags == {"*"}
    assert parse_options({"path": "/s", "tags": "   "}).tags == frozenset()


def _retention(path: Path) -> tuple[int, int]:
    """Retention as the store runs it (every file expired); T1/0's (min, max) offsets after it."""
    import time

    from rocketstore import MessageStore

    with MessageStore.open(path, small_config(fileReservedTime=0)) as s:
        assert s.clean_expired_files(now=time.time() + 3600).consume_queue_files > 0
        return s.get_min_offset_in_queue("T1", 0), s.get_max_offset_in_queue("T1", 0)


def test_consume_queue_files_removed_after_planning_lose_only_their_messages(tmp_path, caplog):
    """Retention between a read's planning and its task: the consume-queue files it removed lose
    only their own messages (failOnDataLoss=false warns naming that range; the default fails
    naming it); what the store still holds is read, each row with its own queue offset."""
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    from rocketstore.errors import DataLossError
    from rocketstore.spark.read import read_partition
    from rocketstore.spark.source import BatchReader

    store = interleaved_store(tmp_path / "store")
    options = {**SMALL_OPTIONS, "path": str(store), "topics": "T1"}
    schema = StructType([StructField("queueOffset", LongType()), StructField("body", BinaryType())])
    kept = BatchReader({**options, "failOnDataLoss": "false"}, schema).partitions()
    failing = BatchReader(options, schema).partitions()
    lo, hi = _retention(store)
    assert 0 < lo < hi == 100
    left = [r for r in export_rows(store, small_config()) if r["topic"] == "T1"]
    assert [r["queueOffset"] for r in left] == list(range(lo, hi))
    first_kept = lo - lo % 20  # the first consume-queue file still there (20 units a file)
    with caplog.at_level("WARNING", logger="rocketstore.spark.read"):
        got = [row for p in kept for batch in read_partition(p) for row in batch.to_pylist()]
    assert [(r["queueOffset"], r["body"]) for r in got] == [
        (r["queueOffset"], f"m{r['queueOffset']}".encode()) for r in left
    ]
    warned = [r.getMessage() for r in caplog.records if "consume queue" in r.getMessage()]
    assert warned == [
        f"consume queue T1/0 offsets 0 to {first_kept - 1}: removed before it was read; skipped (failOnDataLoss=false)"
    ]
    with pytest.raises(DataLossError, match=rf"^consume queue T1/0 offsets 0 to {first_kept - 1}: it was removed"):
        [batch for p in failing for batch in read_partition(p)]


def test_a_queue_its_topic_deletion_removed_after_planning_is_not_blamed_on_retention(tmp_path):
    """A topic deleted between a read's planning and its task: the loss names both causes a
    consume queue can go by (the message said retention alone)."""
    from pyspark.sql.types import LongType, StructField, StructType

    from rocketstore import MessageStore
    from rocketstore.errors import DataLossError
    from rocketstore.spark.read import read_partition
    from rocketstore.spark.source import BatchReader

    store = interleaved_store(tmp_path / "store")
    schema = StructType([StructField("queueOffset", LongType())])
    planned = BatchReader({**SMALL_OPTIONS, "path": str(store), "topics": "T1"}, schema).partitions()
    with MessageStore.open(store, small_config()) as s:
        assert s.delete_topics(["T1"]) == ["T1"]
    with pytest.raises(DataLossError, match=r"^consume queue T1/0 offsets 0 to 99: it was removed \(by a deletion of"):
        [batch for p in planned for batch in read_partition(p)]


def test_a_topic_deleted_and_created_again_after_planning_is_a_deletion_not_damage(tmp_path, caplog):
    """A topic deleted and written again between a read's planning and its task: the task found
    the new queue's units, whose records lie past the planned log end, and blamed damaged records
    ("see rocketstore verify"), or skipped the zeroed units of the new file in silence. The
    planned slice is now lost to the topic's deletion, by name, and none of the new messages is
    read (the next batch reads them)."""
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    from rocketstore import Message, MessageStore
    from rocketstore.errors import DataLossError
    from rocketstore.spark.read import read_partition, unreadable_units
    from rocketstore.spark.source import BatchReader

    store = interleaved_store(tmp_path / "store", 30)
    schema = StructType([StructField("queueOffset", LongType()), StructField("body", BinaryType())])
    options = {**SMALL_OPTIONS, "path": str(store)}
    failing = BatchReader(options, schema).partitions()
    skipping = BatchReader({**options, "failOnDataLoss": "false"}, schema).partitions()
    with MessageStore.open(store, small_config()) as s:
        assert s.delete_topics(["T1"]) == ["T1"]
        for i in range(3):
            s.put(Message("T1", b"new%d" % i), queue_id=0).raise_for_status()
        s.wait_for_dispatch()
    with pytest.raises(
        DataLossError,
        match=r"^consume queue T1/0 offsets 0 to 29: it was removed \(by a deletion of its topic after this read",
    ):
        [batch for p in failing for batch in read_partition(p)]
    with caplog.at_level("WARNING", logger="rocketstore.spark.read"):
        rows = [row for p in skipping for batch in read_partition(p) for row in batch.to_pylist()]
    assert sorted(r["body"] for r in rows) == [b"x" * 500] * 30  # Filler only: no T1 row, old or new
    assert [r.getMessage() for r in caplog.records] == [
        "consume queue T1/0 offsets 0 to 29: removed before it was read; skipped (failOnDataLoss=false)"
    ]
    assert [u for p in skipping for u in unreadable_units(p)] == []  # the export's check: not damage either


def test_a_marks_file_unreadable_at_read_time_is_no_deletion(tmp_path):
    """deletedTopics.json unreadable when a task reads (no .bak): nothing is known of deletions
    since planning, and the planned slices are read, not reported lost to a deletion."""
    from pyspark.sql.types import LongType, StructField, StructType

    from rocketstore import Message, MessageStore
    from rocketstore.spark.read import read_partition
    from rocketstore.spark.source import BatchReader

    store = interleaved_store(tmp_path / "store", 5)
    with MessageStore.open(store, small_config()) as s:  # T1 gets a mark, and queues again
        assert s.delete_topics(["T1"]) == ["T1"]
        for i in range(3):
            s.put(Message("T1", b"new%d" % i), queue_id=0).raise_for_status()
        s.wait_for_dispatch()
    schema = StructType([StructField("queueOffset", LongType())])
    planned = BatchReader({**SMALL_OPTIONS, "path": str(store), "topics": "T1"}, schema).partitions()
    marks = store / "config" / "deletedTopics.json"
    marks.write_bytes(b"\xff not json")
    (store / "config" / "deletedTopics.json.bak").unlink(missing_ok=True)
    rows = [row for p in planned for batch in read_partition(p) for row in batch.to_pylist()]
    assert sorted(r["queueOffset"] for r in rows) == [0, 1, 2]


def test_a_born_time_outside_the_years_a_timestamp_holds_reads_as_null(spark, tmp_path):  # noqa: F811
    """bornTimestamp is any Java long (an import keeps it): one past what a microsecond TIMESTAMP
    holds wrapped around silently (Long.MAX read as 1969-12-31), and one outside years 1-9999
    made collect() fail (year 0 is out of range). Such a time (outside 0001-01-03 to 9999-12-29,
    which a local datetime holds in any time zone) reads as null."""
    from rocketstore import Message, MessageStore

    born = [-(2**63), -62135424000001, -62135424000000, 0, 253402127999999, 253402128000000, 9300000000000000]
    store = tmp_path / "store"
    with MessageStore.open(store, small_config()) as s:
        for i, ms in enumerate(born):
            s.put_as_is(Message("B", b"%d" % i, born_timestamp=ms)).raise_for_status()
        s.put_as_is(Message("B", b"last", born_timestamp=2**63 - 1)).raise_for_status()
    for mode in ("consumequeue", "commitlog"):
        rows = reader(spark, mode=mode).load(str(store)).select("body", "bornTimestamp").collect()
        got = {bytes(r.body): r.bornTimestamp for r in rows}
        assert got == {
            b"0": None,
            b"1": None,
            b"2": datetime.datetime(1, 1, 3),
            b"3": datetime.datetime(1970, 1, 1),
            b"4": datetime.datetime(9999, 12, 29, 23, 59, 59, 999000),
            b"5": None,
            b"6": None,
            b"last": None,
        }, mode


def test_an_ending_offset_retention_removed_is_data_loss(tmp_path, caplog):
    """endingOffsets below a queue's min offset asks for messages retention removed: it fails the
    read (failOnDataLoss, the default), as a starting offset below it does, or is warned about
    and reads nothing of the queue; an end at the min offset asks for none and is no loss."""
    from pyspark.sql.types import LongType, StructField, StructType

    from rocketstore.errors import DataLossError
    from rocketstore.spark.source import BatchReader

    store = interleaved_store(tmp_path / "store")
    lo, hi = _retention(store)
    assert 5 < lo < hi
    schema = StructType([StructField("queueOffset", LongType())])
    options = {**SMALL_OPTIONS, "path": str(store), "topics": "T1", "queues": "0"}
    ending = json.dumps({"T1": {"0": 5}})
    with pytest.raises(DataLossError, match=rf"T1/0: the ending offset 5 is below the queue's minimum offset {lo}"):
        BatchReader({**options, "endingOffsets": ending}, schema).partitions()
    with caplog.at_level("WARNING", logger="rocketstore.spark.plan"):
        parts = BatchReader({**options, "endingOffsets": ending, "failOnDataLoss": "false"}, schema).partitions()
    assert [s for p in parts for s in p.slices] == [] and "the ending offset 5 is below" in caplog.text
    at_min = json.dumps({"T1": {"0": lo}})
    assert [s for p in BatchReader({**options, "endingOffsets": at_min}, schema).partitions() for s in p.slices] == []


def test_a_segment_removed_after_planning_names_the_queue_offsets_it_held(tmp_path, caplog):
    """A commit-log segment retention deleted between a read's planning and its task: the warning
    (failOnDataLoss=false) or the error names the queues and offsets it held, not only the file."""
    from pyspark.sql.types import LongType, StructField, StructType

    from rocketstore import MessageStore
    from rocketstore.errors import DataLossError
    from rocketstore.spark.read import read_partition
    from rocketstore.spark.source import BatchReader

    store = interleaved_store(tmp_path / "store")
    options = {**SMALL_OPTIONS, "path": str(store), "topics": "T1"}
    schema = StructType([StructField("queueOffset", LongType())])
    kept = BatchReader({**options, "failOnDataLoss": "false"}, schema).partitions()
    failing = BatchReader(options, schema).partitions()
    first = sorted((store / "commitlog").iterdir())[0]
    with MessageStore.open(store, small_config(), read_only=True) as s:
        held = [o for o in range(100) if s.get_commit_log_offset_in_queue("T1", 0, o) < first.stat().st_size]
    first.unlink()
    named = f"commit-log segment {first.name} ({len(held)} messages: T1/0 offsets 0 to {held[-1]})"
    with caplog.at_level("WARNING", logger="rocketstore.spark.read"):
        got = [row["queueOffset"] for p in kept for batch in read_partition(p) for row in batch.to_pylist()]
    assert got == list(range(len(held), 100)) and named in caplog.text
    with pytest.raises(DataLossError, match=re.escape(named)):
        [batch for p in failing for batch in read_partition(p)]
