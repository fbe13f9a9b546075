"""Store jobs on Spark: rebuild, verify, Parquet export (library, CLI and spark-submit)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import copy_store
from rocketstore import Message, MessageStore
from rocketstore.cli.main import cli
from rocketstore.errors import StoreNotFoundError
from rocketstore.spark import jobs
from rocketstore.spark.verify_job import verify
from rocketstore.verify import verify_store
from spark_conftest import (
    SMALL_GEOMETRY,
    VECTOR_OPTIONS,
    damage_record,
    export_rows,
    make_store,
    small_config,
    sort_key,
    spark,  # noqa: F401 - the session fixture
    write_messages,
)
from test_cli import run

pytestmark = pytest.mark.spark

SETS = [f"--set={k}={v}" for k, v in SMALL_GEOMETRY.items()]


def _export(store: Path, config=None) -> list[dict]:
    return sorted(export_rows(store, config or small_config()), key=sort_key)


def test_rebuild_restores_queues_and_index(spark, tmp_path, rmqread):  # noqa: F811
    store = make_store(tmp_path / "store", 400)
    before = _export(store)
    for name in ("consumequeue", "index"):
        shutil.rmtree(store / name)
    result = jobs.rebuild(spark, str(store), small_config())
    assert result["records"] == 400 and result["units"] == 400 and result["tasks"] >= 2
    assert _export(store) == before
    assert verify_store(store, small_config()).ok
    assert rmqread("check", store, small_config()).returncode == 0
    assert not [p for p in store.iterdir() if p.name.startswith(".rebuild")]
    with MessageStore.open(store, small_config(), read_only=True) as s:  # key queries find them again
        assert {m.body for m in s.query_message("TopicB", "key-1").messages} == {b"message 1 x"}
    # messageIndexEnable=false: the consume queues are rebuilt, the index left as it is (it was
    # deleted), as a recovery with the setting leaves it
    index = sorted((p.name, p.read_bytes()) for p in (store / "index").iterdir())
    shutil.rmtree(store / "consumequeue")
    jobs.rebuild(spark, str(store), small_config().copy(messageIndexEnable=False))
    assert sorted((p.name, p.read_bytes()) for p in (store / "index").iterdir()) == index
    assert _export(store) == before


def test_rebuild_of_a_folder_without_a_store_changes_nothing(spark, tmp_path):  # noqa: F811
    with pytest.raises(StoreNotFoundError):
        jobs.rebuild(spark, str(tmp_path), small_config())
    assert not list(tmp_path.iterdir())


def test_rebuild_of_a_crashed_vector_store_matches_recovery(spark, vectors, vector_config, tmp_path):  # noqa: F811
    """sample-crash: its queue files lack the last records; the rebuild holds them all."""
    store = copy_store(vectors / "sample-crash" / "store", tmp_path / "crash")
    want = sorted(export_rows(vectors / "sample-crash" / "store", vector_config), key=sort_key)
    (store / "abort").unlink()  # rebuilt queues and index are complete: no recovery needed
    result = jobs.rebuild(spark, str(store), vector_config)
    assert result["records"] == 1000
    assert sorted(export_rows(store, vector_config), key=sort_key) == want


def test_spark_verify_reports_like_verify(spark, tmp_path):  # noqa: F811
    store = make_store(tmp_path / "store", 300)
    report = verify(spark, str(store), small_config())
    assert report.ok and report.records == 300 and report.units == 300
    assert report.to_dict() == verify_store(store, small_config(), max_problems=100).to_dict()
    # damage: a body byte flipped (CRC), a consume-queue unit pointing nowhere
    seg = sorted((store / "commitlog").iterdir())[1]
    data = bytearray(seg.read_bytes())
    data[200] ^= 0xFF
    seg.write_bytes(bytes(data))
    cq = store / "consumequeue" / "TopicA" / "0" / ("0" * 20)
    units = bytearray(cq.read_bytes())
    units[40:48] = (123).to_bytes(8, "big")
    cq.write_bytes(bytes(units))
    damaged = verify(spark, str(store), small_config())
    single = verify_store(store, small_config(), max_problems=100)
    assert not damaged.ok
    assert damaged.problem_count == single.problem_count > 0
    assert sorted(damaged.problems) == sorted(single.problems)
    assert any("no record starts there" in p for p in damaged.problems)
    # the command: exit status 1 and the report as JSON
    done = CliRunner().invoke(cli, ["spark", "verify", str(store), *SETS, "--json"])
    assert done.exit_code == 1, done.output
    assert json.loads(done.output)["problemCount"] == single.problem_count
    # as a table: verify's own rendering, the settings hint after the next steps included
    table, plain = run("spark", "verify", store, *SETS), run("verify", store, *SETS)
    assert table.exit_code == plain.exit_code == 1
    hint = "give each command the same --config and --set"
    assert hint in plain.stdout and hint in table.stdout, table.stdout


def test_spark_verify_of_a_store_held_open_stops_at_its_live_tail_as_verify(spark, tmp_path):  # noqa: F811
    """A store a process holds (here this one), with a record being written at its tail (its size
    and magic code, nothing after them yet): as ``rocketstore verify``, the Spark check ends the
    log where the records ended when it started, says so in a note, and reports the same."""
    import struct

    from rocketstore.codec.record import MESSAGE_MAGIC_CODE

    config = small_config()
    store = make_store(tmp_path / "store", 120)
    with MessageStore.open(store, config) as held:
        write_messages(held, 5, start=120)
        assert held.wait_for_dispatch()
        end = held.max_phy_offset
        size = config.mapped_file_size_commit_log
        assert end % size + 300 < size
        with open(store / "commitlog" / f"{end - end % size:020d}", "r+b") as f:
            f.seek(end % size)
            f.write(struct.pack(">ii", 200, MESSAGE_MAGIC_CODE))
        single = verify_store(store, config, max_problems=100)
        report = verify(spark, str(store), config)
    assert single.lock_held_by is not None and single.ok, single.problems
    assert any(f"the records ended at offset {end} when verify started" in n for n in single.notes), single.notes
    assert report.to_dict() == single.to_dict()


def test_parquet_export_partitioned_by_topic(spark, tmp_path):  # noqa: F811
    store = make_store(tmp_path / "store", 240)
    rows = _export(store)
    out = tmp_path / "parquet"
    done = CliRunner().invoke(cli, ["spark", "export", str(store), *SETS, "--parquet", str(out), "--json"])
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    assert result["messages"] == 240
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["topic=OrderTopic", "topic=TopicA", "topic=TopicB"]
    back = spark.read.parquet(str(out))
    assert back.count() == 240
    assert {r["topic"]: r["count"] for r in back.groupBy("topic").count().collect()} == result["topics"]
    # with time bounds
    times = sorted(r["storeTimestamp"] for r in rows)
    begin, end = times[60], times[180]
    bounded = jobs.export_parquet(
        spark,
        str(store),
        str(tmp_path / "bounded"),
        {k: str(v) for k, v in SMALL_GEOMETRY.items()},
        begin=begin,
        end=end,
    )
    assert bounded["messages"] == sum(1 for r in rows if begin <= r["storeTimestamp"] < end)


def test_rebuild_command_and_spark_submit(spark, vectors, tmp_path):  # noqa: F811
    """``rocketstore spark rebuild`` in this session; ``spark-submit`` of the jobs module in its own."""
    store = copy_store(vectors / "sample-clean" / "store", tmp_path / "clean")
    sets = [f"--set={k}={v}" for k, v in VECTOR_OPTIONS.items()]
    shutil.rmtree(store / "index")
    done = CliRunner().invoke(cli, ["spark", "rebuild", str(store), *sets, "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["records"] > 1500
    submit = Path(sys.executable).parent / "spark-submit"
    if not submit.exists():
        pytest.skip("spark-submit is not installed next to this interpreter")
    job = Path(jobs.__file__)
    proc = subprocess.run(
        [str(submit), "--master", "local[1]", str(job), "verify", str(store), *sets],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout[proc.stdout.index("{") :])["ok"] is True


def test_the_jobs_module_reports_errors_as_the_command_does(spark, tmp_path, capsys):  # noqa: F811
    """``python -m rocketstore.spark.jobs``: ``error: ...`` on stderr and exit status 2 (not a
    traceback and 1, verify's status for problems found)."""
    assert jobs.main(["verify", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.startswith(f"error: no store at {tmp_path / 'missing'}")
    store = make_store(tmp_path / "store", 400)
    (tmp_path / "out").mkdir()
    assert jobs.main(["export", str(store), *SETS, "--parquet", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: the output {tmp_path / 'out'} exists: give --overwrite (mode 'overwrite') to replace it\n"
    assert "Traceback" not in err
    # an error in the data source: the line names it, not "Traceback (most recent call last):"
    assert jobs.main(["export", str(store), *SETS, "--parquet", str(tmp_path / "o2"), "--topics", "Nope"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: the export job failed: ") and "InvalidArgumentError: " in last, last
    assert "no topic" in last and "Traceback" not in last, last
    seg, data = _first_record_of_segment(store, 1)
    data[4:8] = b"\x01\x02\x03\x04"  # the magic code, data after it: the rebuild refuses the log
    seg.write_bytes(bytes(data))
    assert jobs.main(["rebuild", str(store), *SETS]) == 2
    assert "later segment(s) hold data" in capsys.readouterr().err


def test_the_jobs_module_exports_topics_and_overwrites(spark, tmp_path, capsys):  # noqa: F811
    """``--topics`` and ``--overwrite``, as README gives them for the module too."""
    store = make_store(tmp_path / "store", 60)
    out = tmp_path / "out"
    assert jobs.main(["export", str(store), *SETS, "--parquet", str(out), "--topics", "TopicA"]) == 0
    assert json.loads(capsys.readouterr().out)["topics"] == {"TopicA": 20}
    args = ["export", str(store), *SETS, "--parquet", str(out), "--topics", "TopicA,Order.*", "--overwrite"]
    assert jobs.main(args) == 0
    assert json.loads(capsys.readouterr().out)["topics"] == {"OrderTopic": 20, "TopicA": 20}
    with pytest.raises(SystemExit) as exc:
        jobs.main(["export", str(store), "--parquet", str(out), "--topics", "Bad("])
    assert exc.value.code == 2 and "--topics" in capsys.readouterr().err


def test_an_export_over_its_own_store_is_refused_before_spark_writes(spark, tmp_path, capsys):  # noqa: F811
    """Spark's overwrite empties the output folder before the data source reads it: an export
    whose output is the store, lies in it or holds it is refused, whoever runs it (the jobs module
    has none of the command's checks), and the store is left as it was."""
    store = make_store(tmp_path / "store", 30)
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    for out in (store, store / "out", tmp_path):
        assert jobs.main(["export", str(store), *SETS, "--parquet", str(out), "--overwrite"]) == 2
        assert "overlap: it would overwrite the store" in capsys.readouterr().err
        assert sorted(p.relative_to(store) for p in store.rglob("*")) == before
    assert len(_export(store)) == 30


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_failed_export_leaves_the_output_as_it_was(spark, tmp_path):  # noqa: F811
    """The export is written beside its output and takes its place only once whole: one that fails
    (a damaged store) leaves an earlier export there with --overwrite, and no folder without it (a
    second run is not refused for one); nothing is left beside it."""
    store = make_store(tmp_path / "store", 60)
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    assert CliRunner().invoke(cli, ["spark", "export", str(store), *SETS, "--parquet", str(out)]).exit_code == 0
    before = _files(out)
    assert any(name.endswith(".parquet") for name in before)
    os.truncate(store / "consumequeue" / "TopicA" / "0" / f"{0:020d}", 30)  # a unit cut in two
    for folder, extra in ((out, ["--overwrite"]), (fresh, [])):
        done = CliRunner().invoke(cli, ["spark", "export", str(store), *SETS, "--parquet", str(folder), *extra])
        assert done.exit_code == 2 and "error: the export failed: " in done.output, done.output
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "store"]


def _first_record_of_segment(store: Path, index: int) -> tuple[Path, bytearray]:
    seg = sorted((store / "commitlog").iterdir())[index]
    return seg, bytearray(seg.read_bytes())


def test_rebuild_dispatches_past_a_bad_crc_as_reput_does(spark, tmp_path):  # noqa: F811
    """A flipped body byte mid-log: every record is queued, and the next open keeps every segment."""
    store = make_store(tmp_path / "store", 400)
    before = _export(store)
    seg, data = _first_record_of_segment(store, 1)
    data[88] ^= 0xFF  # the first body byte of the segment's first record (V1 header: 88 bytes)
    seg.write_bytes(bytes(data))
    segments = sorted(p.name for p in (store / "commitlog").iterdir())
    result = jobs.rebuild(spark, str(store), small_config())
    assert result["records"] == 400 and result["units"] == 400 and result["segmentsAfterEnd"] == 0
    with MessageStore.open(store, small_config()):  # recovery walks from where the queues end
        pass
    assert sorted(p.name for p in (store / "commitlog").iterdir()) == segments
    assert [r["commitLogOffset"] for r in _export(store)] == [r["commitLogOffset"] for r in before]


def test_rebuild_does_not_count_an_empty_pre_allocated_segment_after_the_end(spark, tmp_path, caplog):  # noqa: F811
    """A zero-filled segment after the last one with data (a writer's pre-allocated next file,
    which verify calls "empty ... after the log end") is not a segment left undispatched: no
    warning, segmentsAfterEnd 0."""
    import logging

    store = make_store(tmp_path / "store", 300)
    last = sorted((store / "commitlog").iterdir())[-1]
    size = SMALL_GEOMETRY["mappedFileSizeCommitLog"]
    (store / "commitlog" / f"{int(last.name) + size:020d}").write_bytes(bytes(size))
    before = _export(store)
    shutil.rmtree(store / "consumequeue")
    with caplog.at_level(logging.WARNING, logger="rocketstore.spark.jobs"):
        result = jobs.rebuild(spark, str(store), small_config())
    assert result["records"] == 300 and result["segmentsAfterEnd"] == 0
    assert not [r.getMessage() for r in caplog.records if "were not dispatched" in r.getMessage()]
    assert _export(store) == before


def test_rebuild_refuses_a_broken_record_with_data_after_it(spark, tmp_path):  # noqa: F811
    store = make_store(tmp_path / "store", 400)
    seg, data = _first_record_of_segment(store, 1)
    data[4:8] = b"\x01\x02\x03\x04"  # the magic code: no scan gets past this record
    seg.write_bytes(bytes(data))
    queues = {str(p): p.read_bytes() for p in (store / "consumequeue").rglob("0*") if p.is_file()}
    done = CliRunner().invoke(cli, ["spark", "rebuild", str(store), *SETS, "--json"])
    assert done.exit_code == 2, done.output
    assert "later segment(s) hold data" in done.output
    assert {str(p): p.read_bytes() for p in (store / "consumequeue").rglob("0*") if p.is_file()} == queues  # untouched
    assert not [p for p in store.iterdir() if p.name.startswith(".rebuild")]


def _retention_emptied_store(store: Path) -> Path:
    """Early/0's ten records in the first segment, which retention then deleted; Late's after."""
    with MessageStore.open(store, small_config()) as s:
        for i in range(10):
            s.put(Message("Early", b"e" * 500, keys=[f"e{i}"]), 0).raise_for_status()
        for i in range(60):
            s.put(Message("Late", b"l" * 400), i % 2).raise_for_status()
        s.wait_for_dispatch()
    first = sorted((store / "commitlog").iterdir())[0]
    old = time.time() - 10 * 3600
    os.utime(first, (old, old))
    with MessageStore.open(store, small_config(fileReservedTime=1)) as s:
        s.clean_expired_files()
    return store


def _early_offsets(store: Path) -> tuple[int, int] | None:
    with MessageStore.open(store, small_config()) as s:
        cq = s.queues.find("Early", 0)
        return None if cq is None else (cq.min_offset_in_queue(), cq.max_offset_in_queue())


def test_rebuild_keeps_a_queue_whose_records_retention_removed(spark, tmp_path):  # noqa: F811
    """Early/0's ten records went with the first segment: the rebuilt queue still ends at 10."""
    store = _retention_emptied_store(tmp_path / "store")
    result = jobs.rebuild(spark, str(store), small_config())
    assert result["queuesCarriedOver"] == 1
    with MessageStore.open(store, small_config()) as s:
        cq = s.queues.find("Early", 0)
        assert cq is not None and (cq.min_offset_in_queue(), cq.max_offset_in_queue()) == (10, 10)
        assert s.put(Message("Early", b"next"), 0).queue_offset == 10
        s.wait_for_dispatch()
        assert [m.body for m in s.get_message("g", "Early", 0, 10, 32).messages] == [b"next"]
    assert verify_store(store, small_config()).ok


def test_rebuild_replaces_a_cut_short_consume_queue_file(spark, tmp_path, caplog):  # noqa: F811
    """verify's next step for a queue file cut short is a rebuild: the old queue is not read when
    the rebuild makes it again; a damaged queue it does not make (retention removed its records)
    is not carried over, with a warning, and the rest of the rebuild stands."""
    store = _retention_emptied_store(tmp_path / "store")
    before = _export(store)
    late = sorted((store / "consumequeue" / "Late" / "0").iterdir())[0]
    os.truncate(late, 100)
    early = sorted((store / "consumequeue" / "Early" / "0").iterdir())[0]
    os.truncate(early, 100)
    result = jobs.rebuild(spark, str(store), small_config())
    assert result["queuesCarriedOver"] == 0
    assert "Early/0 is not carried over" in caplog.text
    assert _export(store) == before
    assert verify_store(store, small_config()).ok


KILLED_REBUILD = """
import os, sys
sys.path.insert(0, {tests!r})
from spark_conftest import small_config
from rocketstore.files import syscalls
from rocketstore.spark import jobs
from rocketstore.spark.session import local_session

steps = [0]

def dies_at_the_second_swap_step(real):  # the harness: a kill between two steps of the swap
    def step(a, b):
        if os.path.basename(a) in ("consumequeue", "index") or os.path.basename(b) in ("consumequeue", "index"):
            steps[0] += 1
            if steps[0] == 2:
                os._exit(137)
        return real(a, b)
    return step

os.rename = dies_at_the_second_swap_step(os.rename)
syscalls.exchange = dies_at_the_second_swap_step(syscalls.exchange) if {exchange!r} else (lambda a, b: False)
jobs.rebuild(local_session("local[1]", "killed-rebuild"), {store!r}, small_config())
"""


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_a_rebuild_killed_while_swapping_loses_no_queue(spark, tmp_path, exchange):  # noqa: F811
    """A carried-over queue (Early/0 at (10,10), its records all deleted by retention) survives a
    rebuild killed between two steps of its swap, at the next open and at the next rebuild. With
    the exchange the killed rebuild leaves the new queues in place; with two renames (a file
    system that cannot exchange) the next rebuild moves the old ones back before it reads them."""
    rebuilt = _retention_emptied_store(tmp_path / "store")
    jobs.rebuild(spark, str(rebuilt), small_config())
    assert _early_offsets(rebuilt) == (10, 10)
    killed = tmp_path / "killed"
    shutil.copytree(rebuilt, killed)
    code = KILLED_REBUILD.format(tests=str(Path(__file__).parent), store=str(killed), exchange=exchange)
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the killed child's Spark work folder stays in tmp_path
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 137, done.stderr[-3000:]
    assert [p for p in killed.iterdir() if p.name.startswith(".rebuild")]
    if exchange:  # never without consumequeue/: a normal open finds the queue
        opened = tmp_path / "opened"
        shutil.copytree(killed, opened)
        assert _early_offsets(opened) == (10, 10)
    result = jobs.rebuild(spark, str(killed), small_config())
    assert result["queuesCarriedOver"] == 1
    assert not [p for p in killed.iterdir() if p.name.startswith(".rebuild")]
    assert _early_offsets(killed) == (10, 10)


def test_parquet_export_keeps_numeric_topic_names_apart(spark, tmp_path):  # noqa: F811
    """Topics "7" and "07": Spark would read the partition column back as the int 7."""
    store = tmp_path / "store"
    with MessageStore.open(store, small_config()) as s:
        write_messages(s, 30, topics=("7", "07", "0123"))
        s.wait_for_dispatch()
    result = jobs.export_parquet(
        spark, str(store), str(tmp_path / "out"), {k: str(v) for k, v in SMALL_GEOMETRY.items()}
    )
    assert result["topics"] == {"0123": 10, "07": 10, "7": 10} and result["messages"] == 30
    assert spark.conf.get("spark.sql.sources.partitionColumnTypeInference.enabled") == "true"  # untouched


def test_rebuild_removes_the_work_folder_of_a_killed_rebuild(spark, tmp_path):  # noqa: F811
    store = make_store(tmp_path / "store", 60)
    stale = store / ".rebuild-0badc0de"
    (stale / "parts").mkdir(parents=True)
    (stale / "old-index").mkdir()
    assert any("did not finish" in n for n in verify_store(store, small_config()).notes)
    jobs.rebuild(spark, str(store), small_config())
    assert not [p for p in store.iterdir() if p.name.startswith(".rebuild")]
    assert verify_store(store, small_config()).notes == []


def test_a_session_of_its_own_plans_by_its_master_s_cores_and_removes_its_work_folder() -> None:
    """local_session("local[3]") in a program of its own: default parallelism 3 (the rebuild and
    verify group segments by it), not a fixed 2 whatever the master; and without a work_dir it
    makes a temporary folder (logging set-up, Spark's local dir) that the program's end removes:
    every Spark job used to leave one in the temp folder. Its stderr holds no "Setting default log
    level" lines: every Spark command printed them."""
    script = (
        "from rocketstore.spark.session import local_session\n"
        "spark = local_session('local[3]')\n"
        "print(spark.sparkContext.defaultParallelism, spark.conf.get('spark.local.dir'), flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    parallelism, local_dir = done.stdout.splitlines()[-1].split()
    # the gateway's log level is ours (error), so Spark does not announce its shell default
    assert "Setting default log level" not in done.stderr and "sc.setLogLevel" not in done.stderr, done.stderr
    assert parallelism == "3"
    assert Path(local_dir).name == "local" and Path(local_dir).parent.name.startswith("rocketstore-spark-")
    assert not Path(local_dir).parent.exists()


def test_spark_export_of_a_time_range_without_messages_is_zero_messages(spark, tmp_path):  # noqa: F811
    """0 messages and a folder holding only _SUCCESS, said in one line: on stdout, or on stderr
    beside --json's object (run in this session: a program of its own is the spark-submit test's)."""
    store = make_store(tmp_path / "store", 60)
    select_none = ["spark", "export", store, *SETS, "--begin", 1, "--end", 2]
    out = tmp_path / "json"
    done = run(*select_none, "--parquet", out, "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["messages"] == 0 and "no message selected" in done.stderr
    assert (out / "_SUCCESS").exists()
    out = tmp_path / "plain"
    done = run(*select_none, "--parquet", out)
    assert done.exit_code == 0, done.stderr
    assert done.stdout.startswith(f"no message selected: {out} holds no data")
    assert len(done.stdout.splitlines()) == 1 and "no message selected" not in done.stderr
    assert (out / "_SUCCESS").exists()


def test_spark_export_warns_about_a_named_topic_the_store_lacks(spark, tmp_path):  # noqa: F811
    """As ``rocketstore export --topic``: the others are exported, the missing name is warned about."""
    store = make_store(tmp_path / "store", 60)
    args = ["spark", "export", str(store), *SETS, "--parquet", str(tmp_path / "out"), "--topics", "TopicA,Nope,Order.*"]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    assert f"WARNING: {store} has no topic 'Nope': nothing is exported for it" in done.output
    assert done.output.count("WARNING") == 1
    assert spark.read.parquet(str(tmp_path / "out")).count() == 40


def test_parquet_export_to_an_empty_path_says_so(tmp_path):
    done = run("spark", "export", make_store(tmp_path / "store", 5), *SETS, "--parquet", "")
    assert done.exit_code == 2 and "--parquet is empty: give a folder name" in done.stderr, done.stderr


def test_parquet_export_lists_a_message_it_cannot_read_and_exits_1(spark, tmp_path):  # noqa: F811
    """As ``rocketstore export``: the other messages are exported, the damaged one is named in a
    warning, and the exit status is 1."""
    store = make_store(tmp_path / "store", 400)
    offset = damage_record(store, "TopicA", 0, 1)
    out = tmp_path / "parquet"
    done = CliRunner().invoke(cli, ["spark", "export", str(store), *SETS, "--parquet", str(out)])
    assert done.exit_code == 1, done.output
    assert f"WARNING: TopicA/0 queue offset 1 (commit-log offset {offset}, " in done.output
    assert "1 message(s) could not be read" in done.output
    assert spark.read.parquet(str(out)).count() == 399
    # with --json, one document: the error object, the export's result in it (there were two)
    done = run("spark", "export", store, *SETS, "--parquet", tmp_path / "again", "--json")
    assert done.exit_code == 1
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "ProblemsFound" and (error["result"]["messages"], error["result"]["unreadable"]) == (399, 1)
    result = jobs.export_parquet(
        spark, str(store), str(out), {k: str(v) for k, v in SMALL_GEOMETRY.items()}, mode="overwrite"
    )
    assert (result["messages"], result["unreadable"]) == (399, 1)


def test_spark_export_warns_when_the_commit_log_is_gone_but_the_queues_hold_units(spark, tmp_path):  # noqa: F811
    """As ``rocketstore export``: a commit log missing (a storePathCommitLog not given, a folder
    moved away) leaves 0 messages, said in the warning the CLI gives; a rebuild is refused."""
    store = make_store(tmp_path / "store", 60)
    (store / "commitlog").rename(tmp_path / "elsewhere")
    done = run("spark", "export", store, *SETS, "--parquet", tmp_path / "out")
    assert done.exit_code == 0, done.stderr
    assert f"WARNING: the commit log {store / 'commitlog'} is missing but the consume queues" in done.stderr
    assert "every message is gone" in done.stderr
    done = run("spark", "rebuild", store, *SETS)
    assert done.exit_code == 2 and "a rebuild would replace every queue and the index with nothing" in done.stderr
