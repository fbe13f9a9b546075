"""The command line and what stops it from outside: a pipe closed early under a command that
stores, and a Ctrl-C the shell told it to ignore; and where ``consume`` starts when the offset it
is given is outside the queue."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
from pathlib import Path

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli.stops import (
    DeferInterrupts,
)
from rocketstore.files.disk import used_ratio
from rocketstore.results import PutMessageStatus
from rocketstore.running_flags import DISK_FULL
from test_clean import age, ballast, clean_config, fill, segment_files
from test_cli import TINY, TINY_SETS, cli_process, jsonl, run
from test_cli_robustness import _stored, _wait_until

BIG = ["--set", "mappedFileSizeCommitLog=16777216", "--set", "brokerIP1=127.0.0.1"]
_STORED = re.compile(r"(\d+) message\(s\) stored in T/0 before this stopped \(up to queue offset (\d+)\)")


def _messages(root: Path, *sets: str) -> int:
    result = run("inspect", root, *sets, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)["messages"]


# -- a closed pipe under a command that stores ---------------------------------------------------
def test_produce_json_into_a_pipe_closed_early_says_what_it_stored_and_exits_141(tmp_path: Path) -> None:
    root = tmp_path / "s"
    count = 20_000  # ~250 bytes a line: far more than a pipe holds, so it is still storing when the pipe goes
    proc = cli_process("produce", root, *BIG, "--topic", "T", "--body", "x", "--count", count, "--json")
    assert proc.stdout is not None and proc.stderr is not None
    assert json.loads(proc.stdout.readline())["queueOffset"] == 0
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err  # 128 + SIGPIPE, as 130 is 128 + SIGINT
    assert err.rstrip().endswith("interrupted: stdout was closed (broken pipe)"), err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    match = _STORED.search(err)
    assert match is not None, err
    stored, last = int(match[1]), int(match[2])
    assert 1 <= stored < count and last == stored - 1
    assert _messages(root, *BIG) == stored  # what stderr says is what the store holds


def test_a_stdout_closed_once_everything_is_stored_ends_quietly(tmp_path: Path) -> None:
    """produce (its table) and import (its count) into a stdout closed before they write anything
    at the end: every message is stored and the store shut down, so that is no interruption: exit
    0 (a script retrying on 141 would store them twice); import says its count on stderr. Commands
    that only read end quietly with 0 too."""
    root = tmp_path / "s"
    proc = cli_process("produce", root, *TINY_SETS, "--topic", "T", "--body", "x", "--count", 5)
    assert proc.stdout is not None
    proc.stdout.close()  # as `| true` does: before the command writes its table
    _out, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (0, b""), err
    assert _messages(root, *TINY_SETS) == 5
    exported = tmp_path / "e.jsonl"
    assert run("export", root, *TINY_SETS, "-o", exported).exit_code == 0
    for extra in ([], ["--json"]):
        target = tmp_path / f"i{len(extra)}"
        proc = cli_process("import", target, *TINY_SETS, "-i", exported, *extra)
        assert proc.stdout is not None
        proc.stdout.close()
        _out, err = proc.communicate(timeout=120)
        assert (proc.returncode, err) == (0, f"imported 5 messages into {target}\n".encode()), extra
        assert _messages(target, *TINY_SETS) == 5
    for command in (["export"], ["consume", "--topic", "T", "--group", "G"], ["query", "--offset", "0", "--json"]):
        proc = cli_process(command[0], root, *TINY_SETS, *command[1:])
        assert proc.stdout is not None
        proc.stdout.close()
        _out, err = proc.communicate(timeout=120)
        assert (proc.returncode, err) == (0, b""), command  # what only reads ends quietly
    assert len(jsonl(run("export", root, *TINY_SETS).stdout)) == 5


# -- consume: an offset outside the queue is moved, and said to be ---------------------------------------
def _committed(root: Path, group: str) -> int:
    with MessageStore.open(root, StoreConfig(**TINY), read_only=True) as store:
        return store.query_offset(group, "T", 0)


def test_consume_from_an_offset_past_the_queue_says_where_it_read_from(tmp_path: Path) -> None:
    root = tmp_path / "s"
    assert run("produce", root, *TINY_SETS, "--topic", "T", "--body", "x", "--count", 5).exit_code == 0
    args = ("consume", root, *TINY_SETS, "--topic", "T", "--group", "G", "--queue", 0, "--from-offset", 999)
    result = run(*args, "--commit", "--json")
    assert result.exit_code == 0, result.stderr
    assert "WARNING: T/0: offset 999 is past the queue's max offset 5; read from 5\n" in result.stderr
    assert json.loads(result.stdout) == {
        "offsetsMoved": [
            {
                "topic": "T",
                "queueId": 0,
                "offset": 999,
                "from": "--from-offset",
                "movedTo": 5,
                "minOffset": 0,
                "maxOffset": 5,
            }
        ]
    }
    assert "T/0: 0 message(s), next offset 5 (committed)" in result.stderr
    assert _committed(root, "G") == 5  # committed as before: where it was moved to
    result = run(*args)  # a table: the warning alone says it
    assert result.exit_code == 0 and "offset 999 is past the queue's max offset 5; read from 5" in result.stderr
    assert "offsetsMoved" not in result.stdout
    result = run(*args[:-1], 2, "--json")  # inside the queue: no warning, no object
    assert [r["queueOffset"] for r in jsonl(result.stdout)] == [2, 3, 4] and "WARNING" not in result.stderr


def test_consume_from_an_offset_retention_deleted_says_where_it_read_from(tmp_path: Path) -> None:
    root = tmp_path / "s"
    config = clean_config()
    with MessageStore.open(root, config) as store:
        fill(store, 12)
        age(segment_files(store)[:6], hours=2)
    sets = [f"--set={k}={v}" for k, v in config.changed().items() if k != "storePathRootDir"]
    consume = ("consume", root, *sets, "--topic", "CleanTopic", "--group", "G", "--max", 1, "--commit")
    assert run(*consume).exit_code == 0  # G committed 1
    assert run("clean", root, *sets).exit_code == 0
    with MessageStore.open(root, config, read_only=True) as store:
        first = store.get_min_offset_in_queue("CleanTopic", 0)
    assert first >= 6
    result = run(*consume[:-3], "--from-offset", 0, "--json")
    assert result.exit_code == 0, result.stderr
    assert f"WARNING: CleanTopic/0: offset 0 is before the queue's min offset {first}; read from {first}\n" in (
        result.stderr
    )
    *rows, moved = jsonl(result.stdout)
    assert [r["queueOffset"] for r in rows] == list(range(first, 12))  # read from the min offset
    assert moved["offsetsMoved"][0]["movedTo"] == first and moved["offsetsMoved"][0]["from"] == "--from-offset"
    result = run(*consume)  # from G's committed offset 1, which retention deleted too
    assert result.exit_code == 0, result.stderr
    warning = f"WARNING: CleanTopic/0: the committed offset 1 of group 'G' is before the queue's min offset {first}"
    assert f"{warning}; read from {first}\n" in result.stderr
    with MessageStore.open(root, config, read_only=True) as store:
        assert store.query_offset("G", "CleanTopic", 0) == first + 1


# -- a Ctrl-C the shell ignored stays ignored -------------------------------------------------------------
def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as bash starts a script's `cmd &`


def test_produce_started_with_sigint_ignored_is_not_interrupted_by_it(tmp_path: Path) -> None:
    root = tmp_path / "s"
    count = 20_000  # far more lines than a pipe holds: it is storing when the signal comes
    proc = cli_process(
        "produce", root, *BIG, "--topic", "T", "--body", "x", "--count", count, "--json", preexec_fn=_ignore_sigint
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    assert json.loads(first)["queueOffset"] == 0  # it has started: stores, writes, waits on the pipe
    proc.send_signal(signal.SIGINT)
    rest = proc.stdout.read()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == ""
    assert len(jsonl((first + rest).decode())) == count
    assert _messages(root, *BIG) == count


def test_the_interrupt_guard_leaves_an_ignored_sigint_ignored() -> None:
    """import installs the same guard as produce (no output line to wait for: checked here)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with DeferInterrupts().installed():
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        signal.signal(signal.SIGINT, signal.default_int_handler)
        guard = DeferInterrupts()
        with guard.installed():  # a handled one is deferred, as before
            assert signal.getsignal(signal.SIGINT) == guard._handle
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


# -- query: a time range that ends before it begins ------------------------------------------------------
def test_query_refuses_a_begin_after_the_end_as_a_usage_error(tmp_path: Path) -> None:
    root = tmp_path / "s"
    assert run("produce", root, *TINY_SETS, "--topic", "T", "--body", "x", "--keys", "k").exit_code == 0
    stored = jsonl(run("export", root, *TINY_SETS).stdout)[0]["storeTimestamp"]
    query = ("query", root, *TINY_SETS, "--topic", "T", "--key", "k")
    result = run(*query, "--begin", stored + 1, "--end", stored)
    assert result.exit_code == 2, result.stderr  # not 1, "no message": no message can be in it
    assert f"--begin {stored + 1} is after --end {stored}" in result.stderr
    result = run(*query, "--begin", stored, "--end", stored)  # both inclusive: one millisecond
    assert result.exit_code == 0 and len(result.stdout.splitlines()) > 1, result.stderr


# -- import: where to go on once it stops -----------------------------------------------------------------
def _resume_command(stderr: str) -> str:
    """The `tail -n +LINE FILE` command an import's stop message gives."""
    match = re.search(r"`(tail -n \+\d+ [^`]+)` gives the rest to import$", stderr.rstrip())
    assert match is not None, stderr
    return match[1]


def test_an_import_stopped_by_a_bad_line_says_where_to_go_on(tmp_path: Path) -> None:
    """As an interrupted import does: the stop message gives the `tail -n +LINE FILE` that yields
    the line it stopped at and the rest (the file's name quoted for a shell); run once the line is
    fixed, it imports the rest, none twice."""
    src = tmp_path / "src"
    assert run("produce", src, *TINY_SETS, "--topic", "T", "--body", "x", "--count", 4).exit_code == 0
    good = run("export", src, *TINY_SETS).stdout.splitlines()
    path = tmp_path / "an input.jsonl"
    path.write_text("\n".join([*good[:2], '{"topic":"T"}', *good[2:]]) + "\n", encoding="utf-8")
    root = tmp_path / "dst"
    result = run("import", root, *TINY_SETS, "-i", path)
    assert result.exit_code == 2
    assert result.stderr == (
        'error: line 3: no body field (an empty body is "body": "") (import stopped; 2 message(s) before it '
        f"stored); `tail -n +3 '{path}'` gives the rest to import\n"
    )
    command = _resume_command(result.stderr)
    path.write_text("\n".join([*good[:2], '{"topic":"T","body":""}', *good[2:]]) + "\n", encoding="utf-8")
    rest = subprocess.run(command, shell=True, capture_output=True, check=True).stdout
    (tmp_path / "rest.jsonl").write_bytes(rest)
    assert run("import", root, *TINY_SETS, "-i", tmp_path / "rest.jsonl").exit_code == 0
    assert _messages(root, *TINY_SETS) == 5  # line 3 fixed: the 2 before it, then it and the 2 after
    proc = cli_process("import", tmp_path / "dst2", *TINY_SETS, "-i", "-", "--json", stdin=subprocess.PIPE)
    out, err = proc.communicate(b'{"topic":"T"}\n', timeout=120)
    assert proc.returncode == 2
    assert err.decode().endswith("(import stopped; nothing stored); `tail -n +1 FILE` gives the rest to import\n")
    assert json.loads(out)["error"]["message"] == err.decode().removeprefix("error: ").rstrip()


# -- import onto a disk that fills -------------------------------------------------------------------------
_DISK_SETS = [  # 64 KiB segments, small queue and index files: a few MiB fill a 32 MiB file system
    *("--set", "mappedFileSizeCommitLog=65536", "--set", "mappedFileSizeConsumeQueue=6000"),
    *("--set", "maxHashSlotNum=1000", "--set", "maxIndexNum=3000", "--set", "brokerIP1=127.0.0.1"),
]


def _held(root: Path) -> tuple[int, int, int]:
    """(commit-log min offset, T/0's min offset, T/0's max offset) of a store on the test's disk."""
    sets = dict(arg.split("=") for arg in _DISK_SETS if arg != "--set")
    with MessageStore.open(root, StoreConfig(sets), read_only=True) as store:
        return store.min_phy_offset, store.get_min_offset_in_queue("T", 0), store.get_max_offset_in_queue("T", 0)


def test_a_store_opened_under_no_cleanup_checks_the_disk_but_deletes_nothing(loop_fs) -> None:
    """Past the clean-forcibly ratio, expired segments and young ones alike stay; past the warning
    ratio puts are refused (DISK_FULL) as in any store."""
    from rocketstore.services.wiring import no_cleanup

    fs = loop_fs(32)
    with no_cleanup():
        store = MessageStore.open(fs.mount / "s", clean_config(diskSpaceCleanForciblyRatio=50))
    with store:
        fill(store, 15)
        files = segment_files(store)
        age(files[:12], hours=2)
        ballast(fs.mount, 0.6, fs)
        assert store.clean_expired_files().commit_log_files == 0  # manual, expired, past 50 %: still none
        assert segment_files(store) == files and store.min_phy_offset == 0
        ballast(fs.mount, 0.92, fs)
        store.services.clean.check_disk()
        assert store.running_flags & DISK_FULL
        assert store.put(Message("CleanTopic", b"x")).status == PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert segment_files(store) == files
    (fs.mount / "ballast").unlink()
    with MessageStore.open(fs.mount / "t", clean_config(diskSpaceCleanForciblyRatio=50)) as store:
        fill(store, 15)  # opened outside it, the same store on the same disk deletes
        age(segment_files(store)[:12], hours=2)
        ballast(fs.mount, 0.6, fs)
        assert store.clean_expired_files().commit_log_files > 0


def test_an_import_onto_a_disk_that_fills_deletes_nothing_and_says_where_to_go_on(loop_fs, tmp_path: Path) -> None:
    """The disk is past diskSpaceCleanForciblyRatio (85 %) when the import starts: its store deletes
    nothing to make room (segments it stored are never deleted under it); past the warning ratio
    (90 %) the next line is refused, and the error says so, how many were stored (what the store
    holds) and the `tail` to go on from once there is room."""
    fs = loop_fs(32)
    path = tmp_path / "in.jsonl"
    lines = [json.dumps({"topic": "T", "body": base64.b64encode(os.urandom(750)).decode()}) for _ in range(4000)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")  # 3 MB: more than the disk has room for
    root = fs.mount / "s"
    ballast(fs.mount, 0.85, fs)
    assert 0.85 < used_ratio(str(fs.mount)) < 0.9  # as the store measures it (df's way)
    result = run("import", root, *_DISK_SETS, "-i", path)
    assert result.exit_code == 2, result.stdout + result.stderr
    match = re.search(r"error: line (\d+): (.*) \(import stopped; (\d+) message\(s\) before it stored\)", result.stderr)
    assert match is not None, result.stderr
    line, reason, stored = int(match[1]), match[2], int(match[3])
    assert stored == line - 1 and 0 < stored < 4000
    assert _held(root) == (0, 0, stored)  # what it says it stored, from the first on
    assert "diskSpaceWarningLevelRatio" in reason and "deletes nothing" in reason and "free space" in reason
    assert "cleanup frees space" not in result.stderr
    (fs.mount / "ballast").unlink()  # room again
    rest = subprocess.run(_resume_command(result.stderr), shell=True, capture_output=True, check=True).stdout
    (tmp_path / "rest.jsonl").write_bytes(rest)
    assert run("import", root, *_DISK_SETS, "-i", tmp_path / "rest.jsonl").exit_code == 0
    assert _held(root) == (0, 0, 4000)


# -- import: SIGTERM as Ctrl-C ----------------------------------------------------------------------------
def test_an_import_stopped_as_its_store_shuts_down_says_every_line_was_stored() -> None:
    """A stop that comes once every line is stored, during the store's shutdown (which runs whole,
    the signal raised after it), said only "terminated": run again, the file would be stored twice."""
    from rocketstore.cli.transfer import _stopped

    stopped = _stopped(KeyboardInterrupt(), signal.SIGTERM, "in.jsonl", 3000)
    assert stopped.exit_code == 143 and stopped.details == {"imported": 3000}
    assert str(stopped) == "terminated (SIGTERM): 3000 message(s) stored, every line (the store shut down cleanly)"
    assert str(_stopped(KeyboardInterrupt(), signal.SIGINT, "in.jsonl")) == "interrupted"  # before any line


def test_import_terminated_says_what_was_stored_and_where_to_go_on(tmp_path: Path) -> None:
    """SIGTERM (a service manager's stop, `kill`) ends an import as Ctrl-C does, at a whole line:
    the store shut down cleanly (its config/ written), how many were stored and the `tail` to go on
    from said, exit status 143 (128 + SIGTERM, as a shell reports it)."""
    root = tmp_path / "imp"
    proc = cli_process("import", root, *BIG, "-i", "-", stdin=subprocess.PIPE)
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(b'{"topic":"T","body":"eA=="}\n' * 50)
    proc.stdin.flush()  # and keep it open: the import waits for more
    _wait_until(lambda: _stored(root) == 50, "the 50 lines to be stored")
    proc.send_signal(signal.SIGTERM)
    status = proc.wait(timeout=120)
    err = proc.stderr.read().decode()
    proc.stdin.close()
    proc.stderr.close()
    assert status == 143, err
    assert err == (
        "terminated (SIGTERM): 50 message(s) stored, from the lines before line 51; "
        "`tail -n +51 FILE` gives the rest to import\n"
    )
    assert _stored(root) == 50 and not (root / "abort").exists()  # shut down cleanly
    assert (root / "config" / "topics.json").is_file()


def test_produce_terminated_says_what_was_stored_and_shuts_down_cleanly(tmp_path: Path) -> None:
    """SIGTERM ends a produce as Ctrl-C does, between two messages: what was stored is what was
    reported, the store is shut down cleanly (no abort left), exit status 143. It killed the
    command at once, a message stored unreported, the abort file left."""
    root = tmp_path / "s"
    count = 2_000_000
    proc = cli_process("produce", root, *BIG, "--topic", "T", "--body", "x", "--count", count, "--json")
    assert proc.stdout is not None and proc.stderr is not None
    assert json.loads(proc.stdout.readline())["queueOffset"] == 0
    proc.send_signal(signal.SIGTERM)
    out = proc.stdout.read()  # through the reader that took the first line (it may hold more)
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 143, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[-1]["error"] == {"type": "Interrupted", "message": "terminated (SIGTERM)"}
    reported = 1 + len([line for line in lines if "queueOffset" in line])
    match = _STORED.search(err.decode())
    assert match is not None, err
    assert int(match[1]) == reported < count and err.decode().rstrip().endswith("terminated (SIGTERM)"), err
    assert _messages(root, *BIG) == reported and not (root / "abort").exists()
