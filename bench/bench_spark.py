"""Spark throughput: the rocketstore batch read against Spark's own binaryFile read, and the
Spark rebuild job against the single-process rebuild.

The store holds >= 1 GiB of 1 KiB messages (3 topics x 4 queues, a tag, a key and a UNIQ_KEY per
message). Both reads aggregate ``count(*)`` and the summed length of the bytes they deliver
(binaryFile: each segment file's ``content``; rocketstore: each message's ``body``, with every
column of the schema produced), on the same segment files, in the same session, interleaved,
``--runs`` times after one warm-up each; figures are medians. The rebuild deletes
``consumequeue/`` and ``index/`` and rebuilds them: once by opening the store (rocketstore's own
recovery, one process) and with ``rocketstore.spark.jobs.rebuild``, alternately, ``--runs`` times.

    python bench/bench_spark.py --store /tmp/rocketstore-bench/store --size-mib 1100 --runs 3

The store is written once and kept for the next run (about 1.1 GiB at the default size): a
``--store`` that holds one already is read as it is, with its own segment size, and
``--size-mib``/``--segment-mib`` are not used; delete it to write another.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from collections.abc import Callable

from common import positive_int  # bench/common.py, beside this script

from rocketstore import Message, MessageStore, StoreConfig

TOPICS = ("TopicA", "TopicB", "TopicC")


def config(segment_mib: int) -> StoreConfig:
    return StoreConfig(brokerIP1="127.0.0.1", flushDiskType="ASYNC_FLUSH", mappedFileSizeCommitLog=segment_mib << 20)


def make_store(path: str, size_mib: int, segment_mib: int) -> int:
    """Write 1 KiB messages until the commit log holds ``size_mib`` MiB; returns the count."""
    body = os.urandom(1024)
    n = 0
    with MessageStore.open(path, config(segment_mib)) as store:
        put = store.put
        while store.max_phy_offset < size_mib << 20:
            for _ in range(10000):
                put(Message(TOPICS[n % 3], body, tags=("TagA", "TagB")[n & 1], keys=f"key-{n}"), (n // 3) % 4)
                n += 1
        store.wait_for_dispatch(600)
    return n


def segment_size(path: str) -> int | None:
    """The size of the store's commit-log segments (its first file's); None if it has none."""
    folder = os.path.join(path, "commitlog")
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    return os.path.getsize(os.path.join(folder, names[0])) if names else None


def log_bytes(path: str) -> int:
    folder = os.path.join(path, "commitlog")
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="/tmp/rocketstore-bench/store")
    parser.add_argument("--size-mib", type=int, default=1100)
    parser.add_argument("--segment-mib", type=int, default=64)
    parser.add_argument("--runs", type=positive_int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g", help="binaryFile holds whole files in the JVM")
    parser.add_argument("--no-rebuild", action="store_true")
    args = parser.parse_args()

    segment_bytes = segment_size(args.store)
    if segment_bytes is None:
        seconds, count = timed(lambda: make_store(args.store, args.size_mib, args.segment_mib))
        print(f"wrote {count} messages in {seconds:.1f} s")
        segment_bytes = args.segment_mib << 20
    else:
        print(f"reading the store written before at {args.store} (delete it to write another)")
    total = log_bytes(args.store)
    mib = total / (1 << 20)
    options = {"mappedFileSizeCommitLog": str(segment_bytes)}

    from pyspark.sql import functions as F

    from rocketstore.spark.jobs import rebuild
    from rocketstore.spark.session import local_session

    spark = local_session(args.master, "rocketstore-bench", driver_memory=args.driver_memory)
    commitlog = os.path.join(args.store, "commitlog")

    def binary_file() -> tuple:
        df = spark.read.format("binaryFile").load(commitlog)
        return tuple(df.agg(F.count("*"), F.sum(F.length("content"))).collect()[0])

    def rocketstore(mode: str) -> tuple:
        df = spark.read.format("rocketstore").options(**options, mode=mode).load(args.store)
        return tuple(df.agg(F.count("*"), F.sum(F.length("body"))).collect()[0])

    cases = {
        "binaryFile": binary_file,
        "rocketstore consumequeue": lambda: rocketstore("consumequeue"),
        "rocketstore commitlog": lambda: rocketstore("commitlog"),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    results: dict[str, object] = {}
    for name, fn in cases.items():  # warm-up: JVM, Python workers, page cache
        seconds, results[name] = timed(fn)
        print(f"warm-up {name}: {seconds:.2f} s {results[name]}")
    for run in range(args.runs):
        for name, fn in cases.items():
            seconds, _ = timed(fn)
            times[name].append(seconds)
            print(f"run {run} {name}: {seconds:.2f} s ({mib / seconds:.0f} MiB/s)")
    median = {name: statistics.median(t) for name, t in times.items()}
    out: dict[str, object] = {"logMiB": round(mib, 1), "messages": results["rocketstore consumequeue"][0]}
    for name, seconds in median.items():
        out[name] = {
            "seconds": round(seconds, 2),
            "MiB/s": round(mib / seconds),
            "runs": [round(t, 2) for t in times[name]],
        }
    for name in ("rocketstore consumequeue", "rocketstore commitlog"):
        out[f"{name} / binaryFile"] = round(median["binaryFile"] / median[name], 2)

    if not args.no_rebuild:
        cfg = config(args.segment_mib)

        def drop_derived() -> None:
            for name in ("consumequeue", "index"):
                shutil.rmtree(os.path.join(args.store, name), ignore_errors=True)

        def single_process() -> None:
            drop_derived()
            MessageStore.open(args.store, cfg).shutdown()  # recovery dispatches the whole log

        def on_spark() -> dict:
            drop_derived()
            return rebuild(spark, args.store, cfg)

        spark.sparkContext.parallelize(range(4), 2).count()  # warm-up of the RDD Python workers
        single_times, spark_times, scans = [], [], []
        for run in range(args.runs):
            seconds, _ = timed(single_process)
            single_times.append(seconds)
            seconds, summary = timed(on_spark)
            spark_times.append(seconds)
            scans.append(summary["scanSeconds"])
            print(f"run {run} rebuild: single process {single_times[-1]:.2f} s, spark {seconds:.2f} s")
        single, parallel = statistics.median(single_times), statistics.median(spark_times)
        out["rebuild single process"] = {"seconds": round(single, 2), "MiB/s": round(mib / single)}
        out["rebuild spark"] = {
            "seconds": round(parallel, 2),
            "MiB/s": round(mib / parallel),
            "scanSeconds": round(statistics.median(scans), 2),
            "tasks": summary["tasks"],
        }
    spark.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
