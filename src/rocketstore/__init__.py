"""rocketstore: Apache RocketMQ's broker message store in Python, byte-compatible on disk.

>>> from rocketstore import MessageStore, StoreConfig, Message
>>> with MessageStore.open("/tmp/store", StoreConfig(mappedFileSizeCommitLog=1 << 20)) as store:
...     print(store.put(Message("TopicTest", b"hello", tags="TagA", keys="k1")).status)
PUT_OK
"""

import os as _os

# rocketstore uses numpy for bulk integer work and never for linear algebra; OpenBLAS's idle
# worker threads would otherwise spin on the cores the store's own threads need.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from importlib import import_module as _import_module
from typing import TYPE_CHECKING as _TYPE_CHECKING

if _TYPE_CHECKING:
    from rocketstore import errors
    from rocketstore.codec.message import Message, StoredMessage
    from rocketstore.config import StoreConfig
    from rocketstore.log.recovery import RecoveryReport
    from rocketstore.reports import DiskReport, ScheduleLevel
    from rocketstore.results import GetMessageStatus, GetResult, PutMessageStatus, PutResult, QueryResult
    from rocketstore.services.clean import CleanRun
    from rocketstore.store import MessageStore

__version__ = "0.1.0"

# loaded on first use (PEP 562), so that ``import rocketstore.cli`` starts without numpy and the
# store: the command line answers --help at once and handles a Ctrl-C from its first moment
_LAZY = {
    "errors": "rocketstore.errors",
    "Message": "rocketstore.codec.message",
    "StoredMessage": "rocketstore.codec.message",
    "StoreConfig": "rocketstore.config",
    "GetMessageStatus": "rocketstore.results",
    "GetResult": "rocketstore.results",
    "PutMessageStatus": "rocketstore.results",
    "PutResult": "rocketstore.results",
    "QueryResult": "rocketstore.results",
    "MessageStore": "rocketstore.store",
    # what store.clean_expired_files() returns, and what store.recovery and confirm_cut get
    "CleanRun": "rocketstore.services.clean",
    "RecoveryReport": "rocketstore.log.recovery",
    # what store.disk_report() and store.schedule_report() return (typed dicts)
    "DiskReport": "rocketstore.reports",
    "ScheduleLevel": "rocketstore.reports",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rocketstore' has no attribute {name!r}")
    value = _import_module(module) if name == "errors" else getattr(_import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})  # a lazy name is in both once used


__all__ = [
    "CleanRun",
    "DiskReport",
    "GetMessageStatus",
    "GetResult",
    "Message",
    "MessageStore",
    "PutMessageStatus",
    "PutResult",
    "QueryResult",
    "RecoveryReport",
    "ScheduleLevel",
    "StoreConfig",
    "StoredMessage",
    "errors",
]
