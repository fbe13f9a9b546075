"""verify on a store another process holds and writes, and on files removed while it reads them."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli.check import _log_bytes
from rocketstore.cli.common import Common
from rocketstore.codec.record import MESSAGE_MAGIC_CODE
from rocketstore.files.mapped_file import MappedFile
from rocketstore.verify import segment_scan, verify_store
from test_cli import SRC
from test_verify import TINY, tiny

# a writer that flushes nothing on its own: it puts 5 records, then 3 more at each line it reads
WRITER = """
import json, sys
from rocketstore import Message, MessageStore, StoreConfig
store = MessageStore.open(sys.argv[1], StoreConfig(**json.loads(sys.argv[2])))
def put(n):
    for _ in range(n):
        assert store.put(Message("T", b"live" * 10, keys="k")).ok
put(5)
print("open", store.commit_log.queue.flushed_where, flush=True)
for line in sys.stdin:
    put(3)
    print("ok", flush=True)
store.shutdown()
"""


def test_verify_of_a_store_being_written_reports_its_moving_tail_as_notes(tmp_path: Path) -> None:
    """The writer appends while verify scans (deterministically: at the scan's progress calls,
    right where it met the end of the data): the zeros it met there and the records written since
    are the live tail, not damage. The report is clean (notes only), says where the records ended
    when verify started, and names no recover step."""
    root = tmp_path / "s"
    config = {**TINY, "flushIntervalCommitLog": 3_600_000}
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), json.dumps(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline() == "open 0\n"  # records written, none flushed
        writes = []

        def write_more(n: int) -> None:
            """At the scan's first two stops (the end of the data as it read it), the writer adds records."""
            if n and len(writes) < 2:
                child.stdin.write("w\n")
                child.stdin.flush()
                writes.append(child.stdout.readline())

        report = verify_store(root, StoreConfig(**config), progress=write_more)
    finally:
        child.stdin.close()
        assert child.wait(timeout=60) == 0
    assert writes == ["ok\n", "ok\n"]
    assert report.lock_held_by == child.pid
    assert report.ok, report.problems
    assert report.problem_count == 0 and not report.next_steps
    assert any("the records ended at offset" in n for n in report.notes), report.notes
    assert not any("zeros where a record should start" in text for text in report.problems + report.notes)
    assert report.records == 5


def _damaged_store(root: Path) -> Path:
    """A store closed cleanly whose first segment has zeros where its 3rd record starts (data
    follows: recovery cuts the log there), and an all-zero pre-allocated segment after the last."""
    with MessageStore.open(root, tiny()) as store:
        for i in range(40):
            store.put(Message("T", b"x" * 60, keys=f"k{i}")).raise_for_status()
        assert store.wait_for_dispatch()
        third = store.commit_log.queue.files[0]
        size = int.from_bytes(third.read(0, 4), "big")
        at = size + int.from_bytes(third.read(size, 4), "big")
        last = store.commit_log.queue.files[-1].end_offset
    segments = sorted((root / "commitlog").iterdir())
    with open(segments[0], "r+b") as f:
        f.seek(at)
        f.write(bytes(8))
    (root / "commitlog" / f"{last:020d}").write_bytes(bytes(4096))
    return root


def test_a_segment_removed_while_verify_reads_the_log_is_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trailing pre-allocated segment is deleted after verify loaded and scanned it, before
    it counts the bytes after the cut (as a writer deletes it when it shuts down): a note naming
    it, the rest of the report as for the store without it, no FileNotFoundError."""
    root = _damaged_store(tmp_path / "s")
    trailing = sorted((root / "commitlog").iterdir())[-1]
    scan = segment_scan.scan_segment

    def scan_then_remove(mapped: MappedFile, *args: Any, **kwargs: Any) -> segment_scan.SegmentScan:
        result = scan(mapped, *args, **kwargs)
        if mapped.path == str(trailing):
            trailing.unlink()
        return result

    monkeypatch.setattr(segment_scan, "scan_segment", scan_then_remove)
    report = verify_store(root, tiny())
    monkeypatch.undo()
    assert not trailing.exists()
    assert f"commitlog/{trailing.name}: removed while verifying (left out)" in report.notes
    without = verify_store(root, tiny())
    assert report.problems == without.problems and report.problem_count == without.problem_count > 0
    assert any("zeros in 00000000000000000000" in p for p in report.problems), report.problems
    assert report.commit_log_files == without.commit_log_files


@pytest.mark.parametrize("segment", [4096, 8 << 20])
def test_the_verify_progress_bar_is_sized_by_the_data_not_the_pre_allocated_segment(
    tmp_path: Path, segment: int
) -> None:
    """The bar's total is what the scan reads: the segments up to the last that holds data, and
    that one's data; not the zeros of a big pre-allocated segment or an empty one after it."""
    root = tmp_path / "s"
    config = tiny(mappedFileSizeCommitLog=segment)
    with MessageStore.open(root, config) as store:
        for i in range(60):
            store.put(Message("T", b"y" * 100, keys=f"k{i}")).raise_for_status()
        data = store.max_phy_offset - store.min_phy_offset
        after = store.commit_log.queue.files[-1].end_offset
    (root / "commitlog" / f"{after:020d}").write_bytes(bytes(segment))  # pre-allocated, empty
    total = _log_bytes(Common(str(root), config, as_json=False))
    assert data - 8 <= total <= data + 64, (total, data)


HOLD_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize(
    ("header", "said"),
    [
        (b"\xde\xad\xbe\xef" * 2, "bad magic code 0xDEADBEEF"),
        (struct.pack(">ii", 0x7FFFFFFF, MESSAGE_MAGIC_CODE), "TOTALSIZE"),
        (struct.pack(">ii", -5, MESSAGE_MAGIC_CODE), "TOTALSIZE"),
    ],
    ids=["bad-magic", "size-past-the-file", "negative-size"],
)
def test_damage_in_the_last_segment_of_a_store_in_use_is_still_a_problem(
    tmp_path: Path, header: bytes, said: str
) -> None:
    """A record whose header no writer leaves (a bad magic code; a size that does not fit; valid
    records follow it) is damage, not the writer's tail: the store in use gets the problem and the
    recover step, after stopping the holder, not notes that hide it."""
    root = tmp_path / "s"
    with MessageStore.open(root, tiny()) as store:
        offsets = [store.put(Message("T", b"x" * 40, keys="k")).commit_log_offset for _ in range(10)]
    segment = root / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as f:
        f.seek(offsets[5])
        f.write(header)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(root / "lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        report = verify_store(root, tiny())
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)
    assert report.lock_held_by == holder.pid
    assert any(f"@{offsets[5]} (offset {offsets[5]}): " in p and said in p for p in report.problems), report.problems
    assert any("rocketstore recover" in step for step in report.next_steps)
