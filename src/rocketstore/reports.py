"""The shapes of the store's reports (``disk_report``, ``schedule_report``): dicts with RocketMQ's
camelCase names, as ``--json`` prints them, typed for type checkers."""

from __future__ import annotations

from typing import TypedDict


class NextDeletion(TypedDict):
    """When the oldest segment goes by time (all None while there is a single segment)."""

    file: str | None  # its name
    expiresAt: int | None  # epoch ms: its mtime + fileReservedTime
    deletesAt: int | None  # epoch ms: the first deleteWhen hour at or after that (None: no hour given)


class DiskReport(TypedDict):
    """Disk usage against the watermarks (``MessageStore.disk_report``)."""

    ratios: dict[str, float]  # used fraction per commit-log folder and of consumequeue/, by path
    diskMaxUsedSpaceRatio: float
    cleanForciblyRatio: float
    warningRatio: float
    diskFull: bool
    cleanImmediately: bool
    fullPaths: list[str]
    deleteWhen: str
    fileReservedTimeHours: int
    nextDeletion: NextDeletion
    runningFlags: list[str]  # the RunningFlags bits set, by name


class ScheduleLevel(TypedDict):
    """One delay level (``MessageStore.schedule_report``)."""

    level: int
    delay: str  # its messageDelayLevel text ("10s")
    offset: int  # delivered up to this queue offset
    maxOffset: int
    lag: int  # messages still waiting
    nextDeliverTimestamp: int | None  # epoch ms of the next one, None when none waits
    nextDueInMs: int | None
