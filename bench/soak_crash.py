"""Crash soak: SIGKILL a producing child process again and again and prove nothing acknowledged is lost.

    python bench/soak_crash.py --cycles 1000 [--flush SYNC_FLUSH|ASYNC_FLUSH] [--dir D]

Each cycle starts the producer of tests/crash_child.py (1, 4 or 8 threads), kills it with SIGKILL
after a random number of acknowledgements, reopens the store (abnormal recovery) and checks every
message acknowledged in that cycle, and a random sample of 300 earlier ones, by offset, consume
queue and key; every 50 cycles every message acknowledged so far is checked and the whole store
verified. Prints a line per 50 cycles and a summary. The store is kept in ``--dir D`` (as
``D/store``) for a look afterwards; without ``--dir`` a temporary folder is used and deleted.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import test_crash as crash
from rocketstore import MessageStore
from rocketstore.verify import verify_store


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--flush", default="SYNC_FLUSH", choices=["SYNC_FLUSH", "ASYNC_FLUSH"])
    parser.add_argument("--dir", default=None)
    parser.add_argument("--seed", default="soak")
    args = parser.parse_args()
    folder = Path(args.dir or tempfile.mkdtemp(prefix="rocketstore-soak-"))
    store_path = folder / "store"
    shutil.rmtree(store_path, ignore_errors=True)
    rng = random.Random(args.seed)
    acked: list = []
    started = time.perf_counter()
    verified = 0
    for cycle in range(1, args.cycles + 1):
        producer = crash.Producer(store_path, args.flush, threads=rng.choice([1, 4, 8]), start=cycle * 100_000)
        producer.kill_after(rng.randint(1, 150))
        full = cycle % 50 == 0 or cycle == args.cycles
        sample = producer.acks + rng.sample(acked, min(300, len(acked)))
        acked += producer.acks
        with MessageStore.open(store_path, crash.config()) as store:
            crash.check_acknowledged(store, acked if full else sample, {"PUT_OK", "FLUSH_DISK_TIMEOUT"})
            store.wait_for_dispatch()
        if full:
            report = verify_store(str(store_path), crash.config())
            if not report.ok:
                print(f"cycle {cycle}: verify found problems: {report.problems[:5]}")
                return 1
            verified += 1
        if cycle % 50 == 0:
            elapsed = time.perf_counter() - started
            print(f"cycle {cycle}: {len(acked):,} acknowledged messages, all present, store verified ({elapsed:.0f} s)")
    print(
        f"{args.cycles} SIGKILL cycles ({args.flush}): {len(acked):,} acknowledged messages checked after every "
        f"recovery (each cycle's own and a sample of the rest; all of them every 50 cycles), none lost; "
        f"{verified} full verifications clean; {time.perf_counter() - started:.0f} s"
    )
    if not args.dir:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
