"""The command line when things go wrong: unreadable records, Ctrl-C, closed pipes and streams,
errors in --json mode, and a store folder that holds other files."""

from __future__ import annotations

import json
from pathlib import Path

from rocketstore import Message, MessageStore, StoreConfig
from test_cli import TINY, TINY_SETS, jsonl, run

GOOD = 150  # messages after the broken ones: 5 segments, so that recovery (which checks the last 3) keeps them


def _store_with_bad_records(root: Path, bad: int) -> list[tuple[int, int]]:
    """A store of ``bad`` messages in U/1 whose records' magic codes are broken, then GOOD readable
    ones in T/0; the (queue offset, commit-log offset) of each broken one."""
    broken = []
    with MessageStore.open(root, StoreConfig(**TINY)) as store:
        for i in range(bad):
            result = store.put(Message("U", f"bad {i}"), 1).raise_for_status()
            broken.append((result.queue_offset, result.commit_log_offset))
        for i in range(GOOD):
            store.put(Message("T", f"good {i}")).raise_for_status()
        assert store.wait_for_dispatch()
    size = TINY["mappedFileSizeCommitLog"]
    for _queue_offset, phy in broken:
        segment = root / "commitlog" / f"{phy - phy % size:020d}"
        with open(segment, "r+b") as f:
            f.seek(phy % size + 4)
            f.write(b"\xde\xad\xbe\xef")
    return broken


# -- 2: export says what it could not read ----------------------------------------------------------
def test_export_warns_about_each_unreadable_message_and_exits_1(tmp_path: Path) -> None:
    root = tmp_path / "s"
    broken = _store_with_bad_records(root, bad=2)
    for extra in ([], ["--json"]):
        result = run("export", root, *TINY_SETS, *extra)
        assert result.exit_code == 1, result.stderr
        rows = jsonl(result.stdout)
        assert [r["topic"] for r in rows] == ["T"] * GOOD  # the rest is exported
        for queue_offset, phy in broken:
            assert f"WARNING: U/1 queue offset {queue_offset} (commit-log offset {phy}" in result.stderr
        assert "error: 2 message(s) could not be read and are not in the export" in result.stderr
    out = tmp_path / "out.jsonl"
    result = run("export", root, *TINY_SETS, "-o", out)
    assert result.exit_code == 1 and len(jsonl(out.read_text())) == GOOD
    assert f"exported {GOOD} messages" in result.stderr and "2 message(s) could not be read" in result.stderr


def test_export_caps_the_warnings_and_counts_them_all(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store_with_bad_records(root, bad=25)
    result = run("export", root, *TINY_SETS)
    assert result.exit_code == 1
    assert result.stderr.count("WARNING: U/1 queue offset") == 20
    assert "... and 5 more unreadable message(s)" in result.stderr
    assert "error: 25 message(s) could not be read" in result.stderr
    assert len(jsonl(result.stdout)) == GOOD


def test_export_of_a_sound_store_exits_0_without_warnings(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store_with_bad_records(root, bad=0)
    result = run("export", root, *TINY_SETS)
    assert result.exit_code == 0 and result.stderr == ""
    assert json.loads(result.stdout.splitlines()[0])["topic"] == "T"
