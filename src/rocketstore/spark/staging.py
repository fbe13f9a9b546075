"""Job staging folders of the Spark sink: which driver process owns one, removing the folders of
jobs whose driver was killed (no commit or abort ran to delete them), and reading what tasks staged.

A job's folder names its driver (``OWNER``: the driver JVM's pid and start time, the host, its boot
and pid namespace); the next job staging beside it removes the folder once that process is gone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

log = logging.getLogger(__name__)
OWNER = "driver.json"  # in a job's staging folder: the driver process the job lives in (see ``sweep_staging``)
STALE_SECONDS = 24 * 3600  # a job folder whose driver cannot be checked is removed after this long unchanged


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _proc(pid: int, name: str) -> bytes | None:
    return _read(f"/proc/{pid}/{name}")


def _stat_fields(pid: int) -> list[bytes] | None:
    """/proc/<pid>/stat after the command name: [state, ppid, ...]; field 22 (starttime) is [19]."""
    stat = _proc(pid, "stat")
    return stat[stat.rfind(b")") + 2 :].split() if stat else None


def _machine() -> dict[str, Any]:
    """What tells whether a recorded pid can be checked from here: the host, its boot and the
    pid namespace (a container sharing the staging folder sees other pids)."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        pidns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pidns = None
    return {"host": socket.gethostname(), "boot": boot.decode().strip() if boot else None, "pidns": pidns}


def driver_pid() -> int | None:
    """The process a write job lives in: Spark's driver JVM, an ancestor of the Python worker a
    writer is made in. PySpark makes a writer in one pooled Python worker and commits it in
    another, so no Python process on the driver lives as long as the job; the JVM does (it
    exits with the program that started it). This process when it is no PySpark worker (a
    writer used directly); None when it cannot be told (no /proc: no job folder is then judged
    by its driver, only by its age)."""
    if _stat_fields(os.getpid()) is None:
        return None
    pid, in_worker = os.getpid(), False
    for _ in range(32):
        comm = _proc(pid, "comm")
        fields = _stat_fields(pid)
        if comm is None or fields is None:
            break
        if comm.strip().startswith(b"java"):
            return pid
        cmdline = _proc(pid, "cmdline") or b""
        in_worker = in_worker or any(
            m in cmdline for m in (b"pyspark.daemon", b"pyspark.worker", b"pyspark.sql.worker")
        )
        pid = int(fields[1])
        if pid <= 1:
            break
    return None if in_worker else os.getpid()


def _driver(this_process: bool = False) -> tuple[int | None, int | None]:
    """(pid, start time) of ``driver_pid`` (or of this process); (None, None) when it cannot be told."""
    pid = os.getpid() if this_process else driver_pid()
    fields = _stat_fields(pid) if pid is not None else None
    return (pid, int(fields[19])) if fields else (None, None)


def driver_tag() -> str:
    """The driver process as a part of a folder name ("-<pid>-<start time>"; "" when it cannot be
    told): a streaming query restarted by a new driver stages in a folder of its own, never in
    the one a sweep may be removing because the killed driver's record says it is gone."""
    pid, start = _driver()
    return f"-{pid}-{start}" if pid is not None else ""


def claim_folder(folder: str, this_process: bool = False) -> None:
    """Make a job's staging folder (on the driver) and record in it the driver process the job
    lives in (``OWNER``; with ``this_process``, this one: a folder of this program's own), written
    whole (a sweep never reads half of it)."""
    os.makedirs(folder, exist_ok=True)
    pid, start = _driver(this_process)
    owner = {"pid": pid, "start": start, **_machine()}
    tmp = os.path.join(folder, f".{OWNER}.{uuid.uuid4().hex[:8]}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(owner, f)
    os.replace(tmp, os.path.join(folder, OWNER))


def _driver_gone(owner: Any) -> bool | None:
    """True when the recorded driver process is gone, False when it runs, None when it cannot be
    told from here (another host, boot or pid namespace, or nothing recorded)."""
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int) or owner.get("start") is None:
        return None
    if any(owner.get(k) != v for k, v in _machine().items()):
        return None
    fields = _stat_fields(owner["pid"])
    # no such process, a dead one not yet reaped (a zombie), or the pid now names another process
    return fields is None or fields[0] in (b"Z", b"X") or int(fields[19]) != owner["start"]


def _file_stats(folder: str) -> Iterator[os.stat_result]:
    """``os.stat`` of every file under ``folder`` (one gone meanwhile left out)."""
    for parent, _dirs, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(OSError):
                yield os.stat(os.path.join(parent, name))


def recorded_driver(folder: str) -> Any:
    """The driver process ``claim_folder`` recorded in ``folder``; None when none can be read."""
    try:
        with open(os.path.join(folder, OWNER), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def driver_gone(folder: str) -> bool:
    """True only when the driver process recorded in ``folder`` is known to be gone."""
    return bool(_driver_gone(recorded_driver(folder)))


def _abandoned(folder: str) -> str | None:
    """Why a job folder may be removed, or None to keep it. A folder whose driver runs is kept,
    however old; one whose driver cannot be checked (another host, or a folder made before
    ``OWNER`` existed) only once nothing in it changed for ``STALE_SECONDS``."""
    owner = recorded_driver(folder)
    gone = _driver_gone(owner)
    if gone:
        return f"its driver (pid {owner['pid']} on {owner['host']}) is gone"
    if gone is False:
        return None
    newest = max([os.stat(folder).st_mtime, *(st.st_mtime for st in _file_stats(folder))])
    if time.time() - newest > STALE_SECONDS:
        return f"nothing in it changed for {STALE_SECONDS // 3600} h and its driver cannot be checked"
    return None


def sweep_staging(root: str, keep: str) -> None:
    """Remove the folders other jobs left in the staging root ``root`` when their driver was
    killed (no commit or abort ran to delete them); never ``keep`` nor a folder of a live job.
    Runs on the driver before a job makes its own folder; a failure here never fails the job."""
    try:
        entries = [e.path for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for folder in entries:
        if os.path.abspath(folder) == os.path.abspath(keep):
            continue
        try:
            why = _abandoned(folder)
            if why is None:
                continue
            stats = list(_file_stats(folder))
            files, size = len(stats), sum(st.st_size for st in stats)
            shutil.rmtree(folder)
            log.warning("removed %s (%d files, %d bytes staged): %s", folder, files, size, why)
        except OSError as exc:
            log.info("left %s: %s", folder, exc)


def staged_batches(staged: list[Any]) -> Iterator[pa.RecordBatch]:
    """The record batches of the staged files (each with a ``path``: ``sink.Staged``), in order."""
    for item in staged:
        with pa.memory_map(item.path, "r") as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)
