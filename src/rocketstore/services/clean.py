"""Retention and disk protection: RocketMQ's clean services (spec 14).

One service runs every ``cleanResourceInterval`` ms:

* **commit log** (``CleanCommitLogService``): when the hour is one of ``deleteWhen``, when the
  disk is fuller than ``diskMaxUsedSpaceRatio`` or after a manual request, a leading run of
  segments older than ``fileReservedTime`` hours (by modification time) is deleted, at most
  ``deleteFileBatchMax`` a run, ``deleteCommitLogFilesInterval`` ms apart, never the newest one.
  Past the clean-forcibly ratio (``cleanFileForciblyEnable``) young files go too. A segment
  still held by a reader is not unmapped until it is released or
  ``destroyMapedFileIntervalForcibly`` has passed; such a hanged first file is destroyed again
  every ``redeleteHangedFileInterval``.
* **disk watermarks**: past ``diskSpaceWarningLevelRatio`` the DISK_FULL running flag is set and
  puts are refused (``SERVICE_NOT_AVAILABLE``); it is cleared once usage is below again. With
  several commit-log folders, a folder past the clean-forcibly ratio takes no new segments.
* **queues and index** (``CleanConsumeQueueService``): once the commit log's minimum offset has
  grown, consume-queue files and index files lying wholly below it are deleted and each queue's
  minimum offset is corrected.

A service made with ``deletes=False`` (a store opened under ``services.wiring.no_cleanup``)
measures the disk as above and deletes nothing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rocketstore.config import StoreConfig
from rocketstore.config_values import delete_hours as parse_delete_when
from rocketstore.errors import InvalidArgumentError, StoreClosedError, shown
from rocketstore.files.disk import used_ratio
from rocketstore.log.commitlog import CommitLog
from rocketstore.queues.consume_queues import ConsumeQueueStore
from rocketstore.queues.index_service import IndexService
from rocketstore.reader import check_arguments
from rocketstore.reports import DiskReport, NextDeletion
from rocketstore.running_flags import DISK_FULL
from rocketstore.services.base import Service

log = logging.getLogger(__name__)
_LAST_SECOND = 253_402_300_799  # 9999-12-31 23:59:59 UTC: time.localtime takes epoch seconds up to it

MANUAL_DELETE_TIMES = 20  # executeDeleteFilesManually: this many runs delete as if it were time


@dataclass
class DiskCheck:
    """One evaluation of the disk watermarks (``isSpaceToDelete``)."""

    ratios: dict[str, float]  # used fraction per folder by its path: the commit log's and consumequeue/
    physic: float  # the least full commit-log folder
    logics: float
    space_to_delete: bool  # usage above diskMaxUsedSpaceRatio (or unmeasurable)
    clean_immediately: bool  # above the clean-forcibly ratio
    disk_full: bool  # above the warning ratio: puts are refused
    full_paths: frozenset[str]


@dataclass
class CleanRun:
    """What one round deleted."""

    commit_log_files: int = 0
    consume_queue_files: int = 0
    index_files: int = 0
    hanged_files: int = 0
    triggered_by: str = ""  # "time", "space", "manual" or "" when nothing triggered a deletion
    more_left: bool = False  # run_rounds: its rounds ran out while the last still deleted segments


class CleanService(Service):
    """Deletes what retention and the disk watermarks say must go; see the module docstring."""

    name = "clean"

    def __init__(
        self,
        commit_log: CommitLog,
        queues: ConsumeQueueStore,
        index: IndexService,
        config: StoreConfig,
        root: str,
        set_flags: Callable[[int, int], None],
        *,
        deletes: bool = True,
    ) -> None:
        super().__init__(config.clean_resource_interval)
        self.deletes = deletes  # False: the disk checks only, no file deleted
        self.commit_log = commit_log
        self.queues = queues
        self.index = index
        self.config = config
        self.root = root
        self.set_flags = set_flags
        self.manual_delete_times = 0
        self.full_paths: frozenset[str] = frozenset()
        self.last_check: DiskCheck | None = None
        # 0, as RocketMQ's lastPhysicalMinOffset: the first round after an open also drops queue and
        # index files a crash left behind between deleting segments and cleaning up after them
        self._last_min_offset = 0
        self._last_redelete = time.monotonic()
        self.round_lock = threading.Lock()  # held by a round, and by whatever must not run beside one
        self._check_lock = threading.Lock()  # one disk check at a time (the put, reput and clean threads)
        self._round_done = threading.Condition()
        self.rounds = 0  # rounds completed
        self._closed = False
        self.dispatched: Callable[[], int] | None = None  # where dispatch is: segments past it stay
        commit_log.queue.path_is_full = self.path_is_full
        commit_log.queue.paths_now = lambda: config.commit_log_paths  # a new segment goes where they are now
        commit_log.queue.on_create = self._on_new_segment

    def _on_new_segment(self, _mapped: object) -> None:
        """A new segment took disk space: measure at once (refusing the next put if the disk is
        past the warning ratio) and let the next round delete what must go."""
        check = self.check_disk()
        if check.space_to_delete and self.deletes:
            self.wake()

    # -- the round -----------------------------------------------------------------------------
    def run_once(self, now: float | None = None, *, manual: bool = False) -> CleanRun:
        """Commit-log cleanup, then the queues and index (``now``: epoch seconds, for the hour
        and the files' ages; ``manual``: delete expired files whatever the hour). Safe to call
        from any thread: rounds do not overlap."""
        with self.round_lock:
            if self._closed:
                raise StoreClosedError(f"{self.root} is shut down: no more cleanup")
            run = self.delete_expired_files(now, manual=manual)
            if self.deletes:
                run.hanged_files = self.redelete_hanged_file()
                run.consume_queue_files, run.index_files = self.delete_expired_queue_files()
        with self._round_done:
            self.rounds += 1
            self._round_done.notify_all()
        return run

    def run_rounds(self, now: float | None = None, *, manual: bool = True) -> CleanRun:
        """``store.clean_expired_files``: rounds now, in this thread, until one deletes no segment
        (at most ``MANUAL_DELETE_TIMES``, the rounds RocketMQ's ``executeDeleteFilesManually``
        arms: a writer rolling segments as fast would keep it going); the totals. ``now``: epoch
        seconds, a finite number (InvalidArgumentError else)."""
        now = checked_now("clean_expired_files", now)
        total = CleanRun()
        for _ in range(MANUAL_DELETE_TIMES):
            run = self.run_once(now, manual=manual)
            for name in ("commit_log_files", "consume_queue_files", "index_files", "hanged_files"):
                setattr(total, name, getattr(total, name) + getattr(run, name))
            total.triggered_by = total.triggered_by or run.triggered_by
            if not run.commit_log_files or not run.triggered_by:
                break
        else:
            total.more_left = True
        return total

    def close(self) -> None:
        """No more rounds: waits for one in progress (a caller's ``clean_expired_files``, say),
        so that nothing is deleted once the store's files are closed."""
        with self.round_lock:
            self._closed = True

    def wait_for_round(self, count: int, timeout: float | None = None) -> bool:
        """Block until ``count`` rounds have completed; False on timeout."""
        with self._round_done:
            return self._round_done.wait_for(lambda: self.rounds >= count, timeout)

    def execute_delete_files_manually(self) -> None:
        """Delete expired files in the next rounds even outside ``deleteWhen`` (RocketMQ's admin
        command ``deleteExpiredCommitLog``)."""
        self.manual_delete_times = MANUAL_DELETE_TIMES
        self.wake()

    def delete_expired_files(self, now: float | None = None, *, manual: bool = False) -> CleanRun:
        """``CleanCommitLogService.deleteExpiredFiles``: one batch of commit-log segments (none,
        the disk measured only, when the service ``deletes`` nothing)."""
        config = self.config
        now = time.time() if now is None else now
        time_up = self.is_time_to_delete(now)
        check = self.check_disk()
        requested = self.manual_delete_times > 0
        manual = manual or requested
        run = CleanRun()
        if not self.deletes or not (time_up or check.space_to_delete or manual):
            return run
        if requested:
            self.manual_delete_times -= 1
        run.triggered_by = "time" if time_up else "space" if check.space_to_delete else "manual"
        clean_at_once = config.clean_file_forcibly_enable and check.clean_immediately
        run.commit_log_files = self.commit_log.queue.delete_expired_by_time(
            config.file_reserved_time * 3600 * 1000,
            config.delete_commit_log_files_interval,
            config.destroy_maped_file_interval_forcibly,
            clean_at_once,
            config.delete_file_batch_max,
            now=now,
            keep_from=None if self.dispatched is None else self.dispatched(),
        )
        if run.commit_log_files:
            log.info(
                "deleted %d commit-log file(s) (%s%s); the log now starts at %d",
                run.commit_log_files,
                run.triggered_by,
                ", forcibly" if clean_at_once else "",
                self.commit_log.min_offset(),
            )
            self.check_disk()  # the space just freed may lift DISK_FULL before the next round
        return run

    def redelete_hanged_file(self) -> int:
        """Every ``redeleteHangedFileInterval``: destroy again a first segment a reader held."""
        if (time.monotonic() - self._last_redelete) * 1000 < self.config.redelete_hanged_file_interval:
            return 0
        self._last_redelete = time.monotonic()
        return int(self.commit_log.queue.retry_delete_first_file(self.config.destroy_maped_file_interval_forcibly))

    def delete_expired_queue_files(self) -> tuple[int, int]:
        """``CleanConsumeQueueService``: when the log's minimum grew, drop what lies below it."""
        min_offset = self.commit_log.min_offset()
        if min_offset <= self._last_min_offset:
            return 0, 0
        self._last_min_offset = min_offset
        cq_files = 0
        for cq in self.queues.queues():
            deleted = cq.delete_expired_files(min_offset)
            cq_files += deleted
            if deleted and self.config.delete_consume_queue_files_interval > 0:
                self._stopped.wait(self.config.delete_consume_queue_files_interval / 1000)
        index_files = self.index.delete_expired(min_offset)
        return cq_files, index_files

    # -- conditions ----------------------------------------------------------------------------
    def is_time_to_delete(self, now: float) -> bool:
        """``UtilAll.isItTimeToDo(deleteWhen)``: the local hour is one of the listed ones."""
        return time.localtime(now).tm_hour in delete_hours(self.config)

    def check_disk(self) -> DiskCheck:
        """``isSpaceToDelete``: measure the folders, set or clear DISK_FULL, mark full folders."""
        with self._check_lock:
            return self._check_disk()

    def _check_disk(self) -> DiskCheck:
        check = measure_disk(self.config, self.root)
        was_full = self.last_check is not None and self.last_check.disk_full
        self.full_paths = check.full_paths
        if check.disk_full:
            if not was_full:
                log.error(
                    "disk usage %.0f%% is over the warning ratio %.0f%%: puts are refused",
                    max(check.physic, check.logics) * 100,
                    self.config.disk_space_warning_ratio * 100,
                )
            self.set_flags(DISK_FULL, 0)
        else:
            if was_full:
                log.info("disk usage %.0f%% is below the warning ratio again: puts are accepted", check.physic * 100)
            self.set_flags(0, DISK_FULL)
        self.last_check = check
        return check

    def path_is_full(self, path: str) -> bool:
        """Whether a commit-log folder is past the clean-forcibly ratio (it takes no new segment)."""
        return path in self.full_paths

    def next_deletion(self, now: float | None = None) -> NextDeletion:
        return next_deletion(self.commit_log.queue.files, self.config, now)


def measure_disk(config: StoreConfig, root: str) -> DiskCheck:
    """The disk watermarks of a store's folders (``isSpaceToDelete`` without its side effects)."""
    warn = config.disk_space_warning_ratio
    force = config.disk_space_clean_forcibly_ratio_clamped
    most = config.disk_max_used_space_ratio_clamped / 100
    ratios = {path: used_ratio(path) for path in config.commit_log_paths}
    physic = min(ratios.values())
    queues = os.path.join(root, "consumequeue")
    logics = ratios[queues] = used_ratio(queues)
    disk_full = physic > warn or logics > warn
    clean_immediately = disk_full or physic > force or logics > force
    space = clean_immediately or physic < 0 or physic > most or logics < 0 or logics > most
    full_paths = frozenset(p for p in config.commit_log_paths if ratios[p] > force)
    return DiskCheck(ratios, physic, logics, space, clean_immediately, disk_full, full_paths)


def delete_hours(config: StoreConfig) -> set[int]:
    """The hours ``deleteWhen`` names ("04", "04;05"); StoreConfig refuses any other value."""
    return set(parse_delete_when(config.delete_when))


def next_deletion(files: list, config: StoreConfig, now: float | None = None) -> NextDeletion:
    """When the oldest segment goes by time: its age limit (mtime + ``fileReservedTime``) and the
    first ``deleteWhen`` hour at or after it, in epoch ms (None when there is a single segment:
    the newest is never deleted)."""
    now = time.time() if now is None else now
    if len(files) < 2:
        return {"file": None, "expiresAt": None, "deletesAt": None}
    first = files[0]
    try:
        expires = os.path.getmtime(first.path) + config.file_reserved_time * 3600
    except OSError:
        expires = now
    at = max(now, expires)
    hours = delete_hours(config)
    deletes_at = None
    for _ in range(49 if hours else 0):
        local = time.localtime(at)
        if local.tm_hour in hours:
            deletes_at = at
            break
        at = at - local.tm_min * 60 - local.tm_sec - at % 1 + 3600  # the next local hour
    return {
        "file": first.file_name,
        "expiresAt": int(expires * 1000),
        "deletesAt": int(deletes_at * 1000) if deletes_at is not None else None,
    }


def checked_now(call: str, now: object) -> float | None:
    """``now`` given to ``call``: None (the clock) or epoch seconds from 0 to the end of year 9999,
    as a float; InvalidArgumentError else."""
    (now,) = check_arguments(call, now=(now, (float, type(None))))
    if now is not None and not 0 <= now <= _LAST_SECOND:
        raise InvalidArgumentError(f"{call}: now must be epoch seconds from 0 to {_LAST_SECOND}, not {shown(now)}")
    return now


def disk_report(
    check: DiskCheck, config: StoreConfig, commit_log: CommitLog, flags: list[str], now: float | None = None
) -> DiskReport:
    """Disk usage per commit-log folder and of ``consumequeue/`` against the watermarks, and when
    the oldest segment is deleted by time."""
    now = checked_now("disk_report", now)
    return {
        "ratios": check.ratios,
        "diskMaxUsedSpaceRatio": config.disk_max_used_space_ratio_clamped / 100,
        "cleanForciblyRatio": config.disk_space_clean_forcibly_ratio_clamped,
        "warningRatio": config.disk_space_warning_ratio,
        "diskFull": check.disk_full,
        "cleanImmediately": check.clean_immediately,
        "fullPaths": sorted(check.full_paths),
        "deleteWhen": config.delete_when,
        "fileReservedTimeHours": config.file_reserved_time,
        "nextDeletion": next_deletion(commit_log.queue.files, config, now),
        "runningFlags": flags,
    }
