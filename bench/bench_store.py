"""Store throughput: single put, batched put, pulls, and rebuild after a crash.

The workload is the issue's: ASYNC_FLUSH, 1 KiB bodies, one tag, one key and a UNIQ_KEY per
message, 8 queues; puts are timed until dispatch has caught up (consume queues and index
written). ``batch`` builds each batch's Messages inside the timed loop, as a producer does;
``prebuilt`` builds them all first and times the put_batch calls alone. ``producer`` times the
same batches with the dispatch (reput) service stopped: the producer thread alone, a ceiling
for the batch figure in this interpreter. ``get`` times the pulls; the open before them (a
normal recovery) is printed apart as ``open``. Each figure is the median of ``--runs`` runs;
the disk's ``dd`` rate is measured in the same run, beside them, because machines here are
noisy.

    .venv/bin/python bench/bench_store.py --dir /path/on/the/disk --runs 3 --messages 300000

``--messages`` must be a positive multiple of 32: the batch figures and the store the pulls and
the rebuild read are written in batches of 32.

``--threads`` adds, for every put figure (put, batch, prebuilt, producer), each thread's CPU time
per message (from /proc): the producer, the dispatch (reput) thread, the segment allocator's page
faulting, the flushes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

from common import positive_int  # bench/common.py, beside this script

from rocketstore import Message, MessageStore, StoreConfig

TOPIC = "BenchTopic"
QUEUES = 8
BATCH = 32  # messages per put_batch; --messages must be a multiple of it


def config() -> StoreConfig:
    return StoreConfig(brokerIP1="127.0.0.1", flushDiskType="ASYNC_FLUSH")


def dd_rate(folder: str) -> float:
    """MB/s of ``dd if=/dev/zero of=F bs=1M count=1024 conv=fdatasync`` in ``folder``."""
    target = os.path.join(folder, "dd.bin")
    started = time.perf_counter()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", "bs=1M", "count=1024", "conv=fdatasync"],
        check=True,
        capture_output=True,
    )
    elapsed = time.perf_counter() - started
    os.unlink(target)
    return 1024 * 1024 * 1024 / elapsed / 1e6


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) used so far by each live thread, by name, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for t in threading.enumerate():
        try:
            with open(f"/proc/self/task/{t.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[t.name] = (int(fields[11]) + int(fields[12])) / tick
    return out


def report_threads(label: str, before: dict[str, float], after: dict[str, float], n: int) -> None:
    """Print each thread's CPU per message between two ``thread_cpu`` readings."""
    used = {k: after[k] - before.get(k, 0.0) for k in after}
    shown = ", ".join(f"{k.removeprefix('rocketstore-')} {v / n * 1e6:.2f}" for k, v in used.items() if v > 0)
    print(f"  {label} CPU us/msg by thread: {shown}", flush=True)


def bench_put(folder: str, n: int, threads: bool = False) -> float:
    body = os.urandom(1024)
    path = os.path.join(folder, "put")
    shutil.rmtree(path, ignore_errors=True)
    with MessageStore.open(path, config()) as store:
        put = store.put
        cpu = thread_cpu()
        started = time.perf_counter()
        for i in range(n):
            put(Message(TOPIC, body, tags="TagA", keys=f"key-{i}"), i & 7)
        store.wait_for_dispatch(600)
        elapsed = time.perf_counter() - started
        if threads:
            report_threads("put", cpu, thread_cpu(), n)
    shutil.rmtree(path, ignore_errors=True)
    return n / elapsed


def bench_batch(
    folder: str, n: int, size: int = BATCH, threads: bool = False, dispatch: bool = True, prebuilt: bool = False
) -> float:
    """Batched puts timed until dispatch has caught up; with ``dispatch=False`` the reput service
    is stopped first and only the puts are timed: what the producer thread can do on its own,
    the ceiling for put_batch in this interpreter however cheap dispatch became.

    The batches' Messages are built inside the timed loop, as a producer builds them; with
    ``prebuilt`` they are built before the clock starts, so only the put_batch calls (and
    dispatch) are timed."""
    body = os.urandom(1024)
    path = os.path.join(folder, "batch")
    shutil.rmtree(path, ignore_errors=True)

    def batches() -> Iterator[list[Message]]:
        for i in range(0, n, size):
            yield [Message(TOPIC, body, tags="TagA", keys=f"key-{j}") for j in range(i, i + size)]

    with MessageStore.open(path, config()) as store:
        if not dispatch:
            store.reput.stop()
        put_batch = store.put_batch
        ready = list(batches()) if prebuilt else None
        cpu = thread_cpu()
        started = time.perf_counter()
        for k, batch in enumerate(ready or batches()):
            put_batch(batch, k & 7)
        if dispatch:
            store.wait_for_dispatch(600)
        elapsed = time.perf_counter() - started
        if threads:
            report_threads("prebuilt" if prebuilt else "batch" if dispatch else "producer", cpu, thread_cpu(), n)
    shutil.rmtree(path, ignore_errors=True)
    return n / elapsed


def write_store(path: str, n: int) -> None:
    body = os.urandom(1024)
    shutil.rmtree(path, ignore_errors=True)
    with MessageStore.open(path, config()) as store:
        for i in range(0, n, BATCH):
            store.put_batch(
                [Message(TOPIC, body, tags="TagA", keys=f"key-{j}") for j in range(i, i + BATCH)], (i // BATCH) & 7
            )
        store.wait_for_dispatch(600)


def bench_get(path: str, n: int) -> tuple[float, float]:
    """Pulls of 32, decoded (every message's fields read), over every queue.

    Returns (msg/s of the pulls, seconds the open before them took). The open, a normal
    recovery that walks the commit log's last segments checking CRCs, is timed apart: it is
    not ``get_message``."""
    opening = time.perf_counter()
    with MessageStore.open(path, config()) as store:
        started = time.perf_counter()
        got = 0
        for queue_id in range(QUEUES):
            offset = 0
            while True:
                result = store.get_message("bench", TOPIC, queue_id, offset, 32)
                if not result.messages:
                    break
                for m in result.messages:
                    m.queue_offset, m.store_timestamp, m.tags  # noqa: B018 - touch decoded fields
                got += len(result.messages)
                offset = result.next_begin_offset
        elapsed = time.perf_counter() - started
    assert got == n, (got, n)
    return n / elapsed, started - opening


def bench_rebuild(path: str) -> tuple[float, float]:
    """Crash a writer (SIGKILL), delete consumequeue/ and index/, time the reopen.

    Returns (MB of commit log per second, seconds)."""
    work = path + "-crash"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(path, work)
    # leave the store as a crash does: abort present; then drop the derived structures
    code = (
        "import os, signal\n"
        "from rocketstore import MessageStore, StoreConfig\n"
        f"s = MessageStore.open({work!r}, StoreConfig(brokerIP1='127.0.0.1'))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=False)
    assert os.path.exists(os.path.join(work, "abort"))
    shutil.rmtree(os.path.join(work, "consumequeue"))
    shutil.rmtree(os.path.join(work, "index"))
    subprocess.run(["sync"], check=True)
    started = time.perf_counter()
    store = MessageStore.open(work, config())
    elapsed = time.perf_counter() - started
    size = store.max_phy_offset - max(store.min_phy_offset, 0)
    store.shutdown()
    shutil.rmtree(work, ignore_errors=True)
    return size / elapsed / 1e6, elapsed


def shown(key: str, value: float) -> str:
    """A figure as printed: seconds with two decimals, rates as whole numbers."""
    return f"{value:.2f}" if key == "open" else f"{value:,.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=None, help="folder on the disk to measure (default: a temp folder)")
    parser.add_argument("--runs", type=positive_int, default=3)
    parser.add_argument("--messages", type=int, default=300000, help="a positive multiple of 32 (default: 300000)")
    parser.add_argument("--only", choices=["put", "batch", "prebuilt", "producer", "get", "rebuild"], action="append")
    parser.add_argument(
        "--threads", action="store_true", help="also print each thread's CPU per message for the put figures"
    )
    args = parser.parse_args()
    if args.messages <= 0 or args.messages % BATCH:
        parser.error(f"--messages must be a positive multiple of {BATCH} (batches of {BATCH}), not {args.messages}")
    folder = args.dir or tempfile.mkdtemp(prefix="rocketstore-bench-")
    os.makedirs(folder, exist_ok=True)
    which = args.only or ["put", "batch", "prebuilt", "producer", "get", "rebuild"]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    results: dict[str, list[float]] = {k: [] for k in ["dd", *which]}
    if "get" in which:
        results["open"] = []
    data = os.path.join(folder, "data")
    if "get" in which or "rebuild" in which:
        write_store(data, args.messages)
    for run in range(args.runs):
        results["dd"].append(dd_rate(folder))
        if "put" in which:
            results["put"].append(bench_put(folder, args.messages, args.threads))
        if "batch" in which:
            results["batch"].append(bench_batch(folder, args.messages, threads=args.threads))
        if "prebuilt" in which:
            results["prebuilt"].append(bench_batch(folder, args.messages, threads=args.threads, prebuilt=True))
        if "producer" in which:
            results["producer"].append(bench_batch(folder, args.messages, threads=args.threads, dispatch=False))
        if "get" in which:
            rate, opened = bench_get(data, args.messages)
            results["get"].append(rate)
            results["open"].append(opened)
        if "rebuild" in which:
            results["rebuild"].append(bench_rebuild(data)[0])
        print(f"run {run + 1}: " + ", ".join(f"{k} {shown(k, v[-1])}" for k, v in results.items()), flush=True)
    shutil.rmtree(data, ignore_errors=True)
    units = {
        "dd": "MB/s",
        "put": "msg/s",
        "batch": "msg/s (batches of 32, Messages built in the timed loop)",
        "prebuilt": "msg/s (batches of 32 built beforehand: the put_batch calls alone)",
        "producer": "msg/s (batches of 32, dispatch stopped: the producer alone)",
        "get": "msg/s (pulls of 32, decoded)",
        "open": "s (opening that store before the pulls: a normal recovery)",
        "rebuild": "MB/s",
    }
    print(f"\nmedians of {args.runs} runs, {args.messages:,} messages of 1 KiB, 8 queues:")
    for key, values in results.items():
        runs = ", ".join(shown(key, v) for v in values)
        print(f"  {key:<8} {shown(key, statistics.median(values)):>12} {units[key]}   (runs: {runs})")
    if not args.dir:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
