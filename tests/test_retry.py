"""Retry and dead letters (spec 17.3): a consumer's failed message goes to %RETRY%G through the
schedule topic with a growing delay, and to %DLQ%G once it has been retried enough."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketstore import Message, MessageStore
from rocketstore.codec.properties import java_map_order
from rocketstore.codec.topic import SCHEDULE_TOPIC
from rocketstore.errors import InvalidArgumentError, InvalidTopicError, MessageNotFoundError
from rocketstore.meta.fastjson import loads as fastjson_loads
from rocketstore.results import PutMessageStatus
from rocketstore.running_flags import NOT_WRITEABLE


def _deliver_all(store: MessageStore) -> None:
    """Deliver every delayed message now (the service's thread stopped, a clock far ahead)."""
    store.wait_for_dispatch()
    store.services.schedule.run_once(now=2**62)
    store.wait_for_dispatch()


def _only(store: MessageStore, topic: str):
    got = store.get_message("g", topic, 0, store.get_max_offset_in_queue(topic, 0) - 1, 1)
    assert got.messages, (topic, got.status)
    return got.messages[0]


@pytest.fixture
def store(make_store) -> MessageStore:
    store = make_store()
    store.services.schedule.stop()
    return store


def test_a_failed_message_is_retried_with_growing_delays_then_dead_lettered(store: MessageStore) -> None:
    first = store.put(Message("Orders", b"pay", tags="TagP", keys="order-7", flag=3), 2)
    original = store.look_message_by_offset(first.commit_log_offset)
    current = original
    for attempt in range(16):
        result = store.send_back("G", current)
        assert result.status == PutMessageStatus.PUT_OK
        record = store.look_message_by_offset(result.commit_log_offset)
        # the retry waits in the schedule topic, level 3 + reconsumeTimes (capped at 18)
        level = min(3 + attempt, 18)
        assert (record.topic, record.queue_id) == (SCHEDULE_TOPIC, level - 1)
        assert record.properties["REAL_TOPIC"] == "%RETRY%G" and record.properties["REAL_QID"] == "0"
        _deliver_all(store)
        current = _only(store, "%RETRY%G")
        assert current.reconsume_times == attempt + 1
        assert current.body == b"pay" and current.flag == 3 and current.tags == "TagP" and current.keys == "order-7"
        assert current.properties["RETRY_TOPIC"] == "Orders"
        assert current.properties["ORIGIN_MESSAGE_ID"] == original.msg_id  # kept across retries
        assert current.uniq_key == original.uniq_key
        assert current.born_timestamp == original.born_timestamp
    assert store.get_max_offset_in_queue("%RETRY%G", 0) == 16
    # reconsumeTimes 16 reaches the default maxReconsumeTimes: the dead-letter topic, at once
    dead = store.send_back("G", current)
    record = store.look_message_by_offset(dead.commit_log_offset)
    assert (record.topic, record.queue_id, record.reconsume_times) == ("%DLQ%G", 0, 17)
    assert record.properties["DELAY"] == "0"
    assert record.properties["ORIGIN_MESSAGE_ID"] == original.msg_id
    store.wait_for_dispatch()
    assert store.get_max_offset_in_queue("%DLQ%G", 0) == 1
    topics = store.topics.topic_config_table
    assert topics["%RETRY%G"]["readQueueNums"] == 1 and topics["%DLQ%G"]["writeQueueNums"] == 1
    assert store.subscription_groups.find("G") is not None


def test_the_groups_retry_max_times_and_explicit_levels(tmp_path: Path, store_config) -> None:
    """retryMaxTimes comes from subscriptionGroup.json; a request's own maximum (-1 meaning 16) and
    delay level override it; a negative level dead-letters at once."""
    path = tmp_path / "store"
    with MessageStore.open(path, store_config) as store:
        store.subscription_groups.ensure("Slow")
        store.subscription_groups.subscription_group_table["Slow"]["retryMaxTimes"] = 1
        store.subscription_groups.persist()
    with MessageStore.open(path, store_config) as store:
        store.services.schedule.stop()
        first = store.look_message_by_offset(store.put(Message("Orders", b"x"), 0).commit_log_offset)
        retry = store.send_back("Slow", first.commit_log_offset, delay_level=1)  # by offset, level 1
        assert store.look_message_by_offset(retry.commit_log_offset).queue_id == 0
        _deliver_all(store)
        again = _only(store, "%RETRY%Slow")
        dead = store.send_back("Slow", again)  # reconsumeTimes 1 >= retryMaxTimes 1
        assert store.look_message_by_offset(dead.commit_log_offset).topic == "%DLQ%Slow"
        more = store.send_back("Slow", again, max_reconsume_times=-1)  # the client's -1 means 16
        assert store.look_message_by_offset(more.commit_log_offset).topic == SCHEDULE_TOPIC
        broker = store.send_back("Slow", again, max_reconsume_times=-5)  # any other value as the broker takes it
        assert store.look_message_by_offset(broker.commit_log_offset).topic == "%DLQ%Slow"
        now_dead = store.send_back("Slow", first, delay_level=-1)
        assert store.look_message_by_offset(now_dead.commit_log_offset).topic == "%DLQ%Slow"
        with pytest.raises(MessageNotFoundError):
            store.send_back("Slow", store.max_phy_offset + 4096)
    groups = fastjson_loads((path / "config" / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
    assert groups["Slow"]["retryMaxTimes"] == 1
    topics = fastjson_loads((path / "config" / "topics.json").read_text())["topicConfigTable"]
    assert {"%RETRY%Slow", "%DLQ%Slow"} <= set(topics)


def test_a_message_already_retried_sixteen_times_goes_straight_to_the_dlq(store: MessageStore) -> None:
    put = store.put(Message("Orders", b"x", tags="t", keys="k", properties={"seq": "1"}, reconsume_times=16), 0)
    dead = store.send_back("G", store.look_message_by_offset(put.commit_log_offset))
    record = store.look_message_by_offset(dead.commit_log_offset)
    assert record.topic == "%DLQ%G"
    # the broker re-serializes the sent-back properties from its HashMap: that map's order
    assert list(record.properties) == list(java_map_order(record.properties)) != list(sorted(record.properties))
    put = store.put(Message("Orders", b"y", reconsume_times=15), 0)
    retry = store.send_back("G", store.look_message_by_offset(put.commit_log_offset))
    record = store.look_message_by_offset(retry.commit_log_offset)
    assert record.topic == SCHEDULE_TOPIC and record.properties["DELAY"] == "18"  # 3 + 15, capped


def test_a_send_back_creates_the_retry_topic_and_writes_a_new_group_at_once(store: MessageStore, tmp_path) -> None:
    """As RocketMQ's consumerSendMsgBack: %RETRY%G is created even when the message goes straight
    to %DLQ%G, and a group created by a send-back is in subscriptionGroup.json at once (a crash
    right after lost it), as SubscriptionGroupManager persists a group it creates."""
    put = store.put(Message("Orders", b"x"), 0)
    dead = store.send_back("G", put.commit_log_offset, delay_level=-1)
    assert store.look_message_by_offset(dead.commit_log_offset).topic == "%DLQ%G"
    config = tmp_path / "store" / "config"
    topics = fastjson_loads((config / "topics.json").read_text())["topicConfigTable"]
    assert {"%RETRY%G", "%DLQ%G"} <= set(topics)
    groups = fastjson_loads((config / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
    assert "G" in groups


def test_a_send_back_whose_put_is_refused_still_leaves_the_group_and_retry_topic(store, tmp_path) -> None:
    """As RocketMQ's consumerSendMsgBack, the group and %RETRY%G are created (and written) before
    the put, which can still be refused: a store not writeable, a body over maxMessageSize."""
    first = store.put(Message("Orders", b"x" * 1000))
    store.set_running_flags(set_bits=NOT_WRITEABLE)
    refused = store.send_back("G1", first.commit_log_offset)
    assert refused.status == PutMessageStatus.SERVICE_NOT_AVAILABLE
    store.set_running_flags(clear_bits=NOT_WRITEABLE)
    store.config.max_message_size = 100
    refused = store.send_back("G2", first.commit_log_offset)
    assert refused.status == PutMessageStatus.MESSAGE_ILLEGAL
    config = tmp_path / "store" / "config"
    topics = fastjson_loads((config / "topics.json").read_text())["topicConfigTable"]
    assert {"%RETRY%G1", "%RETRY%G2"} <= set(topics)
    groups = fastjson_loads((config / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
    assert {"G1", "G2"} <= set(groups)
    assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 2) == 0  # nothing was stored


def test_a_sent_back_message_does_not_wait_for_a_flush(make_store, store_config) -> None:
    """RocketMQ's broker clears waitStoreMsgOK on a sent-back message: its record says WAIT=false,
    and under SYNC_FLUSH the send-back does not wait for the flush."""
    store = make_store(config=store_config.copy(flushDiskType="SYNC_FLUSH", flushIntervalCommitLog=600_000))
    first = store.put(Message("Orders", b"pay"))
    store.services.flush.stop()  # nothing is flushed from here on: a waiting put would time out
    result = store.send_back("G", first.commit_log_offset, delay_level=-1)
    assert result.status == PutMessageStatus.PUT_OK
    assert store.look_message_by_offset(result.commit_log_offset).properties["WAIT"] == "false"
    store.services.flush.start()  # the flush dispatch waits for under SYNC_FLUSH, for the shutdown


def test_a_group_whose_dead_letter_topic_is_too_long_is_refused_before_anything_changes(store) -> None:
    first = store.put(Message("Orders", b"pay"))
    group = "g" * 125  # %DLQ% + 125 characters is over the 127 a topic may have
    with pytest.raises(InvalidTopicError):
        store.send_back(group, first.commit_log_offset, delay_level=-1)
    assert group not in store.subscription_groups.subscription_group_table


@pytest.mark.parametrize("keyword", ["delay_level", "max_reconsume_times"])
@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 2**63])
def test_a_level_or_maximum_outside_javas_int_is_refused_before_anything_changes(store, keyword, value) -> None:
    """A delay level or maximum a Java int cannot hold is the caller's mistake: refused with the
    other argument checks, before the group or %RETRY%G is created (it was refused at the put,
    after both were written)."""
    first = store.put(Message("Orders", b"pay"))
    with pytest.raises(InvalidArgumentError, match=keyword):
        store.send_back("G", first.commit_log_offset, **{keyword: value})
    assert "G" not in store.subscription_groups.subscription_group_table
    assert "%RETRY%G" not in store.topics.topic_config_table
    assert store.send_back("G", first.commit_log_offset, **{keyword: 2**31 - 1}).ok  # the highest int is taken


def test_a_retry_topic_only_a_v2_record_holds_is_refused_when_v2_is_off(make_store, store_config) -> None:
    """%RETRY% + a group of 121+ characters needs a V2 record (RocketMQ 5); with
    autoMessageVersionOnTopicLen false (a store for RocketMQ 4.9) the send-back is refused before
    anything changes, instead of a schedule unit whose delivery would always be refused."""
    store = make_store(config=store_config.copy(autoMessageVersionOnTopicLen=False))
    first = store.put(Message("Orders", b"pay"))
    group = "g" * 121
    with pytest.raises(InvalidTopicError, match="autoMessageVersionOnTopicLen"):
        store.send_back(group, first.commit_log_offset)
    assert group not in store.subscription_groups.subscription_group_table
    assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 2) == 0


def test_a_sent_back_message_gets_no_unique_key_the_broker_never_gives(store: MessageStore) -> None:
    """RocketMQ's consumerSendMsgBack copies the original's properties: a message stored without
    a UNIQ_KEY is retried and dead-lettered without one."""
    put = store.put_as_is(Message("Orders", b"bare", tags="TagA"), 0)
    original = store.look_message_by_offset(put.commit_log_offset)
    assert original.uniq_key is None
    for level in (0, -1):
        result = store.send_back("G", original, delay_level=level)
        assert store.look_message_by_offset(result.commit_log_offset).uniq_key is None


def test_retries_spread_over_the_groups_retry_queues(store: MessageStore) -> None:
    """A retry goes to a random one of the group's retryQueueNums queues (the topic gets that
    many); a group with none sends nothing back, as RocketMQ stores nothing for it."""
    store.subscription_groups.ensure("Wide")
    store.subscription_groups.subscription_group_table["Wide"]["retryQueueNums"] = 4
    original = store.look_message_by_offset(store.put(Message("Orders", b"x"), 0).commit_log_offset)
    queues = set()
    for _ in range(64):
        record = store.look_message_by_offset(store.send_back("Wide", original).commit_log_offset)
        queues.add(record.properties["REAL_QID"])
    assert queues == {"0", "1", "2", "3"}
    assert store.topics.topic_config_table["%RETRY%Wide"]["writeQueueNums"] == 4
    dead = store.look_message_by_offset(store.send_back("Wide", original, delay_level=-1).commit_log_offset)
    assert (dead.topic, dead.queue_id) == ("%DLQ%Wide", 0)
    store.subscription_groups.ensure("None")
    store.subscription_groups.subscription_group_table["None"]["retryQueueNums"] = 0
    refused = store.send_back("None", original)
    assert refused.status == PutMessageStatus.MESSAGE_ILLEGAL and "retryQueueNums" in refused.detail
    assert "%RETRY%None" not in store.topics.topic_config_table


def test_a_retry_topic_that_is_not_writeable_takes_no_send_back(store: MessageStore) -> None:
    """As RocketMQ's consumerSendMsgBack (NO_PERMISSION for a %RETRY% topic whose perm has no
    write bit, checked before the retry-or-dead-letter choice): nothing is stored, not even in
    %DLQ%; a topics.json entry an operator set to read-only was written to anyway."""
    original = store.put(Message("Orders", b"x"), 0).commit_log_offset
    store.send_back("G", original).raise_for_status()
    store.topics.topic_config_table["%RETRY%G"]["perm"] = 4  # PERM_READ alone
    before = store.max_phy_offset
    for level in (0, -1):
        refused = store.send_back("G", original, delay_level=level)
        assert refused.status == PutMessageStatus.MESSAGE_ILLEGAL
        assert refused.detail == "the topic %RETRY%G is not writeable (perm 4): sending back is forbidden"
    assert store.max_phy_offset == before and "%DLQ%G" not in store.topics.topic_config_table
    store.topics.topic_config_table["%RETRY%G"]["perm"] = 2  # PERM_WRITE alone
    store.send_back("G", original).raise_for_status()


def test_reconsume_times_at_javas_int_limit_wrap_as_the_brokers_int_sums_do(store: MessageStore) -> None:
    """The broker adds to reconsumeTimes with Java ints: 3 + (2**31 - 2) wraps negative (no delay:
    the copy goes straight into %RETRY%G), and 2**31 - 1 + 1 wraps to -2**31 in the dead letter.
    Such a message was refused (MESSAGE_ILLEGAL) or raised InvalidMessageError: never dead-lettered."""
    put = store.put(Message("Orders", b"x", reconsume_times=2**31 - 2), 0)
    retry = store.send_back("G", put.commit_log_offset, max_reconsume_times=2**31 - 1)
    assert retry.status == PutMessageStatus.PUT_OK
    record = store.look_message_by_offset(retry.commit_log_offset)
    assert record.topic == "%RETRY%G" and record.reconsume_times == 2**31 - 1
    assert int(record.properties["DELAY"]) < 0
    put = store.put(Message("Orders", b"y", reconsume_times=2**31 - 1), 0)
    dead = store.send_back("G", put.commit_log_offset)
    record = store.look_message_by_offset(dead.commit_log_offset)
    assert record.topic == "%DLQ%G" and record.reconsume_times == -(2**31)


@pytest.mark.parametrize(("origin", "kept"), [("\u00a0", True), ("\u2007", True), ("\u200b", True), (" \t", False)])
def test_an_origin_message_id_java_does_not_call_blank_is_kept(store: MessageStore, origin: str, kept: bool) -> None:
    """UtilAll.isBlank tests Character.isWhitespace, which no-break spaces are not (str.strip took
    them for blank and put the message's own msgId in their place)."""
    put = store.put(Message("Orders", b"x", properties={"ORIGIN_MESSAGE_ID": origin}), 0)
    retry = store.send_back("G", put.commit_log_offset)
    got = store.look_message_by_offset(retry.commit_log_offset).properties["ORIGIN_MESSAGE_ID"]
    assert got == (origin if kept else put.msg_id)


def test_a_group_too_long_for_its_retry_or_dead_letter_topic_is_named_as_the_cause(store: MessageStore) -> None:
    """A valid group name (up to 255 characters) can make a retry topic longer than 255 or a
    dead-letter topic longer than 127: the error says the group is the cause, and how long it may be."""
    offset = store.put(Message("T", b"x")).raise_for_status().commit_log_offset
    with pytest.raises(InvalidTopicError, match=r"the group \(250 characters\) is too long for its retry topic"):
        store.send_back("g" * 250, offset)
    with pytest.raises(InvalidTopicError, match=r"the group \(130 characters\) is too long for its dead-letter topic"):
        store.send_back("g" * 130, offset, delay_level=-1)
    assert store.subscription_groups.find("g" * 250) is None
