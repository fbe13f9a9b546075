"""Index checks: headers, slot table and chains, every entry against its record, and a hash query
for every key of every record."""

from __future__ import annotations

import numpy as np

from rocketstore.codec.ids import index_key_hash
from rocketstore.codec.properties import split_keys
from rocketstore.queues.index_file import HASH_SLOT_SIZE, HEADER, INDEX_HEADER_SIZE, INT_MAX, IndexFile
from rocketstore.store import MessageStore
from rocketstore.verify.log_columns import LogColumns, member
from rocketstore.verify.report import VerifyReport, past_log_end, problems_at


def check_index(store: MessageStore, log: LogColumns, report: VerifyReport) -> None:
    index = store.index
    enabled = store.config.message_index_enable
    if not enabled:  # the files there are still queried: checked, but new records are not indexed
        report.note("messageIndexEnable is false: the index files are checked, not whether every key is in them")
    kept = []
    for f in index.files:
        if report.abort_file and f.end_timestamp > store.checkpoint.index_msg_timestamp:
            report.note(f"index/{f.file_name}: newer than the checkpoint; abnormal recovery rebuilds it")
        else:
            kept.append(f)
    report.index_files = len(index.files)
    key_of_record = log.key_records.astype(np.int64) << 32 | log.key_hashes
    found: list[np.ndarray] = []
    below = 0
    for f in kept:
        got, under = _check_index_file(f, log, key_of_record, report, _first_begin(index.files, f, log))
        found.append(got)
        below += under
    if below:
        report.note(f"{below} index entries point below the log's first offset (cleaned-up data)")
    found_keys = np.concatenate(found) if found else np.zeros(0, np.int64)
    if enabled:
        _check_keys_found(store, log, kept, found_keys, report, no_files=not index.files)


def _first_begin(files: list[IndexFile], f: IndexFile, log: LogColumns) -> int | None:
    """The begin time ``f``'s first entry had its time diff taken against (IndexFile's constructor
    starts a new header at the previous file's endTimestamp when that is > 0, else at 0, and
    putKey sets it to the first entry's time only after): the previous file's end time, or 0 for
    the first file of a log never cleaned. None when unknown (the previous file deleted with the
    head of the log)."""
    at = next(i for i, g in enumerate(files) if g is f)
    if at:
        return files[at - 1].end_timestamp
    return 0 if log.min_offset == 0 else None


def _check_index_file(
    f: IndexFile, log: LogColumns, expected_keys: np.ndarray, report: VerifyReport, first_begin: int | None
) -> tuple[np.ndarray, int]:
    """One index file as written; returns the record keys a query finds in it, and how many entries
    point below the log. ``first_begin``: the begin time its first entry's time diff was taken
    against (None: unknown)."""
    where = f"index/{f.file_name}"
    begin_ts, end_ts, begin_phy, end_phy, slot_count, raw_count = HEADER.unpack(f.mapped.read(0, INDEX_HEADER_SIZE))
    entries = f.entries()  # as the store reads them (an indexCount over the file's room: full)
    if not 0 <= raw_count <= f.index_num:
        read_as = "no entries" if raw_count < 0 else "full"
        report.problem(
            f"{where}: indexCount {raw_count} is out of range (at most {f.index_num}); "
            f"read as {read_as}, as RocketMQ reads it"
        )
    if raw_count > f.index_num:  # the real count is lost: the entries never written (zeros) are not entries
        set_fields = [entries[name] != 0 for name in ("hash", "phy", "diff", "prev")]
        written = np.flatnonzero(np.logical_or.reduce(set_fields))
        entries = entries[: int(written[-1]) + 1 if len(written) else 0]
    k = len(entries)
    count = k + 1
    report.index_entries += k
    slots_n = f.slot_num
    slot_table = np.frombuffer(f.mapped.read(INDEX_HEADER_SIZE, slots_n * HASH_SLOT_SIZE), dtype=">i4").astype(np.int64)
    hashes = entries["hash"].astype(np.int64)
    phy = entries["phy"].astype(np.int64)
    diffs = entries["diff"].astype(np.int64)
    prevs = entries["prev"].astype(np.int64)
    numbers = np.arange(1, k + 1, dtype=np.int64)

    _check_chains(where, hashes, prevs, slot_table, slot_count, report)

    # entries against their records
    under = phy < log.min_offset
    past = ~under & (phy >= log.end)
    past_log_end(report, where, "entry", past, numbers, phy, log.end)
    report.entries_past_cut += int((~under & ~past & (phy >= log.recovery_end)).sum())
    rows, hit = log.find(phy)
    lost = ~hit & log.in_skipped(phy)  # an entry of a record lost in damage the log scan skipped
    problems_at(
        report,
        ~under & ~past & ~hit & ~lost,
        lambda i: f"{where} entry {numbers[i]} -> {phy[i]}: no record starts there",
    )
    at_record = ~under & ~past & hit
    keys = rows.astype(np.int64) << 32 | hashes
    matched = at_record & member(keys, expected_keys)
    problems_at(
        report,
        at_record & ~matched,
        lambda i: f"{where} entry {numbers[i]} -> {phy[i]}: key hash {hashes[i]} matches no key of the record",
    )
    if k and at_record.any():
        checked = at_record.copy()
        want_diff = _time_diffs(log.store_ts[rows], begin_ts)
        checked[1:] &= begin_ts > 0
        # the first entry's time is taken against the begin time before it was set
        checked[0] &= first_begin is not None
        want_diff[0] = _time_diffs(log.store_ts[rows[:1]], first_begin or 0)[0]
        problems_at(
            report,
            checked & (diffs != want_diff),
            lambda i: f"{where} entry {numbers[i]}: time diff {diffs[i]}, expected {want_diff[i]}",
        )
    if k:
        if (begin_phy, end_phy) != (int(phy[0]), int(phy[-1])):
            report.problem(f"{where}: header offsets {begin_phy}..{end_phy}, entries {int(phy[0])}..{int(phy[-1])}")
        if at_record[0] and at_record[-1]:
            first_ts, last_ts = int(log.store_ts[rows[0]]), int(log.store_ts[rows[-1]])
            if (begin_ts, end_ts) != (first_ts, last_ts):
                report.problem(f"{where}: header times {begin_ts}..{end_ts}, records {first_ts}..{last_ts}")
    reachable = _found_by_query(slot_table, hashes, diffs, prevs, count, slots_n)
    return keys[matched & reachable], int(under.sum())


def _time_diffs(store_ts: np.ndarray, begin: int) -> np.ndarray:
    """IndexFile.putKey's timeDiff: whole seconds after ``begin`` (Java's truncating division),
    0 when ``begin`` <= 0, clamped to [0, Integer.MAX_VALUE]."""
    if begin <= 0:
        return np.zeros(len(store_ts), dtype=np.int64)
    delta = store_ts.astype(np.int64) - begin
    return np.clip(np.sign(delta) * (np.abs(delta) // 1000), 0, INT_MAX)


def _check_chains(
    where: str, hashes: np.ndarray, prevs: np.ndarray, slot_table: np.ndarray, slot_count: int, report: VerifyReport
) -> None:
    """Each entry links to the previous entry of its slot, each slot holds its newest entry, and
    hashSlotCount counts the slots used (spec 8.3)."""
    k = len(hashes)
    numbers = np.arange(1, k + 1, dtype=np.int64)
    problems_at(report, hashes < 0, lambda i: f"{where} entry {numbers[i]}: negative key hash {hashes[i]}")
    slots = hashes % len(slot_table)
    order = np.argsort(slots, kind="stable")
    sorted_slots = slots[order]
    same = np.zeros(k, dtype=bool)
    same[1:] = sorted_slots[1:] == sorted_slots[:-1]
    want_prev = np.zeros(k, dtype=np.int64)
    want_sorted = np.zeros(k, dtype=np.int64)
    want_sorted[1:][same[1:]] = numbers[order][:-1][same[1:]]
    want_prev[order] = want_sorted
    problems_at(
        report,
        prevs != want_prev,
        lambda i: f"{where} entry {numbers[i]}: previous entry {prevs[i]}, expected {want_prev[i]}",
    )
    want_table = np.zeros(len(slot_table), dtype=np.int64)
    last_of_slot = np.ones(k, dtype=bool)
    last_of_slot[:-1] = ~same[1:]
    want_table[sorted_slots[last_of_slot]] = numbers[order][last_of_slot]
    problems_at(
        report,
        slot_table != want_table,
        lambda s: f"{where} hash slot {s}: holds entry {slot_table[s]}, expected {want_table[s]}",
    )
    used = int(np.count_nonzero(last_of_slot))
    if slot_count != used:
        report.problem(f"{where}: hashSlotCount {slot_count}, the entries use {used} slots")


def _found_by_query(
    slot_table: np.ndarray, hashes: np.ndarray, diffs: np.ndarray, prevs: np.ndarray, count: int, slots_n: int
) -> np.ndarray:
    """Which entries a query for their own hash reaches: walking every slot's chain from the slot
    table through the prev links, as ``selectPhyOffset`` does (stopping at a negative time diff,
    a link out of range or to itself)."""
    k = len(hashes)
    found = np.zeros(k + 1, dtype=bool)
    visited = np.zeros(k + 1, dtype=bool)
    chain = np.flatnonzero((slot_table > 0) & (slot_table < count))
    cur = slot_table[chain]
    while len(cur):
        fresh = ~visited[cur]
        cur, chain = cur[fresh], chain[fresh]
        visited[cur] = True
        alive = diffs[cur - 1] >= 0
        cur, chain = cur[alive], chain[alive]
        found[cur] |= hashes[cur - 1] % slots_n == chain
        nxt = prevs[cur - 1]
        go = (nxt > 0) & (nxt < count) & (nxt != cur)
        cur, chain = nxt[go], chain[go]
    return found[1:]


def _check_keys_found(
    store: MessageStore,
    log: LogColumns,
    kept: list[IndexFile],
    found: np.ndarray,
    report: VerifyReport,
    *,
    no_files: bool,
) -> None:
    """Every key of every record must be found by a query, unless the record is newer than the
    index (``no_files``: there is no index file at all)."""
    rows = log.key_records
    report.keys = len(rows)
    if not len(rows):
        return
    keys = rows << 32 | log.key_hashes
    hit = member(keys, found)
    index_end = -1
    if kept and (kept[-1].index_count > 1 or kept[-1].end_phy_offset > 0):
        index_end = kept[-1].end_phy_offset  # a file made after a full one starts with its end values
    # RocketMQ (re)indexes every record at or after the newest file's endPhyOffset (spec 8.5): the
    # last record's keys may have gone partly into a newer file that a crash dropped
    newer = log.offsets[rows] >= index_end
    # a deleted topic's records (config/deletedTopics.json) are indexed as every record is, but an
    # older rocketstore left them out when it indexed the log again (recovery, rebuilds): a store
    # it wrote is noted, not reported
    gone = log.deleted(store.deleted_topics.table)[rows] & ~hit & ~newer
    if gone.any():
        report.note(
            f"index: {int(gone.sum())} keys of {len(np.unique(rows[gone]))} records of deleted topics are not "
            "indexed (left out by an older rocketstore's recovery or rebuild; a rebuild of the index adds them)"
        )
        hit = hit | gone
    problems_at(report, ~hit & ~newer, lambda i: _key_problem(store, log, int(rows[i]), int(log.key_hashes[i])))
    late = np.flatnonzero(~hit & newer)
    if len(late) and no_files:
        records = len(np.unique(rows[late]))
        report.damage(
            f"index: no index files, so {len(late)} keys of {records} records are not indexed: was the store "
            "written with messageIndexEnable=false? then give --set messageIndexEnable=false"
            + ("; else abnormal recovery indexes them" if report.abort_file else "")
        )
    elif len(late) and index_end < 0:
        records = len(np.unique(rows[late]))
        why = "the index files hold no entries" if kept else "every index file is newer than the checkpoint"
        report.damage(
            f"index: {len(late)} keys of {records} records are not indexed: {why}"
            + ("; abnormal recovery indexes them" if report.abort_file else "")
        )
    elif len(late):
        records = len(np.unique(rows[late]))
        report.damage(
            f"index: {len(late)} keys of {records} records at or after the index's last entry (offset {index_end}) "
            "are not indexed" + ("; abnormal recovery indexes them" if report.abort_file else "")
        )


def _key_problem(store: MessageStore, log: LogColumns, row: int, key_hash: int) -> str:
    offset = int(log.offsets[row])
    msg = store.look_message_by_offset(offset)
    name = f"(hash {key_hash})"
    if msg is not None:
        candidates = ([msg.uniq_key] if msg.uniq_key else []) + split_keys(msg.keys)
        for key in candidates:
            if index_key_hash(f"{msg.topic}#{key}") == key_hash:
                name = repr(f"{msg.topic}#{key}")
                break
    return f"index: key {name} of the record at {offset} ({log.describe(row)}) is not found by a query"
