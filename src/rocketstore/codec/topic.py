"""Topic name rules (RocketMQ's TopicValidator): topics become directory names.

A valid topic matches ``^[%|a-zA-Z0-9_-]+$`` and is at most 127 characters long (255 for
``%RETRY%`` topics, as RocketMQ 5's checkBeforePutMessage allows; not for ``%DLQ%`` ones), so no
topic can name a parent directory, an absolute path or a hidden file. Consumer group names
follow the same characters, up to 255 (Validators.checkGroup).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rocketstore.errors import InvalidArgumentError, InvalidGroupError, InvalidTopicError

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
TOPIC_MAX_LENGTH = 127
RETRY_TOPIC_MAX_LENGTH = 255  # RocketMQ 5 accepts longer %RETRY% topics (stored as V2 records)
GROUP_MAX_LENGTH = 255
_VALID = re.compile(r"[%|a-zA-Z0-9_-]+")
_known_good: set[str] = set()
known_topics = _known_good  # topics already validated (a set lookup is the fast path)
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # transaction half (prepared) messages
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"  # their commit/rollback ops

# TopicValidator's NOT_ALLOWED_SEND_TOPIC_SET (4.9.8): the broker refuses a client's send to these
# ("Sending message to topic[...] is forbidden."); only the store writes them (a delayed message's
# schedule unit, transaction half and op messages). An import of an export may hold them.
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {SCHEDULE_TOPIC, HALF_TOPIC, OP_HALF_TOPIC, "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"}
)
SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {"RMQ_SYS_TRACE_TOPIC", "BenchmarkTest", "TBW102"}

# cleanUnusedTopic never removes these queues: they hold delayed and transaction messages
NEVER_REMOVED = frozenset({SCHEDULE_TOPIC, OP_HALF_TOPIC})


def validate_topic(topic: object) -> str:
    """Return ``topic`` if RocketMQ accepts it as a topic name, else raise InvalidTopicError."""
    if type(topic) is str and topic in _known_good:
        return topic
    if not isinstance(topic, str):
        raise InvalidTopicError(f"a topic is a str, not {type(topic).__name__}")
    if not topic:
        raise InvalidTopicError("the topic is empty")
    limit = RETRY_TOPIC_MAX_LENGTH if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else TOPIC_MAX_LENGTH
    if len(topic) > limit:
        raise InvalidTopicError(f"the topic is {len(topic)} characters long; at most {limit} are allowed")
    if not _VALID.fullmatch(topic):
        raise InvalidTopicError(f"the topic {topic!r} has characters other than letters, digits, '%', '|', '_' and '-'")
    if len(_known_good) < 100_000:
        _known_good.add(topic)
    return topic


def validate_group(group: object) -> str:
    """Return ``group`` if RocketMQ accepts it as a consumer group name, else raise
    InvalidGroupError: not blank, at most 255 characters of ``[%|a-zA-Z0-9_-]`` (it names the
    group's retry and dead-letter topics, and offsets are kept under ``topic@group``)."""
    if not isinstance(group, str):
        raise InvalidGroupError(f"a consumer group is a str, not {type(group).__name__}")
    if not group.strip():
        raise InvalidGroupError("the consumer group is blank")
    if len(group) > GROUP_MAX_LENGTH:
        raise InvalidGroupError(f"the group is {len(group)} characters long; at most {GROUP_MAX_LENGTH} are allowed")
    if not _VALID.fullmatch(group):
        raise InvalidGroupError(f"the group {group!r} has characters other than letters, digits, '%', '|', '_' and '-'")
    return group


def topic_names(call: str, topics: Iterable[str]) -> Iterable[str]:
    """``topics`` unless it is one str (which ``set`` would split into letters)."""
    if isinstance(topics, str):
        raise InvalidArgumentError(f"{call} takes a collection of topic names, not the str {topics!r}")
    return topics


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_")


def send_refusal(topic: str) -> str | None:
    """The broker's answer to a producer's send to ``topic`` when TopicValidator's
    isNotAllowedSendTopic refuses it; None when the send is allowed."""
    return f"Sending message to topic[{topic}] is forbidden." if topic in NOT_ALLOWED_SEND_TOPICS else None


_folder_ok: dict[str, bool] = {}


def queue_folder_ok(topic: str) -> bool:
    """Whether a record's topic (a damaged one's too) can name its consume-queue folder: one path
    component (not empty, "." or "..", no "/" or NUL) of at most 255 bytes. Every name RocketMQ
    takes can; a record whose topic cannot is not queued (verify names it), so no folder is made
    outside ``consumequeue/`` and no open fails on it."""
    ok = _folder_ok.get(topic)
    if ok is None:
        ok = topic not in ("", ".", "..") and "/" not in topic and "\0" not in topic
        ok = ok and len(topic.encode("utf-8", "surrogatepass")) <= 255
        if len(_folder_ok) < 65536:
            _folder_ok[topic] = ok
    return ok


_topic_cache: dict[bytes, str] = {}


def topic_text(raw: bytes) -> str:
    topic = _topic_cache.get(raw)
    if topic is None:
        topic = raw.decode("utf-8", "replace")
        if len(_topic_cache) < 65536:
            _topic_cache[raw] = topic
    return topic
