"""Durability figures: SYNC_FLUSH group commit by producer threads, the disk's fsync-per-message
rate beside it, and the transient store pool's effect on ASYNC_FLUSH puts.

    python bench/bench_durability.py --dir /path/on/the/disk --runs 3

Messages are 1 KiB with one tag and one key. Each figure is the median of ``--runs`` runs. The
16-thread SYNC_FLUSH figure is taken twice: by default and with ``warmMapedFileEnable`` (zero
pages written out ahead of the writer). The pool is measured on a fresh store (its buffers
faulted in as they are first written) and warm (small segments after a warm-up, so the buffers
are reused, as in a broker that has run a while).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from common import positive_int  # bench/common.py, beside this script

from rocketstore import Message, MessageStore, StoreConfig

BODY = os.urandom(1024)


def fsync_per_message(folder: str, n: int = 2000) -> float:
    """Appends of 1 KiB each followed by one fdatasync: the rate without group commit."""
    path = os.path.join(folder, "fsync.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        started = time.perf_counter()
        for _ in range(n):
            os.write(fd, BODY)
            os.fdatasync(fd)
        return n / (time.perf_counter() - started)
    finally:
        os.close(fd)
        os.unlink(path)


def timed_threads(target: Callable[..., None], args: list[tuple]) -> float:
    """Seconds until one thread per item of ``args`` has run ``target`` with it."""
    workers = [threading.Thread(target=target, args=a) for a in args]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - started


def group_commit_floor(folder: str, threads: int, n: int) -> float:
    """msg/s of the barest group commit this interpreter can run: ``threads`` threads each append
    1 KiB with os.write and park on a lock of their own; one flusher thread fdatasyncs whatever
    was appended and releases the parked threads it covered. No message is built, encoded or
    dispatched: this is the ceiling of any SYNC_FLUSH store written in Python threads here."""
    path = os.path.join(folder, "floor.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    mutex = threading.Lock()
    parked: list[threading.Lock] = []
    appended = threading.Event()
    finished = threading.Event()

    def produce(count: int) -> None:
        mine = threading.Lock()
        for _ in range(count):
            mine.acquire()
            with mutex:
                os.write(fd, BODY)
                parked.append(mine)
            appended.set()
            mine.acquire()  # released by the flusher once its fdatasync covers the append
            mine.release()

    def flush() -> None:
        while True:
            appended.wait()
            appended.clear()
            with mutex:
                group = parked[:]
                parked.clear()
            if not group:
                if finished.is_set():
                    return
                continue
            os.fdatasync(fd)
            for lock in group:
                lock.release()

    flusher = threading.Thread(target=flush)
    flusher.start()
    per = n // threads
    elapsed = timed_threads(produce, [(per,)] * threads)
    finished.set()
    appended.set()
    flusher.join()
    os.close(fd)
    os.unlink(path)
    return per * threads / elapsed


def sync_put(folder: str, threads: int, n: int, warm: bool = False) -> tuple[float, float, float]:
    """(msg/s, p50 ms, p99 ms) of SYNC_FLUSH puts from ``threads`` producer threads.

    The timing starts once the segment allocator is idle (the first segment faulted in ahead of
    the writer and, with ``warm`` = warmMapedFileEnable, written out), as in a broker running a while.
    """
    path = os.path.join(folder, f"sync-{threads}")
    shutil.rmtree(path, ignore_errors=True)
    latencies: list[float] = []
    config = StoreConfig(brokerIP1="127.0.0.1", flushDiskType="SYNC_FLUSH", warmMapedFileEnable=warm)
    with MessageStore.open(path, config) as store:
        if store.allocator is not None:
            store.allocator.wait_idle(120)
        per = max(1, n // threads)

        def work(t: int) -> None:
            mine = []
            for i in range(per):
                message = Message("SyncTopic", BODY, tags="TagA", keys=f"k-{t}-{i}")
                began = time.perf_counter()
                result = store.put(message, t % 8)
                mine.append(time.perf_counter() - began)
                if result.status != "PUT_OK":
                    raise RuntimeError(result)
            latencies.extend(mine)

        elapsed = timed_threads(work, [(t,) for t in range(threads)])
    shutil.rmtree(path, ignore_errors=True)
    latencies.sort()
    return per * threads / elapsed, latencies[len(latencies) // 2] * 1000, latencies[int(len(latencies) * 0.99)] * 1000


WARM_SEGMENT = 16 << 20  # segment size of the warm runs: the pool's 5 buffers are 80 MiB
WARM_UP = 100_000  # puts before a warm run's timing starts (118 MB: every buffer used once)


def async_put(folder: str, pool: bool, n: int, warm: bool = False) -> float:
    """Single-threaded ASYNC_FLUSH puts (dispatch awaited), with or without the transient pool.

    ``warm``: 16 MiB segments and 100,000 puts before the timing starts, so that the pool's
    buffers are being reused (a running broker's state) rather than faulted in for the first time.
    """
    path = os.path.join(folder, f"async-{pool}")
    shutil.rmtree(path, ignore_errors=True)
    config = StoreConfig(brokerIP1="127.0.0.1", transientStorePoolEnable=pool)
    if warm:
        config = config.copy(mappedFileSizeCommitLog=WARM_SEGMENT)
    with MessageStore.open(path, config) as store:
        put = store.put
        for i in range(WARM_UP if warm else 0):
            put(Message("AsyncTopic", BODY, tags="TagA", keys=f"warm-{i}"), i & 7)
        store.wait_for_dispatch(600)
        started = time.perf_counter()
        for i in range(n):
            put(Message("AsyncTopic", BODY, tags="TagA", keys=f"key-{i}"), i & 7)
        store.wait_for_dispatch(600)
        elapsed = time.perf_counter() - started
    shutil.rmtree(path, ignore_errors=True)
    return n / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--runs", type=positive_int, default=3)
    parser.add_argument("--sync-messages", type=int, default=20000)
    parser.add_argument("--async-messages", type=int, default=300000)
    args = parser.parse_args()
    folder = args.dir or tempfile.mkdtemp(prefix="rocketstore-durability-")
    os.makedirs(folder, exist_ok=True)
    fsyncs: list[float] = []
    floors: list[float] = []
    sync: dict[int, list[tuple[float, float, float]]] = {t: [] for t in (1, 4, 16, 64)}
    sync_warm: list[tuple[float, float, float]] = []
    pools: dict[tuple[bool, bool], list[float]] = {(w, p): [] for w in (False, True) for p in (False, True)}
    for run in range(args.runs):
        fsyncs.append(fsync_per_message(folder))
        floors.append(group_commit_floor(folder, 16, args.sync_messages))
        for threads in sync:
            n = args.sync_messages // 5 if threads == 1 else args.sync_messages
            sync[threads].append(sync_put(folder, threads, n))
        sync_warm.append(sync_put(folder, 16, args.sync_messages, warm=True))
        for warm, pool in pools:
            pools[(warm, pool)].append(async_put(folder, pool, args.async_messages, warm))
        print(f"run {run + 1} done", flush=True)
    print(f"\nmedians of {args.runs} runs (1 KiB messages):")
    print(f"  fsync per message (write + fdatasync): {statistics.median(fsyncs):,.0f} msg/s")
    floor = statistics.median(floors)
    print(f"  group commit floor, 16 Python threads, no message work: {floor:,.0f} msg/s")
    for label, results in [(f"{t:>2} threads", r) for t, r in sync.items()] + [
        ("16 threads, warmMapedFileEnable", sync_warm)
    ]:
        rate = statistics.median(r[0] for r in results)
        p50 = statistics.median(r[1] for r in results)
        p99 = statistics.median(r[2] for r in results)
        print(f"  SYNC_FLUSH, {label}: {rate:>8,.0f} msg/s   p50 {p50:.2f} ms   p99 {p99:.2f} ms")
    for (warm, pool), results in pools.items():
        label = "with the transient store pool" if pool else "without the pool"
        state = "warm (16 MiB segments, pool buffers reused)" if warm else "fresh store"
        print(f"  ASYNC_FLUSH single-threaded put, {state}, {label}: {statistics.median(results):,.0f} msg/s")
    if not args.dir:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
