"""Config files: encoding topics.json and consumerOffset.json, and deleting topics one by one.

RocketMQ rewrites a config file whole on each change (topics.json at each topic deletion,
consumerOffset.json every ``flushConsumerOffsetInterval``), so their encoding is paid per change:

* ``encode``: ``fastjson.dumps`` of a topics.json table of ``--topics`` topics and of a
  consumerOffset.json table of ``--groups`` groups x ``--topics`` topics x 8 queues;
* ``delete``: ``store.delete_topics([t])`` called once per topic for ``--delete`` topics (each
  with one message and a committed offset), the call a broker's admin makes per topic, against
  one call for them all.

    .venv/bin/python bench/bench_config_files.py --dir /path/on/the/disk --runs 3
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time

from common import bench_parser, positive_int, work_folder  # bench/common.py, beside this script

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.meta import fastjson


def encode_seconds(topics: int, groups: int) -> tuple[float, float]:
    """Seconds to encode the topics.json and the consumerOffset.json tables."""
    table = {
        f"Topic{i}": {
            "order": False,
            "perm": 6,
            "readQueueNums": 8,
            "topicFilterType": "SINGLE_TAG",
            "topicName": f"Topic{i}",
            "topicSysFlag": 0,
            "writeQueueNums": 8,
        }
        for i in range(topics)
    }
    topics_json = {"dataVersion": {"counter": 5, "timestamp": 1_700_000_000_000}, "topicConfigTable": table}
    queues = range(8)
    offsets = {f"Topic{i}@group{g}": {q: 1000 + q for q in queues} for i in range(topics) for g in range(groups)}
    offsets_json = {"offsetTable": offsets}
    out = []
    for obj in (topics_json, offsets_json):
        started = time.perf_counter()
        fastjson.dumps(obj)
        out.append(time.perf_counter() - started)
    return out[0], out[1]


def delete_seconds(folder: str, topics: int, one_call: bool) -> float:
    """Seconds to delete ``topics`` topics, one call each or one call for all."""
    path = os.path.join(folder, "delete")
    shutil.rmtree(path, ignore_errors=True)
    config = StoreConfig(brokerIP1="127.0.0.1", mappedFileSizeCommitLog=1 << 20, mappedFileSizeConsumeQueue=2000)
    with MessageStore.open(path, config) as store:
        names = [f"T{i}" for i in range(topics)]
        for name in names:
            store.put(Message(name, b"x" * 50), 0).raise_for_status()
            store.commit_offset("g", name, 0, 1)
        store.wait_for_dispatch(None)
        started = time.perf_counter()
        if one_call:
            store.delete_topics(names)
        else:
            for name in names:
                store.delete_topics([name])
        elapsed = time.perf_counter() - started
    shutil.rmtree(path, ignore_errors=True)
    return elapsed


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--topics", type=positive_int, default=1600, help="topics in the encoded tables")
    parser.add_argument("--groups", type=positive_int, default=20, help="groups per topic in consumerOffset.json")
    parser.add_argument("--delete", type=positive_int, default=400, help="topics deleted")
    args = parser.parse_args()
    with work_folder(args.dir) as folder:
        encoded = [encode_seconds(args.topics, args.groups) for _ in range(args.runs)]
        each = [delete_seconds(folder, args.delete, one_call=False) for _ in range(args.runs)]
        whole = [delete_seconds(folder, args.delete, one_call=True) for _ in range(args.runs)]
    topics_ms = statistics.median(e[0] for e in encoded) * 1e3
    offsets_ms = statistics.median(e[1] for e in encoded) * 1e3
    entries = args.topics * args.groups * 8
    print(f"medians of {args.runs} runs:")
    print(f"  encode topics.json, {args.topics:,} topics: {topics_ms:.1f} ms")
    print(f"  encode consumerOffset.json, {entries:,} offsets: {offsets_ms:.1f} ms")
    print(f"  delete {args.delete} topics one call each: {statistics.median(each):.2f} s")
    print(f"  delete {args.delete} topics in one call: {statistics.median(whole):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
