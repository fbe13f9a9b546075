"""What makes a folder a store root: the commit log, or one of the entries RocketMQ keeps beside it.

Tools that only read a store (and ``recover``) refuse a folder holding none of them: a mistyped
path, or a broker's home instead of its ``store`` folder, would otherwise look like an empty,
healthy store.
"""

from __future__ import annotations

import os

from rocketstore.config import StoreConfig
from rocketstore.errors import StoreNotFoundError

ROOT_ENTRIES = ("consumequeue", "index", "checkpoint", "config", "abort", "lock")


def holds_store(root: str, config: StoreConfig) -> bool:
    """True when ``root`` holds a commit-log folder (``config``'s) or any other store entry."""
    paths = config.copy(storePathRootDir=root).commit_log_paths
    return any(os.path.isdir(p) for p in paths) or any(os.path.exists(os.path.join(root, e)) for e in ROOT_ENTRIES)


def require_store(root: str, config: StoreConfig) -> None:
    """Raise StoreNotFoundError unless ``root`` is a store root; the error names a sub-folder that
    is one, when there is exactly one (``~/store`` given as ``~``)."""
    if not os.path.isdir(root):
        raise StoreNotFoundError(f"no store at {root}: no such folder")
    if holds_store(root, config):
        return
    inside = sorted(
        e.path for e in os.scandir(root) if e.is_dir() and holds_store(e.path, config.copy(storePathCommitLog=""))
    )
    hint = f"; did you mean {inside[0]}?" if len(inside) == 1 else ""
    raise StoreNotFoundError(
        f"no store at {root}: it holds no commitlog folder and none of {', '.join(ROOT_ENTRIES)}{hint}"
    )
