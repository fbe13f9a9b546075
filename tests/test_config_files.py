"""Config JSON files (spec section 10.3): the fastjson dialect and the four config managers."""

from __future__ import annotations

import errno
import json
import os
import threading

import pytest

import conftest
from rocketstore.errors import CorruptStoreError, StoreFileError
from rocketstore.meta import fastjson
from rocketstore.meta.config_file import next_version
from rocketstore.meta.json_files import load_json_file, write_json_file
from rocketstore.meta.offset_files import ConsumerOffsetManager, DelayOffsetManager
from rocketstore.meta.subscription_groups import SubscriptionGroupManager
from rocketstore.meta.topic_config import TopicConfigManager

SAMPLE_DELAY_OFFSET = str(conftest.VECTORS / "sample-clean" / "store" / "config" / "delayOffset.json")
TS = 1700000000000
GROUP = "please_rename_unique_group_name_4"

# ---------------------------------------------------------------- literal texts of spec section 10.3 (5.3.3)

TOPICS_533 = (
    "{\n"
    '\t"dataVersion":{\n'
    '\t\t"counter":2,\n'
    '\t\t"stateVersion":0,\n'
    '\t\t"timestamp":1700000000000\n'
    "\t},\n"
    '\t"topicConfigTable":{\n'
    '\t\t"TopicTest":{\n'
    '\t\t\t"attributes":{},\n'
    '\t\t\t"order":false,\n'
    '\t\t\t"perm":6,\n'
    '\t\t\t"readQueueNums":4,\n'
    '\t\t\t"topicFilterType":"SINGLE_TAG",\n'
    '\t\t\t"topicName":"TopicTest",\n'
    '\t\t\t"topicSysFlag":0,\n'
    '\t\t\t"writeQueueNums":4\n'
    "\t\t}\n"
    "\t}\n"
    "}"
)

CONSUMER_OFFSET_533 = (
    "{\n"
    '\t"dataVersion":{\n'
    '\t\t"counter":0,\n'
    '\t\t"stateVersion":0,\n'
    '\t\t"timestamp":1700000000000\n'
    "\t},\n"
    '\t"groupTopicMap":{\n'
    '\t\t"please_rename_unique_group_name_4":["TopicTest"]\n'
    "\t},\n"
    '\t"offsetTable":{\n'
    '\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:248\n'
    "\t\t}\n"
    "\t}\n"
    "}"
)

DELAY_OFFSET_533 = (
    "{\n"
    '\t"dataVersion":{\n'
    '\t\t"counter":0,\n'
    '\t\t"stateVersion":0,\n'
    '\t\t"timestamp":1700000000000\n'
    "\t},\n"
    '\t"offsetTable":{1:5,3:12\n'
    "\t}\n"
    "}"
)

SUBSCRIPTION_GROUP_533 = (
    "{\n"
    '\t"dataVersion":{\n'
    '\t\t"counter":0,\n'
    '\t\t"stateVersion":0,\n'
    '\t\t"timestamp":1700000000000\n'
    "\t},\n"
    '\t"forbiddenTable":{},\n'
    '\t"subscriptionGroupTable":{\n'
    '\t\t"please_rename_unique_group_name_4":{\n'
    '\t\t\t"attributes":{},\n'
    '\t\t\t"brokerId":0,\n'
    '\t\t\t"consumeBroadcastEnable":true,\n'
    '\t\t\t"consumeEnable":true,\n'
    '\t\t\t"consumeFromMinEnable":true,\n'
    '\t\t\t"consumeMessageOrderly":false,\n'
    '\t\t\t"consumeTimeoutMinute":15,\n'
    '\t\t\t"groupName":"please_rename_unique_group_name_4",\n'
    '\t\t\t"groupRetryPolicy":{\n'
    '\t\t\t\t"type":"CUSTOMIZED"\n'
    "\t\t\t},\n"
    '\t\t\t"groupSysFlag":0,\n'
    '\t\t\t"notifyConsumerIdsChangedEnable":true,\n'
    '\t\t\t"retryMaxTimes":16,\n'
    '\t\t\t"retryQueueNums":1,\n'
    '\t\t\t"whichBrokerWhenConsumeSlowly":1\n'
    "\t\t}\n"
    "\t}\n"
    "}"
)

# ---------------------------------------------------------------- 4.9.8 forms (spec text + its 4.9.8 notes)

CONSUMER_OFFSET_498 = (
    '{\n\t"offsetTable":{\n\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:248\n\t\t}\n\t}\n}'
)

DELAY_OFFSET_498 = '{\n\t"offsetTable":{1:5,3:12\n\t}\n}'

TOPICS_498 = (
    "{\n"
    '\t"dataVersion":{\n'
    '\t\t"counter":2,\n'
    '\t\t"timestamp":1700000000000\n'
    "\t},\n"
    '\t"topicConfigTable":{\n'
    '\t\t"TopicTest":{\n'
    '\t\t\t"order":false,\n'
    '\t\t\t"perm":6,\n'
    '\t\t\t"readQueueNums":4,\n'
    '\t\t\t"topicFilterType":"SINGLE_TAG",\n'
    '\t\t\t"topicName":"TopicTest",\n'
    '\t\t\t"topicSysFlag":0,\n'
    '\t\t\t"writeQueueNums":4\n'
    "\t\t}\n"
    "\t}\n"
    "}"
)

SUBSCRIPTION_GROUP_498 = (
    "{\n"
    '\t"dataVersion":{\n'
    '\t\t"counter":1,\n'
    '\t\t"timestamp":1700000000000\n'
    "\t},\n"
    '\t"subscriptionGroupTable":{\n'
    '\t\t"please_rename_unique_group_name_4":{\n'
    '\t\t\t"brokerId":0,\n'
    '\t\t\t"consumeBroadcastEnable":true,\n'
    '\t\t\t"consumeEnable":true,\n'
    '\t\t\t"consumeFromMinEnable":true,\n'
    '\t\t\t"groupName":"please_rename_unique_group_name_4",\n'
    '\t\t\t"notifyConsumerIdsChangedEnable":true,\n'
    '\t\t\t"retryMaxTimes":16,\n'
    '\t\t\t"retryQueueNums":1,\n'
    '\t\t\t"whichBrokerWhenConsumeSlowly":1\n'
    "\t\t}\n"
    "\t}\n"
    "}"
)


def _read(path: str | os.PathLike[str]) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _write(path: str | os.PathLike[str], text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


# ======================================================================== fastjson.dumps: the 5.3.3 examples


def test_dumps_topics_533() -> None:
    obj = {
        "dataVersion": {"counter": 2, "stateVersion": 0, "timestamp": TS},
        "topicConfigTable": {
            "TopicTest": {
                "attributes": {},
                "order": False,
                "perm": 6,
                "readQueueNums": 4,
                "topicFilterType": "SINGLE_TAG",
                "topicName": "TopicTest",
                "topicSysFlag": 0,
                "writeQueueNums": 4,
            }
        },
    }
    assert fastjson.dumps(obj) == TOPICS_533


def test_dumps_consumer_offset_533() -> None:
    obj = {
        "dataVersion": {"counter": 0, "stateVersion": 0, "timestamp": TS},
        "groupTopicMap": {GROUP: ["TopicTest"]},
        "offsetTable": {f"TopicTest@{GROUP}": {0: 250, 1: 248}},
    }
    assert fastjson.dumps(obj) == CONSUMER_OFFSET_533


def test_dumps_delay_offset_533() -> None:
    obj = {"dataVersion": {"counter": 0, "stateVersion": 0, "timestamp": TS}, "offsetTable": {1: 5, 3: 12}}
    assert fastjson.dumps(obj) == DELAY_OFFSET_533


def test_dumps_subscription_group_533() -> None:
    group = {
        "attributes": {},
        "brokerId": 0,
        "consumeBroadcastEnable": True,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeMessageOrderly": False,
        "consumeTimeoutMinute": 15,
        "groupName": GROUP,
        "groupRetryPolicy": {"type": "CUSTOMIZED"},
        "groupSysFlag": 0,
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": 16,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }
    obj = {
        "dataVersion": {"counter": 0, "stateVersion": 0, "timestamp": TS},
        "forbiddenTable": {},
        "subscriptionGroupTable": {GROUP: group},
    }
    assert fastjson.dumps(obj) == SUBSCRIPTION_GROUP_533


# ======================================================================== fastjson.dumps: dialect details


def test_dumps_empty_containers_and_scalars() -> None:
    assert fastjson.dumps({}) == "{}"
    assert fastjson.dumps([]) == "[]"
    assert fastjson.dumps({"a": {}, "b": []}) == '{\n\t"a":{},\n\t"b":[]\n}'
    assert fastjson.dumps({"t": True, "f": False, "n": -7}) == '{\n\t"t":true,\n\t"f":false,\n\t"n":-7\n}'
    assert fastjson.dumps(None) == "null"
    assert fastjson.dumps([1, "x", None]) == '[1,"x",null]'
    assert not fastjson.dumps({"a": 1}).endswith("\n")


def test_dumps_integer_keys_inline() -> None:
    assert fastjson.dumps({0: 250}) == "{0:250\n}"
    assert fastjson.dumps({"m": {5: 1, -1: 2}}) == '{\n\t"m":{5:1,-1:2\n\t}\n}'
    # MapSerializer: a string key starts a new line, an integer key does not.
    assert fastjson.dumps({"a": 1, 2: 3}) == '{\n\t"a":1,2:3\n}'


def test_dumps_int_maps_with_bools_or_nulls_keep_the_general_rules() -> None:
    """An int -> int map is written in one piece; one holding a bool or a None goes entry by entry
    (true/false, the None entry left out, the closing brace still on its own line)."""
    assert fastjson.dumps({"q": {0: 5, 1: 6}}) == '{\n\t"q":{0:5,1:6\n\t}\n}'
    assert fastjson.dumps({0: True, 1: 2}) == "{0:true,1:2\n}"
    assert fastjson.dumps({True: 1}) == "{true:1\n}"
    assert fastjson.dumps({0: None, 1: 2}) == "{1:2\n}"
    assert fastjson.dumps({0: None}) == "{\n}"
    assert fastjson.dumps({"a": '"q" \\ ~'}) == '{\n\t"a":"\\"q\\" \\\\ ~"\n}'
    import enum

    class Kind(enum.StrEnum):  # a str subclass is a string key
        A = "a"

    assert fastjson.dumps({Kind.A: 1}) == '{\n\t"a":1\n}'


def test_dumps_skips_none_values_and_keeps_insertion_order() -> None:
    assert fastjson.dumps({"b": 1, "x": None, "a": 2}) == '{\n\t"b":1,\n\t"a":2\n}'


def test_dumps_escapes_strings() -> None:
    text = fastjson.dumps({'k"\\': 'a"b\\c\n\t\x01/é'})
    assert text == '{\n\t"k\\"\\\\":"a\\"b\\\\c\\n\\t\\u0001/é"\n}'
    assert json.loads(text) == {'k"\\': 'a"b\\c\n\t\x01/é'}


def test_a_lone_surrogate_read_from_a_file_is_written_back_escaped(tmp_path) -> None:
    """A ``\\ud800`` escape read alone (no pair) cannot be written as UTF-8: the persist at the
    shutdown failed, the abort file stayed and every later writable open failed the same way.
    Written as the escape it was read from, RocketMQ's fastjson reads it back as the same char."""
    path = tmp_path / "topics.json"
    path.write_text('{"topicConfigTable":{"X\\ud800\\ud83d\\ude00":{"perm":6}}}', encoding="utf-8")
    manager = TopicConfigManager(str(path))
    assert manager.load() is True
    manager.persist()
    text = path.read_text(encoding="utf-8")
    assert '"X\\uD800\U0001f600"' in text
    assert list(fastjson.loads(text)["topicConfigTable"]) == ["X\ud800\U0001f600"]


def test_dumps_string_that_looks_like_an_int_map() -> None:
    assert fastjson.dumps({"a": "{1:2}"}) == '{\n\t"a":"{1:2}"\n}'


def test_dumps_rejects_unknown_types() -> None:
    with pytest.raises(TypeError):
        fastjson.dumps({"a": object()})
    with pytest.raises(TypeError):
        fastjson.dumps({(1, 2): 3})


# ======================================================================== fastjson.loads


def test_loads_real_sample_delay_offset() -> None:
    with open(SAMPLE_DELAY_OFFSET, encoding="utf-8") as f:
        text = f.read()
    result = fastjson.loads(text)
    assert result == {"offsetTable": {1: 23, 2: 32}}
    assert all(type(k) is int for k in result["offsetTable"])  # type: ignore[index]


def test_loads_sample_through_load_json_file_and_manager() -> None:
    assert load_json_file(SAMPLE_DELAY_OFFSET) == {"offsetTable": {1: 23, 2: 32}}
    mgr = DelayOffsetManager(SAMPLE_DELAY_OFFSET, writable=False)
    assert mgr.load() is True
    assert mgr.offset_table == {1: 23, 2: 32}
    assert mgr.get(1) == 23 and mgr.get(2) == 32 and mgr.get(3) == 0
    mgr.persist()  # not writable: must not touch the sample directory
    assert not os.path.exists(SAMPLE_DELAY_OFFSET + ".tmp")
    assert not os.path.exists(SAMPLE_DELAY_OFFSET + ".bak")


@pytest.mark.parametrize(
    "text",
    [
        "{1:23,2:32}",
        "{ 1 : 23 , 2 : 32 }",
        "{\n\t\t1:23,\n\t\t2:32\n\t}",
        "{1:23,2:32\n}",
        "\r\n{1:23,\r\n2:32}\r\n",
    ],
)
def test_loads_bare_integer_keys_any_whitespace(text: str) -> None:
    assert fastjson.loads(text) == {1: 23, 2: 32}


def test_loads_the_spec_examples() -> None:
    assert fastjson.loads(CONSUMER_OFFSET_533) == {
        "dataVersion": {"counter": 0, "stateVersion": 0, "timestamp": TS},
        "groupTopicMap": {GROUP: ["TopicTest"]},
        "offsetTable": {f"TopicTest@{GROUP}": {0: 250, 1: 248}},
    }
    assert fastjson.loads(DELAY_OFFSET_498) == {"offsetTable": {1: 5, 3: 12}}
    # Files without bare keys are ordinary JSON: same result as the standard library.
    for text in (TOPICS_533, SUBSCRIPTION_GROUP_533, TOPICS_498, SUBSCRIPTION_GROUP_498):
        assert fastjson.loads(text) == json.loads(text)


def test_loads_quoted_keys_stay_strings() -> None:
    result = fastjson.loads('{"1":2,3:4,"-5":6,-7:8}')
    assert result == {"1": 2, 3: 4, "-5": 6, -7: 8}


def test_loads_does_not_touch_strings() -> None:
    text = '{"a":"{1:2}","b":"x,3:4}","c":["{5:6}"],"d\\"{7:8}":"\\"9:10"}'
    assert fastjson.loads(text) == {"a": "{1:2}", "b": "x,3:4}", "c": ["{5:6}"], 'd"{7:8}': '"9:10'}


def test_loads_values() -> None:
    assert fastjson.loads('[true,false,null,-1,0,1.5,2e3,"\\u00e9\\n",{},[]]') == [
        True,
        False,
        None,
        -1,
        0,
        1.5,
        2000.0,
        "é\n",
        {},
        [],
    ]
    assert fastjson.loads("9223372036854775807") == 9223372036854775807


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "{",
        "}",
        "{1:}",
        "{1 2}",
        "{1.5:2}",
        "{1:2 3:4}",
        "[1 2]",
        '{"a" 1}',
        '{"a":1}}',
        '{"a":1} x',
        '"unterminated',
        "nul",
        "tru",
        "-",
        "01",
        "{1a:2}",
        "{a b:1}",
        "{'a:1}",
        "{/* unterminated:1}",
        "[1] /",
        "{'a':'\\q'}",
    ],
)
def test_loads_malformed_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        fastjson.loads(text)


def test_loads_error_carries_position() -> None:
    with pytest.raises(json.JSONDecodeError) as info:
        fastjson.loads('{\n\t"offsetTable":{1:5 3:12}\n}')
    assert info.value.pos == 22  # the second key, where a comma was due
    assert info.value.lineno == 2


@pytest.mark.parametrize(
    "text",
    [
        "{'offsetTable':{'TopicTest@g':{0:12,1:5}}}",  # AllowSingleQuotes
        '{offsetTable:{"TopicTest@g":{0:12,1:5}}}',  # AllowUnQuotedFieldNames
        '{"offsetTable":{"TopicTest@g":{0:12,1:5,},},}',  # AllowArbitraryCommas
        '{,,"offsetTable":{,"TopicTest@g":{0:12,,1:5}}}',
        '/* edited by hand */ {"offsetTable": // the groups\n{"TopicTest@g":{0:12,1:5}}}',  # the lexer's comments
        '{\f"offsetTable":{\b"TopicTest@g":{0:12,1:5}}}',  # \f and \b are whitespace to it
    ],
)
def test_loads_what_fastjsons_default_features_take(text: str) -> None:
    """RocketMQ reads its config files with fastjson's default parser features (JSON.DEFAULT_PARSER_FEATURE:
    AllowUnQuotedFieldNames, AllowSingleQuotes, AllowArbitraryCommas) and lexer: a hand-edited file
    in that dialect was read as corrupt, its .bak (older) or nothing loaded instead."""
    assert fastjson.loads(text) == {"offsetTable": {"TopicTest@g": {0: 12, 1: 5}}}


def test_loads_single_quoted_strings_with_their_escapes() -> None:
    assert fastjson.loads("['it\\'s', '\"q\"', '\\u00e9\\n\\\\', '']") == ["it's", '"q"', "é\n\\", ""]
    assert fastjson.loads("[1,,2,]") == [1, 2]
    # fastjson's lexer also takes \x with two hex digits, \v, \F and \0 to \7, in both quotes
    assert fastjson.loads(r"""['\x41\F\v\0\7', "\x42\'"]""") == ["A\f\v\x00\x07", "B'"]
    # an escaped surrogate pair is one character there too, as in a JSON string
    assert fastjson.loads(r"""['\ud83d\ude00', "\ud83d\ude00\x41", '\udc80']""") == ["😀", "😀A", "\udc80"]
    with pytest.raises(json.JSONDecodeError) as info:
        fastjson.loads(r"{'a':'abc\q'}")
    assert info.value.pos == 9  # where the escape is, not where the string's body starts


def test_loads_deep_nesting_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        fastjson.loads("[" * 100000 + "]" * 100000)


@pytest.mark.parametrize(
    "obj",
    [
        {"offsetTable": {"t@g": {0: 1, 7: 99999999999}, "u@g": {}}},
        {"a": [1, 2, "x"], "b": {"c": {"d": True}}, "e": 'tab\there "q" {1:2}', 3: {4: 5}},
        {},
        {"k": "\u2028\x7f\x00"},
    ],
)
def test_round_trip(obj: object) -> None:
    assert fastjson.loads(fastjson.dumps(obj)) == obj


# ======================================================================== managers: byte-exact 4.9.8 files


def test_consumer_offset_498_byte_exact(tmp_path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    mgr = ConsumerOffsetManager(path)
    mgr.commit(GROUP, "TopicTest", 1, 248)
    mgr.commit(GROUP, "TopicTest", 0, 250)
    assert mgr.encode() == CONSUMER_OFFSET_498
    mgr.persist()
    assert path.read_bytes() == CONSUMER_OFFSET_498.encode()


def test_consumer_offset_empty(tmp_path) -> None:
    mgr = ConsumerOffsetManager(tmp_path / "c.json")
    assert mgr.encode() == '{\n\t"offsetTable":{}\n}'


def test_delay_offset_498_byte_exact(tmp_path) -> None:
    path = tmp_path / "delayOffset.json"
    mgr = DelayOffsetManager(path)
    mgr.set(3, 12)
    mgr.set(1, 5)
    assert mgr.encode() == DELAY_OFFSET_498
    mgr.persist()
    assert _read(path) == DELAY_OFFSET_498


def test_topics_498_byte_exact(tmp_path) -> None:
    path = tmp_path / "topics.json"
    mgr = TopicConfigManager(path)
    assert mgr.ensure("TopicTest", 0) is True
    assert mgr.data_version["counter"] == 1
    mgr.data_version = {"counter": 2, "timestamp": TS}
    assert mgr.encode() == TOPICS_498
    mgr.persist()
    assert _read(path) == TOPICS_498


def test_topics_533_shape_from_manager(tmp_path) -> None:
    mgr = TopicConfigManager(tmp_path / "topics.json", version="5.3.3")
    mgr.ensure("TopicTest", 3)
    assert mgr.data_version["counter"] == 1 and mgr.data_version["stateVersion"] == 0
    mgr.data_version["counter"] = 2
    mgr.data_version["timestamp"] = TS
    assert mgr.encode() == TOPICS_533


def test_topic_manager_rejects_unknown_version(tmp_path) -> None:
    with pytest.raises(ValueError):
        TopicConfigManager(tmp_path / "t.json", version="3.2.6")


def test_subscription_group_498_byte_exact(tmp_path) -> None:
    path = tmp_path / "subscriptionGroup.json"
    mgr = SubscriptionGroupManager(path)
    cfg = mgr.ensure(GROUP)
    assert cfg["retryMaxTimes"] == 16 and cfg["groupName"] == GROUP
    mgr.data_version["timestamp"] = TS
    assert mgr.encode() == SUBSCRIPTION_GROUP_498
    mgr.persist()
    assert _read(path) == SUBSCRIPTION_GROUP_498


# ======================================================================== managers: 5.x files are read (and kept)


def test_subscription_group_533_file_is_kept_byte_exact(tmp_path) -> None:
    path = tmp_path / "subscriptionGroup.json"
    _write(path, SUBSCRIPTION_GROUP_533)
    mgr = SubscriptionGroupManager(path)
    assert mgr.load() is True
    assert mgr.find(GROUP)["groupRetryPolicy"] == {"type": "CUSTOMIZED"}  # type: ignore[index]
    assert mgr.setting(GROUP, "retryMaxTimes") == 16
    assert mgr.encode() == SUBSCRIPTION_GROUP_533
    mgr.persist()
    assert _read(path) == SUBSCRIPTION_GROUP_533
    assert _read(str(path) + ".bak") == SUBSCRIPTION_GROUP_533


def test_topics_533_file_read_by_498_manager(tmp_path) -> None:
    path = tmp_path / "topics.json"
    _write(path, TOPICS_533)
    mgr = TopicConfigManager(path)
    assert mgr.load() is True
    assert mgr.topics() == ["TopicTest"]
    cfg = mgr.find("TopicTest")
    assert cfg is not None and cfg["readQueueNums"] == 4 and cfg["attributes"] == {}
    assert mgr.encode() == TOPICS_533  # unknown fields are kept
    assert mgr.ensure("TopicTest", 5) is True
    assert mgr.data_version["counter"] == 3 and mgr.data_version["stateVersion"] == 0


def test_consumer_offset_533_file_keeps_its_top_level_fields(tmp_path) -> None:
    """A 5.x file is written back with its dataVersion and other fields as read; its groupTopicMap
    also gets the groups and topics of new offsets (it stays what the offset table says)."""
    path = tmp_path / "consumerOffset.json"
    _write(path, CONSUMER_OFFSET_533)
    mgr = ConsumerOffsetManager(path)
    assert mgr.load() is True
    assert mgr.query(GROUP, "TopicTest", 0) == 250
    assert mgr.encode() == CONSUMER_OFFSET_533
    mgr.persist()
    assert _read(path) == CONSUMER_OFFSET_533
    mgr.commit(GROUP, "TopicTest", 0, 251)
    mgr.commit("g2", "T2", 0, 1)
    mgr.commit(GROUP, "T3", 0, 1)
    mgr.persist()
    written = fastjson.loads(_read(path))
    assert written["dataVersion"] == {"counter": 0, "stateVersion": 0, "timestamp": TS}
    assert written["groupTopicMap"] == {GROUP: ["TopicTest", "T3"], "g2": ["T2"]}
    assert written["offsetTable"][f"TopicTest@{GROUP}"] == {0: 251, 1: 248}
    assert list(written) == ["dataVersion", "groupTopicMap", "offsetTable"]


def test_consumer_offset_group_topic_map_is_the_offset_tables(tmp_path) -> None:
    """5.x's getGroupTopicMap is built from the offset table at each write: a topic whose offsets
    went (a deleted topic) leaves it, and a group left without topics goes. It kept them."""
    path = tmp_path / "consumerOffset.json"
    _write(path, '{"groupTopicMap":{"g4":["A","B"],"g5":["A"]},"offsetTable":{"A@g4":{0:1},"B@g4":{2:9},"A@g5":{0:3}}}')
    mgr = ConsumerOffsetManager(path)
    assert mgr.load() is True
    assert mgr.remove_topics({"A"}) == ["A@g4", "A@g5"]
    mgr.persist()
    assert fastjson.loads(_read(path))["groupTopicMap"] == {"g4": ["B"]}


def test_consumer_offset_keys_removed_by_topic_are_topic_at_group_only(tmp_path) -> None:
    """cleanOffsetByTopic removes a key only when it splits into exactly topic and group: keys
    with another '@', or none (only a file can hold them), stay."""
    path = tmp_path / "consumerOffset.json"
    _write(path, '{"offsetTable":{"T@g":{0:1},"T@g@x":{0:2},"T":{0:3},"T@":{0:5},"T@h@":{0:6},"O@g":{0:4}}}')
    mgr = ConsumerOffsetManager(path)
    assert mgr.load() is True
    assert mgr.remove_topics({"T"}) == ["T@g", "T@h@"]  # Java's split drops trailing empty parts
    assert sorted(mgr.offset_table) == ["O@g", "T", "T@", "T@g@x"]


def test_a_data_version_counter_wraps_as_a_java_long() -> None:
    """DataVersion.nextVersion increments an AtomicLong: at Long.MAX_VALUE it wraps to
    Long.MIN_VALUE. It became 2**63, which no reader (this one included) takes as a long."""
    version = {"counter": 2**63 - 1, "timestamp": 0}
    next_version(version)
    assert version["counter"] == -(2**63)


def test_consumer_offset_unknown_top_level_fields_are_kept_sorted(tmp_path) -> None:
    path = tmp_path / "consumerOffset.json"
    _write(path, '{"pullOffsetTable":{},"offsetTable":{"T@g":{0:1}},"lmqOffsetTable":{"%LMQ%x@g":{0:2}}}')
    mgr = ConsumerOffsetManager(path)
    assert mgr.load() is True
    assert mgr.encode() == (
        '{\n\t"lmqOffsetTable":{\n\t\t"%LMQ%x@g":{0:2\n\t\t}\n\t},\n'
        '\t"offsetTable":{\n\t\t"T@g":{0:1\n\t\t}\n\t},\n\t"pullOffsetTable":{}\n}'
    )
    assert "groupTopicMap" not in mgr.encode()  # not added to a file that had none


@pytest.mark.parametrize(
    "text", ['{"dataVersion":[],"offsetTable":{}}', '{"groupTopicMap":{"g":"T"},"offsetTable":{}}']
)
def test_consumer_offset_bad_top_level_fields_are_undecodable(tmp_path, text: str) -> None:
    path = tmp_path / "consumerOffset.json"
    _write(path, text)
    mgr = ConsumerOffsetManager(path)
    assert mgr.load() is False and mgr.load_problem is not None


def test_delay_offset_533_file_keeps_its_data_version(tmp_path) -> None:
    path = tmp_path / "delayOffset.json"
    _write(path, DELAY_OFFSET_533)
    mgr = DelayOffsetManager(path)
    assert mgr.load() is True
    assert mgr.offset_table == {1: 5, 3: 12}
    assert mgr.encode() == DELAY_OFFSET_533
    mgr.set(2, 7)
    mgr.persist()
    written = fastjson.loads(_read(path))
    assert written == {
        "dataVersion": {"counter": 0, "stateVersion": 0, "timestamp": TS},
        "offsetTable": {1: 5, 2: 7, 3: 12},
    }
    assert _read(str(path) + ".bak") == DELAY_OFFSET_533


def test_quoted_queue_ids_are_read_as_ints(tmp_path) -> None:
    path = tmp_path / "consumerOffset.json"
    _write(path, '{"offsetTable":{"t@g":{"0":5,"2":7}}}')
    mgr = ConsumerOffsetManager(path)
    mgr.load()
    assert mgr.query_all("g", "t") == {0: 5, 2: 7}


def test_missing_fields_take_java_defaults(tmp_path) -> None:
    topics = tmp_path / "topics.json"
    _write(topics, '{"topicConfigTable":{"T":{"readQueueNums":8}}}')
    mgr = TopicConfigManager(topics)
    mgr.load()
    cfg = mgr.find("T")
    assert cfg == {
        "order": False,
        "perm": 6,
        "readQueueNums": 8,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "T",
        "topicSysFlag": 0,
        "writeQueueNums": 16,
    }
    groups = tmp_path / "subscriptionGroup.json"
    _write(groups, '{"subscriptionGroupTable":{"G":{"retryMaxTimes":3}}}')
    sub = SubscriptionGroupManager(groups)
    sub.load()
    assert sub.setting("G", "retryMaxTimes") == 3
    assert sub.find("G")["consumeEnable"] is True  # type: ignore[index]


@pytest.mark.parametrize(
    ("raw", "read"),
    [
        *[('"false"', False), ('"FALSE"', False), ('"0"', False), ('"f"', False), ('"N"', False), ("0", False)],
        *[('"true"', True), ('"True"', True), ('"1"', True), ('"y"', True), ('"T"', True), ("1", True), ("2", False)],
        *[("null", None), ('""', None), ('"null"', None), ('"NULL"', None)],  # fastjson: the field's default
    ],
)
def test_boolean_fields_are_read_as_fastjson_casts_them(tmp_path, raw: str, read: bool | None) -> None:
    """fastjson reads a boolean bean field given as a string or number with TypeUtils.castToBoolean
    ("order":"false" made the whole topics.json unreadable; "consumeEnable":"false" stayed a
    string, which is true); the file is written back with JSON booleans."""
    topics = tmp_path / "topics.json"
    _write(topics, '{"topicConfigTable":{"T":{"order":' + raw + ',"perm":6}}}')
    mgr = TopicConfigManager(topics)
    assert mgr.load() and mgr.load_problem is None
    assert mgr.find("T")["order"] is (False if read is None else read)  # type: ignore[index]
    mgr.persist()
    assert json.loads(_read(topics))["topicConfigTable"]["T"]["order"] is (False if read is None else read)
    groups = tmp_path / "subscriptionGroup.json"
    _write(groups, '{"subscriptionGroupTable":{"G":{"consumeEnable":' + raw + ',"consumeMessageOrderly":' + raw + "}}}")
    sub = SubscriptionGroupManager(groups)
    assert sub.load() and sub.load_problem is None
    group = sub.find("G")
    assert group["consumeEnable"] is (True if read is None else read)  # type: ignore[index]
    assert group["consumeMessageOrderly"] is (False if read is None else read)  # type: ignore[index]
    sub.persist()
    assert json.loads(_read(groups))["subscriptionGroupTable"]["G"]["consumeEnable"] is group["consumeEnable"]  # type: ignore[index]


@pytest.mark.parametrize("raw", ['"maybe"', '"yes"', '"t"', '"n"', "[]", "{}"])
def test_a_boolean_field_fastjson_cannot_cast_makes_the_file_undecodable(tmp_path, raw: str) -> None:
    topics = tmp_path / "topics.json"
    _write(topics, '{"topicConfigTable":{"T":{"order":' + raw + "}}}")
    mgr = TopicConfigManager(topics)
    assert mgr.load() is False and mgr.load_problem is not None and "order" in mgr.load_problem


@pytest.mark.parametrize(
    ("name", "text", "end"),
    [
        ("consumerOffset.json", '{"offsetTable":{"T@g":{0:9223372036854775808}}}', "9223372036854775807"),
        ("consumerOffset.json", '{"offsetTable":{"T@g":{0:-9223372036854775809}}}', "-9223372036854775808"),
        ("consumerOffset.json", '{"offsetTable":{"T@g":{2147483648:5}}}', "2147483647"),
        ("delayOffset.json", '{"offsetTable":{1:9223372036854775808}}', "9223372036854775807"),
        ("delayOffset.json", '{"offsetTable":{"-2147483649":5}}', "-2147483648"),
    ],
)
def test_offsets_outside_java_long_make_the_file_undecodable(tmp_path, name: str, text: str, end: str) -> None:
    """fastjson cannot read an offset past a Java long (nor a queue id or delay level past an int):
    such a file falls back to its backup as other bad content does; the ends of the ranges read."""
    path = tmp_path / name
    consumer = name == "consumerOffset.json"
    manager = ConsumerOffsetManager if consumer else DelayOffsetManager
    _write(str(path) + ".bak", '{"offsetTable":{"T@g":{0:7}}}' if consumer else '{"offsetTable":{1:7}}')
    _write(path, text)
    mgr = manager(path)
    assert mgr.load() and mgr.load_problem is not None and "backup" in mgr.load_problem
    assert mgr.offset_table == ({"T@g": {0: 7}} if consumer else {1: 7})
    _write(path, text.replace(end[:-1] + str(int(end[-1]) + 1), end))  # one past the end -> the end
    again = manager(path)
    assert again.load() and again.load_problem is None


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("topics.json", '{"topicConfigTable":{"T":{"readQueueNums":2147483648}}}'),
        ("topics.json", '{"topicConfigTable":{"T":{"perm":-2147483649}}}'),
        ("topics.json", '{"dataVersion":{"counter":9223372036854775808,"timestamp":0},"topicConfigTable":{}}'),
        ("subscriptionGroup.json", '{"subscriptionGroupTable":{"g":{"retryMaxTimes":2147483648}}}'),
        ("subscriptionGroup.json", '{"subscriptionGroupTable":{},"dataVersion":{"timestamp":9223372036854775808}}'),
    ],
)
def test_settings_outside_their_java_type_make_the_file_undecodable(tmp_path, name: str, text: str) -> None:
    """A topic's or group's int setting past a Java int, or a dataVersion field past a long, is
    what fastjson cannot read: the file falls back to its backup, as for the offsets' files."""
    path = tmp_path / name
    topics = name == "topics.json"
    _write(str(path) + ".bak", '{"topicConfigTable":{}}' if topics else '{"subscriptionGroupTable":{}}')
    _write(path, text)
    mgr = (TopicConfigManager if topics else SubscriptionGroupManager)(path)
    assert mgr.load() and mgr.load_problem is not None and "backup" in mgr.load_problem
    _write(
        path,
        text.replace("2147483648", "2147483647")
        .replace("-2147483649", "-2147483648")
        .replace("9223372036854775808", "9223372036854775807"),
    )
    again = (TopicConfigManager if topics else SubscriptionGroupManager)(path)
    assert again.load() and again.load_problem is None


# ======================================================================== managers: behaviour and round trips


def test_topic_ensure_grows_and_bumps_version(tmp_path) -> None:
    mgr = TopicConfigManager(tmp_path / "topics.json")
    assert mgr.ensure("A", 6) is True
    assert mgr.find("A")["readQueueNums"] == 7  # type: ignore[index]
    counter = mgr.data_version["counter"]
    assert mgr.ensure("A", 2) is False
    assert mgr.data_version["counter"] == counter
    assert mgr.ensure("A", 9) is True
    cfg = mgr.find("A")
    assert cfg is not None and cfg["readQueueNums"] == 10 and cfg["writeQueueNums"] == 10
    assert mgr.data_version["counter"] == counter + 1
    assert mgr.ensure("B", 0) is True
    assert mgr.topics() == ["A", "B"]
    with pytest.raises(ValueError):
        mgr.ensure("C", -1)


def test_topic_round_trip(tmp_path) -> None:
    path = tmp_path / "topics.json"
    mgr = TopicConfigManager(path)
    for i, name in enumerate(["TopicTest", "SCHEDULE_TOPIC_XXXX", "%RETRY%g"]):
        mgr.ensure(name, i * 10)
    mgr.persist()
    again = TopicConfigManager(path)
    assert again.load() is True
    assert again.topic_config_table == mgr.topic_config_table
    assert again.data_version == mgr.data_version
    assert again.encode() == mgr.encode()


def test_consumer_offset_manager_api_and_round_trip(tmp_path) -> None:
    path = tmp_path / "consumerOffset.json"
    mgr = ConsumerOffsetManager(path)
    assert mgr.query("g1", "T", 0) == -1
    assert mgr.query_all("g1", "T") == {}
    mgr.commit("g1", "T", 2, 30)
    mgr.commit("g1", "T", 0, 10)
    mgr.commit("g2", "T", 0, 5)
    mgr.commit("g1", "U", 1, 7)
    mgr.commit("g1", "T", 0, 11)
    assert mgr.query("g1", "T", 0) == 11
    assert mgr.query("g1", "T", 1) == -1
    assert list(mgr.query_all("g1", "T").items()) == [(0, 11), (2, 30)]
    assert mgr.groups() == ["g1", "g2"]
    mgr.persist()
    again = ConsumerOffsetManager(path)
    assert again.load() is True
    assert again.offset_table == {"T@g1": {0: 11, 2: 30}, "T@g2": {0: 5}, "U@g1": {1: 7}}
    assert again.encode() == mgr.encode()


def test_consumer_offset_manager_is_thread_safe(tmp_path) -> None:
    mgr = ConsumerOffsetManager(tmp_path / "consumerOffset.json")

    def worker(n: int) -> None:
        for i in range(300):
            mgr.commit(f"g{n}", "T", i % 8, i)
            if i % 50 == 0:
                mgr.persist()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mgr.persist()
    again = ConsumerOffsetManager(mgr.path)
    again.load()
    for n in range(6):
        assert again.query_all(f"g{n}", "T") == {i % 8: i for i in range(292, 300)}


def test_delay_offset_round_trip(tmp_path) -> None:
    path = tmp_path / "delayOffset.json"
    mgr = DelayOffsetManager(path)
    for level in range(18, 0, -1):
        mgr.set(level, level * 100)
    mgr.persist()
    again = DelayOffsetManager(path)
    assert again.load() is True
    assert list(again.offset_table) == list(range(1, 19))
    assert again.get(18) == 1800
    assert _read(path).startswith('{\n\t"offsetTable":{1:100,2:200,')


def test_subscription_group_api(tmp_path) -> None:
    path = tmp_path / "subscriptionGroup.json"
    mgr = SubscriptionGroupManager(path)
    assert mgr.find("g") is None
    assert mgr.setting("g", "retryMaxTimes") == 16
    first = mgr.ensure("g")
    counter = mgr.data_version["counter"]
    assert mgr.ensure("g") == first
    assert mgr.data_version["counter"] == counter
    mgr.subscription_group_table["g"]["retryMaxTimes"] = 2
    assert mgr.setting("g", "retryMaxTimes") == 2
    mgr.persist()
    again = SubscriptionGroupManager(path)
    again.load()
    assert again.subscription_group_table == mgr.subscription_group_table
    assert again.setting("g", "retryMaxTimes") == 2


def test_not_writable_persist_is_a_no_op(tmp_path) -> None:
    for cls in (TopicConfigManager, ConsumerOffsetManager, DelayOffsetManager, SubscriptionGroupManager):
        path = tmp_path / f"{cls.__name__}.json"
        mgr = cls(path, writable=False)
        mgr.persist()
        assert not path.exists()
        assert not os.path.exists(str(path) + ".tmp")


def test_load_without_any_file_gives_empty_config(tmp_path) -> None:
    mgr = ConsumerOffsetManager(tmp_path / "config" / "consumerOffset.json")
    mgr.commit("g", "T", 0, 1)
    assert mgr.load() is False
    assert mgr.offset_table == {}
    topics = TopicConfigManager(tmp_path / "config" / "topics.json")
    assert topics.load() is False
    assert topics.topics() == []


# ======================================================================== load_json_file / write_json_file


def test_write_creates_parent_and_no_bak_first_time(tmp_path) -> None:
    path = tmp_path / "a" / "b" / "x.json"
    write_json_file(path, '{"v":1}')
    assert _read(path) == '{"v":1}'
    assert not os.path.exists(str(path) + ".bak")
    assert not os.path.exists(str(path) + ".tmp")


def test_atomic_write_keeps_old_content_in_bak(tmp_path) -> None:
    path = tmp_path / "x.json"
    write_json_file(path, '{"v":1}')
    write_json_file(path, '{"v":2}')
    assert _read(path) == '{"v":2}'
    assert _read(str(path) + ".bak") == '{"v":1}'
    assert not os.path.exists(str(path) + ".tmp")
    write_json_file(path, '{"v":"é"}')
    assert path.read_bytes() == '{"v":"é"}'.encode()
    assert _read(str(path) + ".bak") == '{"v":2}'


def test_a_damaged_file_never_replaces_a_good_backup(tmp_path) -> None:
    """The main file damaged (the store loaded the backup): the next write must not copy the
    damage over the backup, or a crash before the rename would leave no good copy at all."""
    path = tmp_path / "x.json"
    write_json_file(path, '{"v":1}')
    write_json_file(path, '{"v":2}')
    path.write_bytes(b'{"v":')  # torn
    write_json_file(path, '{"v":3}')
    assert _read(path) == '{"v":3}'
    assert _read(str(path) + ".bak") == '{"v":1}'


def test_a_main_file_of_the_wrong_shape_never_replaces_a_good_backup(tmp_path) -> None:
    """Valid JSON that the manager's decoder refuses (the store loaded the backup) is damage too:
    it is kept aside, and the good backup stays as it was (bak_overwrite.sh of the review)."""
    path = tmp_path / "consumerOffset.json"
    _write(path, '{"offsetTable":{"T@g":{0:"x"}}}')
    _write(str(path) + ".bak", '{"offsetTable":{"T@g":{0:7}}}')
    mgr = ConsumerOffsetManager(path)
    assert mgr.load() is True and mgr.query("g", "T", 0) == 7 and mgr.load_problem is not None
    mgr.commit("g2", "T", 0, 1)
    mgr.persist()
    assert _read(str(path) + ".bak") == '{"offsetTable":{"T@g":{0:7}}}'
    (aside,) = [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert _read(aside) == '{"offsetTable":{"T@g":{0:"x"}}}'
    mgr.persist()  # now the main file is good: it becomes the backup
    assert _read(str(path) + ".bak") == _read(path)


def test_write_json_file_checks_the_previous_content_with_convert(tmp_path) -> None:
    path = tmp_path / "x.json"
    write_json_file(path, '{"v":1}')
    write_json_file(path, '{"w":2}')

    def convert(obj: dict) -> int:
        return int(obj["v"])

    write_json_file(path, '{"v":3}', convert)  # {"w":2} has no "v": kept aside, not the backup
    assert _read(str(path) + ".bak") == '{"v":1}'
    write_json_file(path, '{"v":4}', convert)
    assert _read(str(path) + ".bak") == '{"v":3}'


def test_bak_fallback_when_main_is_corrupt(tmp_path) -> None:
    path = tmp_path / "consumerOffset.json"
    mgr = ConsumerOffsetManager(path)
    mgr.commit("g", "T", 0, 1)
    mgr.persist()
    mgr.commit("g", "T", 0, 2)
    mgr.persist()  # .bak holds offset 1
    _write(path, '{"offsetTable":{"T@g":{0:')  # torn main file
    again = ConsumerOffsetManager(path)
    assert again.load() is True
    assert again.query("g", "T", 0) == 1
    assert load_json_file(path) == {"offsetTable": {"T@g": {0: 1}}}


@pytest.mark.parametrize("content", [b"", b"  \n"])
def test_bak_fallback_when_main_is_empty(tmp_path, content: bytes) -> None:
    path = tmp_path / "delayOffset.json"
    _write(str(path) + ".bak", DELAY_OFFSET_498)
    path.write_bytes(content)
    assert load_json_file(path) == {"offsetTable": {1: 5, 3: 12}}


@pytest.mark.parametrize("content", [b"", b"  \n"])
def test_a_blank_main_file_never_replaces_a_good_backup(tmp_path, content: bytes) -> None:
    """A blank main file (a power cut during RocketMQ's unsynced write) next to a good backup: the
    store loads the backup, and the next write leaves the backup alone until the new file is in
    place (copying the blank file over it first, a crash before the rename lost both)."""
    path = tmp_path / "consumerOffset.json"
    path.write_bytes(content)
    _write(str(path) + ".bak", '{"offsetTable":{"T@g":{0:100}}}')
    mgr = ConsumerOffsetManager(path)
    assert mgr.load() is True and mgr.query("g", "T", 0) == 100
    mgr.commit("g", "T", 0, 200)
    mgr.persist()
    assert _read(str(path) + ".bak") == '{"offsetTable":{"T@g":{0:100}}}'
    assert not [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]  # nothing to keep aside
    again = ConsumerOffsetManager(path)
    assert again.load() is True and again.query("g", "T", 0) == 200


def test_bak_fallback_when_main_is_missing(tmp_path) -> None:
    path = tmp_path / "delayOffset.json"
    _write(str(path) + ".bak", DELAY_OFFSET_498)
    mgr = DelayOffsetManager(path)
    assert mgr.load() is True
    assert mgr.offset_table == {1: 5, 3: 12}


def test_bak_fallback_when_main_has_wrong_shape_or_encoding(tmp_path) -> None:
    path = tmp_path / "delayOffset.json"
    _write(str(path) + ".bak", DELAY_OFFSET_498)
    for bad in (b"[1,2]", b'{"offsetTable":[1]}', b'{"offsetTable":{1:"x"}}', b'{"offsetTable":{1:5}}\xff'):
        path.write_bytes(bad)
        mgr = DelayOffsetManager(path)
        assert mgr.load() is True
        assert mgr.offset_table == {1: 5, 3: 12}


def test_corrupt_main_and_missing_bak_is_an_empty_config(tmp_path) -> None:
    path = tmp_path / "topics.json"
    _write(path, "{not json")
    assert load_json_file(path) is None
    _write(str(path) + ".bak", "")
    assert load_json_file(path) is None


def test_both_corrupt_raise_corrupt_store_error(tmp_path) -> None:
    path = tmp_path / "topics.json"
    _write(path, "{not json")
    _write(str(path) + ".bak", '{"a":')
    with pytest.raises(CorruptStoreError) as info:
        load_json_file(path)
    assert info.value.path == str(path)
    with pytest.raises(CorruptStoreError):
        TopicConfigManager(path).load()


def test_missing_main_and_corrupt_bak_raise(tmp_path) -> None:
    path = tmp_path / "topics.json"
    _write(str(path) + ".bak", "{oops")
    with pytest.raises(CorruptStoreError):
        load_json_file(path)


def test_leftover_tmp_is_ignored(tmp_path) -> None:
    path = tmp_path / "delayOffset.json"
    _write(str(path) + ".tmp", '{"offsetTable":{9:9}}')
    assert load_json_file(path) is None  # a .tmp alone is never read
    write_json_file(path, DELAY_OFFSET_498)
    _write(str(path) + ".tmp", '{"offsetTable":{1:')  # crash while writing the next version
    mgr = DelayOffsetManager(path)
    assert mgr.load() is True
    assert mgr.offset_table == {1: 5, 3: 12}
    mgr.set(2, 7)
    mgr.persist()  # the stale .tmp is overwritten and renamed away
    assert not os.path.exists(str(path) + ".tmp")
    assert _read(path) == '{\n\t"offsetTable":{1:5,2:7,3:12\n\t}\n}'
    assert _read(str(path) + ".bak") == DELAY_OFFSET_498


@pytest.mark.parametrize(
    "text",
    ['{"offsetTable":{"T@g":{0:5 1:6}}}', "{'offsetTable':{'T@g':{0:5}}} x", '{"offsetTable":{"T@g":{0:'],
)
@pytest.mark.parametrize("backup", [False, True])
def test_an_unreadable_main_file_is_kept_aside_before_it_is_replaced(tmp_path, text: str, backup: bool) -> None:
    """A main file the store cannot read (a broker's fastjson may read it: trailing commas, single
    quotes; or torn) is kept as ``<name>.corrupt-<yyyyMMddHHmmssSSS>`` by the first write that
    replaces it, with or without a backup: the write overwrote it and its text was lost. A good
    backup stays as it was."""
    path = tmp_path / "consumerOffset.json"
    if backup:
        _write(str(path) + ".bak", '{"offsetTable":{"T@g":{0:1}}}')
    _write(path, text)
    mgr = ConsumerOffsetManager(path)
    mgr.load()
    assert mgr.load_problem is not None
    mgr.commit("g", "T", 1, 7)
    mgr.persist()
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("consumerOffset.json.corrupt-")]
    assert len(aside.name) == len("consumerOffset.json.corrupt-") + 17 and aside.name[-17:].isdigit()
    assert _read(aside) == text
    again = ConsumerOffsetManager(path)
    assert again.load() and again.query("g", "T", 1) == 7
    if backup:
        assert _read(str(path) + ".bak") == '{"offsetTable":{"T@g":{0:1}}}'
    else:
        assert not os.path.exists(str(path) + ".bak")
    mgr.persist()  # a readable main file goes to the backup as before, nothing more is kept aside
    assert len([p for p in tmp_path.iterdir() if ".corrupt-" in p.name]) == 1
    assert _read(str(path) + ".bak") == _read(path)


def test_a_config_path_that_is_a_folder_is_named(tmp_path) -> None:
    """A folder where a config file (or its backup) belongs: CorruptStoreError naming it, not an
    empty config that the first write then fails on."""
    path = tmp_path / "topics.json"
    for where in (path, tmp_path / "topics.json.bak"):
        where.mkdir()
        with pytest.raises(CorruptStoreError, match="should be a file") as info:
            TopicConfigManager(path).load()
        assert info.value.path == str(where)
        where.rmdir()


def _unreadable(path: os.PathLike[str]) -> None:
    """``path`` exists but cannot be read, for root too: a symbolic link to itself (ELOOP), as a
    file of another user with mode 0600 is for a non-root store."""
    os.symlink(os.path.basename(path), path)


def test_a_main_file_that_cannot_be_read_refuses_a_writable_load(tmp_path) -> None:
    """A config file that is there but cannot be read (no permission, say) is not "undecodable": a
    writable manager refuses to load it (StoreFileError naming it) rather than load the older
    backup and fail on every write; a read-only one loads the backup and says so."""
    path = tmp_path / "consumerOffset.json"
    _write(str(path) + ".bak", '{"offsetTable":{"T@g":{0:1}}}')
    _unreadable(path)
    reader = ConsumerOffsetManager(path, writable=False)
    assert reader.load() and reader.query("g", "T", 0) == 1
    assert reader.load_problem is not None and "cannot read" in reader.load_problem
    with pytest.raises(StoreFileError, match=r"consumerOffset\.json") as info:
        ConsumerOffsetManager(path).load()
    assert info.value.errno == errno.ELOOP and info.value.filename == str(path)
    os.remove(str(path) + ".bak")  # nor is an unreadable backup "corrupt" when the main file is missing
    os.remove(path)
    _unreadable(tmp_path / "consumerOffset.json.bak")
    with pytest.raises(StoreFileError, match=r"consumerOffset\.json\.bak"):
        ConsumerOffsetManager(path).load()


def test_write_json_file_raises_a_typed_error_naming_the_file(tmp_path) -> None:
    """A write that fails on the file system (the main file cannot be read to back it up, the
    folder cannot hold the .tmp) raises StoreFileError naming the file and leaves no .tmp."""
    path = tmp_path / "consumerOffset.json"
    _unreadable(path)
    with pytest.raises(StoreFileError, match=r"consumerOffset\.json") as info:
        write_json_file(path, '{"offsetTable":{}}')
    assert info.value.errno == errno.ELOOP
    assert not os.path.lexists(str(path) + ".tmp") and os.path.islink(path)
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(StoreFileError, match=r"file/config/topics\.json") as info:
        write_json_file(blocked / "config" / "topics.json", "{}")
    assert info.value.errno == errno.ENOTDIR


@pytest.mark.parametrize(
    ("manager", "name", "text", "backup", "read"),
    [
        (
            ConsumerOffsetManager,
            "consumerOffset.json",
            '{"offsetTable":{"T@G":null}}',
            '{"offsetTable":{"T@G":{0:7}}}',
            lambda m: m.offset_table == {"T@G": {0: 7}},
        ),
        (
            TopicConfigManager,
            "topics.json",
            '{"topicConfigTable":{"New":null}}',
            '{"topicConfigTable":{}}',
            lambda m: m.find("New") is None,
        ),
        (
            SubscriptionGroupManager,
            "subscriptionGroup.json",
            '{"subscriptionGroupTable":{"G":null}}',
            '{"subscriptionGroupTable":{"G":{"retryMaxTimes":3}}}',
            lambda m: m.setting("G", "retryMaxTimes") == 3,
        ),
    ],
)
def test_a_null_table_entry_makes_the_file_undecodable(tmp_path, manager, name, text, backup, read) -> None:
    """RocketMQ's tables are ConcurrentHashMaps: fastjson's put of a null entry throws, and the
    load falls back to the backup. It was read as an empty entry (a topic of 16 queues, a group
    of defaults, no offsets), the backup's state ignored."""
    path = tmp_path / name
    _write(str(path) + ".bak", backup)
    _write(path, text)
    mgr = manager(path)
    assert mgr.load() and mgr.load_problem is not None and "backup" in mgr.load_problem
    assert read(mgr)


@pytest.mark.parametrize(
    ("manager", "good", "table"),
    [
        (TopicConfigManager, TOPICS_498, "topicConfigTable"),
        (ConsumerOffsetManager, CONSUMER_OFFSET_498, "offsetTable"),
        (DelayOffsetManager, DELAY_OFFSET_498, "offsetTable"),
        (SubscriptionGroupManager, SUBSCRIPTION_GROUP_498, "subscriptionGroupTable"),
    ],
)
def test_a_file_without_its_table_is_undecodable(tmp_path, manager: type, good: str, table: str) -> None:
    """A file without its table, or with a null one, is taken for a damaged file: its backup is read.
    RocketMQ falls back so for a null table (putAll(null) throws) and reads a missing one as empty,
    which would lose every topic, offset or group without a word; it never writes either."""
    path = tmp_path / "config.json"
    other = "subscriptionGroupTable" if table != "subscriptionGroupTable" else "offsetTable"
    for bad in ("{}", f'{{"{other}":{{}}}}', f'{{"{table}":null}}', '{"dataVersion":{"counter":1,"timestamp":1}}'):
        _write(path, bad)
        mgr = manager(path)
        assert mgr.load() is False and table in str(mgr.load_problem), (bad, mgr.load_problem)
        _write(str(path) + ".bak", good)
        mgr = manager(path)
        backup = manager(str(path) + ".bak")
        assert mgr.load() is True and backup.load() is True and mgr.encode() == backup.encode()
        os.remove(str(path) + ".bak")
