"""Bad input gets a typed error (or RocketMQ's refusal status) and leaves the store as it was:
messages, groups, import lines and settings that RocketMQ would refuse, or that would break the
store or RocketMQ's reading of it."""

from __future__ import annotations

import inspect
import json
import pydoc
import threading
import time

import numpy as np
import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.errors import (
    ConfigError,
    ImportLineError,
    InvalidArgumentError,
    InvalidGroupError,
    InvalidMessageError,
    InvalidTopicError,
    ReadOnlyStoreError,
    RocketStoreError,
    StoreClosedError,
)
from rocketstore.export import import_jsonl
from rocketstore.running_flags import NOT_READABLE
from rocketstore.verify import verify_store

SCHEDULE = "SCHEDULE_TOPIC_XXXX"


@pytest.mark.parametrize("delay", [" 3", "3 ", "1_0", "2147483648", "3.0", "+", "", "\U0001d7d1"])
def test_a_schedule_topic_record_needs_a_delay_java_can_parse(make_store, delay):
    """RocketMQ reads DELAY of a SCHEDULE_TOPIC_XXXX record with Integer.parseInt when it
    recovers: a record it cannot parse would end the log there, and every message after it
    would be lost. Such a record is refused, through put and put_as_is alike (a digit outside
    the Basic Multilingual Plane too: Java sees two surrogate chars, neither a digit)."""
    store = make_store()
    props = {"DELAY": delay, "REAL_TOPIC": "T", "REAL_QID": "0"} if delay else {"REAL_TOPIC": "T", "REAL_QID": "0"}
    message = Message(SCHEDULE, b"x", properties={**props, "DELAY": delay} if delay else props)
    for result in (store.put(message, 2), store.put_as_is(message, 2)):
        assert result.status == PutMessageStatus.MESSAGE_ILLEGAL if delay else result.ok
    assert store.put(Message("T", b"y", properties={"DELAY": " 3"})).status == PutMessageStatus.MESSAGE_ILLEGAL


def test_a_schedule_record_whose_delay_java_cannot_read_ends_the_log(make_store, tmp_path, store_config):
    """Read back, a SCHEDULE_TOPIC_XXXX record whose DELAY Integer.parseInt throws on (damage:
    the writer refuses such a value) fails RocketMQ's checkMessageAndReturnSize: recovery ends
    the log there, as RocketMQ's does, so both read the same log."""
    store = make_store()
    store.put(Message("T", b"before"))
    delayed = store.put(Message("T", b"later", properties={"DELAY": "3"}))
    store.put(Message("T", b"after"))
    store.shutdown()
    segment = tmp_path / "store" / "commitlog" / f"{0:020d}"
    data = bytearray(segment.read_bytes())
    at = data.index(b"DELAY\x013", delayed.commit_log_offset)
    data[at + 6] = ord("x")  # properties are outside the body CRC: only the DELAY check sees it
    segment.write_bytes(bytes(data))
    store = make_store()
    assert store.recovery.stopped_at_bad_record and store.max_phy_offset == delayed.commit_log_offset
    assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"before"]


def test_a_delay_in_unicode_digits_is_a_level_as_java_reads_it(make_store, tmp_path, store_config):
    """Integer.parseInt takes any Unicode decimal digits: "\u0663" is level 3, when the message is
    put and when the scan rebuilds its consume-queue unit (the delivery time) from the log."""
    store = make_store()
    sent = store.put_as_is(
        Message(SCHEDULE, b"x", properties={"DELAY": "\u0663", "REAL_TOPIC": "T", "REAL_QID": "0"}), 2
    )
    assert sent.ok and store.wait_for_dispatch()
    unit_tags = store.queues.find(SCHEDULE, 2).get_unit(0)[2]
    assert unit_tags == sent.store_timestamp + 10_000  # level 3 of the default table: 10 s
    store.shutdown()
    assert verify_store(tmp_path / "store", store_config).ok


@pytest.mark.parametrize("topic", ["../../escaped", "a" * 300, "", ["T"], None])
def test_a_topic_set_after_the_message_was_made_is_checked_as_it_is_set(make_store, tmp_path, store_config, topic):
    """Message.topic can be set, and is checked as the constructor checks it: a topic can neither
    name a folder outside the store nor one too long to make."""
    store = make_store()
    assert store.put(Message("T", b"first")).ok
    bad = Message("T", b"x")
    with pytest.raises(InvalidTopicError):
        bad.topic = topic
    assert bad.topic == "T"
    bad.topic = np.str_("U")
    assert type(bad.topic) is str and store.put(bad).ok and store.wait_for_dispatch()
    store.shutdown()
    assert sorted(p.name for p in (tmp_path / "store" / "consumequeue").iterdir()) == ["T", "U"]
    assert verify_store(tmp_path / "store", store_config).ok


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("flag", 2**40, "flag"),
        ("flag", "1", "flag"),
        ("flag", True, "flag"),
        ("body", None, "body"),
        ("body", 7, "body"),
    ],
)
def test_a_body_or_flag_set_after_the_message_was_made_is_checked_as_it_is_set(
    make_store, tmp_path, store_config, field, value, error
):
    """A flag or body changed after construction is checked then (it used to reach the record
    encoder: an untyped struct.error, and a batch failing half-way left a stray consume-queue
    entry that pointed at the next message's record)."""
    store = make_store()
    message = Message("T", b"x", flag=3)
    with pytest.raises(InvalidMessageError, match=error):
        setattr(message, field, value)
    assert (message.body, message.flag) == (b"x", 3)
    message.body, message.flag = bytearray(b"changed"), np.int16(-5)
    assert (message.body, message.flag) == (b"changed", -5) and type(message.body) is bytes
    assert store.put_batch([Message("T", b"y"), message]).ok and store.put(message).ok
    assert store.wait_for_dispatch()
    got = store.get_message("g", "T", 0, 0).messages
    assert [(m.body, m.flag) for m in got] == [(b"y", 0), (b"changed", -5), (b"changed", -5)]
    store.shutdown()
    assert verify_store(tmp_path / "store", store_config).ok


@pytest.mark.parametrize("group", ["", "  ", "a@b", "bad\ud800group", "g/../x", "g" * 256, 7])
def test_group_names_are_checked_as_rocketmq_checks_them(make_store, tmp_path, store_config, group):
    """Validators.checkGroup: not blank, at most 255 characters of [%|a-zA-Z0-9_-]. A bad name
    would break topic@group keys, or consumerOffset.json for every group (a lone surrogate cannot
    be written), or name retry topics that cannot exist."""
    store = make_store()
    sent = store.put(Message("T", b"x"))
    store.commit_offset("good-group", "T", 0, 1)
    with pytest.raises(InvalidGroupError):
        store.commit_offset(group, "T", 0, 1)
    with pytest.raises(InvalidGroupError):
        store.query_offset(group, "T", 0)
    with pytest.raises(InvalidGroupError):
        store.send_back(group, sent.commit_log_offset)
    store.shutdown()  # the offsets file is still written
    again = MessageStore.open(tmp_path / "store", store_config)
    try:
        assert again.query_offset("good-group", "T", 0) == 1
        assert again.subscription_groups.find("") is None
    finally:
        again.shutdown()


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"flag": None}, InvalidMessageError),
        ({"flag": ""}, InvalidMessageError),
        ({"flag": 0.0}, InvalidMessageError),
        ({"flag": True}, InvalidMessageError),
        ({"sys_flag": None}, InvalidMessageError),
        ({"born_host": "10.0.0.1:1", "reconsume_times": None}, InvalidMessageError),
        ({"reconsume_times": None}, InvalidMessageError),  # alone too: not taken for 0
        ({"prepared_transaction_offset": None}, InvalidMessageError),
        ({"born_host": 5}, InvalidMessageError),
        ({"store_host": ["x"]}, InvalidMessageError),
        ({"keys": 5}, InvalidMessageError),
        ({"keys": [""]}, InvalidMessageError),
        ({"keys": ["a", ""]}, InvalidMessageError),
        ({"tags": "t\ud800"}, InvalidMessageError),
        ({"keys": "k\udfff"}, InvalidMessageError),
        ({"properties": {"p": "v\ud800"}}, InvalidMessageError),
        ({"body": "b\ud800"}, InvalidMessageError),
        ({"topic": ["T"]}, InvalidTopicError),
        ({"properties": "ab"}, InvalidMessageError),
        ({"properties": ["ab"]}, InvalidMessageError),
    ],
)
def test_message_fields_of_the_wrong_kind_are_refused_when_the_message_is_made(fields, error):
    """What the record could not hold fails at once with a typed error, not as a struct.error,
    TypeError or UnicodeEncodeError in the middle of a put."""
    args = {"topic": "T", "body": b"x", **fields}
    with pytest.raises(error):
        Message(**args)


@pytest.mark.parametrize("keys", [b"k", bytearray(b"k"), {"k": 1}])
def test_keys_of_a_kind_that_is_no_list_of_keys_are_named(keys):
    """Bytes iterate as ints and a dict as its names: the error names the value given."""
    with pytest.raises(InvalidMessageError, match="keys are a str or a list of str, not"):
        Message("T", b"x", keys=keys)


@pytest.mark.parametrize(
    "fields",
    [{"tags": "t\ud800"}, {"keys": "k\udfff"}, {"properties": {"p": "v\ud800"}}, {"properties": {"p\udc80": "v"}}],
)
def test_text_with_a_lone_surrogate_is_refused_as_not_utf8(fields):
    """A lone surrogate (JSON "\\ud800" reads as one) is not UTF-8 text: the error says so, not
    only that the separators are refused."""
    with pytest.raises(InvalidMessageError, match="UTF-8"):
        Message("T", b"x", **fields)


@pytest.mark.parametrize(
    ("name", "value"),
    [("K", 5), ("K", b"v"), ("K", True), (5, "v"), ("KEYS", ["a", "b"]), ("TAGS", 7), ("DELAY", 3), ("a", "\ud800")],
    ids=["int", "bytes", "bool", "int-name", "keys-list", "tags-int", "delay-int", "surrogate"],
)
def test_a_property_changed_in_place_to_what_a_record_cannot_hold_is_refused(make_store, name, value):
    """``Message.properties`` may be changed in place: a put checks it again, and a name or value
    that is not text (or text UTF-8 cannot encode) is MESSAGE_ILLEGAL, also as the only property
    (it was stored without it, PUT_OK) and in a batch; nothing is stored."""
    store = make_store()
    for put in (store.put, lambda m: store.put_batch([m])):
        message = Message("T", b"x")
        message.properties[name] = value
        assert put(message).status == PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == 0


def test_api_arguments_of_the_wrong_kind_get_typed_errors(make_store):
    """A batch given as any iterable of Messages is taken; a single Message, a properties argument
    that is not a mapping, a topic that is not text in query_offset: typed errors, not TypeError
    or ValueError from inside; a numpy integer is a queue id for puts as for reads."""
    store = make_store()
    assert store.put_batch(Message("T", b"%d" % i) for i in range(3)).ok
    assert store.put(Message("T", b"n"), queue_id=np.int64(1)).ok
    assert store.put_batch([Message("T", b"n")], queue_id=np.int32(1)).ok
    with pytest.raises(InvalidMessageError):
        store.put_batch(Message("T", b"x"))
    with pytest.raises(InvalidMessageError):
        store.put_batch([Message("T", b"x")], properties="ab")
    for topic in (None, 5):
        with pytest.raises(RocketStoreError):
            store.query_offset("g", topic, 0)
    with pytest.raises(InvalidTopicError):
        store.query_offset("g", "T T", 0)


def _line(**fields: object) -> str:
    return json.dumps({"topic": "T", "queueId": 0, "body": "eA==", **fields})


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (_line(properties={"p": None}), "must be a JSON string, not null"),
        (_line(properties={"p": 5}), "must be a JSON string"),
        (_line(properties={"p": {"x": 1}}), "must be a JSON string"),
        (_line(bornHost=5), "bornHost must be an ip:port string, not 5"),
        (_line(storeHost={}), "storeHost"),
        (_line(bornHost=""), "bornHost"),
        (_line(tags="A", properties={"TAGS": "B"}), "does not agree"),
        (_line(uniqKey="AB", properties={"UNIQ_KEY": "CD"}), "does not agree"),
        ('{"topic": "T", "properties": ' + "[" * 5000 + "]" * 5000 + "}", "nested too deeply"),
        # a false value of the wrong type is no empty one: it was stored as an empty body, tags...
        (_line(body=[]), "body must be a base64 string"),
        (_line(body={}), "body must be a base64 string"),
        (_line(body=False), r"body must be a base64 string \(an empty body is \"\"\), not false"),
        (_line(body=0), "body must be a base64 string"),
        (_line(properties=False), "properties must be a JSON object"),
        (_line(properties=[]), "properties must be a JSON object"),
        (_line(tags=0), "tags must be a JSON string, not 0"),
        (_line(tags=False), "tags must be a JSON string, not false"),
        (_line(keys=[]), r"keys must be a JSON string, not \[\]"),
        # numbers are JSON numbers: int("1_000") and int(" ١٢ ") took these
        (_line(flag="1_000"), 'flag must be an integer, not "1_000"'),
        # Python's own advice (sys.set_int_max_str_digits) is nothing an importing user can follow
        (_line()[:-1] + ', "flag": ' + "9" * 5000 + "}", "a number of more than 4300 digits"),
        (_line(reconsumeTimes=" \u0661\u0662 "), "reconsumeTimes must be an integer"),
        (_line(queueId="3"), 'queueId must be an integer, not "3"'),
        (
            _line(topic="SCHEDULE_TOPIC_XXXX", properties={"REAL_TOPIC": "T", "DELAY": "3"}),
            "MESSAGE_ILLEGAL: .*no REAL_QID property",  # the status and why, as PutMessageError says them
        ),
    ],
)
def test_an_import_line_of_the_wrong_shape_is_refused_with_its_number(make_store, line, reason):
    store = make_store()
    with pytest.raises(ImportLineError, match=f"line 2: .*{reason}") as refused:
        import_jsonl(store, [_line(), line, _line()])
    assert refused.value.imported == 1
    assert store.wait_for_dispatch() and store.get_max_offset_in_queue("T", 0) == 1


def test_consumes_offsets_moved_line_is_skipped_by_import(make_store, caplog):
    """`consume --json` ends with {"offsetsMoved": [...]} when it moved a start offset; its help
    says import takes its lines as they are: that line is said and skipped, not refused as a
    message without a body (which stopped the import there)."""
    store = make_store()
    moved = json.dumps({"offsetsMoved": [{"topic": "T", "queueId": 0, "offset": 9, "movedTo": 1}]})
    with caplog.at_level("WARNING", logger="rocketstore.export"):
        assert import_jsonl(store, [_line(), moved, _line()]) == 2
    assert any("line 2" in r.getMessage() and "offsetsMoved" in r.getMessage() for r in caplog.records)


def test_an_import_file_that_starts_with_a_utf8_bom_imports(make_store):
    """An editor's BOM before the first line is not data: the advice to resume with `tail -n +1`
    would meet it again."""
    store = make_store()
    assert import_jsonl(store, ["\ufeff" + _line(), _line()]) == 2
    assert import_jsonl(store, [("\ufeff" + _line()).encode()]) == 1


def test_an_import_line_with_tags_keys_and_uniq_key_columns_alone_keeps_them(make_store):
    """The export's tags, keys and uniqKey columns, given without a properties object, are the
    message's TAGS, KEYS and UNIQ_KEY (they were dropped)."""
    store = make_store()
    uniq = "7F0000010001ABCD0000000000000001"
    assert import_jsonl(store, [_line(tags="TagA", keys="k1 k2", uniqKey=uniq)]) == 1
    assert store.wait_for_dispatch()
    got = store.get_message("g", "T", 0, 0, tags="TagA").messages
    assert [(m.tags, m.uniq_key) for m in got] == [("TagA", uniq)]
    assert len(store.query_message("T", "k2").messages) == 1
    assert len(store.query_message("T", uniq).messages) == 1


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"messageDelayLevel": ""}, "messageDelayLevel"),
        ({"messageDelayLevel": "   "}, "messageDelayLevel"),
        ({"maxHashSlotNum": 2**40}, "maxHashSlotNum"),
        ({"maxIndexNum": 2**27}, "maxIndexNum"),
    ],
)
def test_settings_that_would_fail_later_are_refused_at_open(tmp_path, store_config, settings, match):
    """An empty delay table (every delayed put would fail) and an index file larger than
    RocketMQ's int size (dispatch would fail on every round) are refused when the store opens."""
    with pytest.raises(ConfigError, match=match):
        MessageStore.open(tmp_path / "store", store_config, **settings)
    reopened = MessageStore.open(tmp_path / "store", store_config)  # the lock was released
    reopened.shutdown()


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.get_message("g", "T", 0, 1.5),
        lambda s: s.get_message("g", "T", 0, "0"),
        lambda s: s.get_message("g", "T", 0, 0, max_nums=None),
        lambda s: s.get_message("g", "T", True, 0),
        lambda s: s.get_message("g", None, 0, 0),
        lambda s: s.get_message("g", "T", 0, 0, tags=5),
        lambda s: s.query_message("T", None),
        lambda s: s.query_message(None, "k"),
        lambda s: s.query_message("T", "k", max_num="5"),
        lambda s: s.look_message_by_offset("0"),
        lambda s: s.look_message_by_msg_id("zz"),
        lambda s: s.look_message_by_msg_id("7F000001 00002A9F 00000000000000"),  # 32 characters, not all hex
        lambda s: s.look_message_by_msg_id(None),
        lambda s: s.get_offset_in_queue_by_time("T", 0, "now"),
        lambda s: s.get_message_store_timestamp("T", 0, 1.5),
        lambda s: s.get_commit_log_offset_in_queue("T", 0, "1"),
        lambda s: s.commit_offset("g", "T", None, 3),
        lambda s: s.commit_offset("g", "T", 0, 3.9),
        lambda s: s.commit_offset("g", "T", 0, -7),
        lambda s: s.commit_offset("g", "T", -1, 5),
        lambda s: s.commit_offset("g", "T", 0, 2**70),
        lambda s: s.query_offset("g", "T", "0"),
        lambda s: s.send_back("g", "abc"),
        lambda s: s.send_back("g", 0, delay_level="3"),
        lambda s: s.delete_topics("T"),  # one str would be split into letters
        lambda s: s.clean_unused_topics("T"),  # ... and every other topic removed
        lambda s: s.delete_topics(None),
        lambda s: s.delete_topics([["T"]]),
        lambda s: s.clean_unused_topics(None),
        lambda s: s.clean_unused_topics([None]),  # T is not None: it would go
        lambda s: s.clean_unused_topics([b"T"]),
        lambda s: s.set_running_flags("x"),
        lambda s: s.set_running_flags(clear_bits=None),
        lambda s: s.set_running_flags(set_bits=2**40),  # no RunningFlags bit: it did nothing, in silence
        lambda s: s.set_running_flags(clear_bits=-1),
        lambda s: s.schedule_report("x"),
        lambda s: s.schedule_report(now=1.5),
        lambda s: s.clean_expired_files(now="x"),
        lambda s: s.clean_expired_files(now=float("nan")),
        lambda s: s.clean_expired_files(now=10**400),  # past any float: was a raw OverflowError
        lambda s: s.clean_expired_files(now=1e18),  # past what localtime takes: was a raw OSError
        lambda s: s.clean_expired_files(now=-1e300),
        lambda s: s.disk_report(now=1e300),
        lambda s: s.disk_report(now="x"),
    ],
)
def test_read_calls_with_arguments_of_the_wrong_kind_say_so(make_store, call):
    store = make_store()
    assert store.put(Message("T", b"x", keys="k")).ok
    assert store.wait_for_dispatch()
    with pytest.raises(InvalidArgumentError):
        call(store)
    assert store.queue_ids() == {"T": [0]} and store.query_offset("g", "T", 0) == -1  # nothing changed
    assert store.wait_for_dispatch() and len(store.get_message("g", "T", 0, 0).messages) == 1


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.get_max_offset_in_queue("T", "0"),  # a JSON key: read as an empty queue
        lambda s: s.get_min_offset_in_queue("T", "0"),
        lambda s: s.get_min_offset_in_queue("T", None),
        lambda s: s.get_max_offset_in_queue("T", 0.0),
        lambda s: s.get_max_offset_in_queue("T", True),
        lambda s: s.get_max_offset_in_queue(["T"], 0),  # unhashable: a raw TypeError
        lambda s: s.get_min_offset_in_queue(b"T", 0),
        lambda s: s.get_earliest_message_time("T", "0"),
        lambda s: s.get_earliest_message_time("T", [0]),
        lambda s: s.get_earliest_message_time(5),
    ],
)
def test_queue_offset_and_earliest_time_calls_check_their_arguments(make_store, call):
    """get_min/max_offset_in_queue and get_earliest_message_time check their topic and queue id
    as get_message does: a queue id given as text or a float, a topic that is not text, are
    InvalidArgumentError (they read as an empty queue, or raised a TypeError from inside)."""
    store = make_store()
    assert store.put(Message("T", b"x")).ok and store.wait_for_dispatch()
    with pytest.raises(InvalidArgumentError):
        call(store)
    stored = store.get_message_store_timestamp("T", 0, 0)
    assert store.get_max_offset_in_queue(np.str_("T"), np.int64(0)) == 1
    assert store.get_min_offset_in_queue("T", np.int32(0)) == 0
    assert store.get_earliest_message_time(np.str_("T"), np.int8(0)) == stored
    assert store.get_earliest_message_time("T") == store.get_earliest_message_time() == stored  # queue 0; the log
    assert store.get_earliest_message_time("T", 1) == -1 and store.get_max_offset_in_queue("U", 0) == 0


def test_numpy_integers_are_integers_everywhere(make_store):
    """Integers from numpy (a DataFrame, an array of offsets) are taken as ints, even narrow ones:
    an np.uint8 offset does not overflow in the unit arithmetic."""
    store = make_store()
    sent = [store.put(Message("T", b"m", flag=np.int64(0), sys_flag=np.int32(0))) for _ in range(40)]
    assert all(r.ok for r in sent) and store.wait_for_dispatch()
    redelivered = Message("T", b"r", born_host="10.0.0.1:1", reconsume_times=np.int16(2))
    assert redelivered.reconsume_times == 2 and type(redelivered.reconsume_times) is int
    got = store.get_message("g", "T", np.int64(0), np.uint8(25), np.int8(3))  # 25 * 20 overflows a uint8
    assert [m.queue_offset for m in got.messages] == [25, 26, 27] and got.next_begin_offset == 28
    assert store.look_message_by_offset(np.int64(sent[3].commit_log_offset)).queue_offset == 3
    assert store.get_offset_in_queue_by_time("T", np.int32(0), np.int64(0)) == 0


def test_numpy_strings_are_strings_everywhere(make_store):
    """Text from numpy (np.str_, a str subclass) is taken as text and kept as a plain str."""
    store, topic, group = make_store(), np.str_("T"), np.str_("g")
    assert Message("T", b"x", tags="a").tags == "a"  # a known tag text too
    message = Message(
        topic, b"m", tags=np.str_("a"), keys=[np.str_("k1"), "k2"], properties={np.str_("p"): np.str_("v")}
    )
    assert all(type(v) is str for v in (message.topic, message.tags, message.keys, *message.properties))
    assert Message(topic, b"n", keys=np.str_("k3"), born_host=np.str_("10.0.0.1:1")).keys == "k3"
    assert store.put(message).ok and store.wait_for_dispatch()
    assert [m.keys for m in store.get_message(group, topic, 0, 0, tags=np.str_("a || b")).messages] == ["k1 k2"]
    assert store.get_commit_log_offset_in_queue(topic, 0, 0) == 0
    assert store.get_message_store_timestamp(topic, 0, 0) > 0
    assert store.get_offset_in_queue_by_time(topic, 0, 0) == 0
    assert len(store.query_message(topic, np.str_("k2")).messages) == 1
    store.commit_offset(group, topic, 0, 1)
    assert store.query_offset(group, topic, 0) == 1


def test_an_import_line_with_empty_tags_and_keys_columns_is_taken(make_store):
    """An empty tags or keys column means none, as Message(tags="") does."""
    store = make_store()
    assert import_jsonl(store, [_line(tags="", keys="")]) == 1
    assert store.wait_for_dispatch()
    stored = store.get_message("g", "T", 0, 0).messages[0]
    assert stored.tags is None and stored.keys is None


def test_wrong_open_arguments_and_read_only_writes_are_typed_errors(make_store, tmp_path) -> None:
    store = make_store()
    assert store.put(Message("T", b"x")).ok
    store.shutdown()
    with pytest.raises(InvalidArgumentError):
        MessageStore.open(tmp_path / "store", {"mappedFileSizeCommitLog": 4096})
    with pytest.raises(InvalidArgumentError):
        MessageStore.open(tmp_path / "store", recover=False)
    view = make_store(read_only=True)
    with pytest.raises(ReadOnlyStoreError):  # accepted, then lost at the next open
        view.commit_offset("g", "T", 0, 1)


def test_a_path_or_settings_of_the_wrong_kind_are_typed_errors(make_store, store_config) -> None:
    """A store path that is no path, settings that are no mapping or a key that is no str: typed
    errors (a TypeError from os.fspath, from dict(), from difflib's matching of the key)."""
    for path in (None, 5, ["store"]):
        with pytest.raises(InvalidArgumentError):
            MessageStore.open(path)
    for values in ([("maxMessageSize", 1)], "maxMessageSize", 5, {5: 1}, {None: 1}):
        with pytest.raises(ConfigError):
            StoreConfig(values)
    for name in (5, None, ["maxMessageSize"]):
        with pytest.raises(ConfigError):
            store_config.set(name, 1)
        with pytest.raises(ConfigError):
            store_config.get(name)
    assert StoreConfig({np.str_("maxMessageSize"): 1024}).max_message_size == 1024
    store = make_store()  # the right kinds still work: a float clock, a numpy integer
    assert store.clean_expired_files(now=np.float64(time.time())).commit_log_files == 0
    assert store.clean_expired_files(now=int(time.time())).commit_log_files == 0
    assert store.schedule_report(now=np.int64(0)) == []
    store.set_running_flags(set_bits=np.int32(NOT_READABLE))
    assert store.running_flags == NOT_READABLE
    store.set_running_flags(clear_bits=NOT_READABLE)
    assert store.running_flags == 0 and store.put(Message("T", b"x")).ok


def test_a_refused_put_result_is_false(make_store) -> None:
    store = make_store()
    assert store.put(Message("T", b"x"))
    refused = store.put(Message("T", b"x" * (store.config.max_message_size + 1)))
    assert not refused and not refused.ok


def test_an_empty_body_is_not_crc_checked_on_recovery_as_in_rocketmq(make_store, tmp_path, store_config):
    """RocketMQ's checkMessageAndReturnSize checks the body CRC only when BODYLEN > 0: a record
    with an empty body and any BODYCRC is read, by recovery and verify alike, and the log goes on."""
    store = make_store()
    empty = store.put(Message("T", b""))
    store.put(Message("T", b"after"))
    store.shutdown()
    segment = tmp_path / "store" / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as f:
        f.seek(empty.commit_log_offset + 8)
        f.write((1234).to_bytes(4, "big"))
    store = make_store()
    assert not store.recovery.stopped_at_bad_record
    assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"", b"after"]
    store.shutdown()
    assert verify_store(tmp_path / "store", store_config).ok


def test_every_error_the_package_raises_on_purpose_is_in_rocketstore_errors() -> None:
    """The README's promise: ``rocketstore.errors`` holds the errors, each a RocketStoreError
    (ImportLineError, SinkInUseError and DataLossError lived in their modules, DataLossError a
    bare RuntimeError). The command line's click exceptions and the import's Ctrl-C are not
    errors of the library."""
    import importlib
    import inspect
    import pkgutil

    import rocketstore
    import rocketstore.errors

    outside = {}
    for info in pkgutil.walk_packages(rocketstore.__path__, "rocketstore."):
        if info.name == "rocketstore.errors" or info.name.startswith(("rocketstore.cli", "rocketstore.demo")):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            is_error = inspect.isclass(value) and issubclass(value, Exception)
            if is_error and value.__module__ == info.name and not name.startswith("_"):
                outside[f"{info.name}.{name}"] = value
    assert outside == {}
    classes = {n for n, v in vars(rocketstore.errors).items() if inspect.isclass(v) and issubclass(v, Exception)}
    for name in classes:
        assert issubclass(getattr(rocketstore.errors, name), rocketstore.errors.RocketStoreError), name
    assert set(rocketstore.errors.__all__) == classes  # a star import brings the errors, nothing else


def test_the_public_namespace_lists_each_name_once_and_no_internal_one() -> None:
    """dir(rocketstore) listed a lazily loaded name twice once used, and TYPE_CHECKING as public;
    every name of __all__ imports (the types the store's results use among them)."""
    from types import ModuleType

    import rocketstore

    for name in rocketstore.__all__:
        assert getattr(rocketstore, name) is not None
    listed = dir(rocketstore)
    assert len(listed) == len(set(listed)) and set(rocketstore.__all__) <= set(listed)
    public = [n for n in listed if not n.startswith("_") and not isinstance(getattr(rocketstore, n), ModuleType)]
    assert sorted(public) == sorted(n for n in rocketstore.__all__ if n != "errors")  # (submodules aside)
    assert rocketstore.CleanRun.__name__ == "CleanRun" and rocketstore.RecoveryReport.__name__ == "RecoveryReport"
    from rocketstore.errors import DataLossError, ImportLineError, SinkInUseError
    from rocketstore.export import ImportLineError as old_import
    from rocketstore.spark.commits import SinkInUseError as old_sink
    from rocketstore.spark.plan import DataLossError as old_loss

    assert (old_import, old_sink, old_loss) == (ImportLineError, SinkInUseError, DataLossError)
    import pickle  # they cross from Spark's workers to the driver

    for error in (ImportLineError(3, "bad body", 2), SinkInUseError("query:a"), DataLossError("gone")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)


def test_an_import_line_with_fields_the_export_does_not_write_is_warned_about(make_store, caplog) -> None:
    """``bornhost`` for ``bornHost``: the field is ignored and the message stored without the host
    it meant, which went without a word. A warning, once per name, with the closest field; the
    export's own fields (cqTagsCode and cqSize too) and the JSON_FIELDS list agree."""
    from rocketstore.export import export_row, import_jsonl

    store = make_store()
    lines = [
        json.dumps({"topic": "T", "body": "aGk=", "bornhost": "10.9.9.9:1", "cqSize": 20}),
        json.dumps({"topic": "T", "body": "aGk=", "bornhost": "10.9.9.9:1", "tag": "X"}),
    ]
    with caplog.at_level("WARNING", logger="rocketstore.export"):
        assert import_jsonl(store, lines) == 2
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2, warned
    assert "line 1: field 'bornhost'" in warned[0] and "did you mean 'bornHost'?" in warned[0]
    assert "line 2: field 'tag'" in warned[1] and "did you mean 'tags'?" in warned[1]
    from rocketstore.codec.message_json import JSON_FIELDS

    assert store.wait_for_dispatch()
    stored = store.get_message("g", "T", 0, 0).messages[0]
    assert tuple(export_row(stored)) == JSON_FIELDS


def test_a_body_of_any_bytes_type_is_taken_as_plain_bytes(make_store) -> None:
    """A bytes subclass (numpy.bytes_, from an array of bodies) is a body, kept as plain bytes, as
    a str subclass is text (it was refused: "a message body is bytes, not bytes_")."""

    class Payload(bytes):
        pass

    store = make_store()
    message = Message("T", np.bytes_(b"ab"))
    assert message.body == b"ab" and type(message.body) is bytes
    message.body = Payload(b"cd")
    assert message.body == b"cd" and type(message.body) is bytes
    assert store.put(message).ok and store.put_batch([Message("T", np.bytes_(b"ef"))]).ok
    assert store.wait_for_dispatch()
    assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"cd", b"ef"]


def test_a_put_to_the_last_java_int_queue_keeps_topics_json_counts_java_ints(make_store, tmp_path) -> None:
    """Queue ids go up to Integer.MAX_VALUE; the queue counts topics.json gets for one stay Java
    ints (2**31 would not fit TopicConfig's int fields: RocketMQ could not load the store)."""
    last = 2**31 - 1
    store = make_store()
    assert store.put(Message("BigQ", b"x"), last).ok
    store.shutdown()
    config = json.loads((tmp_path / "store" / "config" / "topics.json").read_text())["topicConfigTable"]["BigQ"]
    assert config["readQueueNums"] == config["writeQueueNums"] == last
    store = make_store()
    assert store.wait_for_dispatch() and store.get_max_offset_in_queue("BigQ", last) == 1
    assert store.topics.find("BigQ")["writeQueueNums"] == last


@pytest.mark.parametrize("timeout", ["5", True, float("nan"), [1], 1j])
def test_wait_for_dispatch_checks_its_timeout_whether_dispatch_is_behind_or_not(make_store, timeout) -> None:
    store = make_store()
    with store.reput.lock:  # no dispatch round: dispatch stays behind
        assert store.put(Message("T", b"x")).ok
        with pytest.raises(InvalidArgumentError, match="wait_for_dispatch"):
            store.wait_for_dispatch(timeout)
        assert store.dispatch_behind_bytes() > 0
    assert store.wait_for_dispatch()
    with pytest.raises(InvalidArgumentError, match="wait_for_dispatch"):
        store.wait_for_dispatch(timeout)


@pytest.mark.parametrize("timeout", [float("inf"), 1e300, pytest.param(10**400, id="10**400")])
def test_wait_for_dispatch_with_an_endless_timeout_waits_as_long_as_it_takes(make_store, timeout) -> None:
    """An infinite timeout (or one past what a lock can wait) is no timeout, as None."""
    store = make_store()
    reput = store.reput

    def release() -> None:
        with reput._progress:  # held by the test until wait_for_dispatch waits on it
            reput.lock.release()

    with reput._progress:
        reput.lock.acquire()  # no dispatch round until release(): dispatch is behind
        assert store.put(Message("T", b"x")).ok
        releasing = threading.Thread(target=release)
        releasing.start()
        assert store.wait_for_dispatch(timeout)
    releasing.join()
    assert store.dispatch_behind_bytes() == 0


def test_an_empty_store_path_is_refused(tmp_path, monkeypatch) -> None:
    """``""`` (an unset variable, say) is no path: os.path.abspath would make it the current folder."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError, match="path"):
        MessageStore.open("")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("confirm_cut", [5, "yes", True])
def test_a_confirm_cut_that_is_no_function_is_refused_at_the_open(tmp_path, confirm_cut) -> None:
    """It is called only when recovery would cut: a wrong one raised a bare TypeError then, on
    some later crash; now the open refuses it at once, before the folder is made."""
    with pytest.raises(InvalidArgumentError, match="confirm_cut is a function"):
        MessageStore.open(tmp_path / "s", confirm_cut=confirm_cut)
    assert list(tmp_path.iterdir()) == []


def test_a_path_with_a_nul_character_is_a_typed_error(tmp_path) -> None:
    """No file name holds NUL: os.stat's bare ValueError became a typed error naming the path."""
    with pytest.raises(InvalidArgumentError, match="NUL"):
        MessageStore.open(tmp_path / "s\0x")
    for key in ("storePathCommitLog", "storePathRootDir", "readOnlyCommitLogStorePaths"):
        with pytest.raises(ConfigError, match=f"{key} holds a NUL"):
            MessageStore.open(tmp_path / "s", **{key: str(tmp_path / "c\0x")})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("keys", [{"a": 1}, {"a": "b"}])
def test_message_keys_that_are_a_mapping_are_refused(keys) -> None:
    """A dict iterates as its keys: taken, its values would be dropped without a word. (An empty
    one, as an empty list, is no keys.)"""
    with pytest.raises(InvalidMessageError, match="keys"):
        Message("T", b"x", keys=keys)
    assert Message("T", b"x", keys={}).keys is None


def test_the_facade_s_read_and_dispatch_calls_have_their_own_docs() -> None:
    """help() shows each call's own doc, not nothing (or the section comment above it)."""
    for name in (
        "query_message",
        "look_message_by_offset",
        "look_message_by_msg_id",
        "get_offset_in_queue_by_time",
        "dispatch_behind_bytes",
    ):
        assert inspect.getdoc(getattr(MessageStore, name)), name
    assert "maxMsgsNumBatch" in MessageStore.query_message.__doc__
    assert "LOWER" in MessageStore.get_offset_in_queue_by_time.__doc__


def test_help_on_an_open_store_s_put_shows_the_put_doc(make_store) -> None:
    """An open store's put is the writer's closure (the hot path): it carries put's doc."""
    store = make_store()
    assert store.put is not MessageStore.put and store.put.__name__ == "put"
    assert inspect.getdoc(store.put) == inspect.getdoc(MessageStore.put).split(" (")[0]
    assert "Store one message in ``queue_id`` of its topic." in pydoc.render_doc(store.put)


def test_a_shut_down_store_refuses_a_with_block(make_store) -> None:
    """As every other call: ``with store:`` on a store already shut down ran the block."""
    store = make_store()
    store.shutdown()
    with pytest.raises(StoreClosedError, match="is shut down"), store:
        pytest.fail("the block ran")


def test_send_back_of_a_message_never_stored_names_what_it_takes(make_store) -> None:
    """A Message (not yet stored) given to send_back: the error said an integer was wanted, while
    a stored message is what it takes first."""
    store = make_store()
    with pytest.raises(InvalidArgumentError) as raised:
        store.send_back("g", Message("T", b"x" * 100_000))
    assert str(raised.value) == (
        "send_back: message is a StoredMessage (as a pull or a lookup gives it) or its commit-log offset, not Message"
    )


def test_a_queue_id_without_its_topic_is_refused(make_store) -> None:
    """get_earliest_message_time(queue_id=1) gave the whole log's earliest time, the queue ignored."""
    store = make_store()
    store.put(Message("T", b"x"), 1).raise_for_status()
    assert store.wait_for_dispatch()
    with pytest.raises(InvalidArgumentError, match="queue_id needs its topic"):
        store.get_earliest_message_time(queue_id=1)
    assert store.get_earliest_message_time("T", 1) == store.get_earliest_message_time() > 0


def test_an_error_shows_a_huge_value_cut_short(make_store) -> None:
    """A value of megabytes given by mistake was repeated whole in the error (4 MiB messages)."""
    store = make_store()
    huge = "x" * (4 << 20)
    calls = [
        lambda: StoreConfig(flushDiskType=huge),
        lambda: StoreConfig(**{huge: 1}),
        lambda: store.get_message("g", "T", 0, huge),
        lambda: store.wait_for_dispatch(huge),
        lambda: MessageStore.open(huge.encode()),
    ]
    for call in calls:
        with pytest.raises(RocketStoreError) as raised:
            call()
        assert len(str(raised.value)) < 300 and "xxx...xxx" in str(raised.value), str(raised.value)[:300]
    cut = f"'{'x' * 37}...{'x' * 38}'"
    assert repr(Message("T", b"", tags=huge, properties={"p": "v"})) == (
        f"Message(topic='T', body=<0 bytes>, properties={{'p': 'v', 'TAGS': {cut}}})"
    )


def test_the_results_type_hints_resolve_at_runtime() -> None:
    """Tools that read hints at runtime (autodoc, typeguard) met a NameError: StoredMessage was
    imported for type checkers only."""
    import typing

    from rocketstore.codec.message import StoredMessage
    from rocketstore.results import GetResult, QueryResult

    for result in (GetResult, QueryResult):
        assert typing.get_type_hints(result.__init__)["messages"] == list[StoredMessage]


def test_a_value_holding_the_name_value_separator_is_stored_as_java_stores_it(make_store, store_config, rmqread_export):
    """RocketMQ's parser (string2messageProperties) takes the text before a property's first \\x01
    as its name and the rest, \\x01 included, as its value; a Java producer can send such a value
    and a broker stores it. Such values (tags and keys too) were refused, so a record of them read
    fine but could not be stored again: its delayed delivery was dropped, its send_back and the
    import of its export raised. A name holding \\x01, and any \\x02, are still refused."""
    from rocketstore.export import export_jsonl

    store = make_store()
    odd = Message("T", b"x", tags="t\x01u", keys=["k\x01w", "plain"], properties={"P": "a\x01b", "Q": "\x01"})
    put = store.put(odd, 0)
    assert put.ok, put
    delayed = store.put(Message("T", b"later", tags="t\x01u", properties={"DELAY": "1", "P": "\x01v"}), 0)
    assert delayed.ok, delayed
    assert store.wait_for_dispatch()
    (got,) = store.get_message("g", "T", 0, 0, 32, tags="t\x01u").messages
    assert (got.tags, got.keys, got.properties["P"], got.properties["Q"]) == (
        "t\x01u",
        "k\x01w plain",
        "a\x01b",
        "\x01",
    )
    assert [m.body for m in store.query_message("T", "k\x01w").messages] == [b"x"]
    assert store.services.schedule.run_once(now=2**62) == 1  # delivered, not dropped
    assert store.wait_for_dispatch()
    later = store.get_message("g", "T", 0, 1, 32).messages
    assert [(m.body, m.tags, m.properties["P"]) for m in later] == [(b"later", "t\x01u", "\x01v")]
    assert store.send_back("grp", got, delay_level=-1).ok  # to the DLQ: stored again as it was
    rows = {r["body"]: r for r in rmqread_export(store.root, store_config)}
    assert rows["eA=="]["tags"] == "t\x01u" and rows["eA=="]["properties"]["P"] == "a\x01b"
    exported = store.root + "/export.jsonl"
    with open(exported, "w", encoding="utf-8") as out:
        count = export_jsonl(store, out)
    again = make_store(name="again")
    with open(exported, encoding="utf-8") as lines:
        assert import_jsonl(again, lines) == count == 4  # T's message and delivered one, the schedule and DLQ units
    for bad in ({"a\x01b": "v"}, {"P": "a\x02b"}):
        with pytest.raises(InvalidMessageError, match="property"):
            Message("T", b"x", properties=bad)
    for fields in ({"tags": "t\x02u"}, {"keys": "k\x02w"}):
        with pytest.raises(InvalidMessageError, match="without \\\\x02"):
            Message("T", b"x", **fields)
