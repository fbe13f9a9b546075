"""One fixed-size memory-mapped segment, named by the offset of its first byte (spec section 2).

A segment keeps three positions: ``wrote`` (bytes appended), ``committed`` (moved from a
transient write buffer into the file; equal to wrote without one) and ``flushed`` (forced to
disk). Readers see up to ``read_position``.

Two storage modes share all the code above them:

* ``"rw"``: the file is opened read-write and mapped shared; writes reach the file.
* ``"cow"``: the file is opened read-only and mapped copy-on-write; writes change memory only,
  new segments are anonymous memory and deleting one forgets it. Recovery and dispatch then run
  unchanged on a store they must not modify (``rocketstore export``, read-only opens).

New files are preallocated with ``posix_fallocate`` so that a full disk shows up as a failed
create, never as a SIGBUS in the middle of a write into a sparse mapping.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from rocketstore.errors import CorruptStoreError, FlushError
from rocketstore.files import syscalls

OS_PAGE_SIZE = 4096
COMMIT_SLICE = 16 << 20  # bytes a commit copies at a time: other threads run between two slices
T = TypeVar("T")
CREATING_SUFFIX = ".creating"  # a file being made; one left behind is a crash leftover


def remove_leftover(path: str, mode: str) -> bool:
    """Delete a file a crash left half made (rw mode); True if ``path`` is such a leftover."""
    if not path.endswith(CREATING_SUFFIX):
        return False
    if mode == "rw":
        with contextlib.suppress(OSError):
            os.unlink(path)
    return True


def dangling_link(path: str) -> str | None:
    """What is wrong with ``path`` when it is a symbolic link whose target does not exist, else None."""
    if os.path.islink(path) and not os.path.exists(path):
        return f"a symbolic link to {os.readlink(path)}, which does not exist"
    return None


def flush_each(items: Iterable[T], flush: Callable[[T], object]) -> None:
    """``flush(item)`` for every item; a FlushError stops none of the others (a file whose flush
    failed fails every later flush), and the first one is raised once all were tried."""
    first: FlushError | None = None
    for item in items:
        try:
            flush(item)
        except FlushError as exc:
            first = first or exc
    if first is not None:
        raise first


def offset_to_file_name(offset: int) -> str:
    """``offset2FileName``: the offset as 20 zero-padded decimal digits."""
    return f"{offset:020d}"


_ZEROS = bytes(1 << 20)


def holds_data(buf: bytes | mmap.mmap, start: int = 0) -> bool:
    """Whether a byte of ``buf`` (a mapping or bytes) from ``start`` on is not zero, compared a
    MiB at a time (the empty rest of a 1 GiB segment takes a fraction of a second)."""
    step = len(_ZEROS)
    for at in range(start, len(buf), step):
        chunk = buf[at : at + step]
        if chunk != _ZEROS[: len(chunk)]:
            return True
    return False


_O_TMPFILE = getattr(os, "O_TMPFILE", 0)
_tmpfile_works = bool(_O_TMPFILE) and os.path.isdir("/proc/self/fd")
_NO_UNNAMED_FILES = {errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.EPERM, errno.EACCES, errno.EXDEV, errno.ENOENT}


def _name(fd: int, path: str) -> None:
    """Link the unnamed file ``fd`` in as ``path``: linkat(AT_SYMLINK_FOLLOW) of /proc/self/fd/N,
    which needs no privilege (os.link only uses linkat when given a directory descriptor)."""
    proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.link(f"self/fd/{fd}", path, src_dir_fd=proc, follow_symlinks=True)
    finally:
        os.close(proc)


def _unnamed_file(folder: str) -> int | None:
    """A descriptor of a new unnamed file in ``folder``'s file system (O_TMPFILE), or None when
    there is none to be had (then the named way is used)."""
    if not _tmpfile_works:
        return None
    try:
        return os.open(folder, _O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):  # none here
            _give_up_unnamed_files(exc)
        return None


def _give_up_unnamed_files(exc: OSError) -> None:
    """After a failure with an unnamed file: stop trying them when the system or file system has
    none or cannot name one (a failure such as ENOSPC is for the named way to meet again)."""
    global _tmpfile_works
    if exc.errno in _NO_UNNAMED_FILES:
        _tmpfile_works = False


def _allocate(fd: int, size: int, reserve: int | None = None) -> None:
    """Make the file ``size`` bytes long with its first ``reserve`` bytes (all by default) given
    disk (ENOSPC now, not SIGBUS on a write later); the rest, or all where the file system cannot
    allocate, sparse."""
    os.ftruncate(fd, size)
    _reserve_range(fd, 0, size if reserve is None else min(size, _page_end(reserve)))


def _reserve_range(fd: int, start: int, end: int) -> None:
    """Give ``[start, end)`` of the file disk blocks (OSError ENOSPC when there are none)."""
    try:
        os.posix_fallocate(fd, start, end - start)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise


# Descriptors the mapped files of this process hold: a writable one two (its own, and the one
# its mapping dups), a copy-on-write one one (its mapping's). A new one is refused (EMFILE) when
# fewer than FD_RESERVE would be left: a store that reached the limit of open files still writes
# its checkpoint and config files at shutdown, and opens again under the same limit.
# A new commit-log segment keeps twice as many back: the consume-queue and index files dispatch
# makes for the records already in the log still get theirs after the log's last segment.
FD_RESERVE = 64
LOG_FD_RESERVE = 2 * FD_RESERVE
_fds_held = 0
_fds_lock = threading.Lock()


def _take_fds(count: int, path: str, keep: int = FD_RESERVE) -> None:
    """Count ``count`` descriptors for a file about to be mapped at ``path``; EMFILE, naming the
    limit, when that would leave fewer than ``keep`` for the rest of the process."""
    global _fds_held
    syscalls.raise_open_file_limit()
    limit = syscalls.open_file_limit()
    with _fds_lock:
        if limit is not None and _fds_held + count + keep > limit:
            raise OSError(
                errno.EMFILE,
                f"Too many open files: the mapped files hold {_fds_held} of the {limit} the process may open "
                f"(two a writable file; {keep} kept for the rest): raise the limit (ulimit -Hn)",
                path,
            )
        _fds_held += count


def _give_fds(count: int) -> None:
    global _fds_held
    with _fds_lock:
        _fds_held -= count


RESERVE_STEP = 256 << 10  # a file made sparse gets disk this far ahead of its writes


def _page_end(pos: int) -> int:
    """``pos`` rounded up to a whole page: a write fault needs disk for every block of its page."""
    return -(-pos // mmap.PAGESIZE) * mmap.PAGESIZE


class MappedFile:
    """A segment file mapped in memory, with its positions and a reference count (spec 14.5)."""

    def __init__(
        self,
        path: str,
        file_from_offset: int,
        file_size: int,
        mm: mmap.mmap,
        fd: int,
        mode: str,
    ) -> None:
        self.path = path
        self.file_name = os.path.basename(path)
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        self.mm = mm
        self.fd = fd
        self.mode = mode
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0  # store time of the last record appended (commit log)
        self.committed_timestamp = 0  # with a write buffer: store time of the last record committed
        self.first_create_in_queue = False
        self.write_buffer: mmap.mmap | bytearray | None = None  # transient store pool buffer, if any
        self.prefaulted = 0  # pages before this position were faulted in ahead of the writer
        self.allocated = file_size  # bytes from the start known to have disk blocks (see reserve)
        self.sparse = False  # given disk as written (consume queues, index): truncation gives it back
        self._ref_count = 1
        self._available = True
        self._cleanup_over = False
        self._first_shutdown = 0.0
        self.unlinked = False  # rw: the file's name was removed (it was doomed); never removed twice
        self._lock = threading.Lock()
        self.flush_error: FlushError | None = None  # the first failed flush: every later one fails too
        self._fds = 0  # the descriptors it holds, counted in _fds_held (given back at the cleanup)

    # -- creation ------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str,
        file_from_offset: int,
        file_size: int,
        mode: str = "rw",
        reserve: int | None = None,
        keep_fds: int = FD_RESERVE,
    ) -> MappedFile:
        """A new, zero-filled segment of ``file_size`` bytes (OSError, e.g. ENOSPC, on failure).

        The file gets its disk blocks at once (commit-log segments: RocketMQ's are that size too
        once written), or with ``reserve`` only its first ``reserve`` bytes, the rest as it is
        written (``RESERVE_STEP`` ahead): consume-queue and index files, most of which stay
        nearly empty, take the disk their units take. Either way a full disk fails a write with
        ENOSPC before it, never with SIGBUS inside a write to the mapping.

        The file is made at full size before it gets its name: as an unnamed file (O_TMPFILE)
        linked in when complete, so a crash leaves nothing in the segment's folder (RocketMQ fails
        to load a folder holding any file that is not a full-size segment); where the file
        system has no unnamed files, under a temporary name (``*.creating``, removed by the next
        open) renamed when complete. EMFILE when fewer than ``keep_fds`` descriptors would be
        left to the process (``_take_fds``).
        """
        if mode == "cow":
            mm = mmap.mmap(-1, file_size)
            return cls(path, file_from_offset, file_size, mm, -1, mode)
        if os.path.exists(path):
            raise FileExistsError(errno.EEXIST, "the segment already exists", path)
        _take_fds(2, path, keep_fds)
        try:
            mapped = cls._create(path, file_from_offset, file_size, mode, reserve)
        except BaseException:
            _give_fds(2)
            raise
        mapped._fds = 2
        return mapped

    @classmethod
    def _create(cls, path: str, file_from_offset: int, file_size: int, mode: str, reserve: int | None) -> MappedFile:
        fd = _unnamed_file(os.path.dirname(path))
        if fd is not None:
            try:
                _allocate(fd, file_size, reserve)
                _name(fd, path)
            except FileExistsError:
                os.close(fd)
                raise
            except OSError as exc:  # no room (raised below again), or unnamed files cannot be named here
                os.close(fd)
                _give_up_unnamed_files(exc)
                fd = None
        temp = None if fd is not None else path + CREATING_SUFFIX
        if temp is not None:
            fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        named = temp is None
        try:
            if temp is not None:
                _allocate(fd, file_size, reserve)
                os.rename(temp, path)
            named = True
            mm = mmap.mmap(fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            for leftover in (temp, path if named else None):  # never a file of the same name made meanwhile
                if leftover is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(leftover)
            raise
        mapped = cls(path, file_from_offset, file_size, mm, fd, mode)
        if reserve is not None:
            mapped.allocated = min(_page_end(reserve), file_size)
            mapped.sparse = True
        return mapped

    @classmethod
    def open(
        cls,
        path: str,
        file_from_offset: int,
        file_size: int,
        mode: str = "rw",
        sparse: bool = False,
        size_setting: str | None = None,
        odd_one: Callable[[], bool] | None = None,
    ) -> MappedFile:
        """An existing segment; its positions start at the full size until recovery sets them.
        A file of another size is a CorruptStoreError naming ``size_setting`` when given, or, when
        ``odd_one()`` says the other segments have the size, calling it damaged."""
        flags = os.O_RDONLY if mode == "cow" else os.O_RDWR
        fds = 1 if mode == "cow" else 2  # a private mapping needs no descriptor of its own
        _take_fds(fds, path)
        try:
            fd = os.open(path, flags | os.O_CLOEXEC)
        except BaseException:
            _give_fds(fds)
            raise
        try:
            actual = os.fstat(fd).st_size
            if actual != file_size and odd_one is not None and odd_one():  # the others have the size: damage
                short = "it was cut short (a partial copy, a full disk) or " if actual < file_size else ""
                raise CorruptStoreError(
                    f"the file is {actual} bytes, the other segments beside it {file_size}: "
                    f"{short}it does not belong here",
                    path,
                )
            if actual != file_size:
                setting = size_setting or "the size setting"
                hint = f" (--set {size_setting}={actual})" if size_setting else ""
                short = ", or it was cut short (a partial copy, a full disk)" if actual < file_size else ""
                raise CorruptStoreError(
                    f"the file is {actual} bytes, {setting} says {file_size}: set {setting}={actual} if that "
                    f"is the store's{hint}{short}, or the file does not belong here",
                    path,
                )
            if mode == "cow":
                mm = mmap.mmap(fd, file_size, access=mmap.ACCESS_COPY)
            else:
                mm = mmap.mmap(fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            _give_fds(fds)
            raise
        if mode == "cow":  # the mapping is private: the descriptor is not needed any more
            os.close(fd)
            fd = -1
        mapped = cls(path, file_from_offset, file_size, mm, fd, mode)
        mapped._fds = fds
        mapped.wrote_position = mapped.committed_position = mapped.flushed_position = file_size
        if mode == "rw":  # it may be sparse (RocketMQ makes its files so): writes reserve first
            mapped.allocated = 0
            mapped.sparse = sparse
        return mapped

    # -- positions -----------------------------------------------------------------------------
    @property
    def read_position(self) -> int:
        return self.committed_position if self.write_buffer is not None else self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def set_positions(self, pos: int) -> None:
        self.wrote_position = self.committed_position = self.flushed_position = pos

    def truncate(self, pos: int) -> None:
        """Cut the segment at ``pos``: positions move there and the bytes after it become zeros.

        Stale bytes must not survive a truncation: a record written at ``pos`` later may be
        shorter than the one it replaces, and a later recovery must not read on into old data.
        (In copy-on-write mode nothing reaches the file; the positions bound every read.)
        The file keeps its modification time: retention ages a segment by its last write
        (RocketMQ's recovery only moves positions), not by the last open that cut it.
        """
        self.set_positions(pos)
        if self.mode != "rw" or pos >= self.file_size or not self.hold():
            return
        try:
            written = os.fstat(self.fd)
        except OSError:
            written = None
        try:
            # zeros keeping the blocks (a fully allocated file); else zeros giving them back, which
            # needs no disk (a file given disk as written, or a range with holes on a full disk)
            if not self.sparse and syscalls.zero_range(self.fd, pos, self.file_size):
                return
            if syscalls.punch_hole(self.fd, pos, self.file_size):
                self.allocated = min(self.allocated, pos - pos % syscalls.PAGE)
                return
            self.reserve(self.file_size)  # zeros through the mapping: a full disk is ENOSPC here, not SIGBUS
            zeros = bytes(1 << 20)
            for at in range(pos, self.file_size, len(zeros)):
                end = min(self.file_size, at + len(zeros))
                self.mm[at:end] = zeros[: end - at]
        finally:
            if written is not None:
                with contextlib.suppress(OSError):
                    os.utime(self.fd, ns=(written.st_atime_ns, written.st_mtime_ns))
            self.release()

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    # -- writing -------------------------------------------------------------------------------
    def append(self, data: bytes) -> int:
        """Write ``data`` at the wrote position (into the write buffer when there is one)."""
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.allocated:
            self.reserve(end)
        if self.write_buffer is not None:
            self.write_buffer[pos:end] = data
        else:
            self.mm[pos:end] = data
            self.committed_position = end
        self.wrote_position = end
        return pos

    def write_at(self, pos: int, data: bytes) -> None:
        """Write ``data`` at ``pos`` without moving the positions."""
        if pos + len(data) > self.allocated:
            self.reserve(pos + len(data))
        self.mm[pos : pos + len(data)] = data

    def reserve(self, end: int) -> None:
        """Make sure the file's blocks up to ``end`` exist (``RESERVE_STEP`` further when it can),
        so that writing them through the mapping cannot meet a full disk (SIGBUS); OSError
        (ENOSPC) if the disk has no room. A private (copy-on-write) mapping needs none."""
        if self.mode != "rw" or self.fd < 0:
            self.allocated = self.file_size
            return
        upto = min(self.file_size, _page_end(max(end, self.allocated + RESERVE_STEP)))
        try:
            _reserve_range(self.fd, self.allocated, upto)
        except OSError:
            upto = min(self.file_size, _page_end(end))  # no room for the step ahead: just what is needed
            _reserve_range(self.fd, self.allocated, upto)
        self.allocated = upto

    # -- reading -------------------------------------------------------------------------------
    def read(self, pos: int, size: int) -> bytes:
        return self.mm[pos : pos + size]

    # -- flushing ------------------------------------------------------------------------------
    def is_able_to_flush(self, least_pages: int) -> bool:
        flushed, readable = self.flushed_position, self.read_position
        if self.is_full() and readable > flushed:
            return True
        if least_pages > 0:
            return readable // OS_PAGE_SIZE - flushed // OS_PAGE_SIZE >= least_pages
        return readable > flushed

    def flush(self, least_pages: int = 0) -> int:
        """Force the readable bytes to disk when enough are dirty; the new flushed position.

        An OSError from the file system becomes a FlushError and the flushed position stays.
        """
        if not self.is_able_to_flush(least_pages):
            return self.flushed_position
        target = self.read_position
        if self.force(self.flushed_position, target):
            self.flushed_position = target
        return self.flushed_position

    def force(self, start: int = 0, end: int | None = None) -> bool:
        """Make ``[start, end)`` durable (the whole file by default); FlushError on an OSError,
        False when the file is closed (nothing was written).

        Only that range is written: pages faulted in ahead of the writer stay out of it. After a
        failed flush the kernel may have dropped the dirty pages and marked them clean, so that
        a retry "succeeds" without writing them: every later flush of the file fails as well
        (until the store is opened again), and no flushed position moves past lost bytes.
        """
        if self.mode != "rw":
            return True  # a copy-on-write map: nothing goes to the file
        if not self.hold():
            return False
        if self.flush_error is not None:
            self.release()
            raise FlushError(f"{self.path}: an earlier flush failed ({self.flush_error}); reopen the store")
        try:
            if syscalls.AVAILABLE:
                syscalls.msync(self.mm, start, self.file_size if end is None else end)
            else:  # pragma: no cover
                os.fdatasync(self.fd)
        except OSError as exc:
            self.flush_error = FlushError(f"flushing {self.path} failed: {exc}")
            raise self.flush_error from exc
        finally:
            self.release()
        return True

    def commit(self, least_pages: int = 0) -> int:
        """Move written bytes from the write buffer into the file (transient store pool)."""
        buf = self.write_buffer
        if buf is None:
            return self.wrote_position
        ts = self.store_timestamp  # read first: an append moves wrote_position before its time
        committed, wrote = self.committed_position, self.wrote_position
        if wrote <= committed:
            self.committed_timestamp = ts
            return committed
        if least_pages > 0 and not self.is_full() and wrote // OS_PAGE_SIZE - committed // OS_PAGE_SIZE < least_pages:
            return committed
        if wrote > self.allocated:
            self.reserve(wrote)
        with memoryview(buf) as view:  # buffer to file, no bytes object in between; in slices, as a
            for start in range(committed, wrote, COMMIT_SLICE):  # copy holds the GIL (a GiB: seconds)
                end = min(start + COMMIT_SLICE, wrote)
                self.mm[start:end] = view[start:end]
        self.committed_position = wrote
        self.committed_timestamp = ts
        return wrote

    # -- reference counting (ReferenceResource) --------------------------------------------------
    def hold(self) -> bool:
        with self._lock:
            if self._available and self._ref_count > 0:
                self._ref_count += 1
                return True
            return False

    def release(self) -> None:
        with self._lock:
            self._ref_count -= 1
            if self._ref_count > 0:
                return
            self._cleanup()

    @property
    def available(self) -> bool:
        return self._available

    @property
    def cleanup_over(self) -> bool:
        return self._cleanup_over

    @property
    def ref_count(self) -> int:
        return self._ref_count

    def shutdown(self, interval_forcibly_ms: int) -> None:
        """Doom the file: stop new holds, take its name away at once (rw; holders keep their
        mapping and descriptor), drop the creation reference; force the rest after the interval.

        The name goes at the first call, not when the last holder lets go: the minimum offsets
        skip the file from now on, and a crash before the release must not bring it back (its
        records would be dispatched again into the front of their consume queues, not into the
        index, whose files pointing there cleanup deleted meanwhile). OSError (but a name
        already gone) leaves the file as it was.
        """
        if self._available:
            if self.mode == "rw" and not self.unlinked:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
                self.unlinked = True
            self._available = False
            self._first_shutdown = time.monotonic()
            self.release()
        elif self._ref_count > 0 and (time.monotonic() - self._first_shutdown) * 1000 >= interval_forcibly_ms:
            with self._lock:
                self._ref_count = -1000 - self._ref_count
            self.release()

    def _cleanup(self) -> None:
        if self._cleanup_over:
            return
        try:
            self.mm.close()
        except BufferError:  # a view is still exported; it keeps the mapping until it goes
            return
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        _give_fds(self._fds)
        self._fds = 0
        self._cleanup_over = True

    def destroy(self, interval_forcibly_ms: int = 0) -> bool:
        """Delete the file (its name at once, see shutdown) and unmap it once nobody holds it;
        False while it is still held (a later call forces that after the interval)."""
        self.shutdown(interval_forcibly_ms)
        return self._cleanup_over

    def close(self) -> None:
        """Unmap without deleting (store shutdown); a doomed file's name went already."""
        self._available = False
        with self._lock:
            self._ref_count = 0
            self._cleanup()

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.file_name}, wrote={self.wrote_position}, "
            f"committed={self.committed_position}, flushed={self.flushed_position})"
        )
