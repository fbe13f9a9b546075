"""Store layout checks: segment names, sizes and contiguity in every mapped-file folder, index file
sizes, the checkpoint (what loading the store needs)."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

from rocketstore.codec.record import BLANK_MAGIC_CODE
from rocketstore.config import StoreConfig
from rocketstore.errors import CorruptStoreError
from rocketstore.files.file_queue import SEGMENT_NAME
from rocketstore.files.mapped_file import dangling_link
from rocketstore.meta.root import misplaced_entries
from rocketstore.queues.consume_queue import CQ_STORE_UNIT_SIZE
from rocketstore.queues.consume_queues import queue_id_of
from rocketstore.queues.index_file import INDEX_HEADER_SIZE, index_file_size
from rocketstore.verify.report import VerifyReport

_END_BLANK = struct.pack(">ii", 8, BLANK_MAGIC_CODE)  # a segment's last 8 bytes after a BLANK of 8


def check_sizes(root: str, config: StoreConfig, *, derived: bool = True) -> None:
    """Raise CorruptStoreError with the settings to give when every file of a kind (commit log,
    consume queues, index) is one size other than the configured one: the configuration is not
    the store's (as loading it says), not a store with every file damaged. The segment names must
    agree with that size (multiples of it, contiguous), so that files cut short are damage.
    Without ``derived`` only the commit log is checked (a rebuild replaces the rest)."""
    wrong = []
    folders = [{n: os.path.join(f, n) for n in os.listdir(f)} for f in config.commit_log_folders if os.path.isdir(f)]
    merged = {name: path for group in reversed(folders) for name, path in group.items()}
    # one segment alone of another size may as well be one cut short (a partial copy: its zeros
    # end it whole): it takes two, as for the queues and the index below
    whole = sum(1 for path in merged.values() if os.path.isfile(path) and os.path.getsize(path))
    size = _common_size([merged], config.mapped_file_size_commit_log, segments=True) if whole > 1 else None
    if size is not None and all(_ends_whole(path) for path in merged.values()):
        wrong.append(_setting_hint("commitlog/", "mappedFileSizeCommitLog", config.mapped_file_size_commit_log, size))
    queues = []
    cq_root = os.path.join(root, "consumequeue")
    for topic in sorted(os.listdir(cq_root)) if derived and os.path.isdir(cq_root) else []:
        topic_dir = os.path.join(cq_root, topic)
        for qid in sorted(os.listdir(topic_dir)) if os.path.isdir(topic_dir) else []:
            queue_dir = os.path.join(topic_dir, qid)
            if queue_id_of(qid) is not None and os.path.isdir(queue_dir):
                queues.append({n: os.path.join(queue_dir, n) for n in os.listdir(queue_dir)})
    # one file alone of another size may as well be a file cut short: it takes two to say so
    size = _common_size(queues, config.cq_file_size, segments=True) if sum(map(len, queues)) > 1 else None
    if size is not None and size % CQ_STORE_UNIT_SIZE == 0:
        wrong.append(_setting_hint("consumequeue/", "mappedFileSizeConsumeQueue", config.cq_file_size, size))
    index_dir = os.path.join(root, "index")
    if derived and config.message_index_enable and os.path.isdir(index_dir):
        files = {n: os.path.join(index_dir, n) for n in os.listdir(index_dir) if n.isdigit()}
        expected = index_file_size(config.max_hash_slot_num, config.max_index_num)
        size = _common_size([files], expected, segments=False) if len(files) > 1 else None
        if size is not None and size > INDEX_HEADER_SIZE and (size - INDEX_HEADER_SIZE) % 4 == 0:
            wrong.append(
                f"index/: every file is {size} bytes, maxHashSlotNum={config.max_hash_slot_num} and "
                f"maxIndexNum={config.max_index_num} give {expected} (set them to the store's: "
                f"{INDEX_HEADER_SIZE} + 4 x maxHashSlotNum + 20 x maxIndexNum = {size})"
            )
    if wrong:
        raise CorruptStoreError(
            "the files are not the configured sizes (the configuration is not the store's): " + "; ".join(wrong), root
        )


def _ends_whole(path: str) -> bool:
    """A commit-log file whose data does not run into its end: its last 8 bytes are zeros (not
    written) or a BLANK marker of 8 bytes. A file cut short in the middle of its records is damage."""
    with open(path, "rb") as f:
        f.seek(max(os.fstat(f.fileno()).st_size - 8, 0))
        tail = f.read(8)
    return tail == bytes(8) or tail == _END_BLANK


def _setting_hint(folder: str, setting: str, configured: int, size: int) -> str:
    return f"{folder}: every file is {size} bytes, {setting} says {configured} (--set {setting}={size})"


def _common_size(groups: list[dict[str, str]], configured: int, *, segments: bool) -> int | None:
    """The one size of every file in ``groups`` (name -> path) when it is not ``configured``, else
    None; with ``segments``, 20-digit names that are contiguous multiples of that size, an empty
    last file left out (loading drops it)."""
    sizes = set()
    named: list[list[tuple[int, int]]] = []
    for group in groups:
        files = []
        for name, path in sorted(group.items()):
            if not os.path.isfile(path) or (segments and not SEGMENT_NAME.fullmatch(name)):
                return None  # a stray entry: the layout check names it
            files.append((int(name), os.path.getsize(path)))
        if segments and files and files[-1][1] == 0:
            files.pop()
        sizes.update(size for _, size in files)
        named.append(files)
    if len(sizes) != 1:
        return None
    size = sizes.pop()
    if size in (0, configured):
        return None
    for files in named if segments else []:
        if any(offset != files[0][0] + i * size or offset % size for i, (offset, _) in enumerate(files)):
            return None
    return size


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
            if queue_id_of(qid) is None or not os.path.isdir(queue_dir):
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
        elif dangling := dangling_link(full):
            problem(full, f"{dangling} (loading fails)")
        elif not SEGMENT_NAME.fullmatch(name):
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
            count = (offset - expect) // size  # a far-off name may leave billions: only three are named
            shown = ", ".join(f"{at:020d}" for at in range(expect, offset, size)[:3])
            shown += f" and {count - 3} more" if count > 3 else ""
            problem(
                full,
                f"a gap: {shown} {'is' if count == 1 else 'are'} missing (the file should start at {expect})",
            )
        expect = offset + size
