"""Topic name rules (RocketMQ's TopicValidator): topics become directory names.

A valid topic matches ``^[%|a-zA-Z0-9_-]+$`` and is at most 127 characters long (255 for
``%RETRY%`` topics, as RocketMQ 5 allows), so no topic can name a parent directory, an absolute
path or a hidden file.
"""

from __future__ import annotations

import re

from rocketstore.errors import InvalidTopicError

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
TOPIC_MAX_LENGTH = 127
RETRY_TOPIC_MAX_LENGTH = 255  # RocketMQ 5 accepts longer %RETRY% topics (stored as V2 records)
_VALID = re.compile(r"[%|a-zA-Z0-9_-]+")
_known_good: set[str] = set()
known_topics = _known_good  # topics already validated (a set lookup is the fast path)
SYSTEM_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "BenchmarkTest",
        "TBW102",
    }
)


def validate_topic(topic: object) -> str:
    """Return ``topic`` if RocketMQ accepts it as a topic name, else raise InvalidTopicError."""
    if topic in _known_good:
        return topic  # type: ignore[return-value]
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


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_")


_topic_cache: dict[bytes, str] = {}


def topic_text(raw: bytes) -> str:
    topic = _topic_cache.get(raw)
    if topic is None:
        topic = raw.decode("utf-8", "replace")
        if len(_topic_cache) < 65536:
            _topic_cache[raw] = topic
    return topic
