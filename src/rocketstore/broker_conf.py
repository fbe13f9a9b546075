"""``broker.conf``: a Java ``.properties`` reader that splits as ``java.util.Properties.load`` does,
the names of the broker's own keys (BrokerConfig, BrokerIdentity, Netty), which a broker.conf holds
beside the store's and which the store ignores, and the store keys RocketMQ holds as Java longs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from rocketstore.errors import ConfigError

_BLANK = " \t\f"  # Properties.load's whitespace; nothing else (no VT, NEL, U+2028 ...)
_LINE_END = re.compile(r"\r\n|\r|\n")  # LineReader's line ends


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
