"""``make demo``: the main job on the embedded default store under ``./data/demo``.

Writes a few thousand messages over several topics and queues, consumes one topic by tag, looks
messages up by key, msgId and time, delays a few messages, sends a "failed" one back for a retry,
and prints a short summary; then the Spark part (``demo_spark``).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import time

from rocketstore import Message, MessageStore, StoreConfig, StoredMessage, demo_spark

TOPICS = ("TopicTest", "OrderTopic", "PayTopic")
TAGS = ("TagA", "TagB", "TagC")
QUEUES = 4
MESSAGES = 6000


def demo_config() -> StoreConfig:
    """Small segments, so that the demo store rolls files like a real one."""
    return StoreConfig(mappedFileSizeCommitLog=1 << 20, mappedFileSizeConsumeQueue=60000, brokerIP1="127.0.0.1")


def main(path: str = os.path.join("data", "demo")) -> int:
    shutil.rmtree(path, ignore_errors=True)
    config = demo_config()
    rng = random.Random(7)
    started = time.perf_counter()
    with MessageStore.open(path, config) as store:
        first_ids: dict[str, str] = {}
        for i in range(MESSAGES):
            topic = TOPICS[i % len(TOPICS)]
            body = f"order {i}: {'x' * rng.randrange(20, 400)}".encode()
            message = Message(topic, body, tags=TAGS[rng.randrange(3)], keys=[f"order-{i}", f"user-{i % 97}"])
            result = store.put(message, queue_id=rng.randrange(QUEUES)).raise_for_status()
            first_ids.setdefault(topic, result.msg_id)
        batch = [Message("PayTopic", f"batch {i}".encode(), tags="TagB", keys=f"batch-{i}") for i in range(32)]
        store.put_batch(batch, queue_id=0, properties={"CLUSTER": "DefaultCluster"}).raise_for_status()
        store.wait_for_dispatch()
        wrote = time.perf_counter() - started

        print(f"store {os.path.abspath(path)}")
        flags = " ".join(f"--set {key}={value}" for key, value in config.changed().items())
        print(f"  its settings, for the rocketstore commands: {flags}")
        print(f"  wrote {MESSAGES + len(batch)} messages in {wrote:.2f} s; commit log {store.max_phy_offset:,} bytes")
        for topic, queue_ids in store.queue_ids().items():
            counts = [store.get_max_offset_in_queue(topic, q) for q in queue_ids]
            print(f"  {topic:<12} queues {queue_ids} messages {counts}")

        consumed = 0
        for queue_id in range(QUEUES):
            offset = 0
            while True:
                got = store.get_message("demo-group", "TopicTest", queue_id, offset, 32, tags="TagA || TagC")
                consumed += len(got.messages)
                offset = got.next_begin_offset
                if got.status not in ("FOUND", "NO_MATCHED_MESSAGE"):
                    break
            store.commit_offset("demo-group", "TopicTest", queue_id, offset)
        print(f"  consumed {consumed} TopicTest messages tagged TagA or TagC (offsets committed)")

        hit = store.query_message("OrderTopic", "order-1").messages
        print(f"  key order-1 -> {[m.body[:8].decode() for m in hit]} at offset {[m.commit_log_offset for m in hit]}")
        msg = store.look_message_by_msg_id(first_ids["PayTopic"])
        print(f"  msgId {first_ids['PayTopic']} -> {msg.topic} queue {msg.queue_id} offset {msg.queue_offset}")
        when = msg.store_timestamp
        offset = store.get_offset_in_queue_by_time("PayTopic", msg.queue_id, when)
        print(f"  PayTopic queue {msg.queue_id} at time {when} starts at offset {offset}")
        _delays_and_retries(store, msg)
    return demo_spark.run(path, config)


def _delays_and_retries(store: MessageStore, failed: StoredMessage) -> None:
    """Five messages delayed by level 1 (1 s) and one consumer failure retried after level 1."""
    started = time.perf_counter()
    for i in range(5):
        store.put(Message("LaterTopic", f"later {i}".encode(), properties={"DELAY": "1"})).raise_for_status()
    store.send_back("demo-group", failed, delay_level=1).raise_for_status()
    store.services.schedule.wait_delivered(6, timeout=30)
    store.wait_for_dispatch()
    waited = time.perf_counter() - started
    retry = store.get_message("demo-group", "%RETRY%demo-group", 0, 0).messages
    print(
        f"  5 messages delayed by 1 s reached LaterTopic after {waited:.1f} s: "
        f"{store.get_max_offset_in_queue('LaterTopic', 0)} in queue 0"
    )
    print(
        f"  a failed PayTopic message came back in %RETRY%demo-group: reconsumeTimes "
        f"{retry[0].reconsume_times}, ORIGIN_MESSAGE_ID {retry[0].properties['ORIGIN_MESSAGE_ID']}"
    )


if __name__ == "__main__":
    sys.exit(main())
