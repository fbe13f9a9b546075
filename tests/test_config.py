"""StoreConfig: every MessageStoreConfig key by RocketMQ and snake_case name, coercion, broker.conf."""

from __future__ import annotations

import errno
import os
import re

import pytest

from conftest import tree_hashes
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.broker_conf import parse_properties
from rocketstore.cli.common import build_config
from rocketstore.config import snake_case
from rocketstore.errors import ConfigError, StoreFileError

ALL_KEYS = [name for name, _ in StoreConfig().items()]


def _other_value(name: str, value: object) -> object:
    """A value of the key's type that differs from ``value``."""
    if name == "flushDiskType":
        return "SYNC_FLUSH"
    if name == "brokerRole":
        return "SLAVE"
    if name == "brokerIP1":
        return "10.0.0.7"
    if name == "messageDelayLevel":
        return "1s 2s"
    if name == "deleteWhen":
        return "03;15"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value - 7 if value > 2**30 else value + 7
    if isinstance(value, float):
        return value / 2 + 0.125
    return "some-text"


def test_there_are_many_keys():
    assert len(ALL_KEYS) > 150
    assert len(set(ALL_KEYS)) == len(ALL_KEYS)
    assert len({snake_case(k) for k in ALL_KEYS}) == len(ALL_KEYS)


@pytest.mark.parametrize("name", ALL_KEYS)
def test_every_key_by_both_names(name):
    snake = snake_case(name)
    default = StoreConfig()
    assert default.get(name) == default.get(snake) == getattr(default, snake) == getattr(default, name)
    value = _other_value(name, default.get(name))
    for config in (StoreConfig(**{name: value}), StoreConfig(**{snake: value}), StoreConfig({name: value})):
        assert config.get(name) == value
        assert getattr(config, snake) == value
        assert getattr(config, name) == value
        assert config.to_dict()[name] == value
        assert config.changed() == {name: value}
    config = StoreConfig()
    setattr(config, name, value)
    assert config.get(snake) == value
    config = StoreConfig()
    setattr(config, snake, value)
    assert config.get(name) == value
    config.set(name, default.get(name))
    assert config == default


@pytest.mark.parametrize(
    ("camel", "snake"),
    [
        ("checkCRCOnRecover", "check_crc_on_recover"),
        ("brokerIP1", "broker_ip1"),
        ("mappedFileSizeCommitLog", "mapped_file_size_commit_log"),
        ("maxTransferBytesOnMessageInMemory", "max_transfer_bytes_on_message_in_memory"),
        ("haMaxGapNotInSync", "ha_max_gap_not_in_sync"),
        ("enabledAppendPropCRC", "enabled_append_prop_crc"),
        ("osPageCacheBusyTimeOutMills", "os_page_cache_busy_time_out_mills"),
        ("readUnCommitted", "read_un_committed"),
    ],
)
def test_snake_case_names(camel, snake):
    assert snake_case(camel) == snake
    assert StoreConfig(**{camel: StoreConfig().get(camel)}).get(snake) == StoreConfig().get(camel)


def test_defaults_are_rocketmqs():
    c = StoreConfig()
    assert c.mappedFileSizeCommitLog == 1024 * 1024 * 1024
    assert c.mappedFileSizeConsumeQueue == 300000 * 20 == c.cq_file_size
    assert (c.maxHashSlotNum, c.maxIndexNum, c.maxMsgsNumBatch) == (5_000_000, 20_000_000, 64)
    assert c.flushDiskType == "ASYNC_FLUSH" and c.brokerRole == "ASYNC_MASTER"
    assert (c.flushIntervalCommitLog, c.flushCommitLogLeastPages, c.flushCommitLogThoroughInterval) == (500, 4, 10000)
    assert (c.flushIntervalConsumeQueue, c.syncFlushTimeout) == (1000, 5000)
    assert (c.fileReservedTime, c.deleteWhen, c.cleanResourceInterval) == (72, "04", 10000)
    assert (c.deleteCommitLogFilesInterval, c.deleteFileBatchMax, c.destroyMapedFileIntervalForcibly) == (
        100,
        10,
        120000,
    )
    assert (c.diskMaxUsedSpaceRatio, c.diskSpaceCleanForciblyRatio, c.diskSpaceWarningLevelRatio) == (75, 85, 90)
    assert c.maxMessageSize == 4 * 1024 * 1024
    assert c.checkCRCOnRecover is True and c.enabledAppendPropCRC is False
    assert (c.maxRecoveryCommitlogFiles, c.osPageCacheBusyTimeOutMills) == (30, 1000)
    assert (c.haTransferBatchSize, c.haMaxGapNotInSync) == (32 * 1024, 256 * 1024 * 1024)
    assert c.messageDelayLevel == "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    assert c.messageIndexEnable is True and c.messageIndexSafe is False
    assert (c.maxTransferCountOnMessageInMemory, c.maxTransferBytesOnMessageInMemory) == (32, 256 * 1024)
    assert (c.maxTransferCountOnMessageInDisk, c.maxTransferBytesOnMessageInDisk) == (8, 64 * 1024)
    assert c.accessMessageInMemoryMaxRatio == 40
    assert c.maxFilterMessageSize == 16000
    assert c.storePathRootDir == os.path.join(os.path.expanduser("~"), "store")
    assert c.storePathCommitLog is None and c.brokerIP1 is None
    assert c.listenPort == 10911 and c.brokerClusterName == "DefaultCluster"
    assert c.changed() == {}


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("checkCRCOnRecover", "false", False),
        ("checkCRCOnRecover", "TRUE", True),
        ("messageIndexEnable", " False ", False),
        ("enabled_append_prop_crc", "true", True),
        ("maxMessageSize", "1024", 1024),
        ("maxMessageSize", " 2048 ", 2048),
        ("disappearTimeAfterStart", "-5", -5),
        ("logicalDiskSpaceCleanForciblyThreshold", "0.5", 0.5),
        ("deleteWhen", " 03 ", "03"),
        ("flushDiskType", "SYNC_FLUSH", "SYNC_FLUSH"),
    ],
)
def test_string_values_are_coerced(name, text, value):
    config = StoreConfig(**{name: text})
    assert config.get(name) == value
    assert type(config.get(name)) is type(value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("checkCRCOnRecover", "yes"),
        ("checkCRCOnRecover", 1),
        ("checkCRCOnRecover", None),
        ("maxMessageSize", "4 MiB"),
        ("maxMessageSize", "1.5"),
        ("maxMessageSize", True),
        ("maxMessageSize", None),
        ("logicalDiskSpaceCleanForciblyThreshold", "most"),
        ("flushDiskType", "ASYNC"),
        ("flushDiskType", "async_flush"),
        ("brokerRole", "MASTER"),
        ("storePathCommitLog", ["/a", "/b"]),  # "/a;/b", as in broker.conf
        ("storePathRootDir", None),
        ("messageDelayLevel", b"1s"),
    ],
)
def test_bad_values_are_refused(name, value):
    with pytest.raises(ConfigError):
        StoreConfig(**{name: value})
    config = StoreConfig()
    with pytest.raises(ConfigError):
        config.set(name, value)
    assert config == StoreConfig()  # unchanged


@pytest.mark.parametrize(
    "name",
    [
        "mappedFileSizeCommitLog",
        "mappedFileSizeConsumeQueue",
        "maxHashSlotNum",
        "maxIndexNum",
        "maxMessageSize",
        "maxMsgsNumBatch",  # a key query's cap: 0 or less would give one message, or none, of many
    ],
)
@pytest.mark.parametrize("value", [0, -65536, "0", " -1 "])
def test_sizes_and_index_dimensions_must_be_positive(name, value):
    with pytest.raises(ConfigError, match=f"{name} must be a positive integer"):
        StoreConfig(**{name: value})
    smallest = 2 if name == "maxIndexNum" else 1
    assert StoreConfig(**{name: smallest}).get(name) == smallest


def test_none_is_accepted_for_keys_without_a_default():
    config = StoreConfig(brokerIP1="10.0.0.1", storePathCommitLog="/x")
    config.brokerIP1 = None
    config.store_path_commit_log = None
    assert config.brokerIP1 is None and config.storePathCommitLog is None


def test_enum_values():
    for value in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        assert StoreConfig(flushDiskType=value).is_sync_flush == (value == "SYNC_FLUSH")
    for value in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
        assert StoreConfig(brokerRole=value).broker_role == value
    with pytest.raises(ConfigError, match="ASYNC_FLUSH, SYNC_FLUSH"):
        StoreConfig(flushDiskType="FAST")


def test_unknown_key_is_refused_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"maxMessageSise.*did you mean maxMessageSize"):
        StoreConfig(maxMessageSise=1)
    with pytest.raises(ConfigError, match="did you mean"):
        StoreConfig().set("flush_disk_tipe", "SYNC_FLUSH")
    config = StoreConfig()
    with pytest.raises(ConfigError):
        config.mappedFileSizeComitLog = 5
    with pytest.raises(ConfigError) as info:
        StoreConfig(completelyUnrelatedName=1)
    assert "completelyUnrelatedName" in str(info.value)
    with pytest.raises(AttributeError):
        _ = config.noSuchKey
    with pytest.raises(ConfigError):
        config.get("noSuchKey")


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        StoreConfig(maxMessageSize="lots")


def test_old_spellings_are_accepted():
    config = StoreConfig(haSlaveFallbehindMax=5)  # 4.x MessageStoreConfig's name
    assert config.haMaxGapNotInSync == 5


OLD_TEMPLATE = """\
brokerName=broker-a
mappedFileSizeCommitLog=65536
mappedFileSizeConsumeQueue=2000
# left over from a 4.3 template: RocketMQ >= 4.5 has no such keys (apache/rocketmq#1560)
mapedFileSizeConsumeQueue=300000
mapedFileSizeCommitLog=131072
"""


def test_pre_45_maped_keys_are_ignored_with_a_warning(tmp_path):
    """RocketMQ 4.5+ ignores mapedFileSize*: the operator's mappedFileSize* values hold, and
    each ignored key is named with the key to use instead."""
    path = tmp_path / "broker.conf"
    path.write_text(OLD_TEMPLATE, encoding="utf-8")
    warnings: list[str] = []
    config = StoreConfig.from_properties(path, warn=warnings.append)
    assert config.mappedFileSizeConsumeQueue == 2000 and config.mappedFileSizeCommitLog == 65536
    assert len(warnings) == 2
    assert "mapedFileSizeConsumeQueue" in warnings[0] and "set mappedFileSizeConsumeQueue instead" in warnings[0]
    assert "mapedFileSizeCommitLog" in warnings[1] and "set mappedFileSizeCommitLog instead" in warnings[1]
    path.write_text("mapedFileSizeCommitLog=65536\n", encoding="utf-8")
    assert StoreConfig.from_properties(path, warn=warnings.append).changed() == {}  # the default stays
    with pytest.raises(ConfigError, match="set mappedFileSizeCommitLog instead"):
        StoreConfig.from_properties(path, strict=True)


@pytest.mark.parametrize("name", ["mapedFileSizeCommitLog", "mapedFileSizeConsumeQueue"])
def test_pre_45_maped_keys_are_refused_by_name(name):
    """In code (and ``--set``) an old name is an error naming the key to use, not a silent no-op."""
    with pytest.raises(ConfigError, match=f"set {name.replace('maped', 'mapped')} instead"):
        StoreConfig(**{name: 4096})
    with pytest.raises(ConfigError, match="instead"):
        StoreConfig().set(name, "4096")


@pytest.mark.parametrize(("size", "rounded"), [(200, 200), (2000, 2000), (2001, 2020), (1, 20), (19, 20), (21, 40)])
def test_cq_file_size_rounds_up_to_whole_units(size, rounded):
    config = StoreConfig(mappedFileSizeConsumeQueue=size)
    assert config.cq_file_size == rounded
    assert config.mappedFileSizeConsumeQueue == size


def test_commit_log_paths():
    config = StoreConfig(storePathRootDir="/data/store")
    assert config.commit_log_paths == [os.path.join("/data/store", "commitlog")]
    config.storePathCommitLog = "/d1/commitlog, /d2/commitlog ,/d3/commitlog,"
    assert config.commit_log_paths == ["/d1/commitlog", "/d2/commitlog", "/d3/commitlog"]
    config.storePathCommitLog = "/only"
    assert config.commit_log_paths == ["/only"]


def test_store_host_and_derived_values():
    config = StoreConfig(brokerIP1="10.1.2.3", listenPort="10921")
    assert config.store_host == "10.1.2.3:10921"
    assert StoreConfig(diskMaxUsedSpaceRatio=99).disk_max_used_space_ratio_clamped == 95
    assert StoreConfig(diskMaxUsedSpaceRatio=2).disk_max_used_space_ratio_clamped == 10
    assert StoreConfig().disk_space_warning_ratio == 0.90
    assert StoreConfig().disk_space_clean_forcibly_ratio_clamped == 0.85


def test_copy_equality_and_repr():
    base = StoreConfig(maxMessageSize=1024)
    other = base.copy(flushDiskType="SYNC_FLUSH")
    assert base.flushDiskType == "ASYNC_FLUSH" and other.flushDiskType == "SYNC_FLUSH"
    assert other.maxMessageSize == 1024
    assert base.copy() == base and base.copy() is not base
    assert base != other
    assert "maxMessageSize=1024" in repr(base)
    with pytest.raises(ConfigError):
        base.copy(noSuchKey=1)


BROKER_CONF = """\
# a broker.conf as RocketMQ ships it
brokerClusterName = DefaultCluster
brokerName=broker-a
brokerId = 0
! another comment style
deleteWhen=04
fileReservedTime: 48
brokerRole=ASYNC_MASTER
flushDiskType = SYNC_FLUSH
namesrvAddr=127.0.0.1:9876
autoCreateTopicEnable=true
storePathRootDir=/data/rocketmq/store
storePathCommitLog=/data/rocketmq/store/commitlog,/data2/commitlog
mapedFileSizeCommitLog=1073741824
maxMessageSize     65536
checkCRCOnRecover=false
brokerIP1=192.168.0.10
messageDelayLevel=1s 5s \\
    10s 30s
   # indented comment
"""


def test_from_properties_of_a_broker_conf(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_text(BROKER_CONF, encoding="utf-8")
    config = StoreConfig.from_properties(path)
    assert config.brokerClusterName == "DefaultCluster"
    assert config.brokerName == "broker-a"
    assert config.brokerId == 0
    assert config.deleteWhen == "04"
    assert config.fileReservedTime == 48
    assert config.flushDiskType == "SYNC_FLUSH"
    assert config.storePathRootDir == "/data/rocketmq/store"
    assert config.commit_log_paths == ["/data/rocketmq/store/commitlog", "/data2/commitlog"]
    assert config.mappedFileSizeCommitLog == 1073741824
    assert config.maxMessageSize == 65536
    assert config.checkCRCOnRecover is False
    assert config.store_host == "192.168.0.10:10911"
    assert config.messageDelayLevel == "1s 5s 10s 30s"
    assert "namesrvAddr" not in config.to_dict()  # broker keys the store does not know are ignored
    with pytest.raises(ConfigError, match="namesrvAddr"):
        StoreConfig.from_properties(path, strict=True)


def test_from_properties_refuses_bad_values(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_text("flushDiskType=SOMETIMES\n", encoding="utf-8")
    with pytest.raises(ConfigError):
        StoreConfig.from_properties(path)
    path.write_text("maxMessageSize=big\n", encoding="utf-8")
    with pytest.raises(ConfigError):
        StoreConfig.from_properties(path)
    path.write_text("mappedFileSizeConsumeQueue=0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="positive"):
        StoreConfig.from_properties(path)


def test_from_properties_reads_iso_8859_1_when_not_utf_8(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_bytes("# r\u00e9glages du broker\nbrokerName=broker-\u00e9\nmaxMessageSize=65536\n".encode("iso-8859-1"))
    config = StoreConfig.from_properties(path)
    assert config.brokerName == "broker-\u00e9" and config.maxMessageSize == 65536
    path.write_text("brokerName=broker-\u00e9\n", encoding="utf-8")
    assert StoreConfig.from_properties(path).brokerName == "broker-\u00e9"


def test_broker_conf_errors_are_typed_and_name_the_file_the_key_and_the_line(tmp_path):
    """A file that cannot be read raises StoreFileError naming it (was a raw FileNotFoundError,
    IsADirectoryError, PermissionError); a bad value, an unknown key under strict=True and a
    malformed escape raise ConfigError naming the file, the key and its line."""
    path = tmp_path / "broker.conf"
    for missing, code in ((path, errno.ENOENT), (tmp_path, errno.EISDIR)):
        with pytest.raises(StoreFileError) as info:
            StoreConfig.from_properties(missing)
        assert info.value.errno == code and info.value.filename == str(missing)
    at = re.escape(str(path))
    cases = [
        (
            "brokerName=a\nmappedFileSizeCommitLog=3000000000\n",
            rf"^{at}: mappedFileSizeCommitLog is a Java int: .* \(line 2\)$",
        ),
        ("# c\n\nflushDiskType = \\\n  SOMETIMES\n", rf"^{at}: flushDiskType must be one of .*'SOMETIMES' \(line 3\)$"),
        ("a=1\nk\\u00g1=v\n", rf"^{at}: k\\u00g1: malformed \\uxxxx escape: \\u00g1 \(line 2\)$"),
        (
            "\n\nflushDiskTyp=SYNC_FLUSH\n",
            rf"^{at}: unknown key 'flushDiskTyp' \(did you mean flushDiskType\?\) \(line 3\)$",
        ),
    ]
    for text, message in cases:
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError, match=message):
            StoreConfig.from_properties(path)
    path.write_text("brokerName=a\nnoSuchKnob=1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{at}: unknown MessageStoreConfig key 'noSuchKnob'.* \(line 2\)$"):
        StoreConfig.from_properties(path, strict=True)
    path.write_text("maxHashSlotNum=600000000\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{at}: maxHashSlotNum 600000000 and maxIndexNum"):
        StoreConfig.from_properties(path)


def test_parse_properties_escapes():
    text = "a\\ b=c\\td\nkey\\:x = v\\u00e9\nempty=\nlonely\n"
    assert parse_properties(text) == {"a b": "c\td", "key:x": "v\u00e9", "empty": "", "lonely": ""}


def test_store_open_takes_settings_and_sets_the_root(tmp_path):
    config = StoreConfig(mappedFileSizeCommitLog=4096, mappedFileSizeConsumeQueue=200, brokerIP1="127.0.0.1")
    with MessageStore.open(tmp_path / "s", config, maxHashSlotNum=64, maxIndexNum=128) as store:
        assert store.config.maxHashSlotNum == 64
        assert store.config.storePathRootDir == str(tmp_path / "s")
        assert store.config.commit_log_paths == [str(tmp_path / "s" / "commitlog")]
    assert config.maxHashSlotNum == 5_000_000  # the caller's config is not changed
    with pytest.raises(ConfigError):
        MessageStore.open(tmp_path / "t", config, noSuchKey=1)


# -- the store host and the delay table: refused before any file is touched ------------------------
BAD_HOST_OR_DELAY = [
    {"listenPort": 99999},
    {"listenPort": -1},
    {"brokerIP1": "not an ip"},
    {"brokerIP1": "10.0.0.256"},
    {"brokerIP1": "1.2.3.4.5"},
    {"brokerIP1": "0x7f.1"},  # the C resolver's hex; Java looks it up as a name
    {"brokerIP1": "[fd00::g]"},
    {"brokerIP1": "[fd00::a"},
    {"deleteWhen": "4am"},
    {"messageDelayLevel": "1s 5x"},
    {"messageDelayLevel": " "},
]


@pytest.mark.parametrize("settings", BAD_HOST_OR_DELAY)
def test_a_bad_store_host_or_delay_table_is_a_config_error_when_set(settings):
    ((name, value),) = settings.items()
    with pytest.raises(ConfigError, match=name):
        StoreConfig(**settings)
    config = StoreConfig()
    with pytest.raises(ConfigError, match=name):
        config.set(name, value)
    with pytest.raises(ConfigError, match=name):
        config.copy(**settings)
    assert config == StoreConfig()


@pytest.mark.parametrize("settings", BAD_HOST_OR_DELAY)
def test_a_bad_store_host_or_delay_table_changes_nothing_on_open(tmp_path, store_config, settings):
    """A healthy store must not be made to look crashed (abort) by a bad config, nor a new folder made."""
    root = tmp_path / "s"
    with MessageStore.open(root, store_config) as store:
        assert store.put(Message("T", b"x")).ok
    before = tree_hashes(root)
    for read_only in (False, True):
        with pytest.raises(ConfigError):
            MessageStore.open(root, store_config, read_only=read_only, **settings)
    assert not (root / "abort").exists()
    assert tree_hashes(root) == before
    with pytest.raises(ConfigError):
        MessageStore.open(tmp_path / "new", store_config, **settings)
    assert not (tmp_path / "new").exists()


def test_good_store_hosts_and_delay_tables():
    assert StoreConfig(brokerIP1="fd00::a", listenPort=0).store_host == "[fd00::a]:0"
    assert StoreConfig(brokerIP1="[fd00::a]", listenPort=1).store_host == "[fd00::a]:1"
    assert StoreConfig(brokerIP1="10.0.0.1", listenPort="65535").store_host == "10.0.0.1:65535"
    assert StoreConfig(brokerIP1="").brokerIP1 == ""  # unset: the host's own address
    assert StoreConfig(messageDelayLevel="1s 2m 3h 4d").messageDelayLevel == "1s 2m 3h 4d"


# -- Java int and long ranges, derived file sizes --------------------------------------------------
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("mappedFileSizeCommitLog", 3_000_000_000),
        ("mappedFileSizeCommitLog", "2147483648"),
        ("mappedFileSizeConsumeQueue", 4294967296),
        ("maxMessageSize", 99999999999),
        ("maxHashSlotNum", 2**40),
        ("fileReservedTime", -(2**31) - 1),
        ("osPageCacheBusyTimeOutMills", 2**63),  # a long
        ("brokerId", "-9223372036854775809"),
    ],
)
def test_integers_outside_their_java_type_are_refused(name, value):
    with pytest.raises(ConfigError, match=f"{name} is a Java (int|long)"):
        StoreConfig(**{name: value})


def test_integers_at_the_ends_of_their_java_type_are_accepted():
    assert StoreConfig(mappedFileSizeCommitLog=2**31 - 1).mappedFileSizeCommitLog == 2**31 - 1
    assert StoreConfig(fileReservedTime=-(2**31)).fileReservedTime == -(2**31)
    assert StoreConfig(osPageCacheBusyTimeOutMills=2**40).osPageCacheBusyTimeOutMills == 2**40
    assert StoreConfig(brokerId=2**63 - 1).brokerId == 2**63 - 1


@pytest.mark.parametrize(
    "settings",
    [
        {"maxIndexNum": 200_000_000},  # 4,020,000,040 bytes with the default 5,000,000 slots
        {"maxHashSlotNum": 600_000_000},
        {"maxHashSlotNum": 1, "maxIndexNum": 107_374_181},  # 40 + 4 + 20 * 107374181 = 2**31 + 8
    ],
)
def test_an_index_file_larger_than_a_java_int_is_refused(tmp_path, settings):
    with pytest.raises(ConfigError, match=r"maxHashSlotNum \d+ and maxIndexNum \d+ make a \d+-byte index file"):
        StoreConfig(**settings)
    with pytest.raises(ConfigError, match="index file"):
        StoreConfig().copy(**settings)
    path = tmp_path / "broker.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()), encoding="utf-8")
    with pytest.raises(ConfigError, match="index file"):
        StoreConfig.from_properties(path)
    with pytest.raises(ConfigError, match="index file"):
        build_config(None, [(k, str(v)) for k, v in settings.items()])
    assert StoreConfig(maxHashSlotNum=1, maxIndexNum=107_374_180).maxIndexNum == 107_374_180  # 2**31 - 12


def test_a_consume_queue_file_rounded_up_past_a_java_int_is_refused():
    assert StoreConfig(mappedFileSizeConsumeQueue=2_147_483_640).cq_file_size == 2_147_483_640
    with pytest.raises(ConfigError, match="rounds up to a 2147483660-byte"):
        StoreConfig(mappedFileSizeConsumeQueue=2**31 - 1)


# -- minimums: index entries and service periods ---------------------------------------------------
def test_an_index_needs_two_entries_and_one_slot():
    with pytest.raises(ConfigError, match="maxIndexNum must be a positive integer of at least 2"):
        StoreConfig(maxIndexNum=1)
    with pytest.raises(ConfigError, match="maxHashSlotNum must be a positive integer"):
        StoreConfig(maxHashSlotNum=0)
    config = StoreConfig(maxIndexNum=2, maxHashSlotNum=1)
    assert (config.maxIndexNum, config.maxHashSlotNum) == (2, 1)


PERIODS = [
    "flushIntervalCommitLog",
    "commitIntervalCommitLog",
    "flushIntervalConsumeQueue",
    "cleanResourceInterval",
    "flushConsumerOffsetInterval",
    "flushDelayOffsetInterval",
]


@pytest.mark.parametrize("name", PERIODS)
@pytest.mark.parametrize("value", [0, -1, "0", " -5 "])
def test_service_periods_below_one_ms_are_refused(name, value):
    with pytest.raises(ConfigError, match=f"{name} must be at least 1 ms"):
        StoreConfig(**{name: value})
    assert StoreConfig(**{name: 1}).get(name) == 1
    assert StoreConfig(**{name: 3_600_000}).get(name) == 3_600_000


def test_other_intervals_may_still_be_zero():
    """A thorough-flush interval or a pause between deletions of 0 is a valid choice, not a spin."""
    config = StoreConfig(
        commitCommitLogThoroughInterval=0, deleteCommitLogFilesInterval=0, redeleteHangedFileInterval=0
    )
    assert config.commitCommitLogThoroughInterval == 0


# -- floats for integer keys -----------------------------------------------------------------------
@pytest.mark.parametrize(("name", "value"), [("fileReservedTime", 0.5), ("mappedFileSizeCommitLog", 65536.9)])
def test_a_fractional_float_for_an_integer_key_is_refused(name, value):
    with pytest.raises(ConfigError, match=f"{name} must be a whole number"):
        StoreConfig(**{name: value})
    config = StoreConfig()
    with pytest.raises(ConfigError):
        config.set(name, value)
    assert config == StoreConfig()


def test_an_integral_float_for_an_integer_key_is_its_int():
    value = StoreConfig(mappedFileSizeCommitLog=65536.0).mappedFileSizeCommitLog
    assert value == 65536 and type(value) is int
    with pytest.raises(ConfigError, match="must be an integer"):
        StoreConfig(fileReservedTime=float("nan"))


# -- broker.conf: typos, broker keys, other keys, BOM ----------------------------------------------
@pytest.mark.parametrize(
    ("line", "suggestion"),
    [
        ("mappedFileSizeComitLog=65536", "mappedFileSizeCommitLog"),
        ("flushDiskTyp=SYNC_FLUSH", "flushDiskType"),
        ("flushdisktype=SYNC_FLUSH", "flushDiskType"),  # Java's keys are case-sensitive: ignored there
        ("brokerIp1=10.0.0.1", "brokerIP1"),
        ("fileReservedTim=1", "fileReservedTime"),
    ],
)
def test_a_broker_conf_key_close_to_a_store_key_is_refused(tmp_path, line, suggestion):
    path = tmp_path / "broker.conf"
    path.write_text(f"brokerName=b\n{line}\n", encoding="utf-8")
    key = line.partition("=")[0]
    with pytest.raises(ConfigError, match=f"unknown key '{key}' \\(did you mean {suggestion}\\?\\)"):
        StoreConfig.from_properties(path)
    with pytest.raises(ConfigError, match=f"did you mean {suggestion}"):
        build_config(str(path), [])


def test_broker_keys_are_ignored_silently_and_other_keys_with_a_warning(tmp_path, capsys):
    path = tmp_path / "broker.conf"
    path.write_text(
        "brokerClusterName=c\nbrokerName=b\nbrokerId=0\nnamesrvAddr=127.0.0.1:9876\nbrokerIP2=10.0.0.2\n"
        "flushConsumerOffsetHistoryInterval=60000\nserverWorkerThreads=8\nautoCreateTopicEnable=true\n"
        "maxMessageSize=65536\n",
        encoding="utf-8",
    )
    warnings: list[str] = []
    assert StoreConfig.from_properties(path, warn=warnings.append).maxMessageSize == 65536
    assert warnings == []
    path.write_text("brokerName=b\nsomePluginSetting=1\nmaxMessageSize=65536\nzzTopSecretKnob=2\n", encoding="utf-8")
    assert StoreConfig.from_properties(path, warn=warnings.append).maxMessageSize == 65536
    assert len(warnings) == 1
    assert "somePluginSetting" in warnings[0] and "zzTopSecretKnob" in warnings[0] and "brokerName" not in warnings[0]
    assert build_config(str(path), [("maxMessageSize", "1024")]).maxMessageSize == 1024
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and "somePluginSetting" in err and err.count("\n") == 1


def test_set_wins_over_a_broker_conf_value_the_store_refuses(tmp_path):
    """``--set`` wins over ``--config``: a key it gives is not read from the file, so it also
    replaces a value there that RocketMQ takes and the store refuses (flushIntervalCommitLog=0), or
    one that fails only with another key (a 2 GiB index file); the file was checked first."""
    path = tmp_path / "broker.conf"
    path.write_text("flushIntervalCommitLog=0\nmaxIndexNum=200000000\nmaxMessageSize=1024\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="flushIntervalCommitLog"):
        build_config(str(path), [("maxIndexNum", "400")])
    config = build_config(str(path), [("flushIntervalCommitLog", "600"), ("max_index_num", "400")])
    assert config.changed() == {"flushIntervalCommitLog": 600, "maxIndexNum": 400, "maxMessageSize": 1024}
    with pytest.raises(ConfigError, match=r"with the keys set over it\): maxHashSlotNum"):
        build_config(str(path), [("flushIntervalCommitLog", "500"), ("maxHashSlotNum", "60000000")])
    with pytest.raises(ConfigError, match="unknown MessageStoreConfig key 'flushIntervalCommitLogg'"):
        build_config(str(path), [("flushIntervalCommitLogg", "500")])


def test_snake_case_keys_in_a_broker_conf_are_ignored_as_rocketmq_ignores_them(tmp_path):
    """RocketMQ looks up every key by its Java name (properties2Object): a broker.conf line
    mapped_file_size_commit_log=65536 changes nothing there, nor here now, with a warning naming
    the key to set; strict=True refuses it. In code and in ``--set`` the snake_case name still works."""
    path = tmp_path / "broker.conf"
    path.write_text("mapped_file_size_commit_log=65536\nmaxMessageSize=1024\n", encoding="utf-8")
    warnings: list[str] = []
    config = StoreConfig.from_properties(path, warn=warnings.append)
    assert config.changed() == {"maxMessageSize": 1024}
    assert len(warnings) == 1 and "ignoring mapped_file_size_commit_log=65536" in warnings[0]
    assert "set mappedFileSizeCommitLog instead" in warnings[0]
    with pytest.raises(
        ConfigError, match=r"mapped_file_size_commit_log.*set mappedFileSizeCommitLog instead \(line 1\)"
    ):
        StoreConfig.from_properties(path, strict=True)
    assert StoreConfig(mapped_file_size_commit_log=65536).mappedFileSizeCommitLog == 65536
    settings = [("mapped_file_size_commit_log", "65536")]
    assert build_config(None, settings).mappedFileSizeCommitLog == 65536
    assert build_config(str(path), settings).changed() == {"mappedFileSizeCommitLog": 65536, "maxMessageSize": 1024}


def test_a_broker_conf_with_a_utf_8_bom_keeps_its_first_key(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_bytes("\ufeffflushDiskType=SYNC_FLUSH\r\nmaxMessageSize=65536\r\n".encode())
    config = StoreConfig.from_properties(path, strict=True)
    assert (config.flushDiskType, config.maxMessageSize) == ("SYNC_FLUSH", 65536)
    path.write_bytes(b"\xef\xbb\xbfbrokerName=caf\xe9\n")  # not UTF-8 after the BOM: ISO-8859-1
    assert StoreConfig.from_properties(path).brokerName == "caf\u00e9"


def test_a_broker_conf_bom_or_non_ascii_text_is_warned_about(tmp_path):
    """RocketMQ reads broker.conf as ISO-8859-1 (Properties.load of an InputStream): a BOM becomes
    part of the first key, which it then ignores, and UTF-8 text becomes other characters.
    rocketstore drops the BOM and reads UTF-8, and says what RocketMQ reads instead."""
    path = tmp_path / "broker.conf"
    path.write_bytes("\ufeffflushDiskType=SYNC_FLUSH\nbrokerName=caf\u00e9\nbrokerClusterName=c\\u00e9\n".encode())
    warnings: list[str] = []
    config = StoreConfig.from_properties(path, warn=warnings.append)
    assert (config.flushDiskType, config.brokerName, config.brokerClusterName) == ("SYNC_FLUSH", "caf\u00e9", "c\u00e9")
    assert len(warnings) == 2, warnings  # an escape is ASCII text: RocketMQ reads it as rocketstore does
    assert warnings[0] == (
        f"{path}: starts with a UTF-8 byte order mark, which RocketMQ reads as text (ISO-8859-1): it reads "
        "the first key as '\u00ef\u00bb\u00bfflushDiskType' and ignores it; rocketstore drops the mark"
    )
    assert warnings[1] == (
        f"{path}: line 2: brokerName='caf\u00e9' holds non-ASCII text, which RocketMQ reads as ISO-8859-1: "
        "brokerName='caf\u00c3\u00a9'"
    )
    path.write_bytes("\ufeff# comment\nflushDiskType=SYNC_FLUSH\n".encode())
    warnings.clear()
    assert StoreConfig.from_properties(path, warn=warnings.append).flushDiskType == "SYNC_FLUSH"
    assert warnings == [f"{path}: starts with a UTF-8 byte order mark, which RocketMQ reads as text (ISO-8859-1)"]
    path.write_bytes("brokerName=caf\u00e9\n".encode("iso-8859-1"))  # not UTF-8: read as RocketMQ reads it
    assert StoreConfig.from_properties(path, warn=warnings.append).brokerName == "caf\u00e9" and len(warnings) == 1


# -- the parser follows java.util.Properties.load --------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=1\\", {"a": "1"}),  # a continuation on the last line keeps what was read
        ("a=1\\\n", {"a": "1"}),
        ("a=x\\\\\\\nb=2\n", {"a": "x\\b=2"}),  # three backslashes: an escaped one and a continuation
        ("a=x\\\\\nb=2\n", {"a": "x\\", "b": "2"}),  # two: an escaped backslash only
        ("a=1\x0bb=2\n", {"a": "1\x0bb=2"}),  # VT, NEL, U+2028 do not end a line
        ("a=1\x85b=2\n", {"a": "1\x85b=2"}),
        ("a=1\u2028b=2\n", {"a": "1\u2028b=2"}),
        ("a=1\rb=2\r\nc=3", {"a": "1", "b": "2", "c": "3"}),
        ("a=1\\\r\n   2\r\n", {"a": "12"}),
        ("a=1\\\n# not a comment\nb=2\n", {"a": "1# not a comment", "b": "2"}),
        ("# comment \\\nb=2\n", {"b": "2"}),  # a comment never continues
        ("a=1\\\n   \nb=2\n", {"a": "1", "b": "2"}),
        ("a = = v\nb:=v\nc =: v\n", {"a": "= v", "b": "=v", "c": ": v"}),
        ("\fa=1  \n", {"a": "1  "}),
    ],
)
def test_parse_properties_splits_as_java_does(text, expected):
    assert parse_properties(text) == expected


# Texts and the maps Java 17's Properties.load(InputStream) read from them (computed with it once;
# the random ones: 6000 texts of seed 11 over a-b = : blanks \\ CR LF # ! escapes, those the parser
# read otherwise before it followed LineReader after a line of a lone backslash).
JAVA_LOAD_CASES = [
    (
        "brokerName=a\n\\\n#note \\\nmappedFileSizeCommitLog=65536\n",
        {"brokerName": "a", "mappedFileSizeCommitLog": "65536"},
    ),
    ("\\\n\nb=2\n", {"b": "2"}),
    ("\\\n", {"": ""}),
    ("\\\r\n", {}),
    ("\\\n  ", {}),
    ("\\\n!c\nb=2", {"b": "2"}),
    ("  \\\n   \\\n a=1", {"a": "1"}),
    ("a=1\n\\\n\n", {"a": "1"}),
    ("\\\n#c", {}),
    ("\\\n\\\n", {"": ""}),
    ("\\\r\\\nx", {"x": ""}),
    ("\\\n \\\n#x\\\ny=1", {"y": "1"}),
    ("\\\n\nba\xe9\x0b=0=\\\r\n\n", {"ba\xe9\x0b": "0="}),
    ("\\\r#key\\\x0c\x0b!\\\\\\\\  \x0c\x0c#\\", {}),
    ("\\\r\n# uu\x0c\x0ba#\\u0041\\u00\x0bF", {}),
    ("\r\\\r\n\r\n\\\xe90:0\\\r\n", {"\xe90": "0"}),
    ("!u\r\n\\\r\n\r\n", {}),
    ("b\r\\\r\n#b\\u00\\\r\n\r=\\\\\\!", {"": "\\!", "b": ""}),
    ("\\\r\n\r\xe9 :", {"\xe9": ""}),
    ("\x0cb\x0b:\n\\\r\n\r", {"b\x0b": ""}),
    ("\\\n!\\\xe9aa\\u00 \\\r#\\\r\n", {}),
    ("\\\r\x0c", {}),
    ("\\\n\x0c", {}),
    ("\\\r\n!\\u00b\\=\\\\\\#\\\\\n", {}),
    ("0ukey\r\n\r\n\\\r\n\x0c", {"0ukey": ""}),
    ("\\!\r\n\r\\\r\n#a  \\\\b", {"!": ""}),
    ("\\#\n\x0c\\\r\n!b0\\u00b\x0c\x0b", {"#": ""}),
    ("\r\x0c\xe9\\\n\r\n\\\n\r\r\\\\", {"\\": "", "\xe9": ""}),
    ("bu  \n\\\\u0041a\r\n\\\r\n", {"\\u0041a": "", "bu": ""}),
    (" \\\r\n\r\n  F  \\F\xe9key\\\n\r\\\r\n\x0b ", {"\x0b": "", "F": "F\xe9key"}),
    ("\\\r\n\n\xe9\t\r\n", {"\xe9": ""}),
    ("\\\r\n#\\\r\n:=\xe9F!\r\n", {"": "=\xe9F!"}),
    ("\n\\\r\n#b", {}),
    ("\\\n\\b\x0bFaukey:\r\\\r\n\t\\\n!", {"b\x0bFaukey": ""}),
    ("\\\n!0key\\\xe9\xe9\\#u##!", {}),
]


@pytest.mark.parametrize(("text", "expected"), JAVA_LOAD_CASES)
def test_parse_properties_after_a_lone_continuation_reads_as_java_does(text, expected):
    """A line of a lone backslash leaves the logical line empty: Java's LineReader then starts a
    new line, skipping a comment or blank line after it (it was joined: ``#note=...`` was stored)."""
    assert parse_properties(text) == expected


@pytest.mark.parametrize("text", ["a=\\uZZZZ\n", "a=\\u12", "k\\u00g1=v\n"])
def test_a_malformed_unicode_escape_is_a_config_error(text, tmp_path):
    with pytest.raises(ConfigError, match="malformed"):
        parse_properties(text)
    path = tmp_path / "broker.conf"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="malformed"):
        StoreConfig.from_properties(path)


def test_trailing_whitespace_kept_by_the_parser_is_stripped_from_values(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_text("flushDiskType=SYNC_FLUSH  \nmaxMessageSize=1024\t\ncheckCRCOnRecover=false \n", encoding="utf-8")
    config = StoreConfig.from_properties(path)
    assert (config.flushDiskType, config.maxMessageSize, config.checkCRCOnRecover) == ("SYNC_FLUSH", 1024, False)


def test_text_values_are_trimmed_as_java_string_trim_does(tmp_path):
    """MixAll.properties2Object trims a text value with String.trim: every character up to U+0020,
    and nothing else (Python's str.strip took U+00A0 off a path and kept U+0001 on an enum value).
    A boolean is Boolean.parseBoolean's: no trimming of anything beyond that."""
    assert StoreConfig(flushDiskType="SYNC_FLUSH\x01").flushDiskType == "SYNC_FLUSH"
    assert StoreConfig(storePathCommitLog="/data/cl\u00a0").storePathCommitLog == "/data/cl\u00a0"
    assert StoreConfig(brokerName="\u2003b\x1f").brokerName == "\u2003b"
    with pytest.raises(ConfigError, match="checkCRCOnRecover must be true or false"):
        StoreConfig(checkCRCOnRecover="false\u00a0")
    path = tmp_path / "broker.conf"
    path.write_text("flushDiskType=SYNC_FLUSH\x01\nstorePathCommitLog=/data/cl\u00a0\n", encoding="utf-8")
    config = StoreConfig.from_properties(path, warn=lambda text: None)
    assert (config.flushDiskType, config.storePathCommitLog) == ("SYNC_FLUSH", "/data/cl\u00a0")


# -- brokerIP1: an IP literal as Java reads it, or a host name looked up only for the store host ----
@pytest.fixture
def lookups(monkeypatch):
    """socket.getaddrinfo answering for a few names only, recording what was looked up."""
    import socket

    asked: list[str] = []
    table = {
        "broker-a.example": [(socket.AF_INET6, "fd00::7"), (socket.AF_INET, "10.9.8.7")],
        "v6only.example": [(socket.AF_INET6, "fd00::8")],
    }

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        asked.append(host)
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(fam, socket.SOCK_STREAM, 6, "", (addr, 0)) for fam, addr in table[host]]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


@pytest.mark.parametrize(
    ("ip", "host"),
    [
        ("010.0.0.1", "10.0.0.1:10911"),  # Java: decimal, not octal
        ("1.2.3", "1.2.0.3:10911"),  # Java: the last part fills the bytes left
        ("167772161", "10.0.0.1:10911"),
        ("::ffff:10.0.0.1", "10.0.0.1:10911"),
        ("[FD00:0:0:0:0:0:0:A]", "[fd00::a]:10911"),
        ("broker-a.example", "10.9.8.7:10911"),  # IPv4 first, as Java's InetAddress.getByName
        ("v6only.example", "[fd00::8]:10911"),
    ],
)
def test_broker_ip1_literals_and_host_names(lookups, ip, host):
    config = StoreConfig(brokerIP1=ip)
    assert config.brokerIP1 == ip
    assert config.store_host == host


def test_a_broker_ip1_host_name_is_not_looked_up_until_the_store_host_is_needed(lookups, tmp_path):
    path = tmp_path / "broker.conf"
    path.write_text("brokerIP1=nowhere.invalid\n", encoding="utf-8")
    config = StoreConfig.from_properties(path)
    assert config.brokerIP1 == "nowhere.invalid" and config.copy() == config
    assert lookups == []
    with pytest.raises(ConfigError, match=r"brokerIP1 'nowhere\.invalid'.*does not resolve"):
        _ = config.store_host
    assert StoreConfig(brokerIP1="localhost").brokerIP1 == "localhost"


def test_a_broker_ip1_that_does_not_resolve_refuses_a_writable_open(lookups, tmp_path, store_config):
    root = tmp_path / "s"
    with MessageStore.open(root, store_config) as store:
        assert store.put(Message("T", b"x")).ok
    before = tree_hashes(root)
    with pytest.raises(ConfigError, match=r"nowhere\.invalid"):
        MessageStore.open(root, store_config, brokerIP1="nowhere.invalid")
    assert not (root / "abort").exists()
    assert tree_hashes(root) == before
    with MessageStore.open(root, store_config, brokerIP1="broker-a.example") as store:
        result = store.put(Message("T", b"y"))
        assert result.ok
        assert store.look_message_by_offset(result.commit_log_offset).store_host == "10.9.8.7:10911"


# -- numbers as Java parses them (MixAll.properties2Object: parseInt/parseDouble of the trimmed text)
@pytest.mark.parametrize("text", ["1_024", "0x100", "1024L", "1 024", "1e3", "+", "-", "\u00a0"])
def test_an_integer_is_what_integer_parse_int_reads(text):
    with pytest.raises(ConfigError, match="maxMessageSize must be an integer"):
        StoreConfig(maxMessageSize=text)


@pytest.mark.parametrize(("text", "value"), [("+1024", 1024), ("\t77 ", 77), ("0100", 100), ("\u0661\u0662", 12)])
def test_integers_java_reads(text, value):
    assert StoreConfig(maxMessageSize=text).maxMessageSize == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        *[("0.5", 0.5), ("0.5d", 0.5), ("0.25F", 0.25), ("1e-1", 0.1), (".5", 0.5), ("5.", 5.0), ("+.5", 0.5)],
        *[("0x1p-1", 0.5), ("0x.8P0d", 0.5), (" 0.5 ", 0.5), ("1", 1.0), (0.75, 0.75), (1, 1.0)],
    ],
)
def test_doubles_java_reads(text, value):
    config = StoreConfig(logicalDiskSpaceCleanForciblyThreshold=text)
    assert config.logicalDiskSpaceCleanForciblyThreshold == value
    assert type(config.logicalDiskSpaceCleanForciblyThreshold) is float


@pytest.mark.parametrize(
    "value",
    [
        *["1_0", "nan", "inf", "0x10", "0.5dd", "1,5", "0.5L", "e3", ".", "", "\u0661"],
        *["NaN", "Infinity", "-Infinity", "1e999", float("nan"), float("inf"), True, 10**400, -(10**400)],
    ],
)
def test_doubles_java_refuses_or_that_mean_nothing(value):
    with pytest.raises(ConfigError, match="logicalDiskSpaceCleanForciblyThreshold must be a"):
        StoreConfig(logicalDiskSpaceCleanForciblyThreshold=value)


# -- deleteWhen: hours 0..23 separated by ";" (UtilAll.isItTimeToDo) --------------------------------
@pytest.mark.parametrize(
    ("text", "hours"), [("04", {4}), ("04;05", {4, 5}), ("4", {4}), ("0;23", {0, 23}), ("04;", {4})]
)
def test_delete_when_hours(text, hours):
    from rocketstore.services.clean import delete_hours

    config = StoreConfig(deleteWhen=text)
    assert config.deleteWhen == text
    assert delete_hours(config) == hours


@pytest.mark.parametrize("text", ["04,05", "4am", "04 # 4 am", "", " ", "24", "-1", "04; 05", ";04", "04;;05", "4.0"])
def test_a_delete_when_rocketmq_cannot_read_is_refused(tmp_path, text):
    """RocketMQ's Integer.parseInt throws on such a value at every check (or never matches an
    hour): files would never be deleted by time, without a word. Refused when the key is set."""
    with pytest.raises(ConfigError, match="deleteWhen"):
        StoreConfig(deleteWhen=text)
    path = tmp_path / "broker.conf"
    path.write_text(f"deleteWhen={text}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="deleteWhen"):
        StoreConfig.from_properties(path)


def test_a_broker_ip1_that_does_not_resolve_neither_makes_a_store_nor_stops_a_read(lookups, tmp_path, store_config):
    """A new store is refused before its folder is made (it was made, lock file and all), and a
    read-only open, which writes no record, does not look the name up (it was refused too)."""
    with pytest.raises(ConfigError, match=r"nowhere\.invalid"):
        MessageStore.open(tmp_path / "new", store_config, brokerIP1="nowhere.invalid")
    assert not (tmp_path / "new").exists()
    root = tmp_path / "s"
    with MessageStore.open(root, store_config) as store:
        store.put(Message("T", b"x")).raise_for_status()
    del lookups[:]
    with MessageStore.open(root, store_config, read_only=True, brokerIP1="nowhere.invalid") as view:
        assert view.get_max_offset_in_queue("T", 0) == 1
    assert lookups == []


def test_a_broker_conf_number_or_boolean_with_trailing_blanks_is_warned_about(tmp_path):
    """Properties.load keeps trailing blanks and properties2Object trims only strings: RocketMQ
    keeps the default for ``4096 `` (Integer.parseInt refuses it) and reads ``true `` as false.
    rocketstore takes the trimmed value, and says RocketMQ would not."""
    path = tmp_path / "broker.conf"
    path.write_text(
        "mappedFileSizeCommitLog=4096 \nmessageIndexEnable=false\t\nwarmMapedFileEnable=true \n"
        "diskMaxUsedSpaceRatio=80 \nbrokerClusterName=c \nflushDiskType=SYNC_FLUSH \n",
        encoding="utf-8",
    )
    warnings: list[str] = []
    config = StoreConfig.from_properties(path, warn=warnings.append)
    assert config.mapped_file_size_commit_log == 4096 and config.warm_maped_file_enable is True
    assert len(warnings) == 3, warnings  # 'false\t' is false to Java too; strings are trimmed
    assert "mappedFileSizeCommitLog='4096 ': RocketMQ reads the default 1073741824" in warnings[0]
    assert "warmMapedFileEnable='true ': RocketMQ reads false" in warnings[1]
    assert "diskMaxUsedSpaceRatio='80 ': RocketMQ reads the default 75" in warnings[2]


def test_an_escaped_surrogate_pair_is_one_character_and_a_lone_half_is_refused(tmp_path):
    """native2ascii writes a character past U+FFFF as two \\u escapes, one String char each in
    Java: the pair is the one character (the folder is made under its name); half a pair, which no
    file name holds, is a ConfigError naming the key, not a UnicodeEncodeError out of os.stat."""
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathCommitLog={tmp_path}/cl\\ud83d\\ude00\n")
    config = StoreConfig.from_properties(conf)
    assert config.commit_log_paths == [f"{tmp_path}/cl\U0001f600"]
    with MessageStore.open(tmp_path / "s", config) as store:
        store.put(Message("T", b"x")).raise_for_status()
    assert os.listdir(tmp_path / "cl\U0001f600")
    for key in ("storePathCommitLog", "storePathRootDir", "readOnlyCommitLogStorePaths"):
        conf.write_text(f"{key}={tmp_path}/x\\ud800\n")
        with pytest.raises(ConfigError, match=f"{key} holds a lone UTF-16 surrogate"):
            StoreConfig.from_properties(conf)
        with pytest.raises(ConfigError, match="lone UTF-16 surrogate"):
            StoreConfig(**{key: "/x\udc00y"})
    # Python's stand-ins for the bytes of a file name that is not UTF-8 name that file: kept
    odd = os.fsdecode(os.fsencode(str(tmp_path)) + b"/st\xffore")
    with MessageStore.open(odd, StoreConfig(storePathCommitLog=odd + "-cl")) as store:
        store.put(Message("T", b"x")).raise_for_status()
    assert os.listdir(odd) and os.listdir(odd + "-cl")  # the store, and its commit log beside it
