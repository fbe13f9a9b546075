"""Spark commits to one store take turns: ``config/sparkCommit.lock``, an flock each commit holds while it
has the store open (``commit_turn``, waiting up to the ``lockWaitMs`` option); a store another program holds is
refused (``check_unheld``); a commit that fails in a folder that held no store leaves it as it was
(``remove_made_store``, and the turn's own files: ``_leave_no_trace``). See ``commits`` for what a commit does
in its turn.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator

from rocketstore.config import StoreConfig
from rocketstore.errors import StoreLockedError
from rocketstore.files.file_queue import only_zeros
from rocketstore.files.syscalls import fsync_dir
from rocketstore.meta.lockfile import describe_holder, held, lock_holder
from rocketstore.meta.root import is_inside
from rocketstore.store import MessageStore

COMMIT_LOCK_NAME = "sparkCommit.lock"
COMMIT_LOCK = os.path.join("config", COMMIT_LOCK_NAME)


@contextlib.contextmanager
def commit_turn(root: str, wait_ms: int) -> Iterator[bool]:
    """Hold ``config/sparkCommit.lock`` (an flock: threads of one process exclude each other too), waiting for
    it up to ``wait_ms`` while another Spark commit holds it; yields whether the folder held nothing but that
    lock then (no store: the commit makes it). A commit that fails in a folder holding nothing but that lock (a
    new store whose open was refused, or one ``remove_made_store`` removed) leaves it as it was (``_leave_no_trace``):
    ``config`` would make it pass for a store. One waiting meanwhile takes its turn anew (``_take_turn``)."""
    fd, made = _take_turn(root, wait_ms)
    try:
        yield _only_the_turn(root)
    except BaseException:
        _leave_no_trace(root, made)  # while the turn is still held
        raise
    finally:
        os.close(fd)  # drops the flock


def _take_turn(root: str, wait_ms: int) -> tuple[int, str | None]:
    """An fd of the lock file at its path, flocked, and the topmost folder of root's path this call made (or
    None); what a failed commit removed meanwhile (the file, ``config/``, folders) is made anew."""
    path = os.path.join(root, COMMIT_LOCK)
    folder = os.path.dirname(path)
    deadline = time.monotonic() + wait_ms / 1000
    pause = 0.002
    fd, made = -1, None
    try:
        while True:
            if fd < 0:
                try:
                    top = os.path.abspath(root)  # the topmost missing folder of root's path
                    while not os.path.lexists(os.path.dirname(top)):
                        top = os.path.dirname(top)
                    with contextlib.suppress(FileExistsError):  # made meanwhile; a file: making config/ in it fails
                        os.mkdir(top)
                        made = top if made is None or len(top) < len(made) else made
                    os.makedirs(folder, exist_ok=True)
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                except (FileExistsError, FileNotFoundError):  # a failed commit removed config/ or the folder
                    if os.path.lexists(folder) and not os.path.isdir(folder):
                        raise  # a file named config: no race, nothing to wait for; else try again
            if fd >= 0:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    pass
                else:
                    if _at_path(fd, path):
                        taken, fd = fd, -1
                        return taken, made
                    os.close(fd)  # a file a failed commit removed from the path: wait on the one there
                    fd = -1
                    continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoreLockedError(
                    f"{root}: another Spark write kept committing to it for over {wait_ms} ms (the lockWaitMs option)"
                )
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.1)
    finally:
        if fd >= 0:
            os.close(fd)


def _at_path(fd: int, path: str) -> bool:
    """Whether ``fd`` is the file at ``path`` (not one removed from there)."""
    try:
        return os.path.samestat(os.stat(path), os.fstat(fd))
    except FileNotFoundError:
        return False


def _only_the_turn(root: str) -> bool:
    """Whether the folder holds nothing but ``config/sparkCommit.lock``."""
    with contextlib.suppress(OSError):
        return os.listdir(root) == ["config"] and os.listdir(os.path.join(root, "config")) == [COMMIT_LOCK_NAME]
    return False


def _leave_no_trace(root: str, made: str | None) -> None:
    """Remove the commit lock and ``config/`` when they are all the folder holds (the commit failed before the
    store was made, or removed it), and the folders it made (``made`` and those below it), while empty."""
    with contextlib.suppress(OSError):
        if not _only_the_turn(root):
            return
        os.unlink(os.path.join(root, COMMIT_LOCK))
        os.rmdir(os.path.join(root, "config"))
        if made is None:
            fsync_dir(root)
            return
        path, up = os.path.abspath(root), ""
        while up != made:  # root, then each parent up to ``made``; an OSError (one not empty) stops it
            os.rmdir(path)
            path, up = os.path.dirname(path), path


def holds_nothing(store: MessageStore) -> bool:
    """Whether the store holds no message, nor a file in a commit-log folder outside its own."""
    try:
        outside = [p for p in store.config.commit_log_folders if not is_inside(p, store.root)]
        return store.max_phy_offset == 0 and not any(os.path.isdir(p) and os.listdir(p) for p in outside)
    except Exception:  # a store that cannot tell: kept
        return False


def remove_made_store(root: str, config: StoreConfig) -> None:
    """Remove what a commit made in a folder that held only the commit lock at its turn, but that lock (for
    ``commit_turn``): under the store's lock, its file last, and only while no file of a commit-log folder holds
    data (a program that has the store open, or filled it meanwhile without waiting for the turn, keeps it)."""
    folders = config.copy(storePathRootDir=os.path.abspath(root)).commit_log_folders
    with contextlib.suppress(OSError, StoreLockedError), held(root):
        if not all(only_zeros(os.path.join(f, name)) for f in folders if os.path.isdir(f) for name in os.listdir(f)):
            return  # messages are in (a file that cannot be read, or a folder, fails: kept as well)
        config = os.path.join(root, "config")
        paths = [os.path.join(config, name) for name in os.listdir(config) if name != COMMIT_LOCK_NAME]
        names = sorted(os.listdir(root), key=lambda name: name == "lock")  # the lock's file last
        paths += [os.path.join(root, name) for name in names if name != "config"]
        for path in paths:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)


def held_elsewhere(root: str, exc: StoreLockedError) -> StoreLockedError:
    return StoreLockedError(
        f"{root} is open in another program (a broker, a program with the store open, a rebuild), not in a "
        f"Spark write: a Spark write appends only to a store no other program has open ({exc})"
    )


def check_unheld(root: str) -> None:
    """Refuse (StoreLockedError), on the driver before any task runs, a store another program holds open. A store a
    Spark commit holds is not refused: the write waits for its turn. Nothing is written (``/proc/locks`` tells who
    holds the lock; where it cannot, the commit will)."""
    holder = lock_holder(root)
    if holder is None:
        return
    try:  # a commit makes the turn's file before it takes the store's lock
        fd = os.open(os.path.join(root, COMMIT_LOCK), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = -1
    if fd >= 0:
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # a Spark commit has the turn: the store is its
            holder = lock_holder(root)  # with the turn held, no Spark commit can hold the store
            if holder is None:
                return
        finally:
            os.close(fd)
    raise held_elsewhere(root, StoreLockedError(f"{describe_holder(holder)} holds its lock"))
