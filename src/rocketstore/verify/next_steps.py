"""What to do about each kind of problem ``verify`` lists: the lines that end its report. Only
repairs that exist are named: ``recover`` (with ``--dry-run``, ``--force`` and
checkCRCOnRecover=false), rebuilding queues or index (moved aside, then ``recover``; or ``spark
rebuild``), and copying the readable messages into a new store (``export``, then ``import``)."""

from __future__ import annotations

import os
import shlex

from rocketstore.meta.lockfile import describe_holder
from rocketstore.verify.log_columns import LogColumns
from rocketstore.verify.report import VerifyReport

CRC_OFF = (
    "a record whose body CRC alone fails is kept, with every record after it, by a recovery given "
    "--set checkCRCOnRecover=false (every later open needs it too while the record is in the last 3 "
    "segments, or after a crash)"
)


DELAY_OFFSETS = (
    "; for delayOffset.json that means the next process that keeps the store open for writing delivers "
    "again the delayed messages already delivered past the offsets loaded: to avoid that, set each level's "
    "offset (its first unit not yet delivered) in config/delayOffset.json by hand first"
)


def recover_log(store: str) -> str:
    """The next step for damage recovery cuts the log at."""
    store = shlex.quote(store)
    return (
        f"commit log: `rocketstore recover {store} --dry-run` says where recovery ends the log and what that "
        f"drops; `rocketstore recover {store}` then cuts it there (it asks for --force before it drops records "
        "that pass their checks)"
    )


def copy_to_new_store(store: str) -> str:
    """The way on when no repair in place exists: the readable messages copied into a new store."""
    return (
        f"copy the readable messages into a new store: `rocketstore export {shlex.quote(store)} -o all.jsonl`, then "
        "`rocketstore import NEW_STORE -i all.jsonl` (new commit-log offsets; consumer offsets are not copied; a "
        "body whose CRC fails is copied as stored)"
    )


def in_place(store: str) -> str:
    """The next step for damage recovery leaves: none in place; a copy without it."""
    return (
        "commit log: no command repairs a record in place, and recovery leaves damage where it does not check "
        "(before the last 3 segments after a clean shutdown, before the checkpoint's after a crash; a body whose CRC "
        "fails when recovery does not check CRCs) as it is (RocketMQ serves the records it can read); for a store "
        f"without it, {copy_to_new_store(store)}"
    )


def no_room(store: str) -> str:
    """The next step for a log that ends without room for its BLANK marker: no open for writing
    takes the store (a message stored after the end would be lost at the next open)."""
    return (
        "commit log: the log ends in a segment without room for its BLANK marker: no open for writing takes the "
        "store, recover --force included (a message stored after the end would be lost at the next open); "
        + copy_to_new_store(store)
    )


ELSEWHERE = (
    " (but a unit whose record says another queue, queue offset or transaction type may point at a record whose "
    "header is damaged, which no CRC covers: a rebuild queues each record by its own fields, so that record would "
    "leave its queue and every later unit of that queue would move one offset down, under the offsets consumers "
    "committed; when the units around it agree with the queue, the record is what is damaged: keep the consume "
    "queues as they are, as RocketMQ serves them)"
)


BLANK_INSIDE = (
    " (but not while a BLANK marker inside a segment, above, has records after it: a rebuild, as RocketMQ's "
    "dispatch, reads nothing of that segment past the marker, so those records would leave their queues and "
    "every later unit of those queues would move down, under the offsets consumers committed; keep the queues as "
    "they are, or copy the messages into a new store, as said above)"
)


MULTI_DISPATCH = (
    " (recover writes no multi-dispatch copies: after it, move the light message queues (%LMQ%...) back from the "
    ".old folder; spark rebuild keeps their units, but only up to a damaged one: copies after it are lost, as no "
    "rebuild makes copies)"
)


def rebuild(store: str, folder: str, report: VerifyReport) -> str:
    """The next step for consume queues (``consumequeue``) or the index (``index``) that disagree
    with the commit log: build them again from it, with a warning when units disagree with their
    records' own queue fields (the record's header may be the damaged part), when a BLANK marker
    inside a segment hides records from any rebuild, and when queues hold multi-dispatch copies."""
    if folder == "consumequeue":
        what, caveat = "consume queues", ELSEWHERE if report.units_record_elsewhere else ""
        caveat += MULTI_DISPATCH if report.multi_dispatch_units else ""
    else:
        what, caveat = "index", ""
    if report.blanks_inside:
        caveat += BLANK_INSIDE
    return (
        f"{what}: build them again from the commit log: "
        f"`mv {shlex.quote(os.path.join(store, folder))} {shlex.quote(f'{store}-{folder}.old')}`, then "
        f"`rocketstore recover {shlex.quote(store)}`; or `rocketstore spark rebuild {shlex.quote(store)}`{caveat}"
    )


def unreadable_config(path: str) -> str:
    """The next step for a config file that cannot be read, nor its backup: the store does not
    load (as RocketMQ's broker does not start), so nothing but moving both aside gets it going."""
    name = os.path.basename(path)
    both = f"{shlex.quote(path)} {shlex.quote(path + '.bak')}"
    return (
        f"config files: {name} cannot be read, nor its backup, so the store does not load (nor would RocketMQ's "
        f"broker start): move both out of the store (`mv {both} SOMEWHERE/`); the store then starts "
        f"with {name} empty (what was in it is lost: put back what you can by hand), and verify checks the rest"
        + (DELAY_OFFSETS if name == "delayOffset.json" else "")
    )


def add_next_steps(
    report: VerifyReport,
    found: dict[str, int],
    layout_paths: set[str],
    log_folders: list[str],
    log: LogColumns | None,
) -> None:
    """Add the next step for each kind of problem found: ``found`` counts the problems of each
    check (``layout``, ``log``, ``queues``, ``index``, ``config``, ``checkpoint``),
    ``layout_paths`` are the paths the layout check named."""
    store = report.store
    steps: list[str] = []
    kinds = {_kind(path, store, log_folders) for path in layout_paths}
    quoted = shlex.quote(store)
    if "log files" in kinds:
        steps.append(
            "commit-log files: move a stray file or folder out of the commit-log folder; the records of a missing "
            "segment, or of one of the wrong size, only a copy of the store can give back"
        )
    if "entries" in kinds:
        steps.append("store entries: move an entry of the wrong kind (a folder for a file, or the reverse) out of it")
    if found.get("log") and log is not None:
        steps.extend(_log_steps(report, log))
    recovers = log is None or not log.no_room  # else no open for writing takes the store: no recover step works
    if recovers and (found.get("queues") or "queues" in kinds):
        steps.append(rebuild(store, "consumequeue", report))
    if recovers and (found.get("index") or "index" in kinds):
        steps.append(rebuild(store, "index", report))
    if recovers and found.get("config"):
        steps.append(
            f"config files: `rocketstore recover {quoted}` writes each one again as the store loads it (from its "
            "backup, or empty), keeping the bad file as .corrupt-*"
            + (DELAY_OFFSETS if found.get("delay offsets") else "")
        )
    if recovers and (found.get("checkpoint") or "checkpoint" in kinds):
        steps.append(f"checkpoint: `rocketstore recover {quoted}` writes it again")
    if steps and report.lock_held_by is not None:
        steps.insert(
            0,
            f"the store is in use: stop {describe_holder(report.lock_held_by)} (it holds the store) before the steps "
            "below, which recover, move or copy its files (recover refuses a store in use), and verify it again then",
        )
    report.next_steps.extend(steps)


def _log_steps(report: VerifyReport, log: LogColumns) -> list[str]:
    """Damage recovery checks (it cuts the log there), damage it leaves, and body CRCs."""
    kept = set(log.crc_kept)
    starts = [at for at in log.skipped[:, 0].tolist() if at not in kept]
    checked = log.torn_at is not None or any(at >= log.checked_from for at in starts)
    left = not checked or bool(kept) or any(at < log.checked_from for at in starts)
    if log.no_room:
        return [no_room(report.store)]
    steps = [recover_log(report.store)] if checked else []
    if left:
        steps.append(in_place(report.store))
    if log.cut is not None and not log.other_damage:  # the setting keeps what recovery would cut
        steps.append(f"body CRC: {CRC_OFF}")
    return steps


def _kind(path: str, store: str, log_folders: list[str]) -> str:
    """Which part of the store a path the layout check named belongs to (a store entry itself, of
    the wrong kind: ``entries``)."""
    parts = [
        *((folder, "log files") for folder in log_folders),
        *((os.path.join(store, name), kind) for name, kind in (("consumequeue", "queues"), ("index", "index"))),
    ]
    for folder, kind in parts:
        if path.startswith(folder + os.sep):
            return kind
    if path == os.path.join(store, "checkpoint") and os.path.isfile(path):
        return "checkpoint"
    return "entries"
