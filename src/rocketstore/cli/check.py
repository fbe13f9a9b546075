"""``rocketstore verify`` (check everything against the commit log) and ``rocketstore recover``."""

from __future__ import annotations

import os

import click

from rocketstore.cli.common import (
    Common,
    check_commit_log,
    max_problems_option,
    open_store,
    recovery_info,
    store_options,
)
from rocketstore.cli.output import kv_table, out_console, print_json, progress_bar, say
from rocketstore.verify import VerifyReport, iter_problem_lines, verify_store

EXIT_PROBLEMS = 1


def _render(report: VerifyReport) -> None:
    console = out_console()
    console.print(kv_table(f"verify {report.store}", report.summary_rows()))
    for line in iter_problem_lines(report):
        say(line)


def _log_bytes(opts: Common) -> int:
    """The size of the commit-log files (what verify scans), for the progress bar."""
    total = 0
    for folder in opts.commit_log_paths:
        if os.path.isdir(folder):
            total += sum(e.stat().st_size for e in os.scandir(folder) if e.is_file())
    return total


@click.command()
@store_options()
@max_problems_option
@click.pass_context
def verify(ctx: click.Context, opts: Common, max_problems: int) -> None:
    """Check every record's CRC and offset, every consume-queue unit and every index entry against
    the commit log, and that every record is in its queue and found by its keys. Nothing on disk
    changes. Exit status 1 when anything is wrong; damage that recovery repairs after a crash
    (abort file present) is a note, not a problem."""
    check_commit_log(opts, writes=False)
    with progress_bar("verify", _log_bytes(opts), unit_bytes=True) as advance:
        report = verify_store(opts.store, opts.config, max_problems=max_problems, progress=advance)
    if opts.as_json:
        print_json(report.to_dict())
    else:
        _render(report)
    if not report.ok:
        ctx.exit(EXIT_PROBLEMS)


@click.command()
@store_options(writes=True)
@click.option(
    "--force",
    is_flag=True,
    help="Recover even when the commit log is missing or empty while consume queues hold units "
    "(recovery then deletes every queue and index entry).",
)
def recover(opts: Common, force: bool) -> None:
    """Recover a store in place (as opening it for writing does: the commit log is cut at the first
    bad record, queues and index are completed or truncated), then shut it down cleanly.

    Refused without --force when the commit log is missing or empty but consume queues hold units,
    and without --external-commit-log when storePathCommitLog puts the commit log outside STORE."""
    had_abort = os.path.exists(os.path.join(opts.store, "abort"))
    advice = "give --force if the commit log is really gone and the queues are to go too (copy the store before)"
    store = open_store(opts, create=False, allow_lost_log=force, lost_log_advice=advice)
    try:
        report = recovery_info(store)
        offsets = {"minOffset": store.min_phy_offset, "maxOffset": store.max_phy_offset}
    finally:
        store.shutdown()
    info = {
        "store": store.root,
        "abortFileBefore": had_abort,
        "abortFileAfter": os.path.exists(os.path.join(store.root, "abort")),
        **offsets,
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
        *((k, v) for k, v in (report or {}).items() if k != "queueEndsKept"),
    ]
    out_console().print(kv_table(f"recovered {store.root}", rows))
