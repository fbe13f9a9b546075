"""``rocketstore clean``: delete what retention allows now, as RocketMQ's manual delete does."""

from __future__ import annotations

import click

from rocketstore.cli.common import Common, known_topics, open_store, open_store_checked, require_topics, store_options
from rocketstore.cli.output import kv_table, out_console, print_json, say
from rocketstore.cli.stops import done_storing
from rocketstore.services.clean import MANUAL_DELETE_TIMES
from rocketstore.services.wiring import no_delayed_delivery
from rocketstore.store import MessageStore


@click.command()
@store_options(writes=True)
@click.option(
    "--delete-topic",
    "delete_topics",
    multiple=True,
    help="Also remove this topic's queues, its topics.json entry and its groups' consumer offsets "
    "(repeatable). Its records stay in the commit log until retention deletes them; "
    "config/deletedTopics.json keeps later opens, rebuilds and `spark rebuild` from dispatching them again "
    "(the topic written again starts at queue offset 0).",
)
def clean(opts: Common, delete_topics: tuple[str, ...]) -> None:
    """Delete the commit-log files older than fileReservedTime hours now, outside deleteWhen
    (RocketMQ's deleteExpiredCommitLog), in batches of deleteFileBatchMax, never the newest file;
    consume-queue and index files below the new minimum offset follow. Past the disk's
    clean-forcibly ratio young files go too, as in the running store. No delayed message is
    delivered while it runs (the store is opened without its schedule service). A commit log
    outside STORE (storePathCommitLog) is refused without --external-commit-log."""

    def known(store: MessageStore) -> None:  # a misspelt topic is refused before the store is touched
        present = known_topics(store)
        for name in delete_topics:
            require_topics(opts.root, present, name.__eq__, f"--delete-topic {name!r}")

    with no_delayed_delivery():  # a clean delivers nothing, however long it takes
        store = open_store_checked(opts, known, create=False) if delete_topics else open_store(opts, create=False)
    with store:
        before = store.min_phy_offset
        removed = store.delete_topics(delete_topics) if delete_topics else []
        run = store.clean_expired_files()
        info = {
            "store": store.root,
            "deleted": {
                "commitLogFiles": run.commit_log_files,
                "consumeQueueFiles": run.consume_queue_files,
                "indexFiles": run.index_files,
                "hangedFiles": run.hanged_files,
                "topics": removed,
            },
            "moreLeft": run.more_left,
            "minOffsetBefore": before,
            "minOffset": store.min_phy_offset,
            "maxOffset": store.max_phy_offset,
            "disk": store.disk_report(),
        }
    done_storing(f"{store.root} was cleaned")  # cleaned and shut down: a closed stdout now cuts only the report
    if opts.as_json:
        print_json(info)
        return
    deleted = info["deleted"]
    rows = [
        ("commit-log files deleted", deleted["commitLogFiles"]),
        ("consume-queue files deleted", deleted["consumeQueueFiles"]),
        ("index files deleted", deleted["indexFiles"]),
        ("topics removed", ", ".join(removed) or "-"),
        ("commit log min offset", f"{before} -> {info['minOffset']}"),
        ("commit log max offset", info["maxOffset"]),
    ]
    out_console().print(kv_table(f"cleaned {store.root}", rows))
    if run.more_left:
        say(
            f"the {MANUAL_DELETE_TIMES} rounds of a manual deletion ran out while the last still deleted files: "
            "more may be left: run clean again (each round deletes at most deleteFileBatchMax segments)"
        )
