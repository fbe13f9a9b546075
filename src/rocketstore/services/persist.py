"""Writing the config files while the store runs (the broker's periodic persist, spec 10)."""

from __future__ import annotations

from collections.abc import Sequence

from rocketstore.meta.config_file import ConfigFile
from rocketstore.services.base import Service


class ConfigPersistService(Service):
    """Every ``flushConsumerOffsetInterval`` ms (5 s, as RocketMQ's broker) write each config file
    whose content changed: committed consumer offsets, topics created by puts, subscription
    groups. A crash then loses at most that much of them, not everything since the open.
    (delayOffset.json is the schedule service's.)"""

    name = "persist-config"

    def __init__(self, managers: Sequence[ConfigFile], interval_ms: int) -> None:
        super().__init__(interval_ms)
        self.managers = tuple(managers)

    def run_once(self) -> int:
        """Write what changed; the number of files written."""
        return sum(manager.persist_if_changed() for manager in self.managers)
