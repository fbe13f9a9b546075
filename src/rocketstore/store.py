"""MessageStore: opens a store folder, wires the parts together and owns the lock.

A store opened normally takes the ``lock`` file, writes the ``abort`` marker before recovery changes any
file, recovers and starts its services; ``shutdown`` reverses that. A store opened with ``read_only=True``
maps every file copy-on-write: recovery and dispatch run in memory and nothing on disk changes, which is
how ``rocketstore export`` and the Spark reader see a store as RocketMQ would serve it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from rocketstore import topic_deletion
from rocketstore.closing import close_files, write_back
from rocketstore.codec.message import JAVA_INT, JAVA_LONG, Message, StoredMessage
from rocketstore.codec.topic import validate_group, validate_topic
from rocketstore.config import StoreConfig, delay_level_millis
from rocketstore.config_values import refuse_unsupported
from rocketstore.errors import (
    ConfigError,
    InvalidArgumentError,
    ReadOnlyStoreError,
    RocketStoreError,
    StoreClosedError,
    StoreFileError,
    StoreNotReadableError,
    shown,
)
from rocketstore.files.allocate import SegmentAllocator
from rocketstore.files.transient_pool import TransientStorePool
from rocketstore.log.commitlog import CommitLog
from rocketstore.log.recovery import ConfirmCut, RecoveryReport, recover
from rocketstore.meta.checkpoint import StoreCheckpoint
from rocketstore.meta.deleted_topics import FILE_NAME as DELETED_TOPICS_FILE
from rocketstore.meta.deleted_topics import DeletedTopics
from rocketstore.meta.lockfile import StoreLock
from rocketstore.meta.offset_files import ConsumerOffsetManager, DelayOffsetManager
from rocketstore.meta.root import check_entries, remove_abort, require_store, root_of, write_abort
from rocketstore.meta.subscription_groups import SubscriptionGroupManager
from rocketstore.meta.topic_config import TopicConfigManager
from rocketstore.open_stores import OPEN
from rocketstore.queues.consume_queues import ConsumeQueueStore
from rocketstore.queues.dispatch import Dispatcher
from rocketstore.queues.index_service import IndexService
from rocketstore.reader import MessageReader, check_arguments
from rocketstore.reports import DiskReport, ScheduleLevel
from rocketstore.results import GetResult, PutResult, QueryResult
from rocketstore.retry import send_back
from rocketstore.running_flags import NOT_READABLE, NOT_WRITEABLE, check_bits
from rocketstore.running_flags import describe as describe_flags
from rocketstore.services.clean import CleanRun, disk_report, measure_disk
from rocketstore.services.reput import ReputService
from rocketstore.services.schedule import schedule_report
from rocketstore.services.wiring import ShutdownSteps, StoreServices
from rocketstore.writer import MessageWriter

log = logging.getLogger(__name__)
T = TypeVar("T")


class MessageStore:
    """A RocketMQ message store in a folder. Use :meth:`open`."""

    def __init__(self, root: str, config: StoreConfig, read_only: bool) -> None:
        self.root = root
        self.config = config
        self.read_only = read_only
        self.mode = "cow" if read_only else "rw"
        self.running_flags = 0
        self.recovery: RecoveryReport | None = None
        self.last_exit_ok = True
        self._closed = False
        self._shutting_down = False  # closed, but its services (flush, clean, dispatch) may still set flags
        self._shutdown_lock = threading.Lock()
        self._shut_down = threading.Event()  # set once a shutdown is over (files closed, lock released)
        self._shutting_thread: int | None = None  # the thread whose shutdown is under way
        self._flags_lock = threading.RLock()  # flags change from the flush, clean and put threads
        self._lock = StoreLock(root)
        self.allocator: SegmentAllocator | None = None
        self.reput: ReputService | None = None
        self.services = StoreServices(self)  # the threads; none run for a read-only store

    # -- opening -------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        config: StoreConfig | None = None,
        *,
        read_only: bool = False,
        recover: bool = True,
        create: bool = True,
        last_exit_ok: bool | None = None,
        confirm_cut: ConfirmCut | None = None,
        **settings: object,
    ) -> MessageStore:
        """Open (or create) the store at ``path``; ``settings`` are MessageStoreConfig keys.

        ``read_only=True`` changes nothing on disk (recovery runs in memory); for it alone,
        ``recover=False`` maps the files as they are (tools that inspect the raw state) and
        ``last_exit_ok`` recovers as after a clean exit (True) or a crash, whatever ``abort`` says.
        ``create=False`` (implied by ``read_only``) raises StoreNotFoundError unless ``path``
        already holds a store. Raises StoreLockedError when another process or store object has
        it open, and CorruptStoreError naming the file when a file cannot belong to a RocketMQ
        store. ``confirm_cut(report)`` is called before recovery cuts the log where records may be
        lost (``log.recovery.recover``): an error it raises ends the open with nothing written.
        """
        if not isinstance(config, StoreConfig | None):
            raise InvalidArgumentError(f"config is a StoreConfig (or None), not {type(config).__name__}")
        if not read_only and (not recover or last_exit_ok is not None):
            raise InvalidArgumentError("recover=False and last_exit_ok are only for read-only opens")
        root = root_of(path)
        if confirm_cut is not None and not callable(confirm_cut):
            raise InvalidArgumentError(f"confirm_cut is a function of a RecoveryReport, not {shown(confirm_cut)}")
        config = (config or StoreConfig()).copy(**settings)
        config.store_path_root_dir = root
        if read_only or not create:
            require_store(root, config)
        if not read_only:  # settings a writable store would get wrong: refused before a folder is made
            refuse_unsupported(config)
        check_entries(root, config)
        for attempt in (1, 2, 3):
            store = cls(root, config, read_only)
            try:
                store._open(recover, confirm_cut, last_exit_ok)
                if not read_only:
                    OPEN.add(store)
                return store
            except OSError as exc:
                if isinstance(exc, RocketStoreError):
                    raise
                if not (read_only and isinstance(exc, FileNotFoundError)):
                    raise StoreFileError.of(exc, f"the store at {root} cannot be opened") from exc
                if attempt == 3:  # a read-only open of a live store: its cleanup deleted a file
                    raise RocketStoreError(f"{root} kept changing while it was opened: {exc}") from exc
        raise AssertionError("unreachable")

    def _open(self, recover_files: bool, confirm_cut: ConfirmCut | None, clean_exit: bool | None) -> None:
        config, root, mode = self.config, self.root, self.mode
        if not self.read_only:
            os.makedirs(root, exist_ok=True)
            self._lock.acquire()
        try:
            self.last_exit_ok = not os.path.exists(os.path.join(root, "abort")) if clean_exit is None else clean_exit
            conf = os.path.join(root, "config")
            writable = not self.read_only
            self.topics = TopicConfigManager(os.path.join(conf, "topics.json"), writable=writable)
            self.consumer_offsets = ConsumerOffsetManager(os.path.join(conf, "consumerOffset.json"), writable=writable)
            self.delay_offsets = DelayOffsetManager(os.path.join(conf, "delayOffset.json"), writable=writable)
            self.subscription_groups = SubscriptionGroupManager(
                os.path.join(conf, "subscriptionGroup.json"), writable=writable
            )
            # rocketstore's own: the topics delete_topics removed, and where the log ended then
            self.deleted_topics = DeletedTopics(os.path.join(conf, DELETED_TOPICS_FILE), writable=writable)
            self.consumer_offsets.on_dropped = self.deleted_topics.offsets_dropped
            managers = (self.topics, self.consumer_offsets, self.delay_offsets, self.subscription_groups)
            for manager in (*managers, self.deleted_topics):
                manager.load()
            if writable and (batch := self.topics.batch_cq_topics()):  # before recovery changes anything
                raise ConfigError(f"topics {', '.join(batch)} use BatchCQ consume queues, which are not supported")
            self.allocator = None if self.read_only else SegmentAllocator(warm=config.warm_maped_file_enable)
            pooled = config.uses_transient_store_pool and not self.read_only
            self.pool: TransientStorePool | None = TransientStorePool.of(config) if pooled else None
            self._sync_flush = config.is_sync_flush  # fixed at the open, as the flush service chosen
            self.commit_log = CommitLog(
                config.commit_log_paths,
                config.mapped_file_size_commit_log,
                mode,
                allocator=self.allocator,
                pool=self.pool,
                read_only_paths=config.commit_log_read_only_paths,
            )
            self.queues = ConsumeQueueStore(root, config.cq_file_size, mode)
            self.commit_log.load()
            self.queues.load()
            self.checkpoint = StoreCheckpoint(os.path.join(root, "checkpoint"), writable=not self.read_only)
            # loaded, queried and cleaned up whatever messageIndexEnable says: it decides only whether
            # records are indexed (RocketMQ's CommitLogDispatcherBuildIndex)
            self.index = IndexService(root, config.max_hash_slot_num, config.max_index_num, mode, self.checkpoint)
            self.index.load(self.last_exit_ok or not recover_files)
            self.index.allocator = self.allocator
            self.dispatcher = Dispatcher(self.queues, self.index, self.checkpoint, config)
            self.dispatcher.set_deleted(self.deleted_topics.table)  # their old records are not dispatched again
            self.delay_millis = delay_level_millis(config.message_delay_level)
            if not self.read_only:  # recovery changes files: an open cut short recovers as after a crash
                write_abort(self.root)
            if recover_files:
                self.recovery = recover(
                    self.commit_log,
                    self.queues,
                    self.index if config.message_index_enable else None,
                    self.checkpoint,
                    self.dispatcher,
                    last_exit_ok=self.last_exit_ok,
                    check_crc=config.check_crc_on_recover,
                    delay_millis=self.delay_millis,
                    message_index_safe=config.message_index_enable and config.message_index_safe,
                    prop_crc=config.force_verify_prop_crc,
                    confirm_cut=confirm_cut and (lambda report: self._confirm_cut(confirm_cut, report)),
                )
                # no deleted record is past the recovered end; a cut-short deletion is finished
                self.dispatcher.set_deleted(self.deleted_topics.lower_to(self.commit_log.max_offset()))
                self.queues.remove_deleted_leftovers(self.deleted_topics.table)
            self.commit_log.reset_topic_queue_table(self.queues.offset_table())
            self.queues.correct_min_offsets(self.commit_log.min_offset())
            if writable:  # topics created by puts just before a crash: their queues name them
                for topic, queue_ids in self.queues.topics().items():
                    if self.topics.find(topic) is None:  # every queue found, not only the first
                        self.topics.ensure(topic, max(queue_ids))
                topic_deletion.drop_leftover_offsets(self)
            self.writer = None if self.read_only else MessageWriter(self.commit_log, config, self._on_new_queue)
            self.reader = MessageReader(self.commit_log, self.queues, self.index, config)
            self.reput = ReputService(self.commit_log, self.dispatcher, self._dispatch_end_offset, self.delay_millis)
            self.reput.reput_from = self.commit_log.max_offset()
            if not self.read_only:
                self._update_refusal()
                self.put = self.writer.put  # the hot path, without the method call
                self.services.start()
        except BaseException:
            self.services.stop_started()
            close_files(self)
            if not self.read_only:
                self._lock.release()
            raise

    def _confirm_cut(self, confirm: ConfirmCut, report: RecoveryReport) -> None:
        try:
            confirm(report)
        except BaseException:  # the open changed nothing: it leaves no abort behind
            if self.last_exit_ok and not self.read_only:
                remove_abort(self.root)
            raise

    def _dispatch_end_offset(self) -> int:
        if self._sync_flush and not self.config.read_un_committed:
            return self.commit_log.flushed_where
        if self.pool is not None:  # readers see committed bytes only (spec 13.3): dispatch no further
            return self.commit_log.queue.committed_where
        return self.commit_log.max_offset()

    def _on_new_queue(self, key: tuple[str, int]) -> None:
        self.topics.ensure(*key)

    def __enter__(self) -> MessageStore:
        self._readable()  # a store shut down: StoreClosedError, as from every call
        return self

    def __exit__(self, _type: object, error: BaseException | None, _tb: object) -> None:
        """Shut down. When the block raised, a failed shutdown (which still runs whole) does not
        replace its error: it is logged and added to it as a note, and the block's error goes on."""
        if error is None:
            return self.shutdown()
        try:
            self.shutdown()
        except Exception as failure:
            log.error("the shutdown after %s failed too: %s", type(error).__name__, failure)
            error.add_note(f"the store's shutdown failed too: {failure}")

    # -- writing -------------------------------------------------------------------------------
    def _update_refusal(self) -> None:
        """Tell the writer whether puts are refused now, and how (read on every put)."""
        if (writer := getattr(self, "writer", None)) is None:
            return
        with self._flags_lock:
            writer.refusal = self._raise_closed if self._closed else writer.refusal_for(self.running_flags)

    def _close_in_child(self) -> None:
        """A forked child's view of a store its parent has open: closed, and never shut down."""
        self._closed = True
        self._shut_down.set()  # a shutdown in the child waits for none
        if getattr(self, "writer", None) is not None:  # puts check this, not _closed
            self.writer.refusal = self._raise_closed

    def _raise_closed(self) -> PutResult:
        raise StoreClosedError(f"{self.root} is shut down")

    def set_running_flags(self, set_bits: int = 0, clear_bits: int = 0) -> None:
        """Set and clear RunningFlags bits (DISK_FULL, NOT_WRITEABLE, ...). StoreClosedError once
        the store is shut down (while it shuts down, its services and steps still set them)."""
        set_bits, clear_bits = check_arguments(
            "set_running_flags", set_bits=(set_bits, int), clear_bits=(clear_bits, int)
        )
        check_bits(set_bits | clear_bits)
        if not self._shutting_down:
            self._readable()
        with self._flags_lock:
            self.running_flags = (self.running_flags | set_bits) & ~clear_bits
            self._update_refusal()

    def put(self, message: Message, queue_id: int = 0) -> PutResult:
        """Store one message in ``queue_id`` of its topic. (An open, writable store replaces this
        method on the instance with the writer's put function: the same checks, one call less.)"""
        self._writable()
        return self.writer.put(message, queue_id)

    def put_batch(
        self, messages: Sequence[Message], queue_id: int = 0, properties: Mapping[str, str] | None = None
    ) -> PutResult:
        """Store messages of one topic as consecutive records; ``properties`` are added to each."""
        self._writable()
        return self.writer.put_batch(messages, queue_id, properties)

    def put_as_is(self, message: Message, queue_id: int = 0) -> PutResult:
        """Store ``message`` exactly as given: a ``DELAY`` property is kept but does not delay it.
        This is how ``rocketstore import`` keeps messages as they were."""
        self._writable()
        return self.writer.put_general(message, queue_id, schedule=False, new_uniq=False)

    # -- delayed messages, retry and dead letters ----------------------------------------------------
    def send_back(
        self,
        group: str,
        message: StoredMessage | int,
        *,
        delay_level: int = 0,
        max_reconsume_times: int | None = None,
    ) -> PutResult:
        """A consumer of ``group`` failed ``message`` (a stored message or its commit-log offset):
        store it again for a retry, or in the group's dead-letter topic (RocketMQ's
        ``consumerSendMsgBack``, spec 17.3).

        The retry goes to ``%RETRY%<group>`` through the schedule topic with delay level
        ``delay_level`` (0: 3 + reconsumeTimes); once ``reconsumeTimes`` reaches
        ``max_reconsume_times`` (None: the group's ``retryMaxTimes``, 16 unless
        ``subscriptionGroup.json`` says otherwise; -1: 16) or ``delay_level`` < 0, it goes to
        ``%DLQ%<group>``. A retry goes to one of the group's ``retryQueueNums`` queues, at
        random; a group with none sends nothing back (refused), nor does a ``%RETRY%<group>``
        whose perm has no write bit. The group and the topics are created if missing, before
        the put (as RocketMQ does): a refused put leaves them.
        """
        self._writable()
        return send_back(self, group, message, delay_level, max_reconsume_times)

    def schedule_report(self, now: int | None = None) -> list[ScheduleLevel]:
        """Delayed messages per level: delivered offset, queue end, lag and when the next is due."""
        self._readable()
        return schedule_report(self.queues, self.delay_offsets, self.config.message_delay_level.split(), now)

    # -- reading -------------------------------------------------------------------------------
    def _readable(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self.root} is shut down")

    def _answered(self, result: T) -> T:
        """``result``, unless a shutdown began during the read (files may have closed under it)."""
        self._readable()
        return result

    def _writable(self) -> None:
        self._readable()
        if self.read_only:
            raise ReadOnlyStoreError(f"{self.root} is open read-only")

    def get_message(
        self, group: str, topic: str, queue_id: int, offset: int, max_nums: int = 32, tags: str | None = None
    ) -> GetResult:
        """Pull up to ``max_nums`` messages of a queue from ``offset`` (tags: ``"*"`` or ``"a || b"``);
        at least one, as RocketMQ's isTheBatchFull takes the first (``max_nums`` 0 or less gives one).
        StoreNotReadableError while the NOT_READABLE running flag is set."""
        self._readable()
        if self.running_flags & NOT_READABLE:
            raise StoreNotReadableError(f"{self.root} is not readable (running flag NOT_READABLE): no pulls")
        return self._answered(self.reader.get_message(group, topic, queue_id, offset, max_nums, tags))

    def look_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> StoredMessage | None:
        """The message whose record starts at ``commit_log_offset`` in the log; None if none does."""
        self._readable()
        return self._answered(self.reader.look_message_by_offset(commit_log_offset, size))

    def look_message_by_msg_id(self, msg_id: str) -> StoredMessage | None:
        """The message an offset msgId (its store host and commit-log offset) names; None if none."""
        self._readable()
        return self._answered(self.reader.look_message_by_msg_id(msg_id))

    def query_message(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int | None = None
    ) -> QueryResult:
        """Messages of ``topic`` with ``key`` (KEYS, UNIQ_KEY) stored in [begin, end] (ms, compared in the index's
        whole seconds), hash collisions dropped: the newest, at most ``max_num`` and maxMsgsNumBatch (RocketMQ's)."""
        self._readable()
        return self._answered(self.reader.query_message(topic, key, max_num, begin, end))

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset stored at or after ``timestamp`` (RocketMQ 5.3.3's LOWER boundary)."""
        self._readable()
        return self._answered(self.reader.get_offset_in_queue_by_time(topic, queue_id, timestamp))

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        """The store time of the message at ``offset`` of the queue (ms), -1 if none."""
        self._readable()
        return self._answered(self.reader.get_message_store_timestamp(topic, queue_id, offset))

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int | None = None) -> int:
        """The store time of the log's oldest message, or a topic's queue's (queue 0 unless given); -1 if none.
        A ``queue_id`` without its ``topic`` is an InvalidArgumentError."""
        self._readable()
        if topic is None and queue_id is not None:
            raise InvalidArgumentError(f"get_earliest_message_time: queue_id needs its topic (queue_id={queue_id!r})")
        return self._answered(self.reader.get_earliest_message_time(topic, queue_id))

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The queue's first offset that retention has not removed (0 for a queue the store lacks)."""
        self._readable()
        return self._answered(self.reader.min_offset_in_queue(topic, queue_id))

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The queue's next offset: one past its last message (0 for a queue the store lacks)."""
        self._readable()
        return self._answered(self.reader.max_offset_in_queue(topic, queue_id))

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        """The commit-log offset of the message at ``offset`` of the queue, 0 if none."""
        self._readable()
        return self._answered(self.reader.get_commit_log_offset_in_queue(topic, queue_id, offset))

    @property
    def min_phy_offset(self) -> int:
        """The commit log's first offset (what retention has not removed)."""
        self._readable()
        return self.commit_log.min_offset()

    @property
    def max_phy_offset(self) -> int:
        """The commit log's end: where the next record is written."""
        self._readable()
        return self.commit_log.max_offset()

    def positions(self) -> dict[str, int]:
        """The commit log's wrote >= committed >= flushed offsets (committed lags only with the
        transient store pool; flushed lags under ASYNC_FLUSH), and where dispatch has got to."""
        self._readable()
        queue = self.commit_log.queue
        return {
            "wrote": queue.max_wrote_offset(),
            "committed": queue.committed_where if self.pool is not None else queue.max_offset(),
            "flushed": queue.flushed_where,
            "dispatched": self.reput.reput_from if self.reput else queue.max_offset(),
        }

    def queue_ids(self) -> dict[str, list[int]]:
        """Every topic with a consume queue, and its queue ids."""
        self._readable()
        return self.queues.topics()

    # -- consumer offsets ------------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` as the next offset ``group`` consumes (persisted in consumerOffset.json)."""
        self._writable()
        validate_group(group)
        validate_topic(topic)
        queue_id, offset = check_arguments("commit_offset", queue_id=(queue_id, int), offset=(offset, int))
        if not (0 <= queue_id <= JAVA_INT[1] and 0 <= offset <= JAVA_LONG[1]):
            raise InvalidArgumentError(f"commit_offset: queue id {queue_id} or offset {offset} is out of range")
        self.consumer_offsets.commit(group, topic, queue_id, offset)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset of ``group``, -1 when it has none."""
        self._readable()
        validate_group(group)
        validate_topic(topic)
        (queue_id,) = check_arguments("query_offset", queue_id=(queue_id, int))
        return self.consumer_offsets.query(group, topic, queue_id)

    # -- dispatch ----------------------------------------------------------------------------------
    def dispatch_behind_bytes(self) -> int:
        """Log bytes not dispatched to the consume queues and index yet (dispatchBehindBytes)."""
        self._readable()
        return self.reput.behind() if self.reput else 0

    def wait_for_dispatch(self, timeout: float | None = 30.0) -> bool:
        """Block until everything in the log when called is dispatched; False after ``timeout`` seconds."""
        self._readable()
        try:  # checked as shutdown's wait_for_dispatch (None and any timeout past a lock's wait: none)
            timeout = StoreServices.shutdown_wait(timeout)
        except InvalidArgumentError:
            raise InvalidArgumentError(f"wait_for_dispatch: timeout is seconds or None, not {shown(timeout)}") from None
        if self.read_only or not self.reput.running:
            self.reput.run_once()
            return self.reput.behind() == 0
        if self.services.commit is not None:  # what the pool holds reaches the files (and dispatch) now
            self.services.commit.commit_all_soon()
        self.reput.wake()
        return self.reput.wait_caught_up(None if timeout > threading.TIMEOUT_MAX else timeout)

    def flush(self) -> None:
        """Force everything written so far to disk (commit log, queues, index, checkpoint)."""
        self._readable()
        if self.read_only:
            return
        queue = self.commit_log.queue
        if self.pool is not None:  # bytes still in the write buffers go to the files first
            while not queue.commit(0):
                pass
        while not queue.flush(0):
            pass
        if queue.store_timestamp:
            self.checkpoint.physic_msg_timestamp = queue.store_timestamp
        dispatched = self.checkpoint.logics_dispatched_timestamp
        self.queues.flush(0)
        self.index.flush()
        self.checkpoint.consume_queues_flushed(dispatched)

    # -- retention -----------------------------------------------------------------------------------
    def clean_expired_files(self, *, manually: bool = True, now: float | None = None) -> CleanRun:
        """Run cleanup rounds now, in this thread, until one deletes nothing (at most 20, the
        rounds RocketMQ's ``executeDeleteFilesManually`` arms); the totals.

        ``manually`` deletes expired files outside ``deleteWhen`` (RocketMQ's
        ``executeDeleteFilesManually``); without it a round deletes only what the hour or the
        disk ratios call for. ``now`` (epoch seconds) stands in for the clock.
        """
        self._writable()
        return self.services.clean.run_rounds(now, manual=manually)

    def delete_topics(self, topics: Iterable[str]) -> list[str]:
        """Remove the consume queues of ``topics`` (their messages stay in the log until it is
        cleaned), their entries in topics.json and their consumer offsets; the topics that had
        queues or an entry. The deletion is recorded in ``config/deletedTopics.json`` (see
        ``clean_unused_topics``)."""
        self._writable()
        return topic_deletion.delete_topics(self, topics)

    def clean_unused_topics(self, keep: Iterable[str]) -> list[str]:
        """RocketMQ's ``cleanUnusedTopic``: remove the consume queues of every topic not in ``keep``
        (but the schedule and transaction-op topics'), durably (``topic_deletion``)."""
        self._writable()
        return topic_deletion.clean_unused_topics(self, keep)

    def disk_report(self, now: float | None = None) -> DiskReport:
        """Disk usage per commit-log folder and of ``consumequeue/`` against the watermarks, and
        when the oldest segment is deleted by time."""
        self._readable()
        check = self.services.clean.last_check if self.services.clean else None
        flags = describe_flags(self.running_flags)
        return disk_report(check or measure_disk(self.config, self.root), self.config, self.commit_log, flags, now)

    # -- shutdown ------------------------------------------------------------------------------------
    def shutdown(self, *, wait_for_dispatch: float | None = 30.0) -> None:
        """Stop the services, flush everything, and remove ``abort`` if dispatch caught up.

        Every step runs even if one before it fails: the files are closed and the lock released
        whatever happens. A failed flush is logged (the store already turned not writeable) and
        keeps ``abort``; any other failure keeps ``abort`` too and is raised, as a
        RocketStoreError, once everything is closed. An interrupt (Ctrl-C) in a step keeps
        ``abort`` and is raised itself once everything is closed, in place of such an error
        (which is logged); a second one ends the shutdown at once, the files still closed. A call
        from another thread while one runs returns when it is over; a call after it does nothing.
        ``wait_for_dispatch``: seconds for dispatch to catch up (None: as long as it takes)."""
        wait_for_dispatch = StoreServices.shutdown_wait(wait_for_dispatch)
        with self._shutdown_lock:
            ours = not self._closed
            if ours:
                OPEN.discard(self)
                self._closed = self._shutting_down = True
                self._shutting_thread = threading.get_ident()
        if not ours:  # shut down, or being shut down: by another thread, it is over when this returns
            if self._shutting_thread != threading.get_ident():  # (this thread's own: a handler inside it)
                self._shut_down.wait()
            return
        step = ShutdownSteps(lambda: self.set_running_flags(set_bits=NOT_WRITEABLE))
        try:
            self.services.stop(step, self._update_refusal, wait_for_dispatch)
            if not self.read_only:
                write_back(self, step)
        finally:
            self._shutting_down = False  # the services are stopped: no flag changes from here on
            self._release()
        if step.interrupt is not None:
            raise step.interrupt
        if step.errors:
            raise RocketStoreError(f"{self.root} did not shut down cleanly: {step.errors[0]}") from step.errors[0]

    def _release(self) -> None:
        """Close the files and release the lock, whatever fails; then a shutdown called meanwhile
        from another thread returns."""
        try:
            close_files(self)
        finally:
            try:
                if not self.read_only:
                    self._lock.release()
            finally:
                self._shut_down.set()

    @property
    def closed(self) -> bool:
        """True once shut down (or, in a forked child, for a store its parent has open)."""
        return self._closed

    def __repr__(self) -> str:
        state = (", read_only" if self.read_only else "") + (", closed" if self._closed else "")
        return f"MessageStore({self.root!r}{state})"
