"""``rocketstore import`` of delayed messages: the import delivers none, and a schedule unit whose
delivered copy the input holds too is not delivered again by the next writer of the store."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli.main import cli
from rocketstore.codec.topic import SCHEDULE_TOPIC
from rocketstore.export import copy_key, export_jsonl, import_jsonl, skip_delivered
from rocketstore.meta.fastjson import loads as fastjson_loads
from test_cli import TINY, TINY_SETS, VECTOR_SETS, VECTORS, jsonl, needs_vectors, run


class _Stdin(io.RawIOBase):
    """Lines to read, calling ``at_line(n)`` before line ``n`` is handed out (a peek into the import
    while it runs)."""

    def __init__(self, lines: list[bytes], at_line: Callable[[int], None]) -> None:
        super().__init__()
        self._lines = lines
        self._next = 0
        self._at_line = at_line
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if not self._pending and self._next < len(self._lines):
            self._at_line(self._next + 1)
            self._pending = self._lines[self._next]
            self._next += 1
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def readline(self, size: int | None = -1) -> bytes:
        if self._next >= len(self._lines):
            return b""
        self._at_line(self._next + 1)
        line = self._lines[self._next]
        self._next += 1
        return line


def _schedule_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rocketstore-schedule"]


def test_import_runs_no_delayed_delivery_while_it_runs(tmp_path: Path) -> None:
    src = tmp_path / "src"
    with MessageStore.open(src, StoreConfig(**TINY)) as store:
        for i in range(3):
            store.put(Message("T", f"later {i}", properties={"DELAY": "1"})).raise_for_status()
            store.put(Message("T", f"now {i}")).raise_for_status()
    lines = [line.encode() + b"\n" for line in run("export", src, *TINY_SETS).stdout.splitlines()]
    assert sum(json.loads(line)["topic"] == SCHEDULE_TOPIC for line in lines) == 3
    before = set(_schedule_threads())
    seen: list[list[threading.Thread]] = []

    def peek(number: int) -> None:  # the store is open by then (the input is read after the open)
        seen.append([t for t in _schedule_threads() if t not in before and t.is_alive()])

    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        runner = CliRunner()
    result = runner.invoke(
        cli,
        ["import", str(tmp_path / "dst"), *TINY_SETS, "-i", "-"],
        input=io.BufferedReader(_Stdin(lines, peek)),
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    assert len(seen) == len(lines)
    assert seen == [[]] * len(lines), "a schedule service ran during the import"


def _delivered_all(store: MessageStore) -> int:
    """Every delayed message delivered now, as the next long-running writer would (its thread
    stopped, a clock far ahead): how many were delivered."""
    service = store.services.schedule
    assert service is not None
    service.stop()
    store.wait_for_dispatch()
    count = service.run_once(now=2**62)
    store.wait_for_dispatch()
    return count


@needs_vectors
def test_import_of_an_export_does_not_deliver_the_delivered_again(tmp_path: Path) -> None:
    exported = run("export", VECTORS / "sample-clean" / "store", *VECTOR_SETS).stdout
    rows = jsonl(exported)
    path = tmp_path / "clean.jsonl"
    path.write_text(exported, encoding="utf-8")
    result = run("import", tmp_path / "dst", *VECTOR_SETS, "-i", path)
    assert result.exit_code == 0, result.stderr
    offsets = fastjson_loads((tmp_path / "dst" / "config" / "delayOffset.json").read_text())
    assert offsets["offsetTable"] == {1: 23, 2: 32}  # as the source store's
    imported = run("export", tmp_path / "dst", *VECTOR_SETS).stdout
    assert len(jsonl(imported)) == len(rows) == 1555

    config = StoreConfig(mappedFileSizeCommitLog=65536, mappedFileSizeConsumeQueue=2000, maxHashSlotNum=1000)
    config.set("maxIndexNum", 3000)
    with MessageStore.open(tmp_path / "dst", config) as store:
        delivered = _delivered_all(store)
    after = jsonl(run("export", tmp_path / "dst", *VECTOR_SETS).stdout)
    assert len(after) == 1555 + delivered
    place = {(r["topic"], r["queueId"], r["queueOffset"]) for r in jsonl(imported)}
    new = [r for r in after if (r["topic"], r["queueId"], r["queueOffset"]) not in place]
    assert len(new) == delivered
    had = {_identity(r) for r in rows if r["topic"] != SCHEDULE_TOPIC}
    assert [r for r in new if _identity(r) in had] == [], "a delivered message was delivered again"
    pending = [r for r in rows if r["topic"] == SCHEDULE_TOPIC and r["queueId"] not in (0, 1)]
    assert delivered == len(pending) == 34  # levels 4, 6 and 18 were waiting in the source: they are delivered


def _identity(row: dict) -> tuple:
    """What a delivered copy keeps of its schedule record: UNIQ_KEY, else born time and body."""
    uniq = row["properties"].get("UNIQ_KEY")
    return (row["topic"], uniq) if uniq is not None else (row["topic"], row["bornTimestamp"], row["bodyCRC"])


def _units(store: MessageStore, level: int) -> int:
    return store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)


@pytest.mark.parametrize(("copies_first", "index"), [(False, True), (True, True), (False, False)])
def test_import_skips_the_delivered_prefix_of_each_level(
    tmp_path: Path, make_store: Callable[..., MessageStore], copies_first: bool, index: bool
) -> None:
    src = make_store("src")
    src.services.schedule.stop()
    for i in range(5):
        src.put(Message("Real", f"m{i}", properties={"DELAY": "2"}), 1).raise_for_status()
    src.put(Message("Other", "o", properties={"DELAY": "3"})).raise_for_status()
    src.wait_for_dispatch()
    rows = [json.loads(line) for line in run_export(src)]
    schedule = [r for r in rows if r["topic"] == SCHEDULE_TOPIC and r["queueId"] == 1]
    assert len(schedule) == 5
    # the input: every unit, and the delivered copies of the 1st, 2nd and 4th (not the 3rd: a gap)
    copies = []
    for r in (schedule[0], schedule[1], schedule[3]):
        copy = {**r, "topic": "Real", "queueId": 1}
        copies.append(json.dumps(copy))
    lines = [json.dumps(r) for r in rows]
    lines = copies + lines if copies_first else lines + copies
    src.shutdown()
    with MessageStore.open(tmp_path / "dst", StoreConfig(**TINY)) as dst:
        dst.services.schedule.stop()
        assert import_jsonl(dst, lines) == 9
        assert dst.delay_offsets.offset_table == {2: 2}  # past the delivered prefix only; level 3 untouched
        assert _units(dst, 2) == 5
    assert fastjson_loads((tmp_path / "dst" / "config" / "delayOffset.json").read_text())["offsetTable"] == {2: 2}
    # a second import (a resumed one) that brings the 3rd copy moves it on past the 4th, whose copy
    # the first one stored (found by its UNIQ_KEY in the index, or without one among the topic's
    # messages), and stops at the 5th, never delivered
    third = json.dumps({**schedule[2], "topic": "Real", "queueId": 1})
    with MessageStore.open(tmp_path / "dst", StoreConfig(**TINY, messageIndexEnable=index)) as dst:
        dst.services.schedule.stop()
        assert import_jsonl(dst, [third]) == 1
        assert dst.delay_offsets.offset_table == {2: 4}


def run_export(store: MessageStore) -> list[str]:
    out = io.StringIO()
    export_jsonl(store, out)
    return out.getvalue().splitlines()


def test_an_import_does_not_take_a_later_retry_for_delivered(make_store: Callable[..., MessageStore]) -> None:
    """A retry keeps the message's UNIQ_KEY; only reconsumeTimes grows, and a delivered copy keeps
    it. Retry 1's copy in %RETRY%G does not make retry 2, still waiting, count as delivered (an
    import of one unrelated line moved level 2's offset past it: it was never delivered)."""
    store = make_store()
    service = store.services.schedule
    service.stop()
    put = store.put(Message("T", b"body"))
    assert store.send_back("G", put.commit_log_offset, delay_level=1).ok
    store.wait_for_dispatch()
    assert service.run_once(now=2**62) == 1  # retry 1 delivered to %RETRY%G
    store.wait_for_dispatch()
    (copy,) = store.get_message("G", "%RETRY%G", 0, 0).messages
    assert store.send_back("G", copy, delay_level=2).ok  # retry 2 waits at level 2
    store.wait_for_dispatch()
    assert import_jsonl(store, ['{"topic": "Other", "body": "aGk="}']) == 1
    assert store.delay_offsets.get(2) == 0


def _twin_retries_export(tmp_path: Path) -> list[str]:
    """An export whose level 3 holds two retries of one message, one key (a consumer failed it, got
    it again and failed it again): the first delivered to %RETRY%G before the export, the second
    waiting."""
    with MessageStore.open(tmp_path / "src", StoreConfig(**TINY)) as src:
        src.services.schedule.stop()
        put = src.put(Message("Orders", b"pay"))
        assert src.send_back("G", put.commit_log_offset).ok
        assert _delivered_all(src) == 1
        assert src.send_back("G", put.commit_log_offset).ok
        src.wait_for_dispatch()
        return run_export(src)


@pytest.mark.parametrize("index", [True, False])
@pytest.mark.parametrize("in_parts", [False, True])
def test_an_import_keeps_a_waiting_retry_whose_twin_was_delivered(tmp_path: Path, in_parts: bool, index: bool) -> None:
    """One delivered copy accounts for one unit: the twin still waiting stays at level 3's offset,
    also when a later part of the import finds the first one's copy already in the store."""
    lines = _twin_retries_export(tmp_path)
    units = [i for i, line in enumerate(lines) if json.loads(line)["topic"] == SCHEDULE_TOPIC]
    assert len(units) == 2 and units[-1] == len(lines) - 1
    parts = [lines[:-1], [lines[-1], '{"topic": "Other", "body": "aGk="}']] if in_parts else [lines]
    config = StoreConfig(**TINY, messageIndexEnable=index)
    for part in parts:
        with MessageStore.open(tmp_path / "dst", config) as dst:
            dst.services.schedule.stop()
            import_jsonl(dst, part)
            assert dst.delay_offsets.offset_table == {3: 1}
    with MessageStore.open(tmp_path / "dst", config) as dst:
        assert _delivered_all(dst) == 1  # as the source store (and RocketMQ) would deliver it
        assert dst.get_max_offset_in_queue("%RETRY%G", 0) == 2


def test_an_import_moves_past_a_unit_the_schedule_service_would_skip(
    make_store: Callable[..., MessageStore], caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """A schedule unit whose REAL_QID Java cannot parse is never delivered (the schedule service
    skips it, and says so): it does not stop the walk past the delivered units, as a unit that
    waits would, and the import logs nothing about it. The writer refuses such a unit: this one is
    another writer's (a stored unit patched; properties are outside the body CRC)."""
    store = make_store()
    store.services.schedule.stop()
    for qid in ("100", "4"):
        props = {"DELAY": "1", "REAL_TOPIC": "Orders", "REAL_QID": qid, "UNIQ_KEY": f"U{qid}"}
        assert store.put_as_is(Message(SCHEDULE_TOPIC, b"q", properties=props), 0).ok
    store.shutdown()
    segment = tmp_path / "store" / "commitlog" / f"{0:020d}"
    segment.write_bytes(segment.read_bytes().replace(b"REAL_QID\x01100", b"REAL_QID\x011_0"))
    store = make_store()
    store.services.schedule.stop()
    copy = Message("Orders", b"q", properties={"REAL_TOPIC": "Orders", "REAL_QID": "4", "UNIQ_KEY": "U4"})
    assert store.put_as_is(copy, 4).ok  # the second unit's delivered copy
    with caplog.at_level("ERROR"):
        assert skip_delivered(store, {copy_key("Orders", "U4", copy)}) == {1: (0, 2)}
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_an_import_refuses_a_schedule_line_of_a_level_the_target_does_not_have(tmp_path: Path) -> None:
    """A SCHEDULE_TOPIC_XXXX line waits in queue level - 1: of a level past the target's
    messageDelayLevel, no level would ever read it. The import stops at it as at any bad line,
    naming the level, the target's levels and the setting that gives it more."""
    levels = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h 3s 4s"  # 20 levels
    src = tmp_path / "src"
    with MessageStore.open(src, StoreConfig(**TINY, messageDelayLevel=levels)) as store:
        store.put(Message("D", b"level 18", properties={"DELAY": "18"})).raise_for_status()
        store.put(Message("D", b"level 20", properties={"DELAY": "20"})).raise_for_status()
    exported = tmp_path / "e.jsonl"
    assert run("export", src, *TINY_SETS, "-o", exported).exit_code == 0  # queue 17, then queue 19
    result = run("import", tmp_path / "dst", *TINY_SETS, "-i", exported)  # 18 levels, RocketMQ's
    assert result.exit_code == 2
    assert result.stderr.startswith("error: line 2: MESSAGE_ILLEGAL: ")
    assert "delay level 20" in result.stderr and "messageDelayLevel has 18 levels" in result.stderr
    assert "--set messageDelayLevel=" in result.stderr and "1 message(s) before it stored" in result.stderr
    with MessageStore.open(tmp_path / "dst", StoreConfig(**TINY), read_only=True) as store:
        assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 17) == 1
        assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 19) == 0
    given = run("import", tmp_path / "dst2", *TINY_SETS, "--set", f"messageDelayLevel={levels}", "-i", exported)
    assert given.exit_code == 0, given.stderr  # a target with the levels takes both


def _delayed_export(make_store: Callable[..., MessageStore], uniq_keys: list[str]) -> tuple[list[str], list[str]]:
    """(schedule lines, delivered-copy lines) of an export of one delayed message (level 2, queue
    1 of Real) for each of ``uniq_keys``; a key given twice is a message a producer sent twice."""
    src = make_store("src")
    src.services.schedule.stop()
    for key in uniq_keys:
        src.put(Message("Real", b"m", properties={"DELAY": "2", "UNIQ_KEY": key}), 1).raise_for_status()
    src.wait_for_dispatch()
    units = run_export(src)
    assert {json.loads(line)["topic"] for line in units} == {SCHEDULE_TOPIC}
    return units, [json.dumps({**json.loads(line), "topic": "Real", "queueId": 1}) for line in units]


def test_an_import_of_the_units_alone_finds_the_copies_an_earlier_part_stored(
    tmp_path: Path, make_store: Callable[..., MessageStore]
) -> None:
    """An import given in parts, the messages first and the schedule units second: the second
    part brings no copies, and the units whose copies the first part stored are still skipped."""
    units, copies = _delayed_export(make_store, [f"K{i}" for i in range(5)])
    for part, offsets in ((copies[:3], {}), (units, {2: 3})):
        with MessageStore.open(tmp_path / "dst", StoreConfig(**TINY)) as dst:
            dst.services.schedule.stop()
            assert import_jsonl(dst, part) == len(part)
            assert dst.delay_offsets.offset_table == offsets


@pytest.mark.parametrize("batch", [64, 16])
def test_an_import_counts_every_stored_copy_of_a_key(
    tmp_path: Path, make_store: Callable[..., MessageStore], batch: int
) -> None:
    """40 sends of one message (one UNIQ_KEY), all delivered: the 40 copies an earlier part stored
    account for the 40 units, beyond a query's default 32 and beyond maxMsgsNumBatch."""
    units, copies = _delayed_export(make_store, ["K"] * 40)
    config = StoreConfig(**TINY, maxMsgsNumBatch=batch)
    for part in (copies, units):
        with MessageStore.open(tmp_path / "dst", config) as dst:
            dst.services.schedule.stop()
            assert import_jsonl(dst, part) == 40
    with MessageStore.open(tmp_path / "dst", config) as dst:
        assert dst.delay_offsets.offset_table == {2: 40}


@pytest.mark.parametrize("index", [True, False])
@pytest.mark.parametrize("in_parts", [False, True])
def test_a_transaction_half_or_rollback_is_no_delivered_copy(
    tmp_path: Path, make_store: Callable[..., MessageStore], index: bool, in_parts: bool
) -> None:
    """A delivered copy is queued, as the schedule unit it came from was: a PREPARED or ROLLBACK
    record of the real topic with the unit's UNIQ_KEY (a half message, a rolled-back one) is no
    copy, in the lines imported or in the store, with or without the index; a COMMIT one is."""
    units, copies = _delayed_export(make_store, ["C", "P", "R"])
    copies = [json.dumps({**json.loads(line), "sysFlag": flag}) for line, flag in zip(copies, (8, 4, 12), strict=True)]
    config = StoreConfig(**TINY, messageIndexEnable=index)
    for part in (copies, units) if in_parts else (units + copies,):
        with MessageStore.open(tmp_path / "dst", config) as dst:
            dst.services.schedule.stop()
            assert import_jsonl(dst, part) == len(part)
    with MessageStore.open(tmp_path / "dst", config) as dst:
        assert dst.delay_offsets.offset_table == {2: 1}  # past C's unit only: P's and R's wait for delivery
