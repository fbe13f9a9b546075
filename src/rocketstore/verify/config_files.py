"""Config file checks: ``config/*.json`` as opening the store met them (a broken file is replaced
by its backup's older state, or by nothing, without a word from the store but a log line)."""

from __future__ import annotations

import os

from rocketstore.store import MessageStore
from rocketstore.verify.report import VerifyReport


def check_config_files(store: MessageStore, report: VerifyReport) -> None:
    """Topics, consumer offsets, delay offsets, subscription groups (and rocketstore's deleted
    topics): each file or its backup."""
    managers = (store.topics, store.consumer_offsets, store.delay_offsets, store.subscription_groups)
    for manager in (*managers, store.deleted_topics):
        if manager.load_problem is not None:
            report.problem(f"{os.path.relpath(manager.path, store.root)}: {manager.load_problem}")
    # a store without the file is the bare store RocketMQ's DefaultMessageStore writes alone (no broker)
    listing = os.path.exists(store.topics.path) or os.path.exists(store.topics.path + ".bak")
    # (a file that did not load is a problem above; RocketMQ 5 makes %LMQ% topics' configs as it goes)
    unlisted = [t for t in store.queues.topics() if store.topics.find(t) is None and not t.startswith("%LMQ%")]
    if listing and store.topics.load_problem is None and unlisted:
        shown = ", ".join(unlisted[:10]) + (f", ... ({len(unlisted)} in all)" if len(unlisted) > 10 else "")
        report.note(
            f"config/topics.json: no entry for {shown}, which have consume queues (a RocketMQ broker answers "
            "their pulls TOPIC_NOT_EXIST; the next open for writing adds them)"
        )
