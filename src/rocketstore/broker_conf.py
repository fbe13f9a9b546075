"""``broker.conf``: a Java ``.properties`` reader that splits as ``java.util.Properties.load`` does,
the names of the broker's own keys (BrokerConfig, BrokerIdentity, Netty), which a broker.conf holds
beside the store's and which the store ignores, and the store keys RocketMQ holds as Java longs.
"""

from __future__ import annotations

import re

from rocketstore.errors import ConfigError

_BLANK = " \t\f"  # Properties.load's whitespace; nothing else (no VT, NEL, U+2028 ...)
_LINE_END = re.compile(r"\r\n|\r|\n")  # LineReader's line ends


def parse_properties(text: str) -> dict[str, str]:
    """A Java ``.properties`` text -> dict, as ``Properties.load`` reads it.

    Lines end at ``\\r\\n``, ``\\r`` or ``\\n``; a line ending in an odd number of backslashes
    continues on the next one (whose leading whitespace is dropped), also at the end of the text;
    ``#``/``!`` comments never continue; ``key=value``, ``key: value`` and ``key value``; escapes
    ``\\t \\n \\r \\f \\uXXXX`` (a malformed ``\\u`` raises ConfigError). The last duplicate wins.
    """
    out: dict[str, str] = {}
    logical: str | None = None  # the logical line continued so far
    for line in _LINE_END.split(text):
        stripped = line.lstrip(_BLANK)
        if logical is None:
            if not stripped or stripped[0] in "#!":
                continue
            logical = ""
        logical += stripped
        if _odd_backslashes(logical):
            logical = logical[:-1]
            continue
        _store(out, logical)
        logical = None
    if logical is not None:  # continued on the last line: Java keeps what was read
        _store(out, logical)
    return out


def _odd_backslashes(s: str) -> bool:
    return (len(s) - len(s.rstrip("\\"))) % 2 == 1


def _store(out: dict[str, str], line: str) -> None:
    """Split a logical line into key and value as ``Properties.load0`` does."""
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
    out[_unescape(line[:key_end])] = _unescape(line[value_start:])


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    return re.sub(r"\\(u.{0,4}|.)", lambda m: _escape_char(m.group(1)), s, flags=re.DOTALL)


def _escape_char(c: str) -> str:
    if c[0] == "u":
        if not re.fullmatch(r"u[0-9a-fA-F]{4}", c):
            raise ConfigError(f"malformed \\uxxxx escape in a properties file: \\{c}")
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
