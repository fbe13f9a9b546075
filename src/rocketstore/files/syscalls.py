"""System calls Python's os and mmap modules lack in a usable form, through ctypes.

``msync`` of a range (``mmap.flush`` holds the GIL for the whole disk write and cannot be told
to leave pages outside the range alone) and ``madvise(MADV_POPULATE_WRITE)``: both release the
GIL while the kernel works, and the buffer is kept exported for the call, so the mapping cannot
be closed underneath it. ``mlock`` of a whole mapping (the transient store pool's buffers).
``fallocate`` modes for zeroing a range (keeping its blocks, or giving them back). ``renameat2``'s
exchange of two folders in one step (a rebuild swapping its queues in). Also ``fsync_dir``, which
makes a rename or a new file in a folder durable.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os

PAGE = mmap.PAGESIZE
MS_SYNC = 4
MADV_POPULATE_WRITE = 23

try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _msync = _libc.msync
    _msync.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _msync.restype = ctypes.c_int
    _madvise = _libc.madvise
    _madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _madvise.restype = ctypes.c_int
    _mlock = _libc.mlock
    _mlock.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    _mlock.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover - not a POSIX libc
    _msync = _madvise = _mlock = None

AVAILABLE = _msync is not None

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
try:
    _fallocate = _libc.fallocate
    _fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong)
    _fallocate.restype = ctypes.c_int
except (NameError, AttributeError):  # pragma: no cover
    _fallocate = None


def _call(function: object, mm: mmap.mmap, start: int, end: int, *args: int) -> int:
    start -= start % PAGE
    if end <= start:
        return 0
    anchor = ctypes.c_char.from_buffer(mm)
    try:
        rc = function(ctypes.addressof(anchor) + start, end - start, *args)  # type: ignore[operator]
        return 0 if rc == 0 else ctypes.get_errno()
    finally:
        del anchor


def msync(mm: mmap.mmap, start: int, end: int) -> None:
    """Write ``[start, end)`` of a shared mapping to disk and wait (OSError on failure)."""
    err = _call(_msync, mm, start, end, MS_SYNC)
    if err:
        raise OSError(err, os.strerror(err))


def populate_write(mm: mmap.mmap, start: int, end: int) -> bool:
    """Fault ``[start, end)`` in for writing; False if the kernel cannot (before Linux 5.14)."""
    return _madvise is not None and _call(_madvise, mm, start, end, MADV_POPULATE_WRITE) == 0


def mlock(mm: mmap.mmap) -> int:
    """Lock all of ``mm`` in memory (its pages faulted in now, never swapped out); 0, or the
    errno (ENOMEM, EPERM, EAGAIN: over RLIMIT_MEMLOCK, or not allowed). Unmapping unlocks."""
    if _mlock is None:  # pragma: no cover
        return errno.ENOSYS
    return _call(_mlock, mm, 0, len(mm))


def zero_range(fd: int, start: int, end: int) -> bool:
    """Zero ``[start, end)`` of a file keeping its blocks allocated; False where unsupported."""
    if _fallocate is None or end <= start:
        return end <= start
    return _fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, start, end - start) == 0


def punch_hole(fd: int, start: int, end: int) -> bool:
    """Zero ``[start, end)`` of a file giving its blocks back (no disk needed); False where unsupported."""
    if _fallocate is None or end <= start:
        return end <= start
    return _fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, start, end - start) == 0


def fsync_dir(path: str) -> None:
    """fsync a folder, so that the names just created, renamed or removed in it survive a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_fd_limit_checked = False


def raise_open_file_limit() -> None:
    """Raise the soft limit of open files to the hard one, once per process, as the JVM does at
    start (MaxFDLimit): a store maps every segment, consume-queue and index file, two file
    descriptors each, and a RocketMQ store of a few hundred queues is over the usual soft 1,024."""
    global _fd_limit_checked
    if _fd_limit_checked:
        return
    _fd_limit_checked = True
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if target == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def open_file_limit() -> int | None:
    """The soft limit of open files (None: none, or not POSIX)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


AT_FDCWD = -100
RENAME_EXCHANGE = 2


def exchange(a: str, b: str) -> bool:
    """Exchange the entries ``a`` and ``b`` atomically (Linux renameat2 RENAME_EXCHANGE, same file
    system); False when the system or the file system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # pragma: no cover - not Linux, or glibc before 2.28
        return False
    renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    renameat2.restype = ctypes.c_int
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), a, None, b)
