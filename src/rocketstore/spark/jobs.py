"""Store jobs on Spark: rebuild the consume queues and index, verify, export to Parquet.

Each job ships segment paths (never file contents) to tasks that map the files themselves.
Run them as ``rocketstore spark rebuild|verify|export STORE`` or submit this module::

    python -m rocketstore.spark.jobs rebuild STORE --master local[2] --set mappedFileSizeCommitLog=65536
    spark-submit --master spark://host:7077 /path/to/rocketstore/spark/jobs.py verify STORE

Under spark-submit the session (and its master) comes from spark-submit; otherwise a local
session is started (``--master``, default ``local[2]``). Exit status: 0 done; 1 verify found
problems or export left unreadable messages out; 2 an error (``error: ...`` on stderr, as the
``rocketstore`` command prints it: a store that is missing or damaged, a Spark job that failed,
an output folder that exists).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rocketstore.codec.multi_dispatch import is_lmq
from rocketstore.codec.scan import STOP_BLANK, STOP_END
from rocketstore.config import StoreConfig, delay_level_millis
from rocketstore.errors import CorruptStoreError, InvalidArgumentError
from rocketstore.files import syscalls
from rocketstore.files.file_queue import MappedFileQueue
from rocketstore.files.mapped_file import MappedFile
from rocketstore.meta.checkpoint import StoreCheckpoint
from rocketstore.meta.deleted_topics import FILE_NAME as DELETED_TOPICS_FILE
from rocketstore.meta.deleted_topics import DeletedTopics
from rocketstore.meta.lockfile import StoreLock
from rocketstore.meta.root import overlapping_store_folder, require_store
from rocketstore.queues.consume_queue import CQ_STORE_UNIT_SIZE, PRE_BLANK, UNIT_DTYPE
from rocketstore.queues.consume_queues import ConsumeQueueStore, deleted_leftover
from rocketstore.queues.dispatch import drop_deleted, queued_records
from rocketstore.queues.index_service import IndexService, index_entries
from rocketstore.verify.recovery_plan import cut_refused, lossy_recovery

log = logging.getLogger(__name__)
PART_BYTES = 256 << 20
UNREADABLE_LISTED = 20  # unreadable messages an export names; the rest are counted
REBUILD_PREFIX = ".rebuild-"  # the work folder of a rebuild, in the store root


@dataclass
class Segment:
    base: int
    path: str
    size: int


def list_segments(root: str, config: StoreConfig) -> list[Segment]:
    """The commit-log segments on disk, in offset order (mapped only to be listed)."""
    placed = config.copy(storePathRootDir=root)
    queue = MappedFileQueue(
        placed.commit_log_paths,
        config.mapped_file_size_commit_log,
        "cow",
        read_only_paths=placed.commit_log_read_only_paths,
    )
    queue.load()
    try:
        return [Segment(m.file_from_offset, m.path, m.file_size) for m in queue.files]
    finally:
        queue.close()


def group_segments(segments: list[Segment], parallelism: int, part_bytes: int = PART_BYTES) -> list[list[Segment]]:
    """Consecutive segments in groups of at most about ``part_bytes``: a multiple of
    ``parallelism`` groups, so that every core has the same share."""
    if not segments:
        return []
    total = sum(s.size for s in segments)
    parallelism = max(1, parallelism)
    count = -(-max(parallelism, -(-total // part_bytes)) // parallelism) * parallelism
    count = min(len(segments), count)
    per = -(-len(segments) // count)
    return [segments[i : i + per] for i in range(0, len(segments), per)]


def session(master: str | None = None, app_name: str = "rocketstore-job") -> Any:
    """The active spark-submit session, or a local one."""
    from pyspark.sql import SparkSession

    from rocketstore.spark.session import local_session, register

    if os.environ.get("PYSPARK_GATEWAY_PORT") and master is None:  # under spark-submit
        spark = SparkSession.builder.appName(app_name).getOrCreate()
        register(spark)
        return spark
    return local_session(master or "local[2]", app_name)


# -- rebuild --------------------------------------------------------------------------------------


def _scan_for_rebuild(
    group: list[Segment], out_dir: str, delay_millis: tuple[int, ...], deleted: dict[str, int]
) -> list[dict]:
    """A task: scan whole segments as the store's dispatch (reput) does, without CRC checks; store
    per segment the consume-queue units and index entries (npz) and report where the scan stopped.
    Records of ``deleted`` topics (config/deletedTopics.json) below their offset there are indexed,
    not queued (as the store's dispatch)."""
    from rocketstore.codec.records import Records
    from rocketstore.log.walk import walk_segment

    done = []
    for seg in group:
        mapped = MappedFile.open(seg.path, seg.base, seg.size, "cow")
        found: list[Records] = []
        try:
            stop, reason = walk_segment(mapped, 0, seg.size, found.append, check_crc=False, delay_millis=delay_millis)
        finally:
            mapped.close()  # (gives its descriptor count back, as every unmapping)
        topics: dict[str, int] = {}
        cols: dict[str, list[np.ndarray]] = {k: [] for k in ("tid", "qid", "qoff", "phy", "size", "tags", "ts")}
        idx: dict[str, list[np.ndarray]] = {"hash": [], "phy": [], "ts": []}
        count = 0
        for records in found:
            count += len(records)
            queued, _ = queued_records(drop_deleted(records, deleted))
            if len(queued):
                tids = [topics.setdefault(t, len(topics)) for t in queued.topics]
                cols["tid"].append(np.array(tids, dtype=np.int32))
                cols["qid"].append(queued.queue_ids)
                cols["qoff"].append(queued.queue_offsets)
                cols["phy"].append(queued.offsets)
                cols["size"].append(queued.sizes)
                cols["tags"].append(queued.tags)
                cols["ts"].append(queued.store_ts)
            h, p, t = index_entries(records)
            idx["hash"].append(h)
            idx["phy"].append(p)
            idx["ts"].append(t)
        arrays = {k: (np.concatenate(v) if v else np.zeros(0, np.int64)) for k, v in cols.items()}
        arrays.update({f"index_{k}": (np.concatenate(v) if v else np.zeros(0, np.int64)) for k, v in idx.items()})
        path = os.path.join(out_dir, f"{seg.base:020d}.npz")
        np.savez(path, **arrays)
        done.append(
            {"base": seg.base, "stop": stop, "reason": reason, "records": count, "file": path, "topics": list(topics)}
        )
    return done


def rebuild(spark: Any, path: str, config: StoreConfig | None = None, *, check_recovery: bool = True) -> dict:
    """Rebuild ``consumequeue/`` and ``index/`` from the commit log: segments are scanned in
    parallel, the results written in log order into a new folder and swapped in (each folder in
    one step where the file system can: ``_swap_in``), all under the store's lock (no writer may
    run meanwhile). The commit log is not changed.

    Records are dispatched as the store's reput does (no CRC checks), but those of topics deleted
    since (config/deletedTopics.json) are only indexed; a log whose scan stops short of a segment's end
    while later segments hold data is refused (CorruptStoreError), and so (``check_recovery``, unless
    the caller checked) is a store whose recovery would cut the log where intact records follow: the
    next open would cut the queues built past it."""
    started = time.perf_counter()
    root = os.path.abspath(path)
    config = (config or StoreConfig()).copy(storePathRootDir=root)
    require_store(root, config)  # never build queues and an index into a folder that is no store
    if check_recovery and (plan := lossy_recovery(root, config)) is not None:
        raise cut_refused(plan)
    lock = StoreLock(root)
    lock.acquire()
    work = os.path.join(root, f"{REBUILD_PREFIX}{uuid.uuid4().hex[:8]}")
    try:
        _remove_stale_work(root)
        segments = list_segments(root, config)
        parts_dir = os.path.join(work, "parts")
        os.makedirs(parts_dir)
        groups = group_segments(segments, spark.sparkContext.defaultParallelism)
        delay = delay_level_millis(config.message_delay_level)
        deleted_topics = DeletedTopics(os.path.join(root, "config", DELETED_TOPICS_FILE), writable=False)
        deleted_topics.load()
        deleted = deleted_topics.table
        results: list[dict] = []
        if groups:
            rdd = spark.sparkContext.parallelize(groups, len(groups))
            results = rdd.flatMap(lambda g: _scan_for_rebuild(g, parts_dir, delay, deleted)).collect()
        results.sort(key=lambda r: r["base"])
        _refuse_records_past_the_end(results)
        scanned = time.perf_counter()
        new_root = os.path.join(work, "store")
        summary = _write_rebuilt(new_root, root, config, results, deleted)
        for name in ("consumequeue", "index") if config.message_index_enable else ("consumequeue",):
            _swap_in(os.path.join(new_root, name), os.path.join(root, name), os.path.join(work, f"old-{name}"))
        syscalls.fsync_dir(root)
        summary.update(
            store=root,
            segments=len(segments),
            bytes=sum(s.size for s in segments),
            tasks=len(groups),
            scanSeconds=round(scanned - started, 3),
            seconds=round(time.perf_counter() - started, 3),
        )
        return summary
    finally:
        shutil.rmtree(work, ignore_errors=True)
        lock.release()


def _swap_in(new: str, old: str, aside: str) -> None:
    """Put the folder ``new`` at ``old`` (what was there is removed with the work folder): in one
    step, renameat2's RENAME_EXCHANGE, so that a rebuild killed at any moment leaves ``old`` in
    place, old or new. Where the file system cannot exchange, two renames (``old`` to ``aside``,
    ``new`` to ``old``): killed between them, the next rebuild moves ``aside`` back first
    (``_remove_stale_work``)."""
    if not os.path.lexists(new):  # nothing was rebuilt: there is none
        if os.path.lexists(old):
            os.rename(old, aside)
    elif not os.path.lexists(old):
        os.rename(new, old)
    elif not syscalls.exchange(new, old):
        log.warning("rebuild: %s cannot be exchanged in one step here; renamed aside, then replaced", old)
        os.rename(old, aside)
        os.rename(new, old)


def _remove_stale_work(root: str) -> None:
    """Delete the work folders of rebuilds that were killed (call only with the store locked),
    after moving back a ``consumequeue/`` or ``index/`` one of them had moved aside and not yet
    replaced (killed between the two renames of ``_swap_in``): the old queues are where the
    rebuild carries queues over from."""
    stale = sorted(
        full
        for full in (os.path.join(root, name) for name in os.listdir(root) if name.startswith(REBUILD_PREFIX))
        if os.path.isdir(full) and not os.path.islink(full)
    )
    for name in ("consumequeue", "index"):
        target = os.path.join(root, name)
        kept = [p for p in (os.path.join(w, f"old-{name}") for w in stale) if os.path.isdir(p)]
        if kept and not os.path.lexists(target):
            log.warning(
                "rebuild: moving %s back to %s, where a rebuild that did not finish took it from", kept[0], target
            )
            os.rename(kept[0], target)
            syscalls.fsync_dir(root)
    for full in stale:
        log.warning("rebuild: removing %s, left by a rebuild that did not finish", full)
        shutil.rmtree(full)


def _holds_data(result: dict) -> bool:
    """Whether a scanned segment holds data: anything but zeros from its start (an empty
    pre-allocated file, which recovery deletes, holds none)."""
    return result["stop"] > 0 or result["reason"] != STOP_END


def _refuse_records_past_the_end(results: list[dict]) -> None:
    """Raise CorruptStoreError when a segment's scan stops short of its end-of-file marker (a record
    that fails its checks, or zeros) while a later segment holds data: the rebuilt queues would end
    there, and the next open's recovery would cut the log there and delete the later segments.
    (Where the last segment with data stops, a torn tail, is the end of the log.)"""
    for i, r in enumerate(results):
        if r["reason"] == STOP_BLANK:
            continue
        later = [x for x in results[i + 1 :] if _holds_data(x)]
        if later:
            what = "zeros" if r["reason"] == STOP_END else "a record that fails its checks"
            raise CorruptStoreError(
                f"the commit log has {what} at offset {r['base'] + r['stop']}, and {len(later)} later "
                f"segment(s) hold data (the first at offset {later[0]['base']}): the rebuilt queues would "
                "end there and the next open would cut the log there, deleting those segments; nothing "
                "was changed (see `rocketstore verify`)"
            )
        return


def _write_rebuilt(new_root: str, root: str, config: StoreConfig, results: list[dict], deleted: dict[str, int]) -> dict:
    """Write the consume queues and index files of the scanned segments, in log order, up to the
    end of the valid log (the first segment whose scan did not end at its end-of-file marker).
    The segments after the end that hold data are counted (``segmentsAfterEnd``); empty
    pre-allocated ones are not."""
    os.makedirs(new_root)
    queues = ConsumeQueueStore(new_root, config.cq_file_size, "rw")
    checkpoint = StoreCheckpoint(os.path.join(new_root, "checkpoint"), writable=True)
    index = None
    if config.message_index_enable:
        index = IndexService(new_root, config.max_hash_slot_num, config.max_index_num, "rw", checkpoint)
    units = records = 0
    last_ts = 0
    end = 0
    for r in results:
        end = r["base"] + config.mapped_file_size_commit_log
        data = np.load(r["file"])
        n = len(data["phy"])
        if n:
            order = np.lexsort((data["phy"], data["qid"], data["tid"]))
            tid, qid = data["tid"][order], data["qid"][order]
            phy, size, tags, qoff = data["phy"][order], data["size"][order], data["tags"][order], data["qoff"][order]
            packed = np.empty(n, dtype=UNIT_DTYPE)
            packed["phy"], packed["size"], packed["tags"] = phy, size, tags
            raw = packed.tobytes()
            cuts = np.flatnonzero((np.diff(tid) != 0) | (np.diff(qid) != 0)) + 1
            for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), n], strict=True):
                cq = queues.find_or_create(r["topics"][int(tid[a])], int(qid[a]))
                cq.put_unit_arrays(phy[a:b], size[a:b], qoff[a:b], raw[a * 20 : b * 20])
            units += n
            last_ts = max(last_ts, int(data["ts"].max()))
        if index is not None and len(data["index_hash"]):
            index.put_entries(data["index_hash"], data["index_phy"], data["index_ts"])
        records += r["records"]
        if r["reason"] != STOP_BLANK:
            end = r["base"] + r["stop"]
            break
    carried = _carry_over_queues(root, config, queues, deleted, end)
    queues.flush(0)
    queues.close()
    if index is not None:
        index.flush()
        index.close()
    real = StoreCheckpoint(os.path.join(root, "checkpoint"), writable=True)
    if last_ts:
        real.logics_msg_timestamp = last_ts
        real.index_msg_timestamp = last_ts
        real.flush()
    ignored = [r["base"] for r in results if r["base"] > end and _holds_data(r)]
    if ignored:
        log.warning("rebuild: %d segment(s) after the log end %d were not dispatched", len(ignored), end)
    return {
        "records": records,
        "units": units,
        "logEnd": end,
        "queues": len(queues.table),
        "queuesCarriedOver": carried,
        "segmentsAfterEnd": len(ignored),
    }


def _carry_over_queues(
    root: str, config: StoreConfig, queues: ConsumeQueueStore, deleted: dict[str, int], end: int
) -> int:
    """Recreate each queue of the old ``consumequeue/`` that got no unit (retention removed all its
    records) at its old max offset, as filler units, so that its offsets go on where they were;
    returns how many. Not a queue of a ``deleted`` topic that a deletion cut short left (its
    units all point below the topic's offset there). A light message queue (%LMQ%...) keeps its
    units up to the log's ``end``: they are multi-dispatch copies of other queues' records
    (``codec.multi_dispatch``)."""
    old = ConsumeQueueStore(root, config.cq_file_size, "cow")
    carried = 0
    try:
        for key in old.folders():  # only the queues the rebuild left out are read: a damaged one it replaces is not
            if key in queues.table:
                continue
            try:
                cq = old.load_queue(*key)
            except CorruptStoreError as exc:
                log.warning("rebuild: %s/%d is not carried over (its offsets start at 0 again): %s", *key, exc)
                continue
            cq.recover()
            top = cq.max_offset_in_queue()
            if top <= 0 or deleted_leftover(key[0], cq.max_physic_offset, deleted):
                continue
            new = queues.find_or_create(*key)
            if is_lmq(key[0]):  # copies of other queues' records (INNER_MULTI_DISPATCH), which no rebuild makes
                for first, units in cq.iter_units(cq.min_offset_in_queue(), top):
                    past = np.flatnonzero(units["phy"].astype(np.int64) + units["size"] > end)  # the first ends them
                    kept = units[: past[0]] if len(past) else units
                    if len(kept):
                        offsets = np.arange(first, first + len(kept), dtype=np.int64)
                        new.put_unit_arrays(kept["phy"], kept["size"], offsets, kept.tobytes())
                    if len(past):
                        break
                carried += 1
                continue
            expect = top * CQ_STORE_UNIT_SIZE
            mapped = new.queue.last_mapped_file(expect - CQ_STORE_UNIT_SIZE)  # the file of the last filler
            new.min_logic_offset = expect
            new.queue.flushed_where = new.queue.committed_where = mapped.file_from_offset
            mapped.append(PRE_BLANK * ((expect - mapped.file_from_offset) // CQ_STORE_UNIT_SIZE))
            carried += 1
    finally:
        old.close()
    return carried


# -- export ----------------------------------------------------------------------------------------


def export_parquet(
    spark: Any,
    path: str,
    out: str,
    config_options: dict[str, str] | None = None,
    *,
    begin: int | None = None,
    end: int | None = None,
    topics: str | None = None,
    mode: str = "errorifexists",
) -> dict:
    """Every message the consume queues serve (store time in [begin, end) ms when given; light
    message queues only when ``topics`` names them) as
    Parquet partitioned by topic. A message whose record cannot be read (it fails its checks)
    is left out and listed, as ``rocketstore export`` does: ``unreadable`` counts them and
    ``unreadableMessages`` names the first ``UNREADABLE_LISTED``. A local ``out`` that exists is
    refused unless ``mode`` is ``overwrite``, and is replaced only once the export is whole
    (``_replace_when_written``): an export that fails leaves it as it was."""
    from pyspark.sql import functions as F

    from rocketstore.spark.commits import local_checkpoint
    from rocketstore.spark.schema import store_config

    options = dict(config_options or {}, failOnDataLoss="false")
    folder = overlapping_store_folder(out, path, store_config(options))
    if folder is not None:  # Spark's overwrite would empty it before the read (it cannot tell)
        raise InvalidArgumentError(f"the output {out} and the store ({folder}) overlap: it would overwrite the store")
    if begin is not None:
        options["startingTimestamp"] = str(begin)
    if end is not None:
        options["endingTimestamp"] = str(end)
    if topics:
        options["topics"] = topics
    local = local_checkpoint(out)
    if local is not None and mode != "overwrite" and os.path.lexists(local):
        raise InvalidArgumentError(f"the output {out} exists: give --overwrite (mode 'overwrite') to replace it")
    reader = spark.read.format("rocketstore").options(**options)
    df = reader.load(path)
    started = time.perf_counter()
    write = df.write.partitionBy("topic")
    if local is None:  # on another file system (hdfs://): Spark writes it in place
        write.mode(mode).parquet(out)
    else:
        _replace_when_written(local, lambda tmp: write.mode("errorifexists").parquet(tmp))
    seconds = time.perf_counter() - started
    # read back with the written schema, so topic stays a string: inferred, "7" and "07" would both
    # be the int 7 (and the session's settings are not the job's to change)
    written = spark.read.schema(df.schema).parquet(out)
    rows = written.groupBy("topic").agg(F.count("*").alias("messages")).collect()
    per_topic = {r["topic"]: r["messages"] for r in sorted(rows, key=lambda r: r["topic"])}
    unreadable = unreadable_messages(spark, path, options)
    for item in unreadable[:UNREADABLE_LISTED]:
        log.warning("export: %s; not exported", item)
    return {
        "store": os.path.abspath(path),
        "parquet": out,
        "messages": sum(per_topic.values()),
        "topics": per_topic,
        "unreadable": len(unreadable),
        "unreadableMessages": [str(u) for u in unreadable[:UNREADABLE_LISTED]],
        "seconds": round(seconds, 3),
    }


def _replace_when_written(out: str, write: Callable[[str], None]) -> None:
    """``write(tmp)`` into a hidden folder beside ``out`` (``.<name>.tmp-<pid>-<random>``), which takes the
    place of ``out`` only once written: an earlier ``out`` is moved aside, then deleted. A write that
    fails leaves ``out`` as it was, and nothing beside it."""
    parent, name = os.path.split(os.path.abspath(out))
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp, aside = os.path.join(parent, f".{name}.tmp-{tag}"), os.path.join(parent, f".{name}.old-{tag}")
    try:
        write(tmp)
        had = os.path.lexists(out)
        if had:
            os.rename(out, aside)
        try:
            os.rename(tmp, out)
        except BaseException:
            if had:
                os.rename(aside, out)
            raise
    except BaseException:
        _remove(tmp)
        raise
    syscalls.fsync_dir(parent)
    _remove(aside)


def _remove(path: str) -> None:
    """Remove a folder with what it holds, or a file; nothing when there is none."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


def unreadable_messages(spark: Any, path: str, options: dict[str, str]) -> list[Any]:
    """The queue units of a consume-queue read (``options``) whose records the read skips with
    failOnDataLoss=false (``read.Unreadable``, in queue order): a job over the same plan that
    checks only the records' headers. The Python data source API gives tasks no way to report
    them to the driver, so the export asks again."""
    from rocketstore.spark.read import unreadable_units
    from rocketstore.spark.schema import spark_schema
    from rocketstore.spark.source import BatchReader

    parts = BatchReader(dict(options, path=path), spark_schema()).partitions()
    if not parts:
        return []
    found = spark.sparkContext.parallelize(parts, len(parts)).flatMap(unreadable_units).collect()
    return sorted(found, key=lambda u: (u.topic, u.queue_id, u.queue_offset))


# -- command line (spark-submit) ---------------------------------------------------------------------

EXIT_ERROR = 2  # as the rocketstore command's: an error, not verify's "problems found" (1)


def config_from(config_file: str | None, settings: list[str]) -> tuple[StoreConfig, dict[str, str]]:
    """A StoreConfig from --config and --set KEY=VALUE, and the same as data-source options."""
    config = StoreConfig.from_properties(config_file) if config_file else StoreConfig()
    options: dict[str, str] = {"config": config_file} if config_file else {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        config.set(key.strip(), value.strip())
        options[key.strip()] = value.strip()
    return config, options


def main(argv: list[str] | None = None) -> int:
    """Run a job; errors are reported as ``rocketstore`` reports them (``error: ...``, status 2)."""
    import click

    from rocketstore.cli.spark_cmd import spark_errors
    from rocketstore.errors import RocketStoreError

    parser = _parser()
    args = parser.parse_args(argv)
    try:
        with spark_errors(f"the {args.job} job failed"):
            return _run(parser, args)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except (RocketStoreError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rocketstore.spark.jobs", description=__doc__.split("\n\n")[0])
    parser.add_argument("job", choices=("rebuild", "verify", "export"))
    parser.add_argument("store")
    parser.add_argument("--master", default=None, help="Spark master (default local[2]; spark-submit's own)")
    parser.add_argument("--config", default=None, help="a broker.conf with MessageStoreConfig keys")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a MessageStoreConfig key")
    parser.add_argument("--parquet", help="export: the output folder")
    parser.add_argument("--begin", type=int, help="export: first store time (ms, inclusive)")
    parser.add_argument("--end", type=int, help="export: last store time (ms, exclusive)")
    parser.add_argument("--topics", help="export: topic names or patterns, comma separated")
    parser.add_argument("--overwrite", action="store_true", help="export: replace the output folder if it exists")
    parser.add_argument("--max-problems", type=int, default=100, help="verify: problems listed")
    return parser


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        config, options = config_from(args.config, args.set)
    except ValueError as exc:
        parser.error(str(exc))
    if args.job == "export" and not args.parquet:
        parser.error("export needs --parquet PATH")
    if args.topics is not None:
        from rocketstore.spark.options import parse_topics

        try:
            parse_topics(args.topics)  # what the data source does with it, before Spark starts
        except ValueError as exc:
            parser.error(f"--topics: {exc}")
    spark = session(args.master, f"rocketstore-{args.job}")
    if args.job == "rebuild":
        result = rebuild(spark, args.store, config)
        status = 0
    elif args.job == "verify":
        from rocketstore.spark.verify_job import verify

        report = verify(spark, args.store, config, max_problems=args.max_problems)
        result = report.to_dict()
        status = 0 if report.ok else 1
    else:
        result = export_parquet(
            spark,
            args.store,
            args.parquet,
            options,
            begin=args.begin,
            end=args.end,
            topics=args.topics,
            mode="overwrite" if args.overwrite else "errorifexists",
        )
        status = 1 if result["unreadable"] else 0
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return status


if __name__ == "__main__":
    sys.exit(main())
