"""rocketstore.verify, continued (tests/test_verify.py holds the helpers): review findings."""

from __future__ import annotations

import shutil
from pathlib import Path

from rocketstore import Message, MessageStore
from rocketstore.verify import verify_store
from test_verify import has, tiny


def test_a_live_topics_queue_folder_gone_is_damage_not_a_deleted_topic(tmp_path: Path) -> None:
    """TopicQ writes queue 1, then queue 0, and is never deleted (it stays in topics.json): its
    queue 1 folder gone hides those records from consumers. They are older than queue 0's first
    unit, but no queue of the topic started again from offset 0, so the topic was not deleted."""
    root = tmp_path / "store"
    with MessageStore.open(root, tiny()) as store:
        offsets = []
        for queue_id in (1, 0):
            for i in range(5):
                result = store.put(Message("TopicQ", f"q{queue_id}-{i}".encode(), keys=f"k{queue_id}{i}"), queue_id)
                result.raise_for_status()
                offsets.append(result.commit_log_offset)
        assert store.wait_for_dispatch()
    assert verify_store(root, tiny()).ok
    shutil.rmtree(root / "consumequeue" / "TopicQ" / "1")
    report = verify_store(root, tiny())
    assert not report.ok
    assert [p for p in report.problems if "not in its consume queue" in p] == [
        f"record at {offsets[i]} (TopicQ/1 queue offset {i}): not in its consume queue" for i in range(5)
    ]
    assert not has(report.notes, "deleted topics")


def test_a_deleted_topic_written_again_in_another_queue_keeps_its_old_records_excused(tmp_path: Path) -> None:
    """The legitimate case next to the one above: TopicQ deleted, then written again in queue 0
    (which starts again at offset 0): the old records of queue 1 (no consume queue) are the
    deleted topic's, a note."""
    root = tmp_path / "store"
    with MessageStore.open(root, tiny()) as store:
        for queue_id in (1, 0):
            for i in range(3):
                store.put(Message("TopicQ", b"old", keys=f"k{queue_id}{i}"), queue_id).raise_for_status()
        assert store.wait_for_dispatch()
        assert store.delete_topics(["TopicQ"]) == ["TopicQ"]
        assert store.put(Message("TopicQ", b"new"), 0).queue_offset == 0
        assert store.wait_for_dispatch()
    report = verify_store(root, tiny())
    assert report.ok, report.problems
    assert has(report.notes, "6 records of deleted topics (TopicQ")
