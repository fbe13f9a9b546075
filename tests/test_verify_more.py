"""rocketstore.verify, continued (tests/test_verify.py holds the helpers): review findings."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli.main import cli
from rocketstore.errors import CorruptStoreError
from rocketstore.verify import verify_store
from test_verify import VECTOR_GEOMETRY, VECTORS, build_store, has, hashes, needs_vectors, tiny


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


def test_a_store_verified_without_its_file_sizes_is_an_error_naming_them(tmp_path: Path) -> None:
    """Every commit-log, consume-queue and index file one size other than the configured one: the
    configuration is not the store's. An error (exit 2) giving the settings, as loading the store
    does, not a problem per file (exit 1) on a healthy store."""
    root = build_store(tmp_path / "store")
    before = hashes(root)
    with pytest.raises(CorruptStoreError) as caught:
        verify_store(root, StoreConfig())
    text = str(caught.value)
    assert "--set mappedFileSizeCommitLog=4096" in text and "--set mappedFileSizeConsumeQueue=200" in text
    assert "index/: every file is" in text
    with pytest.raises(CorruptStoreError, match="--set mappedFileSizeCommitLog=4096") as caught:
        verify_store(root, tiny().copy(mappedFileSizeCommitLog=8192))
    assert "consumequeue/" not in str(caught.value) and "index/" not in str(caught.value)
    assert hashes(root) == before
    result = CliRunner().invoke(cli, ["verify", str(root)])
    assert result.exit_code == 2 and "--set mappedFileSizeCommitLog=4096" in result.output


def test_a_segment_cut_short_is_still_a_problem_not_a_size_hint(tmp_path: Path) -> None:
    """One commit-log segment cut in the middle of its records is damage, even when it is the
    only one (the hint is for files whose data does not run into their end)."""
    root = tmp_path / "store"
    with MessageStore.open(root, tiny()) as store:
        for i in range(5):
            store.put(Message("TopicA", b"x" * 100, keys=f"k{i}")).raise_for_status()
        assert store.wait_for_dispatch()
    os.truncate(root / "commitlog" / f"{0:020d}", 300)
    report = verify_store(root, tiny())
    assert has(report.problems, "300 bytes, the configured size is 4096")


@needs_vectors
def test_a_rocketmq_store_verified_without_its_sizes_is_an_error_naming_them() -> None:
    root = VECTORS / "sample-clean" / "store"
    with pytest.raises(CorruptStoreError) as caught:
        verify_store(root, StoreConfig())
    text = str(caught.value)
    assert "--set mappedFileSizeCommitLog=65536" in text and "--set mappedFileSizeConsumeQueue=2000" in text
    assert verify_store(root, StoreConfig(**VECTOR_GEOMETRY)).ok
