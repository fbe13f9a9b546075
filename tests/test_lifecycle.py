"""Opening and shutting down when something goes wrong, and the services under faults.

Faults are real: a folder planted where the store writes a file, a file where it needs a folder,
a record that cannot be redelivered. Nothing of the store is mocked; where a service's thread
would run a round, the test runs the round itself, as the thread does, to stay deterministic.
"""

from __future__ import annotations

import errno
import itertools
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rocketstore import Message, MessageStore, PutMessageStatus
from rocketstore.errors import (
    InvalidArgumentError,
    ReadOnlyStoreError,
    RocketStoreError,
    StoreClosedError,
    StoreFileError,
)
from rocketstore.meta.offset_files import ConsumerOffsetManager
from rocketstore.meta.topic_config import TopicConfigManager
from rocketstore.running_flags import WRITE_LOGICS_QUEUE_ERROR


def store_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("rocketstore-")}


def fail_round(service) -> None:
    """One round of ``service`` that fails, handled as its thread handles it."""
    with pytest.raises(OSError) as info:
        service.run_once()
    service.failures += 1
    service.on_failure(info.value)


def test_a_shutdown_step_that_fails_does_not_stop_the_rest(make_store, tmp_path: Path, store_config) -> None:
    """delayOffset.json cannot be written: shutdown still stops every service, closes the files
    and releases the lock, keeps abort, and then says what went wrong (a typed error)."""
    before = store_threads()
    store = make_store()
    assert store.put(Message("T", b"x")).ok
    root = tmp_path / "store"
    blocker = root / "config" / "delayOffset.json.tmp"
    blocker.mkdir(parents=True)
    with pytest.raises(RocketStoreError) as info:
        store.shutdown()
    assert "did not shut down cleanly" in str(info.value)
    assert store_threads() == before
    assert (root / "abort").exists()
    with pytest.raises(StoreClosedError):
        store.put(Message("T", b"y"))
    store.shutdown()  # a second call does nothing
    blocker.rmdir()
    again = make_store()  # the lock was released
    assert again.get_max_offset_in_queue("T", 0) == 1


def test_a_failed_open_stops_the_services_it_started(make_store, tmp_path: Path, store_config) -> None:
    """Writing abort is the open's last step, after the services started: when it fails, they
    stop again and the lock is released."""
    store = make_store()
    assert store.put(Message("T", b"x")).ok
    store.shutdown()
    root = tmp_path / "store"
    # an immutable store folder: no new entry (abort) can be made in it, even by root
    if subprocess.run(["chattr", "+i", str(root)], capture_output=True).returncode:
        pytest.skip("chattr +i is not supported here")
    try:
        before = store_threads()
        with pytest.raises(StoreFileError, match="abort") as refused:
            MessageStore.open(root, store_config)
        assert store_threads() == before
        assert refused.value.errno == errno.EPERM and refused.value.filename == str(root / "abort")
    finally:
        subprocess.run(["chattr", "-i", str(root)], check=True)
    assert make_store().get_max_offset_in_queue("T", 0) == 1


def test_dispatch_that_keeps_failing_stops_writes_and_shutdown_does_not_wait_for_it(make_store, tmp_path: Path) -> None:
    """A file where a consume queue's folder belongs: dispatch fails on every round. After a few
    failed rounds the store sets WRITE_LOGICS_QUEUE_ERROR and refuses puts (RocketMQ's
    makeLogicsQueueError), and shutdown neither waits its 30 s for dispatch nor removes abort."""
    store = make_store()
    store.reput.stop()
    root = tmp_path / "store"
    (root / "consumequeue").mkdir(exist_ok=True)
    (root / "consumequeue" / "Broken").write_bytes(b"")
    assert store.put(Message("Broken", b"x")).ok
    fail_round(store.reput)
    assert store.put(Message("Healthy", b"y")).ok  # a passing fault is retried first
    fail_round(store.reput)
    fail_round(store.reput)
    assert store.running_flags & WRITE_LOGICS_QUEUE_ERROR
    assert store.put(Message("Healthy", b"z")).status == PutMessageStatus.SERVICE_NOT_AVAILABLE
    store.reput.start()
    with pytest.raises(RocketStoreError):  # its last dispatch round fails too
        store.shutdown()  # the test's time limit is the check that it does not wait 30 s
    assert (root / "abort").exists()


def test_a_caller_waiting_for_dispatch_is_released_by_shutdown(make_store, store_config) -> None:
    """Under SYNC_FLUSH nothing unflushed is dispatched; with the flush stopped a WAIT=false put
    stays undispatched, and a caller waiting without a timeout must not wait for ever."""
    store = make_store(config=store_config.copy(flushDiskType="SYNC_FLUSH", flushIntervalCommitLog=600_000))
    store.services.flush.stop()
    assert store.put(Message("T", b"x", properties={"WAIT": "false"})).ok
    assert store.dispatch_behind_bytes() > 0
    answers: list[bool] = []
    waiter = threading.Thread(target=lambda: answers.append(store.wait_for_dispatch(None)))
    waiter.start()
    store.shutdown(wait_for_dispatch=0)
    waiter.join(30)
    assert not waiter.is_alive()
    assert answers in ([True], [False])


def test_wait_for_dispatch_waits_for_what_was_written_before_the_call(make_store, store_config) -> None:
    """Under a steady stream of puts the log's end keeps moving; waiting for dispatch means
    waiting for what was in the log when asked, which dispatch reaches."""
    store = make_store(
        config=store_config.copy(
            mappedFileSizeCommitLog=1 << 26, mappedFileSizeConsumeQueue=20 << 20, maxIndexNum=1 << 20
        )
    )
    stop = threading.Event()
    batch = [Message("Busy", b"x" * 100) for _ in range(32)]

    def produce() -> None:
        for _ in range(20_000):  # bounded: about 90 MB of log at most
            if stop.is_set():
                return
            store.put_batch(batch)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        assert store.put(Message("Busy", b"y")).ok
        target = store.max_phy_offset
        assert store.wait_for_dispatch(30)
        assert store.positions()["dispatched"] >= target
        assert store.max_phy_offset > target  # the log grew while we waited (the producer may be done by now)
    finally:
        stop.set()
        producer.join()


def test_flush_commits_the_transient_pool_first(make_store, store_config) -> None:
    store = make_store(
        config=store_config.copy(
            transientStorePoolEnable=True,
            transientStorePoolSize=2,
            mappedFileSizeCommitLog=1 << 16,
            commitIntervalCommitLog=3_600_000,
            commitCommitLogThoroughInterval=3_600_000,
        )
    )
    for _ in range(3):
        assert store.put(Message("T", b"x" * 200)).ok
    assert store.positions()["committed"] < store.positions()["wrote"]
    store.flush()
    positions = store.positions()
    assert positions["flushed"] == positions["committed"] == positions["wrote"]


def locked_kib() -> int:
    """VmLck of this process, in KiB (memory mlock()ed)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmLck:"))


def test_the_transient_pool_locks_its_buffers_in_memory(make_store, store_config) -> None:
    """As RocketMQ's TransientStorePool.init: each write buffer is mlock()ed (where the limit of
    locked memory allows it), so that the page cache never swaps out what puts write into."""
    import resource

    size = 1 << 20
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft != resource.RLIM_INFINITY and soft < locked_kib() * 1024 + 2 * size:
        pytest.skip(f"RLIMIT_MEMLOCK {soft} leaves no room for a {size}-byte buffer")
    config = store_config.copy(transientStorePoolEnable=True, transientStorePoolSize=1, mappedFileSizeCommitLog=size)
    store = make_store(config=config)
    before = locked_kib()
    assert store.put(Message("T", b"x" * 200)).ok  # the first segment borrows the buffer
    assert locked_kib() - before >= size // 1024
    store.shutdown()
    assert locked_kib() <= before  # the pool's close unmaps (and so unlocks) it


def test_an_async_shutdown_flushes_every_segment(make_store, store_config, tmp_path: Path) -> None:
    """Many small segments written since the last flush: shutdown flushes them all before it
    calls the exit clean (it stopped after ten)."""
    store = make_store(
        config=store_config.copy(flushIntervalCommitLog=3_600_000, flushCommitLogThoroughInterval=3_600_000)
    )
    for _ in range(40):
        assert store.put(Message("T", b"x" * 1000)).ok
    assert len(store.commit_log.queue.files) > 10
    store.shutdown()
    assert not (tmp_path / "store" / "abort").exists()
    assert store.commit_log.queue.flushed_where == store.commit_log.queue.max_offset()


def test_a_delayed_message_that_cannot_be_delivered_is_dropped_not_retried_for_ever(make_store, tmp_path) -> None:
    """Its real queue id is out of range: RocketMQ logs and drops such a message; the level goes
    on with the next one (the service spun on it at full CPU). The writer refuses such a record:
    this one is another writer's (a stored record patched; properties are outside the body CRC)."""
    store = make_store()
    store.services.schedule.stop()
    bad = Message("SCHEDULE_TOPIC_XXXX", b"bad", properties={"REAL_TOPIC": "T", "REAL_QID": "1000000000", "DELAY": "1"})
    assert store.put_as_is(bad, 0).ok
    assert store.put(Message("T", b"good", properties={"DELAY": "1"})).ok
    store.shutdown()
    segment = tmp_path / "store" / "commitlog" / f"{0:020d}"
    segment.write_bytes(segment.read_bytes().replace(b"REAL_QID\x011000000000", b"REAL_QID\x012147483648"))
    store = make_store()
    assert store.wait_for_dispatch()
    service = store.services.schedule
    service.stop()
    assert service.run_once(now=2**62) == 1
    assert service.levels[1].skipped == 1
    assert store.wait_for_dispatch()
    assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"good"]


def test_the_store_refuses_calls_after_shutdown(make_store, tmp_path: Path) -> None:
    store = make_store()
    assert store.put(Message("T", b"x")).ok
    store.shutdown()
    for call in (
        lambda: store.commit_offset("g", "T", 0, 1),
        lambda: store.query_offset("g", "T", 0),
        lambda: store.get_max_offset_in_queue("T", 0),
        lambda: store.get_min_offset_in_queue("T", 0),
        lambda: store.get_commit_log_offset_in_queue("T", 0, 0),
        lambda: store.delete_topics(["T"]),
        lambda: store.flush(),
        lambda: store.wait_for_dispatch(),
        lambda: store.services.clean.run_once(),  # a cleanup round still running in another thread
        lambda: store.min_phy_offset,
        lambda: store.max_phy_offset,
        lambda: store.positions(),
        lambda: store.queue_ids(),
        lambda: store.dispatch_behind_bytes(),
        lambda: store.schedule_report(),
        lambda: store.disk_report(),
        lambda: store.put_batch([Message("T", b"y")]),
    ):
        with pytest.raises(StoreClosedError):
            call()
    assert os.path.isdir(tmp_path / "store" / "consumequeue" / "T")
    assert repr(store).endswith(", closed)")
    shutil.rmtree(tmp_path / "store")


@pytest.mark.parametrize("wait", [None, np.int64(30), 10**400, math.inf], ids=["None", "numpy", "huge", "inf"])
def test_shutdown_without_a_dispatch_limit_and_with_a_bad_one(make_store, tmp_path: Path, wait: object) -> None:
    """wait_for_dispatch=None (as wait_for_dispatch(None)) waits as long as dispatch takes; it raised
    a TypeError half-way, the store marked closed with its service threads left running on closed
    files. A value that is no number of seconds is refused before anything stops."""
    store = make_store()
    assert store.put(Message("T", b"x")).ok
    for bad in ("30", True, float("nan"), [1]):
        with pytest.raises(InvalidArgumentError, match="wait_for_dispatch must be seconds or None"):
            store.shutdown(wait_for_dispatch=bad)
        assert not store.closed and store.put(Message("T", b"y")).ok
    services = [t for t in threading.enumerate() if t.name.startswith("rocketstore-")]
    assert services
    store.shutdown(wait_for_dispatch=wait)
    assert store.closed and not (tmp_path / "store" / "abort").exists()
    assert not [t for t in services if t.is_alive()]
    with MessageStore.open(tmp_path / "store", store.config, read_only=True) as view:
        assert view.get_max_offset_in_queue("T", 0) == 5


def test_ctrl_c_during_shutdown_still_stops_the_services(make_store, store_config, tmp_path: Path) -> None:
    """A SIGINT while shutdown() waits for dispatch (held back here by holding the reput lock)
    ends the wait; the services are stopped, offsets written and files closed all the same, and
    the KeyboardInterrupt is raised after. The services used to keep running: a persist thread
    left over wrote its stale offsets over those of the store opened again."""
    store = make_store()
    assert store.put(Message("T", b"x")).ok and store.wait_for_dispatch()
    store.commit_offset("g", "T", 0, 1)
    before = store_threads()
    mine = {t for t in before if t.name != "rocketstore-allocate"}

    held = threading.Event()

    def interrupt() -> None:
        with store.reput.lock:  # no dispatch round until the interrupt is sent
            held.set()
            while not store.closed:  # shutdown() has begun
                time.sleep(0.001)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    helper = threading.Thread(target=interrupt)
    helper.start()
    held.wait()
    assert store.put(Message("T", b"y")).ok  # dispatch is behind now: shutdown waits for it
    try:
        with pytest.raises(KeyboardInterrupt):
            store.shutdown(wait_for_dispatch=20)
    finally:
        helper.join()
    assert not [t for t in mine if t.is_alive()]
    assert os.path.exists(tmp_path / "store" / "abort")  # the shutdown was cut short: recover
    with MessageStore.open(tmp_path / "store", store_config) as again:
        assert again.query_offset("g", "T", 0) == 1


def test_a_closed_read_only_store_says_it_is_closed(make_store, tmp_path: Path) -> None:
    """Writes to a read-only store that is shut down raise StoreClosedError, as every call does."""
    make_store().shutdown()
    store = MessageStore.open(tmp_path / "store", read_only=True)
    with pytest.raises(ReadOnlyStoreError):
        store.commit_offset("g", "T", 0, 1)
    store.shutdown()
    for call in (
        lambda: store.put(Message("T", b"x")),
        lambda: store.commit_offset("g", "T", 0, 1),
        lambda: store.delete_topics(["T"]),
        lambda: store.clean_expired_files(),
    ):
        with pytest.raises(StoreClosedError):
            call()


def test_a_store_left_open_at_exit_is_shut_down(tmp_path: Path) -> None:
    """A program that ends without shutdown(): the atexit hook shuts the store down, so committed
    offsets reach consumerOffset.json and the next open needs no recovery."""
    script = f"""
from rocketstore import Message, MessageStore
store = MessageStore.open({str(tmp_path / "store")!r})
store.put(Message("T", b"x"))
store.commit_offset("g", "T", 0, 1)
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    with MessageStore.open(tmp_path / "store") as store:
        assert store.last_exit_ok
        assert store.query_offset("g", "T", 0) == 1


def test_a_forked_child_leaves_its_parents_stores_alone_at_exit(tmp_path: Path) -> None:
    """A child forked from a program with a store open ends normally (its atexit hooks run): it
    must not shut the parent's store down. It used to, removing the parent's abort marker while
    the parent still wrote, so a crash of the parent would then skip recovery."""
    root = tmp_path / "store"
    script = f"""
import os, sys
from rocketstore import Message, MessageStore
store = MessageStore.open({str(root)!r})
assert store.put(Message("T", b"x")).ok and store.wait_for_dispatch()
child = os.fork()
if child == 0:
    sys.exit(0)
assert os.waitpid(child, 0)[1] == 0
print(os.path.exists(os.path.join({str(root)!r}, "abort")))
assert store.put(Message("T", b"y")).ok
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]  # the parent's store was still marked open after the child
    assert done.stderr == ""
    with MessageStore.open(root) as store:
        assert store.last_exit_ok and store.get_max_offset_in_queue("T", 0) == 2


def test_a_forked_child_cannot_write_to_its_parents_store(tmp_path: Path) -> None:
    """The child of a fork holds neither the lock nor the services of its parent's open store:
    the store is closed to it (a put there answered PUT_OK at the offset the parent wrote next,
    and the parent overwrote it), and opening it again finds the parent's lock, not this one."""
    root = tmp_path / "store"
    script = f"""
import os, sys
from rocketstore import Message, MessageStore
from rocketstore.errors import StoreClosedError, StoreLockedError
store = MessageStore.open({str(root)!r})
assert store.put(Message("T", b"parent-0")).ok
child = os.fork()
if child == 0:
    try:
        store.put(Message("T", b"child"))
        os._exit(3)
    except StoreClosedError:
        pass
    try:
        MessageStore.open({str(root)!r})
        os._exit(4)
    except StoreLockedError as exc:
        os._exit(0 if "another process" in str(exc) else 5)
_, status = os.waitpid(child, 0)
print(os.waitstatus_to_exitcode(status))
assert store.put(Message("T", b"parent-1")).ok
store.shutdown()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]
    with MessageStore.open(root) as store:
        assert store.wait_for_dispatch()
        assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"parent-0", b"parent-1"]


def test_consumer_offsets_and_new_topics_reach_disk_while_the_store_runs(make_store, store_config) -> None:
    """The broker writes consumerOffset.json every flushConsumerOffsetInterval (5 s): a crash loses
    at most that much of the committed offsets, not everything since the open."""
    store = make_store(config=store_config.copy(flushConsumerOffsetInterval=3_600_000))
    assert store.services.persist.running
    store.services.persist.run_once()  # a new store's first round writes its (empty) files
    assert store.put(Message("NewTopic", b"x")).ok
    store.commit_offset("g1", "NewTopic", 0, 1)
    assert store.services.persist.run_once() == 2  # a round of its thread: offsets and topics
    assert store.services.persist.run_once() == 0  # nothing changed since
    on_disk = ConsumerOffsetManager(os.path.join(store.root, "config", "consumerOffset.json"), writable=False)
    on_disk.load()
    assert on_disk.query("g1", "NewTopic", 0) == 1
    topics = TopicConfigManager(os.path.join(store.root, "config", "topics.json"), writable=False)
    topics.load()
    assert topics.find("NewTopic") is not None


def test_a_topic_created_just_before_a_crash_is_in_topics_json_after_the_open(tmp_path: Path, store_config) -> None:
    root = tmp_path / "store"
    code = (
        "import os, signal\n"
        "from rocketstore import Message, MessageStore, StoreConfig\n"
        f"s = MessageStore.open({str(root)!r}, StoreConfig({store_config.to_dict()!r}))\n"
        "assert s.put(Message('Fresh', b'x'), 3).ok\n"
        "assert s.put(Message('Fresh', b'y'), 6).ok\n"
        "assert s.put(Message('Later', b'z', properties={'DELAY': '2'})).ok\n"
        "s.flush()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=False)
    assert not (root / "config" / "topics.json").exists()
    store = MessageStore.open(root, store_config)
    try:
        assert store.topics.find("Fresh") is not None
        assert store.get_max_offset_in_queue("Fresh", 3) == 1
    finally:
        store.shutdown()
    topics = TopicConfigManager(os.path.join(root, "config", "topics.json"), writable=False)
    topics.load()
    fresh, schedule = topics.find("Fresh"), topics.find("SCHEDULE_TOPIC_XXXX")
    assert fresh is not None and fresh["readQueueNums"] == fresh["writeQueueNums"] == 7  # queues 0..6
    assert schedule is not None and schedule["readQueueNums"] == 18  # as RocketMQ registers it


def test_a_read_only_open_tries_again_when_a_file_vanishes_under_it(tmp_path: Path, store_config) -> None:
    """A read-only open of a live store can list a segment its cleanup deletes a moment later:
    the open starts again instead of failing with a FileNotFoundError."""
    root = tmp_path / "store"
    with MessageStore.open(root, store_config) as store:
        assert store.put(Message("T", b"x")).ok
    code = (
        "import os\n"
        "from rocketstore import MessageStore, StoreConfig\n"
        "real, calls = os.listdir, []\n"
        "def listdir(path='.'):\n"
        "    names = real(path)\n"
        "    if str(path).endswith('commitlog') and not calls:\n"
        "        calls.append(path)\n"
        "        names = ['00000000000000000001', *names]  # listed, and gone when it is opened\n"
        "    return names\n"
        "os.listdir = listdir\n"
        f"with MessageStore.open({str(root)!r}, StoreConfig({store_config.to_dict()!r}), read_only=True) as s:\n"
        "    print(len(calls), s.get_max_offset_in_queue('T', 0))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1"]


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyError("bug")], ids=["os", "bug"])
def test_a_service_that_keeps_failing_backs_off_and_logs_less(caplog, error: Exception) -> None:
    """A round that fails at once (a full disk, say) must neither spin nor flood the log: the
    pause doubles from the service's interval, and the failure is logged the first time (with its
    traceback unless the system refused something: an OSError names its cause), then at 2, 4, 8,
    ... in a row."""
    import logging
    import time

    from rocketstore.services.base import Service

    class Failing(Service):
        name = "failing"

        def __init__(self) -> None:
            super().__init__(5)
            self.started: list[float] = []
            self.ninth = threading.Event()

        def run_once(self) -> None:
            self.started.append(time.monotonic())
            if len(self.started) == 9:
                self.ninth.set()
            raise error

    service = Failing()
    with caplog.at_level(logging.ERROR, logger="rocketstore.services.base"):
        service.start()
        try:
            assert service.ninth.wait(30)
        finally:
            service.stop()
    gaps = [b - a for a, b in itertools.pairwise(service.started)]
    assert gaps[-1] >= 0.005 * 2**6  # the 8th pause is 64 intervals, not one
    lines = [r for r in caplog.records if "failing failed" in r.getMessage()]
    assert [r.exc_info is not None for r in lines][:1] == [not isinstance(error, OSError)]
    assert isinstance(error, OSError) is (str(error) in lines[0].getMessage())  # else in the traceback
    assert [r.getMessage().split(" times")[0].rsplit(" ", 1)[-1] for r in lines[1:]][:3] == ["2", "4", "8"]


def test_a_store_of_many_queues_opens_under_a_low_soft_limit_of_open_files(tmp_path: Path) -> None:
    """Every mapped file holds descriptors; as the JVM raises its soft limit of open files to
    the hard one, so does the store, and 40 queues open under a soft limit of 64."""
    script = f"""
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from rocketstore import Message, MessageStore, StoreConfig
config = StoreConfig(mappedFileSizeCommitLog=4096, mappedFileSizeConsumeQueue=200, brokerIP1="127.0.0.1")
for _ in range(2):
    with MessageStore.open({str(tmp_path / "store")!r}, config) as store:
        for q in range(40):
            assert store.put(Message("T", b"x"), q).ok
        assert store.wait_for_dispatch()
        print(sum(store.get_max_offset_in_queue("T", q) for q in range(40)))
"""
    if resource_hard_limit() <= 64:
        pytest.skip("the hard limit of open files is too low to raise")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["40", "80"]


def resource_hard_limit() -> int:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 1 << 30 if hard == resource.RLIM_INFINITY else hard


def _waiting_in(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` is inside a call of ``function`` (a frame of that name on its stack)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def _until(condition, seconds: float = 30.0) -> bool:
    """Wait (on a short timed wait of an Event nobody sets) until ``condition`` holds."""
    pause = threading.Event()
    for _ in range(int(seconds * 200)):
        if condition():
            return True
        pause.wait(0.005)
    return False


@pytest.mark.parametrize("flush_type", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_a_put_racing_shutdown_is_stored_and_flushed_or_refused(make_store, store_config, tmp_path, flush_type) -> None:
    """A put that passed the store's "open" check just before shutdown() and then waits for the
    put lock is either appended before the files close (and flushed: PUT_OK means on disk) or
    refused as every later put is (StoreClosedError); it used to meet closed files (ValueError:
    mmap closed) or, under SYNC_FLUSH, get PUT_OK for a record no flush wrote."""
    store = make_store(config=store_config.copy(flushDiskType=flush_type))
    assert store.put(Message("T", b"first")).ok
    outcome: dict[str, object] = {}

    def late_put() -> None:
        try:
            outcome["put"] = store.put(Message("T", b"late"))
        except Exception as exc:  # the outcome is what the test looks at
            outcome["put"] = exc

    producer = threading.Thread(target=late_put)
    closer = threading.Thread(target=store.shutdown)
    with store.commit_log.put_lock:  # an append in progress: the late put waits behind it
        producer.start()
        assert _until(lambda: _waiting_in(producer, "append"))
        closer.start()
        _until(lambda: _waiting_in(closer, "refuse_appends") or not closer.is_alive(), 5.0)
    producer.join(30)
    closer.join(30)
    late = outcome["put"]
    with MessageStore.open(tmp_path / "store", store_config) as again:
        assert again.last_exit_ok and again.wait_for_dispatch()
        stored = [m.body for m in again.get_message("g", "T", 0, 0).messages]
    if isinstance(late, StoreClosedError):
        assert stored == [b"first"]
    else:
        assert not isinstance(late, Exception), repr(late)
        assert late.status == PutMessageStatus.PUT_OK and stored == [b"first", b"late"]
        mapped = store.commit_log.queue.files[-1]
        assert mapped.flushed_position >= late.commit_log_offset + late.wrote_bytes - mapped.file_from_offset


def test_a_commit_after_the_last_write_of_the_offsets_is_refused_not_lost(tmp_path, store_config) -> None:
    """shutdown() writes consumerOffset.json once more at its end: a commit_offset that passed the
    store's check before the shutdown began and lands after that write was kept in memory only,
    lost without a word. The last write seals the offsets: such a commit is StoreClosedError."""
    from rocketstore.errors import StoreClosedError

    store = MessageStore.open(tmp_path / "s", store_config)
    store.commit_offset("g", "T", 0, 5)
    offsets = store.consumer_offsets  # what a commit already past the store's check writes into
    store.shutdown()
    with pytest.raises(StoreClosedError):
        offsets.commit("g", "T", 0, 9)
    with MessageStore.open(tmp_path / "s", store_config) as again:
        assert again.query_offset("g", "T", 0) == 5


def test_a_shutdown_from_another_thread_returns_when_the_first_is_over(make_store, store_config, tmp_path) -> None:
    """A second shutdown() (or a with block's exit) in another thread returned at once while the
    first still ran: the lock still held and abort still there, so opening the store again failed
    (StoreLockedError), and a program ending then cut the first shutdown short. It now returns
    when the first is over; the first's own thread (a handler inside it) still returns at once."""
    store = make_store()
    assert store.put(Message("T", b"x")).ok and store.wait_for_dispatch()
    held, release = threading.Event(), threading.Event()

    def hold_dispatch() -> None:
        with store.reput.lock:  # no dispatch round: the first shutdown waits for dispatch
            held.set()
            release.wait()

    holder = threading.Thread(target=hold_dispatch)
    holder.start()
    held.wait()
    assert store.put(Message("T", b"y")).ok  # dispatch is behind now
    first = threading.Thread(target=store.shutdown)
    first.start()
    while not store.closed:  # the first shutdown has begun (nothing signals it)
        time.sleep(0.001)
    second = threading.Thread(target=store.shutdown)
    second.start()
    second.join(0.5)
    assert second.is_alive() and first.is_alive()  # waiting for the first
    release.set()
    for t in (holder, first, second):
        t.join(30)
    assert not second.is_alive() and not (tmp_path / "store" / "abort").exists()
    with MessageStore.open(tmp_path / "store", store_config) as again:
        assert again.get_max_offset_in_queue("T", 0) == 2
