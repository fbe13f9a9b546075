"""Writes: DataFrames appended to a store, failed jobs, exactly-once streaming writes."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from rocketstore import MessageStore
from rocketstore.spark.commits import MARKER, read_markers
from rocketstore.verify import verify_store
from spark_conftest import (
    SMALL_GEOMETRY,
    SMALL_OPTIONS,
    TOPICS,
    VECTOR_OPTIONS,
    damage_record,
    export_rows,
    log_rows,
    make_store,
    small_config,
    spark,  # noqa: F401 - the session fixture
    write_messages,
)

pytestmark = pytest.mark.spark


def _frame(spark: Any, n: int, partitions: int = 3) -> Any:  # noqa: F811
    rows = [
        (
            ["TopicA", "TopicB"][i % 2],
            f"body {i}".encode(),
            None if i % 3 == 0 else i % 4,
            ["TagA", None, "TagB"][i % 3],
            f"k{i} o{i % 5}" if i % 2 else None,
            {"seq": str(i)} if i % 4 else None,
        )
        for i in range(n)
    ]
    schema = "topic string, body binary, queueId int, tags string, `keys` string, properties map<string,string>"
    return spark.createDataFrame(rows, schema).repartition(partitions)


def _messages(store: Path) -> list[tuple]:
    rows = export_rows(store, small_config())
    return sorted((r["topic"], r["body"], r["tags"], r["keys"], r["properties"].get("seq")) for r in rows)


def _expected(n: int) -> list[tuple]:
    import base64

    return sorted(
        (
            ["TopicA", "TopicB"][i % 2],
            base64.b64encode(f"body {i}".encode()).decode(),
            ["TagA", None, "TagB"][i % 3],
            f"k{i} o{i % 5}" if i % 2 else None,
            str(i) if i % 4 else None,
        )
        for i in range(n)
    )


def _check_clean(store: Path, rmqread: Any) -> None:
    report = verify_store(store, small_config())
    assert report.ok, report.problems
    done = rmqread("check", store, small_config())
    assert done.returncode == 0, done.stdout + done.stderr


def test_append_dataframe(spark, tmp_path, rmqread):  # noqa: F811
    store = tmp_path / "store"
    _frame(spark, 90).write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
    assert _messages(store) == _expected(90)
    _check_clean(store, rmqread)
    rows = export_rows(store, small_config())
    assert {(r["topic"], r["queueId"]) for r in rows if r["body"]} >= {("TopicA", q) for q in range(4)}
    # a second job appends; no staging files are left behind
    _frame(spark, 90).write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
    assert _messages(store) == sorted(_expected(90) * 2)
    assert not (tmp_path / ".store.spark-staging").exists()
    _check_clean(store, rmqread)
    with pytest.raises(Exception, match="append"):
        _frame(spark, 3).write.format("rocketstore").options(**SMALL_OPTIONS).mode("overwrite").save(str(store))


def test_a_folder_that_is_no_store_is_refused(spark, tmp_path, hash_tree):  # noqa: F811
    """Refused on the driver as a read is (the hint names a store inside); an empty folder may
    become a store."""
    home = tmp_path / "home"
    make_store(home / "store", 3)
    (home / "notes.txt").write_text("x")
    before = hash_tree(home)
    df = spark.createDataFrame([("TopicA", b"b")], "topic string, body binary")
    with pytest.raises(Exception, match=r"StoreNotFoundError: no store at \S+home: .*did you mean \S+store\?"):
        df.write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(home))
    assert hash_tree(home) == before
    from rocketstore.errors import StoreNotFoundError
    from rocketstore.meta.root import require_store_or_new_folder

    (tmp_path / "empty").mkdir()
    require_store_or_new_folder(str(tmp_path / "empty"), small_config())
    require_store_or_new_folder(str(tmp_path / "missing"), small_config())
    require_store_or_new_folder(str(home / "store"), small_config())
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreNotFoundError, match="no such folder"):
        require_store_or_new_folder(str(tmp_path / "file"), small_config())


@pytest.mark.parametrize(
    ("setting", "error"),
    [({"enableDLegerCommitLog": "true"}, "enableDLegerCommitLog"), ({"brokerRole": "SLAVE"}, "brokerRole=SLAVE")],
    ids=["unsupported", "slave"],
)
def test_a_setting_a_writable_store_refuses_is_refused_on_the_driver(spark, tmp_path, setting, error):  # noqa: F811
    """enableDLegerCommitLog (and every setting ``refuse_unsupported`` refuses) and brokerRole=SLAVE
    (a store that takes no puts: every put is SERVICE_NOT_AVAILABLE) fail the write before any task
    runs: no task stages a row only for the commit to refuse the batch, and the new folder is not
    made."""
    store = tmp_path / "new"
    df = _no_task_may_run(spark)
    with pytest.raises(Exception, match=f"ConfigError: {error}") as failed:
        df.write.format("rocketstore").options(**SMALL_OPTIONS, **setting).mode("append").save(str(store))
    assert "a task ran" not in str(failed.value)
    assert not store.exists()
    assert not (tmp_path / ".new.spark-staging").exists()


def _no_task_may_run(spark: Any) -> Any:  # noqa: F811
    """One row whose task fails with "a task ran": a write refused on the driver never sees it."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    @F.udf(BinaryType())
    def no_task_runs(body):  # no hints: pyspark would take them for a pandas UDF's
        raise ValueError("a task ran")

    return spark.createDataFrame([("TopicA", b"x")], "topic string, body binary").withColumn(
        "body", no_task_runs("body")
    )


def _recovery_drops_records(path: Path) -> Path:
    """A store of 300 messages over 4 segments whose last one holds a damaged record (its magic code
    zeroed) with intact records after it: any recovery checks it, and would cut the log there."""
    store = make_store(path, 300)
    i = 280  # message i of write_messages: its topic, queue and queue offset
    offset = damage_record(store, TOPICS[i % 3], (i // 3) % 4, i // 12)
    assert offset // SMALL_GEOMETRY["mappedFileSizeCommitLog"] == 3 == len(list((store / "commitlog").iterdir())) - 1
    return store


LOSSY_CUT = (
    r"CorruptStoreError: \S+: opening the store for writing recovers it first, and its recovery would cut the "
    r"commit log at offset \d+ and drop the \d+ intact record\(s\) .*nothing was changed"
)


def test_a_write_whose_recovery_would_drop_intact_records_is_refused_before_any_task(spark, tmp_path, hash_tree):  # noqa: F811
    """As ``rocketstore produce`` refuses it (the commit's open would recover the store and delete the
    records after a damaged one): on the driver, the store's files left as they were."""
    store = _recovery_drops_records(tmp_path / "store")
    before = hash_tree(store)
    with pytest.raises(Exception, match=LOSSY_CUT) as failed:
        _no_task_may_run(spark).write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
    message = str(failed.value)
    assert "a task ran" not in message
    assert f"rocketstore recover --dry-run {store}" in message and f"rocketstore recover --force {store}" in message
    assert hash_tree(store) == before


@pytest.mark.parametrize("crashed", [False, True])
def test_a_commit_whose_recovery_would_drop_intact_records_is_refused(tmp_path, hash_tree, crashed):
    """The commit checks again (the store may be damaged after the driver checked it): refused by the
    open's recovery (after a clean shutdown), or by the plan made first under the store's lock (after
    a crash); nothing in the store changes but the commits' turn file."""
    from rocketstore.errors import CorruptStoreError
    from rocketstore.spark.commit_turn import COMMIT_LOCK
    from rocketstore.spark.commits import append_staged

    store = _recovery_drops_records(tmp_path / "store")
    if crashed:
        (store / "abort").touch()
    before = hash_tree(store)
    staged = [_staged(tmp_path / "staged.arrow", [{"topic": "TopicA", "body": b"x"}])]
    with pytest.raises(CorruptStoreError, match=LOSSY_CUT.removeprefix("CorruptStoreError: ")):
        append_staged(str(store), small_config(), staged, sink="s", batch_id=0)
    assert hash_tree(store) == {**before, COMMIT_LOCK: hashlib.sha256(b"").hexdigest()}


def test_files_of_other_sizes_than_the_settings_are_refused_before_any_task(spark, tmp_path, hash_tree):  # noqa: F811
    """Every setting to give is named at once, as the command line names them, not one per run when
    the commit opens the store after every task ran."""
    store = make_store(tmp_path / "store", 300)
    before = hash_tree(store)
    with pytest.raises(Exception, match=r"CorruptStoreError: .*the files are not the configured sizes") as failed:
        _no_task_may_run(spark).write.format("rocketstore").options(**VECTOR_OPTIONS).mode("append").save(str(store))
    message = str(failed.value)
    assert "a task ran" not in message and "in commit" not in message
    for setting in ("mappedFileSizeCommitLog=16384", "mappedFileSizeConsumeQueue=400", "maxHashSlotNum=1000"):
        assert setting in message, setting
    assert hash_tree(store) == before


def test_overwrite_and_a_bad_lock_wait_are_refused_with_typed_errors(tmp_path):
    """mode('overwrite') is a wrong argument (InvalidArgumentError), a bad lockWaitMs a bad option
    (ConfigError): both ValueErrors, as before, and refused before anything is made."""
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from rocketstore.errors import ConfigError, InvalidArgumentError
    from rocketstore.spark.sink import BatchWriter

    schema = StructType([StructField("topic", StringType()), StructField("body", BinaryType())])
    options = {"path": str(tmp_path / "store"), **SMALL_OPTIONS}
    with pytest.raises(InvalidArgumentError, match=r"use mode\('append'\)"):
        BatchWriter(options, schema, True)
    for wait in ("-1", "abc", "1.5"):
        with pytest.raises(ConfigError, match=f"option lockWaitMs must be an integer from 0, not '{wait}'"):
            BatchWriter({**options, "lockWaitMs": wait}, schema, False)
    assert list(tmp_path.iterdir()) == []


def test_a_commit_refused_in_a_folder_that_held_no_store_leaves_no_trace(tmp_path):
    """The commit's turn (config/sparkCommit.lock) is given up with the folder as it was: a
    missing folder is not made (nor its missing parents), an empty one stays empty (neither then
    passes for a store). A store's own commit lock stays."""
    from rocketstore.errors import ConfigError, StoreNotFoundError
    from rocketstore.spark.commit_turn import COMMIT_LOCK
    from rocketstore.spark.commits import append_staged

    staged = [_staged(tmp_path / "staged.arrow", [{"topic": "TopicA", "body": b"x"}])]
    refused = small_config(enableDLegerCommitLog=True)  # refused when the commit opens the store
    missing, empty = tmp_path / "missing", tmp_path / "empty"
    empty.mkdir()
    for folder in (missing, empty):
        with pytest.raises(ConfigError, match="enableDLegerCommitLog"):
            append_staged(str(folder), refused, staged, sink=None, batch_id=None)
    assert not missing.exists()
    assert list(empty.iterdir()) == []
    with pytest.raises(StoreNotFoundError):
        verify_store(empty, small_config())
    with pytest.raises(ConfigError, match="enableDLegerCommitLog"):  # the missing parents it made go too
        append_staged(str(empty / "a" / "b" / "new"), refused, staged, sink=None, batch_id=None)
    assert list(empty.iterdir()) == []
    store = make_store(tmp_path / "store", 3)
    append_staged(str(store), small_config(), staged, sink=None, batch_id=None)
    with pytest.raises(ConfigError):
        append_staged(str(store), refused, staged, sink=None, batch_id=None)
    assert (store / COMMIT_LOCK).is_file()
    assert len(export_rows(store, small_config())) == 4


def test_a_commit_onto_a_filling_disk_deletes_nothing(loop_fs, tmp_path):
    """The commit's store runs no cleanup, as an import's (``services.wiring.no_cleanup``): past
    diskMaxUsedSpaceRatio each new segment of the batch would wake a round deleting the expired
    ones (a disk filling faster would have young ones deleted forcibly, the batch's own among them)."""
    from rocketstore.spark.commits import append_staged
    from test_clean import BODY, age, ballast, clean_config, fill, segment_files

    fs = loop_fs(32)
    root, config = fs.mount / "s", clean_config(diskMaxUsedSpaceRatio=40)
    with MessageStore.open(root, config) as store:
        fill(store, 10)  # one message a segment
        age(segment_files(store), hours=2)  # expired (fileReservedTime=1)
    ballast(fs.mount, 0.6, fs)
    staged = [_staged(tmp_path / "staged.arrow", [{"topic": "CleanTopic", "body": BODY}] * 30)]
    assert append_staged(str(root), config, staged, sink=None, batch_id=None) == 30
    with MessageStore.open(root, config, read_only=True) as store:
        assert store.min_phy_offset == 0
        assert sum(store.get_max_offset_in_queue("CleanTopic", q) for q in range(4)) == 40


def _folders_as_they_were(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A missing folder, an empty one, and a store of 3 messages."""
    missing, empty = tmp_path / "missing", tmp_path / "empty"
    empty.mkdir()
    return missing, empty, make_store(tmp_path / "store", 3)


def test_a_commit_without_the_space_for_its_batch_is_refused_before_the_store_is_made(tmp_path):
    """The space check needs only the staged files' sizes: a batch the disk cannot take is refused
    before the store is opened, so a missing folder is not made, an empty one stays empty, and a
    store keeps its messages and its commit lock. The staged file is a sparse one larger than the
    disk's free space: a real refusal, nothing mocked."""
    import shutil

    from rocketstore.spark.commit_turn import COMMIT_LOCK
    from rocketstore.spark.commits import append_staged
    from rocketstore.spark.sink import Staged

    huge = tmp_path / "huge.arrow"
    with open(huge, "wb") as f:
        f.truncate(shutil.disk_usage(tmp_path).free + 1)
    staged = [Staged(0, str(huge), 1)]
    missing, empty, store = _folders_as_they_were(tmp_path)
    for folder in (missing, empty, store):
        with pytest.raises(OSError, match="bytes free, the staged messages need about"):
            append_staged(str(folder), small_config(), staged, sink=None, batch_id=None)
    assert not missing.exists()
    assert list(empty.iterdir()) == []
    assert (store / COMMIT_LOCK).is_file()
    assert len(export_rows(store, small_config())) == 3


def test_a_commit_that_appends_nothing_to_the_store_it_made_removes_it(tmp_path):
    """A commit refused after it opened (made) the store, before its first message is in (here a
    SLAVE store refuses the put), removes the store it made: a missing folder is not left behind,
    an empty one is empty again (the batch's pending marker goes with it: nothing of the batch is
    in). A store that was there before keeps all it held."""
    from rocketstore.errors import InvalidMessageError, StoreNotFoundError
    from rocketstore.spark.commit_turn import COMMIT_LOCK
    from rocketstore.spark.commits import append_staged

    staged = [_staged(tmp_path / "staged.arrow", [{"topic": "TopicA", "body": b"x"}])]
    slave = small_config(brokerRole="SLAVE")
    missing, empty, store = _folders_as_they_were(tmp_path)
    for folder in (missing, empty, store):
        for sink, batch_id in ((None, None), ("sink", 0)):
            with pytest.raises(InvalidMessageError, match="SERVICE_NOT_AVAILABLE"):
                append_staged(str(folder), slave, staged, sink=sink, batch_id=batch_id)
            if folder is not store:
                assert not missing.exists()
                assert list(empty.iterdir()) == []
    with pytest.raises(StoreNotFoundError):
        verify_store(empty, small_config())
    assert (store / COMMIT_LOCK).is_file()
    assert read_markers(str(store))["sink"]["state"] == "pending"
    assert len(export_rows(store, small_config())) == 3
    assert append_staged(str(empty), small_config(), staged, sink="sink", batch_id=0) == 1
    assert read_markers(str(empty))["sink"]["state"] == "committed"


def _fds_on(path: Path) -> int:
    """How many of this process's file descriptors are open on ``path``."""
    import contextlib
    import os

    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile (the listing's own, another thread's)
            count += os.readlink(f"/proc/self/fd/{fd}") == str(path)
    return count


def test_a_commit_waiting_on_a_new_folder_whose_first_commit_failed_takes_its_turn_anew(tmp_path):
    """The failed commit removes the lock file the other waits on: the waiter does not go on
    holding the removed file (a third commit could take the one made anew at the same time), but
    takes its turn on the file at the path, and appends."""
    import threading
    import time

    from rocketstore.spark.commit_turn import COMMIT_LOCK, commit_turn
    from rocketstore.spark.commits import append_staged

    store = tmp_path / "new"
    lock = store / COMMIT_LOCK
    staged = [_staged(tmp_path / "staged.arrow", [{"topic": "TopicA", "body": b"x"}])]
    appended: list = []

    def commit() -> None:
        appended.append(append_staged(str(store), small_config(), staged, sink=None, batch_id=None))

    waiter = threading.Thread(target=commit)
    with pytest.raises(RuntimeError, match="failed on purpose"), commit_turn(str(store), 1000):
        waiter.start()
        deadline = time.monotonic() + 30
        while _fds_on(lock) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # until the waiter has the lock file open, waiting for its turn
        assert _fds_on(lock) == 2
        raise RuntimeError("failed on purpose")
    waiter.join(60)
    assert appended == [1]
    assert lock.is_file()  # the waiter's turn was on the file at the path, made anew
    assert len(export_rows(store, small_config())) == 1


_FAILING_COMMIT = """
import sys
from rocketstore.spark.commit_turn import commit_turn
try:
    with commit_turn(sys.argv[1], 10_000):
        print("holding", flush=True)
        sys.stdin.readline()
        raise RuntimeError("failed on purpose")
except RuntimeError:
    print("gone", flush=True)
"""


@pytest.mark.parametrize("removed", ["config", "folder"])
def test_a_commit_takes_its_turn_when_a_failed_commit_removes_the_folder_it_is_making(tmp_path, monkeypatch, removed):
    """Another process's commit into a new folder fails, and removes config/ and the folder (it
    made them), while this one makes them for its turn: between mkdir finding config/ there and
    makedirs checking it is a folder ("config"), or between makedirs finding the folder there and
    making config/ in it ("folder"). This commit tries again, takes its turn on a lock file it
    makes anew, and does not fail with FileExistsError or FileNotFoundError. The interleaving is
    forced: at that point os.mkdir waits (a pipe) for the other process to have failed."""
    import os
    import subprocess
    import sys

    from rocketstore.spark.commit_turn import COMMIT_LOCK, commit_turn

    root = tmp_path / "new"
    other = subprocess.Popen(
        [sys.executable, "-c", _FAILING_COMMIT, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert other.stdout is not None and other.stdin is not None
    assert other.stdout.readline() == "holding\n"
    config, real_mkdir, failed = str(root / "config"), os.mkdir, []

    def let_the_other_fail() -> None:
        other.stdin.write("fail\n")
        other.stdin.close()
        assert other.stdout.readline() == "gone\n"
        failed.append(not root.exists())

    def mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if os.fspath(path) != config or failed:
            return real_mkdir(path, *args, **kwargs)
        if removed == "folder":
            let_the_other_fail()
            return real_mkdir(path, *args, **kwargs)
        try:
            return real_mkdir(path, *args, **kwargs)
        except FileExistsError:
            let_the_other_fail()
            raise

    monkeypatch.setattr(os, "mkdir", mkdir)
    with commit_turn(str(root), 10_000):
        monkeypatch.undo()
        assert failed == [True]  # the other commit failed, and removed the folder, at that point
        assert (root / COMMIT_LOCK).is_file()
    assert other.wait(30) == 0


_OTHER_PROGRAM = """
import json, sys
from rocketstore import MessageStore
from rocketstore.codec.message import Message
from rocketstore.config import StoreConfig
sys.stdin.readline()
store = MessageStore.open(sys.argv[1], StoreConfig(**json.loads(sys.argv[2])))
for i in range(3):
    assert store.put(Message(topic="Other", body=b"kept %d" % i)).ok
store.shutdown()
print("closed", flush=True)
"""


def _another_program(root: Path, **extra: Any) -> tuple[Any, list]:
    """A program (no Spark commit) that, told to, opens the store at ``root``, puts 3 messages in it
    and closes it; and the list ``fill`` appends to once it has."""
    import subprocess
    import sys

    settings = json.dumps({**SMALL_GEOMETRY, **extra})
    other = subprocess.Popen(
        [sys.executable, "-c", _OTHER_PROGRAM, str(root), settings],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    filled: list = []

    def fill() -> None:
        assert other.stdin is not None and other.stdout is not None
        other.stdin.write("fill\n")
        other.stdin.close()
        assert other.stdout.readline() == "closed\n"
        assert other.wait(30) == 0
        filled.append(True)

    return fill, filled


@pytest.mark.parametrize("when", ["after its shutdown", "before its open"])
def test_a_failed_commit_keeps_a_store_another_program_filled_in_the_folder_meanwhile(tmp_path, monkeypatch, when):
    """A commit into a new folder fails having put nothing, and removes the store it made, under
    the store's lock. Another program (not a Spark commit: it does not wait for the turn) opened
    the store meanwhile, put 3 messages and closed it: "after its shutdown" (the commit's put was
    refused; the program took the store between the commit's shutdown and its taking the store's
    lock to remove it), or "before its open" (after the commit found the folder new; the commit's
    open then fails, the program's segments being of another size). The store keeps its messages:
    a commit-log segment that holds data is never removed. The interleaving is forced: the
    commit's opening of the store's lock file to remove the store, or its reading of the free space
    before it opens the store, waits (a pipe) for the program to have closed the store."""
    import os

    from rocketstore.config import StoreConfig
    from rocketstore.errors import CorruptStoreError, InvalidMessageError
    from rocketstore.spark.commits import append_staged

    root = tmp_path / "new"
    staged = [_staged(tmp_path / "staged.arrow", [{"topic": "TopicA", "body": b"x"}])]
    if when == "after its shutdown":
        fill, filled = _another_program(root)
        config, refused, name, real = small_config(brokerRole="SLAVE"), InvalidMessageError, "open", os.open

        def hook(path: Any, flags: int, *args: Any, **kwargs: Any) -> Any:
            if os.fspath(path) == str(root / "lock") and not flags & os.O_CREAT and not filled:
                fill()
            return real(path, flags, *args, **kwargs)
    else:
        fill, filled = _another_program(root, mappedFileSizeCommitLog=32768)
        config, refused, name, real = small_config(), CorruptStoreError, "statvfs", os.statvfs

        def hook(path: Any, *args: Any, **kwargs: Any) -> Any:
            if os.fspath(path) == str(root) and not filled:
                fill()
            return real(path, *args, **kwargs)

    monkeypatch.setattr(os, name, hook)
    with pytest.raises(refused):
        append_staged(str(root), config, staged, sink=None, batch_id=None)
    monkeypatch.undo()
    assert filled == [True]
    size = 32768 if when == "before its open" else SMALL_GEOMETRY["mappedFileSizeCommitLog"]
    kept = export_rows(root, StoreConfig(**{**SMALL_GEOMETRY, "mappedFileSizeCommitLog": size}))
    assert sorted(base64.b64decode(r["body"]) for r in kept) == [b"kept 0", b"kept 1", b"kept 2"]


def test_a_failed_commit_that_waited_on_a_missing_folder_does_not_leave_it_made(tmp_path, monkeypatch):
    """Two commits into a missing folder, both failing: this one starts while another process's has
    the turn (that one made the folder), which fails and removes the folder; this one makes it
    again for its turn, fails, and removes it too: the folder is missing again, as it was. The
    interleaving is forced: this commit's first flock waits (a pipe) for the other to have failed."""
    import fcntl
    import subprocess
    import sys

    from rocketstore.spark.commit_turn import commit_turn

    root = tmp_path / "new"
    other = subprocess.Popen(
        [sys.executable, "-c", _FAILING_COMMIT, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert other.stdout is not None and other.stdin is not None
    assert other.stdout.readline() == "holding\n"
    real_flock, failed = fcntl.flock, []

    def flock(fd: int, operation: int) -> None:
        if not failed:
            other.stdin.write("fail\n")
            other.stdin.close()
            assert other.stdout.readline() == "gone\n"
            failed.append(not root.exists())
        return real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)
    with pytest.raises(RuntimeError, match="failed on purpose"), commit_turn(str(root), 10_000):
        monkeypatch.undo()
        assert failed == [True]  # the other commit failed, and removed the folder, while this one waited
        raise RuntimeError("failed on purpose")
    assert other.wait(30) == 0
    assert not root.exists()


def test_a_topic_option_the_broker_refuses_sends_to_is_refused_on_the_driver():
    from pyspark.sql.types import BinaryType, StructField, StructType

    from rocketstore.errors import InvalidMessageError
    from rocketstore.spark.sink import check_columns

    schema = StructType([StructField("body", BinaryType())])
    with pytest.raises(InvalidMessageError, match=r"topic\[RMQ_SYS_TRANS_HALF_TOPIC\] is forbidden"):
        check_columns(schema, "RMQ_SYS_TRANS_HALF_TOPIC")
    check_columns(schema, "RMQ_SYS_TRANS_HALF_TOPIC", as_is=True)


def test_a_body_its_sysflag_column_marks_compressed_is_written_decompressed():
    """A DataFrame read from a store holds compressed bodies as stored, with a sysFlag saying so;
    a write takes no sysFlag, so such a body reached consumers as zlib bytes. It is written as its
    producer wrote it; one that does not decompress is refused by name."""
    import zlib

    import pyarrow as pa

    from rocketstore.errors import InvalidMessageError
    from rocketstore.spark.sink import _normalize

    plain = b"hello " * 50
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": ["T", "T", "T"],
            "body": pa.array([zlib.compress(plain), b"as is", None], pa.binary()),
            "sysFlag": pa.array([0x301, 0x2, None], pa.int32()),
        }
    )
    assert _normalize(batch, None).column("body").to_pylist() == [plain, b"as is", None]
    bad = pa.RecordBatch.from_pydict({"topic": ["T"], "body": [b"not zlib"], "sysFlag": pa.array([1], pa.int32())})
    with pytest.raises(InvalidMessageError, match="sysFlag marks it compressed"):
        _normalize(bad, None)


def test_column_types_are_checked_on_the_driver(spark, tmp_path):  # noqa: F811
    """A column of a type the sink cannot write, or named as one of ours but for its case, is
    refused by name before any task runs; the
    null elements of a keys array are dropped; a queueId past an int is refused by name."""
    import pyarrow as pa

    from rocketstore.errors import InvalidMessageError
    from rocketstore.spark.sink import _normalize

    store = tmp_path / "store"
    for sql, column in (
        ("select 'TopicA' topic, 5 body", "'body' is int"),
        ("select 'TopicA' topic, 'b' body, array(1) `keys`", "'keys' is array<int>"),
        ("select 'TopicA' topic, 'b' body, map('a', 1) properties", "'properties' is map<string,int>"),
        ("select 'TopicA' topic, 'b' body, 1.5 flag", "'flag' is decimal"),
        # a column named as one of ours but for its case would not be written: its tags were lost
        ("select 'TopicA' topic, 'b' body, 'TagA' Tags", "'Tags' is not rocketstore's 'tags'"),
        ("select 'TopicA' topic, 'b' body, 2 queueid", "'queueid' is not rocketstore's 'queueId'"),
        ("select 'TopicA' Topic, 'b' body", "'Topic' is not rocketstore's 'topic'"),
    ):
        with pytest.raises(Exception, match=f"InvalidMessageError: column {column}"):
            spark.sql(sql).write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
    assert not store.exists()
    df = spark.sql("select 'TopicA' topic, 'b' body, array('k1', null, 'k2') `keys`, cast(2 as bigint) queueId")
    df.write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
    ((_, queue_id, keys),) = [(r["topic"], r["queueId"], r["keys"]) for r in export_rows(store, small_config())]
    assert (queue_id, keys) == (2, "k1 k2")
    batch = pa.RecordBatch.from_pydict({"topic": ["T"], "body": [b"b"], "queueId": pa.array([2**40], pa.int64())})
    with pytest.raises(InvalidMessageError, match="column 'queueId'"):
        _normalize(batch, None)
    for bad in (["order 1"], ["a", ""], [" x"]):  # joined, a key with a space would be indexed as two
        batch = pa.RecordBatch.from_pydict({"topic": ["T"], "body": [b"b"], "keys": pa.array([bad])})
        with pytest.raises(InvalidMessageError, match="column 'keys': each key is a non-empty str without spaces"):
            _normalize(batch, None)


def test_failed_job_leaves_the_store_unchanged(spark, tmp_path, hash_tree):  # noqa: F811
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    store = make_store(tmp_path / "store", 50)
    before = hash_tree(store)

    @F.udf(BinaryType())
    def explode_on_77(body):  # no hints: pyspark would take them for a pandas UDF's
        if body == b"body 77":
            raise ValueError("task failure on purpose")
        return body

    df = _frame(spark, 120).withColumn("body", explode_on_77("body"))
    with pytest.raises(Exception, match="task failure on purpose"):
        df.write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
    assert hash_tree(store) == before
    # a message the store would refuse fails its task too, before anything is appended
    bad = spark.createDataFrame([("TopicA", b"ok"), ("bad topic!", b"x")], "topic string, body binary")
    with pytest.raises(Exception, match="topic"):
        bad.write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
    assert hash_tree(store) == before
    staging = tmp_path / ".store.spark-staging"
    assert not staging.exists(), sorted(staging.rglob("*"))  # the aborted jobs' staged files are gone


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"properties": {"big": "x" * 40000}}, "PROPERTIES_SIZE_EXCEEDED"),
        ({"properties": {"DELAY": "soon"}}, "DELAY must be a delay level"),
        ({"body": b"x" * 20000}, "cannot fit a 16384-byte commit-log segment"),
        ({"topic": "SCHEDULE_TOPIC_XXXX"}, r"Sending message to topic\[SCHEDULE_TOPIC_XXXX\] is forbidden"),
    ],
)
def test_a_message_the_store_refuses_fails_the_job_before_any_is_stored(spark, tmp_path, hash_tree, bad, reason):  # noqa: F811
    """Every check of a put runs in the tasks, not only the body size: a refused third message
    fails the job, and the two before it are not stored."""
    store = make_store(tmp_path / "store", 20)
    before = hash_tree(store)
    rows = [{"topic": "TopicA", "body": f"ok {i}".encode(), "properties": {"seq": str(i)}} for i in range(2)]
    rows.append({"topic": "TopicA", "body": b"bad", **bad})
    df = spark.createDataFrame(rows, "topic string, body binary, properties map<string,string>").coalesce(1)
    with pytest.raises(Exception, match=reason):
        df.write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
    assert hash_tree(store) == before


def test_a_delayed_message_is_checked_with_the_queue_the_driver_chooses(tmp_path):
    """A delayed message without a queueId keeps the queue the driver chooses in REAL_QID: the
    batch is refused before the first put when only a longer queue id makes it too large."""
    from rocketstore import Message
    from rocketstore.errors import InvalidMessageError
    from rocketstore.prepare import MessagePreparer
    from rocketstore.spark.commits import append_staged

    config = small_config()
    store = tmp_path / "store"
    with MessageStore.open(store, config) as s:
        s.put(Message("TopicD", b"16 queues"), 15).raise_for_status()  # writeQueueNums 16
    before = log_rows(store, config)
    check = MessagePreparer(config).check
    pad = next(n for n in range(16000, 16384) if check(_padded(n), 10) is not None)
    assert check(_padded(pad), 9) is None  # with REAL_QID 0..9 it fits a 16 KiB segment, not with 10
    rows = [{"topic": "TopicD", "body": b"later", "properties": _padded(pad).properties} for _ in range(11)]
    with pytest.raises(InvalidMessageError, match="cannot fit"):
        append_staged(str(store), config, [_staged(tmp_path / "staged.arrow", rows)], sink=None, batch_id=None)
    assert log_rows(store, config) == before


def _padded(n: int) -> Any:
    from rocketstore import Message

    return Message("TopicD", b"later", properties={"DELAY": "2", "pad": "p" * n})


def _staged(path: Path, rows: list[dict]) -> Any:
    """Rows staged as a write task stages them."""
    import pyarrow as pa

    from rocketstore.spark.sink import STAGED, Staged

    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, STAGED) as out:
        out.write_batch(pa.RecordBatch.from_pylist(rows, schema=STAGED))
    return Staged(0, str(path), len(rows))


def test_a_sink_another_query_wrote_is_refused(tmp_path):
    """Batch ids start over with a new checkpoint: the same sink from another query is refused
    under the store's lock, never taken for batches already written."""
    from rocketstore.errors import SinkInUseError
    from rocketstore.spark.commits import append_staged

    config, store = small_config(), tmp_path / "store"
    rows = [{"topic": "TopicA", "body": b"one"}]
    append_staged(str(store), config, [_staged(tmp_path / "a.arrow", rows)], sink="s", batch_id=3, query="query:a")
    with pytest.raises(SinkInUseError, match="query:a"):
        append_staged(str(store), config, [_staged(tmp_path / "b.arrow", rows)], sink="s", batch_id=0, query="query:b")
    assert len(log_rows(store, config)) == 1


def test_a_checkpoint_is_bound_by_its_query_id_however_its_path_is_written(tmp_path):
    """A local checkpoint, as a path or a file: URI (Hadoop decodes no %-escape), gives the query
    id in its metadata; one on another file system is bound by its URI as Hadoop's Path spells it
    (no trailing or doubled slash), until the tasks report the id."""
    from rocketstore.spark.commits import checkpoint_query

    ck = tmp_path / "a%20b"
    ck.mkdir()
    (ck / "metadata").write_text('{"id":"d2a6e2f4"}\n')
    binding = f"checkpoint:{ck}"
    for given in (str(ck), f"{ck}/", f"file:{ck}", f"file://{ck}", f"file://{ck}//"):
        assert checkpoint_query({"checkpointLocation": given}) == ("query:d2a6e2f4", binding), given
    remote = checkpoint_query({"checkpointLocation": "s3a://bucket/ck"})
    assert remote == (None, "checkpoint:s3a://bucket/ck")
    for given in ("s3a://bucket/ck/", "s3a://bucket//ck", "S3A://bucket/ck"):
        assert checkpoint_query({"checkpointLocation": given}) == remote, given
    assert checkpoint_query({"checkpointLocation": "s3a://other/ck"}) != remote


def test_a_sink_bound_to_a_checkpoint_goes_to_that_checkpoint_s_query(tmp_path):
    """A marker bound to a checkpoint's path (an earlier version's, or tasks Spark did not give the
    query id) is the sink of the query of that checkpoint however it is written, which binds it to
    its id; a query known only by its checkpoint is refused a sink another checkpoint's query owns."""
    from rocketstore.errors import SinkInUseError
    from rocketstore.spark.commits import append_staged, check_owner

    config, store = small_config(), tmp_path / "store"
    rows = [{"topic": "TopicA", "body": b"one"}]
    ck, other = "checkpoint:s3a://bucket/ck", "checkpoint:s3a://bucket/other"
    append_staged(str(store), config, [_staged(tmp_path / "a.arrow", rows)], sink="s", batch_id=0, query=ck)
    markers = read_markers(str(store))
    markers["s"]["query"] = "checkpoint:s3a://bucket//ck/"  # as an earlier version kept it
    (store / MARKER).write_text(json.dumps(markers))
    with pytest.raises(SinkInUseError):
        check_owner(read_markers(str(store)), "s", "query:b", other)
    staged = [_staged(tmp_path / "b.arrow", rows)]
    assert append_staged(str(store), config, staged, sink="s", batch_id=1, query="query:b", checkpoint=ck) == 1
    assert read_markers(str(store))["s"]["query"] == "query:b"
    check_owner(read_markers(str(store)), "s", None, other)  # the id is not known yet: the tasks will tell
    check_owner(read_markers(str(store)), "s", ck, ck)  # known only by its checkpoint, the same one
    for query, checkpoint in (("query:c", ck), (other, other)):
        with pytest.raises(SinkInUseError, match="query:b"):
            check_owner(read_markers(str(store)), "s", query, checkpoint)
    assert len(log_rows(store, config)) == 2


def test_a_batch_cut_short_after_delayed_messages_is_completed_once(tmp_path):
    """A delayed message is stored in SCHEDULE_TOPIC_XXXX (REAL_TOPIC/REAL_QID keep where it was
    sent): a batch cut short after some were appended appends only the rest when it is replayed."""
    from rocketstore.spark.commits import append_staged

    config = small_config()
    store = tmp_path / "store"
    delay = {"DELAY": "3"}
    rows = [
        {"topic": "TopicD", "body": b"plain", "properties": {"seq": "0"}},
        {"topic": "TopicD", "body": b"same", "properties": delay},
        {"topic": "TopicE", "body": b"same", "properties": delay, "queueId": 2},
        {"topic": "TopicE", "body": b"same", "properties": delay, "queueId": 3},
        {"topic": "TopicD", "body": b"last", "properties": delay},
    ]
    # the crash: the first three messages were appended, the marker still says pending
    append_staged(str(store), config, [_staged(tmp_path / "a.arrow", rows[:3])], sink="q", batch_id=0)
    markers = read_markers(str(store))
    markers["q"]["state"] = "pending"
    (store / MARKER).write_text(json.dumps(markers))
    assert append_staged(str(store), config, [_staged(tmp_path / "b.arrow", rows)], sink="q", batch_id=0) == 2
    got = [(r["properties"].get("REAL_TOPIC", r["topic"]), r["body"]) for r in log_rows(store, config)]
    assert len(got) == len(rows)
    assert sorted(got) == sorted((r["topic"], base64.b64encode(r["body"]).decode()) for r in rows)


def test_a_replayed_batch_that_differs_from_its_cut_short_try_is_told(tmp_path, caplog):
    """Exactly once needs the replay of a batch to give the rows its first try gave (Spark's own
    sinks assume it too): a query that gives other rows (a random value in them) matches none of
    the first try's messages, which stay, and the batch is written again from its first row that
    differs (here the first). A warning says so,
    naming the record that is not the batch's next message; a faithful replay gets none."""
    from rocketstore.spark.commits import append_staged

    config = small_config()
    store = tmp_path / "store"
    first = [{"topic": "TopicD", "body": b"first-%d" % i} for i in range(4)]
    again = [{"topic": "TopicD", "body": b"again-%d" % i} for i in range(4)]
    append_staged(str(store), config, [_staged(tmp_path / "a.arrow", first[:2])], sink="q", batch_id=0)
    markers = read_markers(str(store))
    markers["q"]["state"] = "pending"  # the crash: two of the first try's messages were appended
    (store / MARKER).write_text(json.dumps(markers))
    with caplog.at_level("WARNING", logger="rocketstore"):
        assert append_staged(str(store), config, [_staged(tmp_path / "b.arrow", again)], sink="q", batch_id=0) == 4
    assert "is not the batch's next message" in caplog.text and "not deterministic" in caplog.text
    assert len(log_rows(store, config)) == 6  # the first try's two stay
    caplog.clear()
    markers = read_markers(str(store))
    markers["q"] |= {"state": "pending", "batchId": 1, "logStart": markers["q"]["logStart"]}
    (store / MARKER).write_text(json.dumps(markers))
    with caplog.at_level("WARNING", logger="rocketstore"):  # a faithful replay: all four were in
        assert append_staged(str(store), config, [_staged(tmp_path / "c.arrow", again)], sink="q", batch_id=1) == 0
    assert "was cut short; 4 messages were in" in caplog.text and "not the batch's next" not in caplog.text


def _stream_copy(
    spark: Any,  # noqa: F811
    source: Path,
    sink: Path,
    checkpoint: Path,
    topic: Any = None,
    **options: str,
) -> Any:
    """Copy ``source`` into ``sink`` in micro-batches of at most 40 messages (``topic``: a column
    expression to write instead of the topic column)."""
    df = (
        spark.readStream.format("rocketstore")
        .options(**SMALL_OPTIONS, startingOffsets="earliest", maxOffsetsPerTrigger="40")
        .load(str(source))
    )
    if topic is not None:
        df = df.withColumn("topic", topic)
    query = (
        df.select("topic", "queueId", "tags", "keys", "properties", "body")
        .writeStream.format("rocketstore")
        .options(**SMALL_OPTIONS, **options)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(sink))
    )
    query.awaitTermination(120)  # raises the query's error
    assert query.exception() is None, query.exception()
    return query


def _forget_commit(checkpoint: Path, batch: int) -> None:
    """As if the query died before its checkpoint recorded ``batch`` as done."""
    for name in (str(batch), f".{batch}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)


def _bodies(store: Path) -> list[tuple]:
    return sorted(
        (r["topic"], r["queueId"], r["body"], r["properties"].get("seq")) for r in export_rows(store, small_config())
    )


def test_streaming_write_is_exactly_once_across_restarts(spark, tmp_path, rmqread):  # noqa: F811
    source = make_store(tmp_path / "source", 150)
    sink, checkpoint = tmp_path / "sink", tmp_path / "ckpt"
    _stream_copy(spark, source, sink, checkpoint, sinkId="mirror")
    assert _bodies(sink) == _bodies(source)
    markers = read_markers(str(sink))
    entry = markers["mirror"]
    assert entry["query"].startswith("query:")
    last = entry["batchId"]
    assert last >= 3 and entry["state"] == "committed"

    # a crash after the sink committed but before the checkpoint did: Spark runs the batch again
    _forget_commit(checkpoint, last)
    _stream_copy(spark, source, sink, checkpoint, sinkId="mirror")
    assert _bodies(sink) == _bodies(source)

    # a crash after the messages were appended but before the marker said so
    entry["state"] = "pending"
    (sink / MARKER).write_text(json.dumps(markers))
    _forget_commit(checkpoint, last)
    _stream_copy(spark, source, sink, checkpoint, sinkId="mirror")
    assert _bodies(sink) == _bodies(source)
    assert read_markers(str(sink))[next(iter(markers))]["state"] == "committed"

    # new messages at the source: only they are written
    with MessageStore.open(source, small_config()) as s:
        write_messages(s, 45, start=150)
        s.wait_for_dispatch()
    _stream_copy(spark, source, sink, checkpoint, sinkId="mirror")
    assert _bodies(sink) == _bodies(source)
    _check_clean(sink, rmqread)

    # another query (a new checkpoint, batch ids from 0 again) may not write as the same sink
    with MessageStore.open(source, small_config()) as s:
        write_messages(s, 10, start=195)
        s.wait_for_dispatch()
    with pytest.raises(Exception, match="SinkInUseError: the store's streaming sink 'mirror' belongs to another"):
        _stream_copy(spark, source, sink, tmp_path / "ckpt2", sinkId="mirror")
    assert len(_bodies(sink)) == 195


def _staged_files(staging: Path) -> list[str]:
    return sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if not p.is_dir())


def _only_the_query_s_owner(staging: Path) -> bool:
    """The query's folder holds only the record of its driver (it stays for the query's life)."""
    import re

    files = _staged_files(staging)
    return len(files) == 1 and re.fullmatch(r"stream-[0-9a-f]{32}(-\d+-\d+)?/driver\.json", files[0]) is not None


def test_streaming_write_leaves_no_staged_files(spark, tmp_path):  # noqa: F811
    """Each micro-batch's staged files are deleted once it is committed, and those of a batch
    whose job failed (aborted) too: the staging folder does not grow with what was written (the
    query's folder keeps only its driver's record). The failed batch is then written once, by the
    restarted query."""
    from pyspark.sql import functions as F

    source = make_store(tmp_path / "source", 100)
    sink, checkpoint = tmp_path / "sink", tmp_path / "ckpt"
    staging = tmp_path / ".sink.spark-staging"
    _stream_copy(spark, source, sink, checkpoint, sinkId="mirror")
    assert _bodies(sink) == _bodies(source)
    assert read_markers(str(sink))["mirror"]["batchId"] >= 2  # several micro-batches
    assert _only_the_query_s_owner(staging)

    # a task refuses a message: the batch's job fails and is aborted, nothing of it is written
    with MessageStore.open(source, small_config()) as s:
        write_messages(s, 30, start=100)
        s.wait_for_dispatch()
    written = _bodies(sink)
    bad = F.when(F.col("properties")["seq"] == "110", F.lit("bad topic!")).otherwise(F.col("topic"))
    with pytest.raises(Exception, match="topic"):
        _stream_copy(spark, source, sink, checkpoint, topic=bad, sinkId="mirror")
    assert _bodies(sink) == written
    assert _only_the_query_s_owner(staging)

    # the query restarted without the bad row writes the failed batch (and the rest) once
    _stream_copy(spark, source, sink, checkpoint, sinkId="mirror")
    assert _bodies(sink) == _bodies(source)
    assert _only_the_query_s_owner(staging)


def test_integral_collated_and_empty_array_columns_are_written(spark, tmp_path):  # noqa: F811
    """The driver's type check goes by kind, not by exact type: a tinyint/smallint/bigint queueId
    or flag, strings with a collation and an empty array literal (array<void>) as keys are
    written as their int/string counterparts; a fractional queueId is still refused by name."""
    store = tmp_path / "store"
    lcase = "collate UTF8_LCASE"
    for i, (qtype, ftype) in enumerate((("tinyint", "smallint"), ("smallint", "tinyint"), ("bigint", "bigint"))):
        keys = f"array('k{i}' {lcase}, null)" if i == 1 else "array()"
        sql = (
            f"select 'TopicA' {lcase} topic, 'body {i}' {lcase} body, cast({i + 1} as {qtype}) queueId, "
            f"cast({i} as {ftype}) flag, 'Tag{i}' {lcase} tags, {keys} `keys`, "
            f"map('seq' {lcase}, '{i}' {lcase}) properties"
        )
        df = spark.sql(sql)
        assert df.schema["keys"].dataType.simpleString() in ("array<void>", f"array<string {lcase}>")
        df.write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
    rows = export_rows(store, small_config())
    fields = ("topic", "queueId", "flag", "tags", "keys")
    got = sorted((base64.b64decode(r["body"]).decode(), *(r[f] for f in fields), r["properties"]["seq"]) for r in rows)
    assert got == [
        ("body 0", "TopicA", 1, 0, "Tag0", None, "0"),
        ("body 1", "TopicA", 2, 1, "Tag1", "k1", "1"),
        ("body 2", "TopicA", 3, 2, "Tag2", None, "2"),
    ]
    before = len(got)
    for qtype in ("double", "float"):
        sql = f"select 'TopicA' topic, 'b' body, cast(1 as {qtype}) queueId"
        with pytest.raises(Exception, match=f"InvalidMessageError: column 'queueId' is {qtype}: .*integral"):
            spark.sql(sql).write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
    assert len(export_rows(store, small_config())) == before


def test_a_checkpoint_on_another_file_system_binds_the_sink_to_the_query_id(spark, tmp_path):  # noqa: F811
    """A checkpoint the driver's Python cannot read (viewfs:// here, standing for hdfs:// or
    s3a://) binds the sink to the query id the tasks get from Spark, as a local one does: the
    query restarted (its checkpoint written another way) goes on, and another query is refused,
    also one whose checkpoint was deleted and made again at the same place."""
    import shutil

    remote = tmp_path / "remote"
    remote.mkdir()
    mount = "fs.viewfs.mounttable.rocketstoretest.link./ck"
    spark.conf.set(mount, remote.as_uri())
    try:
        source = make_store(tmp_path / "source", 30)
        sink = tmp_path / "sink"
        query = _stream_copy(spark, source, sink, "viewfs://rocketstoretest/ck/q1", sinkId="mirror")
        assert read_markers(str(sink))["mirror"]["query"] == f"query:{query.id}"
        assert _bodies(sink) == _bodies(source)
        with MessageStore.open(source, small_config()) as s:
            write_messages(s, 12, start=30)
            s.wait_for_dispatch()
        again = _stream_copy(spark, source, sink, "viewfs://rocketstoretest/ck//q1/", sinkId="mirror")
        assert again.id == query.id and _bodies(sink) == _bodies(source)
        written = _bodies(sink)
        with MessageStore.open(source, small_config()) as s:
            write_messages(s, 12, start=42)
            s.wait_for_dispatch()
        refused = "SinkInUseError: the store's streaming sink 'mirror' belongs to another query"
        with pytest.raises(Exception, match=refused):
            _stream_copy(spark, source, sink, "viewfs://rocketstoretest/ck/q2", sinkId="mirror")
        shutil.rmtree(remote / "q1")
        with pytest.raises(Exception, match=refused):
            _stream_copy(spark, source, sink, "viewfs://rocketstoretest/ck/q1", sinkId="mirror")
        assert _bodies(sink) == written
    finally:
        spark.conf.unset(mount)


def _queue_counts(store: Path, topic: str) -> dict[int, int]:
    with MessageStore.open(store, small_config(), read_only=True) as s:
        return {q: cq.max_offset_in_queue() for (t, q), cq in sorted(s.queues.table.items()) if t == topic}


def test_round_robin_goes_on_across_jobs_and_replays_choose_the_same_queues(spark, tmp_path):  # noqa: F811
    """One-row jobs without a queueId take turns over the 4 write queues (each started at queue
    0); a batch cut short after its first message puts the rest where its first try would have."""
    from rocketstore import Message
    from rocketstore.spark.commits import append_staged

    store = tmp_path / "store"
    for i in range(4):
        df = spark.createDataFrame([("TopicR", f"m{i}".encode())], "topic string, body binary")
        df.write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
    assert _queue_counts(store, "TopicR") == {0: 1, 1: 1, 2: 1, 3: 1}

    config = small_config()
    with MessageStore.open(store, config) as s:
        s.put(Message("TopicP", b"before"), 0).raise_for_status()  # the batch starts at queue 1
    rows = [{"topic": "TopicP", "body": f"p{i}".encode()} for i in range(3)]
    append_staged(str(store), config, [_staged(tmp_path / "a.arrow", rows[:1])], sink="q", batch_id=0)
    markers = read_markers(str(store))
    assert markers["q"]["queueStarts"] == {"TopicP": 1}
    markers["q"]["state"] = "pending"  # the crash: only the first message was appended
    (store / MARKER).write_text(json.dumps(markers))
    assert append_staged(str(store), config, [_staged(tmp_path / "b.arrow", rows)], sink="q", batch_id=0) == 2
    assert _queue_counts(store, "TopicP") == {0: 1, 1: 1, 2: 1, 3: 1}


def _write_in_thread(spark: Any, store: Path, topic: str, n: int, errors: list) -> Any:  # noqa: F811
    """A write job from another thread (PySpark needs the session made active in it)."""
    import threading

    def run() -> None:
        try:
            spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
            df = spark.range(n, numPartitions=2).selectExpr(f"'{topic}' topic", "cast(id as string) body")
            df.write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
        except Exception as exc:  # reported to the test
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_concurrent_writes_take_turns_and_a_store_open_elsewhere_is_refused_at_once(spark, tmp_path):  # noqa: F811
    """Two jobs whose commits meet while a third Spark commit holds the store both wait for their
    turn and append every row once; a store another program holds open is refused before any
    task runs (no staging folder was made), and a turn not given within lockWaitMs fails."""
    import fcntl
    import time

    config, store = small_config(), tmp_path / "store"
    make_store(store, 3)
    staging = tmp_path / ".store.spark-staging"
    errors: list = []
    with open(store / "config" / "sparkCommit.lock", "a") as turn, MessageStore.open(store, config):
        fcntl.flock(turn, fcntl.LOCK_EX)  # the turn and the open store, as a Spark commit holds them
        threads = [_write_in_thread(spark, store, topic, 300, errors) for topic in ("C0", "C1")]
        deadline = time.monotonic() + 60
        while len(list(staging.glob("*/*.arrow"))) < 4 and not errors and time.monotonic() < deadline:
            time.sleep(0.05)  # until both jobs have staged their rows and are about to commit
        assert not errors
        with pytest.raises(Exception, match=r"StoreLockedError: .*lockWaitMs"):
            spark.range(1).selectExpr("'C2' topic", "'x' body").write.format("rocketstore").options(
                **SMALL_OPTIONS, lockWaitMs="50"
            ).mode("append").save(str(store))
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    rows = export_rows(store, config)
    for topic in ("C0", "C1"):
        bodies = sorted(int(base64.b64decode(r["body"])) for r in rows if r["topic"] == topic)
        assert bodies == list(range(300)), topic
    assert not staging.exists()

    with MessageStore.open(store, config):  # another program's open store
        df = spark.range(1).selectExpr("'C3' topic", "'x' body")
        with pytest.raises(Exception, match=r"StoreLockedError: .*is open in another program"):
            df.write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
        assert not staging.exists()


def _claim_in_child(folder: Path, part: bytes) -> None:
    """A driver that made its job folder, staged a part file and died without commit or abort."""
    import subprocess
    import sys

    code = (
        "import os, sys\n"
        "from rocketstore.spark.staging import claim_folder\n"
        "claim_folder(sys.argv[1])\n"
        "open(os.path.join(sys.argv[1], 'part-00000-0-deadbeef.arrow'), 'wb').write(sys.argv[2].encode())\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(folder), part.decode()], check=True)


def test_a_new_local_session_removes_the_work_folders_of_killed_programs(tmp_path, monkeypatch):
    """local_session's work folder (Spark's local dirs) was removed only by an exit handler: a
    killed program left it in the temporary folder for good. The next one removes those whose
    recorded driver process is gone, and keeps a live program's and any it cannot judge."""
    import os
    import tempfile

    from rocketstore.spark.session import WORK_PREFIX, new_work_dir
    from rocketstore.spark.staging import OWNER, claim_folder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    _claim_in_child(tmp_path / f"{WORK_PREFIX}killed", b"x" * 4096)
    claim_folder(str(tmp_path / f"{WORK_PREFIX}live"))  # this process: a program still running
    (tmp_path / f"{WORK_PREFIX}unknown").mkdir()  # no record: not judged
    (tmp_path / "other-killed").mkdir()
    (tmp_path / "other-killed" / OWNER).write_text((tmp_path / f"{WORK_PREFIX}killed" / OWNER).read_text())
    made = new_work_dir()
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["other-killed", f"{WORK_PREFIX}live", f"{WORK_PREFIX}unknown", os.path.basename(made)])


def test_a_work_folder_is_its_own_programs_under_a_launcher_named_java(tmp_path, monkeypatch):
    """The folder recorded the first ancestor named java (a job's driver JVM, for staging): a
    program started by a Java launcher (an IDE, a build agent) that then exits had its live
    folder removed by the next session. It records the program itself."""
    import os
    import subprocess
    import sys
    import tempfile

    from rocketstore.spark.session import new_work_dir

    child = (
        "import sys, tempfile\ntempfile.tempdir = sys.argv[1]\n"
        "from rocketstore.spark.session import new_work_dir\nprint(new_work_dir(), flush=True)\nsys.stdin.read()\n"
    )
    launcher = tmp_path / "bin" / "java"  # its process is named java, as a JVM's is
    launcher.parent.mkdir()
    launcher.write_text(
        f"#!{sys.executable}\nimport subprocess, sys\n"
        f"child = subprocess.Popen([sys.executable, '-c', {child!r}, sys.argv[1]], stdout=subprocess.PIPE, text=True)\n"
        "print(child.stdout.readline().strip(), flush=True)\n"
    )
    launcher.chmod(0o755)
    proc = subprocess.Popen([str(launcher), str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    made = proc.stdout.readline().strip()
    assert proc.wait(timeout=60) == 0  # the launcher is gone, the program it started runs on
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    new_work_dir()
    assert os.path.isdir(made)
    proc.stdin.close()  # the program ends


def test_a_streaming_query_restarted_by_another_driver_stages_in_a_folder_of_its_own(tmp_path):
    """A sweep removes the folder of a killed driver's query (its owner record says the driver is
    gone): the same query restarted by a new driver must not stage in that folder meanwhile. The
    folder is the same for every writer of one driver (Spark stages and commits a micro-batch
    with different writers) and differs between drivers."""
    import subprocess
    import sys

    from rocketstore.spark.sink import stream_job

    store, checkpoint = str(tmp_path / "store"), str(tmp_path / "checkpoint")
    here = stream_job(store, checkpoint)
    assert stream_job(store, checkpoint) == here
    code = "import sys\nfrom rocketstore.spark.sink import stream_job\nprint(stream_job(sys.argv[1], sys.argv[2]))\n"
    other = subprocess.run(
        [sys.executable, "-c", code, store, checkpoint], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert other.startswith("stream-") and other != here
    assert other.split("-")[1] == here.split("-")[1]  # the query's part of the name is the same


def test_the_next_write_removes_what_a_killed_driver_staged_and_keeps_live_jobs(spark, tmp_path):  # noqa: F811
    """A job whose driver is gone never commits nor aborts: the next write to the staging root
    removes its folder. A job whose driver runs (this process, another program) is kept, and so
    are a folder whose driver cannot be checked (another host) and one made before drivers were
    recorded, until nothing in them changed for a day."""
    import os
    import time

    from rocketstore.spark.staging import OWNER, claim_folder

    store, staging = tmp_path / "store", tmp_path / ".store.spark-staging"
    _claim_in_child(staging / "dead", b"x" * 4096)
    claim_folder(str(staging / "live"))  # this process runs: a live job of another program
    (staging / "live" / "part-00000-0-live.arrow").write_bytes(b"y")
    claim_folder(str(staging / "elsewhere"))
    record = json.loads((staging / "elsewhere" / OWNER).read_text())
    (staging / "elsewhere" / OWNER).write_text(json.dumps({**record, "host": "another-host", "pid": 1}))
    for name, age in (("legacy-recent", 0), ("legacy-stale", 2 * 86400), ("elsewhere-stale", 2 * 86400)):
        (staging / name).mkdir(exist_ok=True)
        if name == "elsewhere-stale":
            (staging / name / OWNER).write_text((staging / "elsewhere" / OWNER).read_text())
        (staging / name / "part-00000-0-x.arrow").write_bytes(b"z")
        then = time.time() - age
        for p in (*(staging / name).iterdir(), staging / name):
            os.utime(p, (then, then))

    df = spark.range(6, numPartitions=2).selectExpr("'T' topic", "cast(id as string) body")
    df.write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
    assert sorted(p.name for p in staging.iterdir()) == ["elsewhere", "legacy-recent", "live"]
    assert (staging / "live" / "part-00000-0-live.arrow").exists()
    assert len(export_rows(store, small_config())) == 6


def test_a_driver_killed_while_staging_leaves_nothing_after_the_next_write(spark, tmp_path):  # noqa: F811
    """The review's case, small: a Spark program killed (SIGKILL) while its tasks stage rows; its
    driver JVM exits with it, and the next write removes the folder it left."""
    import os
    import signal
    import subprocess
    import sys
    import time

    store, staging = tmp_path / "store", tmp_path / ".store.spark-staging"
    child = (
        "import sys, time\n"
        "from pyspark.sql import functions as F\n"
        "from rocketstore.spark.session import local_session\n"
        "spark = local_session('local[2]', work_dir=sys.argv[2], register_source=False)\n"
        "slow = F.udf(lambda i: time.sleep(120) or f'id-{i}', 'string')\n"
        "df = spark.range(2, numPartitions=2).select(F.lit('K').alias('topic'), slow('id').alias('body'))\n"
        f"df.write.format('rocketstore').options(**{SMALL_OPTIONS!r}).mode('append').save(sys.argv[1])\n"
    )
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.Popen(
        [sys.executable, "-c", child, str(store), str(tmp_path / "work")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(staging.glob("*/part-*.arrow")) and time.monotonic() < deadline:
            assert proc.poll() is None, "the child Spark program ended before staging"
            time.sleep(0.2)
        (folder,) = staging.iterdir()
        recorded = (folder / "driver.json").read_text() if (folder / "driver.json").exists() else "{}"
        jvm = _child_java(proc.pid)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 60
    while _running(jvm) and time.monotonic() < deadline:
        time.sleep(0.2)  # the JVM exits once the program that started it is gone
    assert not _running(jvm)
    assert folder.is_dir()  # its part files may be gone (a task removes its own when it fails), the folder stays

    df = spark.range(4, numPartitions=2).selectExpr("'T' topic", "cast(id as string) body")
    df.write.format("rocketstore").options(**SMALL_OPTIONS).mode("append").save(str(store))
    assert not staging.exists(), sorted(staging.rglob("*"))
    assert len(export_rows(store, small_config())) == 4
    assert json.loads(recorded).get("pid") == jvm  # the job's folder named the driver JVM


def _child_java(parent: int) -> int:
    """The pid of the JVM a PySpark program started (its child process named java)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        if name == "java" and int(rest[1]) == parent:
            return int(stat.parent.name)
    raise AssertionError(f"no JVM under pid {parent}")


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"  # a zombie has exited
