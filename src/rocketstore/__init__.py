"""rocketstore: Apache RocketMQ's broker message store in Python, byte-compatible on disk.

>>> from rocketstore import MessageStore, StoreConfig, Message
>>> with MessageStore.open("/tmp/store", StoreConfig(mappedFileSizeCommitLog=1 << 20)) as store:
...     store.put(Message("TopicTest", b"hello", tags="TagA", keys="k1")).status
'PUT_OK'
"""

import os as _os

# rocketstore uses numpy for bulk integer work and never for linear algebra; OpenBLAS's idle
# worker threads would otherwise spin on the cores the store's own threads need.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from rocketstore import errors
from rocketstore.codec.message import Message, StoredMessage
from rocketstore.config import StoreConfig
from rocketstore.results import GetMessageStatus, GetResult, PutMessageStatus, PutResult, QueryResult
from rocketstore.store import MessageStore

__version__ = "0.1.0"

__all__ = [
    "GetMessageStatus",
    "GetResult",
    "Message",
    "MessageStore",
    "PutMessageStatus",
    "PutResult",
    "QueryResult",
    "StoreConfig",
    "StoredMessage",
    "errors",
]
