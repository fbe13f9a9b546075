"""Crash tests with real processes: a producer is SIGKILLed at random moments, and every message it
was told is stored must come back, through its offset, its consume queue and its key.

A second family simulates power loss: the files' unflushed tails are zeroed or cut at random byte
positions (inside a record, a consume-queue unit, the index) and recovery must end in a store that
``verify`` finds clean, holding every message that was flushed.
"""

from __future__ import annotations

import contextlib
import os
import queue
import random
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.meta.checkpoint import StoreCheckpoint
from rocketstore.results import GetMessageStatus
from rocketstore.verify import verify_store

CHILD = Path(__file__).with_name("crash_child.py")
SRC = Path(__file__).resolve().parents[1] / "src"
GEOMETRY = {
    "mappedFileSizeCommitLog": 65536,
    "mappedFileSizeConsumeQueue": 400,
    "maxHashSlotNum": 64,
    "maxIndexNum": 256,
    "brokerIP1": "127.0.0.1",
}
CYCLES = int(os.environ.get("ROCKETSTORE_CRASH_CYCLES", "25"))


class Producer:
    """The child process and the acknowledgements it reported."""

    def __init__(
        self, store: Path, flush_type: str, threads: int, start: int, *, env: dict[str, str] | None = None
    ) -> None:
        settings = [f"{k}={v}" for k, v in GEOMETRY.items()]
        env = {
            **os.environ,
            **(env or {}),
            "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
        }
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(store), flush_type, str(threads), str(start), *settings],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.acks: list[tuple[str, int, int, int, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _take(self, line: str) -> None:
        if line.startswith("ack "):
            _, key, offset, queue_id, queue_offset, status = line.split()
            self.acks.append((key, int(offset), int(queue_id), int(queue_offset), status))

    def kill_after(self, acks: int) -> None:
        """Wait for ``ready`` and ``acks`` acknowledgements, then SIGKILL the child mid-put."""
        ready = False
        while not ready or len(self.acks) < acks:
            line = self.lines.get(timeout=60)
            if line is None:
                raise AssertionError(f"the producer died: {self.proc.stderr.read() if self.proc.stderr else ''}")
            ready = ready or line.startswith("ready")
            self._take(line)
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        self._reader.join(timeout=60)
        while True:  # acknowledgements written before the kill still count
            line = self.lines.get_nowait() if not self.lines.empty() else None
            if line is None:
                break
            self._take(line)


def key_of(ack_key: str) -> str:
    return f"ck-{ack_key}"


def check_acknowledged(store: MessageStore, acks: list, durable_status: set[str]) -> None:
    """Every acknowledged message is at its offset, in its queue at its offset, and found by key."""
    for key, offset, queue_id, queue_offset, status in acks:
        if status not in durable_status:
            continue
        msg = store.look_message_by_offset(offset)
        assert msg is not None, f"message {key} at {offset} is gone"
        assert msg.keys == key_of(key) and msg.queue_id == queue_id and msg.queue_offset == queue_offset
        got = store.get_message("crash-check", "CrashTopic", queue_id, queue_offset, 1)
        assert got.status == GetMessageStatus.FOUND, (key, got)
        assert got.messages[0].commit_log_offset == offset
        found = store.query_message("CrashTopic", key_of(key)).messages
        assert [m.commit_log_offset for m in found] == [offset], key


def config() -> StoreConfig:
    return StoreConfig(GEOMETRY)


@pytest.mark.parametrize(("flush_type", "cycles"), [("SYNC_FLUSH", 2 * CYCLES), ("ASYNC_FLUSH", CYCLES)])
def test_sigkill_loses_no_acknowledged_message(tmp_path: Path, flush_type: str, cycles: int) -> None:
    """2 * CYCLES kills under SYNC_FLUSH and CYCLES under ASYNC_FLUSH; the child sometimes recovers
    the crashed store itself, sometimes the parent checks it in between."""
    rng = random.Random(f"crash-{flush_type}")
    store_path = tmp_path / "store"
    acked: list = []
    start = 0
    for cycle in range(cycles):
        producer = Producer(store_path, flush_type, threads=rng.choice([1, 4, 8]), start=start)
        producer.kill_after(rng.randint(1, 150))
        assert producer.acks, "the producer acknowledged nothing"
        acked += producer.acks
        start += 100_000
        assert (store_path / "abort").exists()
        if cycle % 2 == 0 or cycle == cycles - 1:
            with MessageStore.open(store_path, config()) as store:
                assert not store.last_exit_ok
                # a SIGKILL keeps the page cache: even ASYNC acknowledgements must all be there
                check_acknowledged(store, acked, {"PUT_OK", "FLUSH_DISK_TIMEOUT"})
                assert store.wait_for_dispatch()
            report = verify_store(str(store_path), config())
            assert report.ok, report.problems[:5]


def _unflushed_tails(store: MessageStore, checkpoint_ts: int) -> list[tuple[str, int]]:
    """Every file of a live store with the position from which its bytes are not known durable.

    ``checkpoint_ts`` is the index timestamp of the checkpoint as copied: the dispatcher keeps
    running while the files are taken, so only what that copy vouches for counts as durable.
    """
    tails = []
    for mapped in store.commit_log.queue.files:
        tails.append((mapped.path, mapped.flushed_position))
    for cq in store.queues.queues():
        for mapped in cq.queue.files:
            tails.append((mapped.path, mapped.flushed_position))
    if store.index is not None:
        for index in store.index.files:
            # an index file is flushed when it fills up, and the checkpoint names the last one
            durable = index.is_write_full() and index.end_timestamp <= checkpoint_ts
            tails.append((index.path, index.mapped.file_size if durable else 0))
    return tails


def _copy_tree(source: Path, target: Path) -> None:
    """Copy a live store's files not copied yet (the lock and half-made files aside; files may vanish)."""
    for folder, _, names in os.walk(source):
        into = target / os.path.relpath(folder, source)
        into.mkdir(parents=True, exist_ok=True)
        for name in names:
            if name == "lock" or name.endswith(".creating") or (into / name).exists():
                continue
            with contextlib.suppress(FileNotFoundError):
                shutil.copyfile(os.path.join(folder, name), into / name)


def _cut(path: str, keep: int, rng: random.Random) -> None:
    """Power loss on one file: from a random position at or after ``keep`` the bytes are zeros."""
    size = os.path.getsize(path)
    if keep >= size:
        return
    at = rng.randint(keep, size - 1) if rng.random() < 0.8 else keep
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes(size - at))


@pytest.mark.parametrize("seed", range(12))
def test_power_loss_leaves_a_consistent_store(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    flush_type = "SYNC_FLUSH" if seed % 2 == 0 else "ASYNC_FLUSH"
    live = tmp_path / "live"
    settings = {**GEOMETRY, "flushDiskType": flush_type, "flushIntervalConsumeQueue": 5}
    store = MessageStore.open(live, StoreConfig(settings))
    acks: list = []
    ends: dict[str, int] = {}
    stop = threading.Event()
    enough = threading.Event()
    target = rng.randint(50, 600)

    def produce(worker: int) -> None:
        i = 0
        while not stop.is_set():
            key = f"{worker}-{i}"
            r = store.put(Message("CrashTopic", b"power-%d" % i * (1 + i % 9), tags="TagA", keys=key_of(key)), i % 4)
            if r.ok:
                ends[key] = r.commit_log_offset + r.wrote_bytes
                acks.append((key, r.commit_log_offset, i % 4, r.queue_offset, r.status.value))
                if len(acks) >= target:
                    enough.set()
            i += 1

    workers = [threading.Thread(target=produce, args=(w,)) for w in range(3)]
    snapshot = tmp_path / "after-power-loss"
    try:
        for w in workers:
            w.start()
        assert enough.wait(120)
        # the power goes: take the files as they are, with what the store knows to be flushed
        with store.commit_log.put_lock:
            snapshot.mkdir()
            shutil.copyfile(live / "checkpoint", snapshot / "checkpoint")
            checkpoint_ts = StoreCheckpoint(str(snapshot / "checkpoint"), writable=False).index_msg_timestamp
            tails = dict(_unflushed_tails(store, checkpoint_ts))
            flushed = store.commit_log.flushed_where
            _copy_tree(live, snapshot)
            durable = [a for a in acks if ends[a[0]] <= flushed]
    finally:
        stop.set()
        for w in workers:
            w.join()
        store.shutdown()
    for folder, _, names in os.walk(snapshot):
        for name in names:
            copied = os.path.join(folder, name)
            original = os.path.join(live, os.path.relpath(copied, snapshot))
            if original in tails:
                _cut(copied, tails[original], rng)
            elif name.isdigit():  # a segment or index file made after the tails were taken: nothing durable
                _cut(copied, 0, rng)

    with MessageStore.open(snapshot, StoreConfig(GEOMETRY)) as recovered:
        assert not recovered.last_exit_ok
        statuses = {"PUT_OK"} if flush_type == "SYNC_FLUSH" else {"PUT_OK", "FLUSH_DISK_TIMEOUT"}
        check_acknowledged(recovered, durable, statuses)
        assert recovered.max_phy_offset >= flushed
        assert recovered.wait_for_dispatch()
    report = verify_store(str(snapshot), StoreConfig(GEOMETRY))
    assert report.ok, report.problems[:5]


def test_a_crash_while_a_segment_is_made_leaves_nothing_in_its_folder(tmp_path):
    """A process SIGKILLed after a new segment was allocated at full size but before it got its
    name leaves no file in the folder: RocketMQ fails to load a folder holding anything that is
    not a full-size segment (spec 2.3)."""
    folder = tmp_path / "commitlog"
    folder.mkdir()
    code = (
        "import os, signal\n"
        "from rocketstore.files.mapped_file import MappedFile\n"
        "os.link = os.rename = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # dies just before naming\n"
        f"MappedFile.create({str(folder / ('0' * 20))!r}, 0, 1 << 20)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert os.listdir(folder) == []


def test_segments_are_made_the_named_way_where_unnamed_files_cannot_be_named(tmp_path):
    """Where linking an unnamed file in fails (no /proc, a sandbox refusing linkat), segments are
    made under a temporary name and renamed, and unnamed files are not tried again."""
    folder = tmp_path / "commitlog"
    folder.mkdir()
    code = (
        "import errno, os\n"
        "from rocketstore.files import mapped_file as m\n"
        "def refuse(*a, **k):\n"
        "    raise PermissionError(errno.EPERM, 'linkat refused')\n"
        "os.link = refuse\n"
        f"for i in range(2):\n"
        f"    seg = m.MappedFile.create(os.path.join({str(folder)!r}, '%020d' % (i * 4096)), i * 4096, 4096)\n"
        "    seg.mm[:2] = b'ok'\n"
        "    seg.close()\n"
        "print(m._tmpfile_works)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    assert sorted(os.listdir(folder)) == [f"{0:020d}", f"{4096:020d}"]
    assert (folder / f"{4096:020d}").read_bytes()[:2] == b"ok"


def test_a_full_disk_under_a_sparse_index_file_is_an_error_not_sigbus(loop_fs):
    """Index files get disk as they are written. When the disk is full as dispatch writes an
    index entry into a part of the file that has none yet, the write must fail with ENOSPC
    (dispatch fails, the store stops taking puts) instead of killing the process with SIGBUS.
    The store runs in a child process, so that a SIGBUS shows as its exit signal."""
    fs = loop_fs(48)
    code = textwrap.dedent(
        f"""
        import os
        from rocketstore import Message, MessageStore, StoreConfig
        config = StoreConfig(mappedFileSizeCommitLog=8 << 20, mappedFileSizeConsumeQueue=600000,
                             maxHashSlotNum=64, maxIndexNum=20000, brokerIP1="127.0.0.1",
                             cleanResourceInterval=3_600_000, diskMaxUsedSpaceRatio=95)
        store = MessageStore.open({str(fs.mount / "s")!r}, config)
        for i in range(6000):  # 12,000 index entries: inside the disk the index file got at first
            assert store.put(Message("T", b"x" * 100, keys=f"k{{i}}"), i % 4).ok
        assert store.wait_for_dispatch()
        with open({str(fs.mount / "filler")!r}, "wb", buffering=0) as f:  # the file system is full from here on
            for chunk in (1 << 20, 4096):
                try:
                    while True:
                        f.write(bytes(chunk))
                except OSError:
                    pass
        for i in range(2000):  # one at a time: each dispatch round writes two entries
            result = store.put(Message("T", b"y" * 100, keys=f"n{{i}}"), i % 4)
            if not result.ok:
                print("refused", result.status)
                break
            store.wait_for_dispatch(5)
        else:
            print("never refused")
        os._exit(0)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split()[:2] == ["refused", "SERVICE_NOT_AVAILABLE"], done.stdout


def test_a_store_whose_segment_has_holes_opens_on_a_full_disk(loop_fs):
    """RocketMQ's segments are sparse, and copies made with cp --sparse are too. Opening such a
    store on a full disk cuts its current segment at the end of its data without writing zeros
    into the holes through the mapping (no disk for them: SIGBUS); the store runs in a child
    process, so that a SIGBUS shows as its exit signal."""
    from rocketstore.files import syscalls

    fs = loop_fs(32)
    root = fs.mount / "s"
    config = StoreConfig(
        mappedFileSizeCommitLog=4 << 20,
        maxHashSlotNum=64,
        maxIndexNum=4096,
        brokerIP1="127.0.0.1",
        cleanResourceInterval=3_600_000,
    )
    with MessageStore.open(root, config) as store:
        for i in range(200):
            assert store.put(Message("T", b"x" * 100, keys=f"k{i}")).ok
        end = store.max_phy_offset
    segment = root / "commitlog" / f"{0:020d}"
    fd = os.open(segment, os.O_RDWR)
    try:
        start = (end // 4096 + 1) * 4096
        if not syscalls.punch_hole(fd, start, 4 << 20):
            pytest.skip("this file system cannot punch holes")
    finally:
        os.close(fd)
    with open(fs.mount / "filler", "wb", buffering=0) as f:
        for chunk in (1 << 20, 4096):
            with contextlib.suppress(OSError):
                while True:
                    f.write(bytes(chunk))
    code = (
        "from rocketstore import MessageStore, StoreConfig\n"
        f"with MessageStore.open({str(root)!r}, StoreConfig({config.to_dict()!r})) as s:\n"
        "    print(s.get_max_offset_in_queue('T', 0))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split()[-1] == "200"


def test_what_is_written_after_a_recovery_cut_is_flushed(make_store, tmp_path, store_config) -> None:
    """A normal recovery that cuts the log also cuts the consume queue; the units written there
    again must be flushed (a flush position left past the cut found no file to flush, while the
    checkpoint still claimed the queues flushed)."""
    store = make_store()
    for i in range(60):
        store.put(Message("T", b"x" * 100 + b"%d" % i, tags="A", keys=f"k{i}"))
    store.shutdown()
    second = sorted((tmp_path / "store" / "commitlog").iterdir())[1]
    with open(second, "r+b") as f:  # the second segment's first record fails its checks: the log ends there
        f.seek(4)
        f.write(b"\xde\xad\xbe\xef")
    store = make_store()
    cut = store.get_max_offset_in_queue("T", 0)
    assert store.recovery.stopped_at_bad_record and 0 < cut < 60
    for _ in range(30):
        store.put(Message("T", b"y" * 100, tags="A"))
    assert store.wait_for_dispatch()
    store.flush()
    files = store.queues.find("T", 0).queue.files
    assert store.get_max_offset_in_queue("T", 0) == cut + 30
    assert [(f.file_name, f.flushed_position) for f in files] == [(f.file_name, f.read_position) for f in files]


def _pulled(store: MessageStore, topic: str, count: int) -> list:
    """The first ``count`` messages of ``topic``'s queue 0, pulled file by file (a pull stays
    within one consume-queue file); every pull must move on."""
    read, offset = [], 0
    while offset < count:
        got = store.get_message("g", topic, 0, offset)
        read += got.messages
        assert got.next_begin_offset > offset
        offset = got.next_begin_offset
    return read


@pytest.mark.parametrize("damage", ["body", "properties length"])
def test_a_bad_record_before_the_checkpoints_segment_cuts_nothing(make_store, tmp_path, store_config, damage) -> None:
    """After a crash RocketMQ checks the log from the checkpoint's segment on. The walk may start
    earlier to rebuild the index, but a bad record there (flushed long ago) must not cut away the
    acknowledged records after it. Before that segment records are read as RocketMQ's reput reads
    them: a body whose CRC fails is served; a record whose lengths disagree is kept, named and
    skipped."""
    store = make_store()
    sent = [store.put(Message("T", b"m%d" % i, keys=f"k{i}")) for i in range(120)]
    assert store.wait_for_dispatch()
    newest = store.look_message_by_offset(sent[-1].commit_log_offset).store_timestamp
    end = store.max_phy_offset
    store.shutdown()
    root = tmp_path / "store"
    segments = sorted((root / "commitlog").iterdir())
    victim = next(r for r in reversed(sent) if r.commit_log_offset < int(segments[-2].name) - 200)
    with open(root / "commitlog" / f"{victim.commit_log_offset // 4096 * 4096:020d}", "r+b") as f:
        if damage == "body":
            f.seek(victim.commit_log_offset % 4096 + 88)  # the body's first byte: its CRC fails
            f.write(b"M")
        else:  # PROPERTIESLENGTH one short: every field still readable, their sum one short of TOTALSIZE
            at = victim.commit_log_offset % 4096 + 88 + len(b"m%d" % sent.index(victim)) + 1 + len("T")
            f.seek(at)
            (length,) = struct.unpack(">h", f.read(2))
            f.seek(at)
            f.write(struct.pack(">h", length - 1))
    checkpoint = StoreCheckpoint(str(root / "checkpoint"))  # everything flushed: the checkpoint's segment is the last
    checkpoint.physic_msg_timestamp = checkpoint.logics_msg_timestamp = checkpoint.index_msg_timestamp = newest + 3000
    checkpoint.flush()
    (root / "abort").write_bytes(b"")  # as a crash leaves it
    store = make_store()
    assert store.recovery.abnormal and store.recovery.start_file < segments[-2].name  # the walk began earlier
    kept = [] if damage == "body" else [victim.commit_log_offset]
    assert store.recovery.kept_bad_records == kept
    assert store.max_phy_offset == end
    assert [m.commit_log_offset for m in _pulled(store, "T", 120)] == [
        r.commit_log_offset for r in sent if r.commit_log_offset not in kept
    ]


def test_queues_rebuilt_from_the_log_serve_a_record_whose_body_crc_fails_before_the_checked_segments(
    make_store, tmp_path, store_config
) -> None:
    """Consume queues deleted after a clean exit are rebuilt from the log as RocketMQ's reput builds
    them (CRCs unchecked) before the last three segments, which recovery checks: a record whose
    body was damaged long ago is served, and so is the rest of its segment (the rest used to be
    left out)."""
    store = make_store()
    sent = [store.put(Message("T", b"m%d" % i, keys=f"k{i}")) for i in range(120)]
    store.shutdown()
    root = tmp_path / "store"
    with open(root / "commitlog" / ("0" * 20), "r+b") as f:
        f.seek(sent[1].commit_log_offset + 88)
        f.write(b"M")
    shutil.rmtree(root / "consumequeue")
    store = make_store()
    assert store.recovery.kept_bad_records == []
    assert store.wait_for_dispatch()
    assert [m.commit_log_offset for m in _pulled(store, "T", 120)] == [r.commit_log_offset for r in sent]
    assert not verify_store(root, store_config).ok  # verify checks every CRC and names the body


@pytest.mark.parametrize("damage", ["a unit zeroed", "the last file emptied"])
def test_a_consume_queue_cut_by_damage_is_rebuilt_from_the_log(make_store, tmp_path, store_config, damage) -> None:
    """A consume queue whose recovery cuts written units (a damaged unit, an empty last file)
    gets its records dispatched again, though another queue's end is further on: RocketMQ starts
    dispatch at the highest end and leaves the damaged queue short, its records unreachable."""
    store = make_store()
    for i in range(40):
        store.put(Message("T", b"t%d" % i))
        store.put(Message("U", b"u%d" % i))
    store.shutdown()
    folder = tmp_path / "store" / "consumequeue" / "T" / "0"
    files = sorted(folder.iterdir())
    if damage == "a unit zeroed":
        with open(files[1], "r+b") as f:  # the unit of queue offset 12: its size becomes 0
            f.seek(2 * 20 + 8)
            f.write(bytes(4))
    else:
        os.truncate(files[-1], 0)
    store = make_store()
    assert store.get_max_offset_in_queue("T", 0) == store.get_max_offset_in_queue("U", 0) == 40
    assert [m.body for m in _pulled(store, "T", 40)] == [b"t%d" % i for i in range(40)]
    store.shutdown()
    assert verify_store(tmp_path / "store", store_config).ok


def _zero_last_units(folder: Path, count: int) -> None:
    """Zero the last ``count`` written units of the queue in ``folder`` (all in its last file)."""
    last = sorted(folder.iterdir())[-1]
    data = last.read_bytes()
    written = max(i + 1 for i in range(len(data) // 20) if data[i * 20 : i * 20 + 20] != bytes(20))
    assert written >= count
    with open(last, "r+b") as f:
        f.seek((written - count) * 20)
        f.write(bytes(20 * count))


@pytest.mark.parametrize(
    ("damage", "count", "behind"),
    [
        ("the last units zeroed", 100, ["T/0"]),
        ("the last units zeroed, U's record last", 100, ["T/0"]),  # T's records are before every queue end
        ("the queue removed, U's record last", 100, ["T/0"]),
        ("the last file zeroed", 100, ["T/0"]),
        ("the queue removed", 100, ["T/0"]),
        ("the queue removed", 5, ["T/0"]),  # one segment: walked from its start, dispatched from U's end
        ("every queue removed", 100, []),  # the walk covers the whole log: nothing to catch up
    ],
)
def test_a_consume_queue_short_after_a_clean_exit_is_rebuilt_from_its_end(
    make_store, tmp_path, store_config, caplog, damage, count, behind
) -> None:
    """Units lost at a queue's end after a clean exit (zeros do not count as damage, so recovery
    does not know the queue is short): the walk meets a record of the queue past its end, and the
    queue is dispatched again from its own end. The record used to be written in the first free
    slot (a unit misaligned with its queue offset, the offsets before it missing, the next put
    reusing one)."""
    store = make_store()
    for i in range(count):
        store.put(Message("U", b"u%d" % i))
        store.put(Message("T", b"t%d" % i))  # T/0 holds the log's last record
    if "U's record last" in damage:
        store.put(Message("U", b"u%d" % count))
    store.shutdown()
    root = tmp_path / "store"
    folder = root / "consumequeue" / "T" / "0"
    if damage.startswith("the last units zeroed"):
        _zero_last_units(folder, 3)
    elif damage == "the last file zeroed":
        _zero_last_units(folder, 10)
    elif damage.startswith("the queue removed"):
        shutil.rmtree(folder)
    else:
        shutil.rmtree(root / "consumequeue")
    store = make_store()
    if behind and count == 100:  # a normal open walks the last segments only
        assert store.recovery.start_file != "0" * 20
    assert store.recovery.queues_behind == behind
    assert store.get_max_offset_in_queue("T", 0) == count
    assert [m.body for m in _pulled(store, "T", count)] == [b"t%d" % i for i in range(count)]
    assert store.put(Message("T", b"late")).queue_offset == count
    store.shutdown()
    assert not [r for r in caplog.records if "[BUG]" in r.getMessage()]
    report = verify_store(root, store_config)
    assert report.ok, report.problems[:5]


def test_a_topic_deleted_and_written_again_keeps_its_new_messages_after_sigkill(tmp_path: Path) -> None:
    """SYNC_FLUSH: 20 DEL and 40 T0 messages, DEL deleted, 3 new DEL messages acknowledged at queue
    offsets 0..2, SIGKILL. Abnormal recovery cuts the queue units it does not trust and dispatches
    the log again from the checkpoint's segment: the deleted topic's old records must not go back
    into DEL/0 (they took offsets 0..19 and pushed the acknowledged messages to 20..22)."""
    root = tmp_path / "s"
    geometry = {**GEOMETRY, "mappedFileSizeCommitLog": 4096, "mappedFileSizeConsumeQueue": 200, "maxIndexNum": 128}
    config = StoreConfig(geometry, flushDiskType="SYNC_FLUSH")
    code = textwrap.dedent(
        f"""
        import os, signal
        from rocketstore import Message, MessageStore, StoreConfig
        store = MessageStore.open({str(root)!r}, StoreConfig({geometry!r}, flushDiskType="SYNC_FLUSH"))
        for i in range(20):
            assert store.put(Message("DEL", b"old-%d" % i, keys=f"old{{i}}"), 0).ok
        for i in range(40):
            assert store.put(Message("T0", b"x" * 100), i % 4).ok
        assert store.wait_for_dispatch()
        store.flush()
        assert store.delete_topics(["DEL"]) == ["DEL"]
        for i in range(3):
            r = store.put(Message("DEL", b"new-%d" % i, keys=f"new{{i}}"), 0)
            print("ack", r.status.name, r.commit_log_offset, r.queue_offset, flush=True)
        assert store.wait_for_dispatch()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    acks = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("ack ")]
    assert [(status, int(queue_offset)) for status, _, queue_offset in acks] == [("PUT_OK", i) for i in range(3)]
    with MessageStore.open(root, config) as store:
        assert store.recovery.abnormal
        assert store.get_min_offset_in_queue("DEL", 0) == 0 and store.get_max_offset_in_queue("DEL", 0) == 3
        got = store.get_message("g", "DEL", 0, 0, 32)
        assert got.status == GetMessageStatus.FOUND
        assert [(m.commit_log_offset, m.queue_offset, m.body) for m in got.messages] == [
            (int(offset), i, b"new-%d" % i) for i, (_, offset, _) in enumerate(acks)
        ]
        assert store.queue_ids() == {"DEL": [0], "T0": [0, 1, 2, 3]}
    report = verify_store(root, config)
    assert report.ok, report.problems


def test_a_deleted_topics_end_past_the_recovered_log_is_lowered_to_it(tmp_path: Path) -> None:
    """ASYNC_FLUSH power loss: the log's tail before the end deletedTopics.json recorded for DEL
    (X) is lost (simulated: zeroed, abort left), so recovery ends the log at Y < X. DEL's new
    messages go at Y and after: acknowledged, they must be in DEL/0 at 0..2, not skipped as
    records of the deleted topic below X (and verify must not count them as such). The open
    lowers X to Y, on disk too."""
    root = tmp_path / "s"
    config = StoreConfig({**GEOMETRY, "mappedFileSizeCommitLog": 1 << 20, "mappedFileSizeConsumeQueue": 6000})
    with MessageStore.open(root, config) as store:
        for _ in range(10):
            assert store.put(Message("T0", b"x" * 100), 0).ok
        store.flush()
        durable = store.max_phy_offset  # what reached the disk before the deletion
        for i in range(10):
            assert store.put(Message("DEL", b"old-%d" % i), 0).ok
        assert store.wait_for_dispatch()
        assert store.delete_topics(["DEL"]) == ["DEL"]
        end = store.max_phy_offset
    deleted = root / "config" / "deletedTopics.json"
    assert durable < end and f'"DEL":{end}' in deleted.read_text()
    (segment,) = sorted((root / "commitlog").iterdir())
    with open(segment, "r+b") as f:  # the power loss: the tail after `durable` never reached the disk
        f.seek(durable)
        f.write(b"\0" * (end - durable))
    (root / "abort").touch()
    with MessageStore.open(root, config) as store:
        assert store.recovery.abnormal and store.max_phy_offset == durable
        assert f'"DEL":{durable}' in deleted.read_text()
        acks = [store.put(Message("DEL", b"new-%d" % i), 0) for i in range(3)]
        assert [(a.status.name, a.queue_offset) for a in acks] == [("PUT_OK", i) for i in range(3)]
        assert acks[0].commit_log_offset == durable
        assert store.wait_for_dispatch()
        assert store.get_max_offset_in_queue("DEL", 0) == 3
        got = store.get_message("g", "DEL", 0, 0, 32)
        assert [(m.commit_log_offset, m.queue_offset, m.body) for m in got.messages] == [
            (a.commit_log_offset, i, b"new-%d" % i) for i, a in enumerate(acks)
        ]
    with MessageStore.open(root, config) as store:
        assert store.get_max_offset_in_queue("DEL", 0) == 3
    report = verify_store(root, config)
    assert report.ok, report.problems
    assert not [note for note in report.notes if "deleted" in note], report.notes


def test_message_index_safe_counts_only_with_the_index_enabled(make_store, tmp_path, store_config) -> None:
    """RocketMQ's isMappedFileMatchedRecover takes the index's timestamp into the checkpoint's safe
    time only when messageIndexEnable && messageIndexSafe: with the index off, a store never
    indexes (indexMsgTimestamp 0), and counting it would check (and cut) the log from segment 0."""
    config = store_config.copy(messageIndexEnable=False, messageIndexSafe=True)
    store = make_store(config=config)
    sent = [store.put(Message("T", b"m%d" % i)) for i in range(120)]
    assert store.wait_for_dispatch()
    newest = store.look_message_by_offset(sent[-1].commit_log_offset).store_timestamp
    store.shutdown()
    root = tmp_path / "store"
    segments = sorted(p.name for p in (root / "commitlog").iterdir())
    checkpoint = StoreCheckpoint(str(root / "checkpoint"))
    checkpoint.physic_msg_timestamp = checkpoint.logics_msg_timestamp = newest + 3000
    checkpoint.index_msg_timestamp = 0
    checkpoint.flush()
    (root / "abort").write_bytes(b"")
    store = make_store(config=config)
    assert store.recovery.abnormal and store.recovery.checked_from == segments[-1]
