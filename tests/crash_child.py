"""A producer the crash tests kill: puts with several threads and reports every acknowledged put.

    python crash_child.py STORE FLUSH_DISK_TYPE THREADS START_INDEX [config key=value ...]

Prints ``ready`` once the store is open, then one line per acknowledged message:
``ack <index> <commitLogOffset> <queueId> <queueOffset> <status>``. Each line is written and
flushed after ``put`` returned, so every line the parent reads stands for a stored message.
It never stops by itself: the parent kills it with SIGKILL. With ``CRASH_DELAY_EVERY=n`` in the
environment every n-th single message asks for delay level 1 (``DELAY=1``).
"""

from __future__ import annotations

import os
import sys
import threading

from rocketstore import Message, MessageStore, StoreConfig


def main() -> None:
    store_path, flush_type, threads, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    settings = dict(arg.split("=", 1) for arg in sys.argv[5:])
    config = StoreConfig(settings, flushDiskType=flush_type)
    store = MessageStore.open(store_path, config)
    out = os.fdopen(sys.stdout.fileno(), "w", buffering=1)
    lock = threading.Lock()
    counter = iter(range(start, 1 << 62))
    delay_every = int(os.environ.get("CRASH_DELAY_EVERY", "0"))

    def produce() -> None:
        while True:
            with lock:
                i = next(counter)
            body = (b"crash-body-%d-" % i) * (1 + i % 7)
            if i % 13 == 0:  # some batches, to crash inside them too
                batch = [Message("CrashTopic", body + b"b%d" % j, tags="TagB", keys=f"ck-{i}-{j}") for j in range(3)]
                result = store.put_batch(batch, i % 4)
                if result.ok:
                    with lock:
                        for j, offset in enumerate(result.commit_log_offsets):
                            out.write(f"ack {i}-{j} {offset} {i % 4} {result.queue_offset + j} {result.status}\n")
                continue
            props = {"DELAY": "1"} if delay_every and i % delay_every == 0 else None
            result = store.put(Message("CrashTopic", body, tags="TagA", keys=f"ck-{i}", properties=props), i % 4)
            if result.ok:
                with lock:
                    out.write(f"ack {i} {result.commit_log_offset} {i % 4} {result.queue_offset} {result.status}\n")

    for _ in range(threads):
        threading.Thread(target=produce, daemon=True).start()
    out.write("ready\n")
    threading.Event().wait()


if __name__ == "__main__":
    main()
