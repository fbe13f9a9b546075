"""Compatibility with stores written by the real RocketMQ 4.9.8 (shared/rocketmq-vectors).

Read-only opens must serve exactly what RocketMQ serves (expected.jsonl / recovered.jsonl) and
leave the vector folders untouched; writable copies must recover in place as RocketMQ did
(recovered.report.json), keep working, and stay readable by the independent reader rmqread.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore
from rocketstore.codec.properties import java_map_order
from rocketstore.errors import ReadOnlyStoreError
from rocketstore.export import export_row, iter_log, iter_queued

CLEAN = "sample-clean"
CRASH = "sample-crash"


def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _export(store: MessageStore) -> list[dict]:
    rows = []
    for msg, queue_offset, tags_code, size in iter_queued(store):
        assert msg is not None, f"a consume-queue unit (queue offset {queue_offset}) points at no readable record"
        rows.append(export_row(msg, tags_code, size))
    return rows


def _assert_rows_equal(got: list[dict], want: list[dict]) -> None:
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            diff = {k: (g.get(k), w.get(k)) for k in sorted(set(g) | set(w)) if g.get(k) != w.get(k)}
            pytest.fail(f"row {i} ({w.get('topic')}/{w.get('queueId')}@{w.get('queueOffset')}) differs: {diff}")
    assert len(got) == len(want)


@pytest.fixture(scope="module")
def report(vectors: Path) -> dict:
    with open(vectors / CRASH / "recovered.report.json", encoding="utf-8") as f:
        return json.load(f)


# ================================================================== read-only opens


def test_sample_clean_read_only_serves_expected_jsonl(vectors, vector_config, hash_tree):
    root = vectors / CLEAN / "store"
    before = hash_tree(root)
    expected = _jsonl(vectors / CLEAN / "expected.jsonl")
    assert len(expected) == 1555
    with MessageStore.open(root, vector_config, read_only=True) as store:
        assert store.last_exit_ok
        rows = _export(store)
        # config/delayOffset.json (unquoted integer keys, one entry a line)
        assert store.delay_offsets.offset_table == {1: 23, 2: 32}
        assert store.delay_offsets.get(1) == 23 and store.delay_offsets.get(3) == 0
    _assert_rows_equal(rows, expected)
    assert hash_tree(root) == before, "a read-only open changed the vector store"


def test_sample_crash_read_only_serves_recovered_jsonl(vectors, vector_config, hash_tree):
    root = vectors / CRASH / "store"
    before = hash_tree(root)
    recovered = _jsonl(vectors / CRASH / "recovered.jsonl")
    assert len(recovered) == 1000
    with MessageStore.open(root, vector_config, read_only=True) as store:
        assert not store.last_exit_ok  # the abort file is there
        rows = _export(store)
        # the recovered view in memory: the pre-allocated empty file is gone from it
        assert store.max_phy_offset == 897285
    _assert_rows_equal(rows, recovered)
    after = hash_tree(root)
    assert after == before, "a read-only open changed the vector store"
    assert "commitlog/00000000000000917504" in after  # still on disk


def test_sample_crash_expected_by_commit_log_offset(vectors, vector_config, hash_tree):
    """expected.jsonl of sample-crash: every acknowledged message read back by its offset."""
    root = vectors / CRASH / "store"
    before = hash_tree(root)
    expected = _jsonl(vectors / CRASH / "expected.jsonl")
    assert len(expected) == 1000
    with MessageStore.open(root, vector_config, read_only=True) as store:
        for row in expected:
            msg = store.look_message_by_offset(row["commitLogOffset"])
            assert msg is not None, row["commitLogOffset"]
            assert msg.to_json_dict() == row
            # with the size given too, and by offset message id
            assert store.look_message_by_offset(row["commitLogOffset"], row["storeSize"]).to_json_dict() == row
            assert store.look_message_by_msg_id(row["msgId"]).to_json_dict() == row
    assert hash_tree(root) == before


def test_sample_clean_read_only_without_recovery(vectors, vector_config, hash_tree):
    """``recover=False`` maps the files as they are: a clean store reads the same."""
    root = vectors / CLEAN / "store"
    before = hash_tree(root)
    expected = _jsonl(vectors / CLEAN / "expected.jsonl")
    with MessageStore.open(root, vector_config, read_only=True, recover=False) as store:
        first, last = expected[0], expected[-1]
        assert store.look_message_by_offset(first["commitLogOffset"]).to_json_dict() == {
            k: v for k, v in first.items() if k not in ("cqTagsCode", "cqSize")
        }
        assert store.look_message_by_offset(last["commitLogOffset"]).to_json_dict() == {
            k: v for k, v in last.items() if k not in ("cqTagsCode", "cqSize")
        }
    assert hash_tree(root) == before


@pytest.mark.parametrize("sample", [CLEAN, CRASH])
def test_commit_log_walk_equals_rmqread(vectors, vector_config, rmqread_export, rmqread, sample):
    """Reading the log itself (iter_log) gives what the independent reader reads, record by record;
    key queries agree with its index queries."""
    root = vectors / sample / "store"
    theirs = rmqread_export(root, vector_config, "--via", "commitlog")
    with MessageStore.open(root, vector_config, read_only=True) as store:
        ours = sorted(
            (m.to_json_dict() for m in iter_log(store)),
            key=lambda r: (r["topic"], r["queueId"], r["queueOffset"], r["commitLogOffset"]),
        )
        _assert_rows_equal(ours, theirs)
        keys = sorted({(r["topic"], k) for r in theirs for k in (r["keys"] or "").split(" ") if k})[::500]
        assert len(keys) >= 3
        for topic, key in keys:
            done = rmqread("query", root, vector_config, "--topic", topic, "--key", key)
            want = [json.loads(line)["commitLogOffset"] for line in done.stdout.splitlines()]
            got = store.query_message(topic, key, max_num=64)
            assert [m.commit_log_offset for m in got.messages] == want, (topic, key)


def test_read_only_store_refuses_puts(vectors, vector_config):
    with MessageStore.open(vectors / CLEAN / "store", vector_config, read_only=True) as store:
        with pytest.raises(ReadOnlyStoreError):
            store.put(Message("TopicTest", b"x"))
        with pytest.raises(ReadOnlyStoreError):
            store.put_batch([Message("TopicTest", b"x")])


def test_sample_clean_queries_and_offsets_read_only(vectors, vector_config):
    """Per-queue offsets, key and uniq-key queries on the clean sample, against expected.jsonl."""
    expected = _jsonl(vectors / CLEAN / "expected.jsonl")
    with MessageStore.open(vectors / CLEAN / "store", vector_config, read_only=True) as store:
        per_queue: dict[tuple[str, int], list[int]] = {}
        for row in expected:
            per_queue.setdefault((row["topic"], row["queueId"]), []).append(row["queueOffset"])
        for (topic, qid), offsets in per_queue.items():
            assert store.get_min_offset_in_queue(topic, qid) == offsets[0] == 0
            assert store.get_max_offset_in_queue(topic, qid) == offsets[-1] + 1 == len(offsets)
        # queries for a sample of keys: exactly the messages whose KEYS/UNIQ_KEY hold the key
        by_key: dict[tuple[str, str], set[int]] = {}
        for row in expected:
            for key in [*(row["keys"] or "").split(" "), row["uniqKey"]]:
                if key:
                    by_key.setdefault((row["topic"], key), set()).add(row["commitLogOffset"])
        sample = sorted(by_key)[::37]
        assert len(sample) > 20
        for topic, key in sample:
            got = store.query_message(topic, key, max_num=64)
            assert {m.commit_log_offset for m in got.messages} == by_key[(topic, key)], (topic, key)


def test_sample_crash_as_the_slave_rocketmq_opened_it_stamps_the_checkpoint_on_dispatch(
    copy_vector_store, vector_config, report
):
    """RocketMQ opened the crashed store as a SLAVE (the report's config): there each dispatched
    unit sets physicMsgTimestamp as well as logicsMsgTimestamp (ConsumeQueue's
    putMessagePositionInfoWrapper), so both end at the last message's store time."""
    assert report["config"]["brokerRole"] == "SLAVE"
    root = copy_vector_store(CRASH)
    store = MessageStore.open(root, vector_config.copy(brokerRole="SLAVE"))
    try:
        assert store.wait_for_dispatch()
        want = report["checkpointAfterRecovery"]
        assert store.checkpoint.physic_msg_timestamp == want["physicMsgTimestamp"] > 0
        assert store.checkpoint.logics_dispatched_timestamp == want["logicsMsgTimestamp"]
    finally:
        store.shutdown()


def test_a_delayed_put_orders_its_properties_as_rocketmq_wrote_them(vectors, vector_config, tmp_path):
    """4.9.8 re-serializes a delayed message's properties from a HashMap once it adds REAL_TOPIC
    and REAL_QID: every schedule record and delivered copy of the vector has its names in that
    map's order (java_map_order), and each delayed message put again (its names as the producer
    gave them, without REAL_*) is written in the order RocketMQ wrote it, REAL_* placed as Java's map
    places them, not appended."""
    with MessageStore.open(vectors / CLEAN / "store", vector_config, read_only=True) as source:
        rewritten = [m for m, *_ in iter_queued(source) if m is not None and "REAL_TOPIC" in m.properties]
    units = [m for m in rewritten if m.topic == "SCHEDULE_TOPIC_XXXX" and "UNIQ_KEY" in m.properties]  # a put adds one
    assert len(units) > 20 and len(rewritten) > len(units)  # delivered copies too
    for stored in rewritten:
        assert list(java_map_order(stored.properties)) == list(stored.properties), stored.commit_log_offset
    with MessageStore.open(tmp_path / "s", vector_config) as store:
        for stored in units:
            props = stored.properties
            given = {k: v for k, v in props.items() if k not in ("REAL_TOPIC", "REAL_QID")}
            put = store.put(Message(props["REAL_TOPIC"], stored.body, properties=given), int(props["REAL_QID"]))
            put.raise_for_status()
            written = store.look_message_by_offset(put.commit_log_offset)
            assert written is not None and list(written.properties) == list(props), stored.commit_log_offset
        bare = store.put(Message("T", b"x", tags="a", properties={"DELAY": "1"}))  # a UNIQ_KEY the put makes
        written = store.look_message_by_offset(bare.commit_log_offset)
        assert written is not None and "UNIQ_KEY" in written.properties
        assert list(written.properties) == list(java_map_order(written.properties))


# ================================================================== abnormal recovery in place


def test_sample_crash_abnormal_recovery_in_place(copy_vector_store, vector_config, report, rmqread, rmqread_export):
    root = copy_vector_store(CRASH)
    assert report["abortFileBeforeLoad"] and not report["lastExitOK"]
    assert (root / "abort").exists()
    old_index = sorted(os.listdir(root / "index"))
    assert old_index == [f["name"] for f in report["indexFilesBeforeLoad"]]
    config = vector_config.copy(brokerIP1="192.168.0.10")

    store = MessageStore.open(root, config)
    try:
        assert not store.last_exit_ok
        assert store.recovery is not None and store.recovery.abnormal
        # the pre-allocated empty commit-log file is removed, on disk
        assert sorted(os.listdir(root / "commitlog")) == [f["name"] for f in report["commitlogFilesAfterRecovery"]]
        # the index file newer than the (zero) checkpoint was dropped and rebuilt
        new_index = sorted(os.listdir(root / "index"))
        assert len(new_index) == len(report["indexFilesAfterShutdown"]) == 1
        assert new_index != old_index
        header = store.index.files[-1].header_dict()
        want = report["indexFilesAfterShutdown"][0]
        assert header["beginTimestamp"] == want["beginTimestamp"]
        assert header["endTimestamp"] == want["endTimestamp"]
        assert header["endPhyOffset"] == want["endPhyOffset"]
        assert (header["indexCount"] >= store.index.index_num) == want["writeFull"]

        assert store.min_phy_offset == report["commitLogMinOffset"]
        assert store.max_phy_offset == report["commitLogMaxOffset"]
        assert store.dispatch_behind_bytes() == report["dispatchBehindBytes"] == 0
        assert len(report["queues"]) == 17
        for q in report["queues"]:
            assert store.get_min_offset_in_queue(q["topic"], q["queueId"]) == q["minOffset"], q
            assert store.get_max_offset_in_queue(q["topic"], q["queueId"]) == q["maxOffset"], q
        # RocketMQ's in-memory logicsMsgTimestamp after recovery is the last unit dispatched, which
        # rocketstore keeps apart until a flush of every queue makes it the persisted field
        dispatched = store.checkpoint.logics_dispatched_timestamp
        assert dispatched == report["checkpointAfterRecovery"]["logicsMsgTimestamp"]

        assert report["queries"]
        for q in report["queries"]:
            got = store.query_message(q["topic"], q["key"])
            # query_message drops hash collisions: exactly the matching messages come back
            assert [m.commit_log_offset for m in got.messages] == q["matchingOffsets"], q
            assert all(q["key"] in [*(m.keys or "").split(" "), m.uniq_key] for m in got.messages)
            assert got.index_last_update_timestamp == q["indexLastUpdateTimestamp"]
            assert got.index_last_update_phyoffset == q["indexLastUpdatePhyoffset"]

        assert json.loads(report["scheduleOffsetJson"]) == {"offsetTable": {}}
        assert store.delay_offsets.offset_table == {}
    finally:
        store.shutdown()
    assert not (root / "abort").exists()

    # the recovered files hold what RocketMQ served, for the independent reader too
    done = rmqread("check", root, config)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(rmqread_export(root, config)) == 1000

    # reopen normally and keep writing, to existing queues and a new topic
    with MessageStore.open(root, config) as store:
        assert store.last_exit_ok
        next_offsets = {q: store.get_max_offset_in_queue("TopicTest", q) for q in range(4)}
        new = []
        for i in range(40):
            qid = i % 4
            r = store.put(Message("TopicTest", f"after recovery {i}".encode(), tags="TagZ", keys=f"after-{i}"), qid)
            assert r.ok and r.queue_offset == next_offsets[qid] + i // 4
            new.append(r.commit_log_offset)
        r = store.put_batch([Message("FreshTopic", b"b%d" % i, tags="TagA") for i in range(5)], 2)
        assert r.ok and r.queue_offset == 0
        assert store.wait_for_dispatch()
        assert store.get_max_offset_in_queue("FreshTopic", 2) == 5
        assert [m.commit_log_offset for m in store.query_message("TopicTest", "after-7").messages] == [new[7]]

    done = rmqread("check", root, config)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = rmqread_export(root, config)
    assert len(rows) == 1000 + 40 + 5
    new_rows = [r for r in rows if r["topic"] == "FreshTopic" or r["tags"] == "TagZ"]
    assert len(new_rows) == 45
    assert all(r["storeHost"] == "192.168.0.10:10911" for r in new_rows)


def test_sample_crash_recovered_copy_matches_recovered_jsonl(copy_vector_store, vectors, vector_config, rmqread_export):
    """After the in-place recovery (and a clean shutdown), the files hold exactly recovered.jsonl."""
    root = copy_vector_store(CRASH)
    with MessageStore.open(root, vector_config.copy(brokerIP1="192.168.0.10")) as store:
        assert store.wait_for_dispatch()
        ours = _export(store)
    recovered = _jsonl(vectors / CRASH / "recovered.jsonl")
    _assert_rows_equal(ours, recovered)
    _assert_rows_equal(rmqread_export(root, vector_config), recovered)


# ================================================================== writing to a copy of the clean sample


def test_sample_clean_copy_accepts_new_puts(copy_vector_store, vectors, vector_config, rmqread, rmqread_export):
    root = copy_vector_store(CLEAN)
    expected = _jsonl(vectors / CLEAN / "expected.jsonl")
    config = vector_config.copy(brokerIP1="192.168.0.10")
    max_offsets: dict[tuple[str, int], int] = {}
    for row in expected:
        key = (row["topic"], row["queueId"])
        max_offsets[key] = max(max_offsets.get(key, 0), row["queueOffset"] + 1)

    new_offsets = []
    with MessageStore.open(root, config) as store:
        assert store.last_exit_ok
        for topic in ("TopicTest", "OrderTopic", "PayTopic"):
            for qid in range(4):
                assert store.get_max_offset_in_queue(topic, qid) == max_offsets[(topic, qid)]
                for k in range(3):
                    r = store.put(Message(topic, f"{topic}-{qid}-{k}".encode(), tags="TagNew", keys=f"new-{k}"), qid)
                    assert r.ok
                    assert r.queue_offset == max_offsets[(topic, qid)] + k
                    assert r.commit_log_offset >= 1376256  # after the last record of the sample
                    new_offsets.append(r.commit_log_offset)
        assert store.wait_for_dispatch()
        r = store.get_message("g", "PayTopic", 3, max_offsets[("PayTopic", 3)])
        assert r.status == "FOUND"
        assert [m.body for m in r.messages] == [b"PayTopic-3-0", b"PayTopic-3-1", b"PayTopic-3-2"]
        assert len(store.query_message("OrderTopic", "new-1").messages) == 4

    text = (root / "config" / "delayOffset.json").read_text(encoding="utf-8")
    assert re.search(r"\b1:23\b", text) and re.search(r"\b2:32\b", text)
    done = rmqread("check", root, config)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = rmqread_export(root, config)
    old = [r for r in rows if r["tags"] != "TagNew"]
    new = [r for r in rows if r["tags"] == "TagNew"]
    _assert_rows_equal(old, expected)
    assert sorted(r["commitLogOffset"] for r in new) == sorted(new_offsets)
    assert len(rows) == len(expected) + 36


def test_queues_and_index_rebuilt_from_sample_clean_are_rocketmqs_bytes(copy_vector_store, vectors, vector_config):
    """Consume queues and index files rebuilt from RocketMQ 4.9.8's commit log (both deleted, the
    checkpoint zeroed, a crash) are the files RocketMQ wrote, byte for byte: units, tags codes
    (Java hashes), index header, hash slots, entries and their chains. Index files are named by
    the time they are made, so they are compared in order, not by name."""
    original = vectors / CLEAN / "store"
    root = copy_vector_store(CLEAN)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    (root / "index").mkdir()
    with open(root / "checkpoint", "r+b") as f:
        f.write(bytes(24))
    (root / "abort").write_bytes(b"")
    with MessageStore.open(root, vector_config) as store:
        assert store.recovery.abnormal and store.wait_for_dispatch()

    def files(folder: Path) -> dict[str, bytes]:
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}

    want_cq, got_cq = files(original / "consumequeue"), files(root / "consumequeue")
    assert sorted(got_cq) == sorted(want_cq)
    assert [name for name in want_cq if got_cq[name] != want_cq[name]] == []
    want_index, got_index = files(original / "index"), files(root / "index")
    assert len(got_index) == len(want_index)
    assert [i for i, (a, b) in enumerate(zip(got_index.values(), want_index.values(), strict=True)) if a != b] == []
