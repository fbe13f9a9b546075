"""Every MessageStoreConfig key the store knows, with its default (RocketMQ 5.3.3's, spec section
11), and the bounds ``StoreConfig`` checks values against: which keys are enums, which must be
positive, the periods that must be at least 1 ms, and the Java int and long ranges.
"""

from __future__ import annotations

import os
from typing import Any

OS_PAGE_SIZE = 4096
CQ_STORE_UNIT_SIZE = 20

FLUSH_DISK_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")

_HOME = os.path.expanduser("~")

# (RocketMQ name, default). The type of a key is the type of its default (str for None).
KEYS: tuple[tuple[str, Any], ...] = (
    # paths and file sizes
    ("storePathRootDir", os.path.join(_HOME, "store")),
    ("storePathCommitLog", None),
    ("storePathDLedgerCommitLog", None),
    ("storePathEpochFile", None),
    ("storePathBrokerIdentity", None),
    ("readOnlyCommitLogStorePaths", None),
    ("mappedFileSizeCommitLog", 1024 * 1024 * 1024),
    ("mappedFileSizeConsumeQueue", 300000 * CQ_STORE_UNIT_SIZE),
    ("enableConsumeQueueExt", False),
    ("mappedFileSizeConsumeQueueExt", 48 * 1024 * 1024),
    ("mapperFileSizeBatchConsumeQueue", 300000 * 46),
    ("bitMapLengthConsumeQueueExt", 64),
    ("storeType", "default"),
    # flush and commit
    ("flushDiskType", "ASYNC_FLUSH"),
    ("flushIntervalCommitLog", 500),
    ("flushCommitLogLeastPages", 4),
    ("flushCommitLogThoroughInterval", 10000),
    ("flushCommitLogTimed", True),
    ("commitIntervalCommitLog", 200),
    ("commitCommitLogLeastPages", 4),
    ("commitCommitLogThoroughInterval", 200),
    ("flushIntervalConsumeQueue", 1000),
    ("flushConsumeQueueLeastPages", 2),
    ("flushConsumeQueueThoroughInterval", 60000),
    ("flushLeastPagesWhenWarmMapedFile", 1024 // 4 * 16),
    ("syncFlushTimeout", 5000),
    ("slaveTimeout", 3000),
    ("putMessageTimeout", 8000),
    ("transientStorePoolEnable", False),
    ("transientStorePoolSize", 5),
    ("fastFailIfNoBufferInStorePool", False),
    ("writeWithoutMmap", False),
    ("wakeCommitWhenPutMessage", True),
    ("wakeFlushWhenPutMessage", False),
    ("warmMapedFileEnable", False),
    ("useReentrantLockWhenPutMessage", True),
    ("osPageCacheBusyTimeOutMills", 1000),
    ("readUnCommitted", False),
    ("putConsumeQueueDataByFileChannel", True),
    # cleanup
    ("fileReservedTime", 72),
    ("deleteWhen", "04"),
    ("diskMaxUsedSpaceRatio", 75),
    ("diskSpaceWarningLevelRatio", 90),
    ("diskSpaceCleanForciblyRatio", 85),
    ("cleanResourceInterval", 10000),
    ("deleteCommitLogFilesInterval", 100),
    ("deleteConsumeQueueFilesInterval", 100),
    ("destroyMapedFileIntervalForcibly", 120000),
    ("redeleteHangedFileInterval", 120000),
    ("cleanFileForciblyEnable", True),
    ("deleteFileBatchMax", 10),
    ("maxBatchDeleteFilesNum", 50),
    ("replicasPerDiskPartition", 1),
    ("logicalDiskSpaceCleanForciblyThreshold", 0.8),
    ("enableCleanExpiredOffset", False),
    ("correctLogicMinOffsetSleepInterval", 1),
    ("correctLogicMinOffsetForceInterval", 5 * 60 * 1000),
    # messages
    ("maxMessageSize", 1024 * 1024 * 4),
    ("maxFilterMessageSize", 16000),
    ("maxTopicLength", 127),
    ("checkCRCOnRecover", True),
    ("enabledAppendPropCRC", False),
    ("forceVerifyPropCRC", False),
    ("autoMessageVersionOnTopicLen", True),
    ("duplicationEnable", False),
    ("maxRecoveryCommitlogFiles", 30),
    ("recheckReputOffsetFromCq", False),
    ("enableLogConsumeQueueRepeatedlyBuildWhenRecover", False),
    ("putMsgIndexHightWater", 600000),
    # index
    ("messageIndexEnable", True),
    ("messageIndexSafe", False),
    ("maxHashSlotNum", 5000000),
    ("maxIndexNum", 5000000 * 4),
    ("maxMsgsNumBatch", 64),
    ("defaultQueryMaxNum", 32),
    # reads
    ("maxTransferBytesOnMessageInMemory", 1024 * 256),
    ("maxTransferCountOnMessageInMemory", 32),
    ("maxTransferBytesOnMessageInDisk", 1024 * 64),
    ("maxTransferCountOnMessageInDisk", 8),
    ("accessMessageInMemoryMaxRatio", 40),
    ("accessMessageInMemoryHotRatio", 26),
    ("travelCqFileNumWhenGetMessage", 1),
    ("pullBatchMaxMessageCount", 160),
    ("offsetCheckInSlave", False),
    ("maxConsumeQueueScan", 20000),
    ("sampleCountThreshold", 5000),
    ("sampleSteps", 32),
    ("dataReadAheadEnable", True),
    ("coldDataFlowControlEnable", False),
    ("coldDataScanEnable", False),
    # schedule
    ("messageDelayLevel", "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"),
    ("flushDelayOffsetInterval", 10000),
    ("flushConsumerOffsetInterval", 5000),  # BrokerConfig: consumerOffset.json and topics.json
    ("enableScheduleMessageStats", True),
    ("enableScheduleAsyncDeliver", False),
    ("scheduleAsyncDeliverMaxPendingLimit", 2000),
    ("scheduleAsyncDeliverMaxResendNum2Blocked", 3),
    # replication
    ("brokerRole", "ASYNC_MASTER"),
    ("haListenPort", 10912),
    ("haSendHeartbeatInterval", 5000),
    ("haHousekeepingInterval", 20000),
    ("haTransferBatchSize", 1024 * 32),
    ("haMasterAddress", None),
    ("haMaxGapNotInSync", 1024 * 1024 * 256),
    ("haFlowControlEnable", False),
    ("maxHaTransferByteInSecond", 100 * 1024 * 1024),
    ("haMaxTimeSlaveNotCatchup", 15000),
    ("syncMasterFlushOffsetWhenStartup", False),
    ("maxChecksumRange", 1024 * 1024 * 1024),
    ("maxSlaveResendLength", 256 * 1024 * 1024),
    ("syncFromLastFile", False),
    ("asyncLearner", False),
    ("totalReplicas", 1),
    ("inSyncReplicas", 1),
    ("minInSyncReplicas", 1),
    ("allAckInSyncStateSet", False),
    ("enableAutoInSyncReplicas", False),
    # features rocketstore accepts but does not implement (their defaults are "off")
    ("enableDLegerCommitLog", False),
    ("dLegerGroup", None),
    ("dLegerPeers", None),
    ("dLegerSelfId", None),
    ("preferredLeaderId", None),
    ("enableBatchPush", False),
    ("enableLmq", False),
    ("enableMultiDispatch", False),
    ("maxLmqConsumeQueueNum", 20000),
    ("dispatchCqThreads", 10),
    ("dispatchCqCacheNum", 1024 * 4),
    ("enableAsyncReput", True),
    ("dispatchFromSenderThread", False),
    ("maxAsyncPutMessageRequests", 5000),
    ("enableBuildConsumeQueueConcurrently", False),
    ("batchDispatchRequestThreadPoolNums", 16),
    ("enableCalcFilterBitMap", False),
    ("enableCompaction", True),
    ("compactionMappedFileSize", 100 * 1024 * 1024),
    ("compactionCqMappedFileSize", 10 * 1024 * 1024),
    ("compactionScheduleInternal", 15 * 60 * 1000),
    ("maxOffsetMapSize", 100 * 1024 * 1024),
    ("compactionThreadNum", 6),
    ("mappedFileSizeTimerLog", 100 * 1024 * 1024),
    ("timerPrecisionMs", 1000),
    ("timerRollWindowSlot", 3600 * 24 * 2),
    ("timerFlushIntervalMs", 1000),
    ("timerGetMessageThreadNum", 3),
    ("timerPutMessageThreadNum", 3),
    ("timerEnableDisruptor", False),
    ("timerEnableCheckMetrics", True),
    ("timerInterceptDelayLevel", False),
    ("timerMaxDelaySec", 3600 * 24 * 3),
    ("timerWheelEnable", True),
    ("disappearTimeAfterStart", -1),
    ("timerStopEnqueue", False),
    ("timerCheckMetricsWhen", "05"),
    ("timerSkipUnknownError", False),
    ("timerWarmEnable", False),
    ("timerStopDequeue", False),
    ("timerEnableRetryUntilSuccess", False),
    ("timerCongestNumEachSlot", 2147483647),
    ("timerMetricSmallThreshold", 1000000),
    ("timerProgressLogIntervalMs", 10000),
    ("timerColdDataCheckIntervalMs", 60000),
    ("mappedFileSwapEnable", True),
    ("commitLogForceSwapMapInterval", 12 * 60 * 60 * 1000),
    ("commitLogSwapMapInterval", 60 * 60 * 1000),
    ("commitLogSwapMapReserveFileNum", 100),
    ("logicQueueForceSwapMapInterval", 12 * 60 * 60 * 1000),
    ("logicQueueSwapMapInterval", 60 * 60 * 1000),
    ("cleanSwapedMapInterval", 5 * 60 * 1000),
    ("logicQueueSwapMapReserveFileNum", 20),
    ("searchBcqByCacheEnable", True),
    ("debugLockEnable", False),
    ("diskFallRecorded", True),
    ("topicQueueLockNum", 32),
    ("spinLockCollisionRetreatOptimalDegree", 1000),
    ("useABSLock", False),
    ("cleanRocksDBDirtyCQIntervalMin", 60),
    ("statRocksDBCQIntervalSec", 10),
    ("memTableFlushIntervalMs", 60 * 60 * 1000),
    ("realTimePersistRocksDBConfig", True),
    ("enableRocksDBLog", False),
    ("rocksdbCQDoubleWriteEnable", False),
    ("bottomMostCompressionTypeForConsumeQueueStore", "zstd"),
    ("rocksdbCompressionType", "lz4"),
    ("rocksdbFlushWalFrequency", 1024),
    ("rocksdbWalFileRollingThreshold", 1024 * 1024 * 1024),
    ("enableAcceleratedRecovery", False),
    ("combineCQLoadingCQTypes", "default;defaultRocksDB"),
    ("combineCQPreferCQType", "default"),
    ("combineAssignOffsetCQType", "default"),
    ("combineCQEnableCheckSelf", False),
    ("combineCQMaxExtraSearchCommitLogFiles", 3),
    # broker keys that decide what the store writes
    ("brokerIP1", None),
    ("listenPort", 10911),
    ("brokerClusterName", "DefaultCluster"),
    ("brokerName", None),
    ("brokerId", 0),
)

ENUMS = {"flushDiskType": FLUSH_DISK_TYPES, "brokerRole": BROKER_ROLES}

# Sizes and counts that must be at least 1: a file size of 0 divides by zero, a negative one makes
# files that can hold no record, and an index needs slots and entries.
POSITIVE = (
    "mappedFileSizeCommitLog",
    "mappedFileSizeConsumeQueue",
    "mappedFileSizeConsumeQueueExt",
    "mapperFileSizeBatchConsumeQueue",
    "mappedFileSizeTimerLog",
    "compactionMappedFileSize",
    "compactionCqMappedFileSize",
    "maxHashSlotNum",
    "maxIndexNum",
    "maxMessageSize",
    "maxMsgsNumBatch",  # a key query's cap: 0 or less would give one message, or none, of many
)

# Every integer key is a Java int (no file size may pass 2**31-1: RocketMQ maps files with int
# sizes) unless RocketMQ holds it as a long (JAVA_LONG_KEYS).
INT_MAX = 2**31 - 1
INT_RANGE = (-(2**31), INT_MAX)
LONG_RANGE = (-(2**63), 2**63 - 1)
RANGES = {"listenPort": (0, 0xFFFF)}  # a port: the store host written into every record

# The periods (ms) of the store's services: 0 or less would make a service spin on a core.
PERIODS = (
    "flushIntervalCommitLog",
    "commitIntervalCommitLog",
    "flushIntervalConsumeQueue",
    "cleanResourceInterval",
    "flushConsumerOffsetInterval",
    "flushDelayOffsetInterval",
)

# (smallest value, what the message says the value must be)
MINIMUM: dict[str, tuple[int, str]] = {
    **{k: (1, "a positive integer") for k in POSITIVE},
    "maxIndexNum": (2, "a positive integer of at least 2 (an index file counts its entries from 1: 1 holds none)"),
    **{k: (1, "at least 1 ms (a period of 0 or less makes a service spin)") for k in PERIODS},
}
