"""The message schema of the Spark source, and reading options into a StoreConfig.

Column names are the export's (``rocketstore export``, rocketmq-vectors' expected.jsonl):
timestamps become Spark TIMESTAMPs, ``body`` is BINARY and ``properties`` a MAP.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping

import pyarrow as pa

from rocketstore.config import OBSOLETE_KEYS, StoreConfig, snake_case
from rocketstore.errors import ConfigError, InvalidArgumentError, shown

log = logging.getLogger(__name__)

# (name, Spark type name, Arrow type) in schema order
COLUMNS: tuple[tuple[str, str, pa.DataType], ...] = (
    ("topic", "string", pa.string()),
    ("queueId", "int", pa.int32()),
    ("queueOffset", "bigint", pa.int64()),
    ("commitLogOffset", "bigint", pa.int64()),
    ("storeSize", "int", pa.int32()),
    ("sysFlag", "int", pa.int32()),
    ("flag", "int", pa.int32()),
    ("tags", "string", pa.string()),
    ("keys", "string", pa.string()),
    ("properties", "map<string,string>", pa.map_(pa.string(), pa.string())),
    ("body", "binary", pa.binary()),
    ("bodyCRC", "int", pa.int32()),
    ("bornTimestamp", "timestamp", pa.timestamp("us", tz="UTC")),
    ("storeTimestamp", "timestamp", pa.timestamp("us", tz="UTC")),
    ("bornHost", "string", pa.string()),
    ("storeHost", "string", pa.string()),
    ("reconsumeTimes", "int", pa.int32()),
    ("preparedTransactionOffset", "bigint", pa.int64()),
    ("msgId", "string", pa.string()),
    ("uniqKey", "string", pa.string()),
)
COLUMN_NAMES = tuple(c[0] for c in COLUMNS)
ARROW_TYPES = {name: t for name, _, t in COLUMNS}
DDL = ", ".join(f"`{name}` {kind}" for name, kind, _ in COLUMNS)


def spark_schema():  # -> pyspark.sql.types.StructType (imported lazily: the store never needs pyspark)
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(DDL)


def arrow_schema(columns: list[str] | tuple[str, ...] = COLUMN_NAMES) -> pa.Schema:
    """The Arrow schema Spark checks batches against (all fields nullable, UTC timestamps)."""
    return pa.schema([pa.field(name, ARROW_TYPES[name]) for name in columns])


def requested_columns(schema: object) -> list[str]:
    """The columns of a user-given schema (``spark.read.schema(...)``), checked against ours.

    A subset of the columns, in any order, is allowed: only those columns are produced. Every
    column is nullable, as in the source's own schema.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    wanted = to_arrow_schema(schema, timezone="UTC")  # type: ignore[arg-type]
    names = []
    for field in wanted:
        if field.name not in ARROW_TYPES:
            raise InvalidArgumentError(
                f"rocketstore has no column {field.name!r}; its columns are {', '.join(COLUMN_NAMES)}"
            )
        if not field.type.equals(ARROW_TYPES[field.name]):
            raise InvalidArgumentError(f"column {field.name!r} is {ARROW_TYPES[field.name]}, not {field.type}")
        names.append(field.name)
    strict = [field.name for field in wanted if not field.nullable]
    if strict:  # Spark would find out only when a task returns its first batch
        raise InvalidArgumentError(f"rocketstore's columns are nullable: declare {', '.join(strict)} without NOT NULL")
    return names


# -- options -----------------------------------------------------------------------------------


def option(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    """An option by name, case-insensitively (Spark lower-cases option keys)."""
    value = options.get(name)
    if value is None:
        value = options.get(name.lower())
    if value is None:
        for key, val in options.items():
            if key.lower() == name.lower():
                return val
    return default if value is None else value


def flag_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = option(options, name)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise InvalidArgumentError(f"option {name} must be true or false, not {shown(value)}")
    return text == "true"


def int_option(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    value = option(options, name)
    if value is None or str(value).strip() == "":
        return default
    try:
        return int(str(value).strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name} must be an integer, not {shown(value)}") from None


_LOWER_KEYS = {k.lower(): k for name, _ in StoreConfig().items() for k in (name, snake_case(name))}
_OBSOLETE = {k.lower(): v for k, v in OBSOLETE_KEYS.items()}  # pre-4.5 names RocketMQ ignores: ignored too


# the data source's own options: reads (options.py), writes (sink.py), both (config, topic)
SOURCE_OPTIONS = (
    *("mode", "topics", "topic", "queues", "tags", "startingOffsets", "endingOffsets", "startingTimestamp"),
    *("endingTimestamp", "maxPartitionBytes", "minPartitions", "maxRecordsPerBatch", "maxOffsetsPerTrigger"),
    *("failOnDataLoss", "pushFilters", "config", "lockWaitMs", "stagingDir", "sinkId", "asIs"),
)
SPARK_OPTIONS = ("path", "paths", "checkpointLocation", "queryName")  # Spark passes these itself


_NO_DELAY_LIMIT = "not supported: PySpark's Python sources have no read limit bound by a delay"
_KAFKA = {  # Kafka source options a user may bring along, and what this source has instead
    "minoffsetspertrigger": _NO_DELAY_LIMIT,
    "maxtriggerdelay": _NO_DELAY_LIMIT,
    "startingoffsetsbytimestamp": "not supported: set startingTimestamp (one time for every queue)",
    "endingoffsetsbytimestamp": "not supported: set endingTimestamp (one time for every queue)",
    "startingoffsetsbytimestampstrategy": "not supported: a queue whose messages are all older than "
    "startingTimestamp starts at its max offset",
    "subscribe": "set topics (a comma-separated list)",
    "subscribepattern": "set topics (a regular expression)",
    "assign": "set queues",
}


def warn_unknown_options(options: Mapping[str, str]) -> list[str]:
    """Log a warning for every option key that is neither the data source's nor a StoreConfig
    key (by RocketMQ or snake_case name), with the closest known key when one is close: a
    misspelt ``startingOffset`` would otherwise be ignored without a word. Keys compare
    case-insensitively (Spark lower-cases them). Returns the unknown keys."""
    known = {k.lower(): k for k in (*SOURCE_OPTIONS, *SPARK_OPTIONS)}
    unknown = [key for key in options if key.lower() not in known and key.lower() not in _LOWER_KEYS]
    if unknown:
        names = {**_LOWER_KEYS, **known}
        for key in unknown:
            close = difflib.get_close_matches(key.lower(), names, n=1, cutoff=0.75)
            hint = f"; did you mean {names[close[0]]!r}?" if close else ""
            if key.lower() in _KAFKA:
                hint = f" (a Kafka source option: {_KAFKA[key.lower()]})"
            if key.lower() in _OBSOLETE:
                hint = f" (RocketMQ 4.5 and later ignore this pre-4.5 name); set {_OBSOLETE[key.lower()]!r} instead"
            log.warning(
                "rocketstore: option %r is neither an option of the data source nor a store setting: it is ignored%s",
                key,
                hint,
            )
    return unknown


def store_config(options: Mapping[str, str]) -> StoreConfig:
    """A StoreConfig from ``config`` (a broker.conf path) and every option that is a
    MessageStoreConfig key by its RocketMQ name (``mappedFileSizeCommitLog`` ...); options
    that are not store keys are the source's own and are left alone (an option that is neither
    is warned about: ``warn_unknown_options``). A bad setting, or a ``config`` file that cannot be
    read, raises ConfigError naming the option."""
    warn_unknown_options(options)
    path = option(options, "config")
    config = broker_conf(path) if path else StoreConfig()
    for key, value in options.items():
        name = _LOWER_KEYS.get(key.lower())
        if name is None or key.lower() in ("path", "paths", "storepathrootdir", "store_path_root_dir"):
            continue
        try:
            config.set(name, value)
        except ConfigError as exc:
            raise ConfigError(f"option {key}: {exc}") from None
    return config


def broker_conf(path: str) -> StoreConfig:
    """The StoreConfig of the ``config`` option's broker.conf. A file that cannot be read (none
    there, a folder, no permission) or that holds a bad setting raises ConfigError naming the
    option and the file."""
    try:
        return StoreConfig.from_properties(path)
    except OSError as exc:
        raise ConfigError(f"option config: cannot read {path}: {exc.strerror or exc}") from None
    except ConfigError as exc:
        text = str(exc)  # a typo'd key names the file already
        raise ConfigError(f"option config: {text if text.startswith(path) else f'{path}: {text}'}") from None


def config_options(config: StoreConfig) -> dict[str, str]:
    """The inverse of ``store_config``: the settings that differ from RocketMQ's defaults, as options."""
    return {k: str(v) for k, v in config.changed().items() if k != "storePathRootDir"}


def store_path(options: Mapping[str, str]) -> str:
    """The store folder: ``load(PATH)``/``save(PATH)`` or the ``path`` option, a local path or a
    ``file:`` URI (``file:/p``, ``file:///p``, ``file://localhost/p``); see ``local_path``."""
    import json

    path = option(options, "path")
    if not path:
        paths = option(options, "paths")
        if paths:
            listed = json.loads(paths)
            if len(listed) != 1:
                raise InvalidArgumentError("rocketstore reads one store at a time: give one path")
            path = listed[0]
    if not path:
        raise InvalidArgumentError("no store given: use load(STORE) / save(STORE) or .option('path', STORE)")
    return local_path(str(path))


def split_scheme(uri: str) -> tuple[str | None, str]:
    """(scheme, rest) as Hadoop's Path splits them: a scheme is what precedes a colon that comes
    before any slash."""
    colon, slash = uri.find(":"), uri.find("/")
    if colon > 0 and (slash == -1 or colon < slash):
        return uri[:colon].lower(), uri[colon + 1 :]
    return None, uri


def local_path(given: str) -> str:
    """The local path of a store given as a path or a ``file:`` URI (``split_scheme``); no
    %-escape is decoded (Hadoop decodes none either). Any other scheme (``hdfs:``, ``s3a:`` ...)
    is refused: the store is a folder of memory-mapped files that the driver and every executor
    open themselves."""
    scheme, rest = split_scheme(given)
    if scheme is None:
        return given
    if scheme == "file":
        if not rest.startswith("//"):
            return rest or "."
        authority, _, path = rest[2:].partition("/")
        if authority.lower() in ("", "localhost"):
            return "/" + path
    raise InvalidArgumentError(
        f"store {given!r}: rocketstore reads and writes stores on the local file system only (a local "
        "disk, or a shared mount such as NFS at the same path on the driver and every executor): give a "
        "path or a file: URI (file:///path), not a URI of another file system or host"
    )
