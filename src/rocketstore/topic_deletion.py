"""Deleting topics (RocketMQ's deleteTopic / cleanUnusedTopic), durably.

The topics' consume queues and topics.json entries go; their records stay in the commit log until
retention deletes them. topics.json is written without the topics, then ``config/deletedTopics.json``
records each one with the log's end at this moment (every record of theirs is below it; the log is
flushed up to it first), then the queue folders go. Recovery, rebuilds and verify take the topics'
records below that end as deleted: a reopen does not dispatch them again (it finishes a deletion a
crash cut short), and a topic that comes back starts again at queue offset 0 with only its new
records. A recovery lowers an end past the recovered log's end to it (``DeletedTopics.lower_to``).
Last, the topics' consumer offsets go from ``consumerOffset.json`` (after a crash just before, the
next writable open drops them: ``drop_leftover_offsets``, for the topics ``deletedTopics.json``
still lists as ``offsetsPending``).
When topics.json cannot be written, nothing has changed, in memory or on disk (StoreFileError).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING

from rocketstore.codec.topic import NEVER_REMOVED, topic_names
from rocketstore.errors import InvalidArgumentError, InvalidTopicError, RocketStoreError, StoreFileError, shown
from rocketstore.reader import check_arguments

if TYPE_CHECKING:
    from rocketstore.store import MessageStore


def _topic_set(call: str, topics: Iterable[str]) -> set[str]:
    """``topics``, a collection of topic names (not one str: ``topic_names``), as plain strs;
    InvalidArgumentError for anything else."""
    if not isinstance(topics, Iterable):
        raise InvalidArgumentError(f"{call} takes a collection of topic names, not {shown(topics)}")
    return {check_arguments(call, topic=(topic, str))[0] for topic in topic_names(call, topics)}


def delete_topics(store: MessageStore, topics: Iterable[str]) -> list[str]:
    """``store.delete_topics``: the topics that had queues or a topics.json entry (RocketMQ's
    deleteTopic removes a topic's config whether or not it has queues: a retry topic whose
    messages still wait in the schedule topic has none)."""
    doomed = _topic_set("delete_topics", topics)
    if doomed & NEVER_REMOVED:
        raise InvalidTopicError(f"{', '.join(sorted(doomed & NEVER_REMOVED))}: RocketMQ never removes its queues")
    # what to keep is known only once dispatch caught up: a topic whose records are not yet in a
    # consume queue has none to list, and would go with the doomed ones
    return _remove(store, lambda: {topic for topic in store.queues.topics() if topic not in doomed}, doomed)


def clean_unused_topics(store: MessageStore, keep: Iterable[str]) -> list[str]:
    """``store.clean_unused_topics``: remove every topic's queues but ``keep``'s (and the schedule
    and transaction-op topics'); the topics removed."""
    kept = _topic_set("clean_unused_topics", keep)
    return _remove(store, lambda: kept)


def _remove(store: MessageStore, keeping: Callable[[], set[str]], named: Collection[str] = ()) -> list[str]:
    """Remove the queues of every topic but ``keeping()``'s, asked once every record appended
    before is dispatched (and none is appended meanwhile), and the ``named`` topics that have
    only a topics.json entry."""
    # no cleanup round reads the queues being removed; no record is appended meanwhile, and every
    # one appended before is dispatched: no unit of a removed queue comes after it, and a topic
    # that comes back starts again at offset 0
    clean = store.services.clean
    with clean.round_lock if clean else threading.Lock(), store.commit_log.put_lock:
        if not store.wait_for_dispatch():
            raise RocketStoreError("dispatch did not catch up within 30 s: no consume queue was removed")
        # every record of theirs is below the log's end now: none is appended meanwhile
        end = store.commit_log.max_offset()
        keep = keeping()
        with store.reput.lock:  # no dispatch round is writing into a queue being removed
            gone = store.queues.unused_topics(keep)
            gone = sorted({*gone, *(t for t in named if store.topics.find(t) is not None)})
            if gone:
                # the log durable up to ``end`` before ``end`` is recorded: a power loss must not end
                # it below (records put after that recovery would land below it, skipped as deleted)
                store.flush()
                if store.commit_log.queue.flushed_where < end:
                    raise RocketStoreError(f"the commit log is not flushed up to {end}: no topic was removed")
                recorded: list[dict[str, int]] = []

                def record() -> None:  # with topics.json written: both files go through, or neither
                    live = store.queues.topics().keys() - set(gone)  # topics with queues again: marks stay
                    recorded.append(store.deleted_topics.record(gone, end, store.commit_log.min_offset(), live))

                try:  # puts wait for the put lock: none brings a topic back meanwhile
                    store.topics.remove_and_persist(gone, then=record)
                except OSError as exc:  # the tables are as they were: the deletion has not begun
                    if isinstance(exc, RocketStoreError):
                        raise
                    context = (
                        f"no topic was removed ({', '.join(gone)}): topics.json or deletedTopics.json cannot be written"
                    )
                    raise StoreFileError.of(exc, context) from exc
                (table,) = recorded
                store.dispatcher.set_deleted(table)
                store.queues.delete_topics(keep)
                store.commit_log.forget_topics(set(gone), locked=True)
                _drop_offsets(store, gone)
    return gone


def drop_leftover_offsets(store: MessageStore) -> None:
    """At a writable open: the offsets of the deleted topics whose deletion a crash cut short before
    consumerOffset.json was written again (``offsets_pending``) go, unless the topic has a queue or a
    topics.json entry again; an offset committed to a deleted topic after its deletion stays."""
    pending = store.deleted_topics.offsets_pending
    if pending:
        queued = store.queues.topics()
        back = {t for t in pending if t in queued or store.topics.find(t) is not None}
        store.deleted_topics.offsets_dropped(back)
        _drop_offsets(store, sorted(pending - back))


def _drop_offsets(store: MessageStore, gone: list[str]) -> None:
    """The removed topics' consumer offsets go too (RocketMQ's deleteTopic cleans them by topic):
    a topic that comes back starts at queue offset 0, and its groups read it from there. Once
    consumerOffset.json is written without them (now, or by a later write when this one fails),
    they are pending no more in deletedTopics.json (``on_dropped``, wired by the store)."""
    if not gone:
        return
    offsets = store.consumer_offsets
    offsets.remove_topics(set(gone))
    try:
        offsets.persist_if_changed()
    except OSError as exc:  # the topics are gone; the file keeps their offsets until it is written
        if isinstance(exc, RocketStoreError):
            raise
        raise StoreFileError.of(exc, f"{', '.join(gone)} removed, their consumer offsets not") from exc
