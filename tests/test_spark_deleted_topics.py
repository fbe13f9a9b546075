"""The Spark rebuild and a deleted topic (config/deletedTopics.json): its old records get no
consume-queue units again, but index entries (as RocketMQ indexes every record)."""

from __future__ import annotations

import json
import shutil

import pytest

from rocketstore import Message, MessageStore
from rocketstore.results import GetMessageStatus
from rocketstore.spark import jobs
from rocketstore.verify import verify_store
from spark_conftest import small_config, spark  # noqa: F401 - the session fixture

pytestmark = pytest.mark.spark


def test_spark_rebuild_skips_the_records_of_a_deleted_topic(spark, tmp_path):  # noqa: F811
    store = tmp_path / "store"
    config = small_config()
    with MessageStore.open(store, config) as s:
        for i in range(30):
            assert s.put(Message("Kept", b"k-%d" % i, keys=f"k{i}"), i % 2).ok
            assert s.put(Message("Gone", b"old-%d" % i, keys=f"old{i}"), 0).ok
        assert s.wait_for_dispatch()
        assert s.delete_topics(["Gone"]) == ["Gone"]
        new = s.put(Message("Gone", b"new", keys="new"), 0)
        assert new.queue_offset == 0
    assert list(json.loads((store / "config" / "deletedTopics.json").read_text())["deletedTopicTable"]) == ["Gone"]
    for name in ("consumequeue", "index"):
        shutil.rmtree(store / name)
    result = jobs.rebuild(spark, str(store), config)
    assert result["records"] == 61 and result["units"] == 31
    with MessageStore.open(store, config) as s:
        got = s.get_message("g", "Gone", 0, 0, 32)
        assert got.status == GetMessageStatus.FOUND
        assert [(m.commit_log_offset, m.queue_offset, m.body) for m in got.messages] == [
            (new.commit_log_offset, 0, b"new")
        ]
        assert [m.body for m in s.query_message("Gone", "old3").messages] == [b"old-3"]
        assert [m.body for m in s.query_message("Gone", "new").messages] == [b"new"]
        assert s.get_max_offset_in_queue("Kept", 0) == 15 and s.get_max_offset_in_queue("Kept", 1) == 15
    report = verify_store(store, config)
    assert report.ok, report.problems
