"""Statuses (named as RocketMQ names them) and the results of puts, gets and queries."""

from __future__ import annotations

import enum
from operator import itemgetter

from rocketstore.codec.ids import offset_msg_id
from rocketstore.codec.message import StoredMessage
from rocketstore.errors import PutMessageError


class PutMessageStatus(enum.StrEnum):
    """RocketMQ's PutMessageStatus; compares equal to its name (``status == "PUT_OK"``)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    FLUSH_DISK_FAILED = "FLUSH_DISK_FAILED"  # rocketstore: the file system refused a flush

    def __str__(self) -> str:
        return self.value


_STORED = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    }
)


class GetMessageStatus(enum.StrEnum):
    """RocketMQ's GetMessageStatus."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"

    def __str__(self) -> str:
        return self.value


class PutResult(tuple):
    """What a put did. For a batch, ``queue_offset`` and ``commit_log_offset`` are the first
    message's and ``msg_id`` joins every message's id with commas, as RocketMQ does.

    A tuple underneath (built once per put on the hot path); read it by attribute. It compares
    by value, and every field is immutable (a batch's offsets and ids are tuples inside, lists
    when read), so every PutResult hashes, whatever made it.
    """

    __slots__ = ()

    status: PutMessageStatus = property(itemgetter(0))  # type: ignore[assignment]
    commit_log_offset: int = property(itemgetter(1))  # type: ignore[assignment]
    queue_offset: int = property(itemgetter(2))  # type: ignore[assignment]
    store_timestamp: int = property(itemgetter(3))  # type: ignore[assignment]
    wrote_bytes: int = property(itemgetter(4))  # type: ignore[assignment]
    msg_count: int = property(itemgetter(5))  # type: ignore[assignment]
    detail: str = property(itemgetter(9))  # type: ignore[assignment]

    @classmethod
    def refused(cls, status: PutMessageStatus, detail: str = "") -> PutResult:
        return cls((status, -1, -1, 0, 0, 0, None, b"", (), detail))

    @property
    def ok(self) -> bool:
        """True when the message is stored (PutMessageResult.isOk)."""
        return self[0] in _STORED

    def __bool__(self) -> bool:
        """``ok``: ``if store.put(message):`` is false for a refused put (a tuple would be true)."""
        return self[0] in _STORED

    @property
    def commit_log_offsets(self) -> list[int]:
        """Where each stored message's record starts in the commit log."""
        if self[6] is not None:
            return list(self[6])
        return [self[1]] if self[5] else []

    @property
    def msg_ids(self) -> list[str]:
        """The offset message id of every stored message, from the store host its record holds
        (one for all, or, for a batch of messages given several, a tuple of each record's)."""
        host = self[7]
        if type(host) is tuple:
            return [offset_msg_id(h, o) for h, o in zip(host, self.commit_log_offsets, strict=True)]
        return [offset_msg_id(host, o) for o in self.commit_log_offsets]

    @property
    def msg_id(self) -> str | None:
        """The offset message ids, joined by commas for a batch (as RocketMQ's result gives them)."""
        ids = self.msg_ids
        return ",".join(ids) if ids else None

    @property
    def uniq_keys(self) -> list[str | None]:
        """The UNIQ_KEY of every stored message (the ids RocketMQ's clients call msgId); None for
        one stored without (``put_as_is``)."""
        keys = self[8]
        return [keys] if type(keys) is str else list(keys or ())

    @property
    def uniq_key(self) -> str | None:
        """The UNIQ_KEYs joined with commas; None for a message stored without one (``put_as_is``)."""
        return ",".join(k for k in self.uniq_keys if k is not None) or None

    @property
    def refusal(self) -> str:
        """The status and why, as an error says them (``MESSAGE_ILLEGAL: ...``)."""
        return f"{self.status.value}: {self.detail}" if self.detail else self.status.value

    def raise_for_status(self) -> PutResult:
        """Raise PutMessageError unless the message was stored; returns self otherwise."""
        if not self.ok:
            raise PutMessageError(self.status.value, self.detail)
        return self

    def __repr__(self) -> str:
        extra = f", detail={self.detail!r}" if self.detail else ""
        return (
            f"PutResult(status={self.status.value}, queue_offset={self.queue_offset}, "
            f"commit_log_offset={self.commit_log_offset}, msg_count={self.msg_count}{extra})"
        )


class GetResult:
    """A pull: the messages found and where the next pull begins.

    ``unreadable``: the queue offsets of the units the pull moved past, their tags passing its
    filter, because their record could not be read (it does not decode, or the commit log does not
    hold it: removed by retention or past the log's end); a consumer that commits
    ``next_begin_offset`` commits past them. Empty normally; the reader logs a WARNING naming them.
    """

    __slots__ = (
        "max_offset",
        "messages",
        "min_offset",
        "next_begin_offset",
        "status",
        "suggest_pulling_from_slave",
        "unreadable",
    )

    def __init__(
        self,
        status: GetMessageStatus,
        messages: list[StoredMessage],
        next_begin_offset: int,
        min_offset: int,
        max_offset: int,
        suggest_pulling_from_slave: bool = False,
        unreadable: tuple[int, ...] = (),
    ) -> None:
        self.status = status
        self.messages = messages
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.suggest_pulling_from_slave = suggest_pulling_from_slave
        self.unreadable = unreadable

    @property
    def message_count(self) -> int:
        """How many messages the pull found (``getMessageCount``)."""
        return len(self.messages)

    @property
    def buffer_total_size(self) -> int:
        """Their records' bytes (``getBufferTotalSize``)."""
        return sum(m.store_size for m in self.messages)

    def __repr__(self) -> str:
        extra = f", unreadable={self.unreadable}" if self.unreadable else ""
        return (
            f"GetResult(status={self.status.value}, messages={len(self.messages)}, "
            f"next_begin_offset={self.next_begin_offset}, min_offset={self.min_offset}, "
            f"max_offset={self.max_offset}{extra})"
        )


class QueryResult:
    """Messages found by key, with the newest index file's last update (QueryMessageResult).
    ``index_hits``: how many entries the index gave for the key in the range asked (hash
    collisions and a message's repeated key included), at most ``min(max_num, maxMsgsNumBatch)``:
    fewer than that cap means it holds no more there, the cap itself may leave more (so with
    ``max_num`` above maxMsgsNumBatch, 64 by default, fewer than ``max_num`` hits may too).
    ``unreadable``: the commit-log offsets of hits inside the log whose record does not decode
    (the message, or one of another key with the same hash); empty normally, the reader logs a
    WARNING naming them. Hits below the log's start (retention removed them) are not counted."""

    __slots__ = ("index_hits", "index_last_update_phyoffset", "index_last_update_timestamp", "messages", "unreadable")

    def __init__(
        self,
        messages: list[StoredMessage],
        last_ts: int,
        last_phy: int,
        index_hits: int = 0,
        unreadable: tuple[int, ...] = (),
    ) -> None:
        self.messages = messages
        self.index_last_update_timestamp = last_ts
        self.index_last_update_phyoffset = last_phy
        self.index_hits = index_hits
        self.unreadable = unreadable

    def __repr__(self) -> str:
        extra = f", unreadable={self.unreadable}" if self.unreadable else ""
        return f"QueryResult(messages={len(self.messages)}{extra})"
