"""What makes a folder a store root: the commit log, or one of the entries RocketMQ keeps beside it.

Tools that only read a store (and ``recover``) refuse a folder holding none of them: a mistyped
path, or a broker's home instead of its ``store`` folder, would otherwise look like an empty,
healthy store.
"""

from __future__ import annotations

import contextlib
import logging
import os

from rocketstore.config import StoreConfig
from rocketstore.errors import ConfigError, CorruptStoreError, InvalidArgumentError, StoreNotFoundError, shown
from rocketstore.files.syscalls import fsync_dir

log = logging.getLogger(__name__)

ROOT_ENTRIES = ("consumequeue", "index", "checkpoint", "config", "abort", "lock")
FILE_ENTRIES = ("checkpoint", "abort", "lock")
# The config files (spec 10.3, and rocketstore's deletedTopics.json) with their backups and
# temporary copies, under ``config``.
CONFIG_FILES = tuple(
    os.path.join("config", name + suffix)
    for name in (
        "topics.json",
        "consumerOffset.json",
        "delayOffset.json",
        "subscriptionGroup.json",
        "deletedTopics.json",
    )
    for suffix in ("", ".bak", ".tmp")
)


def is_inside(path: str, folder: str) -> bool:
    """True when ``path`` is ``folder`` or lies under it, symlinks resolved."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def overlapping_store_folder(out: str, root: str, config: StoreConfig) -> str | None:
    """The store's folder (its root, or a commit-log folder ``storePathCommitLog`` puts elsewhere)
    that an output folder ``out`` lies in or holds: writing ``out`` over would destroy it."""
    for folder in (root, *config.copy(storePathRootDir=os.path.abspath(root)).commit_log_folders):
        if is_inside(out, folder) or is_inside(folder, out):
            return folder
    return None


def root_of(path: object) -> str:
    """The absolute store root ``path`` names: a non-empty str or os.PathLike (of a str) without
    a NUL character (no file name holds one); InvalidArgumentError else."""
    if not isinstance(path, str | os.PathLike) or not isinstance(os.fspath(path), str) or not os.fspath(path):
        raise InvalidArgumentError(f"a store path is a non-empty str or os.PathLike (of a str), not {shown(path)}")
    if "\0" in os.fspath(path):
        raise InvalidArgumentError(f"a store path holds no NUL character: {shown(path)}")
    return os.path.abspath(os.fspath(path))


def holds_store(root: str, commit_log_paths: list[str]) -> bool:
    """True when ``root`` holds one of ``commit_log_paths`` (as folders) or any other store entry."""
    return any(os.path.isdir(p) for p in commit_log_paths) or any(
        os.path.exists(os.path.join(root, e)) for e in ROOT_ENTRIES
    )


def require_store(root: str, config: StoreConfig) -> None:
    """Raise StoreNotFoundError unless ``root`` (the root ``config`` is set to) is a store root; the
    error names a sub-folder that is one, when there is exactly one (``~/store`` given as ``~``)."""
    if not os.path.isdir(root):
        raise StoreNotFoundError(f"no store at {root}: no such folder")
    if holds_store(root, config.commit_log_folders):
        return
    inside = sorted(
        e.path for e in os.scandir(root) if e.is_dir() and holds_store(e.path, [os.path.join(e.path, "commitlog")])
    )
    hint = f"; did you mean {inside[0]}?" if len(inside) == 1 else ""
    raise StoreNotFoundError(
        f"no store at {root}: it holds no commitlog folder and none of {', '.join(ROOT_ENTRIES)}{hint}"
    )


def require_store_or_new_folder(root: str, config: StoreConfig) -> None:
    """Raise StoreNotFoundError, worded as ``require_store`` words it, unless a write may go to
    ``root``: a store root, or a missing or empty folder (it becomes a new store). A folder that
    holds files but no store (a typo'd path, a home folder, a broker's home given for its store)
    is refused, and so is a file. The rule of every write that may create a store: the Spark sink
    and the command line's produce and import. ``config``'s root is set to ``root``."""
    if not os.path.lexists(root) or (os.path.isdir(root) and not os.listdir(root)):
        return
    require_store(root, config.copy(storePathRootDir=root))


def misplaced_entries(root: str, config: StoreConfig) -> list[tuple[str, str]]:
    """(path, "a file" or "a folder") for each store entry of the wrong kind: a folder (or other
    non-file) named ``checkpoint``, ``abort``, ``lock`` or as a config file, or a file where a
    folder of the store belongs."""
    files = [os.path.join(root, name) for name in FILE_ENTRIES + CONFIG_FILES]
    folders = [os.path.join(root, name) for name in ROOT_ENTRIES if name not in FILE_ENTRIES]
    return [(p, "a file") for p in files if os.path.lexists(p) and not os.path.isfile(p)] + [
        (p, "a folder") for p in folders + config.commit_log_folders if os.path.lexists(p) and not os.path.isdir(p)
    ]


def misplaced_commit_log_folder(root: str, config: StoreConfig) -> str | None:
    """Why a commit-log folder (``storePathCommitLog``, ``readOnlyCommitLogStorePaths``) cannot hold
    segments: it holds the root, lies in the root's consume queues, index or config folder, or in
    another commit-log folder; their files would be read as stray segments (or the segments as a
    stray queue folder). None when every folder is a place of its own."""
    folders = config.commit_log_folders
    for folder in folders:
        if is_inside(root, folder):
            return f"the commit-log folder {folder} holds the store root {root}"
    for folder in folders:
        for name in ("consumequeue", "index", "config"):
            if is_inside(folder, os.path.join(root, name)):
                return f"the commit-log folder {folder} is inside the store's {name} folder"
        for other in folders:
            if other != folder and is_inside(folder, other):
                return f"the commit-log folder {folder} is inside the commit-log folder {other}"
    return None


def check_entries(root: str, config: StoreConfig) -> None:
    """ConfigError for a commit-log folder in a place of the store (``misplaced_commit_log_folder``);
    CorruptStoreError naming the first store entry of the wrong kind (``misplaced_entries``)."""
    why = misplaced_commit_log_folder(root, config)
    if why is not None:
        raise ConfigError(f"{why}: segments need a folder of their own")
    if config.read_only_paths_ignored:
        log.warning(
            "readOnlyCommitLogStorePaths %s is ignored: storePathCommitLog names one folder, and RocketMQ "
            "reads read-only folders only beside several (comma separated, as %s,%s)",
            config.read_only_commit_log_store_paths,
            config.commit_log_paths[0],
            config.read_only_commit_log_store_paths,
        )
    for path, kind in misplaced_entries(root, config):
        raise CorruptStoreError(f"should be {kind}", path)


def write_abort(root: str) -> None:
    """The marker of a store in use: left behind by a crash, it makes the next open recover. Its
    name is made durable too (the folder synced): a power cut must not take the marker and leave
    the data written after it, which only a crash recovery checks."""
    with open(os.path.join(root, "abort"), "wb") as f:
        os.fsync(f.fileno())
    fsync_dir(root)


def remove_abort(root: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(root, "abort"))
