"""The transient store pool: write buffers the commit log appends into before they reach the file.

With ``transientStorePoolEnable`` each new commit-log segment borrows a buffer of its size; puts
write into the buffer, the commit service moves what was written into the file mapping, and the
flush service makes it durable (spec 13.3). Buffers are anonymous mappings made when first
borrowed, locked in memory (mlock, then madvise WILLNEED, as RocketMQ's TransientStorePool.init)
where RLIMIT_MEMLOCK or the privilege allows it, and go back to the pool when their segment is
full and committed; the pool's close unmaps them, which unlocks them. A segment made when none is
free first commits the full segments holding them and takes one back (``MappedFileQueue``); only
when that frees none (a pool of no buffers, a failed commit) is it written straight through to
the file. With ``fastFailIfNoBufferInStorePool`` it is not made: the put fails (RocketMQ 4.9.8's
AllocateMappedFileService).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import mmap
import os
import threading
from typing import TYPE_CHECKING

from rocketstore.files import syscalls

if TYPE_CHECKING:
    from rocketstore.config import StoreConfig

log = logging.getLogger(__name__)


class TransientStorePool:
    def __init__(self, size: int, buffer_size: int, lock_memory: bool = True, fast_fail: bool = False) -> None:
        self.size = size
        self.buffer_size = buffer_size
        self.lock_memory = lock_memory
        self.fast_fail = fast_fail  # no buffer free: no new segment (else the full ones are committed for one)
        self._free: collections.deque[mmap.mmap] = collections.deque()
        self._made = 0
        self._locking = lock_memory  # False once an mlock failed: the next buffers would not fit either
        self._lock = threading.Lock()

    @classmethod
    def of(cls, config: StoreConfig) -> TransientStorePool:
        """The pool ``config`` asks for: transientStorePoolSize buffers of a segment's size."""
        return cls(
            config.transient_store_pool_size,
            config.mapped_file_size_commit_log,
            fast_fail=config.fast_fail_if_no_buffer_in_store_pool,
        )

    def borrow(self) -> mmap.mmap | None:
        """A free buffer, or None when all ``transientStorePoolSize`` are in use."""
        with self._lock:
            if self._free:
                return self._free.popleft()
            if self._made >= self.size:
                return None
            self._made += 1
        buf = mmap.mmap(-1, self.buffer_size)
        if self.lock_memory:
            self._lock_in_memory(buf)
        return buf

    def _lock_in_memory(self, buf: mmap.mmap) -> None:
        """mlock ``buf``, then madvise(WILLNEED). Where RLIMIT_MEMLOCK or the privilege does not
        allow the lock (ENOMEM, EPERM, EAGAIN) the buffers stay unlocked, said once at INFO (puts
        only risk a swapped-out page), and the next ones are not tried."""
        if self._locking and (err := syscalls.mlock(buf)):
            self._locking = False
            log.info(
                "the transient store pool's %d-byte buffers are not locked in memory (%s): "
                "raise RLIMIT_MEMLOCK (ulimit -l) to lock them",
                self.buffer_size,
                os.strerror(err),
            )
        with contextlib.suppress(AttributeError, OSError):
            buf.madvise(mmap.MADV_WILLNEED)

    def give_back(self, buf: mmap.mmap) -> None:
        with self._lock:
            self._free.append(buf)

    def available(self) -> int:
        """Buffers that can still be borrowed."""
        with self._lock:
            return len(self._free) + self.size - self._made

    def close(self) -> None:
        with self._lock:
            while self._free:
                self._free.popleft().close()
