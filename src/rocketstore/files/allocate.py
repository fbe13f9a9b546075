"""Creating the next commit-log segment ahead of need, and faulting pages in ahead of the writer.

RocketMQ's AllocateMappedFileService creates the following segment in the background so a roll
never waits for a file to be made. Here the same thread also pre-faults the pages the writer is
about to touch, with ``madvise(MADV_POPULATE_WRITE)`` called through ctypes: the kernel does the
page-fault work on the other core while the writer, holding the GIL, only copies bytes.
Where the kernel lacks that call the writer simply takes the faults itself.

With ``warmMapedFileEnable`` (RocketMQ's MappedFile.warmMappedFile) the pages faulted in ahead
are also written to disk while still zero, so the file system allocates their blocks then. A
SYNC_FLUSH flush later overwrites allocated blocks instead of allocating them, which spares it
a journal commit: measured here, 0.09-0.16 ms per msync of 8 KiB instead of 0.22-0.30. The
write goes through a file descriptor of its own: a disk error it meets is then still reported
to the commit log's own flush (the kernel reports a writeback error once per open file).
"""

from __future__ import annotations

import collections
import logging
import os
import threading

from rocketstore.files import syscalls
from rocketstore.files.mapped_file import LOG_FD_RESERVE, MappedFile, offset_to_file_name

log = logging.getLogger(__name__)

_CHUNK = 4 << 20


def populate(mapped: MappedFile, start: int, end: int) -> bool:
    """Fault in ``[start, end)`` of a shared segment for writing; False if the kernel cannot."""
    if mapped.mode != "rw" or end <= start:
        return False
    if not mapped.hold():
        return True
    try:
        return syscalls.populate_write(mapped.mm, start, end)
    finally:
        mapped.release()


class SegmentAllocator:
    """One background thread: creates next segments and pre-faults pages ahead of the writer."""

    def __init__(self, window: int = 64 << 20, warm: bool = False) -> None:
        self.window = window
        self.prefault_enabled = syscalls.AVAILABLE
        self.warm = warm and syscalls.AVAILABLE
        self.warmed_bytes = 0  # zero pages written to disk ahead of the writer
        self._busy = False
        self._cond = threading.Condition()
        self._jobs: collections.deque = collections.deque()
        self._ready: dict[str, MappedFile] = {}
        self._creating: set[str] = set()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="rocketstore-allocate", daemon=True)
        self._thread.start()

    # -- next segments -----------------------------------------------------------------------------
    def prepare_next(self, queue: object, offset: int) -> None:
        if getattr(queue, "mode", "rw") != "rw":
            return
        folder = queue.folder_of_next(offset)  # type: ignore[attr-defined]
        path = os.path.join(folder, offset_to_file_name(offset))
        with self._cond:
            if self._stopped or path in self._ready or path in self._creating:
                return
            self._creating.add(path)
            self._jobs.append(("create", path, offset, queue.file_size))  # type: ignore[attr-defined]
            self._cond.notify()

    def take(self, path: str) -> MappedFile | None:
        """The pre-created segment for ``path`` (waiting if it is being made), or None.

        One made for the same offset in another folder (the roll chose another: that one filled
        up, or the paths changed) is deleted, after waiting for it if it is being made, before the
        caller makes its own: left on disk, a crash would leave two copies of the segment."""
        name = os.path.basename(path)
        with self._cond:
            while not self._stopped and any(os.path.basename(p) == name for p in self._creating):
                self._cond.wait()
            mapped = self._ready.pop(path, None)
            untaken = [self._ready.pop(p) for p in list(self._ready) if os.path.basename(p) == name]
        for spare in untaken:
            log.info("deleting %s, made ahead: the segment goes to %s", spare.path, path)
            spare.destroy(0)
        return mapped

    def discard(self, queue: object) -> None:
        """Delete pre-created segments nobody took (a clean shutdown leaves none behind)."""
        with self._cond:
            while self._creating and not self._stopped:
                self._cond.wait()
            ready, self._ready = self._ready, {}
        for mapped in ready.values():
            mapped.destroy(0)

    # -- pre-faulting ------------------------------------------------------------------------------
    def advise(self, mapped: MappedFile, position: int) -> int:
        """The writer reached ``position``: fault pages in up to a window ahead. Returns the
        position at which the writer should call again."""
        if not self.prefault_enabled:
            return mapped.file_size
        end = min(mapped.file_size, position + self.window)
        with self._cond:
            self._jobs.append(("populate", mapped, position, end, self.warm))
            self._cond.notify()
        return min(mapped.file_size, position + self.window // 2)

    def populate_soon(self, mapped: MappedFile, start: int, end: int) -> None:
        """Fault in ``[start, end)`` of a segment in the background (a new index file's slot table)."""
        if self.prefault_enabled and mapped.mode == "rw":
            with self._cond:
                self._jobs.append(("populate", mapped, start, min(end, mapped.file_size), False))
                self._cond.notify()

    # -- the thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                job = self._jobs.popleft()
                self._busy = True
            try:
                if job[0] == "create":
                    self._create(*job[1:])
                else:
                    self._populate(*job[1:])
            except Exception:  # pragma: no cover - logged, the writer falls back to doing it itself
                log.exception("segment allocator job %s failed", job[0])
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no job is queued or running (segments made, pages faulted in and warmed)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._stopped or not (self._jobs or self._busy), timeout)

    def _create(self, path: str, offset: int, size: int) -> None:
        mapped = None
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if not os.path.exists(path):
                mapped = MappedFile.create(path, offset, size, keep_fds=LOG_FD_RESERVE)  # commit-log segments
        except Exception as exc:  # whatever it was, the writer makes the segment itself: never wait on it
            log.warning("could not pre-create %s: %s", path, exc)
        with self._cond:
            self._creating.discard(path)
            if mapped is not None:
                if self._stopped:
                    mapped.destroy(0)
                else:
                    self._ready[path] = mapped
            self._cond.notify_all()
        if mapped is not None and self.prefault_enabled:
            self._populate(mapped, 0, min(size, self.window), self.warm)

    def _populate(self, mapped: MappedFile, start: int, end: int, warm: bool = False) -> None:
        done = max(start, mapped.prefaulted)
        while done < end and not self._stopped:
            step = min(end, done + _CHUNK)
            if not populate(mapped, done, step):
                if not mapped.available:
                    break
                self.prefault_enabled = False
                log.info("madvise(MADV_POPULATE_WRITE) is not available; pages fault in on write")
                break
            if warm:
                if self._write_out(mapped):
                    self.warmed_bytes += step - done
                else:
                    warm = False
            done = step
            mapped.prefaulted = done

    def _write_out(self, mapped: MappedFile) -> bool:
        """Write the segment's dirty pages (the zeros just faulted in among them) to disk through a
        descriptor of its own; False (logged) if that fails."""
        try:
            fd = os.open(mapped.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            log.warning("warming %s: %s", mapped.path, exc)
            return False
        try:
            os.fdatasync(fd)
            return True
        except OSError as exc:
            log.warning("warming %s: %s; the commit log's own flush will meet it too", mapped.path, exc)
            return False
        finally:
            os.close(fd)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join()
        ready, self._ready = self._ready, {}
        for mapped in ready.values():
            mapped.destroy(0)
