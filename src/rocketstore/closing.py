"""The last steps of a store's shutdown, once its services are stopped: what it holds in memory
written back (index, checkpoint, config files, and ``abort`` removed when the shutdown is clean),
and its files closed."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from rocketstore.meta.root import remove_abort
from rocketstore.running_flags import NOT_WRITEABLE_BITS

if TYPE_CHECKING:
    from rocketstore.services.wiring import ShutdownSteps
    from rocketstore.store import MessageStore

log = logging.getLogger("rocketstore.store")  # the store's own logger, as before these steps moved here


def write_back(store: MessageStore, step: ShutdownSteps) -> None:
    """The last flushes and config files, then ``abort`` removed if the shutdown is clean."""
    step(store.index.flush, "flushing the index")
    step(store.checkpoint.flush, "flushing the checkpoint")
    for manager in (store.topics, store.consumer_offsets, store.delay_offsets, store.subscription_groups):
        step(lambda m=manager: m.persist(last=True), f"writing {os.path.basename(manager.path)}")
    behind = store.reput.behind() if store.reput else 0
    if step.clean and not store.running_flags & NOT_WRITEABLE_BITS and behind == 0:
        step(lambda: remove_abort(store.root), "removing abort")
    else:
        unclean = "unclean shutdown (flags %d, dispatch %d bytes behind): abort kept for recovery"
        log.warning(unclean, store.running_flags, behind)


def close_files(store: MessageStore) -> None:
    """Stop the segment allocator and close the commit log, queues, index and pool (those made)."""
    if store.allocator is not None:
        store.allocator.stop()
    for part in ("commit_log", "queues", "index", "pool"):
        obj = getattr(store, part, None)
        if obj is not None:
            obj.close()
