"""An ordered run of equal-size segments forming one address space (MappedFileQueue, spec 2).

The list of segments is replaced, never changed in place, so a reader that took
``self.files`` keeps a consistent view while the writer rolls or cleanup deletes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import mmap
import os
import re
import threading
import time
from collections.abc import Callable, Iterable

from rocketstore.errors import CorruptStoreError, RocketStoreError
from rocketstore.files import syscalls
from rocketstore.files.disk import distinct_folders
from rocketstore.files.mapped_file import (
    FD_RESERVE,
    MappedFile,
    dangling_link,
    holds_data,
    offset_to_file_name,
    remove_leftover,
)

log = logging.getLogger(__name__)
SEGMENT_NAME = re.compile(r"\d{20}")  # a segment file: its first offset, 20 digits
_RELISTS = 5  # listings of several folders a read-only load makes at most after the first


def segment_offsets(folders: Iterable[str]) -> list[int]:
    """The offsets the segment files in ``folders`` are named by (missing folders hold none)."""
    return [
        int(name)
        for folder in folders
        if os.path.isdir(folder)
        for name in os.listdir(folder)
        if SEGMENT_NAME.fullmatch(name)
    ]


def only_zeros(path: str) -> bool:
    """True when the file holds zero bytes only (never written)."""
    with open(path, "rb") as f:
        if not os.fstat(f.fileno()).st_size:
            return True
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return not holds_data(mm)


class MappedFileQueue:
    """Segments of ``file_size`` bytes in one folder, or spread over several (multi-path); segments
    in ``read_only_paths`` are loaded with the others, but no new segment goes there (not even when
    ``paths`` names the folder too, unless no other is left)."""

    def __init__(
        self,
        paths: str | list[str],
        file_size: int,
        mode: str = "rw",
        *,
        path_is_full: Callable[[str], bool] | None = None,
        allocator: object | None = None,
        pool: object | None = None,
        read_only_paths: list[str] | None = None,
        reserve: int | None = None,
        size_setting: str = "mappedFileSizeCommitLog",
        keep_fds: int = FD_RESERVE,
    ) -> None:
        self.paths = [paths] if isinstance(paths, str) else list(paths)
        self.read_only_paths = list(read_only_paths or [])  # StoreConfig.commit_log_read_only_paths
        self._read_only = {os.path.realpath(p) for p in self.read_only_paths}
        self.file_size = file_size
        self.mode = mode
        self.keep_fds = keep_fds  # descriptors a new file leaves to the rest (MappedFile.create)
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self.committed_where = 0
        # a flush (or commit) at a time: one that read an older target and ended last would move
        # the position back; two commits could give one pool buffer back twice
        self._flush_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        # ``files`` is copy-on-write (readers take the list as it is); a change builds a new list
        # from the current one under this lock, or a new segment and a deletion racing each other
        # (the put or reput thread and the clean thread) would drop one another's change
        self._files_lock = threading.Lock()
        self.store_timestamp = 0
        self.dropped_empty_last = False  # load found the last file empty and left it out
        # the writable folders as configured now (storePathCommitLog changed while running), or None
        self.paths_now: Callable[[], list[str]] | None = None
        self.path_is_full = path_is_full
        self.allocator = allocator
        self.pool = pool  # a TransientStorePool: new segments write into one of its buffers
        self.reserve = reserve  # new segments get disk for this many bytes at first (None: all)
        self.size_setting = size_setting  # the setting that gives file_size, named when a file disagrees
        self.on_create: Callable[[MappedFile], None] | None = None  # told of every new segment

    # -- load ------------------------------------------------------------------------------------
    def load(self) -> None:
        """Map every segment on disk; a stray or wrong-size file is an error that names it."""
        folders = distinct_folders(self.paths + self.read_only_paths)
        listed = self._list(folders)
        if self.mode != "rw" and len(folders) > 1:
            listed = self._settled(folders, listed)
        found: dict[str, str] = {}
        for name, full in listed:
            found[name] = self._one_copy(found[name], full) if name in found else full
        names = sorted(found)
        if names and os.path.getsize(found[names[-1]]) == 0:
            # a zero-length last file is a crash artefact of file creation; RocketMQ 5 drops it
            if self.mode == "rw":
                log.warning("deleting the empty last segment %s", found[names[-1]])
                os.unlink(found[names[-1]])
            names.pop()
            self.dropped_empty_last = True
        files: list[MappedFile] = []
        try:
            for name in names:
                offset = int(name)
                if offset % self.file_size:
                    raise CorruptStoreError(
                        f"the start offset is not a multiple of the segment size {self.file_size}", found[name]
                    )
                if files and files[-1].end_offset != offset:
                    raise CorruptStoreError(
                        f"a gap: the previous segment {files[-1].file_name} ends at {files[-1].end_offset}",
                        found[name],
                    )
                sparse = self.reserve is not None
                odd = functools.partial(self._others_sized_as_set, found, name)
                files.append(
                    MappedFile.open(found[name], offset, self.file_size, self.mode, sparse, self.size_setting, odd)
                )
        except BaseException:
            for f in files:
                f.close()
            raise
        self.files = files

    def _others_sized_as_set(self, found: dict[str, str], name: str) -> bool:
        """True when a segment other than ``name`` (found of another size) is of the configured size."""
        return any(os.path.getsize(path) == self.file_size for other, path in found.items() if other != name)

    def _list(self, folders: list[str]) -> list[tuple[str, str]]:
        """(name, path) of every segment file in ``folders``; a stray entry is an error."""
        listed = []
        for folder in folders:
            if not os.path.isdir(folder):
                if os.path.lexists(folder):  # a file (or a dangling link) where the segments' folder belongs
                    raise CorruptStoreError("not a folder: segment files belong in a folder here", folder)
                continue
            for name in sorted(os.listdir(folder)):
                full = os.path.join(folder, name)
                if remove_leftover(full, self.mode):
                    continue
                if os.path.isdir(full):
                    raise CorruptStoreError("a folder where only segment files belong", full)
                if dangling := dangling_link(full):
                    raise CorruptStoreError(
                        f"{dangling}: restore its target, or remove the link if that file is gone", full
                    )
                if not SEGMENT_NAME.fullmatch(name):
                    raise CorruptStoreError(
                        "a stray file: segment files are named by their 20-digit start offset", full
                    )
                listed.append((name, full))
        return listed

    def _settled(self, folders: list[str], listed: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """A live writer may roll between the listings of two folders (a false gap): list them
        again until two rounds agree, which makes the first of them a true snapshot."""
        for _ in range(_RELISTS):
            again = self._list(folders)
            if again == listed:
                return listed
            listed = again
        raise RocketStoreError(f"{', '.join(folders)} kept changing while they were listed")

    def _one_copy(self, first: str, second: str) -> str:
        """Of two copies of a segment, the one to load. A full-size copy holding only zeros is a
        next segment made ahead in a folder the roll then did not take, left by a crash: it is
        dropped (deleted in rw mode). Two copies that both hold data are an error. Two names of
        one file (a hard link) are one copy."""
        with contextlib.suppress(OSError):
            if os.path.samefile(first, second):
                return first
        empty = [p for p in (second, first) if only_zeros(p)]
        for spare in empty:
            if os.path.getsize(spare) == self.file_size:
                kept = first if spare == second else second
                if self.mode == "rw":
                    log.warning("deleting %s: a segment made ahead, never written (%s is the segment)", spare, kept)
                    os.unlink(spare)
                return kept
        what = f"{empty[0]} holds nothing: delete it" if empty else "both hold data: move aside the one not in use"
        raise CorruptStoreError(f"the same segment is also in {first}; {what}", second)

    # -- segments ----------------------------------------------------------------------------------
    @property
    def first(self) -> MappedFile | None:
        files = self.files
        return files[0] if files else None

    @property
    def last(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    def last_mapped_file(self, start_offset: int = 0, create: bool = True) -> MappedFile | None:
        """The segment to append to: the last one, or a new one when it is full or there is none."""
        files = self.files
        last = files[-1] if files else None
        if last is None:
            create_offset = start_offset - start_offset % self.file_size
        elif last.is_full():
            create_offset = last.end_offset
        else:
            return last
        if not create:
            return last
        return self._create(create_offset, first_in_queue=last is None)

    def _create(self, offset: int, first_in_queue: bool) -> MappedFile:
        if self.pool is not None and self.pool.fast_fail and not self.pool.available():
            raise OSError("no free buffer in the transient store pool (fastFailIfNoBufferInStorePool)")
        index = offset // self.file_size
        folder = self._folder_for(index)
        if self.mode != "cow":  # a read-only view's new files live in memory only: no folder for them either
            os.makedirs(folder, exist_ok=True)
        if os.path.realpath(folder) not in {os.path.realpath(p) for p in self.paths}:
            self.paths = [*self.paths, folder]  # a folder configured while running: its segments are ours too
        path = os.path.join(folder, offset_to_file_name(offset))
        buffer = None if self.pool is None else self.pool.borrow() or self._buffer_by_committing()
        try:
            mapped = self.allocator.take(path) if self.allocator is not None else None
            if mapped is None:
                mapped = MappedFile.create(path, offset, self.file_size, self.mode, self.reserve, self.keep_fds)
        except BaseException:
            if buffer is not None:
                self.pool.give_back(buffer)  # type: ignore[union-attr]
            raise
        mapped.first_create_in_queue = first_in_queue
        mapped.write_buffer = buffer  # None (no pool, or none freed): written straight through to the file
        with self._files_lock:
            self.files = [*self.files, mapped]
        if self.allocator is not None:
            self.allocator.prepare_next(self, offset + self.file_size)
        if self.on_create is not None:
            self.on_create(mapped)
        return mapped

    def _folder_for(self, index: int) -> str:
        paths = self.paths if self.paths_now is None else self.paths_now() or self.paths
        if self._read_only:
            paths = [p for p in paths if os.path.realpath(p) not in self._read_only] or paths
        if len(paths) == 1:
            return paths[0]
        writable = [p for p in sorted(paths) if not (self.path_is_full and self.path_is_full(p))]
        if not writable:
            writable = sorted(paths)
        return writable[index % len(writable)]

    def folder_of_next(self, offset: int) -> str:
        return self._folder_for(offset // self.file_size)

    def find_by_offset(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        first = files[0]
        index = offset // self.file_size - first.file_from_offset // self.file_size
        if 0 <= index < len(files) and offset >= first.file_from_offset:
            return files[index]
        return first if return_first_on_not_found else None

    # -- offsets -----------------------------------------------------------------------------------
    def min_offset(self) -> int:
        files = self.files
        return files[0].file_from_offset if files else -1

    def max_offset(self) -> int:
        """End of the readable data."""
        files = self.files
        return files[-1].file_from_offset + files[-1].read_position if files else 0

    def max_wrote_offset(self) -> int:
        files = self.files
        return files[-1].file_from_offset + files[-1].wrote_position if files else 0

    def remaining_to_flush(self) -> int:
        return self.max_offset() - self.flushed_where

    # -- flush and commit --------------------------------------------------------------------------
    def flush(self, least_pages: int = 0) -> bool:
        """Flush the segment holding ``flushed_where``; True when nothing advanced."""
        with self._flush_lock:
            return self._flush(least_pages)

    def _flush(self, least_pages: int) -> bool:
        first = self.first
        if first is not None and self.flushed_where < first.file_from_offset:  # deleted unflushed: gone
            self.flushed_where = first.file_from_offset
        mapped = self.find_by_offset(self.flushed_where, self.flushed_where == 0)
        if mapped is None:
            return True
        # the time of the last record the flush makes durable: with a write buffer, the last committed
        ts = mapped.store_timestamp if mapped.write_buffer is None else mapped.committed_timestamp
        where = mapped.file_from_offset + mapped.flush(least_pages)
        nothing = where == self.flushed_where
        self.flushed_where = where
        if least_pages == 0 and ts:
            self.store_timestamp = ts
        return nothing

    def _buffer_by_committing(self) -> mmap.mmap | None:
        """Every pool buffer lent: commit the full segments holding them, so that the new segment
        takes one back instead of being written straight into its file behind bytes still in
        memory (a crash would lose those, and recovery would cut at the hole and drop the records
        after it, on disk as they were). None when the pool has no buffer at all, or the commit
        fails (the commit service tries it again; the new segment is written straight through,
        as RocketMQ writes it)."""
        assert self.pool is not None
        for _ in range(min(len(self.files), self.pool.size)):
            try:
                self.commit(0)
            except (OSError, ValueError) as exc:  # (ValueError: a mapping closed under it)
                log.warning("a commit at a segment roll failed (%s): the new segment is written straight through", exc)
                return None
            buffer = self.pool.borrow()
            if buffer is not None:
                return buffer
        return None

    def commit(self, least_pages: int = 0) -> bool:
        """Commit the segment holding ``committed_where`` (transient pool); True when nothing advanced.

        A segment full and committed gives its write buffer back to the pool."""
        with self._commit_lock:
            return self._commit(least_pages)

    def _commit(self, least_pages: int) -> bool:
        first = self.first
        if first is not None and self.committed_where < first.file_from_offset:  # deleted uncommitted: gone
            self.committed_where = first.file_from_offset
        mapped = self.find_by_offset(self.committed_where, self.committed_where == 0)
        if mapped is None:
            return True
        where = mapped.file_from_offset + mapped.commit(least_pages)
        if mapped.committed_position >= mapped.file_size:
            self._give_back_buffer(mapped)
        nothing = where == self.committed_where
        self.committed_where = where
        return nothing

    # -- truncation and deletion -------------------------------------------------------------------
    def truncate_dirty_files(self, offset: int) -> None:
        """Cut the queue at ``offset``: the segment holding it keeps its head, later ones go."""
        with self._files_lock:
            keep = [f for f in self.files if f.file_from_offset <= offset]
            gone = self.files[len(keep) :]
            self.files = keep
        if keep and keep[-1].end_offset > offset:
            keep[-1].truncate(offset - keep[-1].file_from_offset)
        self._cut_marks(offset)
        for mapped in gone:
            mapped.destroy(1000)

    def delete_last_file(self) -> None:
        with self._files_lock:
            files = self.files
            if not files:
                return
            self.files = files[:-1]
        self._cut_marks(files[-1].file_from_offset)
        files[-1].destroy(1000)

    def _cut_marks(self, end: int) -> None:
        """After a cut at ``end``: the flush and commit positions go no further, so that what is
        written there again is flushed (a position past the end would find no segment to flush)."""
        self.flushed_where = min(self.flushed_where, end)
        self.committed_where = min(self.committed_where, end)

    def delete_files(self, doomed: list[MappedFile]) -> None:
        gone = {id(f) for f in doomed}
        with self._files_lock:
            self.files = [f for f in self.files if id(f) not in gone]

    def delete_expired_by_time(
        self,
        expired_ms: int,
        delete_interval_ms: int,
        interval_forcibly_ms: int,
        clean_immediately: bool,
        batch_max: int,
        now: float | None = None,
        keep_from: int | None = None,
    ) -> int:
        """Delete a leading run of segments older than ``expired_ms`` (mtime); never the last one,
        nor one ending past ``keep_from`` (records not dispatched yet). One still held loses its
        name too but stays listed until it is unmapped (``retry_delete_first_file``)."""
        files = self.files
        now = time.time() if now is None else now
        deleted: list[MappedFile] = []
        for i, mapped in enumerate(files[:-1]):
            if keep_from is not None and mapped.end_offset > keep_from:
                break
            try:
                mtime = os.path.getmtime(mapped.path) if mapped.mode == "rw" else now
            except OSError:
                mtime = 0
            if not (now * 1000 >= mtime * 1000 + expired_ms or clean_immediately):
                break
            if not mapped.destroy(interval_forcibly_ms):
                break
            deleted.append(mapped)
            if len(deleted) >= batch_max:
                break
            if delete_interval_ms > 0 and i + 1 < len(files) - 1:
                time.sleep(delete_interval_ms / 1000)
        self._sync_removals(files[: len(deleted) + 1])
        self.delete_files(deleted)
        return len(deleted)

    def retry_delete_first_file(self, interval_forcibly_ms: int) -> bool:
        """Destroy the first segment again if an earlier delete left it held (a hanged file)."""
        first = self.first
        if first is None or first.available:
            return False
        if first.destroy(interval_forcibly_ms):
            self.delete_files([first])
            return True
        return False

    @staticmethod
    def _sync_removals(files: list[MappedFile]) -> None:
        """Make the removal of the names of ``files`` (those removed) durable, an fsync per folder,
        before the consume queues and the index drop what pointed into them: a power cut must
        not bring back a segment whose queue and index entries are gone."""
        for folder in sorted({os.path.dirname(f.path) for f in files if f.unlinked}):
            with contextlib.suppress(OSError):
                syscalls.fsync_dir(folder)

    def mapped_memory_size(self) -> int:
        return sum(f.file_size for f in self.files)

    def _give_back_buffer(self, mapped: MappedFile) -> None:
        """``mapped``'s write buffer, if it has one, back to the pool (which unmaps it at close)."""
        buf, mapped.write_buffer = mapped.write_buffer, None
        if buf is not None and self.pool is not None:
            self.pool.give_back(buf)

    def close(self) -> None:
        """Unmap every segment; the one being written gives its write buffer back to the pool, so
        that closing the pool frees it (else a segment's worth of memory stays until the store
        object goes)."""
        for mapped in self.files:
            self._give_back_buffer(mapped)
            mapped.close()
        if self.allocator is not None:
            self.allocator.discard(self)

    def destroy(self) -> None:
        with self._files_lock:
            files, self.files = self.files, []
        for mapped in files:
            mapped.destroy(0)
        self.flushed_where = self.committed_where = 0
        if self.mode == "rw":
            for folder in self.paths:
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
