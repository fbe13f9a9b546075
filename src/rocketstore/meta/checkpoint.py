"""The ``checkpoint`` file: 4096 bytes, five big-endian longs at its head (spec section 9)."""

from __future__ import annotations

import logging
import os
import struct

from rocketstore.errors import FlushError

log = logging.getLogger(__name__)

CHECKPOINT_SIZE = 4096
_FIELDS = struct.Struct(">qqqqq")


class StoreCheckpoint:
    """physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp, masterFlushedOffset, confirmPhyOffset.

    Updated in memory as the store runs; ``flush`` persists them. A read-only store (``writable``
    false) never writes the file.

    Each persisted timestamp only claims what is on disk: dispatch records the store time of the
    last unit it built in ``logics_dispatched_timestamp``, which becomes logicsMsgTimestamp only
    once a flush of every consume queue covered it (``consume_queues_flushed``). Otherwise any
    checkpoint write (an index file rolling, say) could claim units still in dirty pages, and
    after a power cut recovery would start past records whose units were lost.
    """

    def __init__(self, path: str, writable: bool = True) -> None:
        self.path = path
        self.writable = writable
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.master_flushed_offset = 0
        self.confirm_phy_offset = 0
        self.logics_dispatched_timestamp = 0  # in memory only: the last unit built, maybe unflushed
        self.existed = os.path.exists(path)
        self.as_read: dict[str, int] | None = None  # the fields as the file held them at open, if it existed
        if self.existed:
            with open(path, "rb") as f:
                head = f.read(_FIELDS.size)
            if len(head) < 24:  # RocketMQ maps it at full size: the missing bytes read as zeros
                log.warning(
                    "%s holds %d bytes of its %d: those are read, the missing %d as zeros (a timestamp read so "
                    "is no later than the one written: a recovery after a crash starts no later in the log)",
                    path,
                    len(head),
                    _FIELDS.size,
                    _FIELDS.size - len(head),
                )
            head = head.ljust(_FIELDS.size, b"\0")
            (
                self.physic_msg_timestamp,
                self.logics_msg_timestamp,
                self.index_msg_timestamp,
                self.master_flushed_offset,
                self.confirm_phy_offset,
            ) = _FIELDS.unpack(head)
            self.as_read = self.as_dict()
        elif writable:
            with open(path, "wb") as f:
                f.write(bytes(CHECKPOINT_SIZE))
                f.flush()
                os.fsync(f.fileno())

    def consume_queues_flushed(self, dispatched: int) -> None:
        """Every consume queue was flushed after ``logics_dispatched_timestamp`` was read as
        ``dispatched``: that becomes logicsMsgTimestamp, and the checkpoint is persisted."""
        if dispatched > 0:
            self.logics_msg_timestamp = dispatched
        self.flush()

    def min_timestamp(self) -> int:
        """The time before which everything was safely dispatched: min(physic, logics) - 3 s."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def to_bytes(self) -> bytes:
        return _FIELDS.pack(
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        )

    def flush(self) -> None:
        """Write the fields and force them to disk (a no-op on a read-only store); FlushError if
        the file system refuses."""
        if not self.writable:
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                if os.fstat(fd).st_size < CHECKPOINT_SIZE:
                    os.ftruncate(fd, CHECKPOINT_SIZE)
                os.pwrite(fd, self.to_bytes(), 0)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise FlushError(f"the checkpoint {self.path} could not be written: {exc}") from exc

    def in_memory_dict(self) -> dict[str, int]:
        """The fields as RocketMQ holds them in memory: logicsMsgTimestamp is the last unit
        dispatched, flushed or not."""
        fields = self.as_dict()
        if self.logics_dispatched_timestamp:
            fields["logicsMsgTimestamp"] = self.logics_dispatched_timestamp
        return fields

    def as_dict(self) -> dict[str, int]:
        return {
            "physicMsgTimestamp": self.physic_msg_timestamp,
            "logicsMsgTimestamp": self.logics_msg_timestamp,
            "indexMsgTimestamp": self.index_msg_timestamp,
            "masterFlushedOffset": self.master_flushed_offset,
            "confirmPhyOffset": self.confirm_phy_offset,
        }
