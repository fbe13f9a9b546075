"""``rocketstore verify`` (check everything against the commit log) and ``rocketstore recover``."""

from __future__ import annotations

import os

import click

from rocketstore.cli.common import (
    CommandError,
    Common,
    ProblemsFound,
    check_commit_log,
    check_store,
    found_problems,
    lost_log,
    max_problems_option,
    missing_tail,
    open_store,
    recovery_info,
    refusal,
    say_settings,
    store_options,
)
from rocketstore.cli.output import kv_table, out_console, print_json, progress_bar, say, warn
from rocketstore.cli.stops import done_storing
from rocketstore.codec.topic import SCHEDULE_TOPIC
from rocketstore.meta.lockfile import held, refuse_if_locked
from rocketstore.services.wiring import no_delayed_delivery
from rocketstore.store import MessageStore
from rocketstore.verify import VerifyReport, iter_problem_lines, verify_store
from rocketstore.verify.next_steps import in_place, no_room
from rocketstore.verify.recovery_plan import RecoveryPlan, plan_recovery

EXIT_PROBLEMS = 1


def render_report(opts: Common, report: VerifyReport) -> None:
    """A verify report as a table, its problems and notes, and the next steps (plain ``verify``'s
    and ``spark verify``'s)."""
    console = out_console()
    console.print(kv_table(f"verify {report.store}", report.summary_rows()))
    for line in iter_problem_lines(report):
        say(line)
    if report.next_steps:
        say_settings(opts)


def _log_bytes(opts: Common) -> int:
    """What verify's scan reads (the progress bar's total): the commit-log segments up to the last
    that holds data, and that one's data (not the pre-allocated rest of it, nor an empty segment
    after it: a 1 GiB segment holding a few MB is a few MB to scan)."""
    segments: dict[str, str] = {}
    for folder in opts.commit_log_paths:
        if os.path.isdir(folder):
            for entry in os.scandir(folder):
                if entry.name.isdigit() and entry.is_file():
                    segments.setdefault(entry.name, entry.path)
    total = 0
    for name in sorted(segments, reverse=True):
        try:
            total += os.path.getsize(segments[name]) if total else _data_end(segments[name])
        except OSError:  # removed meanwhile (a store in use)
            continue
    return total


_CHUNK = 1 << 20


def _data_end(path: str) -> int:
    """Where the data of a segment ends, roughly (a progress bar's measure): a segment is written
    from its start and the rest is zeros, so the first all-zero MiB is found by bisection (a MiB
    of zeros inside the data can only make the bar's total off by a little)."""
    with open(path, "rb") as f:
        chunks = -(-os.fstat(f.fileno()).st_size // _CHUNK)
        zeros = bytes(_CHUNK)

        def chunk(i: int) -> bytes:
            f.seek(i * _CHUNK)
            return f.read(_CHUNK)

        first = chunk(0) if chunks else b""
        if first == zeros[: len(first)]:
            return 0
        low, high = 0, chunks  # chunk ``low`` holds data; every chunk from ``high`` on is zeros
        while high - low > 1:
            mid = (low + high) // 2
            data = chunk(mid)
            if data == zeros[: len(data)]:
                high = mid
            else:
                low = mid
        return low * _CHUNK + len(chunk(low).rstrip(b"\0"))


@click.command()
@store_options()
@max_problems_option
@click.pass_context
def verify(ctx: click.Context, opts: Common, max_problems: int) -> None:
    """Check every record's CRC and offset, every consume-queue unit and every index entry against
    the commit log, and that every record is in its queue and found by its keys. Nothing on disk
    changes. Exit status 1 when anything is wrong; damage that recovery repairs after a crash
    (abort file present) is a note, not a problem. The report ends with the next step for each
    kind of problem found (recover, rebuilding queues or index, checkCRCOnRecover, a copy)."""
    check_commit_log(opts, writes=False)
    with progress_bar("verify", _log_bytes(opts), unit_bytes=True) as advance:
        report = verify_store(opts.store, opts.config, max_problems=max_problems, progress=advance)
    if not report.ok:
        found_problems()
    if opts.as_json:
        print_json(report.to_dict())
    else:
        render_report(opts, report)
    if not report.ok:
        ctx.exit(EXIT_PROBLEMS)


@click.command()
@store_options(writes=True)
@click.option(
    "--force",
    is_flag=True,
    help="Recover even when that loses messages: cut the commit log at a bad record that intact records "
    "follow (as RocketMQ's recovery does: they are dropped), or, when the commit log is missing or empty "
    "while consume queues hold units, delete every queue and index entry. Copy the store first.",
)
@click.option("--dry-run", is_flag=True, help="Say what recover would do (recovery runs in memory); change nothing.")
@click.pass_context
def recover(ctx: click.Context, opts: Common, force: bool, dry_run: bool) -> None:
    """Recover a store in place, as opening it for writing does, then shut it down cleanly:
    recovery checks the last 3 commit-log segments after a clean shutdown (every segment from the
    checkpoint's after a crash) and ends the log at the first record there that fails its checks;
    consume queues and index are completed or truncated to match.

    The output says which segments recovery checked and which it did not (verify checks them), and
    the next step for bad records it met before the checked segments and kept, as RocketMQ does.

    Recovery runs in memory first. When the log would be cut at a bad record that intact records
    follow, nothing is changed and recover exits with status 1, naming the record and what would
    be dropped: give --force to cut as RocketMQ does (or, when only that record's body CRC fails,
    --set checkCRCOnRecover=false to keep it). A torn last record (what a crash leaves) is cut
    without --force. --dry-run only says what recover would do (exit status 1 when it would refuse).

    No delayed message is delivered (the store is opened without its schedule service).

    Refused without --force when the commit log is missing or empty but consume queues hold units,
    or (in several folders) its end is missing while they reach past it, and without
    --external-commit-log when storePathCommitLog puts the commit log outside STORE."""
    advice = (
        "give --force if what is missing is really gone and the queues' units past it are to go too "
        "(copy the store before)"
    )
    # (--dry-run says why it would refuse in its answer, not in a warning before it too)
    check_store(opts, writes=not dry_run, allow_lost_log=force or dry_run, lost_log_advice=advice, as_writer=True)
    plan = _plan(opts, dry_run)
    if dry_run:
        lost = None if force else lost_log(opts) or missing_tail(opts)
        refused = lost is not None or plan.recovery.no_room_for_blank or (plan.loses_data and not force)
        if refused:
            found_problems()
        _show_plan(opts, plan, refused, lost and f"{lost}: recover refuses it without --force ({advice})")
        if refused:
            ctx.exit(EXIT_PROBLEMS)
        return
    if plan.recovery.no_room_for_blank:  # no open for writing takes it, with --force either
        raise CommandError(no_room(opts.root))
    if plan.loses_data and not force:
        raise ProblemsFound(refusal(opts, plan), plan=plan.to_dict())
    had_abort = os.path.exists(os.path.join(opts.root, "abort"))
    with no_delayed_delivery():  # recovery only: no delayed message is delivered
        store = open_store(opts, create=False, checked=True, planned=True)
    with store:  # a failed shutdown does not hide an error before it
        report = recovery_info(store)
        offsets = {"minOffset": store.min_phy_offset, "maxOffset": store.max_phy_offset}
        steps = _left(plan, store.recovery.kept_bad_records if store.recovery else [])
        warnings = [w for w in (_delay_offsets_lost(store),) if w]
    done_storing(f"{opts.root} was recovered")  # recovered and shut down: a closed stdout now cuts only the report
    for text in warnings:
        warn(f"WARNING: {text}")
    info = {
        "store": store.root,
        "abortFileBefore": had_abort,
        "abortFileAfter": os.path.exists(os.path.join(store.root, "abort")),
        **offsets,
        "droppedRecords": plan.intact_records,
        "droppedBytes": plan.intact_bytes,
        "staleRecordsDropped": plan.stale_records,
        "cutAt": None if plan.bad is None else plan.bad.to_dict(),
        "checked": plan.checked(),
        "notChecked": _not_checked(plan),
        "nextSteps": steps,
        "warnings": warnings,
        "recovery": report,
    }
    if opts.as_json:
        print_json(info)
        return
    rows = [
        ("abort file before", had_abort),
        ("abort file after", info["abortFileAfter"]),
        ("commit log min offset", info["minOffset"]),
        ("commit log max offset", info["maxOffset"]),
        ("checked", info["checked"]),
        *([("not checked", info["notChecked"])] if info["notChecked"] else []),
        *_cut_rows(plan),
        *((k, v) for k, v in (report or {}).items() if k != "queueEndsKept"),
    ]
    out_console().print(kv_table(f"recovered {store.root}", rows))
    for step in steps:
        say(f"next step: {step}")
    if steps:
        say_settings(opts)


def _plan(opts: Common, dry_run: bool) -> RecoveryPlan:
    """The recovery plan. recover holds the store's lock while it is made, so that no broker or
    other process opens the store for writing meanwhile (it is let go just before recover's own
    open takes it again); --dry-run, which must not write, only refuses a store a process is known
    to hold."""
    if dry_run:
        refuse_if_locked(opts.root)
        return plan_recovery(opts.root, opts.config)
    with held(opts.root):
        return plan_recovery(opts.root, opts.config)


def _delay_offsets_lost(store: MessageStore) -> str | None:
    """What a delayOffset.json that could not be read means (None when it was read): the offsets
    loading fell back to (none, or its backup's) are written, and delivery starts over from them."""
    problem = store.delay_offsets.load_problem
    if problem is None:
        return None
    waiting = sum(int(row["lag"]) for row in store.schedule_report())  # type: ignore[call-overload]
    return (
        f"config/delayOffset.json could not be read ({problem}); recover wrote the delay offsets again as loaded, as "
        f"RocketMQ does: the next process that keeps the store open for writing delivers the {waiting} unit(s) of "
        f"{SCHEDULE_TOPIC} past them, so delayed messages already delivered are delivered again. To avoid that, "
        "set each level's offset (its first unit not yet delivered) in config/delayOffset.json before then (the "
        "unreadable content is kept as config/delayOffset.json.corrupt-*)"
    )


def _not_checked(plan: RecoveryPlan) -> str | None:
    """The segments recovery does not check, and how to check them."""
    if not plan.unchecked:
        return None
    return (
        f"the {plan.unchecked} segment(s) before {plan.checked_from} (records there are not read, or read without "
        f"cutting the log): `rocketstore verify {plan.root}` checks every record"
    )


def _left(plan: RecoveryPlan, kept: list[int]) -> list[str]:
    """What recovery left that it knows is wrong, and the next step for it."""
    if not kept:
        return []
    shown = ", ".join(map(str, kept[:5])) + (f", ... ({len(kept)} in all)" if len(kept) > 5 else "")
    return [
        f"{len(kept)} record(s) fail their checks where recovery does not cut the log (at offset {shown}): "
        "before the segments it checks, or a BLANK marker inside a segment, after which it goes on in the next "
        f"file; recovery keeps them, as RocketMQ does. {in_place(plan.root)}"
    ]


def _cut_rows(plan: RecoveryPlan) -> list[tuple[str, object]]:
    """What the cut dropped, for the table."""
    if plan.bad is None:
        return [("records dropped", 0)]
    stale = plan.stale()
    return [
        ("log cut at", plan.bad.describe()),
        ("records dropped", f"{plan.intact_records} intact record(s), {plan.intact_bytes} bytes"),
        *([("stale records", stale)] if stale else []),
    ]


def _verdict(plan: RecoveryPlan, refused: bool) -> str:
    if plan.recovery.no_room_for_blank:
        return "recover refuses, even with --force (below)"
    return "recover refuses without --force (below)" if refused else "recover would go ahead"


def _show_plan(opts: Common, plan: RecoveryPlan, refused: bool, lost: str | None) -> None:
    """--dry-run's answer: what recover would do, or why it would refuse (the first refusal recover
    itself would meet: a commit log or its end gone, a log without room for its BLANK marker, a cut
    that drops intact records)."""
    why = lost
    if why is None and plan.recovery.no_room_for_blank:
        why = no_room(opts.root)
    elif why is None and plan.loses_data and refused:
        why = refusal(opts, plan, dry_run=True)
    checked = {"checked": plan.checked(), "notChecked": _not_checked(plan)}  # as recover's own answer names them
    if opts.as_json:
        print_json(
            {"store": opts.root, "dryRun": True, "wouldRefuse": refused, "why": why, **checked, "plan": plan.to_dict()}
        )
        return
    rows = [
        ("checked", checked["checked"]),
        *([("not checked", checked["notChecked"])] if checked["notChecked"] else []),
        ("log would end at", plan.end),
        *_cut_rows(plan),
        ("segments dropped", ", ".join(plan.recovery.dropped_files) or "none"),
        ("verdict", _verdict(plan, refused)),
    ]
    out_console().print(kv_table(f"recover --dry-run {opts.root}: nothing changed", rows))
    if why:
        say(why)
