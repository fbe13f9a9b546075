"""Diagnosing and repairing damaged stores from the command line: recover asks before it drops
intact records, says what it checked and what it left, verify says what to do next, and the
messages name what is wrong."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from conftest import tree_hashes
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.errors import InvalidArgumentError, RocketStoreError
from rocketstore.files.mapped_file import MappedFile
from rocketstore.log.recovery import RecoveryReport
from rocketstore.results import PutResult
from test_cli import TINY, TINY_SETS, jsonl, open_in_another_process, run
from test_damaged_stores import _fill_segment_to_its_end

COUNT = 60  # about 4 segments of 4 KiB
BODY_AT = 90  # a byte of the body of a record (its body starts at 88: IPv4 hosts, no properties before it)


def _store(root: Path, count: int = COUNT) -> list[PutResult]:
    """``count`` messages in T/0, each with key k<i>, cleanly shut down; their put results."""
    with MessageStore.open(root, StoreConfig(**TINY)) as store:
        results = [store.put(Message("T", f"message {i:04d} " * 6, keys=[f"k{i}"])) for i in range(count)]
        for result in results:
            result.raise_for_status()
        assert store.wait_for_dispatch()
    return results


def _patch(root: Path, offset: int, data: bytes) -> Path:
    """Write ``data`` at commit-log ``offset``; the segment written."""
    size = TINY["mappedFileSizeCommitLog"]
    segment = root / "commitlog" / f"{offset - offset % size:020d}"
    with open(segment, "r+b") as f:
        f.seek(offset % size)
        f.write(data)
    return segment


def _flip(root: Path, offset: int) -> Path:
    size = TINY["mappedFileSizeCommitLog"]
    segment = root / "commitlog" / f"{offset - offset % size:020d}"
    byte = segment.read_bytes()[offset % size]
    return _patch(root, offset, bytes([byte ^ 0xFF]))


def _exported(root: Path, *extra: str) -> int:
    result = run("export", root, *TINY_SETS, *extra)
    return len(jsonl(result.stdout))


# -- C1: recover refuses to drop intact records ----------------------------------------------------
def test_recover_refuses_a_cut_that_drops_intact_records_and_force_cuts(tmp_path: Path) -> None:
    root = tmp_path / "s"
    results = _store(root)
    bad = len(results) - 15  # in the last 3 segments, which recovery after a clean shutdown checks
    phy = results[bad].commit_log_offset
    segment = _flip(root, phy + BODY_AT)
    after = results[bad + 1 :]
    intact = sum(r.wrote_bytes for r in after)
    before = tree_hashes(root)

    for extra in ([], ["--dry-run"]):
        result = run("recover", root, *TINY_SETS, *extra)
        assert result.exit_code == 1, result.output
        text = result.stderr + result.stdout
        assert f"commitlog/{segment.name}@{phy % 4096} (offset {phy}): body CRC" in text
        assert f"drop the {len(after)} intact record(s) ({intact} bytes)" in text
        assert "--force" in text and "--set checkCRCOnRecover=false" in text and "cp -a" in text
    result = run("recover", root, *TINY_SETS, "--json")
    assert result.exit_code == 1
    plan = json.loads(result.stdout)["error"]["plan"]
    assert plan["intactRecordsAfter"] == len(after) and plan["badRecord"]["bodyCrcOnly"] is True
    dry = json.loads(run("recover", root, *TINY_SETS, "--dry-run", "--json").stdout)
    assert dry["wouldRefuse"] is True and dry["plan"]["logEnd"] == phy
    assert tree_hashes(root) == before  # nothing changed

    result = run("recover", root, *TINY_SETS, "--force", "--json")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert (info["droppedRecords"], info["droppedBytes"]) == (len(after), intact)
    assert info["cutAt"]["offset"] == phy and info["maxOffset"] == phy
    assert _exported(root) == bad


BLANK_MAGIC = struct.pack(">I", 0xCBD43194)


def test_recover_refuses_to_end_the_log_at_a_blank_marker_that_intact_records_follow(tmp_path: Path) -> None:
    """A record whose magic code became the BLANK marker's in the last segment: RocketMQ's recovery
    ends the log there (a BLANK ends the last file), which drops the records after it: recover
    counts them and refuses without --force, as for any other damage."""
    root = tmp_path / "s"
    results = _store(root)
    size = TINY["mappedFileSizeCommitLog"]
    last = [r for r in results if r.commit_log_offset // size == results[-1].commit_log_offset // size]
    bad = results.index(last[len(last) // 2])
    phy = results[bad].commit_log_offset
    _patch(root, phy + 4, BLANK_MAGIC)
    after = results[bad + 1 :]
    before = tree_hashes(root)
    problems = json.loads(run("verify", root, *TINY_SETS, "--json").stdout)["problems"]
    assert any("after the BLANK marker (recovery ends the log at it and drops them)" in p for p in problems)
    result = run("recover", root, *TINY_SETS)
    assert result.exit_code == 1, result.output
    text = result.stderr + result.stdout
    assert "BLANK marker" in text and f"drop the {len(after)} intact record(s)" in text
    assert tree_hashes(root) == before
    info = json.loads(run("recover", root, *TINY_SETS, "--force", "--json").stdout)
    assert info["droppedRecords"] == len(after) and info["maxOffset"] == phy
    assert _exported(root) == bad


def test_recover_names_the_records_a_blank_marker_mid_segment_leaves_unchecked(tmp_path: Path) -> None:
    """A BLANK marker inside a segment recovery checks, records after it: recovery goes on in the
    next file (RocketMQ's), so the rest of that segment is neither checked nor cut; recover says so."""
    root = tmp_path / "s"
    results = _store(root)
    size = TINY["mappedFileSizeCommitLog"]
    segments = sorted({r.commit_log_offset // size for r in results})
    checked = [r for r in results if r.commit_log_offset // size == segments[-2]]
    phy = checked[len(checked) // 2].commit_log_offset
    _patch(root, phy + 4, BLANK_MAGIC)
    report = json.loads(run("verify", root, *TINY_SETS, "--json").stdout)
    assert any("neither checked nor dispatched" in p for p in report["problems"]), report["problems"]
    rebuilds = [step for step in report["nextSteps"] if "rebuild" in step]  # a rebuild would lose them
    assert rebuilds and all("BLANK marker inside a segment" in step for step in rebuilds), report["nextSteps"]
    assert any("rocketstore import" in step for step in report["nextSteps"])
    result = run("recover", root, *TINY_SETS, "--json")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["droppedRecords"] == 0 and info["recovery"]["keptBadRecords"] == [phy]
    (step,) = info["nextSteps"]
    assert f"(at offset {phy})" in step and "BLANK marker" in step


def test_recover_keeps_a_body_crc_damaged_record_with_check_crc_off(tmp_path: Path) -> None:
    root = tmp_path / "s"
    results = _store(root)
    _flip(root, results[-10].commit_log_offset + BODY_AT)
    result = run("recover", root, *TINY_SETS, "--set", "checkCRCOnRecover=false", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["droppedRecords"] == 0
    assert _exported(root, "--set", "checkCRCOnRecover=false") == COUNT  # an open checking CRCs cuts it


def test_recover_refusal_for_header_damage_does_not_offer_check_crc_off(tmp_path: Path) -> None:
    root = tmp_path / "s"
    results = _store(root)
    phy = results[-10].commit_log_offset
    _patch(root, phy + 4, b"\xde\xad\xbe\xef")  # the magic code
    before = tree_hashes(root)
    result = run("recover", root, *TINY_SETS)
    assert result.exit_code == 1
    assert f"(offset {phy}): bad magic code 0xDEADBEEF" in result.stderr
    assert "drop the 9 intact record(s)" in result.stderr
    assert "checkCRCOnRecover" not in result.stderr and "--force" in result.stderr
    assert tree_hashes(root) == before


def test_recover_cuts_a_torn_tail_without_force_and_says_so(tmp_path: Path) -> None:
    """A crash's torn last record: nothing intact follows it, so recover cuts it (as RocketMQ)."""
    root = tmp_path / "s"
    results = _store(root)
    last = results[-1]
    _patch(root, last.commit_log_offset + 60, bytes(last.wrote_bytes - 60))  # only its head was written
    (root / "abort").touch()
    result = run("recover", root, *TINY_SETS, "--json")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["cutAt"]["offset"] == last.commit_log_offset and info["droppedRecords"] == 0
    assert info["maxOffset"] == last.commit_log_offset
    assert _exported(root) == COUNT - 1
    table = run("recover", root, *TINY_SETS).stdout
    assert "records dropped" in table


def test_recover_of_a_sound_store_drops_nothing(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store(root)
    dry = run("recover", root, *TINY_SETS, "--dry-run")
    assert dry.exit_code == 0 and "recover would go ahead" in dry.stdout
    info = json.loads(run("recover", root, *TINY_SETS, "--json").stdout)
    assert info["droppedRecords"] == 0 and info["cutAt"] is None


# -- every command that opens the store for writing refuses the cut recover refuses ------------------
def _writing_commands(tmp_path: Path, root: Path) -> list[list[object]]:
    """Each CLI command that opens STORE for writing (but recover), with its arguments."""
    line = run("export", root, *TINY_SETS).stdout.splitlines()[0]
    lines = tmp_path / "one.jsonl"
    lines.write_text(line + "\n", encoding="utf-8")
    return [
        ["clean"],
        ["clean", "--delete-topic", "T"],
        ["produce", "--topic", "T", "--body", "x"],
        ["import", "--input", lines],
        ["consume", "--topic", "T", "--group", "G", "--commit"],
    ]


@pytest.mark.parametrize("damage", ["clean exit", "queues and index gone", "crash"])
def test_commands_that_write_refuse_the_cut_recover_refuses_and_change_nothing(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The open's recovery would drop intact records: refused as recover refuses it, before a byte
    changes (no abort left, no unit or index entry written for the records before the cut)."""
    root = tmp_path / "s"
    results = _store(root)
    phy = results[-10].commit_log_offset  # 9 intact records follow it, in the segments recovery checks
    _flip(root, phy + BODY_AT)
    commands = _writing_commands(tmp_path, root)
    if damage == "queues and index gone":  # a clean exit whose recovery dispatches the log again
        shutil.rmtree(root / "consumequeue")
        shutil.rmtree(root / "index")
    if damage == "crash":
        (root / "abort").touch()
    before = tree_hashes(root)
    refused = run("recover", root, *TINY_SETS).stderr.splitlines()[0]
    assert tree_hashes(root) == before
    for command in commands:
        caplog.clear()
        result = run(command[0], root, *TINY_SETS, *command[1:])
        assert result.exit_code == 1, (command, result.output)
        assert result.stderr.splitlines()[0] == refused, command
        assert "drop the 9 intact record(s)" in refused
        assert f"rocketstore recover --dry-run {root}" in result.stderr
        assert f"rocketstore recover --force {root}" in result.stderr
        assert "commit log cut at" not in caplog.text  # the cut was not made
        assert tree_hashes(root) == before, command
        assert (root / "abort").exists() == (damage == "crash")
    # so does a Spark rebuild (it dispatches every record, past the cut too), before Spark starts
    result = run("spark", "rebuild", root, *TINY_SETS)
    assert result.exit_code == 1 and result.stderr.splitlines()[0] == refused, result.output
    assert "spark rebuild would build queues and index past where recovery ends the log" in result.stderr
    from rocketstore.errors import CorruptStoreError
    from rocketstore.spark import jobs  # the job itself (spark-submit), before it asks Spark for anything

    with pytest.raises(CorruptStoreError, match="drop the 9 intact record"):
        jobs.rebuild(None, str(root), StoreConfig(**TINY))
    assert tree_hashes(root) == before
    error = json.loads(run("produce", root, *TINY_SETS, "--topic", "T", "--body", "x", "--json").stdout)["error"]
    assert error["plan"]["logEnd"] == phy and error["plan"]["intactRecordsAfter"] == 9
    assert run("recover", root, *TINY_SETS, "--force").exit_code == 0
    assert run("produce", root, *TINY_SETS, "--topic", "T", "--body", "x").exit_code == 0


def test_the_python_api_cuts_as_rocketmq_unless_confirm_cut_refuses(tmp_path: Path) -> None:
    root = tmp_path / "s"
    results = _store(root)
    phy = results[-10].commit_log_offset
    _flip(root, phy + BODY_AT)
    before = tree_hashes(root)
    asked: list[int] = []

    def refuse(report: RecoveryReport) -> None:
        asked.append(report.process_offset)
        raise RocketStoreError("refused")

    with pytest.raises(RocketStoreError, match="refused"):
        MessageStore.open(root, StoreConfig(**TINY), confirm_cut=refuse)
    assert asked == [phy] and tree_hashes(root) == before  # no abort left, nothing dispatched or cut
    with pytest.raises(InvalidArgumentError, match="last_exit_ok"):
        MessageStore.open(root, StoreConfig(**TINY), last_exit_ok=True)
    with MessageStore.open(root, StoreConfig(**TINY)) as store:
        assert store.max_phy_offset == phy


def test_the_refusal_plans_the_recovery_of_a_clean_exit_though_the_open_wrote_abort(tmp_path: Path) -> None:
    """The open being refused has written ``abort``: the plan it asks for is still of the recovery
    after a clean exit (the last 3 segments checked), not of one after a crash."""
    root = tmp_path / "s"
    results = _store(root)
    size = TINY["mappedFileSizeCommitLog"]
    segment = results[-1].commit_log_offset // size - 1  # checked after a clean exit
    bad = next(r for r in results if r.commit_log_offset // size == segment)
    _flip(root, bad.commit_log_offset + BODY_AT)
    # after a crash only the last segment would be checked: its first record is older than the checkpoint
    with open(root / "checkpoint", "r+b") as f:
        f.write(struct.pack(">qq", *[int(time.time() * 1000) + 3_600_000] * 2))
    before = tree_hashes(root)
    result = run("clean", root, *TINY_SETS)
    assert result.exit_code == 1, result.output
    assert f"cut the commit log at offset {bad.commit_log_offset}" in result.stderr
    assert tree_hashes(root) == before


@pytest.mark.parametrize("crashed", [False, True])
def test_commands_that_write_cut_a_torn_tail_as_before(tmp_path: Path, crashed: bool) -> None:
    """Nothing intact follows a torn last record: the open cuts it and the command goes on."""
    root = tmp_path / "s"
    results = _store(root)
    last = results[-1]
    _patch(root, last.commit_log_offset + 60, bytes(last.wrote_bytes - 60))  # only its head was written
    if crashed:
        (root / "abort").touch()
    result = run("produce", root, *TINY_SETS, "--topic", "T", "--body", "x", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["queueOffset"] == COUNT - 1  # the torn record's offset, as RocketMQ
    assert run("clean", root, *TINY_SETS).exit_code == 0
    assert _exported(root) == COUNT


def test_a_sound_store_is_not_planned_before_a_command_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a recovery that would cut where records may follow asks what the cut drops."""
    from rocketstore.cli import common

    planned: list[str] = []
    plan = common.plan_recovery

    def spy(store: str, config: StoreConfig, **kwargs: object) -> object:
        planned.append(store)
        return plan(store, config, **kwargs)

    monkeypatch.setattr(common, "plan_recovery", spy)
    root, torn = tmp_path / "s", tmp_path / "torn"
    _store(root)
    for command in _writing_commands(tmp_path, root):
        assert run(command[0], root, *TINY_SETS, *command[1:]).exit_code == 0, command
    assert planned == []
    last = _store(torn)[-1]
    _patch(torn, last.commit_log_offset + 60, bytes(last.wrote_bytes - 60))
    assert run("produce", torn, *TINY_SETS, "--topic", "T", "--body", "x").exit_code == 0
    assert planned == [str(torn)]  # a torn tail (nothing intact follows): planned, then cut


def _cut_as_rocketmq(root: Path, results: list[PutResult], at: int, bodies: int) -> int:
    """A store RocketMQ 4.9.8 cut once: record ``at`` zeroed (a page a power loss never wrote), an
    open after the crash cuts the log there moving positions only (truncateDirtyFiles zeroes
    nothing: the records after it stay on disk), then ``bodies`` small messages put in T/0 and a
    clean shutdown. The log end."""
    hole = results[at]
    _patch(root, hole.commit_log_offset, bytes(hole.wrote_bytes))
    (root / "abort").touch()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MappedFile, "truncate", MappedFile.set_positions)  # RocketMQ's cut
        with MessageStore.open(root, StoreConfig(**TINY)) as store:
            assert store.max_phy_offset == hole.commit_log_offset
            for _ in range(bodies):
                store.put(Message("T", b"new"), 0).raise_for_status()
            assert store.wait_for_dispatch()
            return store.max_phy_offset


def _stale(results: list[PutResult], at: int, end: int) -> list[PutResult]:
    """The old records wholly past ``end`` in the segment of record ``at`` (the later ones went with
    the cut)."""
    size = TINY["mappedFileSizeCommitLog"]
    last = results[at].commit_log_offset // size * size + size
    return [r for r in results if r.commit_log_offset >= end and r.commit_log_offset + r.wrote_bytes <= last]


def test_recover_goes_ahead_past_stale_records_that_rocketmqs_cut_left(tmp_path: Path) -> None:
    """Records past the end that an earlier cut left on disk, whose queue offsets were given again
    to records kept, are no messages lost: recover goes ahead, as RocketMQ and rocketstore's open
    end the log there."""
    root = tmp_path / "s"
    results = _store(root)
    at = COUNT - 10
    end = _cut_as_rocketmq(root, results, at, 4)  # T/0 ends at queue offset at + 4: past the old ones left
    stale = _stale(results, at, end)
    assert stale and all(r.queue_offset < at + 4 for r in stale)
    dry = run("recover", root, *TINY_SETS, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    info = json.loads(dry.stdout)
    assert info["wouldRefuse"] is False and info["plan"]["logEnd"] == end
    assert (info["plan"]["intactRecordsAfter"], info["plan"]["staleRecordsAfter"]) == (0, len(stale))
    table = run("recover", root, *TINY_SETS, "--dry-run")
    assert "recover would go ahead" in table.stdout and f"{len(stale)} stale record(s)" in table.stdout
    result = run("recover", root, *TINY_SETS, "--json")
    assert result.exit_code == 0, result.output
    done = json.loads(result.stdout)
    assert (done["droppedRecords"], done["staleRecordsDropped"], done["maxOffset"]) == (0, len(stale), end)
    assert _exported(root) == at + 4


def test_records_whose_queue_offsets_continue_are_kept_whatever_their_store_time(tmp_path: Path) -> None:
    """A record past the end whose queue offset a record kept took again is stale whatever its
    store time; one whose queue offset continues past its queue's end is a message the cut loses
    even when stored before the records kept (store times prove no order: a clock set back between
    runs): recover refuses and says those may be stale."""
    root = tmp_path / "s"
    results = _store(root)
    at = COUNT - 10
    end = _cut_as_rocketmq(root, results, at, 3)  # T/0 ends at queue offset at + 3 now
    stale = _stale(results, at, end)
    assert [r.queue_offset for r in stale[:2]] == [at + 2, at + 3]
    later = (results[-1].store_timestamp + 3_600_000).to_bytes(8, "big")
    _patch(root, stale[0].commit_log_offset + 56, later)  # STORETIMESTAMP (no CRC covers it)
    dry = run("recover", root, *TINY_SETS, "--dry-run", "--json")
    assert dry.exit_code == 1
    info = json.loads(dry.stdout)
    intact = len(stale) - 1  # all but the one whose queue offset was given again
    assert (info["plan"]["intactRecordsAfter"], info["plan"]["staleRecordsAfter"]) == (intact, 1)
    assert info["plan"]["maybeStaleOfIntact"] == intact
    assert f"{intact} of them were stored before the newest record kept: maybe left on disk" in info["why"]
    _patch(root, stale[1].commit_log_offset + 56, later)  # stored after the records kept: not maybe stale
    plan = json.loads(run("recover", root, *TINY_SETS, "--dry-run", "--json").stdout)["plan"]
    assert (plan["intactRecordsAfter"], plan["maybeStaleOfIntact"]) == (intact, intact - 1)
    result = run("recover", root, *TINY_SETS)
    assert result.exit_code == 1 and "nothing was changed" in result.stderr


def test_recover_names_the_segment_where_it_is_and_copies_a_commit_log_outside_the_store(tmp_path: Path) -> None:
    """With several commit-log folders (storePathCommitLog), one outside STORE: the bad record's
    segment is named where it is (relative to STORE when inside it), and the copy to make first
    takes in the folder outside."""
    root, outside = tmp_path / "s", tmp_path / "elsewhere"
    inside = root / "a"
    config = {**TINY, "storePathCommitLog": f"{inside},{outside}"}
    sets = [x for k, v in config.items() for x in ("--set", f"{k}={v}")]
    with MessageStore.open(root, StoreConfig(**config)) as store:
        results = [store.put(Message("T", f"message {i:04d} " * 6)) for i in range(COUNT)]
        assert store.wait_for_dispatch()
    size = config["mappedFileSizeCommitLog"]
    last = next(i for i, r in enumerate(results) if r.commit_log_offset >= results[-1].commit_log_offset // size * size)
    assert last < COUNT - 2
    names = []
    for bad in (last - 3, last):  # the last two segments: one in each folder (they take turns)
        phy = results[bad].commit_log_offset
        segment = next(p for d in (inside, outside) if (p := d / f"{phy - phy % size:020d}").exists())
        data = bytearray(segment.read_bytes())
        data[phy % size + BODY_AT] ^= 0xFF
        segment.write_bytes(data)
        name = str(segment.relative_to(root)) if inside in segment.parents else str(segment)
        names.append(name)
        dry = run("recover", root, *sets, "--dry-run", "--json", "--external-commit-log")
        assert dry.exit_code == 1, dry.output
        assert json.loads(dry.stdout)["plan"]["badRecord"]["file"] == name
        result = run("recover", root, *sets, "--external-commit-log")
        assert result.exit_code == 1, result.output
        assert f"the cause: {name}@{phy % size} (offset {phy}): body CRC" in result.stderr
        assert f"(cp -a {root} {root}.bak; cp -a {outside} {outside}.bak)" in result.stderr
        data[phy % size + BODY_AT] ^= 0xFF
        segment.write_bytes(data)
    assert names[0].startswith("a/") != names[1].startswith("a/")


# -- C2: recover says what it checked and left; verify ends with the next steps --------------------
def _next_steps(root: Path) -> list[str]:
    report = json.loads(run("verify", root, *TINY_SETS, "--json").stdout)
    return report["nextSteps"]


def test_recover_says_which_segments_it_checked_and_what_it_left(tmp_path: Path) -> None:
    root = tmp_path / "s"
    results = _store(root, count=120)  # 7 segments: recovery after a clean shutdown checks the last 3
    first = results[3].commit_log_offset  # in segment 0
    _patch(root, first + 4, b"\xde\xad\xbe\xef")
    segments = sorted(p.name for p in (root / "commitlog").iterdir())
    # --dry-run says the same first, in the same words and keys
    for extra in (["--dry-run"], []):
        table = run("recover", root, *TINY_SETS, *extra)
        assert table.exit_code == 0, table.stderr
        assert "checked" in table.stdout and "not checked" in table.stdout and segments[-3] in table.stdout
        info = json.loads(run("recover", root, *TINY_SETS, *extra, "--json").stdout)
        assert info["checked"].startswith(f"the last 3 of {len(segments)} segments, from {segments[-3]}")
        assert info["notChecked"].startswith(f"the {len(segments) - 3} segment(s) before {segments[-3]}")
        assert f"`rocketstore verify {root}` checks every record" in info["notChecked"]
    assert info["nextSteps"] == []  # the walk did not reach the damage: nothing known is left
    # records dispatched again from the start (the queues moved aside): the bad one is met and kept
    (root / "consumequeue").rename(tmp_path / "cq.old")
    result = run("recover", root, *TINY_SETS, "--json")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["recovery"]["keptBadRecords"] == [first]
    (step,) = info["nextSteps"]
    assert f"(at offset {first})" in step and "rocketstore export" in step


def test_verify_next_step_for_consume_queues_works(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store(root)
    queue = root / "consumequeue" / "T" / "0"
    sorted(queue.iterdir())[0].unlink()  # the first file of the queue
    (step,) = _next_steps(root)
    moved = f"{root}-consumequeue.old"
    assert f"`mv {root}/consumequeue {moved}`, then `rocketstore recover {root}`" in step
    assert f"rocketstore spark rebuild {root}" in step
    (root / "consumequeue").rename(moved)
    assert run("recover", root, *TINY_SETS).exit_code == 0
    result = run("verify", root, *TINY_SETS)
    assert result.exit_code == 0 and "next step" not in result.stdout


def test_verify_next_steps_can_be_pasted_into_a_shell(tmp_path: Path) -> None:
    """A store path with a space (or any the shell would split) is quoted in the commands the next
    steps give, and the table says to give them the settings verify was given: pasted, they ran
    on other paths, and without the --set the store needs they refused its files' sizes."""
    root = tmp_path / "a store"
    _store(root)
    sorted((root / "consumequeue" / "T" / "0").iterdir())[0].unlink()
    (step,) = _next_steps(root)
    quoted = shlex.quote(str(root))
    assert f"`rocketstore recover {quoted}`" in step, step
    move = re.search(r"`(mv [^`]*)`", step)
    assert move is not None, step
    subprocess.run(["sh", "-c", move[1]], check=True)
    assert not (root / "consumequeue").exists()
    table = run("verify", tmp_path / "a store", *TINY_SETS)
    assert table.exit_code == 1
    last = table.stdout.rstrip().splitlines()[-1]
    assert last.startswith("next steps: give each command the same --config and --set"), last
    assert run("recover", root, *TINY_SETS).exit_code == 0
    assert run("verify", root, *TINY_SETS).exit_code == 0


@pytest.mark.parametrize("after", [True, False], ids=["records-after", "nothing-after"])
def test_recover_refuses_a_log_without_room_for_its_blank_marker_even_with_force(tmp_path: Path, after: bool) -> None:
    """--dry-run says recover refuses such a store even with --force, and recover does, with the
    copy to make (--force cut the log and went ahead: a message stored then was lost at the next
    open); when nothing follows the end, --dry-run said recover would go ahead."""
    root = tmp_path / "s"
    config = StoreConfig(**TINY)
    with MessageStore.open(root, config) as store:
        offsets = [store.put(Message("T", b"m%d" % i), i % 2).raise_for_status().commit_log_offset for i in range(60)]
    size = TINY["mappedFileSizeCommitLog"]
    _fill_segment_to_its_end(root, offsets, size, config.mapped_file_size_consume_queue)
    if not after:  # the segments after it gone
        for segment in (root / "commitlog").iterdir():
            if int(segment.name) >= size:
                segment.unlink()
    before = tree_hashes(root)
    for extra in ([], ["--force"]):
        dry = json.loads(run("recover", root, *TINY_SETS, "--dry-run", "--json", *extra).stdout)
        assert dry["wouldRefuse"] and "no open for writing takes the store" in dry["why"], dry
        result = run("recover", root, *TINY_SETS, *extra)
        assert result.exit_code == 2 and "no open for writing takes the store" in result.stderr, result.stderr
        assert f"rocketstore export {root}" in result.stderr
        assert tree_hashes(root) == before


def test_verify_next_step_for_the_index_works(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store(root)
    index = sorted((root / "index").iterdir())[0]
    with open(index, "r+b") as f:
        f.seek(40)
        f.write(bytes(64 * 4))  # the hash slots: no key is found
    (step,) = _next_steps(root)
    assert step.startswith("index: ") and f"`mv {root}/index {root}-index.old`" in step
    (root / "index").rename(f"{root}-index.old")
    assert run("recover", root, *TINY_SETS).exit_code == 0
    assert run("verify", root, *TINY_SETS).exit_code == 0


def test_verify_next_step_for_config_files_and_the_checkpoint_is_recover(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store(root)
    (root / "config" / "subscriptionGroup.json").write_text("garbage")
    (root / "checkpoint").write_bytes((root / "checkpoint").read_bytes()[:10])
    steps = _next_steps(root)
    assert [s.split(":")[0] for s in steps] == ["checkpoint", "config files"] or [s.split(":")[0] for s in steps] == [
        "config files",
        "checkpoint",
    ]
    assert all(f"`rocketstore recover {root}`" in s for s in steps)
    assert run("recover", root, *TINY_SETS).exit_code == 0
    assert run("verify", root, *TINY_SETS).exit_code == 0


def test_verify_next_steps_for_commit_log_damage(tmp_path: Path) -> None:
    root = tmp_path / "s"
    results = _store(root, count=120)
    _flip(root, results[3].commit_log_offset + BODY_AT)  # before the last 3 segments: recovery keeps it
    steps = _next_steps(root)
    assert steps[0].startswith("commit log: no command repairs a record in place")
    assert "rocketstore export" in steps[0] and "rocketstore import" in steps[0]
    assert len(steps) == 1  # the next open keeps the record: checkCRCOnRecover=false would change nothing
    _patch(root, results[-5].commit_log_offset + 4, b"\xde\xad\xbe\xef")  # in the last 3: recovery cuts there
    steps = _next_steps(root)
    assert f"`rocketstore recover {root} --dry-run`" in steps[0]
    assert not any(s.startswith("body CRC") for s in steps)  # not the only damage


# -- C4: query names a damaged record instead of saying there is none ------------------------------
def test_query_of_a_damaged_record_says_what_is_wrong_with_it(tmp_path: Path) -> None:
    root = tmp_path / "s"
    results = _store(root, count=120)
    target = results[5]  # before the last 3 segments: recovery after a clean shutdown keeps it
    phy = target.commit_log_offset
    msg_id = jsonl(run("query", root, *TINY_SETS, "--offset", phy, "--json").stdout)[0]["msgId"]
    segment = _patch(root, phy, (-16776512).to_bytes(4, "big", signed=True))  # its TOTALSIZE
    what = f"commitlog/{segment.name}@{phy % 4096}: TOTALSIZE -16776512 is below the smallest record's 91 bytes"
    result = run("query", root, *TINY_SETS, "--offset", phy)
    assert result.exit_code == 1
    assert f"the record at commit-log offset {phy} fails its checks: {what}" in result.stderr
    result = run("query", root, *TINY_SETS, "--msg-id", msg_id)
    assert result.exit_code == 1
    assert f"the record at commit-log offset {phy} it names fails its checks: {what}" in result.stderr
    result = run("query", root, *TINY_SETS, "--topic", "T", "--key", "k5")
    assert result.exit_code == 1
    assert "the index points at 1 record(s) that fail their checks" in result.stderr and what in result.stderr
    # an offset inside a record is no record start
    result = run("query", root, *TINY_SETS, "--offset", results[6].commit_log_offset + 8)
    assert result.exit_code == 1 and "no record starts at commit-log offset" in result.stderr


def test_a_key_query_that_finds_some_names_the_hits_that_fail_their_checks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Messages 5 and 6 share a key and 5 is damaged: the query gives 6 and names 5, in the
    result's ``unreadable`` and a WARNING (the API) and on stderr with exit status 1 (the CLI,
    as export and consume for what they cannot read): it was dropped silently."""
    root = tmp_path / "s"
    with MessageStore.open(root, StoreConfig(**TINY)) as store:
        results = [
            store.put(Message("T", f"message {i:04d} " * 6, keys=[f"k{i}", *(["shared"] if i in (5, 6) else [])]))
            for i in range(120)
        ]
        assert store.wait_for_dispatch()
    phy = results[5].commit_log_offset
    segment = _patch(root, phy, (-16776512).to_bytes(4, "big", signed=True))  # its TOTALSIZE
    what = f"commitlog/{segment.name}@{phy % 4096}: TOTALSIZE -16776512 is below the smallest record's 91 bytes"
    with MessageStore.open(root, StoreConfig(**TINY), read_only=True) as store:
        with caplog.at_level("WARNING", logger="rocketstore.reader"):
            found = store.query_message("T", "shared")
        assert [m.commit_log_offset for m in found.messages] == [results[6].commit_log_offset]
        assert found.unreadable == (phy,)
        assert f"commit-log offset(s) {phy} " in caplog.text
        assert store.query_message("T", "k6").unreadable == ()
    result = run("query", root, *TINY_SETS, "--topic", "T", "--key", "shared")
    assert result.exit_code == 1
    *rows, error = jsonl(run("query", root, *TINY_SETS, "--topic", "T", "--key", "shared", "--json").stdout)
    assert [row["commitLogOffset"] for row in rows] == [results[6].commit_log_offset]
    assert "the index also points at 1 record(s)" in error["error"]["message"]  # as export's error object
    assert "message 0006" in result.stdout
    assert "the index also points at 1 record(s) that fail their checks" in result.stderr and what in result.stderr
    assert "do not decode" not in result.stderr  # the reader's own warning is left out: this says more


def test_query_of_a_record_with_a_wrong_physical_offset_field(tmp_path: Path) -> None:
    root = tmp_path / "s"
    results = _store(root, count=120)
    phy = results[5].commit_log_offset
    _patch(root, phy + 28, (phy - 100).to_bytes(8, "big"))  # PHYSICALOFFSET
    result = run("query", root, *TINY_SETS, "--offset", phy)
    assert result.exit_code == 1 and f"the PHYSICALOFFSET field says {phy - 100}" in result.stderr


def test_query_past_the_cut_recovery_makes_in_memory_says_so(tmp_path: Path) -> None:
    root = tmp_path / "s"
    results = _store(root)
    cut = results[-10].commit_log_offset
    _flip(root, cut + BODY_AT)  # in the last 3 segments: the read-only open cuts the log there
    result = run("query", root, *TINY_SETS, "--offset", results[-5].commit_log_offset)
    assert result.exit_code == 1
    assert f"(recovery ends the log at {cut}, where a record fails its checks)" in result.stderr
    for how in (("--offset", cut), ("--msg-id", results[-10].msg_id)):  # the record at the cut: what is wrong
        result = run("query", root, *TINY_SETS, *how)
        assert result.exit_code == 1 and "fails its checks: commitlog/" in result.stderr, result.stderr
        assert "body CRC" in result.stderr, result.stderr


# -- C7/C8: recover and clean deliver no delayed message; recover says what an emptied table does --
def _delayed_store(root: Path) -> None:
    """Three delayed messages (level 1) waiting in SCHEDULE_TOPIC_XXXX."""
    result = run("produce", root, *TINY_SETS, "--topic", "Later", "--delay-level", 1, "--count", 3, "--body", "x")
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("command", ["clean", "recover"])
def test_clean_and_recover_start_no_schedule_service(tmp_path: Path, command: str) -> None:
    """A schedule service corrects a delay offset past its queue when it starts (and then delivers
    what is due): clean and recover leave it as it is, since neither starts one."""
    root = tmp_path / "s"
    _delayed_store(root)
    offsets = root / "config" / "delayOffset.json"
    offsets.write_text('{"offsetTable":{1:99}}')
    result = run(command, root, *TINY_SETS)
    assert result.exit_code == 0, result.stderr
    assert json.loads(offsets.read_text().replace("{1:", '{"1":'))["offsetTable"] == {"1": 99}


def test_recover_of_an_unreadable_delay_offsets_file_says_delivered_messages_come_again(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _delayed_store(root)
    (root / "config" / "delayOffset.json").write_text('{"offsetTable":"x"}')
    step = next(s for s in _next_steps(root) if s.startswith("config files"))
    assert "delayOffset.json" in step and "delivers again the delayed messages already delivered" in step
    result = run("recover", root, *TINY_SETS, "--json")
    assert result.exit_code == 0, result.stderr
    (warning,) = json.loads(result.stdout)["warnings"]
    assert "config/delayOffset.json could not be read" in warning and "the 3 unit(s) of SCHEDULE_TOPIC_XXXX" in warning
    assert "already delivered are delivered again" in warning
    assert f"WARNING: {warning}" in result.stderr
    assert "WARNING" not in run("recover", root, *TINY_SETS).stderr  # written again: read the next time


# -- C9: messages that name the right place -------------------------------------------------------
def test_export_names_no_position_0_for_an_unreadable_record(tmp_path: Path) -> None:
    root = tmp_path / "s"
    results = _store(root, count=120)
    phy = results[5].commit_log_offset  # before the last 3 segments: kept by recovery
    _patch(root, phy, (-16776512).to_bytes(4, "big", signed=True))
    result = run("export", root, *TINY_SETS)
    assert result.exit_code == 1
    size = results[5].wrote_bytes
    assert (
        f"(commit-log offset {phy}, {size} bytes) cannot be read, not exported: the record claims -16776512 bytes; "
        f"{size} are there" in result.stderr
    )
    assert "the record at 0" not in result.stderr


def test_verify_names_the_missing_segment_of_a_gap(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store(root)
    segments = sorted((root / "commitlog").iterdir())
    segments[1].unlink()
    result = run("verify", root, *TINY_SETS, "--json")
    problems = json.loads(result.stdout)["problems"]
    expected = f"commitlog/{segments[2].name}: a gap: {segments[1].name} is missing (the file should start at "
    assert any(p.startswith(expected) for p in problems), problems


def test_the_lock_error_names_the_holder_pid(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store(root, count=3)
    with open_in_another_process(root) as pid:
        for args in (("recover",), ("recover", "--dry-run"), ("clean",), ("produce", "--topic", "T", "--body", "x")):
            result = run(args[0], root, *TINY_SETS, *args[1:])
            assert result.exit_code == 2, args
            assert f"Lock failed, MQ already started: another process (pid {pid}) holds {root}/lock" in result.stderr


def test_a_lock_on_another_file_system_with_the_same_inode_number_is_not_the_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/proc/locks names a file by MAJOR:MINOR:INODE (device numbers in hex): a lock on a file of
    another file system that has the lock file's inode number is not the store's lock."""
    import io
    import os

    from rocketstore.cli import check
    from rocketstore.meta import lockfile

    root = tmp_path / "s"
    _store(root, count=3)
    st = os.stat(root / "lock")
    major, minor, ino = os.major(st.st_dev), os.minor(st.st_dev), st.st_ino
    no_such_pid = 4_194_304 + 17  # above Linux's pid_max: no /proc/PID/fd to look in
    lines: list[str] = []

    def fake_open(path: object, *args: object, **kwargs: object) -> object:
        assert path == "/proc/locks"
        return io.StringIO("".join(lines))

    monkeypatch.setattr(lockfile, "open", fake_open, raising=False)
    other = f"{major + 1:02x}:{minor:02x}:{ino}"
    lines[:] = [f"1: POSIX  ADVISORY  WRITE {no_such_pid} {other} 0 0\n"]
    assert lockfile.lock_holder(str(root)) is None
    result = run("recover", root, *TINY_SETS, "--dry-run")
    assert result.exit_code == 0 and "recover would go ahead" in result.stdout, result.output
    lines.append(f"2: POSIX  ADVISORY  WRITE 4242 {major:02x}:{minor:02x}:{ino} 0 0\n")  # the store's own
    assert lockfile.lock_holder(str(root)) == 4242
    assert "(pid 4242) holds" in run("recover", root, *TINY_SETS, "--dry-run").stderr
    # a device numbered apart from stat's (btrfs, overlay): the inode alone, when that process has the file open
    with open(root / "lock", "rb"):
        lines[:] = [f"1: POSIX  ADVISORY  WRITE {os.getpid()} {other} 0 0\n"]
        assert lockfile.lock_holder(str(root)) == os.getpid()
    dev = os.makedev(0x103, 0x12C)  # printed as the kernel prints it: hex, two digits at least
    line = ["1:", "POSIX", "ADVISORY", "WRITE", "99", "103:12c:77", "0", "0"]
    assert lockfile.holder_in_table([line], dev, 77) == 99
    assert lockfile.holder_in_table([line], os.makedev(0x103, 0x12D), 77) is None
    assert lockfile.holder_in_table([[line[0], "->", *line[1:]]], dev, 77) is None  # a waiter holds nothing
    # recover itself holds the store's lock while it plans (no other process opens it meanwhile)
    monkeypatch.undo()
    seen: list[int | None] = []
    planned = check.plan_recovery

    def plan(store: str, config: StoreConfig) -> object:
        seen.append(lockfile.lock_holder(store))
        return planned(store, config)

    monkeypatch.setattr(check, "plan_recovery", plan)
    assert run("recover", root, *TINY_SETS, "--dry-run").exit_code == 0
    assert run("recover", root, *TINY_SETS).exit_code == 0
    assert seen == [None, os.getpid()]


def test_inspect_reads_a_short_checkpoint_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "s"
    _store(root)
    head = (root / "checkpoint").read_bytes()[:10]
    (root / "checkpoint").write_bytes(head)
    with caplog.at_level("WARNING", logger="rocketstore.meta.checkpoint"):
        result = run("inspect", root, "--json", *TINY_SETS)
    assert result.exit_code == 0, result.output
    warnings = [r for r in caplog.records if "checkpoint holds 10 bytes" in r.getMessage()]
    assert len(warnings) == 1
    shown = json.loads(result.stdout)["checkpoint"]
    assert shown["physicMsgTimestamp"] == int.from_bytes(head[:8], "big") > 0
    assert shown["logicsMsgTimestamp"] == int.from_bytes(head[8:] + bytes(6), "big")
    assert shown["indexMsgTimestamp"] == 0


@pytest.mark.parametrize("where", ["commitlog", "consumequeue"])
def test_a_dangling_symbolic_link_is_named_by_open_inspect_and_verify(tmp_path: Path, where: str) -> None:
    from rocketstore.errors import CorruptStoreError

    root = tmp_path / "s"
    _store(root)
    folder = root / "commitlog" if where == "commitlog" else root / "consumequeue" / "T" / "0"
    last = max(folder.iterdir())
    size = TINY["mappedFileSizeCommitLog" if where == "commitlog" else "mappedFileSizeConsumeQueue"]
    link = folder / f"{int(last.name) + size:020d}"
    link.symlink_to(tmp_path / "gone")
    said = f"a symbolic link to {tmp_path / 'gone'}, which does not exist"
    with pytest.raises(CorruptStoreError, match=said):
        MessageStore.open(root, StoreConfig(**TINY))
    result = run("inspect", root, *TINY_SETS)
    assert result.exit_code != 0 and said in result.stderr and "kept changing" not in result.stderr
    result = run("verify", root, *TINY_SETS)
    assert result.exit_code == 1 and f"{link.relative_to(root)}: {said}" in result.stdout


def test_recover_after_a_crash_names_the_checkpoints_segment_as_where_checking_starts(tmp_path: Path) -> None:
    root = tmp_path / "s"
    results = _store(root, count=120)
    segments = sorted(p.name for p in (root / "commitlog").iterdir())
    (root / "abort").touch()  # a crash after the last flush
    late = (results[-1].store_timestamp + 3_600_000).to_bytes(8, "big")  # every segment is before it
    (root / "checkpoint").write_bytes(late * 3 + bytes(4096 - 24))
    (root / "consumequeue").rename(tmp_path / "cq.old")  # the queues need records from segment 0 on
    plan = json.loads(run("recover", root, *TINY_SETS, "--json", "--dry-run").stdout)["plan"]
    assert plan["checkedFrom"] == segments[-1] and plan["uncheckedSegments"] == len(segments) - 1
    info = json.loads(run("recover", root, *TINY_SETS, "--json").stdout)
    assert info["recovery"]["startFile"] == segments[0]
    assert info["checked"].startswith(f"every segment from {segments[-1]} on")
    assert info["notChecked"].startswith(f"the {len(segments) - 1} segment(s) before {segments[-1]}")


@pytest.mark.parametrize("first_of_segment", [True, False])
def test_maybe_stale_counts_records_older_than_any_record_kept(tmp_path: Path, first_of_segment: bool) -> None:
    """Records past the cut stored before the newest record kept are named as maybe stale, also
    when the cut is at a segment's first record (the newest record kept is in the segment before)."""
    root = tmp_path / "s"
    results = _store(root)
    size = TINY["mappedFileSizeCommitLog"]
    last_start = results[-1].commit_log_offset // size * size
    in_last = [r for r in results if r.commit_log_offset >= last_start]
    cut = 0 if first_of_segment else 2
    assert len(in_last) > cut + 2 and in_last[0].commit_log_offset == last_start
    _flip(root, in_last[cut].commit_log_offset + BODY_AT)  # its body CRC fails
    for later in in_last[cut + 1 :]:  # stored "before" (a clock set back)
        _patch(root, later.commit_log_offset + 56, (1_000_000).to_bytes(8, "big"))
    info = json.loads(run("recover", root, *TINY_SETS, "--dry-run", "--json").stdout)
    after = len(in_last) - cut - 1
    assert (info["plan"]["intactRecordsAfter"], info["plan"]["maybeStaleOfIntact"]) == (after, after)


@pytest.mark.parametrize("next_file", [False, True], ids=["last-file", "empty-file-after"])
def test_verify_ends_the_log_where_recovery_does_at_a_blank_marker(tmp_path: Path, next_file: bool) -> None:
    """A BLANK marker inside the last segment that holds data: with no file after it, recovery ends
    the log at the marker (verify says so, and that the units past it are cut); with an empty
    pre-allocated file after it (as a crash leaves one), recovery goes on there and keeps the rest."""
    root = tmp_path / "s"
    results = _store(root)
    size = TINY["mappedFileSizeCommitLog"]
    segment = results[-1].commit_log_offset // size
    last = [r for r in results if r.commit_log_offset // size == segment]
    phy = last[len(last) // 2].commit_log_offset
    _patch(root, phy + 4, BLANK_MAGIC)
    if next_file:
        (root / "commitlog" / f"{(segment + 1) * size:020d}").write_bytes(bytes(size))
    report = json.loads(run("verify", root, *TINY_SETS, "--json").stdout)
    plan = json.loads(run("recover", root, *TINY_SETS, "--dry-run", "--json").stdout)["plan"]
    assert report["logEnd"] == plan["logEnd"] == ((segment + 1) * size if next_file else phy)
    assert ("BLANK" in report["logEndReason"]) is not next_file, report["logEndReason"]
    assert any("point at or past offset" in p for p in report["problems"]) is not next_file


def test_prepared_and_rollback_records_past_a_cut_are_messages_it_loses(tmp_path: Path) -> None:
    """PREPARED and ROLLBACK records never enter a queue and always have queue offset 0, so their
    queue offset is no sign that a later record took their place: past a damaged record they are
    intact records the cut drops (a half message the transaction check still needs), not stale
    ones. recover refused nothing and said no message was lost."""
    root = tmp_path / "s"
    with MessageStore.open(root, StoreConfig(**TINY)) as store:
        store.put(Message("TX", b"first")).raise_for_status()
        bad = store.put(Message("TX", b"to be damaged")).raise_for_status()
        half = store.put(Message("TX", b"half", sys_flag=4)).raise_for_status()  # PREPARED
        store.put(
            Message("TX", b"rolled back", sys_flag=12, prepared_transaction_offset=half.commit_log_offset)
        ).raise_for_status()
        assert store.wait_for_dispatch()
    _flip(root, bad.commit_log_offset + BODY_AT)  # a byte of its body: the body CRC fails
    (root / "abort").touch()
    before = tree_hashes(root)
    dry = run("recover", root, *TINY_SETS, "--dry-run", "--json")
    plan = json.loads(dry.stdout)["plan"]
    assert (plan["intactRecordsAfter"], plan["staleRecordsAfter"]) == (2, 0), plan
    assert dry.exit_code == 1 and json.loads(dry.stdout)["wouldRefuse"] is True
    result = run("recover", root, *TINY_SETS)
    assert result.exit_code == 1 and "nothing was changed" in result.stderr, result.output
    assert tree_hashes(root) == before


def test_a_commit_log_folder_missing_at_the_tail_is_refused_for_writing_not_cut(tmp_path: Path) -> None:
    """storePathCommitLog of three folders, the last segment's folder not mounted: the log looks
    shorter, and recovery would drop the units and index entries past it (recover said "0 records
    dropped", then cut; produce stored over the missing segment's offsets). Every writing command
    refuses, recover --dry-run says why, reads warn; with the folder back nothing was lost."""
    root = tmp_path / "s"
    folders = [root / name for name in ("a", "b", "c")]
    sets = [*TINY_SETS, "--set", f"storePathCommitLog={','.join(map(str, folders))}"]
    assert run("produce", root, *sets, "--topic", "T", "--body", "x" * 400, "--count", 18).exit_code == 0
    assert [len(list(folder.iterdir())) for folder in folders] == [1, 1, 1]  # a segment in each, c the last
    away = tmp_path / "away"
    folders[-1].rename(away)
    before = tree_hashes(root)
    dry = run("recover", root, *sets, "--dry-run")
    assert dry.exit_code == 1 and "past the end of the commit log's last segment" in dry.output, dry.output
    for command in (["recover"], ["produce", "--topic", "T", "--body", "y"]):
        result = run(*command[:1], root, *sets, *command[1:])
        assert result.exit_code == 2 and "a segment is missing" in result.stderr, (command, result.output)
    read = run("export", root, *sets)
    assert "the messages past its end are not read" in read.stderr and len(jsonl(read.stdout)) < 18
    assert tree_hashes(root) == before
    away.rename(folders[-1])
    assert len(jsonl(run("export", root, *sets).stdout)) == 18


def test_a_unit_pointing_far_past_a_commit_log_in_several_folders_is_damage_not_a_missing_folder(
    tmp_path: Path,
) -> None:
    """A consume-queue unit pointing further past the log than its folders could hold segments is
    damage, which recovery drops as RocketMQ's does: no command is refused for a missing folder."""
    root = tmp_path / "s"
    folders = [root / name for name in ("a", "b", "c")]
    sets = [*TINY_SETS, "--set", f"storePathCommitLog={','.join(map(str, folders))}"]
    assert run("produce", root, *sets, "--topic", "T", "--body", "x" * 400, "--count", 18).exit_code == 0
    queue_file = sorted((root / "consumequeue" / "T" / "0").iterdir())[-1]
    data = queue_file.read_bytes()
    last = len(data.rstrip(b"\0")) + 19 - (len(data.rstrip(b"\0")) + 19) % 20  # just past the last unit
    with open(queue_file, "r+b") as f:
        f.seek(last)
        f.write(struct.pack(">qiq", 10**12, 300, 0))
    result = run("produce", root, *sets, "--topic", "T", "--body", "y")
    assert result.exit_code == 0 and "a segment is missing" not in result.output, result.output


def test_a_missing_folder_is_found_when_the_segments_did_not_go_round_the_folders(tmp_path: Path) -> None:
    """Segments go round the writable folders only: with one made read-only for a while, several
    segments in a row land in the other. That one missing is still refused (a bound of one segment
    a folder past the end let a produce cut 30 messages' units in silence)."""
    root = tmp_path / "s"
    a, b = root / "a", root / "b"
    sets = [*TINY_SETS, "--set", f"storePathCommitLog={a},{b}"]
    assert run("produce", root, *sets, "--topic", "T", "--body", "x" * 400, "--count", 10).exit_code == 0
    more = [*sets, "--set", f"readOnlyCommitLogStorePaths={b}"]
    assert run("produce", root, *more, "--topic", "T", "--body", "x" * 400, "--count", 30).exit_code == 0
    assert len(list(a.iterdir())) >= 4 and len(list(b.iterdir())) == 1
    a.rename(tmp_path / "away")
    result = run("produce", root, *sets, "--topic", "T", "--body", "y")
    assert result.exit_code == 2 and f"{a} holds no segment" in result.stderr, result.output
