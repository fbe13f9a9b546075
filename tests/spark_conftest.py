"""The Spark test session and shared helpers (imported by the tests/test_spark_*.py modules).

One local[2] session serves every Spark test of the pytest process. It is made *without*
registering the data source: ``format("rocketstore")`` works through PySpark's automatic lookup
of the installed ``pyspark_rocketstore`` module, which the tests therefore check throughout.
"""

from __future__ import annotations

import atexit
import base64
import datetime
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # before any JVM starts
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from rocketstore import Message, MessageStore, StoreConfig

VECTOR_OPTIONS = {
    "mappedFileSizeCommitLog": "65536",
    "mappedFileSizeConsumeQueue": "2000",
    "maxHashSlotNum": "1000",
    "maxIndexNum": "3000",
}
SMALL_GEOMETRY = {
    "mappedFileSizeCommitLog": 16384,
    "mappedFileSizeConsumeQueue": 400,
    "maxHashSlotNum": 64,
    "maxIndexNum": 256,
    "brokerIP1": "127.0.0.1",
}
SMALL_OPTIONS = {k: str(v) for k, v in SMALL_GEOMETRY.items()}
TOPICS = ("TopicA", "TopicB", "OrderTopic")
TAGS = ("TagA", "TagB", "TagC")

_session: list[Any] = []


def get_spark(tmp_root: Path) -> Any:
    if not _session:
        from rocketstore.spark.session import local_session

        spark = local_session("local[2]", "rocketstore-tests", work_dir=str(tmp_root), register_source=False)
        _session.append(spark)
        atexit.register(spark.stop)
    return _session[0]


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return get_spark(tmp_path_factory.mktemp("spark"))


def small_config(**extra: Any) -> StoreConfig:
    return StoreConfig(**SMALL_GEOMETRY, **extra)


def wait_next_ms(after: int) -> int:
    """Spin until the clock is past ``after`` (ms), so the next put gets a later store time."""
    while True:
        now = time.time_ns() // 1_000_000
        if now > after:
            return now


def write_messages(store: MessageStore, count: int, start: int = 0, topics: tuple[str, ...] = TOPICS) -> None:
    """Deterministic messages over ``topics`` x 4 queues, with tags, keys and properties."""
    for i in range(start, start + count):
        topic = topics[i % len(topics)]
        props = {"seq": str(i)} if i % 5 else {"seq": str(i), "note": "é ü"}
        message = Message(
            topic,
            f"message {i} {'x' * (i % 37)}".encode(),
            tags=TAGS[i % 3] if i % 7 else None,
            keys=[f"key-{i}", f"order-{i % 11}"] if i % 4 else None,
            properties=props,
            flag=i % 3,
        )
        store.put(message, queue_id=(i // len(topics)) % 4).raise_for_status()


def make_store(path: Path, count: int = 300, **extra: Any) -> Path:
    with MessageStore.open(path, small_config(**extra)) as store:
        write_messages(store, count)
        store.wait_for_dispatch()
    return path


def damage_record(path: Path, topic: str, queue_id: int, queue_offset: int) -> int:
    """Zero the magic code of a message's record (a store of several segments, the record in an
    early one: the recovery after a clean shutdown does not look at it); returns its commit-log
    offset."""
    config = small_config()
    with MessageStore.open(path, config, read_only=True) as store:
        offset = store.get_commit_log_offset_in_queue(topic, queue_id, queue_offset)
    size = config.mapped_file_size_commit_log
    with open(path / "commitlog" / f"{offset - offset % size:020d}", "r+b") as f:
        f.seek(offset % size + 4)
        f.write(bytes(4))
    return offset


def export_rows(path: Path, config: StoreConfig, topics: Iterable[str] | None = None) -> list[dict]:
    """What the consume queues serve, as export rows (the reference the Spark rows must equal)."""
    from rocketstore.export import iter_queued

    with MessageStore.open(path, config, read_only=True) as store:
        return [msg.to_json_dict() for msg, *_ in iter_queued(store, topics) if msg is not None]


def log_rows(path: Path, config: StoreConfig) -> list[dict]:
    from rocketstore.export import iter_log

    with MessageStore.open(path, config, read_only=True) as store:
        return [msg.to_json_dict() for msg in iter_log(store)]


def _ms(value: datetime.datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)  # the session time zone is UTC
    return round(value.timestamp() * 1000)


def as_export(row: Any) -> dict:
    """A Spark row in the export's JSON shape (timestamps in ms, body in base64)."""
    d = row.asDict() if hasattr(row, "asDict") else dict(row)
    if d.get("properties") is not None:
        d["properties"] = dict(sorted(dict(d["properties"]).items()))  # a dict, or (key, value) pairs
    if d.get("body") is not None:
        d["bodyLen"] = len(d["body"])
        d["body"] = base64.b64encode(d["body"]).decode("ascii")
    for name in ("bornTimestamp", "storeTimestamp"):
        if d.get(name) is not None:
            d[name] = _ms(d[name])
    return d


def sort_key(row: dict) -> tuple:
    return (row["topic"], row["queueId"], row["queueOffset"], row["commitLogOffset"])


def strip_cq(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ("cqTagsCode", "cqSize")}


def spark_rows(df: Any) -> list[dict]:
    return sorted((as_export(r) for r in df.collect()), key=sort_key)


def assert_rows_equal(got: list[dict], want: list[dict]) -> None:
    want = sorted((strip_cq(w) for w in want), key=sort_key)
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            diff = {k: (g.get(k), w.get(k)) for k in sorted(set(g) | set(w)) if g.get(k) != w.get(k)}
            pytest.fail(f"row {i} ({w['topic']}/{w['queueId']}@{w['queueOffset']}) differs: {diff}")
    assert len(got) == len(want)


def reader(spark: Any, options: dict[str, str] | None = None, **more: str) -> Any:
    return spark.read.format("rocketstore").options(**(options or SMALL_OPTIONS), **more)


def interleaved_store(path: Path, count: int = 100) -> Path:
    """``count`` messages in T1/0 between 500-byte Filler ones: several consume-queue files of
    T1/0 over a dozen commit-log segments, so retention removes some of each."""
    from rocketstore import Message, MessageStore

    with MessageStore.open(path, small_config()) as s:
        for i in range(count):
            s.put(Message("T1", f"m{i}".encode()), queue_id=0).raise_for_status()
            s.put(Message("Filler", b"x" * 500), queue_id=0).raise_for_status()
        s.wait_for_dispatch()
    return path
