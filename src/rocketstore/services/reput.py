"""The reput service: dispatches what the commit log holds past ``reput_from`` (spec 12.7).

Requests handed over by the put path are used when they line up with ``reput_from``; anything
else (data after a recovery, written by another process, or copied in by replication) is read
back from the log. The service never dispatches past ``end_offset()``: the log's end, or under
SYNC_FLUSH the flushed offset, so consumers never see a message a crash can still take away.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable

from rocketstore.codec.scan import D_OFFSET, D_SIZE, STOP_BAD, STOP_BLANK, mismatched_size
from rocketstore.files.mapped_file import MappedFile
from rocketstore.log.commitlog import CommitLog
from rocketstore.log.walk import walk_segment
from rocketstore.queues.dispatch import Dispatcher
from rocketstore.services.base import Service

log = logging.getLogger(__name__)
BUSY_BATCH = 512  # requests in one round that count as a stream of puts
BUSY_PAUSE = 0.010  # seconds; bounds the extra dispatch delay under load
STEADY_BATCH = 8  # requests in one round that count as a steady flow (SYNC_FLUSH producers, say)
STEADY_PAUSE = 0.005  # seconds; lets such a flow gather into rounds that dispatch in bulk
ROUND_PAUSE = 0.001  # seconds between rounds that dispatched something, as RocketMQ's reput sleeps 1 ms
FAILURES_BEFORE_ERROR = 3  # rounds failing in a row before the store is told (a passing fault is retried)


def _record_end(r: tuple) -> int:
    return r[D_OFFSET] + r[D_SIZE]


class ReputService(Service):
    name = "reput"

    def __init__(
        self,
        commit_log: CommitLog,
        dispatcher: Dispatcher,
        end_offset: Callable[[], int],
        delay_millis: tuple[int, ...],
        interval_ms: float = 10,
    ) -> None:
        super().__init__(interval_ms)
        self.commit_log = commit_log
        self.dispatcher = dispatcher
        self.end_offset = end_offset
        self.delay_millis = delay_millis
        self.reput_from = 0
        self.lock = threading.Lock()  # held by a dispatch round (removing a queue waits for it)
        self._carry: list[tuple] = []
        self._progress = threading.Condition()
        self.skipped_bad_bytes = 0
        self._last_batch = 0
        self._advanced = False
        # told at each failed round from the third in a row on (the store sets WRITE_LOGICS_QUEUE_ERROR
        # and stops taking puts, unless a full disk refuses them already)
        self.on_dispatch_failure: Callable[[BaseException], None] | None = None

    def on_failure(self, exc: BaseException) -> None:
        super().on_failure(exc)
        if self.failures >= FAILURES_BEFORE_ERROR and self.on_dispatch_failure is not None:
            self.on_dispatch_failure(exc)

    def behind(self) -> int:
        """dispatchBehindBytes: log bytes not yet dispatched."""
        return max(0, self.commit_log.max_offset() - self.reput_from)

    def run_once(self) -> int:
        """Dispatch what is ready; returns the number of log bytes advanced."""
        with self.lock:
            advanced = self._round()
        if advanced:
            with self._progress:
                self._progress.notify_all()
        return advanced

    def _round(self) -> int:
        cl = self.commit_log
        end = self.end_offset()
        min_offset = cl.min_offset()
        if self.reput_from < min_offset:
            self.reput_from = min_offset
        taken = cl.take_handoff()
        pending = self._carry + taken if self._carry else taken
        start = self.reput_from
        i, n = 0, len(pending)
        while self.reput_from < end:
            while i < n and pending[i][D_OFFSET] < self.reput_from:
                i += 1
            if i < n and pending[i][D_OFFSET] == self.reput_from:
                j = bisect.bisect_right(pending, end, lo=i, key=_record_end)
                if j == i:
                    break
                batch = pending[i:j]
                self.dispatcher.dispatch(batch)
                self.reput_from = _record_end(batch[-1])
                i = j
                continue
            limit = pending[i][D_OFFSET] if i < n else end
            if not self._dispatch_from_log(min(limit, end)):
                break
        self._carry = pending[i:]
        self._last_batch = len(taken)
        self._advanced = self.reput_from > start
        return self.reput_from - start

    def _dispatch_from_log(self, limit: int) -> bool:
        """Read records back from the log between ``reput_from`` and ``limit``; False if stuck."""
        mapped = self.commit_log.queue.find_by_offset(self.reput_from)
        if mapped is None:
            return False
        pos = self.reput_from - mapped.file_from_offset
        readable = mapped.read_position
        file_end = min(readable, limit - mapped.file_from_offset)
        if pos >= file_end:
            if readable >= mapped.file_size and pos >= readable:  # a full segment: go on to the next
                self.reput_from = mapped.end_offset
                return True
            return False
        stop, reason = walk_segment(
            mapped, pos, file_end, self.dispatcher.dispatch_records, check_crc=False, delay_millis=self.delay_millis
        )
        if reason == STOP_BLANK:
            new = mapped.end_offset
        elif reason == STOP_BAD:
            if file_end < readable:  # the record runs past what may be dispatched yet: wait
                new = mapped.file_from_offset + stop
            elif skip := self._mismatched_size(mapped, stop, file_end):
                log.error(
                    "reput: [BUG] the record at %d does not add up to its %d bytes; skipped",
                    mapped.file_from_offset + stop,
                    skip,
                )
                self.skipped_bad_bytes += skip
                new = mapped.file_from_offset + stop + skip
            else:
                log.error(
                    "reput: the record at %d fails its checks; skipping %d bytes to the end of written data",
                    mapped.file_from_offset + stop,
                    file_end - stop,
                )
                self.skipped_bad_bytes += file_end - stop
                new = mapped.file_from_offset + file_end
        else:
            new = mapped.file_from_offset + stop
        if new <= self.reput_from:
            return False
        self.reput_from = new
        return True

    @staticmethod
    def _mismatched_size(mapped: MappedFile, pos: int, end: int) -> int:
        """``scan.mismatched_size`` of the record at ``pos``, the segment held meanwhile."""
        if not mapped.hold():
            return 0
        try:
            return mismatched_size(mapped.mm, pos, end)
        finally:
            mapped.release()

    def pause_after_run(self) -> float:
        """After a round that dispatched, let the next records gather for a millisecond (RocketMQ's
        reput sleeps as long); under a steady flow for 5 ms, under a stream of puts for 10:
        dispatch works in bulk (numpy over the whole batch), and fewer, larger rounds cost the
        putting threads less of the GIL. The pauses bound how much later a consumer sees a
        message than without them."""
        if self._last_batch >= BUSY_BATCH:
            return BUSY_PAUSE
        if self._last_batch >= STEADY_BATCH:
            return STEADY_PAUSE
        return ROUND_PAUSE if self._advanced else 0.0

    def wait_caught_up(self, timeout: float | None = None) -> bool:
        """Block until everything in the log when called is dispatched (records put meanwhile
        are not waited for); False on timeout, or if the service stops short of it. (Under
        SYNC_FLUSH that takes the flush too: nothing past the flushed offset is dispatched; with
        the transient store pool, the commit: written bytes count, not only committed ones.)"""
        target = self.commit_log.queue.max_wrote_offset()
        with self._progress:
            return (
                self._progress.wait_for(lambda: self.reput_from >= target or not self.running, timeout)
                and self.reput_from >= target
            )

    def on_stop(self) -> None:
        try:
            self.run_once()
        finally:  # waiters see the service gone
            with self._progress:
                self._progress.notify_all()
