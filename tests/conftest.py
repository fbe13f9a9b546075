"""Shared fixtures: tiny store geometries, a store factory, the RocketMQ vectors and the rmqread oracle.

Store tests use files small enough that rolling, end-of-file BLANKs and several index files
happen with a few dozen messages, so the whole suite runs in seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop at once, saying why, when the disk the tests' stores go to is nearly at
    diskSpaceCleanForciblyRatio (85%): past it every store the tests open deletes young
    segments, as RocketMQ's forced cleanup does, and dozens of tests fail for no fault of theirs."""
    import tempfile

    from rocketstore.files.disk import used_ratio

    folder = tempfile.gettempdir()
    ratio, limit = used_ratio(folder), StoreConfig().disk_space_clean_forcibly_ratio_clamped
    if ratio > limit - 0.02:
        pytest.exit(
            f"the disk holding {folder} is {ratio:.0%} used, near diskSpaceCleanForciblyRatio ({limit:.0%}), "
            "past which stores delete young segments: free some space first",
            returncode=3,
        )


def _shared() -> Path:
    """The reference material: $ROCKETSTORE_SHARED, else ../shared beside the checkout, else /work/shared."""
    if os.environ.get("ROCKETSTORE_SHARED"):
        return Path(os.environ["ROCKETSTORE_SHARED"])
    beside = Path(__file__).resolve().parents[1].parent / "shared"
    return beside if beside.is_dir() else Path("/work/shared")


SHARED = _shared()
VECTORS = SHARED / "rocketmq-vectors"
RMQREAD = SHARED / "tools" / "rmqread.py"

# The geometry the real RocketMQ 4.9.8 sample stores were written with.
VECTOR_GEOMETRY = {
    "mappedFileSizeCommitLog": 65536,
    "mappedFileSizeConsumeQueue": 2000,
    "maxHashSlotNum": 1000,
    "maxIndexNum": 3000,
}

# A tiny geometry: 4 KiB commit-log files, 10-unit consume-queue files, 127-entry index files.
TINY_GEOMETRY = {
    "mappedFileSizeCommitLog": 4096,
    "mappedFileSizeConsumeQueue": 200,
    "maxHashSlotNum": 64,
    "maxIndexNum": 128,
    "brokerIP1": "127.0.0.1",
}


def put_ok(store: MessageStore, message: Message, queue_id: int = 0):
    """``store.put`` that must succeed (PUT_OK); its result."""
    result = store.put(message, queue_id)
    assert result.status == PutMessageStatus.PUT_OK, result
    return result


def segments(root: Path) -> list[str]:
    """The commit-log segment names of the store at ``root``, in order."""
    return sorted(os.listdir(root / "commitlog"))


@pytest.fixture
def store_config() -> StoreConfig:
    """A fresh tiny-geometry config (each test may change it freely)."""
    return StoreConfig(**TINY_GEOMETRY)


@pytest.fixture
def make_store(tmp_path: Path, store_config: StoreConfig) -> Iterator[Callable[..., MessageStore]]:
    """``make_store(name="store", config=None, **open_keys)`` opens ``tmp_path / name``; every store
    it opened is shut down at teardown (shutdown is idempotent)."""
    opened: list[MessageStore] = []

    def make(name: str = "store", config: StoreConfig | None = None, **keys: object) -> MessageStore:
        store = MessageStore.open(tmp_path / name, config if config is not None else store_config, **keys)
        opened.append(store)
        return store

    yield make
    for store in reversed(opened):
        store.shutdown()


@pytest.fixture(scope="session")
def vectors() -> Path:
    """The folder of the real RocketMQ 4.9.8 stores (read-only: copy before writing)."""
    if not VECTORS.is_dir():
        pytest.skip(f"{VECTORS} is not available")
    return VECTORS


@pytest.fixture(scope="session")
def vector_config() -> StoreConfig:
    return StoreConfig(**VECTOR_GEOMETRY)


def copy_store(src: Path, dst: Path) -> Path:
    """Copy a store folder and make the copy writable by its owner (the vectors are read-only)."""
    shutil.copytree(src, dst)
    for folder, _dirs, files in os.walk(dst):
        os.chmod(folder, os.stat(folder).st_mode | stat.S_IWUSR | stat.S_IXUSR | stat.S_IRUSR)
        for name in files:
            path = os.path.join(folder, name)
            os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR | stat.S_IRUSR)
    return dst


@pytest.fixture
def copy_vector_store(tmp_path: Path, vectors: Path) -> Callable[[str], Path]:
    """``copy_vector_store("sample-crash")`` -> a writable copy of that sample's ``store/``."""

    def copy(sample: str) -> Path:
        return copy_store(vectors / sample / "store", tmp_path / f"{sample}-copy")

    return copy


def tree_hashes(root: str | os.PathLike[str]) -> dict[str, str]:
    """sha256 of every file under ``root`` by relative path (folders are listed too)."""
    out: dict[str, str] = {}
    for folder, _dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        out[rel + "/"] = "dir"
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.join(rel, name)] = hashlib.sha256(f.read()).hexdigest()
    return out


def geometry_flags(config: StoreConfig) -> list[str]:
    return [
        "--commitlog-size",
        str(config.mapped_file_size_commit_log),
        "--cq-size",
        str(config.cq_file_size),
        "--slots",
        str(config.max_hash_slot_num),
        "--index-num",
        str(config.max_index_num),
    ]


def run_rmqread(
    command: str, store: str | os.PathLike[str], config: StoreConfig, *args: str
) -> subprocess.CompletedProcess:
    """Run the independent reader (the test oracle) on ``store`` with ``config``'s geometry."""
    return subprocess.run(
        [sys.executable, str(RMQREAD), command, str(store), *geometry_flags(config), *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )


@pytest.fixture(scope="session")
def rmqread() -> Callable[..., subprocess.CompletedProcess]:
    """``rmqread("check", store, config, *extra_args)`` -> the finished process."""
    if not RMQREAD.is_file():
        pytest.skip(f"{RMQREAD} is not available")
    return run_rmqread


@pytest.fixture(scope="session")
def rmqread_export(rmqread: Callable[..., subprocess.CompletedProcess]) -> Callable[..., list[dict]]:
    """``rmqread_export(store, config, *extra_args)`` -> the exported rows (asserts exit status 0)."""

    def export(store: str | os.PathLike[str], config: StoreConfig, *args: str) -> list[dict]:
        done = rmqread("export", store, config, *args)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

    return export


@pytest.fixture(scope="session")
def hash_tree() -> Callable[[str | os.PathLike[str]], dict[str, str]]:
    return tree_hashes


class LoopFs:
    """A small real ext4 file system in an image file, loop-mounted for one test."""

    def __init__(self, image: Path, mount: Path) -> None:
        self.image = image
        self.mount = mount

    def fail_writes(self) -> None:
        """From now on the device refuses writes: flushes get EIO from the file system."""
        subprocess.run(["chattr", "+i", str(self.image)], check=True)

    def heal(self) -> None:
        subprocess.run(["chattr", "-i", str(self.image)], check=True)

    def usage(self) -> float:
        st = os.statvfs(self.mount)
        return 1 - st.f_bavail / st.f_blocks


@pytest.fixture
def loop_fs(tmp_path: Path) -> Iterator[Callable[..., LoopFs]]:
    """``loop_fs(size_mb, reserved_percent)`` mounts a fresh ext4 image (none of it reserved for
    root unless asked); skipped where the machine forbids mounting."""
    made: list[LoopFs] = []

    def make(size_mb: int = 64, reserved_percent: int = 0) -> LoopFs:
        n = len(made)
        image, mount = tmp_path / f"fs-{n}.img", tmp_path / f"mnt-{n}"
        mount.mkdir()
        with open(image, "wb") as f:
            f.truncate(size_mb << 20)
        mkfs = ["mkfs.ext4", "-q", "-F", "-m", str(reserved_percent), str(image)]
        steps = (mkfs, ["mount", "-o", "loop", str(image), str(mount)])
        for step in steps:
            try:
                done = subprocess.run(step, capture_output=True, text=True)
            except FileNotFoundError as exc:
                pytest.skip(f"cannot make a file system here: {exc}")
            if done.returncode:
                pytest.skip(
                    f"this machine forbids mounting a loop file system ({' '.join(step[:2])}: {done.stderr.strip()})"
                )
        fs = LoopFs(image, mount)
        made.append(fs)
        return fs

    yield make
    for fs in made:
        subprocess.run(["chattr", "-i", str(fs.image)], capture_output=True)
        subprocess.run(["umount", "-l", str(fs.mount)], capture_output=True)
