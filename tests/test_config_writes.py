"""Writing the config files while the store is in use: consumer offsets are committed and queried
while consumerOffset.json is encoded and written, and a failed topics.json write leaves a topic
deletion undone."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore import GetMessageStatus, Message, MessageStore, PutMessageStatus
from rocketstore.errors import StoreFileError
from rocketstore.meta import config_file, fastjson
from rocketstore.meta.lockfile import StoreLock, held
from rocketstore.meta.offset_files import ConsumerOffsetManager

GUARD_S = 5.0  # a guard against a hang, not a timing assertion: the old code blocks until released
HOLD_S = 6 * GUARD_S  # a held step outlasts every guard: it ends when the test releases it


class _HeldEncode:
    """``fastjson.dumps`` wrapped to stop in the encode of a persist until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        real = fastjson.dumps

        def held(obj: Any) -> str:
            text = real(obj)
            self.entered.set()
            self.release.wait(HOLD_S)
            return text

        monkeypatch.setattr(fastjson, "dumps", held)
        self._undo = lambda: monkeypatch.setattr(fastjson, "dumps", real)

    def stop_holding(self) -> None:
        self.release.set()
        self._undo()


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    return thread, out


@pytest.fixture
def offsets(tmp_path) -> Iterator[ConsumerOffsetManager]:
    mgr = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
    for i in range(50):
        for q in range(4):
            mgr.commit(f"G{i % 5}", f"Topic{i}", q, 1000 + q)
    mgr.persist()
    yield mgr


@pytest.mark.parametrize("method", ["persist", "persist_if_changed"])
def test_commit_and_query_do_not_wait_for_the_encode_of_a_persist(offsets, monkeypatch, method) -> None:
    offsets.commit("G1", "Topic1", 0, 5)  # persist_if_changed has something to write
    hold = _HeldEncode(monkeypatch)
    persist, _ = _in_thread(getattr(offsets, method))
    try:
        assert hold.entered.wait(GUARD_S)  # the persist is encoding the table
        commit, _ = _in_thread(lambda: offsets.commit("G1", "Topic1", 0, 77))
        commit.join(GUARD_S)
        assert not commit.is_alive(), "commit() waited for the encode of consumerOffset.json"
        query, answer = _in_thread(lambda: offsets.query("G1", "Topic1", 0))
        query.join(GUARD_S)
        assert answer == [77], "query() waited for the encode of consumerOffset.json"
        assert not hold.release.is_set() and persist.is_alive()  # still held in the encode
    finally:
        hold.stop_holding()
        persist.join(GUARD_S)
    assert not persist.is_alive()
    # the commit made during the write is not lost: it counts as a change, and the next persist has it
    assert offsets.persist_if_changed()
    reread = ConsumerOffsetManager(offsets.path)
    assert reread.load()
    assert reread.query("G1", "Topic1", 0) == 77
    assert reread.query("G4", "Topic49", 3) == 1003
    assert not offsets.persist_if_changed()


def test_a_persist_writes_the_state_of_its_snapshot(offsets, monkeypatch) -> None:
    """The file a persist writes holds the table as it was when the persist began: a commit made
    while it is encoded (a new queue of a group it is copying, a new group) is neither half in it
    nor breaks it."""
    hold = _HeldEncode(monkeypatch)
    persist, _ = _in_thread(offsets.persist)
    try:
        assert hold.entered.wait(GUARD_S)
        commits, _ = _in_thread(
            lambda: [offsets.commit("G0", "Topic0", 9, 900), offsets.commit("NewGroup", "Topic0", 0, 1)]
        )
        commits.join(GUARD_S)
        assert not commits.is_alive()
    finally:
        hold.stop_holding()
        persist.join(GUARD_S)
    reread = ConsumerOffsetManager(offsets.path)
    assert reread.load()
    assert reread.query("G0", "Topic0", 9) == -1
    assert reread.query("NewGroup", "Topic0", 0) == -1
    assert offsets.persist_if_changed()
    assert reread.load()
    assert reread.query("G0", "Topic0", 9) == 900
    assert reread.query("NewGroup", "Topic0", 0) == 1


def test_two_persists_write_one_after_the_other_newest_last(offsets, monkeypatch) -> None:
    """A second persist waits for the first one's write; the file ends with the newer state."""
    first_writing = threading.Event()
    release = threading.Event()
    calls: list[str] = []
    real = config_file.write_json_file

    def write(path: Any, text: str, *args: Any, **kwargs: Any) -> None:
        calls.append("start")
        if len(calls) == 1:
            first_writing.set()
            release.wait(HOLD_S)
        real(path, text, *args, **kwargs)
        calls.append("end")

    monkeypatch.setattr(config_file, "write_json_file", write)
    offsets.commit("G2", "Topic2", 1, 50)
    first, _ = _in_thread(offsets.persist)
    try:
        assert first_writing.wait(GUARD_S)
        offsets.commit("G2", "Topic2", 1, 60)
        second, _ = _in_thread(offsets.persist)
        second.join(0.2)  # give a wrong implementation the chance to start writing
    finally:
        release.set()
        first.join(GUARD_S)
        second.join(GUARD_S)
    assert calls == ["start", "end", "start", "end"]
    reread = ConsumerOffsetManager(offsets.path)
    assert reread.load()
    assert reread.query("G2", "Topic2", 1) == 60


def test_the_last_persist_seals_what_it_writes(offsets) -> None:
    offsets.commit("G3", "Topic3", 2, 33)
    offsets.persist(last=True)
    with pytest.raises(Exception, match="written for the last time"):
        offsets.commit("G3", "Topic3", 2, 34)
    reread = ConsumerOffsetManager(offsets.path)
    assert reread.load()
    assert reread.query("G3", "Topic3", 2) == 33


# ------------------------------------------------------------ delete_topics when topics.json cannot be written


def _store_with_topics(make_store: Callable[..., MessageStore]) -> MessageStore:
    store = make_store()
    for topic in ("Doomed", "Kept"):
        for i in range(3):
            assert store.put(Message(topic, f"{topic} {i}".encode()), 1).status == PutMessageStatus.PUT_OK
    assert store.wait_for_dispatch()
    store.topics.persist()  # topics.json lists both
    return store


def _tmp_is_a_directory(store: MessageStore) -> Callable[[], None]:
    """topics.json cannot be written, for root too: its ``.tmp`` is a directory (a leftover of
    another program, say); returns the repair."""
    tmp = Path(store.topics.path + ".tmp")
    tmp.mkdir()
    return lambda: tmp.rmdir() if tmp.is_dir() else None


def _write_is_refused(store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """topics.json cannot be written as a config folder without write permission refuses it (root
    is not refused by the mode bits, so the refusal is the one a non-root user gets)."""
    real = config_file.write_json_file

    def refuse(path: Any, *args: Any, **kwargs: Any) -> None:
        if os.fspath(path) == store.topics.path:
            tmp = os.fspath(path) + ".tmp"
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), tmp)
        real(path, *args, **kwargs)

    monkeypatch.setattr(config_file, "write_json_file", refuse)
    return lambda: monkeypatch.setattr(config_file, "write_json_file", real)


@pytest.mark.parametrize("fault", ["tmp_is_a_directory", "permission_denied"])
def test_delete_topics_that_cannot_write_topics_json_removes_nothing(make_store, monkeypatch, fault) -> None:
    store = _store_with_topics(make_store)
    root = Path(store.root)
    topics_json = Path(store.topics.path).read_bytes()
    table = store.topics.topics()
    version = dict(store.topics.data_version)
    repair = _tmp_is_a_directory(store) if fault == "tmp_is_a_directory" else _write_is_refused(store, monkeypatch)

    try:
        with pytest.raises(StoreFileError) as raised:
            store.delete_topics(["Doomed"])
        assert "topics.json" in str(raised.value) and "no topic was removed" in str(raised.value)
        if fault == "permission_denied":
            assert raised.value.errno == errno.EACCES
            assert isinstance(raised.value.__cause__, PermissionError)
        # nothing removed, in memory or on disk
        assert store.topics.topics() == table
        assert store.topics.data_version == version
        assert store.topics.find("Doomed") is not None
        assert Path(store.topics.path).read_bytes() == topics_json
        assert not (root / "config" / "deletedTopics.json").exists()
        assert (root / "consumequeue" / "Doomed").is_dir()
        assert store.get_message("g", "Doomed", 1, 0, 8).status == GetMessageStatus.FOUND
        assert store.get_max_offset_in_queue("Doomed", 1) == 3
    finally:
        repair()

    # once the file can be written, the same deletion goes through
    assert store.delete_topics(["Doomed"]) == ["Doomed"]
    assert store.topics.find("Doomed") is None
    store.shutdown()
    reopened = make_store()
    assert reopened.topics.find("Doomed") is None
    assert reopened.topics.find("Kept") is not None
    assert reopened.get_max_offset_in_queue("Doomed", 1) == 0
    assert reopened.get_max_offset_in_queue("Kept", 1) == 3


def test_a_store_reopened_after_a_refused_deletion_still_has_the_topic(make_store, monkeypatch) -> None:
    store = _store_with_topics(make_store)
    repair = _write_is_refused(store, monkeypatch)
    try:
        with pytest.raises(StoreFileError):
            store.delete_topics(["Doomed"])
    finally:
        repair()
    store.shutdown()
    assert "Doomed" in json.loads(Path(store.topics.path).read_text())["topicConfigTable"]  # the last write's
    reopened = make_store()
    assert reopened.topics.find("Doomed") is not None
    assert reopened.get_max_offset_in_queue("Doomed", 1) == 3
    assert reopened.get_message("g", "Doomed", 1, 0, 8).status == GetMessageStatus.FOUND


def test_delete_topics_that_cannot_write_deleted_topics_json_removes_nothing(make_store, monkeypatch) -> None:
    """topics.json is written, then deletedTopics.json is refused: topics.json is written back as
    it was and nothing is recorded, so the topic stays whole (a half deletion left the topic out
    of topics.json with its queues and no record, and a later write could finish it unasked)."""
    store = _store_with_topics(make_store)
    root = Path(store.root)
    topics_json = Path(store.topics.path).read_bytes()
    real = config_file.write_json_file
    deleted_path = os.fspath(root / "config" / "deletedTopics.json")

    def refuse(path: Any, *args: Any, **kwargs: Any) -> None:
        if os.fspath(path) == deleted_path:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), deleted_path + ".tmp")
        real(path, *args, **kwargs)

    monkeypatch.setattr(config_file, "write_json_file", refuse)
    with pytest.raises(StoreFileError, match="no topic was removed") as raised:
        store.delete_topics(["Doomed"])
    assert raised.value.errno == errno.EACCES
    assert store.topics.find("Doomed") is not None and store.deleted_topics.table == {}
    assert Path(store.topics.path).read_bytes() == topics_json
    assert not (root / "config" / "deletedTopics.json").exists()
    assert store.get_max_offset_in_queue("Doomed", 1) == 3
    monkeypatch.setattr(config_file, "write_json_file", real)
    store.topics.persist()
    store.deleted_topics.persist()  # a later write of either file finishes nothing
    assert store.topics.find("Doomed") is not None and "Doomed" not in store.deleted_topics.table
    assert store.delete_topics(["Doomed"]) == ["Doomed"]
    assert store.deleted_topics.table.keys() == {"Doomed"}


_OPEN_IN_CHILD = """
import json, sys
from rocketstore import MessageStore, StoreConfig
config = StoreConfig(json.loads(sys.argv[2]))
out = {}
try:
    MessageStore.open(sys.argv[1], config).shutdown()
    out["writable"] = "opened"
except Exception as exc:
    out["writable"] = [type(exc).__name__, getattr(exc, "errno", None), getattr(exc, "filename", None), str(exc)]
with MessageStore.open(sys.argv[1], config, read_only=True) as reader:
    out["read_only"] = [reader.query_offset("g", "T", 0), reader.consumer_offsets.load_problem]
print(json.dumps(out))
"""


def _open_unable_to_read(root: str, config: dict[str, Any]) -> dict[str, Any]:
    """Open the store writable, then read-only, in a child process that file modes bind: as root,
    one without CAP_DAC_OVERRIDE (setpriv)."""
    command = [sys.executable, "-c", _OPEN_IN_CHILD, root, json.dumps(config)]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv: file modes do not bind")
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_a_writable_open_refuses_a_config_file_it_cannot_read(make_store, store_config) -> None:
    """consumerOffset.json is there but cannot be read (mode 0000): a writable open refuses with a
    StoreFileError naming it (it loaded the older .bak, then every write and the shutdown failed,
    and the offsets committed since were lost); a read-only open loads the .bak and says so."""
    store = make_store()
    store.commit_offset("g", "T", 0, 5)
    store.consumer_offsets.persist()
    store.commit_offset("g", "T", 0, 9)
    store.shutdown()  # consumerOffset.json holds 9, its .bak 5
    path = Path(store.consumer_offsets.path)
    path.chmod(0)
    try:
        out = _open_unable_to_read(store.root, store_config.changed())
    finally:
        path.chmod(0o644)
    kind, number, filename, message = out["writable"]
    assert kind == "StoreFileError" and number == errno.EACCES and filename == str(path)
    assert f"config file {path} cannot be read" in message
    offset, problem = out["read_only"]
    assert offset == 5 and "cannot read" in problem
    reopened = make_store()  # the refused open left the lock free and nothing behind
    assert reopened.query_offset("g", "T", 0) == 9
    assert not Path(str(path) + ".tmp").exists()


@pytest.mark.parametrize("create", [False, True])
def test_a_lock_file_that_cannot_be_opened_is_a_typed_error_naming_it(tmp_path, create: bool) -> None:
    """The store's lock file cannot be opened (no permission; here a folder in its place, which
    root cannot open either): StoreFileError naming it, for ``held`` (``rocketstore recover``
    printed a bare ``[Errno 13]``) and for an open for writing alike."""
    lock = tmp_path / "store" / "lock"
    lock.mkdir(parents=True)
    with pytest.raises(StoreFileError, match=r"lock file") as raised:
        if create:
            StoreLock(str(lock.parent)).acquire()
        else:
            with held(str(lock.parent)):
                pass
    assert raised.value.errno == errno.EISDIR and raised.value.filename == str(lock)
