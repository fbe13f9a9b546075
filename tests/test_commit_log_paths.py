"""Commit-log folders (storePathCommitLog, readOnlyCommitLogStorePaths): how they are spelt, named
twice, shared with the read-only set, and what a pre-created next segment leaves behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TINY_GEOMETRY, put_ok
from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.errors import ConfigError, CorruptStoreError

SRC = Path(__file__).resolve().parents[1] / "src"
CL_SIZE = 4096
BODY = b"x" * 300  # about 10 records a segment


def placed(folders: list[str]) -> dict[str, list[str]]:
    """The segment names in each folder."""
    return {f: sorted(os.listdir(f)) if os.path.isdir(f) else [] for f in folders}


def fill(store: MessageStore, segments: int) -> None:
    """Put until the log has rolled into ``segments`` segments, waiting for the allocator after each
    roll, so that the next segment is always pre-created before the writer needs it."""
    while len(store.commit_log.queue.files) < segments:
        put_ok(store, Message("T", BODY))
        assert store.allocator is not None and store.allocator.wait_idle(30)


def test_folders_are_normalised_and_named_once():
    config = StoreConfig(
        storePathCommitLog="/d/a/, /d//b ,/d/./c/,/d/a,/d/b/.",
        readOnlyCommitLogStorePaths="/r/x/,/r/x",
    )
    assert config.commit_log_paths == ["/d/a", "/d/b", "/d/c"]
    assert config.commit_log_read_only_paths == ["/r/x"]
    assert StoreConfig(storePathCommitLog=" , ", storePathRootDir="/s").commit_log_paths == ["/s/commitlog"]


def test_a_trailing_slash_takes_the_pre_created_segment(tmp_path: Path, store_config: StoreConfig) -> None:
    """``storePathCommitLog=<folder>/``: the segment the allocator made ahead is the one the roll
    takes (its path was ``<folder>//<name>``: the roll found the file there and every put that
    needed a new segment failed with CREATE_MAPPED_FILE_FAILED)."""
    folder = tmp_path / "commitlog"
    with MessageStore.open(tmp_path / "s", store_config, storePathCommitLog=f"{folder}/") as store:
        fill(store, 4)
        assert [f.path for f in store.commit_log.queue.files] == [
            os.path.join(folder, f"{i * CL_SIZE:020d}") for i in range(4)
        ]
    spread = f"{tmp_path / 'a'}/,{tmp_path / 'b'}//"  # RocketMQ's MultiPathMappedFileQueueTest spells them so
    with MessageStore.open(tmp_path / "m", store_config, storePathCommitLog=spread) as store:
        fill(store, 4)
    assert placed([str(tmp_path / "a"), str(tmp_path / "b")]) == {
        str(tmp_path / "a"): [f"{0:020d}", f"{2 * CL_SIZE:020d}"],
        str(tmp_path / "b"): [f"{CL_SIZE:020d}", f"{3 * CL_SIZE:020d}"],
    }


def test_a_folder_named_twice_is_one_folder(tmp_path: Path, store_config: StoreConfig) -> None:
    """``a,a,b``: segments alternate over a and b (not two in a for one in b), and the store opens
    again (it listed a twice and refused its own segments as duplicates)."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    config = store_config.copy(storePathCommitLog=f"{a},{a},{b}")
    with MessageStore.open(tmp_path / "s", config) as store:
        fill(store, 4)
        wrote = store.max_phy_offset
    assert {f: names[:2] for f, names in placed([a, b]).items()} == {
        a: [f"{0:020d}", f"{2 * CL_SIZE:020d}"],
        b: [f"{CL_SIZE:020d}", f"{3 * CL_SIZE:020d}"],
    }
    with MessageStore.open(tmp_path / "s", config) as store:
        assert store.max_phy_offset == wrote
        assert store.put(Message("T", BODY)).status == PutMessageStatus.PUT_OK


def test_a_folder_also_read_only_gets_no_new_segment(tmp_path: Path, store_config: StoreConfig) -> None:
    """A folder in both storePathCommitLog and readOnlyCommitLogStorePaths is read-only, as in
    RocketMQ's MultiPathMappedFileQueue (tryCreateMappedFile removes the read-only set): an operator
    draining a disk adds it to the read-only set and it fills no more. Its segments stay readable."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    root = tmp_path / "s"
    with MessageStore.open(root, store_config, storePathCommitLog=f"{a},{b}") as store:
        fill(store, 2)
    in_b = sorted(os.listdir(b))
    assert in_b == [f"{CL_SIZE:020d}"]
    draining = store_config.copy(storePathCommitLog=f"{a},{b}", readOnlyCommitLogStorePaths=f"{b}/")
    with MessageStore.open(root, draining) as store:
        fill(store, 6)
        assert store.look_message_by_offset(CL_SIZE).body == BODY  # the first record in b
    assert sorted(os.listdir(b)) == in_b
    assert len(os.listdir(a)) == 5
    # no folder left to write to: storePathCommitLog's are written
    c = str(tmp_path / "c")
    both = {"storePathCommitLog": f"{c},", "readOnlyCommitLogStorePaths": c}
    with MessageStore.open(tmp_path / "one", store_config, **both) as s:
        fill(s, 2)
    assert len(os.listdir(c)) == 2


CHILD = """
import os, signal, sys
from rocketstore import Message, MessageStore, StoreConfig
a, b = sys.argv[2], sys.argv[3]
store = MessageStore.open(sys.argv[1], StoreConfig(mappedFileSizeCommitLog=4096, storePathCommitLog=f"{a},{b}"))
def put(n):
    for _ in range(n):
        result = store.put(Message("T", b"x" * 300))
        assert result.ok, result
        print("ack", result.commit_log_offset, flush=True)
put(1)
assert store.allocator.wait_idle(30) and os.listdir(b)  # segment 1 made ahead in b
store.config.storePathCommitLog = a  # b taken out while running: segment 1 goes to a
put(30)
assert store.allocator.wait_idle(30)
print("segments", *sorted(os.listdir(a)), "|", *sorted(os.listdir(b)), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_read_only_folders_beside_a_single_commit_log_folder_are_ignored(
    tmp_path: Path, store_config: StoreConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """RocketMQ's CommitLog makes a MultiPathMappedFileQueue only when storePathCommitLog holds a
    comma; its single-folder queue never reads readOnlyCommitLogStorePaths. The store neither
    reads, writes nor cleans such a folder (a segment there was loaded, and a roll or cleanup
    could delete it), and says at the open that the setting is ignored."""
    ro = tmp_path / "ro"
    ro.mkdir()
    stray = ro / f"{CL_SIZE * 7:020d}"
    stray.write_bytes(b"\1" * CL_SIZE)  # read, it would be a segment after a gap: the open would fail
    single = store_config.copy(readOnlyCommitLogStorePaths=str(ro))
    assert single.read_only_paths_ignored and single.commit_log_read_only_paths == []
    with caplog.at_level("WARNING", logger="rocketstore"), MessageStore.open(tmp_path / "s", single) as store:
        fill(store, 3)
        store.flush()  # no write left to touch the segments' times
        old = time.time() - 10**7
        for segment in (tmp_path / "s" / "commitlog").iterdir():
            os.utime(segment, (old, old))
        assert store.clean_expired_files().commit_log_files  # cleanup deletes the store's own segments
    assert "readOnlyCommitLogStorePaths" in caplog.text and "ignored" in caplog.text
    assert os.listdir(ro) == [stray.name] and stray.read_bytes() == b"\1" * CL_SIZE
    out = subprocess.run(
        [sys.executable, "-m", "rocketstore.cli.main", "inspect", str(tmp_path / "s"), "--json"]
        + [arg for key, value in TINY_GEOMETRY.items() for arg in ("--set", f"{key}={value}")]
        + ["--set", f"readOnlyCommitLogStorePaths={ro}"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert out.returncode == 0, out.stderr
    assert "ignored" in out.stderr and str(ro) not in out.stdout


def test_a_segment_made_ahead_in_a_folder_the_roll_did_not_take_is_deleted(tmp_path: Path) -> None:
    """Segment 1 is made ahead in b, then the roll puts it in a (b was taken out of
    storePathCommitLog; a full disk does the same): b's copy is deleted at the roll, so a SIGKILL
    leaves one copy of every segment, and the store opens with every acknowledged message."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    root = tmp_path / "s"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-c", CHILD, str(root), a, b]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    acks = [int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("ack ")]
    assert len(acks) == 31
    assert os.listdir(b) == []
    config = StoreConfig(mappedFileSizeCommitLog=4096, storePathCommitLog=f"{a},{b}")
    with MessageStore.open(root, config) as store:
        assert store.recovery.abnormal
        assert [store.look_message_by_offset(offset).commit_log_offset for offset in acks] == acks


def test_load_drops_a_never_written_copy_of_a_segment(tmp_path: Path, store_config: StoreConfig) -> None:
    """A crash between the allocator naming a segment made ahead and the roll deleting it leaves
    two copies: a full-size one holding only zeros is dropped (deleted by a writable open; RocketMQ
    maps both). Any other second copy is refused, the message saying which to delete."""
    a, b = tmp_path / "a", tmp_path / "b"
    root = tmp_path / "s"
    config = store_config.copy(storePathCommitLog=f"{a},{b}")
    with MessageStore.open(root, store_config, storePathCommitLog=str(a)) as store:
        fill(store, 3)
        wrote = store.max_phy_offset
    b.mkdir()
    spare = b / f"{CL_SIZE:020d}"
    spare.write_bytes(bytes(CL_SIZE))
    with MessageStore.open(root, config, read_only=True) as store:
        assert store.max_phy_offset == wrote
    assert spare.exists()  # a read-only open changes nothing
    with MessageStore.open(root, config) as store:
        assert store.max_phy_offset == wrote
        assert store.commit_log.queue.files[1].path == str(a / spare.name)
    assert not spare.exists()
    spare.write_bytes(bytes(100))  # not the size of a segment: named, not deleted
    with pytest.raises(CorruptStoreError, match=f"{a / spare.name}; {spare} holds nothing: delete it"):
        MessageStore.open(root, config)
    spare.write_bytes((a / spare.name).read_bytes())
    with pytest.raises(CorruptStoreError, match="both hold data"):
        MessageStore.open(root, config, read_only=True)


def test_a_read_only_open_lists_the_folders_again_when_a_writer_rolled_meanwhile(
    tmp_path: Path, store_config: StoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only open of a live multi-path store lists a, then b. The writer rolling segments in
    between made the union show a gap (a false CorruptStoreError). The open lists again until two
    rounds agree; a real gap is still reported."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    root = tmp_path / "s"
    config = store_config.copy(storePathCommitLog=f"{a},{b}")
    writer = MessageStore.open(root, config)
    try:
        fill(writer, 2)
        listdir, rolled = os.listdir, []

        def listdir_while_writing(path: str) -> list[str]:
            names = listdir(path)
            if path == a and not rolled:  # the writer rolls after a was listed, before b is
                rolled.append(True)
                fill(writer, 6)
            return names

        monkeypatch.setattr(os, "listdir", listdir_while_writing)
        with MessageStore.open(root, config, read_only=True) as reader:
            assert rolled and reader.max_phy_offset == writer.max_phy_offset
        monkeypatch.undo()
    finally:
        writer.shutdown()
    os.unlink(os.path.join(b, f"{3 * CL_SIZE:020d}"))
    with pytest.raises(CorruptStoreError, match=f"a gap: the previous segment {2 * CL_SIZE:020d} ends at"):
        MessageStore.open(root, config, read_only=True)


def test_fast_fail_if_no_buffer_in_store_pool(tmp_path: Path, store_config: StoreConfig) -> None:
    """transientStorePoolEnable with one buffer, held by a full segment the stalled commit has not
    moved to the file: fastFailIfNoBufferInStorePool=true makes no segment and the put gets
    CREATE_MAPPED_FILE_FAILED (RocketMQ 4.9.8's AllocateMappedFileService); once a commit gives the
    buffer back, puts go on. With false (the default) the roll commits the full segment first and
    the new one takes its buffer back (RocketMQ would write it straight through)."""
    pooled = store_config.copy(transientStorePoolEnable=True, transientStorePoolSize=1)
    with MessageStore.open(tmp_path / "fail", pooled, fastFailIfNoBufferInStorePool=True) as store:
        store.services.commit.stop()  # the commit stalls (a slow disk): the buffer is not given back
        queue = store.commit_log.queue
        results = [store.put(Message("T", BODY)) for _ in range(25)]  # 2 segments' worth
        assert {r.status for r in results} == {PutMessageStatus.PUT_OK, PutMessageStatus.CREATE_MAPPED_FILE_FAILED}
        refused = results[-1].detail, store.put_batch([Message("T", BODY)] * 2).detail
        assert all(d.startswith("no new commit-log segment: no free buffer in the transient") for d in refused)
        assert "fastFailIfNoBufferInStorePool" in store.commit_log.roll_error
        assert len(queue.files) == 1 and store.pool.available() == 0
        store.flush()  # commits everything: the full segment's buffer comes back
        put_ok(store, Message("T", BODY))
        assert len(queue.files) == 2 and queue.files[1].write_buffer is not None
    with MessageStore.open(tmp_path / "through", pooled) as store:
        store.services.commit.stop()
        fill(store, 2)
        queue = store.commit_log.queue
        assert queue.files[1].write_buffer is not None and queue.committed_where == queue.files[0].end_offset


HOLD = """
import sys
import time
from rocketstore import Message, MessageStore, StoreConfig
store = MessageStore.open(sys.argv[1], StoreConfig(mappedFileSizeCommitLog=4096, flushIntervalCommitLog=3_600_000))
for _ in range(25):
    assert store.put(Message("T", b"x" * 300)).ok
print("open", store.commit_log.queue.flushed_where, flush=True)
sys.stdin.read()
"""


def test_inspect_of_a_store_another_process_writes_does_not_claim_its_positions(tmp_path: Path) -> None:
    """inspect opens read-only and recovers the files in memory: with the store held by a process
    that flushed nothing yet, the table and --json must not present the recovered end as that
    process's committed and flushed positions (--json adds positionsRecoveredFromFiles)."""
    root = tmp_path / "s"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "open 0\n"  # nothing flushed
        inspect = [sys.executable, "-m", "rocketstore.cli.main", "inspect", str(root), "--set"]
        inspect.append("mappedFileSizeCommitLog=4096")
        table = subprocess.run(inspect, env={**env, "COLUMNS": "200"}, capture_output=True, text=True, check=True)
        info = json.loads(subprocess.run([*inspect, "--json"], env=env, capture_output=True, text=True).stdout)
    finally:
        child.kill()
        child.wait()
    assert info["lockHeldBy"] == child.pid and info["commitLog"]["positionsRecoveredFromFiles"] is True
    assert set(info["commitLog"]["positions"]) == {"wrote", "committed", "flushed", "dispatched"}
    assert "wrote / committed / flushed" not in table.stdout
    assert "end of the data in the files (recovered now)" in table.stdout
    assert "committed and flushed positions are not visible" in table.stdout


def test_one_segment_under_two_folders_by_a_hard_link_is_one_copy(tmp_path: Path, store_config: StoreConfig) -> None:
    """A segment hard-linked into a second commit-log folder is one file under two names, not two
    copies that both hold data (which refuse the open): it loads once, and nothing is deleted."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    config = store_config.copy(storePathCommitLog=f"{a},{b}")
    with MessageStore.open(tmp_path / "s", config) as store:
        fill(store, 3)
        sent = store.max_phy_offset
    first = sorted(os.listdir(a))[0]
    os.link(os.path.join(a, first), os.path.join(b, first))
    with MessageStore.open(tmp_path / "s", config) as store:
        assert store.max_phy_offset == sent and len(store.commit_log.queue.files) >= 3
    assert os.path.exists(os.path.join(a, first)) and os.path.exists(os.path.join(b, first))


def test_a_folder_named_twice_through_a_bind_mount_is_one_folder(tmp_path: Path) -> None:
    """Two paths of one folder that no link joins (a bind mount) are one folder, as two spellings are."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "--bind", str(a), str(b)], capture_output=True).returncode:
        pytest.skip("bind mounts need root")
    try:
        assert StoreConfig(storePathCommitLog=f"{a},{b}").commit_log_paths == [str(a)]
    finally:
        subprocess.run(["umount", str(b)], check=True)


def test_verify_names_a_damaged_record_by_its_segments_folder(tmp_path: Path, store_config: StoreConfig) -> None:
    """With several commit-log folders a segment is named where it is (relative to the store when
    inside it, else in full), not as commitlog/<name>, which does not exist."""
    from rocketstore.verify import verify_store

    root, outside = tmp_path / "s", tmp_path / "elsewhere"
    config = store_config.copy(storePathCommitLog=f"{root / 'a'},{outside}")
    with MessageStore.open(root, config) as store:
        fill(store, 4)
    for folder, label in ((root / "a", "a/"), (outside, f"{outside}/")):
        name = sorted(os.listdir(folder))[0]
        with open(folder / name, "r+b") as f:
            f.seek(4)
            magic = f.read(4)
            f.seek(4)
            f.write(b"\xde\xad\xbe\xef")
        problems = verify_store(root, config).problems
        assert any(p.startswith(f"{label}{name}@0 (offset {int(name)})") for p in problems), problems
        with open(folder / name, "r+b") as f:
            f.seek(4)
            f.write(magic)


@pytest.mark.parametrize(
    ("folders", "why"),
    [
        ("{root}/consumequeue/cl", "inside the store's consumequeue folder"),
        ("{root}/index", "inside the store's index folder"),
        ("{root}/config", "inside the store's config folder"),
        ("{root}", "holds the store root"),
        ("{tmp}", "holds the store root"),
        ("{tmp}/a,{tmp}/a/b", "inside the commit-log folder"),
    ],
)
def test_a_commit_log_folder_in_a_place_of_the_store_is_refused_before_anything_is_written(
    tmp_path: Path, store_config: StoreConfig, folders: str, why: str
) -> None:
    """A commit-log folder must hold segments only: one inside the consume queues, the index or
    the config files, one holding the root, or one inside another commit-log folder was taken, and
    the files there made the next open fail (or a consume-queue folder was skipped as stray)."""
    root = tmp_path / "s"
    folders = folders.format(root=root, tmp=tmp_path)
    with pytest.raises(ConfigError, match=why):
        MessageStore.open(root, store_config, storePathCommitLog=folders)
    assert not root.exists() and not (tmp_path / "a").exists()
    with pytest.raises(ConfigError, match=why):  # nor as a read-only folder (read beside several folders)
        MessageStore.open(root, store_config, storePathCommitLog=f"{tmp_path}/w1,", readOnlyCommitLogStorePaths=folders)
