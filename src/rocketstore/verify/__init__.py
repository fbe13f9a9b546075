"""Verifying a store against its commit log (``rocketstore verify``).

The store is mapped as it is on disk (read-only, no recovery) and audited:

1. the file layout: segment names and sizes in ``commitlog/``, the queue folders, ``index/``;
2. the commit log: every record from the first segment, with its body CRC, its PHYSICALOFFSET
   field and the 8 bytes a segment keeps free after it; every BLANK marker's size; where recovery
   would end the log (its first bad record that data follows), and past it every later record
   (each damaged stretch is skipped and reported; the queue units and index entries recovery
   would truncate with the log are one line);
3. the consume queues: every unit against the record it points at (start, size, tags code,
   topic, queue id, queue offset), and every queued record against its queue;
4. the index: headers, slot table and chains, every entry against its record, and a hash query
   (by slot chain, as ``IndexFile.selectPhyOffset`` walks it) for every key of every record;
5. the config files (topics, consumer and delay offsets, subscription groups): each one usable,
   or else what loading falls back to (its backup's older state, or nothing);
6. the checkpoint: no timestamp later than the data it claims is flushed.

The report ends with the next step for each kind of problem found (``verify.next_steps``).

Damage that a crash leaves and recovery repairs (a torn record at the end of the log, queue
units past the log end, records not dispatched yet, index files newer than the checkpoint) is a
*note* when the ``abort`` file is present and a *problem* when it is not: a clean shutdown must
not leave it. Anything else wrong is a problem. The comparisons are numpy array operations, so a
store of millions of records is checked in one pass over its files.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

from rocketstore.config import StoreConfig
from rocketstore.errors import CorruptStoreError
from rocketstore.meta.lockfile import describe_holder, lock_holder
from rocketstore.meta.root import require_store
from rocketstore.store import MessageStore
from rocketstore.verify.checkpoint import check_checkpoint
from rocketstore.verify.commit_log import (
    LogColumns,
    SegmentScan,
    check_commit_log,
    join_segments,
    report_past_cut,
    scan_segment,
)
from rocketstore.verify.config_files import check_config_files
from rocketstore.verify.consume_queues import check_queues
from rocketstore.verify.index import check_index
from rocketstore.verify.layout import check_layout, check_sizes
from rocketstore.verify.next_steps import add_next_steps
from rocketstore.verify.report import VerifyReport, iter_problem_lines

__all__ = [
    "LogColumns",
    "SegmentScan",
    "VerifyReport",
    "iter_problem_lines",
    "join_segments",
    "scan_segment",
    "verify_store",
]


def verify_store(
    path: str | os.PathLike[str],
    config: StoreConfig | None = None,
    *,
    max_problems: int | None = None,
    progress: Callable[[int], None] | None = None,
    check_log: Callable[[MessageStore, VerifyReport], LogColumns] | None = None,
) -> VerifyReport:
    """Audit the store at ``path`` without changing it; see the module docstring for what is checked.

    ``max_problems`` limits how many problems (and notes) are listed; all are counted. A store that
    cannot be loaded (a stray or wrong-size file) is reported as a problem, not raised, but for
    files that are all one size other than the configured one (the configuration is not the
    store's): CorruptStoreError naming the settings to give.
    ``progress(n)`` is called as commit-log bytes are scanned (``n`` more each time).
    ``check_log`` replaces the commit-log scan (``rocketstore spark verify`` scans the segments
    as Spark tasks, then calls ``join_segments``).
    """
    root = os.path.abspath(os.fspath(path))
    config = (config or StoreConfig()).copy(storePathRootDir=root)
    require_store(root, config)
    check_sizes(root, config)
    report = VerifyReport(store=root, abort_file=os.path.exists(os.path.join(root, "abort")), max_listed=max_problems)
    _note_in_use(report)
    reported = check_layout(root, config, report)
    found: dict[str, int] = {}
    log: LogColumns | None = None
    try:
        store = MessageStore.open(root, config, read_only=True, recover=False)
    except CorruptStoreError as exc:
        if exc.path is None or os.path.abspath(exc.path) not in reported:
            report.problem(f"the store cannot be loaded: {exc}")
        report.note("the store could not be loaded: records, queues and index were not checked")
        add_next_steps(report, found, reported, config.commit_log_folders, log)
        return report
    try:
        with _counted(report, found, "log"):
            log = check_commit_log(store, report, progress) if check_log is None else check_log(store, report)
        with _counted(report, found, "queues"):
            check_queues(store, log, report)
        with _counted(report, found, "index"):
            check_index(store, log, report)
        with _counted(report, found, "log"):
            report_past_cut(log, report)
        with _counted(report, found, "config"):
            check_config_files(store, report)
        if store.delay_offsets.load_problem is not None:  # recover's rewrite restarts delivery
            found["delay offsets"] = 1
        with _counted(report, found, "checkpoint"):
            check_checkpoint(store, log, report)
    finally:
        store.shutdown()
    add_next_steps(report, found, reported, config.commit_log_folders, log)
    return report


@contextlib.contextmanager
def _counted(report: VerifyReport, found: dict[str, int], kind: str) -> Iterator[None]:
    """Count the problems a check adds under ``kind`` (for the next steps)."""
    before = report.problem_count
    yield
    found[kind] = found.get(kind, 0) + report.problem_count - before


def _note_in_use(report: VerifyReport) -> None:
    """A store a process has open (it holds the lock) is checked as a crash would leave it: say so."""

    report.lock_held_by = lock_holder(report.store)
    if report.lock_held_by is not None:
        report.note(
            f"the store is in use: {describe_holder(report.lock_held_by)} has it open, so the records at its "
            "tail and the queue units and index entries behind them may be mid-write (checked as a crash "
            "would leave them); verify the store once it is shut down for a full verdict"
        )
