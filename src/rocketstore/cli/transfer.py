"""``rocketstore export`` and ``rocketstore import``: a store as JSON lines, and back."""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO

import click

from rocketstore.cli.common import (
    Common,
    ProblemsFound,
    UnreadableUnits,
    check_output_file,
    is_inside,
    known_topics,
    open_store,
    require_topics,
    store_options,
    topic_names,
    with_notes,
)
from rocketstore.cli.output import print_json, progress_bar, replacing_file, say, utf8_stdout, warn
from rocketstore.cli.stops import (
    DeferInterrupts,
    DeferStops,
    Interrupted,
    done_storing,
    shut_down_whole,
    stopped_by,
)
from rocketstore.errors import ImportLineError
from rocketstore.export import ImportInterrupted, dumps_row, export_row, exported_queue, import_jsonl, iter_units
from rocketstore.results import PutMessageStatus
from rocketstore.running_flags import DISK_FULL
from rocketstore.services.clean import measure_disk
from rocketstore.services.wiring import no_cleanup, no_delayed_delivery
from rocketstore.store import MessageStore


@dataclass
class ExportCount:
    """What ``export_topics`` wrote and what it could not read."""

    exported: int = 0
    skipped: int = 0


def export_topics(
    store: MessageStore,
    out: IO[str],
    topics: list[str] | None,
    advance: Callable[[int], None] | None = None,
    guard: DeferInterrupts | None = None,
) -> ExportCount:
    """``export_jsonl`` restricted to ``topics`` (same lines, same order; all topics for None);
    ``advance(1)`` after each message. A unit whose message cannot be read is warned about on
    stderr (the first few one by one, with where it is and why) and counted as skipped. Each line
    is written inside ``guard`` (installed): a Ctrl-C lands between two lines, never in one."""
    count = ExportCount()
    unreadable = UnreadableUnits("not exported")
    whole: contextlib.AbstractContextManager[None] = guard if guard is not None else contextlib.nullcontext()
    for unit in iter_units(store, topics):
        msg = unit.message
        if msg is None:
            unreadable.add(unit)
            continue
        line = dumps_row(export_row(msg, unit.tags_code, unit.size)) + "\n"
        with whole:
            out.write(line)
        count.exported += 1
        if advance is not None:
            advance(1)
    unreadable.close()
    count.skipped = unreadable.count
    return count


def queued_count(store: MessageStore, topics: list[str] | None) -> int:
    """How many units the consume queues of ``topics`` (all for None) hold: what export reads."""
    return sum(
        max(0, cq.max_offset_in_queue() - cq.min_offset_in_queue())
        for (topic, _queue_id), cq in store.queues.table.items()
        if exported_queue(topic, topics)
    )


@contextlib.contextmanager
def _output(path: str | None) -> Iterator[IO[str]]:
    """The file (written beside it and renamed over it at the end: an interrupted or failed export
    leaves no truncated file), or stdout written as UTF-8 whatever the locale says."""
    if path is not None and path != "-":
        with replacing_file(path) as f:
            yield f
        return
    with utf8_stdout() as out:
        yield out


def _check_topics(opts: Common, store: MessageStore, topics: list[str]) -> None:
    """Refuse --topic names of which none is a topic of the store (``known_topics``, as ``consume``
    refuses one), and warn about each one that is not when others are."""
    names = list(dict.fromkeys(topics))
    given = " ".join(f"--topic {t!r}" for t in names)
    require_topics(opts.root, known_topics(store), set(names).__contains__, given, names)


@click.command()
@store_options()
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write to this file instead of stdout.")
@click.option("--topic", "topics", multiple=True, callback=topic_names, help="Only these topics (repeatable).")
def export(opts: Common, output: str | None, topics: tuple[str, ...]) -> None:
    """Every message the consume queues serve, one JSON object per line, sorted by topic, queueId
    and queueOffset (the fields of rocketmq-vectors' expected.jsonl, cqTagsCode and cqSize included).
    Light message queues (%LMQ%..., copies of other topics' messages) only when --topic names them.

    The store is opened read-only: nothing on disk changes, and a store that needs recovery is
    recovered in memory. The output is JSON lines with or without --json; --output may not be
    inside the store. A --topic that is no topic of the store is warned about; when none is,
    the export is refused (exit status 2). A message whose consume-queue unit points at no record
    that decodes is warned about and left out, the rest is exported, and the exit status is then
    1. No CRC is checked, as RocketMQ's pull checks none (rocketstore verify does): a body whose
    CRC does not match is exported as stored, and damage in the last segments, which recovery
    checks, cuts the log there (a 'commit log cut at N' warning; exit status 0). A progress
    bar (messages) is shown on a terminal only with --output. --output is written beside the file
    and renamed over it at the end: an interrupted or failed export leaves an earlier file as it was.
    """
    if output not in (None, "-"):
        check_output_file("--output", output)
        for folder in (opts.root, *opts.commit_log_paths):
            if is_inside(output, folder):
                raise click.UsageError(
                    f"--output {output} is inside the store ({folder}): it would overwrite its files"
                )
    guard = DeferInterrupts()  # Ctrl-C ends the output at a whole line
    with open_store(opts, read_only=True) as store:  # a failed shutdown does not hide an error before it
        selected = list(topics) or None
        if selected is not None:
            _check_topics(opts, store, selected)
        total = queued_count(store, selected)
        to_file = output not in (None, "-")  # no bar beside data on the terminal
        with guard.installed(), _output(output) as out, progress_bar("export", total, enabled=to_file) as advance:
            count = export_topics(store, out, selected, advance, guard)
    if output not in (None, "-"):
        if not opts.as_json:
            warn(f"exported {count.exported} messages to {output}")
        elif not count.skipped:  # stdout is free for it, as import --json gives its count (else: the error's)
            print_json({"exported": count.exported, "output": output})
    if count.skipped:
        raise ProblemsFound(
            f"{count.skipped} message(s) could not be read and are not in the export (the warnings above say "
            f"which); {count.exported} exported",
            exported=count.exported,
            skipped=count.skipped,
        )


def _resume_hint(line: int, input_path: str) -> str:
    """Where a stopped import goes on: the shell command that gives its input from ``line`` on."""
    source = "FILE" if input_path == "-" else shlex.quote(input_path)
    return f"`tail -n +{line} {source}` gives the rest to import"


def _stopped(exc: KeyboardInterrupt, signum: int, input_path: str, count: int | None = None) -> Interrupted:
    """What an import stopped by ``signum`` (SIGINT or SIGTERM) says (``stopped_by``): once the
    lines are being stored, how many are stored and the `tail` to go on from; ``count`` when every
    line was stored and the stop came during the store's shutdown (which ran whole)."""
    if not isinstance(exc, ImportInterrupted):
        if count is None:
            return stopped_by(signum)
        stopped = stopped_by(signum, f"{count} message(s) stored, every line (the store shut down cleanly)")
        stopped.details = {"imported": count}
        return stopped
    stored = f"{exc.imported} message(s) stored, from the lines before line {exc.line}"
    stopped = stopped_by(signum, f"{stored}; {_resume_hint(exc.line, input_path)}")
    stopped.details = {"line": exc.line, "imported": exc.imported}
    return stopped


def _import_lines(store: MessageStore, lines: IO[bytes], advance: Callable[[int], None], guard: DeferInterrupts) -> int:
    """``import_jsonl``; a line refused because the disk is full says what this import does about it."""
    try:
        return import_jsonl(store, lines, advance, guard=guard)
    except ImportLineError as exc:
        refused = PutMessageStatus.SERVICE_NOT_AVAILABLE.value
        if not (store.running_flags & DISK_FULL and exc.reason.startswith(refused)):
            raise
        disk = measure_disk(store.config, store.root)
        reason = (
            f"{refused} the disk of the store is {max(disk.physic, disk.logics):.0%} used, past "
            f"diskSpaceWarningLevelRatio ({store.config.disk_space_warning_ratio:.0%}): import deletes nothing "
            "to make room; free space on it, or import into a store on a bigger disk"
        )
        raise ImportLineError(exc.line, reason, exc.imported) from None


@click.command("import")
@store_options(must_exist=False, writes=True)
@click.option(
    "--input",
    "-i",
    "input_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="JSON lines as export writes them ('-' for stdin).",
)
def import_(opts: Common, input_path: str) -> None:
    """Store the messages of a JSON-lines file (UTF-8), in file order.

    Fields the store assigns (offsets, sizes, storeTimestamp, msgId, ...) are ignored; topic,
    queueId, flag, properties, body, born/store hosts, bornTimestamp, reconsumeTimes,
    preparedTransactionOffset and the compression and transaction sysFlag bits are kept.

    Each line is stored as it is read: at the first line that cannot be stored the import stops
    with exit status 2, and the messages of the lines before it stay stored (the error names the
    line, says how many, and gives the `tail -n +LINE FILE` that yields the rest to import once
    it is fixed). Interrupted (Ctrl-C), it exits with status 130 saying the same: how many were
    stored and the `tail -n +LINE FILE` to go on from; so does SIGTERM (`kill`, a service
    manager's stop), with exit status 143. Either lands between two lines.

    The import deletes nothing: no retention or disk-space cleanup runs while it does (cleanup
    forced by a filling disk would delete what it has just stored). Past
    diskSpaceWarningLevelRatio the store takes no more messages, and the import stops as at a bad
    line: free space, or import into a store on a bigger disk, then go on with the `tail` given.

    Delayed messages are not delivered during the import. A SCHEDULE_TOPIC_XXXX line whose
    delivered copy (in its REAL_TOPIC, with the same UNIQ_KEY and reconsume times; without a
    UNIQ_KEY, the same born timestamp and body) is in the input too, or in the store already,
    counts as delivered: each delay level's offset (delayOffset.json) moves past the delivered
    units at its start, so the next process that keeps the store open for writing does not
    deliver them again. A unit still waiting is due its delay after its new store time.

    STORE is created if it does not exist (or is an empty folder); a folder that holds files but no
    store is refused (a folder that is not a store but holds one is named as the likely one),
    and so is a commit log outside STORE (storePathCommitLog) without --external-commit-log.
    """
    total = None if input_path == "-" else os.path.getsize(input_path)
    guard = DeferStops()
    count = None
    try:
        with click.open_file(input_path, "rb") as lines, guard.installed():
            # no delivery during the import (the input may hold the delivered copies), and no cleanup
            with no_delayed_delivery(), no_cleanup():
                store = open_store(opts)
            with shut_down_whole(store, guard), progress_bar("import", total, unit_bytes=True) as advance:
                count = _import_lines(store, lines, advance, guard)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM; ImportInterrupted while the lines are stored
        raise with_notes(_stopped(exc, guard.signal, input_path, count), exc) from None
    except ImportLineError as exc:
        exc.args = (f"{exc}; {_resume_hint(exc.line, input_path)}",)  # its type, line and count kept for --json
        raise
    # every line stored and the store shut down: a closed stdout is no interruption now
    said = f"imported {count} messages into {opts.store}"
    done_storing(said)
    try:
        if opts.as_json:
            print_json({"imported": count})
        else:
            say(said)
    except BrokenPipeError:  # stdout closed (| head): the count goes to stderr
        warn(said)
        raise
