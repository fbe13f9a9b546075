"""Dispatch alone: what building the consume queues and the index costs per message.

The put_batch workload of ``bench_store.py`` (1 KiB bodies, one tag, one key and a UNIQ_KEY per
message, batches of 32, 8 queues) is put with the dispatch (reput) service stopped; the requests
the put path handed over are then dispatched in rounds of ``--round`` batches (about what a reput
round gathers in its 10 ms pause under a stream of puts), into the store's own consume queues and
index, and timed. ``--no-index`` times the consume queues alone (messageIndexEnable=false). Each
figure is the median of ``--runs`` runs, each on a fresh store.

    .venv/bin/python bench/bench_dispatch.py --dir /path/on/the/disk --runs 3 --messages 96000

Wall time on a shared machine moves with its load; ``--dispatch-only`` runs one dispatch and
prints nothing but the figure, for counting instructions, which do not move, by the difference
between two runs under ``valgrind --tool=callgrind`` (one with ``--messages 0`` dispatching
nothing):

    PYTHONHASHSEED=0 valgrind --tool=callgrind .venv/bin/python bench/bench_dispatch.py --dispatch-only ...
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time

from common import bench_parser, positive_int, work_folder  # bench/common.py, beside this script

from rocketstore import Message, MessageStore, StoreConfig

TOPIC = "BenchTopic"
QUEUES = 8
BATCH = 32


def dispatch_rate(folder: str, n: int, round_batches: int, index: bool) -> float:
    """Messages per second dispatched: ``n`` messages put with dispatch stopped, then dispatched."""
    path = os.path.join(folder, "dispatch")
    shutil.rmtree(path, ignore_errors=True)
    body = os.urandom(1024)
    config = StoreConfig(brokerIP1="127.0.0.1", flushDiskType="ASYNC_FLUSH", messageIndexEnable=index)
    with MessageStore.open(path, config) as store:
        store.reput.stop()
        for k, i in enumerate(range(0, n, BATCH)):
            batch = [Message(TOPIC, body, tags="TagA", keys=f"key-{j}") for j in range(i, i + BATCH)]
            store.put_batch(batch, k % QUEUES).raise_for_status()
        requests = store.commit_log.take_handoff()
        dispatch = store.reput.dispatcher.dispatch
        started = time.perf_counter()
        for i in range(0, len(requests), round_batches):
            dispatch(requests[i : i + round_batches])
        elapsed = time.perf_counter() - started
    shutil.rmtree(path, ignore_errors=True)
    return n / elapsed if elapsed > 0 else 0.0


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--messages", type=int, default=96_000, help="a multiple of 32 (0: dispatch nothing)")
    parser.add_argument("--round", type=positive_int, default=100, help="batches dispatched together")
    parser.add_argument("--no-index", action="store_true", help="consume queues alone (messageIndexEnable=false)")
    parser.add_argument("--dispatch-only", action="store_true", help="one run, the figure alone (for callgrind)")
    args = parser.parse_args()
    if args.messages < 0 or args.messages % BATCH:
        parser.error("--messages must be a multiple of 32")
    with work_folder(args.dir) as folder:
        runs = 1 if args.dispatch_only else args.runs
        rates = [dispatch_rate(folder, args.messages, args.round, not args.no_index) for _ in range(runs)]
    rate = statistics.median(rates)
    if args.dispatch_only:
        print(f"{rate:.0f}")
        return 0
    what = "consume queues" + ("" if args.no_index else " and index")
    shown = ", ".join(f"{r:,.0f}" for r in rates)
    per = 1e6 / rate if rate else float("nan")
    print(f"dispatch ({what}), rounds of {args.round} batches of {BATCH}: {rate:,.0f} msg/s, {per:.2f} us/msg")
    print(f"  runs: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
