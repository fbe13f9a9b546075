"""Folders on disk: which spellings name the same one, and how full the disk partition holding a
folder is, as RocketMQ measures it (spec 14.2).

``UtilAll.getDiskPartitionSpaceUsedPercent``: used / (used + usable) of the partition, as ``df``
shows it, where used is total - ``File.getFreeSpace`` (every free block) and usable is
``File.getUsableSpace`` (the free blocks not reserved for root), rounded up to a whole percent;
-1 when the folder cannot be measured.
"""

from __future__ import annotations

import os
from collections.abc import Iterable


def distinct_folders(folders: Iterable[str]) -> list[str]:
    """``folders`` normalised (no trailing ``/``, ``//`` or ``.``), each once: the first spelling of
    a folder named again, under any spelling, through a link or a bind mount, is kept (RocketMQ's
    getPaths() is a set)."""
    seen: dict[object, str] = {}
    for folder in folders:
        folder = os.path.normpath(folder)
        try:  # one folder under two paths that no link joins (a bind mount) is one folder too
            st = os.stat(folder)
            key: object = (st.st_dev, st.st_ino)
        except OSError:
            key = os.path.realpath(folder)
        seen.setdefault(key, folder)
    return list(seen.values())


def used_ratio(folder: str) -> float:
    """The used fraction of the partition holding ``folder`` (or its nearest existing parent), or -1."""
    try:
        st = os.statvfs(_existing(folder))
    except OSError:
        return -1.0
    if st.f_blocks <= 0:
        return -1.0
    used = st.f_blocks - st.f_bfree
    entire = used + st.f_bavail
    return -(-used * 100 // entire) / 100 if entire > 0 else 1.0


def partition_bytes(folder: str) -> tuple[int, int]:
    """(total, free) bytes of the partition holding ``folder``; (0, 0) when it cannot be measured."""
    try:
        st = os.statvfs(_existing(folder))
    except OSError:
        return 0, 0
    return st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize


def _existing(folder: str) -> str:
    """``folder``, or the nearest parent that exists (a store's folders appear as it fills)."""
    folder = os.path.abspath(folder)
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return folder
