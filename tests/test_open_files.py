"""A store at the limit of open files: every mapped file takes two descriptors (its own and its
mapping's), and the store keeps some back for the rest, so that a store that reached the limit
still shuts down cleanly (checkpoint, config files) and opens again under it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

_CHILD = """
import resource, sys
sys.path.insert(0, {src!r})
resource.setrlimit(resource.RLIMIT_NOFILE, (160, 160))
from rocketstore import Message, MessageStore
settings = dict(mappedFileSizeCommitLog=4096, mappedFileSizeConsumeQueue=200, brokerIP1="127.0.0.1")
with MessageStore.open({root!r}, **settings) as store:
    for i in range(100_000):
        result = store.put(Message("T", b"x" * 1000))
        if not result.ok:
            break
    print(i, result.status, result.detail, flush=True)
print("abort left:", __import__("os").path.exists({root!r} + "/abort"), flush=True)
with MessageStore.open({root!r}, **settings) as store:
    print("reopened:", store.get_max_offset_in_queue("T", 0), flush=True)
"""


def test_a_store_at_the_limit_of_open_files_refuses_puts_and_still_shuts_down_cleanly(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    child = subprocess.run(
        [sys.executable, "-c", _CHILD.format(src=str(SRC), root=root)], capture_output=True, text=True, timeout=300
    )
    assert child.returncode == 0, child.stderr
    refused, abort, reopened = child.stdout.splitlines()
    stored, status, detail = refused.split(" ", 2)
    assert status == "CREATE_MAPPED_FILE_FAILED" and int(stored) > 20, refused
    assert "open files" in detail and "ulimit -Hn" in detail, detail
    assert abort == "abort left: False", child.stderr
    assert reopened == f"reopened: {stored}", child.stderr


def test_the_spark_tasks_give_back_the_descriptors_of_the_segments_they_scan(tmp_path: Path) -> None:
    """A rebuild or verify task maps each segment of its group and unmaps it: the descriptors it
    counted go back, or a Python worker Spark reuses for task after task would count them all
    and refuse files (EMFILE) the process could still open."""
    import pytest

    pytest.importorskip("pyspark")
    from rocketstore import Message, MessageStore, StoreConfig
    from rocketstore.files import mapped_file
    from rocketstore.spark.jobs import _scan_for_rebuild, list_segments
    from rocketstore.spark.verify_job import _scan_group

    config = StoreConfig(mappedFileSizeCommitLog=4096, mappedFileSizeConsumeQueue=200, brokerIP1="127.0.0.1")
    root = tmp_path / "store"
    with MessageStore.open(root, config) as store:
        for _ in range(30):
            store.put(Message("T", b"x" * 1000)).raise_for_status()
    segments = list_segments(str(root), config)
    assert len(segments) > 5
    before = mapped_file._fds_held
    (tmp_path / "out").mkdir()
    _scan_for_rebuild(segments, str(tmp_path / "out"), (1000,), {})
    _scan_group(segments, (1000,), None, False, str(root))
    assert mapped_file._fds_held == before
