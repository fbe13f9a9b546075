"""The store's ``lock`` file: one process (and one open store object) per store folder (spec 10.2).

The lock is an fcntl record lock on the first byte, which is what Java's ``FileChannel.tryLock``
takes, so rocketstore and a RocketMQ broker exclude each other too.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading

from rocketstore.errors import StoreLockedError

_held: set[str] = set()  # store folders this process has locked
_held_lock = threading.Lock()


def _forget_in_child() -> None:
    """Record locks are not inherited by a forked child: it holds none of its parent's."""
    global _held_lock
    _held_lock = threading.Lock()
    _held.clear()


os.register_at_fork(after_in_child=_forget_in_child)


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
                    raise _locked(self.path, lock_holder(os.path.dirname(self.path))) from None
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


def lock_holder(root: str) -> int | None:
    """The pid of the process holding STORE's ``lock`` (a running store or broker: this process's
    own pid when it has the store open; -1 for an open-file-description lock, whose owner is not
    listed), or None when no process holds it or that cannot be told.

    Read from ``/proc/locks`` (Linux) without opening the lock file: closing any descriptor of it
    would drop a lock this process holds (POSIX record locks belong to the process)."""
    try:
        st = os.stat(os.path.join(root, "lock"))
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = [line.split() for line in f]
    except OSError:
        return None
    exact = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    suffix = f":{st.st_ino}"
    # "1: POSIX  ADVISORY  WRITE 4242 fe:00:2187807 0 0"; a waiter's line has "->" after its number.
    # The device may be numbered apart from stat's on overlay or btrfs: the inode alone then.
    held = [f for f in table if len(f) >= 6 and f[1] in ("POSIX", "OFDLCK") and "->" not in f]
    for match in (lambda ident: ident == exact, lambda ident: ident.endswith(suffix)):
        for fields in held:
            if match(fields[5]):
                with contextlib.suppress(ValueError):
                    return int(fields[4])
    return None


def refuse_if_locked(root: str) -> None:
    """Raise the StoreLockedError an open for writing would when a process is known to hold
    STORE's lock (before a command reads a store it is going to open for writing)."""
    pid = lock_holder(root)
    if pid is not None:
        raise _locked(os.path.join(root, "lock"), pid)


def _locked(path: str, pid: int | None) -> StoreLockedError:
    return StoreLockedError(f"Lock failed, MQ already started: {describe_holder(pid)} holds {path}")


def describe_holder(pid: int | None) -> str:
    """Who holds a store's lock, for a message: ``lock_holder``'s pid in words."""
    if pid == os.getpid():
        return "this process"
    return f"another process (pid {pid})" if pid is not None and pid > 0 else "another process"
