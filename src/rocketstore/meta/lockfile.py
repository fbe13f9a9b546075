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
from collections.abc import Callable, Iterator

from rocketstore.errors import StoreFileError, StoreLockedError

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

    def acquire(self, *, create: bool = True) -> bool:
        """Take the lock (StoreLockedError when a process or a store object of this one holds it;
        StoreFileError naming the file when it cannot be opened or locked otherwise).
        ``create=False`` only locks a ``lock`` file that is there and writes nothing to it: False
        when there is none (no process can hold it then)."""
        with _held_lock:
            if self._key in _held:
                raise StoreLockedError(f"Lock failed, MQ already started: {self._key} is open in this process")
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0), 0o644)
            except (FileNotFoundError, NotADirectoryError) as exc:
                if create:
                    raise self._error(exc, "opened") from exc
                return False
            except OSError as exc:  # no permission, a folder in its place, ...
                raise self._error(exc, "opened") from exc
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EACCES, errno.EAGAIN):
                    raise _locked(self.path, lock_holder(os.path.dirname(self.path))) from None
                raise self._error(exc, "locked") from exc
            if create:
                try:
                    os.pwrite(fd, b"lock", 0)
                    os.fsync(fd)
                except OSError as exc:
                    fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
                    os.close(fd)
                    raise self._error(exc, "written") from exc
            self._fd = fd
            _held.add(self._key)
            return True

    def _error(self, exc: OSError, what: str) -> StoreFileError:
        return StoreFileError.of(exc, f"the store's lock file {self.path} cannot be {what}")

    def release(self) -> None:
        with _held_lock:
            if self._fd >= 0:
                try:
                    fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0)
                finally:
                    os.close(self._fd)
                    self._fd = -1
                    _held.discard(self._key)


@contextlib.contextmanager
def held(root: str) -> Iterator[None]:
    """STORE's lock held through the block, so that no other process opens the store for writing
    meanwhile (a command reading a store it is about to open for writing): StoreLockedError as an
    open for writing would raise it. Nothing is created or written; a store without a ``lock``
    file is not locked (no process holds it)."""
    lock = StoreLock(root)
    lock.acquire(create=False)
    try:
        yield
    finally:
        lock.release()


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
    return holder_in_table(table, st.st_dev, st.st_ino, lambda pid: _has_open(pid, st.st_dev, st.st_ino))


def holder_in_table(
    table: list[list[str]], dev: int, ino: int, has_open: Callable[[int], bool] = lambda pid: False
) -> int | None:
    """The pid a ``/proc/locks`` table (each line split) names as holding a POSIX or OFD lock on
    the file numbered ``dev`` (``os.stat``'s st_dev) and ``ino``, or None.

    The kernel prints the file as ``MAJOR:MINOR:INODE``, the device numbers in hex (at least two
    digits: ``103:12c:2187807``), the inode in decimal. A line for another device is another file,
    whatever its inode number (every file system numbers its own). Only where the device is
    numbered apart from stat's (btrfs subvolumes, overlay) is a line matching the inode alone taken,
    and then only when ``has_open(pid)`` says that process has this very file open (a POSIX lock is
    held only while its process has the file open)."""
    want = (os.major(dev), os.minor(dev), ino)
    same_inode: list[int] = []
    # "1: POSIX  ADVISORY  WRITE 4242 fe:00:2187807 0 0"; a waiter's line has "->" after its number.
    for fields in table:
        if len(fields) < 6 or fields[1] not in ("POSIX", "OFDLCK") or "->" in fields:
            continue
        ident = _file_ident(fields[5])
        try:
            pid = int(fields[4])
        except ValueError:
            continue
        if ident == want:
            return pid
        if ident is not None and ident[2] == ino and pid > 0:
            same_inode.append(pid)
    return next((pid for pid in same_inode if has_open(pid)), None)


def _file_ident(text: str) -> tuple[int, int, int] | None:
    """``fe:00:2187807`` as (major, minor, inode); None when it is not that (``<none>:0``)."""
    parts = text.split(":")
    if len(parts) != 3:
        return None
    try:
        return int(parts[0], 16), int(parts[1], 16), int(parts[2])
    except ValueError:
        return None


def _has_open(pid: int, dev: int, ino: int) -> bool:
    """Whether process ``pid`` has the file (``dev``, ``ino`` as stat gives them) open: its
    ``/proc/PID/fd`` links, each stat'ed as the file's path is (no descriptor is opened). False when
    that cannot be read (another user's process)."""
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    for name in names:
        try:
            st = os.stat(os.path.join(folder, name))
        except OSError:
            continue
        if st.st_dev == dev and st.st_ino == ino:
            return True
    return False


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
