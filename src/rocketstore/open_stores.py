"""The writable stores a program has open: closed to a forked child, shut down at exit.

A forked child holds neither the lock nor the services of its parent's open stores, so they are
closed to it (StoreClosedError) and it never shuts them down; the parent's program shuts down
the ones it left open when it ends, as the broker's shutdown hook does.
"""

from __future__ import annotations

import atexit
import logging
import os
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocketstore.store import MessageStore

log = logging.getLogger(__name__)
OPEN: weakref.WeakSet[MessageStore] = weakref.WeakSet()  # writable stores not shut down yet


def _closed_in_child() -> None:
    for store in list(OPEN):
        store._close_in_child()
    OPEN.clear()


os.register_at_fork(after_in_child=_closed_in_child)


@atexit.register
def _shut_down_at_exit() -> None:
    for store in list(OPEN):
        try:
            store.shutdown()
        except Exception as exc:  # the others are still shut down
            log.error("shutting down %s at exit: %s", store.root, exc)
