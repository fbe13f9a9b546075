"""The background services of a writable store: which ones run, how they are wired to the store
and to each other, and the order they start and stop in (RocketMQ's DefaultMessageStore
start/shutdown order).

The store's parts stay the store's; this object owns only the threads that work on them.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import numbers
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING

from rocketstore.codec.message import Message
from rocketstore.errors import FlushError, InvalidArgumentError, shown
from rocketstore.results import PutMessageStatus, PutResult
from rocketstore.running_flags import DISK_FULL, NOT_WRITEABLE, NOT_WRITEABLE_BITS, WRITE_LOGICS_QUEUE_ERROR
from rocketstore.services.base import Service
from rocketstore.services.clean import CleanService
from rocketstore.services.flush import (
    CommitRealTimeService,
    FlushConsumeQueueService,
    FlushRealTimeService,
    GroupCommitService,
)
from rocketstore.services.persist import ConfigPersistService
from rocketstore.services.schedule import ScheduleMessageService

if TYPE_CHECKING:
    from rocketstore.store import MessageStore

log = logging.getLogger(__name__)

Step = Callable[[Callable[[], object], str], None]  # runs one shutdown step, keeping its failure


class ShutdownSteps:
    """Runs shutdown steps, every one whatever the ones before did. A failed flush (the disk
    refused) turns the store not writeable through ``on_flush_failure``; any other failure is kept
    in ``errors``; an interrupt (Ctrl-C while dispatch is waited for) is kept in ``interrupt`` and
    raised by the caller once the rest is done, so the services are stopped and the files closed.
    A second interrupt is raised at once (a shutdown stuck on a dead disk can still be left)."""

    def __init__(self, on_flush_failure: Callable[[], None]) -> None:
        self.on_flush_failure = on_flush_failure
        self.flush_failed = False
        self.errors: list[Exception] = []
        self.interrupt: BaseException | None = None

    def __call__(self, action: Callable[[], object], what: str) -> None:
        try:
            action()
        except FlushError as exc:  # the disk refused: keep abort, the next open recovers
            log.error("shutdown could not flush (%s): %s", what, exc)
            self.on_flush_failure()
            self.flush_failed = True
        except Exception as exc:
            log.error("shutdown: %s failed: %s", what, exc)
            self.errors.append(exc)
        except BaseException as exc:
            if self.interrupt is not None:  # a second Ctrl-C: stop now (the files are still closed)
                raise
            log.warning("shutdown: %s interrupted (%s); the rest of the shutdown goes on", what, type(exc).__name__)
            self.interrupt = exc

    @property
    def clean(self) -> bool:
        return not (self.errors or self.flush_failed or self.interrupt)


_DELIVER_DELAYED: ContextVar[bool] = ContextVar("rocketstore_deliver_delayed", default=True)
_DELETE_FILES: ContextVar[bool] = ContextVar("rocketstore_delete_files", default=True)


@contextlib.contextmanager
def no_delayed_delivery() -> Iterator[None]:
    """Stores opened for writing in this block (by this thread or task) start no schedule service:
    they take delayed messages but deliver none for as long as they stay open. ``rocketstore
    import`` opens its store so: a delivery in the middle of an import would add a copy of a
    message whose delivered copy the import brings too."""
    token = _DELIVER_DELAYED.set(False)
    try:
        yield
    finally:
        _DELIVER_DELAYED.reset(token)


@contextlib.contextmanager
def no_cleanup() -> Iterator[None]:
    """Stores opened for writing in this block (by this thread or task) delete no file for as long
    as they stay open: no commit-log segment (by age, by disk space, forcibly or when asked), so no
    consume-queue or index file either. The disk is still measured: past
    diskSpaceWarningLevelRatio puts are refused (DISK_FULL) as in any store. ``rocketstore import``
    opens its store so: its count must be what the store holds, and cleanup forced by a filling
    disk would delete what it has just stored."""
    token = _DELETE_FILES.set(False)
    try:
        yield
    finally:
        _DELETE_FILES.reset(token)


class StoreServices:
    """The threads of one open, writable store. ``start`` once; ``stop`` (or ``stop_started``
    after a failed open) once. Read-only stores run none: their dispatch runs when asked."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.clean: CleanService | None = None
        self.flush: FlushRealTimeService | GroupCommitService | None = None
        self.commit: CommitRealTimeService | None = None  # with the transient store pool only
        self.flush_consume_queue: FlushConsumeQueueService | None = None
        self.persist: ConfigPersistService | None = None
        self.schedule: ScheduleMessageService | None = None  # not on a SLAVE, nor under no_delayed_delivery()
        self.all: list[Service] = []  # in stop order: cleanup first, so nothing is deleted during shutdown

    def start(self) -> None:
        """Create, wire and start every service the store's config calls for."""
        store = self.store
        config, commit_log, reput = store.config, store.commit_log, store.reput
        # appends wake the reput service, except under SYNC_FLUSH where only a flush can let it on
        if not config.is_sync_flush or config.read_un_committed:
            commit_log.wake_event = reput.wake_event
        if config.is_sync_flush:
            flush: FlushRealTimeService | GroupCommitService = GroupCommitService(commit_log, store.checkpoint, config)
            flush.on_flushed = reput.wake
            store.writer.flush_handler = self._sync_flush_handler(flush)
            store.writer.flush_wake = flush.wake
        else:
            flush = FlushRealTimeService(commit_log, store.checkpoint, config)
        flush.on_flush_failure = self._on_flush_failure
        if config.broker_role == "SYNC_MASTER":
            store.writer.flush_handler = _no_slave(store.writer.flush_handler)
        self.flush = flush
        reput.on_dispatch_failure = self._on_dispatch_failure
        self.flush_consume_queue = FlushConsumeQueueService(store.queues, store.checkpoint, config)
        self.persist = ConfigPersistService(
            (store.consumer_offsets, store.topics, store.subscription_groups), config.flush_consumer_offset_interval
        )
        # the commit log's flush stops before dispatch, as in RocketMQ: under SYNC_FLUSH dispatch
        # goes no further than the flush, so the last flush lets it finish
        self.all = [flush, reput, self.flush_consume_queue, self.persist]
        if store.pool is not None:  # commit before flush, at run time and at shutdown
            self.commit = CommitRealTimeService(commit_log, config, flush)
            self.commit.on_committed = reput.wake  # dispatch reads committed bytes only
            commit_log.wake_event = self.commit.wake_event  # appends wake the commit instead
            self.all.insert(0, self.commit)
        self.clean = CleanService(
            commit_log,
            store.queues,
            store.index,
            config,
            store.root,
            store.set_running_flags,
            deletes=_DELETE_FILES.get(),
        )
        self.clean.dispatched = lambda: reput.reput_from  # under SYNC_FLUSH or the pool, never past flushed/committed
        self.clean.check_disk()
        self.all.insert(0, self.clean)
        for service in self.all:
            service.start()
        # delayed delivery puts: a slave takes no puts
        if config.broker_role != "SLAVE" and _DELIVER_DELAYED.get():
            self.schedule = ScheduleMessageService(
                store.queues,
                store.reader.look_message_by_offset,
                self._redeliver,
                store.delay_offsets,
                store.delay_millis,
                config.flush_delay_offset_interval,
                commit_log=commit_log,
            )
            self.schedule.start()

    def stop_started(self) -> None:
        """After a failed open: stop the threads already running (their errors are the open's
        error's consequences, not news)."""
        for service in (self.schedule, *self.all):
            if service is not None and service.running:
                try:
                    service.stop()
                except Exception as exc:
                    log.warning("stopping %s after a failed open: %s", service.name, exc)

    def stop(self, step: Step, refuse_puts: Callable[[], None], wait_for_dispatch: float) -> None:
        """Stop every service in shutdown order, each through ``step`` (which keeps a failure
        and goes on): the schedule service while puts are still taken (it saves its offsets),
        then ``refuse_puts``, the last commit, up to ``wait_for_dispatch`` seconds for dispatch,
        every other service, and a caller's cleanup round still in progress."""
        if self.schedule is not None:
            step(self.schedule.stop, "stopping the schedule service")
        refuse_puts()
        self.store.commit_log.refuse_appends()  # and the puts already past that check
        if not self.all:
            return
        if self.commit is not None:  # puts are refused now: commit every written byte, so dispatch can finish
            step(self.commit.stop, "the last commit")
        if wait_for_dispatch > 0:
            step(lambda: self._wait_for_dispatch(wait_for_dispatch), "waiting for dispatch")
        for service in self.all:
            step(service.stop, f"stopping the {service.name} service")
        if self.clean is not None:
            step(self.clean.close, "ending cleanup")

    @staticmethod
    def shutdown_wait(seconds: object) -> float:
        """``shutdown``'s ``wait_for_dispatch``: seconds (None: as long as dispatch takes), checked
        before anything stops (InvalidArgumentError)."""
        if seconds is None:
            return math.inf
        if isinstance(seconds, numbers.Real) and not isinstance(seconds, bool):  # numpy's too
            try:
                value = float(seconds)
            except OverflowError:  # an int past any float: longer than anything
                return math.inf
            if not math.isnan(value):
                return value
        raise InvalidArgumentError(f"shutdown: wait_for_dispatch must be seconds or None, not {shown(seconds)}")

    def _wait_for_dispatch(self, seconds: float) -> None:
        """Wait up to ``seconds`` for dispatch to catch up; not at all when it cannot: the reput
        thread is stopped (its on_stop dispatches what is left), failing, or waits for a flush
        that a failed disk will not make."""
        deadline = time.monotonic() + seconds
        store, reput = self.store, self.store.reput
        while reput.behind() and time.monotonic() < deadline:
            if not reput.running or reput.failures or store.running_flags & NOT_WRITEABLE_BITS:
                return
            if reput.wait_caught_up(min(1.0, max(0.0, deadline - time.monotonic()))):
                return

    def _sync_flush_handler(self, service: GroupCommitService) -> Callable[[tuple], PutMessageStatus]:
        config = self.store.config
        wait_flushed = service.wait_flushed

        def wait_for_flush(result: tuple) -> PutMessageStatus:
            return wait_flushed(result[1] + result[2], config.sync_flush_timeout / 1000)

        return wait_for_flush

    def _on_dispatch_failure(self, error: BaseException) -> None:
        """Dispatch keeps failing: consumers see no new message of any topic. Like RocketMQ
        (makeLogicsQueueError), stop taking puts until the store is reopened. Not for want of
        room while DISK_FULL refuses puts already: cleanup is there to free room, and dispatch
        catches up once it has (told at every failed round from the third on)."""
        if self.store.running_flags & WRITE_LOGICS_QUEUE_ERROR:
            return
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            if not self.store.running_flags & DISK_FULL and self.clean is not None:
                self.clean.check_disk()  # the disk may have filled since cleanup last measured it
            if self.store.running_flags & DISK_FULL:
                return
        log.error("dispatch keeps failing (%s): the store stops taking writes", error)
        self.store.set_running_flags(set_bits=WRITE_LOGICS_QUEUE_ERROR)

    def _on_flush_failure(self, error: FlushError) -> None:
        """After a failed fsync the kernel may have dropped dirty pages: take no more writes."""
        log.error("the commit log could not be flushed (%s): the store stops taking writes", error)
        self.store.set_running_flags(set_bits=NOT_WRITEABLE)

    def _redeliver(self, message: Message, queue_id: int) -> PutResult:
        """The schedule service's put: as is (not delayed again), not waiting for a SYNC flush."""
        return self.store.writer.put_general(message, queue_id, schedule=False, wait=False, new_uniq=False)


def _no_slave(flushed: Callable[[tuple], PutMessageStatus] | None) -> Callable[[tuple], PutMessageStatus]:
    """A SYNC_MASTER's put answer: stored (and flushed, under SYNC_FLUSH) but never replicated,
    since no slave can connect to this store. RocketMQ 4.9 answers SLAVE_NOT_AVAILABLE when no
    slave is in sync (submitReplicaRequest), and that answer overrides a flush timeout (spec
    13.5); a put with WAIT=false is not asked. (RocketMQ 5 with inSyncReplicas <= 1 does not wait.)"""
    ok, no_slave = PutMessageStatus.PUT_OK, PutMessageStatus.SLAVE_NOT_AVAILABLE
    overridden = (ok, PutMessageStatus.FLUSH_DISK_TIMEOUT)

    def answer(result: tuple) -> PutMessageStatus:
        status = ok if flushed is None else flushed(result)
        return no_slave if status in overridden else status

    return answer
