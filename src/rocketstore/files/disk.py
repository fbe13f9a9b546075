"""How full the disk partition holding a folder is, as RocketMQ measures it (spec 14.2).

``UtilAll.getDiskPartitionSpaceUsedPercent``: (total - free) / total of the partition, where
free is ``File.getFreeSpace`` (every free block, the root-reserved ones included), rounded up to
a whole percent; -1 when the folder cannot be measured.
"""

from __future__ import annotations

import math
import os


def used_ratio(folder: str) -> float:
    """The used fraction of the partition holding ``folder`` (or its nearest existing parent), or -1."""
    try:
        st = os.statvfs(_existing(folder))
    except OSError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return -1.0
    used = total - st.f_bfree * st.f_frsize
    return math.ceil(used * 100 / total) / 100


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
