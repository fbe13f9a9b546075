"""Planning a batch read on the driver, without a Spark session: the partitions a consume-queue
read is cut into, and the options checked before it is planned."""

from __future__ import annotations

import itertools
import math
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.queues.consume_queue import ConsumeQueue
from rocketstore.spark.options import parse_options
from rocketstore.spark.plan import Snapshot, batch_ranges, queue_partitions

GEOMETRY = {"mappedFileSizeCommitLog": 16384, "mappedFileSizeConsumeQueue": 400, "brokerIP1": "127.0.0.1"}
OPTIONS = {k: str(v) for k, v in GEOMETRY.items()}


@pytest.fixture(scope="module")
def uneven(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Queues of very different lengths (1 to ~150 messages, most spanning several 20-unit
    consume-queue files) and record sizes (12 to ~1 KiB bodies); Light's queues hold only the
    first half of the log, Late's only the second half."""
    path = tmp_path_factory.mktemp("plan") / "store"
    with MessageStore.open(path, StoreConfig(**GEOMETRY)) as store:
        for i in range(700):
            if i % 10 < 6:
                topic, queue_id = "Heavy", (0, 0, 0, 1, 1, 2, 4)[(i // 10) % 7]
            else:
                topic, queue_id = ("Light", i % 2) if i < 350 else ("Late", i % 3)
            body = b"x" * (12 + (i * 37) % (1000 if i % 3 else 40))
            store.put(Message(topic, body), queue_id=queue_id).raise_for_status()
        store.put(Message("Single", b"one"), queue_id=3).raise_for_status()
        store.wait_for_dispatch()
    return path


def _plan(path: Path, **options: str) -> list[list[tuple[str, int, int, int]]]:
    opts = parse_options({**OPTIONS, "path": str(path), **options})
    with Snapshot(opts.path, opts.config) as snap:
        ranges = batch_ranges(snap, opts, opts.selection, None, None)
        parts = queue_partitions(snap, snap.spec(opts, opts.columns), ranges, opts)
    return [[(s.topic, s.queue_id, s.start, s.end) for s in p.slices] for p in parts]


def _reference(path: Path, **options: str) -> list[list[tuple[str, int, int, int]]]:
    """The partitions by definition: each queue's commit-log offsets read one unit at a time, and
    a grid point's queue offset the first of the range whose record lies at or after it."""
    opts = parse_options({**OPTIONS, "path": str(path), **options})
    with Snapshot(opts.path, opts.config) as snap:
        ranges = batch_ranges(snap, opts, opts.selection, None, None)
        count = sum(e - s for _, _, s, e in ranges)
        parts = min(max(opts.min_partitions, math.ceil(count * snap.average_size() / opts.partition_bytes)), count)
        phys = {(t, q): [snap.table[(t, q)].get_unit(i)[0] for i in range(s, e)] for t, q, s, e in ranges}
    if parts <= 1:
        return [[(t, q, s, e) for t, q, s, e in ranges]]
    grid = parts * 4
    lo = min(p[0] for p in phys.values())
    hi = max(p[-1] for p in phys.values()) + 1
    points = [lo + (hi - lo) * k // grid for k in range(1, grid)]
    fine = {}
    for t, q, s, e in ranges:
        column = phys[(t, q)]
        fine[(t, q)] = [s] + [s + next((i for i, p in enumerate(column) if p >= x), len(column)) for x in points] + [e]
    cells = [sum(o[k + 1] - o[k] for o in fine.values()) for k in range(grid)]
    chosen, done = [0], 0
    for k, cell in enumerate(cells[:-1]):
        done += cell
        if done >= sum(cells) / parts * len(chosen) and len(chosen) < parts:
            chosen.append(k + 1)
    chosen.append(grid)
    out = []
    for a, b in itertools.pairwise(chosen):
        slices = [(t, q, fine[(t, q)][a], fine[(t, q)][b]) for t, q, _, _ in ranges]
        if any(e > s for _, _, s, e in slices):
            out.append([x for x in slices if x[3] > x[2]])
    return out


@pytest.mark.parametrize("min_partitions", [2, 3, 7, 16, 64, 5000])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"topics": "Heavy,Single"},
        {
            "startingOffsets": '{"Heavy":{"0":7,"1":-2,"2":30,"4":1},"Light":{"0":40,"1":-2},'
            '"Late":{"0":-2,"1":30,"2":-2},"Single":{"3":-2}}',
            "endingOffsets": '{"Heavy":{"0":150,"1":-1,"2":-1,"4":59},"Light":{"0":-1,"1":3},'
            '"Late":{"0":-1,"1":-1,"2":20},"Single":{"3":-1}}',
        },
    ],
    ids=["all", "two-topics", "offsets"],
)
def test_partitions_are_cut_where_the_reference_cuts_them(uneven, options, min_partitions):
    """Every planned slice (topic, queue, start, end) of every partition equals the reference's:
    the queues' commit-log offsets read in bulk cut the log exactly where reading them one unit
    at a time cuts it."""
    want = _reference(uneven, minPartitions=str(min_partitions), **options)
    got = _plan(uneven, minPartitions=str(min_partitions), **options)
    assert got == want
    assert len(got) > 1


def _unit_reads(path: Path, min_partitions: int) -> int:
    """How many times planning the read reads consume-queue units (ConsumeQueue.read_units)."""
    code, calls = ConsumeQueue.read_units.__code__, [0]

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code is code:
            calls[0] += 1

    sys.setprofile(profile)
    try:
        _plan(path, minPartitions=str(min_partitions))
    finally:
        sys.setprofile(None)
    return calls[0]


def test_planning_reads_each_queue_once_whatever_the_partition_count(uneven):
    """Cutting the log in 64 or 300 partitions reads the consume queues as often as cutting it in
    2 (each queue's units once), not once per grid point and queue (the planning time grew with
    partitions x queues)."""
    two = _unit_reads(uneven, 2)
    assert _unit_reads(uneven, 64) == two
    assert _unit_reads(uneven, 300) == two


# -- options ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"topics": "Topic["}, "option topics: 'Topic[' is neither a topic name nor a pattern"),
        ({"queues": "a"}, 'option queues: "a" is not a queue id'),
        ({"queues": '{"TopicA":0}'}, "option queues: TopicA must map to a list of queue ids"),
        ({"queues": "[0]"}, "option queues: "),
        ({"startingOffsets": "[]"}, "option startingOffsets must be earliest or a JSON object"),
        ({"startingOffsets": '{"TopicA":[1]}'}, 'option startingOffsets: TopicA must map to {"queueId": offset}'),
        ({"startingOffsets": "latest"}, "option startingOffsets: latest is not allowed for a batch read"),
        ({"endingOffsets": "earliest"}, "option endingOffsets: earliest is not an ending offset"),
        ({"endingOffsets": '{"TopicA":{"0":-3}}'}, "option endingOffsets: TopicA/0: -3 is not a valid offset"),
        ({"endingTimestamp": "2026-13-01"}, "option endingTimestamp: '2026-13-01' is neither epoch milliseconds"),
        # offsets, queue ids and store times are Java longs and ints: past them they were taken, and read nothing
        ({"startingOffsets": '{"TopicA":{"0":9223372036854775808}}'}, "TopicA/0: 9223372036854775808 is not a valid"),
        ({"startingOffsets": '{"TopicA":{"2147483648":0}}'}, "'2147483648' is not a queue id (an integer from 0, a"),
        ({"startingTimestamp": "99999999999999999999"}, "past the last store time a Java long holds"),
        ({"startingTimestamp": "-1"}, "option startingTimestamp: '-1' is before 1970"),
        ({"endingTimestamp": "1969-12-31T23:59:59"}, "option endingTimestamp: '1969-12-31T23:59:59' is before 1970"),
        ({"minPartitions": "1e3"}, "option minPartitions must be an integer, not '1e3'"),
        ({"failOnDataLoss": "no"}, "option failOnDataLoss must be true or false, not 'no'"),
        ({"mode": "kafka"}, "option mode must be consumequeue or commitlog, not 'kafka'"),
        ({"mode": "commitlog", "startingOffsets": '{"A":{"0":1}}'}, "startingOffsets/endingOffsets need mode="),
        ({"maxPartitionBytes": "0"}, "maxPartitionBytes must be a positive integer"),
        ({"minPartitions": "-3"}, "minPartitions must be a positive integer"),
        ({"maxRecordsPerBatch": "-1"}, "maxRecordsPerBatch must be a positive integer"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be a positive integer"),
        ({"startingOffsets": '{"TopicA": {"0": 5.9}}'}, "TopicA/0: 5.9 is not an offset"),
        ({"endingOffsets": '{"TopicA": {"0": true}}'}, "TopicA/0: true is not an offset"),
        ({"startingOffsets": '{"TopicA": {"-1": 3}}'}, "is not a queue id"),
        ({"queues": '{"TopicA": [1.5]}'}, "queues: 1.5 is not a queue id"),
        ({"queues": "0,-1"}, "is not a queue id"),
        ({"startingOffsets": '{"TopicA": {"0": -1}}'}, "TopicA/0: -1 (latest) is not allowed for a batch read"),
        ({"startingOffsets": "earliset"}, 'must be earliest or a JSON object like {"TopicA":{"0":23,"1":-2}}'),
        ({"endingOffsets": "{oops"}, "endingOffsets: not valid JSON"),
        ({"endingOffsets": "lastest"}, "endingOffsets must be latest or a JSON object like"),
        (
            {"startingOffsets": '{"TopicA": {"0": 10}}', "endingOffsets": '{"TopicA": {"0": 5}}'},
            "TopicA/0 starts at 10, after its ending offset 5",
        ),
    ],
)
def test_a_malformed_option_is_an_invalid_argument_error(options, error):
    """Every option the source refuses raises InvalidArgumentError (a RocketStoreError, still a
    ValueError), not a plain ValueError: ``except RocketStoreError`` catches it."""
    from rocketstore.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=re.escape(error)):
        parse_options({"path": "store", **options})


def test_stream_only_path_and_schema_errors_are_invalid_argument_errors():
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from rocketstore.errors import InvalidArgumentError
    from rocketstore.spark.schema import requested_columns

    with pytest.raises(InvalidArgumentError, match="option endingOffsets is for batch reads only"):
        parse_options({"path": "store", "endingOffsets": "latest"}, streaming=True)
    for start in ({"startingOffsets": "earliest"}, {}):  # without one, a stream starts at latest: an offset
        with pytest.raises(InvalidArgumentError, match="streaming reads use mode=consumequeue"):
            parse_options({"path": "store", "mode": "commitlog", **start}, streaming=True)
    with pytest.raises(InvalidArgumentError, match="no store given"):
        parse_options({})
    with pytest.raises(InvalidArgumentError, match="one store at a time"):
        parse_options({"paths": '["a", "b"]'})
    with pytest.raises(InvalidArgumentError, match="rocketstore has no column 'nope'"):
        requested_columns(StructType([StructField("nope", StringType())]))
    with pytest.raises(InvalidArgumentError, match="column 'topic' is string, not int64"):
        requested_columns(StructType([StructField("topic", LongType())]))
    with pytest.raises(InvalidArgumentError, match="declare topic without NOT NULL"):
        requested_columns(StructType([StructField("topic", StringType(), nullable=False)]))


def test_a_config_file_that_cannot_be_read_or_holds_a_bad_setting_is_a_config_error(tmp_path):
    """``config`` naming no file (or a folder) raises ConfigError naming the option and the path,
    not pathlib's bare FileNotFoundError; so does a bad value in the file or in a store-setting
    option (was a plain ValueError)."""
    from rocketstore.errors import ConfigError

    missing = tmp_path / "nonexistent" / "broker.conf"
    with pytest.raises(ConfigError, match=rf"^option config: cannot read {re.escape(str(missing))}: No such file"):
        parse_options({"path": "store", "config": str(missing)})
    with pytest.raises(ConfigError, match=rf"^option config: cannot read {re.escape(str(tmp_path))}: Is a directory"):
        parse_options({"path": "store", "config": str(tmp_path)})
    bad = tmp_path / "broker.conf"
    bad.write_text("mappedFileSizeCommitLog=abc\n")
    with pytest.raises(ConfigError, match=rf"^option config: {re.escape(str(bad))}: mappedFileSizeCommitLog must be"):
        parse_options({"path": "store", "config": str(bad)})
    bad.write_text("flushDiskTyp=SYNC_FLUSH\n")
    with pytest.raises(ConfigError, match=rf"^option config: {re.escape(str(bad))}: unknown key 'flushDiskTyp'"):
        parse_options({"path": "store", "config": str(bad)})
    with pytest.raises(
        ConfigError, match=r"^option mappedFileSizeCommitLog: mappedFileSizeCommitLog must be an integer"
    ):
        parse_options({"path": "store", "mappedFileSizeCommitLog": "abc"})


def test_a_read_of_a_store_whose_commit_log_is_gone_says_so(tmp_path: Path, caplog) -> None:
    """A commit log missing (a storePathCommitLog not given, a folder moved away) while the queues
    hold units: the read has 0 rows, and the driver's log says why, as ``rocketstore export`` does."""
    path = tmp_path / "store"
    with MessageStore.open(path, StoreConfig(**GEOMETRY)) as store:
        store.put(Message("T", b"x")).raise_for_status()
    (path / "commitlog").rename(tmp_path / "elsewhere")
    with Snapshot(str(path), StoreConfig(**GEOMETRY)) as snap:
        assert snap.table == {}
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert said == [f"{path}: the commit log holds no record but the consume queues hold units: every message is gone"]
    caplog.clear()
    (tmp_path / "elsewhere").rename(path / "commitlog")
    with Snapshot(str(path), StoreConfig(**GEOMETRY)) as snap:
        assert list(snap.table) == [("T", 0)]
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
