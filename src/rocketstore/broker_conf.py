"""``broker.conf``: a Java ``.properties`` reader that splits as ``java.util.Properties.load`` does,
the names of the broker's own keys (BrokerConfig, BrokerIdentity, Netty), which a broker.conf holds
beside the store's and which the store ignores, the older spellings of store keys, and the store
keys RocketMQ holds as Java longs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

from rocketstore.errors import ConfigError, StoreFileError

_BLANK = " \t\f"  # Properties.load's whitespace; nothing else (no VT, NEL, U+2028 ...)
_LINE_END = re.compile(r"\r\n|\r|\n")  # LineReader's line ends
_BOM = b"\xef\xbb\xbf"
_BOM_AS_TEXT = _BOM.decode("iso-8859-1")  # what Properties.load(InputStream) reads of it


def parse_properties(text: str) -> dict[str, str]:
    """A Java ``.properties`` text -> dict, as ``Properties.load`` reads it.

    Lines end at ``\\r\\n``, ``\\r`` or ``\\n``; a line ending in an odd number of backslashes
    continues on the next one (whose leading whitespace is dropped), also at the end of the text;
    ``#``/``!`` comments never continue; ``key=value``, ``key: value`` and ``key value``; escapes
    ``\\t \\n \\r \\f \\uXXXX`` (a malformed ``\\u`` raises ConfigError naming the line and
    the key). The last duplicate wins.
    """
    return {key: value for key, (value, _line) in read_properties(text).items()}


def read_properties(text: str) -> dict[str, tuple[str, int]]:
    """``parse_properties``, with the (1-based) line each key's logical line starts on."""
    out: dict[str, tuple[str, int]] = {}
    line_no, counted = 1, 0
    for start, line in logical_lines(text):
        line_no += len(_LINE_END.findall(text, counted, start))
        counted = start
        key_end, value_start = _split(line)
        try:
            out[_unescape(line[:key_end])] = _unescape(line[value_start:]), line_no
        except ConfigError as exc:
            raise ConfigError(f"{line[:key_end]}: {exc} (line {line_no})") from None
    return out


def read_conf_file(name: str, warn: Callable[[str], None]) -> dict[str, tuple[str, int]]:
    """A broker.conf's entries (value, line), read as UTF-8 (a leading BOM dropped), else as
    ISO-8859-1. RocketMQ reads it as ISO-8859-1 always: a BOM and non-ASCII text it reads
    otherwise get a warning each. StoreFileError naming a file that cannot be read; ConfigError
    naming the file, the line and the key for a malformed escape."""
    try:
        data = Path(name).read_bytes()
    except OSError as exc:
        if exc.errno is None:
            raise StoreFileError(f"{name}: cannot read the config file: {exc}") from exc
        raise StoreFileError(exc.errno, exc.strerror, name) from exc
    bom, data = data.startswith(_BOM), data.removeprefix(_BOM)
    as_java = data.decode("iso-8859-1")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = as_java
    try:
        entries = read_properties(text)
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc}") from None
    if bom:
        warn(f"{name}: {_bom_note(text)}")
    if text != as_java:
        for note in _read_otherwise(entries, read_properties(as_java)):
            warn(f"{name}: {note}")
    return entries


def _bom_note(text: str) -> str:
    """What RocketMQ makes of the BOM before ``text``: the first key, when it is on the first line."""
    note = "starts with a UTF-8 byte order mark, which RocketMQ reads as text (ISO-8859-1)"
    start, line = next(logical_lines(text), (-1, ""))
    if start < 0 or _LINE_END.search(text, 0, start):
        return note  # a comment or blank line first: nothing is lost
    key = line[: _split(line)[0]] if start == 0 else ""  # after blanks, the mark alone is the key
    return f"{note}: it reads the first key as '{_BOM_AS_TEXT}{key}' and ignores it; rocketstore drops the mark"


def _read_otherwise(ours: dict[str, tuple[str, int]], java: dict[str, tuple[str, int]]) -> Iterator[str]:
    """A note for every entry of UTF-8 text that RocketMQ, reading ISO-8859-1, reads otherwise."""
    java_lines = {line: (key, value) for key, (value, line) in java.items()}
    for key, (value, line) in ours.items():
        theirs = java_lines.get(line)
        if theirs is not None and theirs != (key, value):
            yield (
                f"line {line}: {key}={value!r} holds non-ASCII text, which RocketMQ reads as ISO-8859-1: "
                f"{theirs[0]}={theirs[1]!r}"
            )


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """``Properties.LineReader.readLine``: each logical line (continuations joined, comments and
    blank lines skipped) with the offset in ``text`` where it starts. A line that is still empty
    after a continuation (a line of a lone backslash) starts afresh: a comment or blank line after
    it is skipped, not joined."""
    end, off = len(text), 0
    while True:
        chars: list[str] = []
        skip_blanks, appended, backslash, start = True, False, False, off
        while True:
            if off >= end:
                if chars:
                    yield start, "".join(chars[:-1] if backslash else chars)
                return
            c = text[off]
            off += 1
            if skip_blanks:
                if c in _BLANK or (not appended and c in "\r\n"):
                    continue
                skip_blanks = appended = False
                if not chars:
                    start = off - 1
            if not chars and c in "#!":  # a comment: up to the end of its line
                while off < end and text[off] not in "\r\n":
                    off += 1
                if off >= end:
                    return
                off += 1
                skip_blanks = True
                continue
            if c not in "\r\n":
                chars.append(c)
                backslash = c == "\\" and not backslash
            elif not chars:  # an empty line (after a lone continuation too)
                skip_blanks = True
            elif off >= end or not backslash:
                yield start, "".join(chars[:-1] if backslash else chars)
                if off >= end:
                    return
                break
            else:  # a continuation: the backslash goes, the next line's leading blanks too
                chars.pop()
                skip_blanks, appended, backslash = True, True, False
                if c == "\r" and text[off] == "\n":
                    off += 1


def _split(line: str) -> tuple[int, int]:
    """Where the key of a logical line ends and its value starts, as ``Properties.load0`` splits it."""
    key_end, value_start, has_sep, escaped = len(line), len(line), False, False
    for i, c in enumerate(line):
        if not escaped and c in "=:":
            key_end, value_start, has_sep = i, i + 1, True
            break
        if not escaped and c in _BLANK:
            key_end, value_start = i, i + 1
            break
        escaped = c == "\\" and not escaped
    while value_start < len(line):
        c = line[value_start]
        if c not in _BLANK:
            if has_sep or c not in "=:":
                break
            has_sep = True
        value_start += 1
    return key_end, value_start


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    return re.sub(r"\\(u.{0,4}|.)", lambda m: _escape_char(m.group(1)), s, flags=re.DOTALL)


def _escape_char(c: str) -> str:
    if c[0] == "u":
        if not re.fullmatch(r"u[0-9a-fA-F]{4}", c):
            raise ConfigError(f"malformed \\uxxxx escape: \\{c}")
        return chr(int(c[1:], 16))
    return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c)


# Keys of RocketMQ 4.9 and 5.x BrokerConfig, BrokerIdentity, NettyServerConfig and NettyClientConfig
# (the broker reads a broker.conf into all of them) that are not MessageStoreConfig keys.
_BROKER_KEY_NAMES = """
    brokerConfigPath rocketmqHome namesrvAddr brokerIP2 recoverConcurrently brokerPermission
    defaultTopicQueueNums autoCreateTopicEnable clusterTopicEnable brokerTopicEnable
    autoCreateSubscriptionGroup messageStorePlugIn msgTraceTopicName traceTopicEnable
    sendMessageThreadPoolNums putMessageFutureThreadPoolNums pullMessageThreadPoolNums
    litePullMessageThreadPoolNums ackMessageThreadPoolNums processReplyMessageThreadPoolNums
    queryMessageThreadPoolNums adminBrokerThreadPoolNums clientManageThreadPoolNums
    consumerManageThreadPoolNums loadBalanceProcessorThreadPoolNums heartbeatThreadPoolNums
    recoverThreadPoolNums endTransactionThreadPoolNums flushConsumerOffsetHistoryInterval
    rejectTransactionMessage fetchNameSrvAddrByDnsLookup fetchNamesrvAddrByAddressServer
    sendThreadPoolQueueCapacity putThreadPoolQueueCapacity pullThreadPoolQueueCapacity
    litePullThreadPoolQueueCapacity ackThreadPoolQueueCapacity replyThreadPoolQueueCapacity
    queryThreadPoolQueueCapacity clientManagerThreadPoolQueueCapacity
    consumerManagerThreadPoolQueueCapacity heartbeatThreadPoolQueueCapacity
    endTransactionPoolQueueCapacity adminBrokerThreadPoolQueueCapacity
    loadBalanceThreadPoolQueueCapacity longPollingEnable shortPollingTimeMills
    notifyConsumerIdsChangedEnable highSpeedMode commercialEnable commercialTimerCount
    commercialTransCount commercialBigCount commercialBaseCount commercialSizePerMsg
    accountStatsEnable accountStatsPrintZeroValues transferMsgByHeap maxDelayTime regionId
    registerBrokerTimeoutMills sendHeartbeatTimeoutMillis slaveReadEnable
    disableConsumeIfConsumerReadSlowly consumerFallbehindThreshold brokerFastFailureEnable
    waitTimeMillsInSendQueue waitTimeMillsInPullQueue waitTimeMillsInLitePullQueue
    waitTimeMillsInHeartbeatQueue waitTimeMillsInTransactionQueue waitTimeMillsInAckQueue
    waitTimeMillsInAdminBrokerQueue startAcceptSendRequestTimeStamp traceOn rejectPullConsumerEnable
    expectConsumerNumUseFilter maxErrorRateOfBloomFilter filterDataCleanTimeSpan filterSupportRetry
    enablePropertyFilter compressedRegister forceRegister registerNameServerPeriod
    updateNameServerAddrPeriod brokerHeartbeatInterval brokerNotActiveTimeoutMillis
    enableNetWorkFlowControl enableBroadcastOffsetStore broadcastOffsetExpireSecond
    broadcastOffsetExpireMaxSecond popPollingSize popPollingMapSize maxPopPollingSize reviveQueueNum
    reviveInterval reviveMaxSlow reviveScanTime enableSkipLongAwaitingAck reviveAckWaitMs enablePopLog
    enablePopBufferMerge popCkStayBufferTime popCkStayBufferTimeOut popCkMaxBufferSize
    popCkOffsetMaxQueueSize enablePopBatchAck enableNotifyAfterPopOrderLockRelease
    initPopOffsetByCheckMsgInMem retrieveMessageFromPopRetryTopicV1 enableRetryTopicV2
    realTimeNotifyConsumerChange litePullMessageEnable syncBrokerMemberGroupPeriod
    loadBalancePollNameServerInterval cleanOfflineBrokerInterval serverLoadBalancerEnable
    defaultMessageRequestMode defaultPopShareQueueNum transactionTimeOut transactionCheckMax
    transactionCheckInterval transactionMetricFlushInterval transactionOpMsgMaxSize
    transactionOpBatchInterval aclEnable storeReplyMessageEnable enableDetailStat
    autoDeleteUnusedStats isolateLogEnable forwardTimeout enableSlaveActingMaster enableRemoteEscape
    skipPreOnline asyncSendEnable useServerSideResetOffset consumerOffsetUpdateVersionStep
    delayOffsetUpdateVersionStep lockInStrictMode compatibleWithOldNameSrv enableControllerMode
    controllerAddr fetchControllerAddrByDnsLookup syncBrokerMetadataPeriod checkSyncStateSetPeriod
    syncControllerMetadataPeriod controllerHeartBeatTimeoutMills validateSystemTopicWhenUpdateTopic
    brokerElectionPriority useStaticSubscription metricsExporterType metricsOtelCardinalityLimit
    metricsGrpcExporterTarget metricsGrpcExporterHeader metricGrpcExporterTimeOutInMills
    metricGrpcExporterIntervalInMills metricLoggingExporterIntervalInMills metricsPromExporterPort
    metricsPromExporterHost metricsLabel metricsInDelta channelExpiredTimeout
    subscriptionExpiredTimeout estimateAccumulation coldCtrStrategyEnable usePIDColdCtrStrategy
    cgColdReadThreshold globalColdReadThreshold fetchNamesrvAddrInterval
    popResponseReturnActualRetryTopic enableSingleTopicRegister enableMixedMessageType
    enableSplitRegistration popInflightMessageThreshold enablePopMessageThreshold
    splitRegistrationSize configBlackList skipWhenCKRePutReachMaxTimes filterServerNums
    isBrokerContainer isInBrokerContainer
    serverWorkerThreads serverCallbackExecutorThreads serverSelectorThreads serverOnewaySemaphoreValue
    serverAsyncSemaphoreValue serverChannelMaxIdleTimeSeconds serverSocketSndBufSize
    serverSocketRcvBufSize serverSocketBacklog serverPooledByteBufAllocatorEnable
    writeBufferHighWaterMark writeBufferLowWaterMark useEpollNativeSelector bindAddress
    enableShutdownGracefully shutdownWaitTimeSeconds
    clientWorkerThreads clientCallbackExecutorThreads clientOnewaySemaphoreValue
    clientAsyncSemaphoreValue connectTimeoutMillis channelNotActiveInterval
    clientChannelMaxIdleTimeSeconds clientSocketSndBufSize clientSocketRcvBufSize
    clientPooledByteBufAllocatorEnable clientCloseSocketIfTimeout useTLS socksProxyConfig
    disableCallbackExecutor disableNettyWorkerGroup maxReconnectIntervalTimeSeconds
    enableReconnectForGoAway enableTransparentRetry
    authenticationEnabled authenticationProvider authenticationMetadataProvider
    authenticationStrategy authenticationWhitelist authorizationEnabled authorizationProvider
    authorizationMetadataProvider authorizationStrategy authorizationWhitelist
    innerClientAuthenticationCredentials migrateAuthFromV1Enabled
"""
BROKER_KEYS = frozenset(_BROKER_KEY_NAMES.split())

# Older spellings RocketMQ still reads for the same keys (4.x MessageStoreConfig's setter).
ALIASES = {
    "haSlaveFallbehindMax": "haMaxGapNotInSync",
}

# Pre-4.5 spellings RocketMQ 4.5 and later have no setter for and so ignore (apache/rocketmq#1560):
# a broker.conf template still carrying them must not change the file sizes. Ignored with a warning.
OBSOLETE_KEYS = {
    "mapedFileSizeCommitLog": "mappedFileSizeCommitLog",
    "mapedFileSizeConsumeQueue": "mappedFileSizeConsumeQueue",
}


def obsolete_key(name: str) -> str:
    """Why an ``OBSOLETE_KEYS`` name does nothing, and what to set instead."""
    return (
        f"{name} is the pre-4.5 name of {OBSOLETE_KEYS[name]}, which RocketMQ 4.5 and later ignore "
        f"(apache/rocketmq#1560): set {OBSOLETE_KEYS[name]} instead"
    )


# MessageStoreConfig and BrokerConfig keys of type long; every other integer key is a Java int.
JAVA_LONG_KEYS = frozenset(
    {
        "flushDelayOffsetInterval",
        "osPageCacheBusyTimeOutMills",
        "commitLogForceSwapMapInterval",
        "commitLogSwapMapInterval",
        "logicQueueForceSwapMapInterval",
        "logicQueueSwapMapInterval",
        "cleanSwapedMapInterval",
        "maxHaTransferByteInSecond",
        "haMaxTimeSlaveNotCatchup",
        "maxChecksumRange",
        "maxSlaveResendLength",
        "cleanRocksDBDirtyCQIntervalMin",
        "statRocksDBCQIntervalSec",
        "memTableFlushIntervalMs",
        "rocksdbWalFileRollingThreshold",
        "brokerId",
    }
)
