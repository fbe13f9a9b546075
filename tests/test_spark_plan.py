"""Planning a batch read on the driver, without a Spark session: the partitions a consume-queue
read is cut into."""

from __future__ import annotations

import itertools
import math
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
