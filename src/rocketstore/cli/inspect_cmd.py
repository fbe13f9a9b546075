"""``rocketstore inspect``: what a store holds, opened read-only (nothing on disk changes)."""

from __future__ import annotations

import os
import time
from typing import Any

import click
from rich.table import Table

from rocketstore.cli.common import Common, open_store, recovery_info, store_options
from rocketstore.cli.output import cell, kv_table, out_console, print_json
from rocketstore.meta.lockfile import describe_holder, lock_holder
from rocketstore.store import MessageStore
from rocketstore.verify.segment_scan import segment_label


def _checkpoint_on_disk(store: MessageStore) -> dict[str, int]:
    """The checkpoint as the file held it at open (a read-only open's recovery changes it in memory only)."""
    return store.checkpoint.as_read or store.checkpoint.as_dict()


def inspect_store(store: MessageStore) -> dict[str, Any]:
    """The facts ``inspect`` shows, as one JSON-ready dict."""
    recovery = store.recovery
    dropped = set(recovery.dropped_files) if recovery else set()
    files = []
    for folder in store.config.commit_log_folders:
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                files.append(
                    {
                        "name": name,
                        "path": segment_label(path, store.root),  # which folder, of several (storePathCommitLog)
                        "size": os.path.getsize(path),
                        "droppedByRecovery": name in dropped,
                    }
                )
    files.sort(key=lambda f: f["name"])
    queues = []
    for (topic, queue_id), cq in sorted(store.queues.table.items()):
        low, high = cq.min_offset_in_queue(), cq.max_offset_in_queue()
        queues.append(
            {"topic": topic, "queueId": queue_id, "minOffset": low, "maxOffset": high, "messages": max(0, high - low)}
        )
    lag = 0 if recovery is None else _dispatch_lag(store, recovery)
    index_files = []
    for index in store.index.files:
        index_files.append({"name": index.file_name, "onDisk": os.path.exists(index.path), **index.header_dict()})
    holder = lock_holder(store.root)  # a process that has the store open (its pid), or None
    config_dir = os.path.join(store.root, "config")
    config_files = []
    if os.path.isdir(config_dir):
        for name in sorted(os.listdir(config_dir)):
            path = os.path.join(config_dir, name)
            if os.path.isfile(path):
                config_files.append({"name": name, "size": os.path.getsize(path)})
    return {
        "store": store.root,
        "abortFile": not store.last_exit_ok,
        "lastExitOk": store.last_exit_ok,
        "lockHeldBy": holder,
        "commitLog": {
            "minOffset": store.min_phy_offset,
            "maxOffset": store.max_phy_offset,
            "fileSize": store.config.mapped_file_size_commit_log,
            "positions": store.positions(),
            # another process writes: the positions are where a recovery of the files ends now, not
            # that process's (what it committed and flushed cannot be seen from here)
            "positionsRecoveredFromFiles": holder is not None,
            "files": files,
        },
        "queues": queues,
        "messages": sum(q["messages"] for q in queues),
        "checkpoint": _checkpoint_on_disk(store),
        "checkpointAfterRecovery": store.checkpoint.in_memory_dict(),
        "recovery": recovery_info(store),
        "dispatchLag": {"bytes": lag, "recordsDispatched": recovery.records_dispatched if recovery else 0},
        "indexFiles": index_files,
        "configFiles": config_files,
        "disk": store.disk_report(),
        "schedule": store.schedule_report(),
    }


def _dispatch_lag(store: MessageStore, recovery: Any) -> int:
    """Log bytes the consume queues or the index lacked before recovery: from the end of what
    both held to where the log ends. The index counts only when recovery indexed records past
    its last one (records without keys are never indexed: a tail of them is no lag)."""
    first = max(store.min_phy_offset, 0)  # -1 for a log without segments
    start = max(recovery.consume_queue_end, first)
    index = store.index
    if index is not None and index.files and store.config.message_index_enable:
        before = recovery.index_end
        if index.files[-1].end_phy_offset > before:
            indexed = before + max(0, store.commit_log.record_size_at(before)) if before >= 0 else -1
            start = min(start, max(indexed, first))
    return max(0, recovery.process_offset - start)


def _last_exit(info: dict[str, Any]) -> str:
    """How the store was left: a store open in a process keeps ``abort`` until it shuts down, so the
    file says it crashed only when no process holds the lock."""
    holder = info["lockHeldBy"]
    if holder is not None:
        who = describe_holder(holder)
        return f"in use: {who} has it open (holds the lock; abort is there until it shuts down)"
    return "ok (no abort file)" if info["lastExitOk"] else "abnormal (abort file present)"


def _render(info: dict[str, Any]) -> None:
    console = out_console()
    log = info["commitLog"]
    lag = info["dispatchLag"]
    if log["positionsRecoveredFromFiles"]:
        positions = (
            "end of the data in the files (recovered now)",
            f"{log['positions']['wrote']} (the holder's committed and flushed positions are not visible from here)",
        )
        lag_row = ("dispatch lag in the files (the running process's may be less)", f"{lag['bytes']} bytes")
    else:
        marks = " / ".join(str(log["positions"][k]) for k in ("wrote", "committed", "flushed"))
        positions = ("wrote / committed / flushed", marks)
        lag_row = ("dispatch lag before recovery", f"{lag['bytes']} bytes")
    console.print(
        kv_table(
            f"store {info['store']}",
            [
                ("last exit", _last_exit(info)),
                ("commit log min offset", log["minOffset"]),
                ("commit log max offset", log["maxOffset"]),
                positions,
                ("messages in consume queues", info["messages"]),
                lag_row,
                # the open re-reads from the consume queues' end or the index's last record, whichever
                # is first, and dispatch skips what they hold: a clean store shows 1 or more here too
                ("records re-checked by the open (queues, index)", lag["recordsDispatched"]),
            ],
        )
    )
    table = Table(title="commit log files", title_justify="left")
    for name, justify in (("name", "left"), ("size", "right"), ("note", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    several = len({os.path.dirname(f["path"]) for f in log["files"]}) > 1  # name the folder of each
    for f in log["files"]:
        note = "dropped by recovery" if f["droppedByRecovery"] else ""
        table.add_row(cell(f["path"] if several else f["name"]), cell(f["size"]), cell(note))
    console.print(table)
    table = Table(title="consume queues", title_justify="left")
    for name in ("topic", "queueId", "minOffset", "maxOffset", "messages"):
        table.add_column(name, justify="left" if name == "topic" else "right")
    for q in info["queues"]:
        table.add_row(*(cell(q[k]) for k in ("topic", "queueId", "minOffset", "maxOffset", "messages")))
    console.print(table)
    console.print(kv_table("checkpoint", info["checkpoint"].items()))
    if info["recovery"] is not None:
        rows = [(k, v) for k, v in info["recovery"].items() if k != "queueEndsKept"]
        console.print(kv_table("recovery (in memory)", rows))
    _render_disk(console, info["disk"], len(log["files"]))
    if info["schedule"]:
        table = Table(title="delayed messages (SCHEDULE_TOPIC_XXXX)", title_justify="left")
        for name in ("level", "delay", "offset", "maxOffset", "lag", "next due"):
            table.add_column(name, justify="right")
        for row in info["schedule"]:
            due = _when(row["nextDeliverTimestamp"])
            table.add_row(*(cell(row[k]) for k in ("level", "delay", "offset", "maxOffset", "lag")), cell(due))
        console.print(table)
    table = Table(title="index files", title_justify="left")
    columns = ("name", "beginTimestamp", "endTimestamp", "beginPhyOffset", "endPhyOffset", "hashSlotCount")
    for name in (*columns, "indexCount", "onDisk"):
        table.add_column(name, justify="left" if name == "name" else "right")
    for f in info["indexFiles"]:
        table.add_row(*(cell(f[k]) for k in (*columns, "indexCount", "onDisk")))
    console.print(table)
    table = Table(title="config files", title_justify="left")
    table.add_column("name")
    table.add_column("size", justify="right")
    for f in info["configFiles"]:
        table.add_row(cell(f["name"]), cell(f["size"]))
    console.print(table)


@click.command()
@store_options()
def inspect(opts: Common) -> None:
    """Show a store: commit-log files and offsets, queues, checkpoint, last exit (or the process
    that has it open), dispatch lag, index files and config files. Read-only: a store that needs
    recovery is recovered in memory."""
    store = open_store(opts, read_only=True)
    try:
        info = inspect_store(store)
    finally:
        store.shutdown()
    if opts.as_json:
        print_json(info)
    else:
        _render(info)


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def _render_disk(console: Any, disk: dict[str, Any], segments: int) -> None:
    rows: list[tuple[str, Any]] = [
        (f"used: {folder}", f"{ratio * 100:.0f} %" if ratio >= 0 else "unknown")
        for folder, ratio in disk["ratios"].items()
    ]
    nxt = disk["nextDeletion"]
    if nxt["file"]:
        deletion = f"{nxt['file']} at {_when(nxt['deletesAt'])}"
    else:
        deletion = "- (no segment)" if not segments else "- (a single segment: the newest is never deleted)"
    marks = ("diskMaxUsedSpaceRatio", "cleanForciblyRatio", "warningRatio")
    rows += [
        ("watermarks (delete / forcibly / refuse puts)", " / ".join(f"{disk[k] * 100:.0f} %" for k in marks)),
        ("disk full (puts refused)", disk["diskFull"]),
        ("running flags", ", ".join(disk["runningFlags"]) or "-"),
        ("retention", f"{disk['fileReservedTimeHours']} h, deleted at hour(s) {disk['deleteWhen']}"),
        ("next deletion", deletion),
    ]
    console.print(kv_table("disk", rows))
