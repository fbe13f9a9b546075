"""The properties string of a record: ``name 0x01 value 0x02 ...`` (spec 3.4).

Writers here use RocketMQ 4.9's form (no trailing 0x02); readers accept both that and 5.x's
trailing separator, and drop segments without a name or a value, as RocketMQ does.
"""

from __future__ import annotations

from rocketstore.codec.ids import java_hash

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# well-known keys (MessageConst)
KEYS = "KEYS"
TAGS = "TAGS"
WAIT = "WAIT"
DELAY = "DELAY"
RETRY_TOPIC = "RETRY_TOPIC"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
TRAN_MSG = "TRAN_MSG"
UNIQ_KEY = "UNIQ_KEY"
CLUSTER = "CLUSTER"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
RECONSUME_TIME = "RECONSUME_TIME"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_CRC32 = "__CRC32#"
KEY_SEPARATOR = " "


def encode_properties(props: dict[str, str]) -> str:
    """A property dict -> the stored string (4.9 form, no trailing separator)."""
    return PROPERTY_SEPARATOR.join([k + NAME_VALUE_SEPARATOR + v for k, v in props.items()])


def java_map_order(props: dict[str, str]) -> dict[str, str]:
    """``props`` in the order a ``java.util.HashMap`` of them iterates, as RocketMQ 4.9.8 writes a
    properties string it re-serializes (spec 3.4): by bucket ``(h ^ h >>> 16) & (capacity - 1)``
    of the name's hashCode, ties in insertion order; capacity 16, doubled past three quarters full."""
    capacity = 16
    while len(props) > capacity * 3 // 4:
        capacity *= 2
    mask = capacity - 1

    def bucket(name: str) -> int:
        h = java_hash(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & mask

    return {name: props[name] for name in sorted(props, key=bucket)}


def decode_properties(text: str) -> dict[str, str]:
    """A stored properties string (either form) -> dict; empty names or values are dropped."""
    out: dict[str, str] = {}
    if not text:
        return out
    for segment in text.split(PROPERTY_SEPARATOR):
        name, sep, value = segment.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            out[name] = value
    return out


def split_keys(keys: str | None) -> list[str]:
    """The KEYS property -> the keys RocketMQ indexes (split on single spaces, empties dropped)."""
    if not keys:
        return []
    return [k for k in keys.split(KEY_SEPARATOR) if k]


def is_utf8_text(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogate); ASCII is checked without encoding."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_valid_property_name(text: str) -> bool:
    """True when a property name can be stored: UTF-8 text without either separator."""
    return NAME_VALUE_SEPARATOR not in text and PROPERTY_SEPARATOR not in text and is_utf8_text(text)


def is_valid_property_value(text: str) -> bool:
    """True when a property value can be stored: UTF-8 text without ``\x02``. A ``\x01`` in it
    reads back as part of the value: RocketMQ's parser takes the text before a property's first
    ``\x01`` as its name and all the rest as its value, and a Java producer may send one."""
    return PROPERTY_SEPARATOR not in text and is_utf8_text(text)


def property_value(props: bytes, marker: bytes) -> bytes | None:
    """The last non-empty value of the property ``marker`` (``b"\\x02NAME\\x01"``) introduces, or None.

    ``props`` must start with a 0x02 so the first property matches too. Empty values count as
    absent, as in RocketMQ's parser: an earlier value then holds.
    """
    i = props.rfind(marker)
    while i >= 0:
        k = i + len(marker)
        j = props.find(b"\x02", k)
        value = props[k:j] if j >= 0 else props[k:]
        if value:
            return value
        i = props.rfind(marker, 0, i)  # markers cannot overlap: their only 0x02 is the first byte
    return None
