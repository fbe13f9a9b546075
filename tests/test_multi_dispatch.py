"""Stores with multi-dispatch copies (RocketMQ 4.9's light message queues, %LMQ%...): a record
whose INNER_MULTI_DISPATCH names other queues has a unit in each at the offset
INNER_MULTI_QUEUE_OFFSET gives. rocketstore writes no copies, but reads, verifies, exports and
rebuilds such stores without calling the copies damage, exporting them twice or losing them."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from conftest import tree_hashes
from rocketstore import Message, MessageStore
from rocketstore.spark import jobs
from rocketstore.verify import verify_store
from spark_conftest import (
    SMALL_OPTIONS,
    reader,
    small_config,
    spark,  # noqa: F401 - the session fixture
)
from test_cli import run

QUEUES = ("%LMQ%x", "%LMQ%y")
COUNT = 30  # over two consume-queue files of 20 units (mappedFileSizeConsumeQueue=400)


def lmq_store(root: Path, offsets: list[int] | None = None, queue_id: int = 0) -> list[tuple[int, int]]:
    """COUNT messages of T/``queue_id``, each copied into queue ``queue_id`` of QUEUES (as RocketMQ's
    multiDispatchLmqQueue does: 0 with enableLmq, else the record's own), with ``offsets`` as their
    INNER_MULTI_QUEUE_OFFSET (by default 0, 1, ...), then one plain message; the (commit-log
    offset, size) of each copied record."""
    offsets = offsets if offsets is not None else list(range(COUNT))
    placed = []
    with MessageStore.open(root, small_config()) as store:
        for i, offset in enumerate(offsets):
            props = {"INNER_MULTI_DISPATCH": ",".join(QUEUES), "INNER_MULTI_QUEUE_OFFSET": f"{offset},{offset}"}
            result = store.put(Message("T", f"m{i}", tags="A", properties=props), queue_id).raise_for_status()
            placed.append((result.commit_log_offset, result.wrote_bytes))
        store.put(Message("T", "plain")).raise_for_status()
    units = b"".join(struct.pack(">qiq", phy, size, 65) for phy, size in placed)  # tags code of "A"
    file_size = int(SMALL_OPTIONS["mappedFileSizeConsumeQueue"])
    for name in QUEUES:
        folder = root / "consumequeue" / name / str(queue_id)
        folder.mkdir(parents=True)
        for start in range(0, len(units), file_size):
            (folder / f"{start:020d}").write_bytes(units[start : start + file_size].ljust(file_size, b"\0"))
    return placed


def test_verify_takes_the_copies_as_copies_and_a_wrong_one_as_a_problem(tmp_path: Path) -> None:
    root = tmp_path / "s"
    lmq_store(root)
    report = verify_store(str(root), small_config())
    assert report.ok and report.problem_count == 0, report.problems
    assert report.multi_dispatch_units == 2 * COUNT
    assert any(f"{2 * COUNT} units are multi-dispatch copies" in n for n in report.notes), report.notes
    # a record whose INNER_MULTI_QUEUE_OFFSET does not give the unit's offset is no copy of it
    other = tmp_path / "o"
    lmq_store(other, [0, 1, 7, *range(3, COUNT)])
    report = verify_store(str(other), small_config())
    said = [p for p in report.problems if "unit 2 " in p]
    assert len(said) == 2 and all("the record is in T/0" in p for p in said), report.problems
    rebuild_step = [s for s in report.next_steps if s.startswith("consume queues:")]
    assert len(rebuild_step) == 1 and "multi-dispatch copies" in rebuild_step[0], report.next_steps
    # enableMultiDispatch without enableLmq: a copy goes to the record's own queue id, not 0
    own = tmp_path / "own"
    lmq_store(own, queue_id=2)
    report = verify_store(str(own), small_config())
    assert report.ok and report.multi_dispatch_units == 2 * COUNT, report.problems


def test_export_leaves_the_copies_out_unless_their_queue_is_named(tmp_path: Path) -> None:
    root = tmp_path / "s"
    lmq_store(root)
    sets = [f"--set={k}={v}" for k, v in SMALL_OPTIONS.items()]
    rows = [json.loads(line) for line in run("export", root, *sets).stdout.splitlines()]
    assert [(r["topic"], r["queueOffset"]) for r in rows] == [("T", i) for i in range(COUNT + 1)]
    named = [json.loads(line) for line in run("export", root, *sets, "--topic", "%LMQ%x").stdout.splitlines()]
    assert [(r["topic"], r["queueOffset"], r["body"]) for r in named] == [
        (r["topic"], r["queueOffset"], r["body"]) for r in rows[:COUNT]
    ]


@pytest.mark.spark
def test_spark_reads_no_copies_by_default_and_its_rebuild_keeps_them(spark, tmp_path: Path) -> None:  # noqa: F811
    root = tmp_path / "s"
    lmq_store(root)
    assert reader(spark).load(str(root)).count() == COUNT + 1
    assert reader(spark, topics="%LMQ%y").load(str(root)).count() == COUNT
    before = tree_hashes(root / "consumequeue")
    shutil.rmtree(root / "consumequeue" / "T")  # a damaged queue: what a rebuild is for
    jobs.rebuild(spark, str(root), small_config())
    assert tree_hashes(root / "consumequeue") == before
    with MessageStore.open(root, small_config(), read_only=True) as store:
        bodies, offset = [], 0
        while offset < COUNT:  # a pull reads within one consume-queue file
            got = store.get_message("g", "%LMQ%x", 0, offset, max_nums=COUNT)
            bodies += [m.body for m in got.messages]
            offset = got.next_begin_offset
        assert bodies == [f"m{i}".encode() for i in range(COUNT)]
    # a log that ends before the last copied record (zeros where it starts): its copies are not kept
    cut = tmp_path / "cut"
    placed = lmq_store(cut)
    segment_size = int(SMALL_OPTIONS["mappedFileSizeCommitLog"])
    at = placed[-1][0]
    segment = cut / "commitlog" / f"{at - at % segment_size:020d}"
    with open(segment, "r+b") as f:
        f.seek(at % segment_size)
        f.write(bytes(segment_size - at % segment_size))  # that record and the plain one after it
    # and a unit pointing far past the log (damage) ends the units kept, as RocketMQ's cut ends a queue
    first = sorted((cut / "consumequeue" / "%LMQ%x" / "0").iterdir())[0]
    data = bytearray(first.read_bytes())
    data[10 * 20 : 10 * 20 + 12] = struct.pack(">qi", 10**12, 300)
    first.write_bytes(bytes(data))
    jobs.rebuild(spark, str(cut), small_config())
    written = b"".join(p.read_bytes() for p in sorted((cut / "consumequeue" / "%LMQ%x" / "0").iterdir()))
    units = [written[i : i + 20] for i in range(0, len(written), 20)]
    assert sum(unit != bytes(20) for unit in units) == 10  # on disk, not only as an open recovers it


def test_copies_cut_after_a_damaged_unit_are_said_to_be_lost(tmp_path: Path, caplog) -> None:
    """A unit zeroed in a light message queue cuts the copies after it, as any queue's; no rebuild
    makes them again, so the warning says they are lost (not "dispatched again")."""
    root = tmp_path / "s"
    lmq_store(root)
    first = sorted((root / "consumequeue" / "%LMQ%x" / "0").iterdir())[0]
    data = bytearray(first.read_bytes())
    data[5 * 20 : 6 * 20] = bytes(20)
    first.write_bytes(bytes(data))
    with caplog.at_level("WARNING"), MessageStore.open(root, small_config(), read_only=True) as store:
        assert store.get_max_offset_in_queue("%LMQ%x", 0) == 5
    said = [r.getMessage() for r in caplog.records if "%LMQ%x/0" in r.getMessage()]
    assert len(said) == 1 and "nothing makes again: a writable open cuts them for good" in said[0], said
