"""Checkpoint checks: its timestamps claim only what the files hold."""

from __future__ import annotations

from rocketstore.store import MessageStore
from rocketstore.verify.log_columns import LogColumns
from rocketstore.verify.report import VerifyReport


def check_checkpoint(store: MessageStore, log: LogColumns, report: VerifyReport) -> None:
    """physicMsgTimestamp and logicsMsgTimestamp say up to which store time the log and the queues
    were flushed, indexMsgTimestamp up to which the index was: none may be later than the newest
    record (the newest index file's end). A checkpoint ahead of the data makes abnormal recovery
    start past records it should walk again. A problem, or a note while ``abort`` is present (a
    power cut can take data the checkpoint already named; recovery then walks from the log)."""
    flag = report.note if report.abort_file else report.problem
    checkpoint = store.checkpoint
    for name, value in (
        ("physicMsgTimestamp", checkpoint.physic_msg_timestamp),
        ("logicsMsgTimestamp", checkpoint.logics_msg_timestamp),
        ("indexMsgTimestamp", checkpoint.index_msg_timestamp),
    ):
        if value < 0:  # no store writes one; an abnormal recovery walks the log from its first segment
            report.note(f"checkpoint: {name} {value} is before 1970 (recovery after a crash walks the whole log)")
    newest = int(log.store_ts.max()) if len(log.store_ts) else 0
    for name, value in (
        ("physicMsgTimestamp", checkpoint.physic_msg_timestamp),
        ("logicsMsgTimestamp", checkpoint.logics_msg_timestamp),
    ):
        if value > newest:
            flag(f"checkpoint: {name} {value} is later than the newest record's store time ({newest})")
    files = store.index.files
    if files:
        index_end = max(f.end_timestamp for f in files)
        if checkpoint.index_msg_timestamp > index_end:
            flag(
                f"checkpoint: indexMsgTimestamp {checkpoint.index_msg_timestamp} is later than the newest "
                f"index file's end ({index_end})"
            )
