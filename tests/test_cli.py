"""The ``rocketstore`` command line, through click's CliRunner and through a real subprocess.

Write tests work on copies in tmp_path; the RocketMQ vector stores are only read, and a hash of
every file shows they are unchanged afterwards.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import conftest
from conftest import copy_store, tree_hashes
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli.main import cli
from rocketstore.errors import CorruptStoreError
from rocketstore.verify.layout import check_sizes

SRC = Path(__file__).resolve().parents[1] / "src"
VECTORS = conftest.VECTORS
RMQREAD = conftest.RMQREAD
VECTOR_SETS = [
    "--set",
    "mappedFileSizeCommitLog=65536",
    "--set",
    "mappedFileSizeConsumeQueue=2000",
    "--set",
    "maxHashSlotNum=1000",
    "--set",
    "maxIndexNum=3000",
]
RMQREAD_GEOMETRY = ["--commitlog-size", "65536", "--cq-size", "2000", "--slots", "1000", "--index-num", "3000"]
TINY = {
    "mappedFileSizeCommitLog": 4096,
    "mappedFileSizeConsumeQueue": 200,
    "maxHashSlotNum": 64,
    "maxIndexNum": 128,
    "brokerIP1": "127.0.0.1",
}
TINY_SETS = [arg for key, value in TINY.items() for arg in ("--set", f"{key}={value}")]
needs_vectors = pytest.mark.skipif(not VECTORS.is_dir(), reason="the RocketMQ vector stores are not available")


# -- helpers -----------------------------------------------------------------------------------------
def run(*args: object) -> Result:
    """The CLI in-process; stdout and stderr apart (click 8.2+ always, 8.1 with mix_stderr=False)."""
    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        runner = CliRunner()
    return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def without_cq(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ("cqTagsCode", "cqSize")}


@pytest.fixture(scope="module")
def clean_rows() -> list[dict]:
    if not VECTORS.is_dir():
        pytest.skip("the RocketMQ vector stores are not available")
    return jsonl((VECTORS / "sample-clean" / "expected.jsonl").read_text(encoding="utf-8"))


@pytest.fixture
def small_store(tmp_path: Path) -> Path:
    """20 messages in TopicA (queues 0 and 1), tags TagA/TagB, keys k<i> and order-<i % 3>."""
    root = tmp_path / "small"
    with MessageStore.open(root, StoreConfig(**TINY)) as store:
        for i in range(20):
            message = Message(
                "TopicA", f"hello {i}", tags="TagA" if i % 2 else "TagB", keys=[f"k{i}", f"order-{i % 3}"]
            )
            store.put(message, queue_id=i % 2).raise_for_status()
        assert store.wait_for_dispatch()
    return root


# -- export --------------------------------------------------------------------------------------------
@needs_vectors
@pytest.mark.parametrize(
    ("sample", "expected"), [("sample-clean", "expected.jsonl"), ("sample-crash", "recovered.jsonl")]
)
def test_export_of_the_vector_stores_is_byte_exact_and_changes_nothing(sample: str, expected: str) -> None:
    root = VECTORS / sample / "store"
    before = tree_hashes(VECTORS / sample)
    result = run("export", root, *VECTOR_SETS)
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == (VECTORS / sample / expected).read_bytes()
    assert result.stderr == ""  # no progress bar without a terminal
    assert tree_hashes(VECTORS / sample) == before


@needs_vectors
@pytest.mark.parametrize(
    "command",
    [
        ["inspect"],
        ["export"],
        ["query", "--topic", "PayTopic", "--key", "k"],
        ["consume", "--topic", "PayTopic", "--group", "g"],
        ["spark", "export", "--parquet", "{tmp}/out"],
    ],
)
def test_a_store_of_other_file_sizes_is_refused_naming_every_setting_at_once(
    tmp_path: Path, command: list[str]
) -> None:
    """Without the store's sizes every command names all three settings to give in one error
    (not one per attempt), and the Spark command says so before Spark starts."""
    root = VECTORS / "sample-clean" / "store"
    before = tree_hashes(VECTORS / "sample-clean")
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    at = 2 if args[0] == "spark" else 1
    result = run(*args[:at], root, *args[at:], "--json")
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout.splitlines()[-1])["error"]["message"]
    for setting in ("mappedFileSizeCommitLog=65536", "mappedFileSizeConsumeQueue=2000", "= 64040"):
        assert setting in error
    assert not (tmp_path / "out").exists()
    assert tree_hashes(VECTORS / "sample-clean") == before


def test_a_lone_segment_of_another_size_may_be_one_cut_short_and_is_said_so(tmp_path: Path) -> None:
    """One segment alone, of a size other than the configured one and ending in zeros (a copy cut
    short), is not taken for the store's setting: the error still says it may be cut short."""
    root = tmp_path / "one"
    sets = ["--set", "mappedFileSizeCommitLog=65536", *TINY_SETS[2:]]
    assert run("produce", root, *sets, "--topic", "T", "--body", "x", "--count", 3).exit_code == 0
    with open(root / "commitlog" / f"{0:020d}", "r+b") as f:
        f.truncate(32768)  # in the zeros past the records
    result = run("inspect", root, *sets)
    assert result.exit_code == 2
    assert "or it was cut short" in result.stderr and "every file is" not in result.stderr


def test_sizes_for_a_rebuild_are_the_commit_logs_only(tmp_path: Path) -> None:
    """A rebuild replaces the consume queues and the index: their sizes are not checked for it."""
    root = tmp_path / "s"
    assert run("produce", root, *TINY_SETS, "--topic", "T", "--body", "x", "--count", 30).exit_code == 0
    other = StoreConfig(**{**TINY, "mappedFileSizeConsumeQueue": 400}, storePathRootDir=str(root))
    with pytest.raises(CorruptStoreError, match="consumequeue/: every file is 200 bytes"):
        check_sizes(str(root), other)
    check_sizes(str(root), other, derived=False)


@needs_vectors
def test_export_to_a_file_and_by_topic(tmp_path: Path, clean_rows: list[dict]) -> None:
    out = tmp_path / "pay.jsonl"
    result = run("export", VECTORS / "sample-clean" / "store", *VECTOR_SETS, "--topic", "PayTopic", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert "exported" in result.stderr
    lines = (VECTORS / "sample-clean" / "expected.jsonl").read_text("utf-8").splitlines()
    want = [line for line in lines if json.loads(line)["topic"] == "PayTopic"]
    assert out.read_text("utf-8").splitlines() == want
    assert len(want) == sum(r["topic"] == "PayTopic" for r in clean_rows) > 0
    # --json: stdout is free for the count, as import --json gives its own
    result = run("export", VECTORS / "sample-clean" / "store", *VECTOR_SETS, "--topic", "PayTopic", "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"exported": len(want), "output": str(out)}


@needs_vectors
def test_export_through_the_console_script_in_a_subprocess() -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-m", "rocketstore.cli.main", "export", str(VECTORS / "sample-clean" / "store"), *VECTOR_SETS],
        capture_output=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (VECTORS / "sample-clean" / "expected.jsonl").read_bytes()
    assert done.stderr == b""
    # and an error: typed, on stderr, exit status 2, no traceback
    done = subprocess.run(
        [sys.executable, "-m", "rocketstore.cli.main", "inspect", str(VECTORS / "sample-clean" / "store")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 2
    assert "mappedFileSizeCommitLog says 1073741824" in done.stderr and "Traceback" not in done.stderr


def run_on_terminal(*args: object, columns: int = 100) -> bytes:
    """The CLI in a subprocess whose stdout and stderr are one pseudo-terminal (``columns`` wide);
    all it wrote there."""
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(SRC), "TERM": "xterm", "COLUMNS": str(columns)}
    command = [sys.executable, "-m", "rocketstore.cli.main", *map(str, args)]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    try:
        while data := os.read(master, 65536):
            chunks.append(data)
    except OSError:  # EIO: the child closed the terminal
        pass
    finally:
        os.close(master)
    assert proc.wait(timeout=120) == 0, b"".join(chunks)
    return b"".join(chunks)


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_export_progress_bar_is_never_beside_data_and_counts_the_topic(tmp_path: Path, small_store: Path) -> None:
    assert run("produce", small_store, *TINY_SETS, "--topic", "TopicB", "--count", 3, "--body", "b").exit_code == 0
    shown = run_on_terminal("export", small_store, *TINY_SETS)
    assert b"\x1b[" not in shown  # JSON lines only: no bar drawn between them
    assert len(jsonl(shown.decode())) == 23
    shown = run_on_terminal("export", small_store, *TINY_SETS, "--topic", "TopicB", "-o", tmp_path / "b.jsonl")
    assert b" 3/3 " in shown  # the bar counts TopicB's messages, not the whole log
    # produce --json's lines on the terminal: no bar between them either (one was drawn before each)
    shown = run_on_terminal(
        "produce", small_store, *TINY_SETS, "--topic", "TopicB", "--count", 3, "--body", "b", "--json"
    )
    assert b"\x1b[" not in shown and len(jsonl(shown.decode())) == 3, shown


# -- import --------------------------------------------------------------------------------------------
KEPT = ("topic", "queueId", "flag", "properties", "body", "bornTimestamp", "bornHost", "storeHost", "reconsumeTimes")


@needs_vectors
def test_import_of_an_export_keeps_every_message(tmp_path: Path) -> None:
    exported = tmp_path / "clean.jsonl"
    assert run("export", VECTORS / "sample-clean" / "store", *VECTOR_SETS, "-o", exported).exit_code == 0
    result = run("import", tmp_path / "new", *VECTOR_SETS, "--input", exported)
    assert result.exit_code == 0, result.stderr
    assert "imported 1555 messages" in result.stdout
    again = run("export", tmp_path / "new", *VECTOR_SETS)
    assert again.exit_code == 0, again.stderr
    before, after = jsonl(exported.read_text("utf-8")), jsonl(again.stdout)
    assert len(before) == len(after) == 1555
    for old, new in zip(before, after, strict=True):
        # stored as it was: no UNIQ_KEY is added to a message without one, the record is as long
        assert {k: new[k] for k in KEPT} == {k: old[k] for k in KEPT}
        assert new["storeSize"] == old["storeSize"]
        assert new["sysFlag"] & 0x70D == old["sysFlag"] & 0x70D  # compression and transaction bits
        assert new["preparedTransactionOffset"] == old["preparedTransactionOffset"]
        assert new["queueOffset"] == old["queueOffset"]  # the queues start at 0 in both stores


def test_import_drops_the_source_store_s_appended_crc_property(tmp_path: Path) -> None:
    """``__CRC32#`` (enabledAppendPropCRC) is the source store's checksum of the source record:
    assigned by the store, as the body CRC, so an import does not carry it into a record it would
    not match (a copy that appends its own has exactly one, and it matches)."""
    source = tmp_path / "source"
    with MessageStore.open(source, StoreConfig(**TINY, enabledAppendPropCRC=True)) as store:
        for i in range(3):
            store.put(Message("T", b"crc %d" % i, tags="TagA", properties={"p": "v"})).raise_for_status()
    exported = tmp_path / "x.jsonl"
    assert run("export", source, *TINY_SETS, "-o", exported).exit_code == 0
    assert all("__CRC32#" in row["properties"] for row in jsonl(exported.read_text("utf-8")))
    for sets in ([], ["--set", "enabledAppendPropCRC=true", "--set", "forceVerifyPropCRC=true"]):
        copy = tmp_path / f"copy{len(sets)}"
        assert run("import", copy, *TINY_SETS, *sets, "-i", exported).exit_code == 0
        rows = jsonl(run("export", copy, *TINY_SETS, *sets).stdout)
        assert [sorted(row["properties"]) for row in rows] == [
            sorted(["TAGS", "UNIQ_KEY", "p", *(["__CRC32#"] if sets else [])])
        ] * 3
        assert run("verify", copy, *TINY_SETS, *sets).exit_code == 0


def test_import_json_output_and_a_bad_line(tmp_path: Path, small_store: Path) -> None:
    exported = run("export", small_store, *TINY_SETS).stdout
    lines = exported.splitlines()
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    result = run("import", tmp_path / "dst", *TINY_SETS, "-i", good, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"imported": 3}

    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines[0] + "\n{not json\n", encoding="utf-8")
    result = run("import", tmp_path / "dst2", *TINY_SETS, "-i", bad)
    assert result.exit_code == 2
    assert "line 2" in result.stderr and "Traceback" not in result.stderr
    bad.write_text(json.dumps({"topic": "TopicA", "body": "%%%"}) + "\n", encoding="utf-8")
    result = run("import", tmp_path / "dst3", *TINY_SETS, "-i", bad)
    assert result.exit_code == 2 and "line 1" in result.stderr and "base64" in result.stderr


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"\xe9t\xe9\n", "not UTF-8"),
        (b'{"topic":"T","body":"","bornTimestamp":1e30}\n', "bornTimestamp 1e+30 is out of range"),
        (b'{"topic":"T","body":"","reconsumeTimes":99999999999}\n', "reconsumeTimes 99999999999 is out of range"),
        (b'{"topic":"T","body":"","flag":Infinity}\n', "flag must be an integer"),
        (b'{"topic":"T","body":"","queueId":-1}\n', "queueId -1 is out of range"),
        (b'{"topic":"T","body":"","storeHost":"::1"}\n', "not a host address"),
        (b'{"topic":"T","tags":"a"}\n', "no body field"),
        (b'{"topic":"T","body":null}\n', "no body field"),
        (  # `export --json > F` of a store with unreadable messages ends so
            b'{"error": {"type": "ProblemsFound", "message": "1 message(s) could not be read"}}\n',
            "the error object a command run with --json writes last, not a message (ProblemsFound: 1 message(s)",
        ),
    ],
)
def test_import_of_a_bad_line_names_it_and_says_what_was_stored(
    tmp_path: Path, small_store: Path, line: bytes, reason: str
) -> None:
    good = run("export", small_store, *TINY_SETS).stdout.splitlines()[:3]
    path = tmp_path / "in.jsonl"
    path.write_bytes(line)
    result = run("import", tmp_path / "a", *TINY_SETS, "-i", path)
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: line 1: {reason}") and "nothing stored" in result.stderr
    path.write_bytes("\n".join(good).encode() + b"\n" + line)
    result = run("import", tmp_path / "b", *TINY_SETS, "-i", path)
    assert result.exit_code == 2 and f"line 4: {reason}" in result.stderr
    assert "3 message(s) before it stored" in result.stderr
    with MessageStore.open(tmp_path / "b", StoreConfig(**TINY), read_only=True) as store:
        assert store.get_max_offset_in_queue("TopicA", 0) + store.get_max_offset_in_queue("TopicA", 1) == 3


def test_import_help_says_what_a_bad_line_leaves() -> None:
    assert "stay stored" in " ".join(run("import", "--help").stdout.split())


# -- options and errors ------------------------------------------------------------------------------------
def test_unknown_set_key_is_named(small_store: Path) -> None:
    result = run("inspect", small_store, "--set", "mappedFileSizeCommitLogg=65536")
    assert result.exit_code == 2
    assert "mappedFileSizeCommitLogg" in result.stderr and "did you mean mappedFileSizeCommitLog" in result.stderr
    assert "Traceback" not in result.stderr
    result = run("inspect", small_store, "--set", "noequalsign")
    assert result.exit_code == 2 and "KEY=VALUE" in result.stderr
    result = run("inspect", small_store, "--set", "mappedFileSizeCommitLog=lots")
    assert result.exit_code == 2 and "must be an integer" in result.stderr


@pytest.mark.parametrize(
    ("key", "value"),
    [("mappedFileSizeCommitLog", 0), ("mappedFileSizeConsumeQueue", 0), ("maxHashSlotNum", -1), ("maxIndexNum", 0)],
)
def test_non_positive_sizes_are_refused_before_anything_is_done(
    tmp_path: Path, small_store: Path, key: str, value: int
) -> None:
    result = run("inspect", small_store, *TINY_SETS, "--set", f"{key}={value}")
    assert result.exit_code == 2 and f"{key} must be a positive integer" in result.stderr
    result = run("produce", tmp_path / "z2", "--set", f"{key}={value}", "--topic", "T", "--body", "x")
    assert result.exit_code == 2 and "positive" in result.stderr
    assert not (tmp_path / "z2").exists()


def test_config_file_in_iso_8859_1_and_one_that_cannot_be_read(small_store: Path, tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    lines = [f"{k}={v}" for k, v in TINY.items()]
    conf.write_bytes(("# r\u00e9glages\nbrokerName=caf\u00e9\n" + "\n".join(lines) + "\n").encode("iso-8859-1"))
    result = run("inspect", small_store, "--config", conf, "--json")
    assert result.exit_code == 0, result.stderr
    if os.path.exists("/proc/self/mem"):  # exists, yet reading it fails (EIO)
        result = run("inspect", small_store, "--config", "/proc/self/mem")
        assert result.exit_code == 2 and "--config /proc/self/mem: cannot read it" in result.stderr


def test_set_wins_over_config(tmp_path: Path, small_store: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# a broker.conf\nbrokerClusterName = DefaultCluster\nmappedFileSizeCommitLog=65536\n"
        "mappedFileSizeConsumeQueue=200\nmaxHashSlotNum=64\nmaxIndexNum=128\nbrokerIP1=127.0.0.1\n",
        encoding="utf-8",
    )
    result = run("inspect", small_store, "--config", conf, "--json")
    assert result.exit_code == 2 and "mappedFileSizeCommitLog says 65536" in result.stderr  # the conf's wrong size
    result = run("inspect", small_store, "--config", conf, "--set", "mappedFileSizeCommitLog=4096", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["commitLog"]["fileSize"] == 4096


def test_missing_store_and_locked_store(tmp_path: Path, small_store: Path) -> None:
    result = run("inspect", tmp_path / "nothing")
    assert result.exit_code == 2 and "does not exist" in result.stderr
    # a folder that holds no store (a mistyped path, a broker home): an error, never "clean" or empty
    empty = tmp_path / "empty"
    empty.mkdir()
    for command in ("inspect", "export", "verify", "query", "recover", "consume", "clean"):
        extra = {"query": ["--topic", "T", "--key", "k"], "consume": ["--topic", "T", "--group", "g"]}.get(command, [])
        result = run(command, empty, *extra)
        assert result.exit_code == 2, (command, result.stdout)
        assert "no store at" in result.stderr and "did you mean" not in result.stderr
    assert not list(empty.iterdir())
    result = run("verify", small_store.parent, *TINY_SETS)
    assert result.exit_code == 2 and f"did you mean {small_store}?" in result.stderr
    with MessageStore.open(small_store, StoreConfig(**TINY)):
        result = run("recover", small_store, *TINY_SETS)
        assert result.exit_code == 2
        assert "lock" in result.stderr.lower() and "Traceback" not in result.stderr


def test_produce_and_import_refuse_the_parent_of_a_store(tmp_path: Path, small_store: Path) -> None:
    lines = tmp_path / "in.jsonl"
    lines.write_text(run("export", small_store, *TINY_SETS).stdout.splitlines()[0] + "\n", encoding="utf-8")
    before = sorted(os.listdir(small_store.parent))
    for args in (("produce", "--topic", "T", "--body", "x"), ("import", "-i", lines)):
        result = run(args[0], small_store.parent, *TINY_SETS, *args[1:])
        assert result.exit_code == 2, result.stdout
        assert f"did you mean {small_store}?" in result.stderr and "Traceback" not in result.stderr
    assert sorted(os.listdir(small_store.parent)) == before  # no store created beside it


def test_export_refuses_an_output_inside_the_store(tmp_path: Path, small_store: Path) -> None:
    segment = sorted((small_store / "commitlog").iterdir())[0]
    before = tree_hashes(small_store)
    (tmp_path / "link").symlink_to(small_store)
    for target in (small_store / "new.jsonl", tmp_path / "link" / "commitlog" / segment.name, segment):
        result = run("export", small_store, *TINY_SETS, "-o", target)
        assert result.exit_code == 2 and "inside the store" in result.stderr, target
    assert tree_hashes(small_store) == before
    assert run("export", small_store, *TINY_SETS, "-o", tmp_path / "ok.jsonl").exit_code == 0


def test_export_writes_through_a_symlink_and_into_a_fifo(tmp_path: Path, small_store: Path) -> None:
    """-o is written as ``>`` writes: a symbolic link's target gets the lines (the link stays), a
    FIFO (or a device such as /dev/null) is written to, not replaced by a regular file."""
    import threading

    expected = run("export", small_store, *TINY_SETS).stdout
    (tmp_path / "target.jsonl").write_text("old\n")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "target.jsonl")
    assert run("export", small_store, *TINY_SETS, "-o", tmp_path / "link.jsonl").exit_code == 0
    assert (tmp_path / "link.jsonl").is_symlink() and (tmp_path / "target.jsonl").read_text() == expected
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = run("export", small_store, *TINY_SETS, "-o", fifo)
    reader.join(30)
    assert result.exit_code == 0 and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert read == [expected.encode()]
    for name in ("/dev/stdout", "/dev/fd/1"):  # links to a pipe that has no path of its own
        out, err = cli_process("export", small_store, *TINY_SETS, "-o", name).communicate(timeout=120)
        assert out == expected.encode(), err
    log = tmp_path / "app.log"
    log.write_text("KEEP\n")
    with open(log, "a") as appended:  # `-o /dev/stdout >> app.log`: appended to, not replaced
        command = [sys.executable, "-m", "rocketstore.cli.main", "export", str(small_store), *TINY_SETS]
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        done = subprocess.run([*command, "-o", "/dev/stdout"], stdout=appended, env=env, timeout=120)
        assert done.returncode == 0
    assert log.read_text() == "KEEP\n" + expected
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    result = run("export", small_store, *TINY_SETS, "-o", tmp_path / "loop1")
    assert result.exit_code == 2 and "Too many levels of symbolic links" in result.stderr
    assert (tmp_path / "loop1").is_symlink()


def test_a_commitlog_that_is_a_file_is_an_error(small_store: Path) -> None:
    shutil.rmtree(small_store / "commitlog")
    (small_store / "commitlog").write_bytes(b"not a folder")
    before = tree_hashes(small_store)
    for command in ("inspect", "export", "recover", "clean"):
        result = run(command, small_store, *TINY_SETS)
        assert result.exit_code == 2, (command, result.stdout)
        assert "the commit log is not a folder" in result.stderr and "Traceback" not in result.stderr
    assert tree_hashes(small_store) == before


@pytest.mark.parametrize("how", ["missing", "zeroed"])
def test_recover_refuses_a_lost_commit_log_without_force(small_store: Path, how: str) -> None:
    if how == "missing":
        shutil.rmtree(small_store / "commitlog")
    else:
        for segment in (small_store / "commitlog").iterdir():
            segment.write_bytes(bytes(segment.stat().st_size))
    before = tree_hashes(small_store)
    result = run("recover", small_store, *TINY_SETS)
    assert result.exit_code == 2 and "--force" in result.stderr and "consume queues" in result.stderr
    for args in (("produce", "--topic", "T", "--body", "x"), ("clean",)):
        result = run(args[0], small_store, *TINY_SETS, *args[1:])
        assert result.exit_code == 2 and "recover --force" in result.stderr
    assert tree_hashes(small_store) == before
    result = run("export", small_store, *TINY_SETS)  # reading says so
    assert result.exit_code == 0 and "WARNING" in result.stderr
    assert ("missing" if how == "missing" else "empty") in result.stderr
    result = run("recover", small_store, *TINY_SETS, "--force", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(run("inspect", small_store, *TINY_SETS, "--json").stdout)["messages"] == 0


def test_a_commit_log_outside_the_store_is_warned_about_and_refused_for_writing(
    tmp_path: Path, small_store: Path
) -> None:
    live = small_store
    copy = copy_store(live, tmp_path / "copy")
    before = tree_hashes(live)
    conf = tmp_path / "live.conf"
    conf.write_text(f"storePathCommitLog={live / 'commitlog'}\n", encoding="utf-8")
    result = run("inspect", copy, *TINY_SETS, "--config", conf, "--json")
    assert result.exit_code == 0 and "WARNING: the commit log is" in result.stderr and str(live) in result.stderr
    lines = tmp_path / "in.jsonl"
    lines.write_text(run("export", live, *TINY_SETS).stdout.splitlines()[0] + "\n", encoding="utf-8")
    for args in (
        ("clean", "--set", "fileReservedTime=0"),
        ("recover",),
        ("recover", "--dry-run"),  # what recover would do: refuse (it said recover would go ahead)
        ("import", "-i", lines),
        ("produce", "--topic", "T", "--body", "x"),
        ("consume", "--topic", "TopicA", "--group", "g", "--commit"),
    ):
        result = run(args[0], copy, *TINY_SETS, "--config", conf, *args[1:])
        assert result.exit_code == 2, (args, result.stdout)
        assert "outside" in result.stderr and "--external-commit-log" in result.stderr
        assert "WARNING" not in result.stderr, args  # not "this command acts on it", then a refusal
    assert tree_hashes(live) == before
    result = run("produce", copy, *TINY_SETS, "--config", conf, "--external-commit-log", "--topic", "T", "--body", "x")
    assert result.exit_code == 0 and "WARNING" in result.stderr
    assert "--external-commit-log" in run("clean", "--help").stdout


def test_every_command_has_the_common_options() -> None:
    for name in ("inspect", "export", "import", "query", "verify", "recover", "produce", "consume"):
        result = run(name, "--help")
        assert result.exit_code == 0
        for option in ("STORE", "--config", "--set", "--json"):
            assert option in result.stdout, (name, option)


# -- inspect ---------------------------------------------------------------------------------------------
@needs_vectors
def test_inspect_json_of_the_crashed_store(tmp_path: Path) -> None:
    root = VECTORS / "sample-crash" / "store"
    before = tree_hashes(root)
    result = run("inspect", root, *VECTOR_SETS, "--json")
    assert result.exit_code == 0, result.stderr
    assert tree_hashes(root) == before
    info = json.loads(result.stdout)
    assert info["abortFile"] is True and info["lastExitOk"] is False
    files = info["commitLog"]["files"]
    assert len(files) == 15 and all(f["size"] == 65536 for f in files)
    assert [f["name"] for f in files if f["droppedByRecovery"]] == ["00000000000000917504"]
    assert info["commitLog"]["minOffset"] == 0 and info["commitLog"]["maxOffset"] == 897285
    assert len(info["queues"]) == 17 and info["messages"] == 1000
    assert {"topic": "OrderTopic", "queueId": 0, "minOffset": 0, "maxOffset": 88, "messages": 88} in info["queues"]
    assert info["checkpoint"] == {
        "physicMsgTimestamp": 0,
        "logicsMsgTimestamp": 0,
        "indexMsgTimestamp": 0,
        "masterFlushedOffset": 0,
        "confirmPhyOffset": 0,
    }
    assert info["recovery"]["abnormal"] is True and info["recovery"]["processOffset"] == 897285
    # the queues were whole, but no index file was (newer than the checkpoint): the whole log
    assert info["dispatchLag"] == {"bytes": 897285, "recordsDispatched": 1000}
    assert [f["indexCount"] for f in info["indexFiles"]] == [2243]  # rebuilt in memory (2242 keys)
    assert [f["name"] for f in info["configFiles"]] == ["delayOffset.json"]


@needs_vectors
def test_inspect_of_the_clean_store_as_tables() -> None:
    result = run("inspect", VECTORS / "sample-clean" / "store", *VECTOR_SETS)
    assert result.exit_code == 0, result.stderr
    for text in ("commit log files", "consume queues", "checkpoint", "index files", "normal", "1555"):
        assert text in result.stdout
    info = json.loads(run("inspect", VECTORS / "sample-clean" / "store", *VECTOR_SETS, "--json").stdout)
    assert info["lastExitOk"] is True and info["messages"] == 1555
    assert info["dispatchLag"]["bytes"] == 0  # the queues were complete
    assert len(info["indexFiles"]) == 2 and all(f["onDisk"] for f in info["indexFiles"])
    assert info["checkpoint"]["physicMsgTimestamp"] == 1795312634207


def test_inspect_shows_dispatch_lag(tmp_path: Path, small_store: Path) -> None:
    # the consume queues of TopicA/1 lose their last 3 units (as if dispatch had not caught up)
    path = small_store / "consumequeue" / "TopicA" / "1" / f"{0:020d}"
    with open(path, "r+b") as f:
        f.seek(7 * 20)
        f.write(bytes(3 * 20))
    (small_store / "abort").touch()
    info = json.loads(run("inspect", small_store, *TINY_SETS, "--json").stdout)
    assert info["dispatchLag"]["bytes"] > 0 and info["dispatchLag"]["recordsDispatched"] >= 3
    assert info["messages"] == 20  # recovered in memory


def test_json_keys_are_camel_case_and_disk_ratios_are_keyed_by_path(small_store: Path) -> None:
    (small_store / "abort").touch()
    info = json.loads(run("inspect", small_store, *TINY_SETS, "--json").stdout)
    recovered = json.loads(run("recover", small_store, *TINY_SETS, "--json").stdout)
    cleaned = json.loads(run("clean", small_store, *TINY_SETS, "--json").stdout)
    for recovery in (info["recovery"], recovered["recovery"]):
        assert "consumeQueueEnd" in recovery and "queueEndsKept" in recovery and "droppedFiles" in recovery
        assert not [key for key in recovery if "_" in key]
    for disk in (info["disk"], cleaned["disk"]):
        assert set(disk["ratios"]) == {str(small_store / "commitlog"), str(small_store / "consumequeue")}
    assert "queueEndsKept" not in run("inspect", small_store, *TINY_SETS).stdout


def test_inspect_says_why_no_segment_is_due_for_deletion(tmp_path: Path, small_store: Path) -> None:
    assert "a single segment: the newest is never deleted" in run("inspect", small_store, *TINY_SETS).stdout
    (tmp_path / "bare" / "commitlog").mkdir(parents=True)
    result = run("inspect", tmp_path / "bare", *TINY_SETS)
    assert result.exit_code == 0 and "- (no segment)" in result.stdout and "single" not in result.stdout


# -- query -----------------------------------------------------------------------------------------------
@needs_vectors
def test_query_by_key_msg_id_and_offset(clean_rows: list[dict]) -> None:
    root = VECTORS / "sample-clean" / "store"
    row = next(r for r in clean_rows if r["keys"] and " " in r["keys"] and r["topic"] == "OrderTopic")
    first_key = row["keys"].split(" ")[0]

    result = run("query", root, *VECTOR_SETS, "--topic", "OrderTopic", "--key", first_key, "--json")
    assert result.exit_code == 0, result.stderr
    assert jsonl(result.stdout) == [without_cq(row)]

    result = run("query", root, *VECTOR_SETS, "--msg-id", row["msgId"], "--json")
    assert jsonl(result.stdout) == [without_cq(row)]
    result = run("query", root, *VECTOR_SETS, "--msg-id", row["msgId"].lower(), "--json")
    assert jsonl(result.stdout) == [without_cq(row)]

    result = run("query", root, *VECTOR_SETS, "--offset", row["commitLogOffset"], "--json")
    assert jsonl(result.stdout) == [without_cq(row)]

    result = run("query", root, *VECTOR_SETS, "--offset", row["commitLogOffset"])  # a table
    assert result.exit_code == 0 and row["msgId"] in result.stdout and "OrderTopic" in result.stdout

    uniq = next(r for r in clean_rows if r["uniqKey"] and r["topic"] == "PayTopic")
    result = run("query", root, *VECTOR_SETS, "--topic", "PayTopic", "--key", uniq["uniqKey"], "--json")
    assert jsonl(result.stdout) == [without_cq(uniq)]
    result = run("query", root, *VECTOR_SETS, "--topic", "PayTopic", "--msg-id", uniq["uniqKey"], "--json")
    assert jsonl(result.stdout) == [without_cq(uniq)]  # not an offset msgId of this store: a UNIQ_KEY


@needs_vectors
def test_query_by_a_shared_key_matches_rmqread(clean_rows: list[dict]) -> None:
    root = VECTORS / "sample-clean" / "store"
    want = sorted(
        (r for r in clean_rows if r["topic"] == "TopicTest" and "order-220" in (r["keys"] or "").split(" ")),
        key=lambda r: r["commitLogOffset"],
    )
    assert len(want) > 1
    result = run("query", root, *VECTOR_SETS, "--topic", "TopicTest", "--key", "order-220", "--max", 64, "--json")
    got = jsonl(result.stdout)
    assert got == [without_cq(r) for r in want]
    if RMQREAD.is_file():
        done = subprocess.run(
            [
                sys.executable,
                str(RMQREAD),
                "query",
                str(root),
                *RMQREAD_GEOMETRY,
                "--topic",
                "TopicTest",
                "--key",
                "order-220",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert [r["commitLogOffset"] for r in jsonl(done.stdout)] == [r["commitLogOffset"] for r in got]
    last_ts = want[-1]["storeTimestamp"]  # index times have a resolution of one second
    in_time = run(
        "query", root, *VECTOR_SETS, "--topic", "TopicTest", "--key", "order-220", "--json", "--begin", last_ts - 1000
    )
    assert want[-1]["commitLogOffset"] in [r["commitLogOffset"] for r in jsonl(in_time.stdout)]
    later = run("query", root, *VECTOR_SETS, "--topic", "TopicTest", "--key", "order-220", "--begin", last_ts + 2000)
    assert later.exit_code == 1
    early = run(
        "query",
        root,
        *VECTOR_SETS,
        "--topic",
        "TopicTest",
        "--key",
        "order-220",
        "--end",
        want[0]["storeTimestamp"] - 2000,
    )
    assert early.exit_code == 1
    assert (
        len(
            jsonl(
                run(
                    "query", root, *VECTOR_SETS, "--topic", "TopicTest", "--key", "order-220", "--max", 1, "--json"
                ).stdout
            )
        )
        == 1
    )


def test_query_not_found_and_bad_arguments(small_store: Path) -> None:
    result = run("query", small_store, *TINY_SETS, "--topic", "TopicA", "--key", "nope")
    assert result.exit_code == 1 and "no message" in result.stderr
    result = run("query", small_store, *TINY_SETS, "--offset", 5)
    assert result.exit_code == 1 and "no record starts at commit-log offset 5" in result.stderr
    result = run("query", small_store, *TINY_SETS, "--msg-id", "7F00000100002A9F00000000000FFFFF")
    assert result.exit_code == 1
    result = run("query", small_store, *TINY_SETS, "--msg-id", "xyz")
    assert result.exit_code == 2 and "offset msgId" in result.stderr
    result = run("query", small_store, *TINY_SETS, "--key", "k1")
    assert result.exit_code == 2 and "--topic" in result.stderr
    result = run("query", small_store, *TINY_SETS, "--offset", 0, "--key", "k1", "--topic", "TopicA")
    assert result.exit_code == 2 and "exactly one" in result.stderr
    for offset in (-5, 2**63):  # no commit-log offset: a usage error, not "not found"
        result = run("query", small_store, *TINY_SETS, "--offset", offset)
        assert result.exit_code == 2 and "--offset" in result.stderr, result.stderr


def test_consume_refuses_a_negative_time_or_an_offset_past_int64(small_store: Path) -> None:
    base = ("consume", small_store, *TINY_SETS, "--topic", "TopicA", "--group", "G")
    for option, value in (("--from-time", -5), ("--from-time", 2**63), ("--from-offset", 2**63), ("--from-offset", -1)):
        result = run(*base, option, value)
        assert result.exit_code == 2 and option in result.stderr, (option, value, result.stderr)
    assert run(*base, "--from-offset", 2**63 - 1).exit_code == 0  # past the queue: moved to its end


def test_output_on_an_ascii_stdout(tmp_path: Path) -> None:
    root = tmp_path / "caf\u00e9"  # a non-ASCII path in the JSON too
    body = "r\u00e9sum\u00e9 " * 10  # a preview cut with an ellipsis
    assert run("produce", root, *TINY_SETS, "--topic", "T", "--body", body).exit_code == 0
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONIOENCODING": "ascii"}

    def cli_ascii(*args: object) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "rocketstore.cli.main", *map(str, args)]
        return subprocess.run(command, capture_output=True, env=env, timeout=120)

    done = cli_ascii("query", root, *TINY_SETS, "--offset", 0)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    assert b"r?sum?" in done.stdout  # replaced, not a crash
    done = cli_ascii("query", root, *TINY_SETS, "--offset", 0, "--json")
    assert base64.b64decode(json.loads(done.stdout.decode("utf-8"))["body"]).decode() == body
    done = cli_ascii("inspect", root, *TINY_SETS, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.decode("utf-8"))["store"] == str(root)  # UTF-8, kept


# -- produce and consume -----------------------------------------------------------------------------
def test_produce_then_consume_with_commit(tmp_path: Path) -> None:
    root = tmp_path / "pc"
    result = run(
        "produce", root, *TINY_SETS, "--topic", "Orders", "--tags", "TagA", "--keys", "o-1 o-2", "--keys", "o-3",
        "--property", "region=eu", "--count", 5, "--body", "payload", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    puts = jsonl(result.stdout)
    assert [p["queueOffset"] for p in puts] == [0, 1, 2, 3, 4]
    assert all(p["status"] == "PUT_OK" and len(p["msgId"]) == 32 for p in puts)
    body_file = tmp_path / "body.bin"
    body_file.write_bytes(b"\x00\x01binary")
    result = run(
        "produce", root, *TINY_SETS, "--topic", "Orders", "--tags", "TagB", "--queue", 1, "--body-file", body_file
    )
    assert result.exit_code == 0 and "PUT_OK" in result.stdout

    result = run("consume", root, *TINY_SETS, "--topic", "Orders", "--group", "g1", "--max", 3, "--commit", "--json")
    assert result.exit_code == 0, result.stderr
    got = jsonl(result.stdout)
    assert [(m["queueId"], m["queueOffset"]) for m in got] == [(0, 0), (0, 1), (0, 2)]
    assert got[0]["keys"] == "o-1 o-2 o-3" and got[0]["properties"]["region"] == "eu"
    assert base64.b64decode(got[0]["body"]) == b"payload" and got[0]["tags"] == "TagA"
    assert "next offset 3 (committed)" in result.stderr

    result = run("consume", root, *TINY_SETS, "--topic", "Orders", "--group", "g1", "--commit", "--json")
    rest = jsonl(result.stdout)
    assert [(m["queueId"], m["queueOffset"]) for m in rest] == [(0, 3), (0, 4), (1, 0)]
    assert base64.b64decode(rest[-1]["body"]) == b"\x00\x01binary"
    with MessageStore.open(root, StoreConfig(**TINY), read_only=True) as store:
        assert store.query_offset("g1", "Orders", 0) == 5 and store.query_offset("g1", "Orders", 1) == 1

    # nothing left for g1; another group starts at the beginning; filters and explicit offsets
    assert jsonl(run("consume", root, *TINY_SETS, "--topic", "Orders", "--group", "g1", "--json").stdout) == []
    caught_up = run("consume", root, *TINY_SETS, "--topic", "Orders", "--group", "g1").stdout
    assert caught_up == "0 message(s) of Orders for g1\n"  # said in a line, not as an empty table
    result = run("consume", root, *TINY_SETS, "--topic", "Orders", "--group", "g2", "--tags", "TagB", "--json")
    assert [(m["queueId"], m["tags"]) for m in jsonl(result.stdout)] == [(1, "TagB")]
    result = run("consume", root, *TINY_SETS, "--topic", "Orders", "--group", "g1", "--queue", 0, "--from-offset", 4)
    assert result.exit_code == 0 and "payload" in result.stdout  # a table
    result = run("consume", root, *TINY_SETS, "--topic", "Orders", "--group", "g1", "--from-committed", "--json")
    assert jsonl(result.stdout) == []
    assert run("verify", root, *TINY_SETS).exit_code == 0


def test_consume_tags_gives_only_those_tags_when_another_tags_hash_collides(tmp_path: Path) -> None:
    """The tags Aa and BB share a Java String.hashCode (what the consume queue holds): --tags Aa
    gives only Aa, and --commit commits past the BB messages, as a consumer's offset moves past them."""
    root = tmp_path / "store"
    for tags in ("BB", "Aa", "BB"):
        assert run("produce", root, *TINY_SETS, "--topic", "C", "--tags", tags, "--body", tags).exit_code == 0
    result = run("consume", root, *TINY_SETS, "--topic", "C", "--group", "g", "--tags", "Aa", "--commit", "--json")
    assert result.exit_code == 0, result.stderr
    assert [(m["queueOffset"], m["tags"]) for m in jsonl(result.stdout)] == [(1, "Aa")]
    assert "next offset 3 (committed)" in result.stderr


def test_tables_show_a_producers_control_characters_escaped(tmp_path: Path) -> None:
    """Tags and keys are the producer's text: an escape sequence in them cleared or recoloured the
    terminal of whoever consumed or queried the message (only the body column escaped them)."""
    root = tmp_path / "store"
    put = ("produce", root, *TINY_SETS, "--topic", "T", "--body", "x", "--tags", "\x1b[2J\n", "--keys", "\x1b[31m")
    assert run(*put).exit_code == 0
    for args in (("consume", "--topic", "T", "--group", "g"), ("query", "--topic", "T", "--key", "\x1b[31m")):
        result = run(args[0], root, *TINY_SETS, *args[1:])
        assert result.exit_code == 0, result.stderr
        assert "\x1b" not in result.stdout and "\\x1b[2J\\n" in result.stdout and "\\x1b[31m" in result.stdout


def test_consume_from_a_time(tmp_path: Path) -> None:
    """--from-time starts each queue at its first message stored at or after the time (epoch ms or
    ISO-8601); a time past every message reads nothing and commits the queue's end."""
    root = tmp_path / "timed"
    produce = ("produce", root, *TINY_SETS, "--topic", "Orders", "--count", 3)
    assert run(*produce, "--body", "early").exit_code == 0
    first = jsonl(run("consume", root, *TINY_SETS, "--topic", "Orders", "--group", "g", "--json").stdout)
    while time.time_ns() // 1_000_000 <= first[-1]["storeTimestamp"]:  # the clock moves on (no sleep)
        pass
    assert run(*produce, "--body", "late").exit_code == 0
    late = jsonl(run("consume", root, *TINY_SETS, "--topic", "Orders", "--group", "g", "--json").stdout)[3:]
    assert [base64.b64decode(m["body"]) for m in late] == [b"late"] * 3
    when = late[0]["storeTimestamp"]
    iso = datetime.datetime.fromtimestamp(when / 1000, datetime.UTC).isoformat(timespec="milliseconds")
    for given in (when, iso, iso.replace("+00:00", "Z"), iso.replace("+00:00", "")):
        result = run("consume", root, *TINY_SETS, "--topic", "Orders", "--group", "g", "--from-time", given, "--json")
        assert result.exit_code == 0, result.stderr
        assert [m["queueOffset"] for m in jsonl(result.stdout)] == [3, 4, 5], given
    result = run(
        "consume", root, *TINY_SETS, "--topic", "Orders", "--group", "g", "--from-time", when + 10**9, "--commit"
    )
    assert result.exit_code == 0 and "0 message(s)" in result.stdout and "next offset 6 (committed)" in result.stderr
    result = run("consume", root, *TINY_SETS, "--topic", "Orders", "--group", "g", "--from-time", "yesterday")
    assert result.exit_code == 2 and "'yesterday' is neither epoch milliseconds nor an ISO-8601 time" in result.stderr
    result = run(
        "consume", root, *TINY_SETS, "--topic", "Orders", "--group", "g", "--from-time", when, "--from-offset", 0
    )
    assert result.exit_code == 2 and "at most one of" in result.stderr


def test_produce_delayed_and_inspect_the_schedule(tmp_path: Path) -> None:
    root = tmp_path / "delayed"
    result = run(
        "produce", root, *TINY_SETS, "--set", "messageDelayLevel=1h 2h", "--topic", "Later", "--delay-level", 2,
        "--count", 3, "--body", "wait", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert [p["queueOffset"] for p in jsonl(result.stdout)] == [0, 1, 2]  # queue 1 of the schedule topic
    info = json.loads(run("inspect", root, *TINY_SETS, "--set", "messageDelayLevel=1h 2h", "--json").stdout)
    assert [(r["level"], r["delay"], r["lag"]) for r in info["schedule"]] == [(2, "2h", 3)]
    table = run("inspect", root, *TINY_SETS, "--set", "messageDelayLevel=1h 2h").stdout
    assert "delayed messages" in table and "2h" in table


def test_produce_needs_one_body_and_consume_of_an_unknown_topic(tmp_path: Path, small_store: Path) -> None:
    result = run("produce", tmp_path / "x", *TINY_SETS, "--topic", "T")
    assert result.exit_code == 2 and "--body" in result.stderr
    result = run("produce", tmp_path / "x", *TINY_SETS, "--topic", "bad topic!", "--body", "b")
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    result = run("consume", small_store, *TINY_SETS, "--topic", "Nothing", "--group", "g")
    assert result.exit_code == 2 and "no topic of" in result.stderr and "'Nothing'" in result.stderr


# -- verify and recover ----------------------------------------------------------------------------------
def test_verify_exit_codes_json_and_max_problems(small_store: Path) -> None:
    result = run("verify", small_store, *TINY_SETS, "--json")
    assert result.exit_code == 0, result.stdout
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["counts"]["records"] == 20 and report["problems"] == []

    # zero a unit in the middle of TopicA/0: the queue ends there, later units and records are problems
    path = small_store / "consumequeue" / "TopicA" / "0" / f"{0:020d}"
    with open(path, "r+b") as f:
        f.seek(3 * 20)
        f.write(bytes(20))
    result = run("verify", small_store, *TINY_SETS)
    assert result.exit_code == 1
    assert "problem: consumequeue/TopicA/0" in result.stdout and "problem(s)" in result.stdout
    result = run("verify", small_store, *TINY_SETS, "--json", "--max-problems", 1)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False and len(report["problems"]) == 1 and report["problemCount"] > 1


def test_verify_of_a_wrong_size_segment_is_exit_1_not_a_traceback(small_store: Path) -> None:
    path = sorted((small_store / "commitlog").iterdir())[0]
    os.truncate(path, 1000)
    result = run("verify", small_store, *TINY_SETS)
    assert result.exit_code == 1
    assert f"commitlog/{path.name}" in result.stdout and "1000 bytes" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert "not scanned (the store could not be loaded)" in result.stdout and "()" not in result.stdout


@needs_vectors
def test_recover_the_crashed_store_in_place_then_verify(tmp_path: Path) -> None:
    root = copy_store(VECTORS / "sample-crash" / "store", tmp_path / "crash")
    result = run("verify", root, *VECTOR_SETS)
    assert result.exit_code == 0 and "note:" in result.stdout  # as rmqread: notes, no problems
    result = run("recover", root, *VECTOR_SETS, "--json")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["abortFileBefore"] is True and info["abortFileAfter"] is False
    assert info["recovery"]["abnormal"] is True and info["recovery"]["droppedFiles"] == ["00000000000000917504"]
    assert info["maxOffset"] == 897285
    assert not (root / "abort").exists()
    assert not (root / "commitlog" / "00000000000000917504").exists()
    result = run("verify", root, *VECTOR_SETS, "--json")
    assert result.exit_code == 0, result.stdout
    report = json.loads(result.stdout)
    assert report["ok"] and report["abortFile"] is False and report["problems"] == []
    exported = run("export", root, *VECTOR_SETS)
    assert exported.stdout_bytes == (VECTORS / "sample-crash" / "recovered.jsonl").read_bytes()
    result = run("recover", root, *VECTOR_SETS)  # a table, and nothing to do the second time
    assert result.exit_code == 0 and "abort file before" in result.stdout


# -- spark (the checks made before Spark starts; Spark itself is tested in test_spark_jobs.py) --------
NO_JAVA = {"JAVA_HOME": "/nonexistent"}  # Spark cannot start: whatever is refused here was refused before it


def run_without_java(*args: object) -> Result:
    try:
        runner = CliRunner(mix_stderr=False, env=NO_JAVA)  # type: ignore[call-arg]
    except TypeError:
        runner = CliRunner(env=NO_JAVA)
    return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_a_spark_master_spark_would_refuse_is_refused_before_the_jvm_starts(small_store: Path) -> None:
    """A --master Spark does not take exits 2 with what it takes, and no Java stack trace."""
    from rocketstore.cli.spark_cmd import _MASTER

    for master in ("bogus://x", "local[two]", "local[0]", "mesos://h:5050", ""):
        result = run_without_java("spark", "verify", small_store, *TINY_SETS, "--master", master)
        assert result.exit_code == 2 and "Spark takes local, local[N]" in result.stderr, (master, result.output)
        assert "Exception in thread" not in result.output
    for master in ("local", "local[*]", "local[3,2]", "spark://h:7077", "k8s://https://h:443", "yarn"):
        assert _MASTER.fullmatch(master), master


def test_spark_commands_check_the_store_before_spark(tmp_path: Path) -> None:
    for command in (["verify"], ["rebuild"], ["export", "--parquet", tmp_path / "out"]):
        result = run_without_java("spark", command[0], tmp_path, *command[1:])
        assert result.exit_code == 2 and "no store at" in result.stderr, (command, result.stderr)
    assert "List at most N problems" in run("spark", "verify", "--help").stdout


def test_a_store_path_root_dir_other_than_store_is_named_in_a_warning(tmp_path: Path, small_store: Path) -> None:
    """STORE is the store's folder (a broker.conf's storePathRootDir is not): another one given is
    said to be ignored, not silently."""
    result = run("inspect", small_store, *TINY_SETS, "--set", f"storePathRootDir={tmp_path / 'elsewhere'}")
    assert result.exit_code == 0
    assert "storePathRootDir" in result.stderr and str(tmp_path / "elsewhere") in result.stderr
    assert "ignored" in result.stderr and not (tmp_path / "elsewhere").exists()
    result = run("inspect", small_store, *TINY_SETS, "--set", f"storePathRootDir={small_store}")
    assert "storePathRootDir" not in result.stderr


def test_spark_export_checks_its_arguments_before_spark(tmp_path: Path, small_store: Path) -> None:
    (tmp_path / "exists").mkdir()
    out = tmp_path / "out"
    cases = [
        (["--parquet", tmp_path / "exists"], "exists: give --overwrite"),
        (["--parquet", small_store / "pq", "--overwrite"], "overlap"),
        (["--parquet", tmp_path, "--overwrite"], "overlap"),  # replacing it would delete the store
        (["--parquet", out, "--topics", "["], "neither a topic name nor a pattern"),
        (["--parquet", out, "--topics", "NoSuch"], "no topic of"),
        (["--parquet", out, "--begin", 5, "--end", 4], "must be before --end"),
        (["--parquet", out, "--begin", 2**64], "--begin"),  # no store time: past a Java long
        (["--parquet", out, "--end", -(2**63) - 1], "--end"),
    ]
    for args, message in cases:
        result = run_without_java("spark", "export", small_store, *TINY_SETS, *args)
        assert result.exit_code == 2 and message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert not out.exists() and os.listdir(tmp_path / "exists") == []
    result = run_without_java("spark", "rebuild", small_store, *TINY_SETS, "--set", f"storePathCommitLog={tmp_path}")
    assert result.exit_code == 2 and "--external-commit-log" in result.stderr
    for option in ("--begin", "--end"):  # query's key-query time bounds too
        result = run("query", small_store, *TINY_SETS, "--topic", "T", "--key", "k", option, 2**64)
        assert result.exit_code == 2 and option in result.stderr and "range" in result.stderr, result.stderr


def _spark_subprocess(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    pytest.importorskip("pyspark")
    env = {**os.environ, "PYTHONPATH": str(SRC), "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})}
    command = [sys.executable, "-m", "rocketstore.cli.main", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def test_spark_that_cannot_start_is_an_error_not_a_traceback(tmp_path: Path, small_store: Path) -> None:
    """Spark whose JVM cannot start (here: JAVA_HOME names no Java) is an error naming the master."""
    args = ("spark", "export", small_store, *TINY_SETS, "--parquet", tmp_path / "o", "--master", "local[1]")
    done = _spark_subprocess(*args, env={"JAVA_HOME": str(tmp_path / "no-java")})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "error: Spark did not start with --master local[1]" in done.stderr


# -- what a new user ran into ------------------------------------------------------------------------
def cli_process(*args: object, **kwargs: object) -> subprocess.Popen:
    """The CLI in a subprocess, stdout and stderr piped (unless ``stdout=`` says where it goes)."""
    env = {**os.environ, "PYTHONPATH": str(SRC), **kwargs.pop("env", {})}  # type: ignore[dict-item]
    command = [sys.executable, "-m", "rocketstore.cli.main", *map(str, args)]
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.Popen(command, env=env, **streams)  # type: ignore[call-overload]


def test_consume_names_an_unreadable_message_once(tmp_path: Path) -> None:
    """consume names a unit whose record cannot be read in its own warning (where, and why): the
    reader's warning about the same unit (GetResult.unreadable) is not printed beside it."""
    root = tmp_path / "store"
    with MessageStore.open(root, StoreConfig(**TINY)) as store:
        body = "x" * 1000  # 5 segments: recovery, which checks the last 3, keeps the first whole
        phys = [store.put(Message("D", body)).raise_for_status().commit_log_offset for _ in range(20)]
    with open(root / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(phys[1] + 4)  # its magic code
        f.write(b"\0\0\0\0")
    process = cli_process("consume", root, *TINY_SETS, "--topic", "D", "--group", "g", "--json")
    out, err = process.communicate(timeout=120)
    assert process.returncode == 1, err
    assert [row.get("queueOffset") for row in jsonl(out.decode())][:-1] == [0, *range(2, 20)]
    assert err.decode().count(f"queue offset 1 (commit-log offset {phys[1]}") == 1, err


HOLD = """
import json, sys
from rocketstore import MessageStore, StoreConfig
store = MessageStore.open(sys.argv[1], StoreConfig(**json.loads(sys.argv[2])))
print("open", flush=True)
sys.stdin.read()
store.shutdown()
"""


@contextlib.contextmanager
def open_in_another_process(root: Path) -> Iterator[int]:
    """STORE open for writing in a child process (its lock held, abort present) until the block ends."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root), json.dumps(TINY)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "open\n"
        yield child.pid
    finally:
        assert child.stdin is not None
        child.stdin.close()
        assert child.wait(timeout=60) == 0


def test_produce_says_where_a_delayed_message_is_and_that_its_level_was_capped(tmp_path: Path) -> None:
    root = tmp_path / "delay"
    result = run("produce", root, *TINY_SETS, "--topic", "P", "--body", "x", "--delay-level", 19)
    assert result.exit_code == 0, result.stderr
    assert "in SCHEDULE_TOPIC_XXXX/17 (delay level 18, 2h): delivered to P/0 when due" in result.stdout
    assert "P/0" not in result.stdout.replace("delivered to P/0", "")
    assert "delay level 19 is above the highest level" in result.stderr and "capped at 18 (2h)" in result.stderr
    assert "the schedule service starts 1 s after open" in result.stderr
    result = run(
        "produce", root, *TINY_SETS, "--topic", "P", "--queue", 2, "--body", "x", "--delay-level", 19, "--json"
    )
    (row,) = jsonl(result.stdout)
    assert (row["topic"], row["queueId"], row["queueOffset"]) == ("SCHEDULE_TOPIC_XXXX", 17, 1)
    assert (row["realTopic"], row["realQueueId"], row["delayLevel"], row["delay"]) == ("P", 2, 18, "2h")
    result = run("produce", root, *TINY_SETS, "--topic", "P", "--body", "x", "--delay-level", 3, "--json")
    assert "capped" not in result.stderr and "after 10s only while" in result.stderr
    assert jsonl(result.stdout)[0]["queueId"] == 2
    result = run("produce", root, *TINY_SETS, "--topic", "P", "--body", "x", "--json")
    assert "note" not in result.stderr and "realTopic" not in result.stdout
    assert (jsonl(result.stdout)[0]["topic"], jsonl(result.stdout)[0]["queueId"]) == ("P", 0)
    with MessageStore.open(root, StoreConfig(**TINY), read_only=True) as store:
        assert store.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 17) == 2
        assert store.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 2) == 1
        assert store.get_max_offset_in_queue("P", 0) == 1


def test_export_of_a_topic_the_store_lacks_is_refused_or_warned_about(tmp_path: Path, small_store: Path) -> None:
    out = tmp_path / "none.jsonl"
    result = run("export", small_store, *TINY_SETS, "--topic", "Nope", "-o", out)
    assert result.exit_code == 2 and result.stdout == ""
    assert f"no topic of {small_store} matches --topic 'Nope' (it has: TopicA)" in result.stderr
    assert not out.exists()
    result = run("export", small_store, *TINY_SETS, "--topic", "Nope", "--topic", "TopicA")
    assert result.exit_code == 0 and len(jsonl(result.stdout)) == 20
    assert "has no topic 'Nope'" in result.stderr


def test_export_into_a_closed_pipe_exits_0_quietly(tmp_path: Path) -> None:
    root = tmp_path / "many"
    sets = ["--set", "mappedFileSizeCommitLog=1048576", "--set", "brokerIP1=127.0.0.1"]
    assert run("produce", root, *sets, "--topic", "T", "--body", "x" * 100, "--count", 3000).exit_code == 0
    for env in ({}, {"PYTHONIOENCODING": "ascii"}):  # stdout as it is, and re-wrapped as UTF-8
        proc = cli_process("export", root, *sets, env=env)  # ~1.5 MB: far more than a pipe holds
        assert proc.stdout is not None and proc.stderr is not None
        assert json.loads(proc.stdout.readline())["topic"] == "T"
        proc.stdout.close()  # as `| head -1` does
        stderr = proc.stderr.read()
        assert proc.wait(timeout=120) == 0, stderr
        assert stderr == b"", stderr


def test_produce_json_reports_each_message_as_it_is_stored(tmp_path: Path) -> None:
    root = tmp_path / "stream"
    sets = ["--set", "mappedFileSizeCommitLog=16777216", "--set", "brokerIP1=127.0.0.1"]
    count = 300_000
    proc = cli_process("produce", root, *sets, "--topic", "T", "--body", "x", "--count", count, "--json")
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()  # the first message's line, not the last's
    finally:
        proc.kill()  # as the user's run was killed
        proc.wait(timeout=60)
    rows = [json.loads(first), *jsonl(proc.stdout.read().decode())]
    assert [r["queueOffset"] for r in rows] == list(range(len(rows)))
    (root / "abort").touch()  # killed: recover (in memory) what it stored
    with MessageStore.open(root, StoreConfig(mappedFileSizeCommitLog=16777216), read_only=True) as store:
        stored = store.get_max_offset_in_queue("T", 0)
    assert stored < count  # the run was killed before its end, and yet ...
    assert stored - 1 <= len(rows) <= stored  # ... every message it stored was reported (but one in flight)


def test_produce_stopped_says_how_many_were_stored(tmp_path: Path) -> None:
    root = tmp_path / "stopped"
    sets = ["--set", "mappedFileSizeCommitLog=16777216", "--set", "brokerIP1=127.0.0.1"]
    proc = cli_process("produce", root, *sets, "--topic", "T", "--body", "x", "--count", 2_000_000)
    try:
        for _ in range(600):  # until the first message is dispatched
            if (root / "consumequeue" / "T" / "0").is_dir() or proc.poll() is not None:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert b"message(s) stored in T/0 before this stopped (up to queue offset" in err, err


def test_inspect_and_spark_rebuild_of_a_store_another_process_has_open(small_store: Path) -> None:
    with open_in_another_process(small_store) as pid:
        result = run("inspect", small_store, *TINY_SETS)
        assert result.exit_code == 0, result.stderr
        assert f"in use: another process (pid {pid}) has it open" in result.stdout
        assert "abnormal (abort file present)" not in result.stdout
        info = json.loads(run("inspect", small_store, *TINY_SETS, "--json").stdout)
        assert info["lockHeldBy"] == pid and info["abortFile"] is True
        # refused before Spark starts (without Java it could not start): exit 2, the store named
        result = run_without_java("spark", "rebuild", small_store, *TINY_SETS)
        assert result.exit_code == 2, result.stderr
        assert f"error: {small_store} is in use: another process (pid {pid}) holds its lock" in result.stderr
    info = json.loads(run("inspect", small_store, *TINY_SETS, "--json").stdout)
    assert info["lockHeldBy"] is None and info["lastExitOk"] is True
    assert "last exit" in run("inspect", small_store, *TINY_SETS).stdout


def test_inspect_of_a_clean_store_does_not_suggest_recovery_had_work(small_store: Path) -> None:
    info = json.loads(run("inspect", small_store, *TINY_SETS, "--json").stdout)
    # the open re-reads from the index's last record (its endPhyOffset is that record's start):
    # one record, which dispatch finds already queued and indexed
    assert info["dispatchLag"] == {"bytes": 0, "recordsDispatched": 1}
    table = run("inspect", small_store, *TINY_SETS).stdout
    assert "dispatched by recovery" not in table and "records re-checked by the open" in table
    assert "ok (no abort file)" in table


# -- found by review: query, consume, clean, produce ---------------------------------------------------
def test_query_begin_and_end_are_store_times_in_ms(tmp_path: Path) -> None:
    """--begin and --end bound the store time to the millisecond (the index keeps whole seconds
    from its file's start)."""
    root = tmp_path / "store"
    with MessageStore.open(root, StoreConfig(**TINY)) as store:
        for i in range(3):
            store.put(Message("T", f"m{i}", keys="K")).raise_for_status()
            time.sleep(0.005)
        assert store.wait_for_dispatch()
    found = jsonl(run("query", root, *TINY_SETS, "--topic", "T", "--key", "K", "--json").stdout)
    times = [m["storeTimestamp"] for m in found]
    assert len(times) == 3 and times == sorted(set(times))

    def bodies(*bounds: object) -> list[str]:
        result = run("query", root, *TINY_SETS, "--topic", "T", "--key", "K", "--json", *bounds)
        return [base64.b64decode(m["body"]).decode() for m in jsonl(result.stdout)]

    assert bodies("--begin", times[1]) == ["m1", "m2"]
    assert bodies("--end", times[0] - 1) == []
    assert bodies("--end", times[1] - 1) == ["m0"]
    assert bodies("--begin", times[1], "--end", times[1]) == ["m1"]
    assert bodies("--begin", times[0], "--end", times[2], "--max", 2) == ["m1", "m2"]  # the newest, as the index


def test_query_by_a_client_msg_id_without_topic_says_to_give_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    put = jsonl(run("produce", root, *TINY_SETS, "--topic", "T", "--body", "b", "--json").stdout)[0]
    result = run("query", root, *TINY_SETS, "--msg-id", put["uniqKey"])
    assert result.exit_code == 1
    assert "no record starts at commit-log offset" in result.stderr and "UNIQ_KEY" in result.stderr
    assert "--topic" in result.stderr
    result = run("query", root, *TINY_SETS, "--msg-id", put["uniqKey"], "--topic", "T", "--json")
    assert result.exit_code == 0 and jsonl(result.stdout)[0]["uniqKey"] == put["uniqKey"]


def test_query_by_a_client_msg_id_of_any_form_with_topic(tmp_path: Path) -> None:
    """--msg-id with --topic is looked up as a UNIQ_KEY: a RocketMQ 5 gRPC client's 34-character
    id was refused as "not an offset msgId" (a usage error), and a UNIQ_KEY typed in lower case
    was upper-cased first, so the one stored in lower case was "not in the index"."""
    root = tmp_path / "store"
    grpc, lower = "0100155D2A3B4C0000000000000000AB01", "7f0000011b6e0f3a00000000000000ab"
    with MessageStore.open(root, StoreConfig(TINY)) as store:  # ids a client set (produce sets its own)
        for uniq in (grpc, lower):
            store.put(Message("T", uniq, properties={"UNIQ_KEY": uniq})).raise_for_status()
        for _ in range(40):  # newer messages with the gRPC id as a KEYS key: more than one query's hits
            store.put(Message("T", b"k", keys=[grpc])).raise_for_status()
    for uniq in (grpc, lower):
        result = run("query", root, *TINY_SETS, "--topic", "T", "--msg-id", uniq, "--json")
        assert result.exit_code == 0, result.stderr
        assert [r["uniqKey"] for r in jsonl(result.stdout)] == [uniq]
    result = run("query", root, *TINY_SETS, "--topic", "T", "--msg-id", grpc.lower(), "--json")
    assert result.exit_code == 0  # a client's ids are upper case: found so
    assert [r["uniqKey"] for r in jsonl(result.stdout)] == [grpc]
    result = run("query", root, *TINY_SETS, "--topic", "T", "--msg-id", "no-such-id")
    assert result.exit_code == 1 and "nor the UNIQ_KEY of a message of topic 'T'" in result.stderr
    result = run("query", root, *TINY_SETS, "--msg-id", grpc)  # no topic: no index to look in
    assert result.exit_code == 2 and "with --topic" in result.stderr
    result = run("query", root, *TINY_SETS, "--topic", "T", "--msg-id", " ")
    assert result.exit_code == 2 and "an empty msgId" in result.stderr


def test_query_with_a_topic_answers_only_with_that_topics_messages(tmp_path: Path) -> None:
    """--topic with --msg-id or --offset: a record of another topic is not the answer (the topic it
    is of is named); a topic name RocketMQ refuses is bad input (exit status 2), with any of them."""
    root = tmp_path / "store"
    put = jsonl(run("produce", root, *TINY_SETS, "--topic", "T", "--body", "b", "--json").stdout)[0]
    assert run("produce", root, *TINY_SETS, "--topic", "U", "--body", "c").exit_code == 0
    for how in (("--offset", 0), ("--msg-id", put["msgId"])):
        result = run("query", root, *TINY_SETS, *how, "--topic", "U", "--json")
        assert (result.exit_code, result.stdout) == (1, ""), result.stdout
        assert "of topic 'T'" in result.stderr, result.stderr
        result = run("query", root, *TINY_SETS, *how, "--topic", "T", "--json")
        assert result.exit_code == 0 and jsonl(result.stdout)[0]["msgId"] == put["msgId"]
    for bad in ("bad/x", "", "a" * 128):
        for how in (("--offset", 0), ("--msg-id", put["msgId"]), ("--key", "k")):
            result = run("query", root, *TINY_SETS, *how, "--topic", bad)
            assert result.exit_code == 2 and "--topic" in result.stderr, (bad, how, result.stderr)


def test_consume_and_clean_refuse_a_topic_or_queue_the_store_lacks(small_store: Path) -> None:
    offsets = small_store / "config" / "consumerOffset.json"
    before = offsets.read_bytes() if offsets.exists() else None
    result = run("consume", small_store, *TINY_SETS, "--topic", "TopicZ", "--group", "g", "--commit")
    assert result.exit_code == 2 and "no topic of" in result.stderr and "TopicA" in result.stderr
    result = run("consume", small_store, *TINY_SETS, "--topic", "TopicA", "--group", "g", "--queue", 7, "--commit")
    assert result.exit_code == 2 and "has no queue 7" in result.stderr
    assert (offsets.read_bytes() if offsets.exists() else None) == before  # no offset written
    result = run("consume", small_store, *TINY_SETS, "--topic", "TopicA", "--group", "g", "--queue", 3, "--json")
    assert result.exit_code == 0  # below readQueueNums (4): a queue with no message yet
    result = run("consume", small_store, *TINY_SETS, "--topic", "TopicA", "--group", "g", "--queue", 4)
    assert result.exit_code == 2 and "its queues: 0-3" in result.stderr
    result = run("clean", small_store, *TINY_SETS, "--delete-topic", "TopicZ", "--json")
    assert result.exit_code == 2 and "--delete-topic 'TopicZ'" in result.stderr
    assert (small_store / "consumequeue" / "TopicA").is_dir()


def test_a_topic_or_queue_refused_leaves_a_crashed_store_as_it_was(tmp_path: Path, hash_tree) -> None:
    """consume --commit and clean --delete-topic refuse a topic or queue the store lacks, and consume
    a group name RocketMQ refuses, before they open it for writing: a crashed store (abort left) is
    not recovered and rewritten by a typo."""
    root = tmp_path / "store"
    assert run("produce", root, *TINY_SETS, "--topic", "T", "--body", "b", "--count", 3).exit_code == 0
    (root / "abort").touch()
    before = hash_tree(root)
    for refused in (
        ("consume", "--topic", "Z", "--group", "g", "--commit"),
        ("consume", "--topic", "T", "--group", "g", "--queue", 9, "--commit"),
        ("clean", "--delete-topic", "Z"),
        ("consume", "--topic", "T", "--group", "bad g", "--commit"),
    ):
        result = run(refused[0], root, *TINY_SETS, *refused[1:])
        assert result.exit_code == 2, refused
        assert any(why in result.stderr for why in ("no topic of", "no queue 9", "'bad g' has characters")), refused
        assert hash_tree(root) == before, refused
    result = run("consume", root, *TINY_SETS, "--topic", "T", "--group", "g", "--commit", "--json")
    assert result.exit_code == 0 and len(jsonl(result.stdout)) == 3  # a good one opens it for writing
    assert not (root / "abort").exists()


def test_a_topic_topics_json_lists_without_messages_is_a_topic_of_the_store(tmp_path: Path) -> None:
    """A topic made with no message yet (topics.json lists it, no queue holds a unit) is one the
    store has: export, consume and clean --delete-topic take it alike (export and consume read
    nothing of it); one the store lacks is refused by all three."""
    root = tmp_path / "store"
    assert run("produce", root, *TINY_SETS, "--topic", "T", "--body", "b").exit_code == 0
    with MessageStore.open(root, StoreConfig(**TINY)) as store:
        store.topics.ensure("Empty", 0)
    for command in (("export", "--topic"), ("consume", "--group", "g", "--topic"), ("clean", "--delete-topic")):
        result = run(command[0], root, *TINY_SETS, *command[1:], "Nope")
        assert result.exit_code == 2 and "no topic of" in result.stderr, (command, result.stderr)
        result = run(command[0], root, *TINY_SETS, *command[1:], "Empty", "--json")
        assert result.exit_code == 0, (command, result.stderr)
        assert command[0] == "clean" or jsonl(result.stdout) == [], command


def test_consume_of_a_queue_of_a_topic_with_two_billion_queues(tmp_path: Path) -> None:
    """`produce --queue 2147483646` makes a topic of 2^31 - 1 queues: `consume --queue` of one
    of them reads it, and one past them is refused, without listing every queue."""
    root = tmp_path / "store"
    assert run("produce", root, *TINY_SETS, "--topic", "T", "--body", "b", "--queue", 2147483646).exit_code == 0
    result = run("consume", root, *TINY_SETS, "--topic", "T", "--group", "g", "--queue", 2147483646, "--json")
    assert result.exit_code == 0, result.stderr
    assert [m["body"] for m in jsonl(result.stdout)] == ["Yg=="]
    result = run("consume", root, *TINY_SETS, "--topic", "T", "--group", "g", "--queue", 5, "--json")
    assert result.exit_code == 0 and jsonl(result.stdout) == []
    result = run("consume", root, *TINY_SETS, "--topic", "T", "--group", "g", "--queue", 2147483647)
    assert result.exit_code == 2 and "its queues: 0-2147483646" in result.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_produce_shows_the_whole_msg_id_on_an_80_column_terminal(tmp_path: Path) -> None:
    root = tmp_path / "store"
    shown = run_on_terminal("produce", root, *TINY_SETS, "--topic", "T", "--body", "b", columns=80)
    msg_id = jsonl(run("query", root, *TINY_SETS, "--offset", 0, "--json").stdout)[0]["msgId"]
    assert msg_id.encode() in shown, shown.decode(errors="replace")


def test_inspect_dispatch_lag_counts_what_the_index_lacked(small_store: Path) -> None:
    """The lag was the consume queues' alone: an index missing its last records showed 0."""
    index_files = sorted((small_store / "index").iterdir())
    for path in index_files:
        path.unlink()
    (small_store / "abort").touch()
    info = json.loads(run("inspect", small_store, *TINY_SETS, "--json").stdout)
    assert info["dispatchLag"]["bytes"] == info["commitLog"]["maxOffset"] - info["commitLog"]["minOffset"] > 0
    off = json.loads(run("inspect", small_store, *TINY_SETS, "--set", "messageIndexEnable=false", "--json").stdout)
    assert off["dispatchLag"]["bytes"] == 0  # nothing new is indexed then: the queues alone count


def test_inspect_shows_no_lag_for_a_tail_the_index_never_holds(tmp_path: Path) -> None:
    """Records without keys nor UNIQ_KEY are never indexed: the index's last entry lags behind
    them after a clean exit, and that is no dispatch lag (93317fb counted it)."""
    root = tmp_path / "s"
    with MessageStore.open(root, StoreConfig(**TINY)) as store:
        store.put(Message("T", b"keyed", keys="k")).raise_for_status()
        for i in range(5):
            store.put_as_is(Message("T", b"plain %d" % i)).raise_for_status()
    info = json.loads(run("inspect", root, *TINY_SETS, "--json").stdout)
    assert info["lastExitOk"] is True
    assert info["dispatchLag"]["bytes"] == 0


def test_inspect_shows_no_lag_for_an_empty_store(tmp_path: Path) -> None:
    root = tmp_path / "s"
    MessageStore.open(root, StoreConfig(**TINY)).shutdown()
    info = json.loads(run("inspect", root, *TINY_SETS, "--json").stdout)
    assert info["commitLog"]["maxOffset"] == 0 and info["dispatchLag"]["bytes"] == 0


BUSY_SETS = [*TINY_SETS, "--set", "maxIndexNum=1000"]


@pytest.fixture(scope="module")
def busy_key_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """200 messages of T with key tk, 10 ms apart (about 100 in an index second), and their store times."""
    root = tmp_path_factory.mktemp("busy") / "store"
    times = []
    with MessageStore.open(root, StoreConfig(**{**TINY, "maxIndexNum": 1000})) as store:
        for i in range(200):
            times.append(store.put(Message("T", f"m{i}", keys="tk")).raise_for_status().store_timestamp)
            time.sleep(0.01)
        assert store.wait_for_dispatch()
    return root, times


def _bodies(result: Result) -> list[str]:
    return [base64.b64decode(m["body"]).decode() for m in jsonl(result.stdout)]


def test_query_end_is_not_crowded_out_by_the_keys_stored_just_after_it(busy_key_store: tuple[Path, list[int]]) -> None:
    """The index keeps whole seconds and gives at most maxMsgsNumBatch hits a query, newest first:
    the messages in the second after --end must not hide the ones before it."""
    root, times = busy_key_store
    result = run("query", root, *BUSY_SETS, "--topic", "T", "--key", "tk", "--json", "--end", times[19])
    assert result.exit_code == 0, result.stderr
    assert _bodies(result) == [f"m{i}" for i in range(20)]
    result = run("query", root, *BUSY_SETS, "--topic", "T", "--key", "tk", "--json", "--end", times[99], "--max", 5)
    assert _bodies(result) == [f"m{i}" for i in range(95, 100)]  # the newest in range
    begin, end = times[40], times[59]
    result = run("query", root, *BUSY_SETS, "--topic", "T", "--key", "tk", "--json", "--begin", begin, "--end", end)
    assert _bodies(result) == [f"m{i}" for i in range(40, 60)]


def test_query_max_above_max_msgs_num_batch_warns_that_the_result_is_capped(
    busy_key_store: tuple[Path, list[int]],
) -> None:
    root, _times = busy_key_store
    key = ["query", root, *BUSY_SETS, "--topic", "T", "--key", "tk", "--json"]
    result = run(*key, "--max", 100)
    assert result.exit_code == 0
    assert _bodies(result) == [f"m{i}" for i in range(136, 200)]  # the newest 64; stdout holds only them
    assert "at most maxMsgsNumBatch (64) are returned" in result.stderr
    assert "--set maxMsgsNumBatch=100" in result.stderr
    result = run(*key, "--max", 100, "--set", "maxMsgsNumBatch=100")
    assert _bodies(result) == [f"m{i}" for i in range(100, 200)]
    assert "--max 100 gives the newest 100" in result.stderr  # 200 match
    result = run(*key, "--max", 100, "--end", _times[29])  # 30 match: nothing was left out
    assert len(_bodies(result)) == 30 and result.stderr == ""
    result = run(*key, "--max", 64)  # what was asked for, and more match: said so
    assert _bodies(result) == [f"m{i}" for i in range(136, 200)]
    assert "WARNING: more messages match; --max 64 gives the newest 64" in result.stderr
    assert "--set maxMsgsNumBatch" in result.stderr  # a higher --max needs it too
    result = run(*key, "--max", 5)
    assert _bodies(result) == [f"m{i}" for i in range(195, 200)]
    assert result.stderr == "WARNING: more messages match; --max 5 gives the newest 5: give a higher --max\n"
    result = run(*key, "--max", 30, "--end", _times[29])  # exactly as many match as asked for
    assert len(_bodies(result)) == 30 and result.stderr == ""
    assert "maxMsgsNumBatch" in run("query", "--help").stdout


def test_query_hits_one_message_holds_twice_do_not_end_the_search_early(tmp_path: Path) -> None:
    """A message with keys "D D" has two index hits: the query asked the index for 32 hits, got
    16 messages, took that for "the index has no more" and gave 32 of 40 with no warning."""
    root = tmp_path / "store"
    with MessageStore.open(root, StoreConfig(**{**TINY, "maxIndexNum": 1000})) as store:
        for i in range(40):
            store.put(Message("T", f"m{i}", keys="D D")).raise_for_status()
        assert store.wait_for_dispatch()
    result = run("query", root, *BUSY_SETS, "--topic", "T", "--key", "D", "--json", "--max", 40)
    assert result.exit_code == 0, result.stderr
    assert _bodies(result) == [f"m{i}" for i in range(40)] and result.stderr == ""
    result = run("query", root, *BUSY_SETS, "--topic", "T", "--key", "D", "--json", "--max", 20)
    assert _bodies(result) == [f"m{i}" for i in range(20, 40)] and "more messages match" in result.stderr


@contextlib.contextmanager
def read_only_view(folder: Path, view: Path) -> Iterator[Path]:
    """``folder`` seen read-only at ``view`` (a read-only bind mount: even root cannot write)."""
    view.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(folder), str(view)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"this machine forbids bind mounts: {mounted.stderr.decode().strip()}")
    try:
        remount = subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], capture_output=True)
        if remount.returncode:
            pytest.skip(f"this machine forbids a read-only remount: {remount.stderr.decode().strip()}")
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)


def test_recover_on_a_read_only_file_system_is_worded_as_the_other_writers(tmp_path: Path, small_store: Path) -> None:
    with read_only_view(small_store, tmp_path / "ro") as root:
        errors = {}
        for args in (("recover",), ("produce", "--topic", "T", "--body", "x"), ("clean",)):
            result = run(args[0], root, *TINY_SETS, *args[1:])
            assert result.exit_code == 2 and "Traceback" not in result.stderr, args
            errors[args[0]] = result.stderr
        assert errors["recover"] == errors["produce"] == errors["clean"]
        assert f"{root}/lock cannot be opened: Read-only file system" in errors["recover"]
        assert run("recover", root, *TINY_SETS, "--dry-run").exit_code == 0  # it writes nothing


def test_a_msg_id_not_found_says_why_with_or_without_topic(tmp_path: Path) -> None:
    """An offset msgId whose offset starts no record, or starts one of another store host (its
    msgId differs), says which, with or without --topic (it said "not an offset msgId of this store",
    or nothing with --topic)."""
    root = tmp_path / "store"
    first = jsonl(run("produce", root, *TINY_SETS, "--topic", "T", "--body", "b", "--json").stdout)[0]
    other_host = ["--set", "brokerIP1=10.0.0.9"]
    second = jsonl(run("produce", root, *TINY_SETS, *other_host, "--topic", "T", "--body", "c", "--json").stdout)[0]
    moved = first["msgId"][:-16] + f"{second['commitLogOffset']:016X}"  # the first's host, the second's offset
    off_record = first["msgId"][:-16] + f"{first['commitLogOffset'] + 1:016X}"
    for extra in ([], ["--topic", "T"]):
        result = run("query", root, *TINY_SETS, "--msg-id", moved, *extra)
        assert result.exit_code == 1 and f"has msgId {second['msgId']}" in result.stderr, result.stderr
        assert "another store host" in result.stderr
        result = run("query", root, *TINY_SETS, "--msg-id", off_record, *extra)
        assert result.exit_code == 1, result.stderr
        assert f"no record starts at commit-log offset {first['commitLogOffset'] + 1}" in result.stderr, result.stderr


def test_inspect_names_the_folder_of_each_segment_of_a_commit_log_in_several(tmp_path: Path) -> None:
    """With storePathCommitLog of several folders (and a read-only one), inspect says where each
    segment is: the table's name column and --json's path, relative to STORE."""
    root = tmp_path / "s"
    folders = [root / name for name in ("a", "b")]
    sets = [*TINY_SETS, "--set", f"storePathCommitLog={','.join(map(str, folders))}"]
    assert run("produce", root, *sets, "--topic", "T", "--body", "x" * 400, "--count", 18).exit_code == 0
    sets += ["--set", f"readOnlyCommitLogStorePaths={root / 'c'}"]
    (root / "c").mkdir()
    shutil.move(str(next((root / "a").iterdir())), root / "c")  # segment 0 moved to the read-only folder
    files = json.loads(run("inspect", root, *sets, "--json").stdout)["commitLog"]["files"]
    assert [f["path"] for f in files] == [f"c/{0:020d}", f"b/{4096:020d}", f"a/{8192:020d}"], files
    table = run("inspect", root, *sets).stdout
    assert f"c/{0:020d}" in table and f"a/{8192:020d}" in table
