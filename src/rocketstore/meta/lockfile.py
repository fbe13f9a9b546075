"""The store's ``lock`` file: one process (and one open store object) per store folder (spec 10.2).

The lock is an fcntl record lock on the first byte, which is what Java's ``FileChannel.tryLock``
takes, so rocketstore and a RocketMQ broker exclude each other too.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading

from rocketstore.errors import StoreLockedError

_held: set[str] = set()
_held_lock = threading.Lock()


class StoreLock:
    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, "lock")
        self._key = os.path.realpath(root)
        self._fd = -1

    def acquire(self) -> None:
        with _held_lock:
            if self._key in _held:
                raise StoreLockedError(f"Lock failed, MQ already started: {self._key} is open in this process")
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EACCES, errno.EAGAIN):
                    raise StoreLockedError(
                        f"Lock failed, MQ already started: another process holds {self.path}"
                    ) from None
                raise
            os.pwrite(fd, b"lock", 0)
            os.fsync(fd)
            self._fd = fd
            _held.add(self._key)

    def release(self) -> None:
        with _held_lock:
            if self._fd >= 0:
                try:
                    fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0)
                finally:
                    os.close(self._fd)
                    self._fd = -1
                    _held.discard(self._key)
