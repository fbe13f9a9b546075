"""Commit-log folders (storePathCommitLog, readOnlyCommitLogStorePaths): how they are spelt, named
twice, shared with the read-only set, and what a pre-created next segment leaves behind."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import put_ok
from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig

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
    # no folder left to write to: storePathCommitLog's are written (RocketMQ's single-folder queue)
    c = str(tmp_path / "c")
    with MessageStore.open(tmp_path / "one", store_config, storePathCommitLog=c, readOnlyCommitLogStorePaths=c) as s:
        fill(s, 2)
    assert len(os.listdir(c)) == 2
