"""StoreConfig: every MessageStoreConfig key, by its RocketMQ name or its snake_case form.

Values are plain instance attributes under their snake_case names, so the hot paths read them
as cheaply as any attribute (``config.max_message_size``); the RocketMQ names work too
(``config.maxMessageSize``), for reading, setting and in ``StoreConfig(...)``. ``MessageStore.open``
takes a copy: change ``store.config`` while the store runs (RocketMQ's ``maxMessageSize`` is
hot-reconfigurable); the store reads most values when it needs them, those that choose its
services and files (flushDiskType, the pool, file sizes, brokerRole: a SYNC_MASTER's waits and
a SLAVE's refusals) at the open only.

The keys and their defaults, RocketMQ 5.3.3's (spec section 11), are in ``config_keys``. Keys
that belong to the broker but decide what the store writes (``brokerIP1``, ``listenPort``, ...)
are accepted as well, so a real ``broker.conf`` loads as is.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from rocketstore.broker_conf import ALIASES, BROKER_KEYS, JAVA_LONG_KEYS, OBSOLETE_KEYS, obsolete_key, read_conf_file
from rocketstore.config_keys import CQ_STORE_UNIT_SIZE, ENUMS, INT_MAX, INT_RANGE, KEYS, LONG_RANGE, MINIMUM, RANGES
from rocketstore.config_values import (
    check_broker_ip,
    delay_level_millis,
    delete_hours,
    finite_double,
    java_int,
    java_trim,
    join_surrogates,
    local_address,
    resolve_broker_ip,
    untrimmed,
)
from rocketstore.errors import ConfigError, shown
from rocketstore.files.disk import distinct_folders

log = logging.getLogger(__name__)

# An unknown broker.conf key this close to a store key (difflib ratio) is taken for a typo.
_TYPO_CUTOFF = 0.85


def snake_case(name: str) -> str:
    """RocketMQ's camelCase key name -> its snake_case form (``checkCRCOnRecover`` -> ``check_crc_on_recover``)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


_DEFAULTS: dict[str, Any] = {snake_case(k): v for k, v in KEYS}
_TYPES: dict[str, type] = {snake_case(k): (str if v is None else type(v)) for k, v in KEYS}
_CAMEL: dict[str, str] = {snake_case(k): k for k, _ in KEYS}
_BY_ANY_NAME: dict[str, str] = {**{k: snake_case(k) for k, _ in KEYS}, **{s: s for s in _DEFAULTS}}
_BY_ANY_NAME.update({old: snake_case(new) for old, new in ALIASES.items()})
_SNAKE_ONLY = frozenset(snake for snake, camel in _CAMEL.items() if snake != camel)  # not in a broker.conf
_ENUM_BY_SNAKE = {snake_case(k): v for k, v in ENUMS.items()}
_FOLDED = {name.lower(): name for name in (*_CAMEL.values(), *ALIASES, *OBSOLETE_KEYS)}
_LONG_SNAKE = frozenset(snake_case(k) for k in JAVA_LONG_KEYS)
_RANGE_SNAKE = {snake_case(k): v for k, v in RANGES.items()}
_MINIMUM_SNAKE = {snake_case(k): v for k, v in MINIMUM.items()}


def _coerce(snake: str, value: Any) -> Any:
    kind = _TYPES[snake]
    name = _CAMEL[snake]
    if value is None:
        if _DEFAULTS[snake] is None:
            return None
        raise ConfigError(f"{name} may not be None")
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and java_trim(value).lower() in ("true", "false"):
            return java_trim(value).lower() == "true"
        raise ConfigError(f"{name} must be true or false, not {shown(value)}")
    if kind is int:
        if isinstance(value, bool):
            raise ConfigError(f"{name} must be an integer, not {shown(value)}")
        try:  # a string as Java's Integer.parseInt reads it: no 1_024, 0x100 or 1024L
            number = java_int(value) if isinstance(value, str) else int(value)
        except (TypeError, ValueError, OverflowError):
            number = None
        if number is None:
            raise ConfigError(f"{name} must be an integer, not {shown(value)}")
        if not isinstance(value, str) and number != value:  # 0.5 hours is not 0 hours
            raise ConfigError(f"{name} must be a whole number, not {shown(value)}")
        minimum, what = _MINIMUM_SNAKE.get(snake, (None, ""))
        if minimum is not None and number < minimum:
            raise ConfigError(f"{name} must be {what}, not {shown(value)}")
        low, high = _RANGE_SNAKE.get(snake) or (LONG_RANGE if snake in _LONG_SNAKE else INT_RANGE)
        if not low <= number <= high:
            java = "a TCP port" if snake in _RANGE_SNAKE else f"a Java {'long' if snake in _LONG_SNAKE else 'int'}"
            raise ConfigError(f"{name} is {java}: it must be from {low} to {high}, not {shown(value)}")
        return number
    if kind is float:
        return finite_double(name, value)
    value = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(value, str | int | float):  # a list of paths is "a;b", as in broker.conf
        raise ConfigError(f"{name} is text, not {type(value).__name__} {shown(value)}")
    value = java_trim(str(value))  # String.trim, as MixAll.properties2Object trims a String
    if "\0" in value:  # no path nor name holds one (os calls raise a bare ValueError)
        raise ConfigError(f"{name} holds a NUL character: {shown(value)}")
    if not value.isascii():
        value = _utf16_joined(name, value)
    allowed = _ENUM_BY_SNAKE.get(snake)
    if allowed and value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(allowed)}, not {shown(value)}")
    if snake == "broker_ip1" and value:
        check_broker_ip(value)  # a host name is looked up only when the store host is needed
    elif snake == "message_delay_level":
        delay_level_millis(value)
    elif snake == "delete_when":
        delete_hours(value)
    return value


def _utf16_joined(name: str, value: str) -> str:
    """``value`` with each UTF-16 surrogate pair (``\\uD83D\\uDE00``, as native2ascii escapes a
    character past U+FFFF in broker.conf) as the one character Java's String holds; ConfigError
    for a lone surrogate no file name can hold (Python's stand-ins for the bytes of a name that
    is not UTF-8, U+DC80 to U+DCFF, are kept: they name such a file)."""
    joined = join_surrogates(value)
    try:
        os.fsencode(joined)
    except UnicodeEncodeError:
        raise ConfigError(f"{name} holds a lone UTF-16 surrogate (half of an escaped pair): {shown(value)}") from None
    return joined


def _resolve(name: str) -> str:
    if not isinstance(name, str):  # difflib would raise a TypeError matching it
        raise ConfigError(f"a MessageStoreConfig key is a str, not {shown(name)}")
    snake = _BY_ANY_NAME.get(name)
    if snake is None and name in OBSOLETE_KEYS:
        raise ConfigError(obsolete_key(name))
    if snake is None:
        close = difflib.get_close_matches(name, list(_BY_ANY_NAME), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(f"unknown MessageStoreConfig key {shown(name)}{hint}")
    return snake


def _close_store_key(name: str, cutoff: float = 0.6) -> str | None:
    """The store key ``name`` is most like (case and underscores aside), if one is close enough."""
    close = difflib.get_close_matches(name.replace("_", "").lower(), list(_FOLDED), n=1, cutoff=cutoff)
    return _FOLDED[close[0]] if close else None


def _folders(setting: str | None) -> list[str]:
    """The folders a comma-separated path setting names, normalised, each once."""
    return distinct_folders(p.strip() for p in (setting or "").split(",") if p.strip())


def _apply_conf_entry(config: StoreConfig, key: str, value: str, strict: bool, ignored: list[str]) -> str | None:
    """Apply one broker.conf entry to ``config``; the warning it deserves, if any. An unknown key
    to ignore (not a broker key) goes to ``ignored``; ConfigError for a bad value, a typo'd key,
    and under ``strict`` for every key the store does not apply."""
    if key in _SNAKE_ONLY:  # RocketMQ looks keys up by their Java names only
        why = f"RocketMQ reads no key {key}: set {_CAMEL[key]} instead"
        if strict:
            raise ConfigError(why)
        return f"ignoring {key}={value}: {why}"
    if key in _BY_ANY_NAME:
        config.set(key, value)
        return untrimmed(key, value, _DEFAULTS[_resolve(key)])
    if key in OBSOLETE_KEYS:  # RocketMQ ignores it: so does the store, with a word
        if strict:
            raise ConfigError(obsolete_key(key))
        return f"ignoring {key}={value}: {obsolete_key(key)}"
    if strict:
        _resolve(key)
    elif key not in BROKER_KEYS:
        close = _close_store_key(key, _TYPO_CUTOFF)
        if close:
            raise ConfigError(f"unknown key {shown(key)} (did you mean {close}?)")
        ignored.append(key)
    return None


class StoreConfig:
    """The store's configuration: every MessageStoreConfig key by RocketMQ name or snake_case.

    >>> StoreConfig(flushDiskType="SYNC_FLUSH").flush_disk_type
    'SYNC_FLUSH'
    """

    def __init__(self, values: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        if not isinstance(values, Mapping | None):
            raise ConfigError(f"StoreConfig takes a mapping of MessageStoreConfig keys, not {type(values).__name__}")
        self.__dict__.update(_DEFAULTS)
        for name, value in {**(values or {}), **kwargs}.items():
            self.set(name, value)
        self.validate()

    # -- access by either name -------------------------------------------------------------
    def set(self, name: str, value: Any) -> None:
        """Set a key by its RocketMQ or snake_case name; strings are converted to the key's type.

        ConfigError for a value of the wrong type or outside the key's range; keys that fail only
        together are checked by :meth:`validate`."""
        snake = _resolve(name)
        self.__dict__[snake] = _coerce(snake, value)

    def get(self, name: str) -> Any:
        """A setting by its RocketMQ name (``flushDiskType``) or attribute name."""
        return self.__dict__[_resolve(name)]

    def __setattr__(self, name: str, value: Any) -> None:
        self.set(name, value)

    def __getattr__(self, name: str) -> Any:  # only called for names not in __dict__ (camelCase)
        snake = _BY_ANY_NAME.get(name)
        if snake is None:
            raise AttributeError(name)
        return self.__dict__[snake]

    def items(self) -> Iterator[tuple[str, Any]]:
        """(RocketMQ name, value) for every key."""
        for snake, camel in _CAMEL.items():
            yield camel, self.__dict__[snake]

    def to_dict(self) -> dict[str, Any]:
        """Every setting by its RocketMQ name."""
        return dict(self.items())

    def changed(self) -> dict[str, Any]:
        """The keys whose values differ from RocketMQ's defaults, by RocketMQ name."""
        return {c: v for c, v in self.items() if v != _DEFAULTS[snake_case(c)]}

    def copy(self, **overrides: Any) -> StoreConfig:
        """A copy with ``overrides`` (RocketMQ or attribute names), checked as the constructor checks."""
        new = StoreConfig()
        new.__dict__.update(self.__dict__)
        for name, value in overrides.items():
            new.set(name, value)
        new.validate()
        return new

    def validate(self) -> None:
        """ConfigError for keys that fail together (the constructor, ``copy`` and so
        ``MessageStore.open`` run it before touching a file): no file may pass 2**31-1 bytes."""
        slots, entries = self.max_hash_slot_num, self.max_index_num
        size = 40 + slots * 4 + entries * 20
        if size > INT_MAX:
            raise ConfigError(
                f"maxHashSlotNum {slots} and maxIndexNum {entries} make a {size}-byte index file; "
                f"RocketMQ maps it with an int size, at most {INT_MAX} bytes"
            )
        if self.cq_file_size > INT_MAX:
            raise ConfigError(
                f"mappedFileSizeConsumeQueue {self.mapped_file_size_consume_queue} rounds up to a "
                f"{self.cq_file_size}-byte consume-queue file; at most {INT_MAX} bytes"
            )

    def __repr__(self) -> str:
        return f"StoreConfig({', '.join(f'{k}={v!r}' for k, v in self.changed().items())})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoreConfig) and self.__dict__ == other.__dict__

    # -- broker.conf -------------------------------------------------------------------------
    @classmethod
    def from_properties(
        cls,
        path: str | os.PathLike[str],
        *,
        strict: bool = False,
        warn: Callable[[str], None] | None = None,
        overrides: Iterable[tuple[str, Any]] = (),
    ) -> StoreConfig:
        """Load a Java properties file (``broker.conf``).

        Keys of RocketMQ's broker that the store does not use (``namesrvAddr``, ...) are ignored.
        A key close to a store key (``flushDiskTyp``) is a typo: ConfigError. Any other unknown key is
        ignored with one warning naming them all, given to ``warn`` (default: the log).
        A snake_case name (the Python API's) is ignored with a warning, as RocketMQ ignores it.
        ``strict=True`` refuses every unknown key. The file is read as UTF-8 (a leading BOM is
        dropped), or as ISO-8859-1 (Java's encoding of ``.properties``) when it is not valid UTF-8.
        A file that cannot be read raises StoreFileError naming it; a ConfigError names the file,
        the key and its line. ``overrides`` (the command line's ``--set``, key and value pairs) go
        over the file: a key they set is not read from it, so they also replace a value there that
        the store refuses.
        """
        name, say = os.fspath(path), warn or log.warning
        config, ignored = cls(), []
        overrides = list(overrides)
        overridden = {_resolve(key) for key, _ in overrides}
        for key, (value, line) in read_conf_file(name, say).items():
            if _BY_ANY_NAME.get(key) in overridden:
                continue
            try:
                note = _apply_conf_entry(config, key, value, strict, ignored)
            except ConfigError as exc:
                text = str(exc)
                raise ConfigError(f"{name}: {text if key in text else f'{key}: {text}'} (line {line})") from None
            if note:
                say(f"{name}: {note}")
        for key, value in overrides:
            config.set(key, value)
        try:
            config.validate()
        except ConfigError as exc:
            raise ConfigError(f"{name}{' (with the keys set over it)' if overrides else ''}: {exc}") from None
        if ignored:
            say(
                f"{name}: ignoring keys that are neither MessageStoreConfig nor broker keys: "
                + ", ".join(
                    f"{key} (did you mean {close}?)" if (close := _close_store_key(key)) else key for key in ignored
                )
            )
        return config

    # -- derived values (RocketMQ's getters) -----------------------------------------------
    @property
    def cq_file_size(self) -> int:
        """``mappedFileSizeConsumeQueue`` rounded up to a whole number of 20-byte units."""
        size = self.mapped_file_size_consume_queue
        return -(-size // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE

    @property
    def commit_log_paths(self) -> list[str]:
        """The commit-log folders (``storePathCommitLog`` may hold several, comma separated),
        normalised and each once (``a/`` is ``a``; a folder named twice is one folder)."""
        return _folders(self.store_path_commit_log) or [os.path.join(self.store_path_root_dir, "commitlog")]

    @property
    def commit_log_read_only_paths(self) -> list[str]:
        """``readOnlyCommitLogStorePaths``: folders whose segments are read (and cleaned) but that
        get no new segment (comma separated). RocketMQ reads them only when ``storePathCommitLog``
        holds a comma (its CommitLog makes a MultiPathMappedFileQueue then; its single-folder
        queue ignores the set): so does the store (``read_only_paths_ignored``). A folder also in
        ``storePathCommitLog`` gets no new segment either (MultiPathMappedFileQueue.tryCreateMappedFile),
        unless that leaves no folder to write to: then ``storePathCommitLog``'s are written."""
        if self.read_only_paths_ignored:
            return []
        return _folders(self.read_only_commit_log_store_paths)

    @property
    def read_only_paths_ignored(self) -> bool:
        """True when ``readOnlyCommitLogStorePaths`` names folders that are not read: ``storePathCommitLog``
        is one folder (no comma), and RocketMQ's single-folder queue never looks at the set."""
        return bool(_folders(self.read_only_commit_log_store_paths)) and "," not in (self.store_path_commit_log or "")

    @property
    def commit_log_folders(self) -> list[str]:
        """Every folder that may hold commit-log segments, each once: ``storePathCommitLog``'s, then the
        read-only ones."""
        return distinct_folders(self.commit_log_paths + self.commit_log_read_only_paths)

    @property
    def disk_max_used_space_ratio_clamped(self) -> int:
        """diskMaxUsedSpaceRatio as RocketMQ uses it: 10 to 95 (percent)."""
        return min(95, max(10, self.disk_max_used_space_ratio))

    @property
    def disk_space_warning_ratio(self) -> float:
        """diskSpaceWarningLevelRatio as RocketMQ uses it: 0.35 to 0.90."""
        return min(0.90, max(0.35, self.disk_space_warning_level_ratio / 100))

    @property
    def disk_space_clean_forcibly_ratio_clamped(self) -> float:
        """diskSpaceCleanForciblyRatio as RocketMQ uses it: 0.30 to 0.85."""
        return min(0.85, max(0.30, self.disk_space_clean_forcibly_ratio / 100))

    @property
    def is_sync_flush(self) -> bool:
        """Whether flushDiskType is SYNC_FLUSH."""
        return self.flush_disk_type == "SYNC_FLUSH"

    @property
    def uses_transient_store_pool(self) -> bool:
        """isTransientStorePoolEnable: asked for, ASYNC_FLUSH, and not a slave."""
        return self.transient_store_pool_enable and not self.is_sync_flush and self.broker_role != "SLAVE"

    @property
    def store_host(self) -> str:
        """``brokerIP1:listenPort``, the store host written into every record (a host name in
        ``brokerIP1`` is looked up now: ConfigError naming it when it does not resolve)."""
        ip = resolve_broker_ip(self.broker_ip1) if self.broker_ip1 else local_address()
        return f"[{ip}]:{self.listen_port}" if ":" in ip else f"{ip}:{self.listen_port}"
