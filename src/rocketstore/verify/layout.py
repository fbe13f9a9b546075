"""Store layout checks: segment names, sizes and contiguity in every mapped-file folder, index file
sizes, the checkpoint (what loading the store needs)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from rocketstore.config import StoreConfig
from rocketstore.meta.root import misplaced_entries
from rocketstore.queues.index_file import index_file_size
from rocketstore.verify.report import VerifyReport

_SEGMENT_NAME = re.compile(r"\d{20}")


def check_layout(root: str, config: StoreConfig, report: VerifyReport) -> set[str]:
    """File names and sizes, as loading needs them; returns the paths reported as problems."""
    bad: set[str] = set()

    def problem(path: str, text: str) -> None:
        bad.add(os.path.abspath(path))
        report.problem(f"{os.path.relpath(path, root)}: {text}")

    for path, kind in misplaced_entries(root, config):
        problem(path, f"should be {kind}")
    found: dict[str, str] = {}
    for folder in config.commit_log_folders:
        if os.path.isdir(folder):
            for name in sorted(os.listdir(folder)):
                found.setdefault(name, os.path.join(folder, name))
    _check_segments(found, config.mapped_file_size_commit_log, problem, report, root)

    cq_root = os.path.join(root, "consumequeue")
    for topic in sorted(os.listdir(cq_root)) if os.path.isdir(cq_root) else []:
        topic_dir = os.path.join(cq_root, topic)
        if not os.path.isdir(topic_dir):
            report.note(f"consumequeue/{topic}: not a topic folder, skipped")
            continue
        for qid in sorted(os.listdir(topic_dir)):
            queue_dir = os.path.join(topic_dir, qid)
            if not qid.isdigit() or not os.path.isdir(queue_dir):
                report.note(f"consumequeue/{topic}/{qid}: not a queue folder, skipped")
                continue
            files = {name: os.path.join(queue_dir, name) for name in os.listdir(queue_dir)}
            _check_segments(files, config.cq_file_size, problem, report, root)

    index_dir = os.path.join(root, "index")
    if config.message_index_enable and os.path.isdir(index_dir):
        size = index_file_size(config.max_hash_slot_num, config.max_index_num)
        for name in sorted(os.listdir(index_dir)):
            full = os.path.join(index_dir, name)
            if not name.isdigit() or not os.path.isfile(full):
                report.note(f"index/{name}: not an index file, skipped")
            elif os.path.getsize(full) != size:
                problem(
                    full,
                    f"{os.path.getsize(full)} bytes; maxHashSlotNum={config.max_hash_slot_num} and "
                    f"maxIndexNum={config.max_index_num} give {size}",
                )

    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if name.startswith(".rebuild-") and os.path.isdir(os.path.join(root, name)):
            report.note(f"{name}: left by a Spark rebuild that did not finish (the next rebuild removes it)")

    checkpoint = os.path.join(root, "checkpoint")
    if os.path.isfile(checkpoint) and os.path.getsize(checkpoint) < 24:
        problem(checkpoint, f"{os.path.getsize(checkpoint)} bytes, fewer than its three timestamps")
    return bad


def _check_segments(
    found: dict[str, str],
    size: int,
    problem: Callable[[str, str], None],
    report: VerifyReport,
    root: str,
) -> None:
    """One mapped-file queue folder: 20-digit names, the configured size, contiguous offsets (an
    empty last file is what a crash while creating it leaves: loading drops it)."""
    names = []
    for name, full in sorted(found.items()):
        if os.path.isdir(full):
            problem(full, "a folder where only segment files belong")
        elif not _SEGMENT_NAME.fullmatch(name):
            problem(full, "a stray file: segment files are named by their 20-digit start offset (loading fails)")
        else:
            names.append(name)
    if names and os.path.getsize(found[names[-1]]) == 0:
        report.note(f"{os.path.relpath(found[names[-1]], root)}: an empty last file (a crash while creating it)")
        names.pop()
    expect = None
    for name in names:
        full, offset = found[name], int(name)
        actual = os.path.getsize(full)
        if actual != size:
            problem(full, f"{actual} bytes, the configured size is {size} (loading fails)")
        if offset % size:
            problem(full, f"the start offset is not a multiple of the file size {size}")
        elif expect is not None and offset != expect:
            problem(full, f"a gap: the file should start at {expect}")
        expect = offset + size
