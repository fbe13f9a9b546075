"""``rocketstore spark rebuild|verify|export``: the store jobs run on Spark (needs the spark extra).

Each command starts a Spark session (``--master``, default ``local[2]``; any master URL works)
and runs the job of ``rocketstore.spark.jobs``; the same jobs run as ``python -m
rocketstore.spark.jobs`` or under ``spark-submit`` given that module's file path.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import click

from rocketstore.cli.check import EXIT_PROBLEMS, render_report
from rocketstore.cli.common import (
    CommandError,
    Common,
    ProblemsFound,
    check_commit_log,
    found_problems,
    guard_lost_log,
    max_problems_option,
    queue_topics,
    refusal,
    require_topics,
    store_options,
)
from rocketstore.cli.output import kv_table, out_console, print_json, say, warn
from rocketstore.codec.message import JAVA_LONG
from rocketstore.errors import StoreLockedError
from rocketstore.meta.lockfile import StoreLock, describe_holder, lock_holder
from rocketstore.meta.root import overlapping_store_folder, require_store
from rocketstore.verify.layout import check_sizes
from rocketstore.verify.recovery_plan import lossy_recovery

# the master URLs Spark takes (SparkSubmit: "yarn or start with spark, k8s, or local")
_MASTER = re.compile(r"local(\[(\*|[1-9]\d*)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|(spark|k8s)://.+|yarn")


def _master(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """--master checked before the JVM starts (Spark's own refusal is a Java stack trace)."""
    if not _MASTER.fullmatch(value):
        raise click.BadParameter(
            f"{value!r}: Spark takes local, local[N], local[*], local[N,F], spark://HOST:PORT, k8s://URL or yarn"
        )
    return value


def _spark_options(func: Callable[..., Any]) -> Callable[..., Any]:
    @click.option("--master", default="local[2]", show_default=True, help="Spark master URL.", callback=_master)
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def _no_spark(exc: ImportError) -> CommandError:
    return CommandError(f"{exc}: install the spark extra (pip install -e '.[spark]' in a checkout)")


def _check_store(opts: Common, *, writes: bool) -> None:
    """What can be checked before Spark starts (which takes seconds): STORE is a store, and where
    its commit log is, and the file sizes the settings give (every one to give named at once; for
    a rebuild, the only job that writes, the commit log's: it replaces the queues and the index).
    A commit log missing or empty while the queues hold units is warned about, as by ``rocketstore
    export``; a rebuild is refused."""
    require_store(opts.root, opts.rooted_config)
    check_commit_log(opts, writes=writes)
    check_sizes(opts.root, opts.rooted_config, derived=not writes)
    guard_lost_log(opts, writes=writes, why="a rebuild would replace every queue and the index with nothing")


def _session(master: str, job: str) -> Any:
    try:
        from rocketstore.spark.jobs import session
    except ImportError as exc:  # pyspark is an optional extra
        raise _no_spark(exc) from None
    with spark_errors(f"Spark did not start with --master {master}"):
        return session(master, f"rocketstore-{job}")


@contextlib.contextmanager
def spark_errors(what: str) -> Iterator[None]:
    """Spark's own errors (a master that cannot start, a failed job) as ``error: what: ...``
    (CommandError, exit status 2; the jobs module's entry point reports them so too)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        yield
    except (PySparkException, Py4JError) as exc:
        raise CommandError(f"{what}: {_spark_error_line(exc)}") from None


def _spark_error_line(exc: BaseException) -> str:
    """The first line of a Spark error; when it only opens a Python traceback (an error in the data
    source, PYTHON_DATA_SOURCE_ERROR), with the traceback's last exception line, which names it."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    first, marker = lines[0], "Traceback (most recent call last):"
    if first.endswith(marker):
        causes = [line for line in lines[1:] if _EXCEPTION_LINE.match(line)]
        if causes:
            return f"{first[: -len(marker)].rstrip()} {causes[-1]}"
    return first


_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt): ")


def _check_unlocked(root: str) -> None:
    """Refuse a store another process has open (a rebuild takes its lock), before Spark starts: the
    lock is taken and released at once (the job takes it again)."""
    lock = StoreLock(root)
    try:
        lock.acquire()
    except StoreLockedError:
        raise CommandError(
            f"{root} is in use: {describe_holder(lock_holder(root))} holds its lock ({lock.path}); "
            "stop it (a broker, or a program with the store open) before rebuilding"
        ) from None
    lock.release()


@click.group("spark")
def spark() -> None:
    """Store jobs on Apache Spark: rebuild queues and index, verify, export to Parquet.

    STORE and the options are checked before Spark starts."""


@spark.command()
@store_options(writes=True)
@_spark_options
def rebuild(opts: Common, master: str) -> None:
    """Rebuild ConsumeQueue and IndexFile from the commit log: segments are scanned in parallel,
    the new files written in log order and swapped in under the store's lock: each folder in one
    step (Linux renameat2 exchange; where the file system cannot, two renames, and a rebuild killed
    between them is rolled back by the next rebuild).
    Refused before Spark starts when another process has the store open (holds its lock), when
    the commit log is missing or empty while consume queues hold units, and (exit status 1) when
    the store's recovery would cut the log where intact records follow, as recover refuses it: the
    rebuild dispatches every record, past that cut too, and the next open would cut the log there."""
    _check_store(opts, writes=True)
    _check_unlocked(opts.root)
    plan = lossy_recovery(opts.root, opts.config)
    if plan is not None:
        why = "spark rebuild would build queues and index past where recovery ends the log (the next open cuts them),"
        raise ProblemsFound(refusal(opts, plan, command="spark rebuild", why=why), plan=plan.to_dict())
    from rocketstore.spark.jobs import rebuild as run

    spark_session = _session(master, "rebuild")
    with spark_errors("the rebuild failed"):
        result = run(spark_session, opts.store, opts.config, check_recovery=False)
    if opts.as_json:
        print_json(result)
    else:
        out_console().print(kv_table(f"rebuilt {result['store']}", result.items()))


@spark.command()
@store_options()
@_spark_options
@max_problems_option
@click.pass_context
def verify(ctx: click.Context, opts: Common, master: str, max_problems: int) -> None:
    """Check CRCs, records, queue units and index entries (CRC scan in parallel); exit status 1
    when anything is wrong. Nothing on disk changes."""
    _check_store(opts, writes=False)
    try:
        from rocketstore.spark.verify_job import verify as run
    except ImportError as exc:
        raise _no_spark(exc) from None
    spark_session = _session(master, "verify")
    with spark_errors("the verify job failed"):
        report = run(spark_session, opts.store, opts.config, max_problems=max_problems)
    if not report.ok:
        found_problems()
    if opts.as_json:
        print_json(report.to_dict())
    else:
        render_report(opts, report)
    if not report.ok:
        ctx.exit(EXIT_PROBLEMS)


def _check_export(
    opts: Common, out: str, begin: int | None, end: int | None, topics: str | None, overwrite: bool
) -> None:
    """The export's arguments, checked before Spark starts."""
    if not out:
        raise CommandError("--parquet is empty: give a folder name")
    if begin is not None and end is not None and begin >= end:
        raise click.UsageError(f"--begin {begin} must be before --end {end} (the end is exclusive)")
    folder = overlapping_store_folder(out, opts.root, opts.config)
    if folder is not None:
        raise CommandError(f"--parquet {out} and the store ({folder}) overlap: it would overwrite the store")
    if os.path.exists(out) and not overwrite:
        raise CommandError(f"--parquet {out} exists: give --overwrite to replace it")
    if topics is None:
        return
    try:
        from rocketstore.spark.options import Selection, parse_topics
    except ImportError as exc:
        raise _no_spark(exc) from None
    try:
        names, patterns = parse_topics(topics)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--topics") from None
    selection = Selection(names, patterns)
    present = queue_topics(opts.root)
    require_topics(opts.root, present, selection.topic_ok, f"--topics {topics!r}", sorted(names or ()))


@spark.command()
@store_options()
@_spark_options
@click.option("--parquet", "out", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--begin", type=click.IntRange(*JAVA_LONG), help="First store time, epoch ms (inclusive).")
@click.option("--end", type=click.IntRange(*JAVA_LONG), help="Last store time, epoch ms (exclusive).")
@click.option("--topics", help="Topic names or patterns, comma separated.")
@click.option("--overwrite", is_flag=True, help="Replace the output folder if it exists (once the export is whole).")
def export(
    opts: Common, master: str, out: str, begin: int | None, end: int | None, topics: str | None, overwrite: bool
) -> None:
    """Export the messages the consume queues serve to Parquet, partitioned by topic.

    Refused before Spark starts: an output folder that exists (without --overwrite) or overlaps
    the store, --begin not before --end, and --topics that match no topic of the store (a name
    that is no topic of it, given with others that match, is warned about). When the
    time range selects no message the result is 0 messages (a folder holding only _SUCCESS). A
    message whose consume-queue unit points at no record that decodes is left out with a warning,
    and the exit status is 1, as for ``rocketstore export``; CRCs are not checked (``rocketstore
    verify`` does) and damage in the last segments is cut by recovery, as there. The export is
    written into a hidden folder beside the output and takes its place only once whole: one that
    fails leaves an earlier output as it was (--overwrite), or none."""
    _check_store(opts, writes=False)
    _check_export(opts, out, begin, end, topics, overwrite)
    from rocketstore.spark.jobs import export_parquet
    from rocketstore.spark.schema import config_options

    spark_session = _session(master, "export")
    with spark_errors("the export failed"):
        result = export_parquet(
            spark_session,
            opts.store,
            out,
            config_options(opts.config),
            begin=begin,
            end=end,
            topics=topics,
            mode="overwrite" if overwrite else "errorifexists",
        )
    for line in result["unreadableMessages"]:
        warn(f"WARNING: {line}, not exported")
    if result["unreadable"] > len(result["unreadableMessages"]):
        more = result["unreadable"] - len(result["unreadableMessages"])
        warn(f"WARNING: ... and {more} more unreadable message(s), not exported")
    empty = not result["messages"]  # Spark wrote only _SUCCESS
    if opts.as_json:
        if empty:
            warn(f"no message selected: {out} holds no data")
        if not result["unreadable"]:  # else the error object below is the one document, the result in it
            print_json(result)
    elif empty:
        say(f"no message selected: {out} holds no data (only _SUCCESS), in {result['seconds']} s")
    else:
        out_console().print(kv_table(f"exported {result['store']} to {out}", list(result["topics"].items())))
        say(f"{result['messages']} messages in {result['seconds']} s")
    if result["unreadable"]:
        raise ProblemsFound(
            f"{result['unreadable']} message(s) could not be read and are not in the export (the warnings above "
            f"say which); {result['messages']} exported",
            result=result,
        )
