"""The command line when things go wrong: unreadable records, Ctrl-C, closed pipes and streams,
errors in --json mode, and a store folder that holds other files."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.errors import RocketStoreError
from rocketstore.export import export_jsonl
from test_cli import SRC, TINY, TINY_SETS, cli_process, jsonl, run

GOOD = 150  # messages after the broken ones: 5 segments, so that recovery (which checks the last 3) keeps them


def _store_with_bad_records(root: Path, bad: int, after: int = 0) -> list[tuple[int, int]]:
    """A store of ``bad`` messages in U/1 whose records' magic codes are broken (then ``after``
    readable ones in U/1), then GOOD readable ones in T/0; the (queue offset, commit-log offset) of
    each broken one."""
    broken = []
    with MessageStore.open(root, StoreConfig(**TINY)) as store:
        for i in range(bad):
            result = store.put(Message("U", f"bad {i}"), 1).raise_for_status()
            broken.append((result.queue_offset, result.commit_log_offset))
        for i in range(after):
            store.put(Message("U", f"after {i}"), 1).raise_for_status()
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
        if extra:  # --json: the error is the last line, as an object
            assert rows.pop()["error"]["type"] == "ProblemsFound"
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


def test_the_library_export_warns_about_each_unreadable_message(tmp_path: Path, caplog) -> None:
    """``export_jsonl`` (the library function) leaves them out with a warning each, as the CLI does."""
    root = tmp_path / "s"
    broken = _store_with_bad_records(root, bad=2)
    out = io.StringIO()
    with MessageStore.open(root, StoreConfig(**TINY), read_only=True) as store:
        assert export_jsonl(store, out) == GOOD
    warned = [r.getMessage() for r in caplog.records if r.name == "rocketstore.export"]
    assert [w.split(" left out: ")[0] for w in warned] == [
        f"export: U/1 queue offset {q} (commit-log offset {phy})" for q, phy in broken
    ]
    assert all("magic" in w for w in warned), warned


def test_export_of_a_sound_store_exits_0_without_warnings(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store_with_bad_records(root, bad=0)
    result = run("export", root, *TINY_SETS)
    assert result.exit_code == 0 and result.stderr == ""
    assert json.loads(result.stdout.splitlines()[0])["topic"] == "T"


def test_consume_warns_about_each_unreadable_message_and_exits_1(tmp_path: Path) -> None:
    """As export: a unit whose message cannot be read is named on stderr (where, and why) and the
    exit status is 1; --commit commits past it (it can never be read), as the warning says."""
    root = tmp_path / "s"
    broken = _store_with_bad_records(root, bad=2, after=3)
    base = ("consume", root, *TINY_SETS, "--topic", "U", "--queue", 1, "--group", "G", "--max", 2)
    for extra in ([], ["--json"], ["--commit"]):
        result = run(*base, *extra)
        assert result.exit_code == 1, result.stderr
        for queue_offset, phy in broken:
            assert f"WARNING: U/1 queue offset {queue_offset} (commit-log offset {phy}" in result.stderr
            assert "cannot be read, not consumed" in result.stderr and "magic" in result.stderr
        assert "error: 2 message(s) could not be read and were skipped" in result.stderr
        if extra == ["--json"]:
            *rows, error = jsonl(result.stdout)
            assert [r["queueOffset"] for r in rows] == [2, 3]  # the readable ones after them
            assert error["error"]["type"] == "ProblemsFound"
    assert "--commit commits past them" in result.stderr
    with MessageStore.open(root, StoreConfig(**TINY), read_only=True) as store:
        assert store.query_offset("G", "U", 1) == 4
    result = run(*base, "--json")  # from the committed offset: readable messages only, no warning
    assert result.exit_code == 0 and "WARNING" not in result.stderr
    assert [r["queueOffset"] for r in jsonl(result.stdout)] == [4]
    # a tag filter that the unreadable units' tags do not pass: they are not the consumer's, no warning
    result = run("consume", root, *TINY_SETS, "--topic", "U", "--group", "H", "--tags", "TagX")
    assert result.exit_code == 0 and "WARNING" not in result.stderr, result.stderr


# -- 3: Ctrl-C ------------------------------------------------------------------------------------------
BIG = ["--set", "mappedFileSizeCommitLog=16777216", "--set", "brokerIP1=127.0.0.1"]


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll ``condition`` (an event in another process) until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _interrupt(proc: subprocess.Popen) -> tuple[int, str]:
    """SIGINT, then the exit status and stderr (stdin is closed only once the process is gone: an
    end of input would race with the signal)."""
    proc.send_signal(signal.SIGINT)
    assert proc.stderr is not None
    status = proc.wait(timeout=120)
    err = proc.stderr.read().decode()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return status, err


def _stored(root: Path) -> int:
    """Messages in T/0 of a store another process is writing (read-only open: recovered in memory)."""
    try:
        with MessageStore.open(root, StoreConfig(mappedFileSizeCommitLog=16777216), read_only=True) as store:
            return store.get_max_offset_in_queue("T", 0)
    except Exception:  # not created yet
        return -1


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120,000 messages: an export takes seconds."""
    root = tmp_path_factory.mktemp("big") / "store"
    assert run("produce", root, *BIG, "--topic", "T", "--body", "x" * 24, "--count", 120_000).exit_code == 0
    return root


def test_import_interrupted_says_what_was_stored_and_where_to_go_on(tmp_path: Path, big_store: Path) -> None:
    lines = run("export", big_store, *BIG, "--topic", "T").stdout.splitlines()[:50]
    root = tmp_path / "imp"
    proc = cli_process("import", root, *BIG, "-i", "-", stdin=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(("\n".join(lines) + "\n").encode())
    proc.stdin.flush()  # and keep it open: the import waits for more
    _wait_until(lambda: _stored(root) == 50, "the 50 lines to be stored")
    status, err = _interrupt(proc)
    assert status == 130, err
    assert err == (
        "interrupted: 50 message(s) stored, from the lines before line 51; "
        "`tail -n +51 FILE` gives the rest to import\n"
    )
    assert _stored(root) == 50 and not (root / "abort").exists()  # shut down cleanly


def _part_files(folder: Path) -> list[Path]:
    return list(folder.glob(".out.jsonl.*.part"))


def test_export_interrupted_keeps_the_earlier_file(tmp_path: Path, big_store: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("earlier\n")
    proc = cli_process("export", big_store, *BIG, "-o", out)
    _wait_until(lambda: any(p.stat().st_size > 0 for p in _part_files(tmp_path)), "the export to write")
    status, err = _interrupt(proc)
    assert (status, err) == (130, "interrupted\n")
    assert out.read_text() == "earlier\n" and _part_files(tmp_path) == []


def test_export_to_stdout_interrupted_ends_with_a_whole_line(tmp_path: Path, big_store: Path) -> None:
    """Ctrl-C while export writes to stdout (`> file`) lands between two lines: what was written
    is whole JSON lines, in order, the last one ended by its newline (tried a few times: where the
    signal lands is up to chance)."""
    out = tmp_path / "out.jsonl"
    for _ in range(4):
        with open(out, "wb") as f:
            proc = cli_process("export", big_store, *BIG, stdout=f)
        _wait_until(lambda: out.stat().st_size > 0, "the export to write")
        status, err = _interrupt(proc)
        assert (status, err) == (130, "interrupted\n")
        data = out.read_bytes()
        assert data.endswith(b"\n"), data[-200:]
        rows = [json.loads(line) for line in data.splitlines()]
        assert [r["queueOffset"] for r in rows] == list(range(len(rows)))


def test_export_to_a_file_replaces_it_at_the_end_with_the_umask_mode(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store_with_bad_records(root, bad=0)
    out = tmp_path / "out.jsonl"
    assert run("export", root, *TINY_SETS, "-o", out).exit_code == 0
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask
    assert len(jsonl(out.read_text())) == GOOD and _part_files(tmp_path) == []


def test_verify_interrupted_is_130_not_its_problems_status(big_store: Path) -> None:
    proc = cli_process("verify", big_store, *BIG)

    def reading() -> bool:
        with contextlib.suppress(OSError):
            return "commitlog" in Path(f"/proc/{proc.pid}/maps").read_text()
        return False

    _wait_until(reading, "verify to read the commit log")
    status, err = _interrupt(proc)
    assert (status, err) == (130, "interrupted\n")


def test_ctrl_c_while_the_command_line_loads_is_quiet() -> None:
    code = (
        "import sys; sys.argv[0] = '/usr/bin/rocketstore'; import rocketstore.cli, os, signal; "
        "os.kill(os.getpid(), signal.SIGINT); import rocketstore.cli.main; print('not interrupted')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=120
    )
    assert (done.returncode, done.stderr, done.stdout) == (130, b"interrupted\n", b"")
    # imported by a program (not the console script), the package leaves its handler alone
    code = "import signal, rocketstore.cli; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=120
    )
    assert done.stdout == b"True\n", done.stderr


def _interrupt_at_call(monkeypatch: pytest.MonkeyPatch, module: object, name: str, call: int) -> None:
    """SIGINT (a Ctrl-C) to this process as the ``call``-th call of ``module.name`` returns."""
    real = getattr(module, name)
    calls = 0

    def interrupting(*args: object, **kwargs: object) -> object:
        nonlocal calls
        value = real(*args, **kwargs)
        calls += 1
        if calls == call:
            os.kill(os.getpid(), signal.SIGINT)
        return value

    monkeypatch.setattr(module, name, interrupting)


def test_produce_interrupted_right_after_a_put_counts_and_reports_that_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocketstore.cli import messaging

    root = tmp_path / "s"
    _interrupt_at_call(monkeypatch, messaging, "_result_row", 3)  # the 3rd message is stored, not yet counted
    result = run("produce", root, *TINY_SETS, "--topic", "T", "--body", "x", "--count", 5, "--json")
    assert result.exit_code == 130, result.stderr
    *rows, error = jsonl(result.stdout)
    assert error["error"]["type"] == "Interrupted"
    assert [r["queueOffset"] for r in rows] == [0, 1, 2]  # a line for every message stored
    _interrupt_at_call(monkeypatch, messaging, "_result_row", 3)
    result = run("produce", root, *TINY_SETS, "--topic", "T", "--body", "x", "--count", 5)
    assert result.exit_code == 130
    assert "3 message(s) stored in T/0 before this stopped (up to queue offset 5)" in result.stderr
    with MessageStore.open(root, StoreConfig(**TINY), read_only=True) as store:
        assert store.get_max_offset_in_queue("T", 0) == 6


def test_consume_commit_interrupted_while_printing_commits_only_what_was_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocketstore.cli import output

    root = tmp_path / "s"
    assert run("produce", root, *TINY_SETS, "--topic", "T", "--body", "x", "--count", 10).exit_code == 0
    _interrupt_at_call(monkeypatch, output, "dumps_row", 5)  # the 5th line is made, not written
    result = run("consume", root, *TINY_SETS, "--topic", "T", "--group", "G", "--commit", "--max", 10, "--json")
    assert result.exit_code == 130, result.stderr
    *rows, error = jsonl(result.stdout)
    assert [r["queueOffset"] for r in rows] == [0, 1, 2, 3] and error["error"]["type"] == "Interrupted"
    with MessageStore.open(root, StoreConfig(**TINY), read_only=True) as store:
        assert store.query_offset("G", "T", 0) == 4  # the next run goes on from the first message not printed


# -- 4: a closed pipe -------------------------------------------------------------
def test_a_closed_pipe_exits_0_for_table_output_too(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store_with_bad_records(root, bad=0)
    for command in (["inspect"], ["verify"], ["query", "--topic", "T", "--offset", "0"], ["inspect", "--json"]):
        proc = cli_process(*command[:1], root, *TINY_SETS, *command[1:])
        assert proc.stdout is not None
        proc.stdout.close()  # as `| true` does: before the command writes
        _out, err = proc.communicate(timeout=120)
        assert (proc.returncode, err) == (0, b""), command
    for option in ("--help", "--version"):  # the group's own output (click said 1)
        proc = cli_process(option)
        assert proc.stdout is not None
        proc.stdout.close()
        _out, err = proc.communicate(timeout=120)
        assert (proc.returncode, err) == (0, b""), option


def test_a_closed_pipe_keeps_the_status_of_problems_found(tmp_path: Path) -> None:
    """`verify | head -1` under `set -o pipefail`: the problems verify found still give status 1
    when its reader stops early (it gave 0, as a clean store), and so do the messages export and
    consume could not read (warned about on stderr before their reader went)."""
    root = tmp_path / "s"
    _store_with_bad_records(root, bad=2)
    for command in (
        ["verify"],
        ["verify", "--json"],
        ["export", "--topic", "U"],  # T's messages come first: the pipe is gone before U's are met
        ["consume", "--topic", "U", "--group", "G", "--queue", "1"],
    ):
        proc = cli_process(*command[:1], root, *TINY_SETS, *command[1:])
        assert proc.stdout is not None
        proc.stdout.close()
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, (command, err)
        assert b"Traceback" not in err, err


def test_a_stdout_closed_once_recover_or_clean_is_done_ends_quietly(tmp_path: Path) -> None:
    """recover and clean into a stdout closed before they write their report: the store is
    recovered (cleaned) and shut down, so that is no interruption: status 0, as for produce and
    import (it was 141, "interrupted", after the work was done)."""
    root = tmp_path / "s"
    _store_with_bad_records(root, bad=0)
    (root / "abort").touch()
    for command in (["recover"], ["clean"]):
        proc = cli_process(command[0], root, *TINY_SETS, *command[1:])
        assert proc.stdout is not None
        proc.stdout.close()
        _out, err = proc.communicate(timeout=120)
        assert (proc.returncode, err) == (0, b""), (command, err)
    assert not (root / "abort").exists()


def test_a_non_blocking_stdout_pipe_is_written_whole(tmp_path: Path) -> None:
    """A parent that gives the command a non-blocking pipe (Node's child_process, some CI runners)
    and reads it late: the output waits for the reader, as on any pipe. It failed with EAGAIN
    ("write could not complete without blocking"), a traceback and status 120."""
    import fcntl
    import termios

    root = tmp_path / "s"
    _store_with_bad_records(root, bad=0)
    expected = run("export", root, *TINY_SETS).stdout.encode()
    assert len(expected) > 70_000  # more than a pipe holds
    read, write = os.pipe()
    os.set_blocking(write, False)
    proc = cli_process("export", root, *TINY_SETS, stdout=write)
    os.close(write)

    def waiting() -> int:  # bytes in the pipe, not yet read
        return int.from_bytes(fcntl.ioctl(read, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)

    last = [-1]

    def full() -> bool:  # the writer stopped (exited, or waits): the pipe holds what it can, under 64 KiB
        if proc.poll() is not None:
            return True
        now = waiting()
        stalled = now >= 32768 and now == last[0]  # unchanged since the last look, 10 ms ago
        last[0] = now
        return stalled

    _wait_until(full, "the pipe to fill")
    with os.fdopen(read, "rb") as out:
        got = out.read()
    _out, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (0, b""), err
    assert got == expected
    # the flag is the open file's, which the parent shares: it is given back as it was
    read, write = os.pipe()
    os.set_blocking(write, False)
    assert cli_process("--version", stdout=write).wait(timeout=120) == 0
    assert not os.get_blocking(write)
    os.close(write)
    os.close(read)


def test_a_stdout_that_cannot_be_written_is_an_error_naming_it(tmp_path: Path) -> None:
    """A full disk under stdout (/dev/full): status 2 and one line saying stdout could not be
    written, not Python's exit status 120 and its "Exception ignored" lines."""
    root = tmp_path / "s"
    _store_with_bad_records(root, bad=0)
    for command in (["inspect"], ["inspect", "--json"], ["export"], ["verify"], ["--help"]):
        with open("/dev/full", "w") as full:
            where = [] if command[0].startswith("--") else [root, *TINY_SETS]
            proc = cli_process(*command[:1], *where, *command[1:], stdout=full)
            _out, err = proc.communicate(timeout=120)
        text = err.decode()
        assert proc.returncode == 2, (command, text)
        assert text.startswith("error: stdout cannot be written: ") and text.count("\n") == 1, (command, text)
    # with --json the error object cannot be written either: the error itself is still said
    with open("/dev/full", "w") as full:
        proc = cli_process("export", root, *TINY_SETS, "--json", "--topic", "Nope", stdout=full)
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "no topic of" in err.decode() and "Nope" in err.decode(), err
    # a command that stored all before its report could not be written says what it stored
    with open("/dev/full", "w") as full:
        proc = cli_process("produce", root, *TINY_SETS, "--topic", "T", "--body", "x", "--count", 3, stdout=full)
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "(3 message(s) stored in T/0: only the report is lost)" in err.decode(), err


def test_consume_commit_into_a_closed_pipe_commits_only_what_was_written(tmp_path: Path) -> None:
    root = tmp_path / "s"
    sets = ["--set", "mappedFileSizeCommitLog=1048576", "--set", "brokerIP1=127.0.0.1"]
    count = 300  # ~1.7 kB a line: far more than a pipe holds
    assert run("produce", root, *sets, "--topic", "T", "--body", "x" * 1000, "--count", count).exit_code == 0
    for group, env in (("G1", {}), ("G2", {"PYTHONIOENCODING": "ascii"})):  # stdout as it is, and as UTF-8
        proc = cli_process(
            "consume", root, *sets, "--topic", "T", "--group", group, "--commit", "--max", count, "--json", env=env
        )
        assert proc.stdout is not None and proc.stderr is not None
        assert json.loads(proc.stdout.readline())["queueOffset"] == 0
        proc.stdout.close()  # as `| head -1` does
        stderr = proc.stderr.read()
        assert proc.wait(timeout=120) == 0 and stderr == b"", stderr  # quietly, as for export
        with MessageStore.open(root, StoreConfig(mappedFileSizeCommitLog=1048576), read_only=True) as store:
            committed = store.query_offset(group, "T", 0)
        assert 1 <= committed < count  # the messages written out, not all of them
        result = run("consume", root, *sets, "--topic", "T", "--group", group, "--max", count, "--json")
        assert [r["queueOffset"] for r in jsonl(result.stdout)] == list(range(committed, count))  # none lost


def test_consume_commit_under_python_unbuffered_commits_no_line_cut_short(tmp_path: Path) -> None:
    """Under PYTHONUNBUFFERED stdout writes to the raw pipe, and a write the closing reader cuts
    short came back as done (TextIOWrapper ignores a short count): the message was committed
    though its line never arrived. The reader here closes while a line longer than the pipe is
    being written: only the line before it is committed."""
    import fcntl
    import termios

    root = tmp_path / "s"
    sets = ["--set", "mappedFileSizeCommitLog=1048576", "--set", "brokerIP1=127.0.0.1"]
    body = "x" * 60_000  # a line of ~80 kB: more than the 64 kB a pipe holds
    assert run("produce", root, *sets, "--topic", "T", "--body", body, "--count", 3).exit_code == 0
    args = ("consume", root, *sets, "--topic", "T", "--group", "G", "--commit", "--json")
    proc = cli_process(*args, env={"PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None and proc.stderr is not None
    assert json.loads(proc.stdout.readline())["queueOffset"] == 0
    waiting = bytearray(4)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the second line fills the pipe: the writer is in its write
        fcntl.ioctl(proc.stdout.fileno(), termios.FIONREAD, waiting)
        if int.from_bytes(waiting, sys.byteorder) >= 65536:
            break
        time.sleep(0.01)
    proc.stdout.close()
    proc.stderr.read()
    assert proc.wait(timeout=120) == 0
    with MessageStore.open(root, StoreConfig(mappedFileSizeCommitLog=1048576), read_only=True) as store:
        assert store.query_offset("G", "T", 0) == 1  # the first line only


# -- 5: a closed stdout ---------------------------------------------------------------------------------
def _with_stdout_closed(*args: object) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "rocketstore.cli.main", *map(str, args)]
    return subprocess.run(
        ["sh", "-c", 'exec "$@" >&-', "sh", *command],
        capture_output=False,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=120,
    )


def test_a_closed_stdout_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store_with_bad_records(root, bad=0)
    for command in (["export"], ["inspect", "--json"], ["inspect"]):
        done = _with_stdout_closed(command[0], root, *TINY_SETS, *command[1:])
        assert done.returncode == 2, (command, done.stderr)
        assert done.stderr.decode().startswith("error: stdout is closed"), done.stderr
        assert b"Traceback" not in done.stderr


# -- 6: errors in --json mode ----------------------------------------------------------------------------
def test_json_mode_errors_are_a_json_object_on_stdout_too(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store_with_bad_records(root, bad=0)
    lines = run("export", root, *TINY_SETS).stdout.splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:7], '{"topic":"T","body":"!!notbase64"}', *lines[7:]]) + "\n")
    result = run("import", tmp_path / "imp", *TINY_SETS, "-i", bad, "--json")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: line 8: ")  # the human line stays on stderr
    error = json.loads(result.stdout)["error"]
    assert error["type"] == "ImportLineError" and error["line"] == 8 and error["imported"] == 7
    assert error["message"].startswith("line 8: ")

    result = run("inspect", root, "--json", "--set", "fooBar=1")
    assert result.exit_code == 2 and result.stderr.startswith("error: ")
    assert json.loads(result.stdout)["error"]["type"] == "ConfigError"
    result = run("inspect", root, "--set", "fooBar=1")  # without --json: stderr only
    assert result.exit_code == 2 and result.stdout == ""
    result = run("export", root, *TINY_SETS, "--json", "--topic", "Nope")
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["type"] == "CommandError"


def test_json_mode_errors_while_the_options_are_read_are_a_json_object_too(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store_with_bad_records(root, bad=0)
    produce = ["produce", root, *TINY_SETS, "--topic", "T", "--body", "x"]
    for args, kind in (
        ([*produce, "--set", "foo"], "BadParameter"),
        ([*produce, "--property", "bad"], "BadParameter"),
        ([*produce, "--queue", -1], "BadParameter"),
        ([*produce, "--queue", 2**31], "BadParameter"),  # past a Java int: a usage error, as -1 is
        (["consume", root, *TINY_SETS, "--topic", "T", "--group", "g", "--queue", 2**31], "BadParameter"),
        (["produce", root, *TINY_SETS, "--body", "x"], "MissingParameter"),
        (["inspect", tmp_path / "nothing"], "BadParameter"),
        ([*produce, "--bogus"], "NoSuchOption"),
        ([*produce, "--queue"], "BadParameter"),
        ([*produce, "extra"], "UsageError"),
    ):
        result = run(*args, "--json")
        assert result.exit_code == 2, args
        assert "Error: " in result.stderr  # click's message stays on stderr
        error = json.loads(result.stdout)["error"]
        assert error["type"] == kind and error["message"], args
        result = run(*args)  # without --json: stderr only
        assert result.exit_code == 2 and result.stdout == "", args


# -- 7: a store only in a new, empty or store folder -----------------------------------------------------
def test_produce_and_import_refuse_a_folder_that_holds_files_but_no_store(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "Documents").mkdir(parents=True)
    (home / "notes.txt").write_text("notes\n")
    lines = tmp_path / "in.jsonl"
    lines.write_text(json.dumps({"topic": "T", "body": ""}) + "\n")
    for command in (["produce", "--topic", "T", "--body", "x"], ["import", "-i", lines]):
        result = run(command[0], home, *TINY_SETS, *command[1:])
        assert result.exit_code == 2, (command, result.stdout)
        assert f"error: {home} holds files but no store (Documents, notes.txt)" in result.stderr
        assert sorted(p.name for p in home.iterdir()) == ["Documents", "notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run("produce", empty, *TINY_SETS, "--topic", "T", "--body", "x").exit_code == 0
    assert run("import", empty, *TINY_SETS, "-i", lines).exit_code == 0  # a store now
    assert run("import", tmp_path / "new", *TINY_SETS, "-i", lines).exit_code == 0


def test_an_empty_store_argument_is_refused_not_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`produce ""` (an unset shell variable, quoted) made a store in the current folder."""
    lines = tmp_path / "in.jsonl"
    lines.write_text(json.dumps({"topic": "T", "body": ""}) + "\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    for command in (["produce", "--topic", "T", "--body", "x"], ["import", "-i", lines], ["inspect"]):
        result = run(command[0], "", *TINY_SETS, *command[1:])
        assert result.exit_code == 2, (command, result.stdout)
        assert "STORE" in result.stderr and "empty" in result.stderr, result.stderr
    assert list(cwd.iterdir()) == []
    assert run("produce", ".", *TINY_SETS, "--topic", "T", "--body", "x").exit_code == 0
    result = run("export", ".", *TINY_SETS, "--output", "")
    assert result.exit_code == 2 and "error: --output is empty" in result.stderr, result.stderr


def test_produce_checks_the_message_before_it_creates_a_store(tmp_path: Path) -> None:
    new = tmp_path / "new"
    for args, said in (
        (["--topic", "bad topic"], "Error: Invalid value for '--topic': the topic 'bad topic' has characters"),
        (["--topic", "T", "--set", "maxMessageSize=10"], "error: "),
    ):
        result = run("produce", new, *TINY_SETS, *args, "--body", "x" * 100)
        assert result.exit_code == 2 and said in result.stderr, args
        assert not new.exists(), args  # no store left behind for a message refused


def test_an_invalid_topic_name_is_the_same_usage_error_for_every_command(tmp_path: Path) -> None:
    """produce, consume, export and query all refuse a --topic RocketMQ's TopicValidator refuses
    as a usage error naming the rule (consume and export said no topic of the store matched)."""
    root = tmp_path / "s"
    _store_with_bad_records(root, bad=0)
    for command in (
        ["produce", root, "--body", "x"],
        ["consume", root, "--group", "g"],
        ["export", root, "--topic", "T"],
        ["query", root, "--key", "k"],
    ):
        result = run(*command, *TINY_SETS, "--topic", "a/b", "--json")
        assert result.exit_code == 2, command
        error = json.loads(result.stdout)["error"]
        assert error["type"] == "BadParameter" and "'a/b' has characters other than" in error["message"], command


def test_produce_reads_no_more_of_a_body_file_than_a_message_holds(tmp_path: Path) -> None:
    """An endless --body-file (/dev/zero, a stdin that never ends) was read whole before
    maxMessageSize was checked: memory ran out (a traceback). At most maxMessageSize + 1 bytes
    are read now, and the body is refused as one too big, nothing stored."""
    import resource

    def one_gib_at_most() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    new = tmp_path / "new"
    proc = cli_process(
        "produce",
        new,
        *TINY_SETS,
        "--set",
        "maxMessageSize=1000",
        "--topic",
        "T",
        "--body-file",
        "/dev/zero",
        preexec_fn=one_gib_at_most,
    )
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert err.decode() == "error: MESSAGE_ILLEGAL: --body-file holds more than maxMessageSize (1000 bytes)\n"
    assert not new.exists()


def test_a_store_path_with_brackets_is_shown_as_it_is(tmp_path: Path) -> None:
    """Paths are shown as plain text: rich would read ``[/]`` in a title as markup (a traceback)
    and drop ``[red]`` from the path shown."""
    for name in ("a[/]b", "st[red]y"):
        root = tmp_path / name
        with MessageStore.open(root, StoreConfig(**TINY)) as store:
            store.put(Message("T", b"x")).raise_for_status()
        for command in ("verify", "inspect", "recover", "clean"):
            result = run(command, root, *TINY_SETS)
            assert result.exit_code == 0, (command, result.stdout, result.stderr)
            assert str(root) in result.stdout.replace("\n", ""), (command, result.stdout)


def test_produce_of_a_body_that_is_not_utf8_text_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    """argv bytes that are not UTF-8 reach --body surrogate-escaped (b'\\xff' is '\\udcff')."""
    new = tmp_path / "new"
    args = ["produce", new, *TINY_SETS, "--topic", "T", "--body", "\udcff\udcfe"]
    result = run(*args)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == "error: --body is not UTF-8 text (use --body-file for bytes)\n"
    result = run(*args, "--json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"] == {
        "type": "CommandError",
        "message": "--body is not UTF-8 text (use --body-file for bytes)",
    }
    assert not new.exists()
    proc = subprocess.run(  # through a real argv
        [
            sys.executable,
            "-m",
            "rocketstore.cli.main",
            "produce",
            os.fsencode(new),
            "--topic",
            "T",
            "--body",
            b"\xff\xfe",
        ],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=120,
    )
    assert proc.returncode == 2 and b"Traceback" not in proc.stderr, proc.stderr
    assert b"--body is not UTF-8 text" in proc.stderr


@pytest.mark.parametrize(
    "topic",
    [
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    ],
)
def test_produce_refuses_the_topics_rocketmq_forbids_sending_to_and_import_takes_them(
    tmp_path: Path, topic: str
) -> None:
    """TopicValidator's NOT_ALLOWED_SEND_TOPIC_SET: a SCHEDULE_TOPIC_XXXX message without
    REAL_TOPIC was stored and never delivered. An export holds schedule units: import takes them."""
    new = tmp_path / "new"
    result = run("produce", new, *TINY_SETS, "--topic", topic, "--body", "x")
    assert result.exit_code == 2 and result.stderr == f"error: Sending message to topic[{topic}] is forbidden.\n"
    result = run("produce", new, *TINY_SETS, "--topic", topic, "--body", "x", "--json")
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["type"] == "CommandError"
    assert not new.exists()
    lines = tmp_path / "in.jsonl"
    lines.write_text(json.dumps({"topic": topic, "body": ""}) + "\n")
    assert run("import", new, *TINY_SETS, "-i", lines).exit_code == 0
    assert [m["topic"] for m in jsonl(run("export", new, *TINY_SETS).stdout)] == [topic]


def test_export_to_a_file_in_a_missing_folder_names_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a FileNotFoundError naming the hidden file written beside the output."""
    root = tmp_path / "s"
    _store_with_bad_records(root, bad=0)
    monkeypatch.chdir(tmp_path)
    result = run("export", root, *TINY_SETS, "-o", "nodir/x.jsonl")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == "error: --output nodir/x.jsonl: folder nodir does not exist\n"
    result = run("export", root, *TINY_SETS, "--output", "nodir/x.jsonl", "--json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"] == {
        "type": "CommandError",
        "message": "--output nodir/x.jsonl: folder nodir does not exist",
    }
    (tmp_path / "afile").write_text("")
    result = run("export", root, *TINY_SETS, "-o", "afile/x.jsonl")
    assert result.exit_code == 2 and result.stderr == "error: --output afile/x.jsonl: afile is not a folder\n"
    assert not (tmp_path / "nodir").exists()
    assert run("export", root, *TINY_SETS, "-o", "x.jsonl").exit_code == 0  # the current folder
    assert jsonl((tmp_path / "x.jsonl").read_text())


def test_replacing_file_names_the_folder_it_cannot_write_in(tmp_path: Path) -> None:
    from rocketstore.cli.output import replacing_file

    with pytest.raises(FileNotFoundError) as caught, replacing_file(str(tmp_path / "nodir" / "x.jsonl")):
        pass
    assert caught.value.filename == str(tmp_path / "nodir")


def test_produce_refuses_the_property_names_rocketmq_keeps_for_itself(tmp_path: Path) -> None:
    """A name of MessageConst.STRING_HASH_SET (RocketMQ 4.9, and 5's __CRC32#, which a store appends
    and import drops), which the client's putUserProperty refuses, is bad input (exit status 2,
    nothing stored); TAGS, KEYS and DELAY name the option that sets them. So is a blank name or
    value, which the client refuses too."""
    root = tmp_path / "s"
    base = ("produce", root, *TINY_SETS, "--topic", "T", "--body", "x")
    for name, option in (
        ("UNIQ_KEY", None),
        ("WAIT", None),
        ("MSG_TYPE", None),
        ("__CRC32#", None),
        ("TAGS", "--tags"),
        ("DELAY", "--delay-level"),
    ):
        result = run(*base, "--property", f"{name}=abc")
        assert result.exit_code == 2, (name, result.stderr)
        assert f"{name} is a property RocketMQ sets itself" in result.stderr, result.stderr
        assert option is None or f"give {option}" in result.stderr
    # blank as Java's String.trim has it: every character up to U+0020, control characters included
    for item in ("a= ", " =b", "a=\x03", "\x1b=b", "a=\t\x1f "):
        result = run(*base, "--property", item)
        assert result.exit_code == 2 and "blank" in result.stderr, (item, result.stderr)
    # an empty body, as the client's Validators.checkMessage refuses it
    for source in (("--body", ""), ("--body-file", os.devnull)):
        result = run("produce", root, *TINY_SETS, "--topic", "T", *source)
        assert result.exit_code == 2 and "body is empty" in result.stderr and source[0] in result.stderr, result.stderr
    assert not root.exists() or not list((root / "commitlog").glob("*"))
    result = run(*base, "--tags", "y", "--keys", "a b", "--property", "traceId=1", "--json")
    assert result.exit_code == 0, result.stderr
    with MessageStore.open(root, StoreConfig(**TINY), read_only=True) as store:
        message = store.look_message_by_offset(0)
    assert message is not None and message.tags == "y" and message.properties["traceId"] == "1"
    # ... and no more: spaces String.trim keeps (ideographic, no-break, line separator) are a value
    for value in ("\u3000", "\u00a0", "\u2028"):
        result = run(*base, "--property", f"P={value}", "--json")
        assert result.exit_code == 0, (value, result.stderr)
    with MessageStore.open(root, StoreConfig(**TINY), read_only=True) as store:
        got = [m.properties["P"] for m in store.get_message("g", "T", 0, 1, 32).messages]
    assert got == ["\u3000", "\u00a0", "\u2028"]


# -- a failed shutdown after an error: the error is what is said first -------------------------------
@contextlib.contextmanager
def _immutable(path: Path) -> Iterator[None]:
    """``path`` immutable (chattr +i): nothing in it can be made or replaced, even by root."""
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("chattr +i is not supported here")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_an_error_in_a_with_block_is_raised_with_the_failed_shutdown_as_a_note(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The shutdown still runs whole (the store is closed, its lock released), but its own error
    does not replace the one the block raised: it is a note on it, and logged."""
    root = tmp_path / "s"
    with MessageStore.open(root, StoreConfig(**TINY)) as store:
        store.put(Message("T", "x")).raise_for_status()
    with _immutable(root / "config"), caplog.at_level(logging.ERROR, logger="rocketstore"):
        with (
            pytest.raises(ValueError, match=r"^the block's error") as caught,
            MessageStore.open(root, StoreConfig(**TINY)) as store,
        ):
            raise ValueError("the block's error")
        assert [note for note in caught.value.__notes__ if "did not shut down cleanly" in note]
        assert "did not shut down cleanly" in caplog.text and "ValueError" in caplog.text
        with (
            pytest.raises(RocketStoreError, match="did not shut down cleanly"),
            MessageStore.open(root, StoreConfig(**TINY)),
        ):
            pass  # no error in flight: the shutdown's own is raised
    with MessageStore.open(root, StoreConfig(**TINY)) as store:  # closed, the lock released
        assert store.get_max_offset_in_queue("T", 0) == 1


def test_clean_whose_topic_deletion_fails_says_so_first_then_that_the_shutdown_failed(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, StoreConfig(**TINY)) as store:
        for topic in ("T", "PayTopic"):
            store.put(Message(topic, "x")).raise_for_status()
    with _immutable(root / "config"):
        result = run("clean", root, *TINY_SETS, "--delete-topic", "PayTopic")
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2, result.stderr
    assert "no topic was removed (PayTopic)" in errors[0]
    assert "did not shut down cleanly" in errors[1]


def _file_size_limit(limit: int) -> None:
    """In the child: files may not grow past ``limit`` bytes, and a write past it fails with EFBIG
    (SIGXFSZ ignored), as a full quota fails it."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_an_export_file_that_cannot_be_written_is_named_and_left_as_it_was(tmp_path: Path) -> None:
    """export -o FILE whose writes fail (a full disk, a quota) says which file, exits 2 and leaves
    no part file; an earlier FILE is kept."""
    root = tmp_path / "s"
    _store_with_bad_records(root, bad=0)
    for target in ("/dev/full", str(tmp_path / "out.jsonl")):
        if not target.startswith("/dev"):
            Path(target).write_text("earlier\n")
        proc = cli_process("export", root, *TINY_SETS, "-o", target, preexec_fn=lambda: _file_size_limit(4096))
        _out, err = proc.communicate(timeout=120)
        text = err.decode()
        assert proc.returncode == 2, text
        assert text.startswith("error: ") and target in text and text.count("\n") == 1, text
    assert Path(target).read_text() == "earlier\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "s"]
