"""``rocketstore spark verify``: ``rocketstore verify`` with the commit-log scan done in parallel.

The expensive part of a verification is reading every record with its body CRC; Spark tasks do
that per segment (``rocketstore.verify.scan_segment``, so every per-record check is the same)
and send back the record columns and their findings. The driver then runs the single-process
verifier's log-end logic on those results, and its consume-queue and index checks (numpy array
operations over the gathered columns). The report is a ``VerifyReport``, as ``rocketstore
verify`` prints it. Nothing on disk changes. A store another process holds is checked, as there,
up to where its records ended when verify started (``verify.live_tail``), and the report says so.
"""

from __future__ import annotations

from typing import Any

from rocketstore import verify as v
from rocketstore.config import StoreConfig
from rocketstore.files.mapped_file import MappedFile
from rocketstore.spark.jobs import Segment, group_segments
from rocketstore.store import MessageStore


def _scan_group(
    group: list[Segment], delay_millis: tuple[int, ...], max_listed: int | None, prop_crc: bool, root: str
) -> list[v.SegmentScan]:
    """A task: each segment of the group scanned with CRC checks, as ``rocketstore verify`` does."""
    out = []
    for seg in group:
        mapped = MappedFile.open(seg.path, seg.base, seg.size, "cow")
        mapped.set_positions(seg.size)
        try:
            out.append(v.scan_segment(mapped, delay_millis, max_listed, prop_crc=prop_crc, root=root))
        finally:
            mapped.close()  # (gives its descriptor count back, as every unmapping)
    return out


def verify(
    spark: Any, path: str, config: StoreConfig | None = None, *, max_problems: int | None = 100
) -> v.VerifyReport:
    """Audit the store at ``path`` with Spark; see the module docstring."""

    def check_log(store: MessageStore, report: v.VerifyReport, tail: int | None) -> v.LogColumns:
        """``tail``: a store another process holds is checked up to where its records ended when
        verify started, as ``rocketstore verify`` checks it (``verify.live_tail``)."""
        files = store.commit_log.queue.files  # as the store was loaded (the single-process check's)
        segments = [Segment(m.file_from_offset, m.path, m.file_size) for m in files]
        if tail is not None:
            segments = [seg for seg in segments if seg.base < tail]
        scans: list[v.SegmentScan] = []
        if segments:
            delay, prop_crc, root = store.delay_millis, store.config.force_verify_prop_crc, report.store
            groups = group_segments(segments, spark.sparkContext.defaultParallelism)
            rdd = spark.sparkContext.parallelize(groups, len(groups))
            found = rdd.flatMap(lambda g: _scan_group(g, delay, max_problems, prop_crc, root)).collect()
            scans = sorted(found, key=lambda x: x.base)
            if tail is not None:
                scans = [v.up_to(scan, tail) for scan in scans]
        scope = v.recovery_scope(store, report.abort_file)
        log = v.join_segments([seg.path for seg in segments], scans.__getitem__, report, **scope)
        report.commit_log_files = len(files)
        if tail is not None:
            v.note_live_tail(report, tail)
        return log

    return v.verify_store(path, config, max_problems=max_problems, check_log=check_log)
