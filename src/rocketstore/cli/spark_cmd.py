"""``rocketstore spark rebuild|verify|export``: the store jobs run on Spark (needs the spark extra).

Each command starts a Spark session (``--master``, default ``local[2]``; any master URL works)
and runs the job of ``rocketstore.spark.jobs``; the same jobs can be submitted with
``spark-submit`` as ``python -m rocketstore.spark.jobs``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from rocketstore.cli.common import Common, kv_table, out_console, print_json, say, store_options

EXIT_PROBLEMS = 1


def _spark_options(func: Callable[..., Any]) -> Callable[..., Any]:
    @click.option("--master", default="local[2]", show_default=True, help="Spark master URL.")
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def _session(master: str, job: str) -> Any:
    try:
        from rocketstore.spark.jobs import session
    except ImportError as exc:  # pyspark is an optional extra
        raise click.ClickException(f"{exc}: install rocketstore[spark]") from None
    return session(master, f"rocketstore-{job}")


@click.group("spark")
def spark() -> None:
    """Store jobs on Apache Spark: rebuild queues and index, verify, export to Parquet."""


@spark.command()
@store_options()
@_spark_options
def rebuild(opts: Common, master: str) -> None:
    """Rebuild ConsumeQueue and IndexFile from the commit log: segments are scanned in parallel,
    the new files written in log order and swapped in atomically, under the store's lock."""
    from rocketstore.spark.jobs import rebuild as run

    result = run(_session(master, "rebuild"), opts.store, opts.config)
    if opts.as_json:
        print_json(result)
    else:
        out_console().print(kv_table(f"rebuilt {result['store']}", result.items()))


@spark.command()
@store_options()
@_spark_options
@click.option("--max-problems", type=click.IntRange(min=0), default=100, show_default=True)
@click.pass_context
def verify(ctx: click.Context, opts: Common, master: str, max_problems: int) -> None:
    """Check CRCs, records, queue units and index entries (CRC scan in parallel); exit status 1
    when anything is wrong. Nothing on disk changes."""
    from rocketstore.spark.verify_job import verify as run
    from rocketstore.verify import iter_problem_lines

    report = run(_session(master, "verify"), opts.store, opts.config, max_problems=max_problems)
    if opts.as_json:
        print_json(report.to_dict())
    else:
        out_console().print(kv_table(f"verify {report.store}", report.summary_rows()))
        for line in iter_problem_lines(report):
            say(line)
    if not report.ok:
        ctx.exit(EXIT_PROBLEMS)


@spark.command()
@store_options()
@_spark_options
@click.option("--parquet", "out", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--begin", type=int, help="First store time, epoch ms (inclusive).")
@click.option("--end", type=int, help="Last store time, epoch ms (exclusive).")
@click.option("--topics", help="Topic names or patterns, comma separated.")
@click.option("--overwrite", is_flag=True, help="Replace the output folder if it exists.")
def export(
    opts: Common, master: str, out: str, begin: int | None, end: int | None, topics: str | None, overwrite: bool
) -> None:
    """Export the messages the consume queues serve to Parquet, partitioned by topic."""
    from rocketstore.spark.jobs import export_parquet
    from rocketstore.spark.schema import config_options

    result = export_parquet(
        _session(master, "export"),
        opts.store,
        out,
        config_options(opts.config),
        begin=begin,
        end=end,
        topics=topics,
        mode="overwrite" if overwrite else "errorifexists",
    )
    if opts.as_json:
        print_json(result)
    else:
        out_console().print(kv_table(f"exported {result['store']} to {out}", list(result["topics"].items())))
        say(f"{result['messages']} messages in {result['seconds']} s")
