"""Messages: ``Message`` is what a producer gives the store, ``StoredMessage`` what it reads back.

``StoredMessage`` decodes lazily: the fixed header is unpacked once, the properties string is
parsed only when asked for, so reading a batch costs little more than copying its bytes.
"""

from __future__ import annotations

import base64
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rocketstore.codec import sysflag as sf
from rocketstore.codec.crc import body_crc as _crc_of
from rocketstore.codec.hosts import format_host, parse_host
from rocketstore.codec.ids import offset_msg_id
from rocketstore.codec.properties import (
    KEYS,
    TAGS,
    UNIQ_KEY,
    decode_properties,
    is_valid_property_name,
    is_valid_property_value,
)
from rocketstore.codec.topic import known_topics as _known_topics
from rocketstore.codec.topic import topic_text as _topic_text
from rocketstore.codec.topic import validate_topic
from rocketstore.errors import InvalidMessageError, shown

# the (lowest, highest) of Java's int and long: the record's 4- and 8-byte number fields
JAVA_INT = (-(2**31), 2**31 - 1)
JAVA_LONG = (-(2**63), 2**63 - 1)


def as_int(name: str, value: object, error: type[Exception] = InvalidMessageError) -> int:
    """``value`` as a Python int: any integer (numpy's too) but a bool; ``error`` else."""
    if type(value) is int:
        return value
    if type(value) is not bool:
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            pass
    raise error(f"{name} must be an integer, not {shown(value)}")


def plain_str(value: object) -> object:
    """A str subclass (numpy.str_, a str enum) as the plain str it holds; anything else as is."""
    return str.__str__(value) if isinstance(value, str) and type(value) is not str else value


def check_range(name: str, value: object, bounds: tuple[int, int], given: object = None) -> int:
    """``value`` as an int, if it is an integer within ``bounds`` (its record field's Java width);
    InvalidMessageError else. ``given`` is what the caller was given, if not ``value`` itself."""
    low, high = bounds
    number = as_int(name, value)
    if not low <= number <= high:
        raise InvalidMessageError(f"{name} {value if given is None else given!r} is out of range ({low} .. {high})")
    return number


def _extra_field(i: int, default: object, doc: str) -> Any:
    """A ``Message`` field the store normally fills (``_extra[i]``; ``default`` while unset)."""
    return property(lambda self: self._extra[i] if self._extra else default, doc=doc)


def _header_field(i: int, doc: str) -> Any:
    """A ``StoredMessage`` header field (the unpacked header's item ``i``)."""
    return property(lambda self: self._h[i], doc=doc)


def _host_field(i: int, doc: str) -> Any:
    """A ``StoredMessage`` host field, as ``ip:port``."""
    return property(lambda self: format_host(self._h[i]), doc=doc)


class Message:
    """A message to store.

    ``keys`` is one key or a list of keys (stored space separated in ``KEYS``; typed as a sequence,
    though any iterable of str but a mapping or bytes is taken, in its order); ``tags`` goes to
    ``TAGS``. The keyword-only fields are normally filled by the store; ``rocketstore import``
    and replication pass them through to keep a message as it was.

    ``properties`` is the message's property dict (``TAGS`` and ``KEYS`` included) and may be
    changed in place; a message made from tags and keys alone builds it only when asked, which
    keeps the common put path short.
    """

    __slots__ = ("_body", "_extra", "_flag", "_keys", "_props", "_tags", "_topic")

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | memoryview | str,
        tags: str | None = None,
        keys: str | Sequence[str] | None = None,
        properties: Mapping[str, str] | None = None,
        flag: int = 0,
        *,
        born_timestamp: int | None = None,
        born_host: str | None = None,
        store_host: str | None = None,
        sys_flag: int = 0,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
    ) -> None:
        if type(topic) is not str or topic not in _known_topics:
            topic = validate_topic(plain_str(topic))
        self._topic = topic
        self._body = body if type(body) is bytes else _as_bytes(body)
        if not tags:
            tags = None
        elif type(tags) is not str or tags not in _good_tags:  # tags repeat: each is checked once
            tags = _checked_tags(tags)
        if not keys:
            keys = None
        elif type(keys) is not str or "\x02" in keys or not keys.isascii():
            keys = _checked_keys(keys)
        self._tags = tags
        self._keys = keys
        if properties:
            props = checked_properties(properties)
            if tags is not None:
                props[TAGS] = tags
            if keys is not None:
                props[KEYS] = keys
            self._props = props
        else:
            self._props = None
        if type(flag) is not int or not -(2**31) <= flag < 2**31:
            flag = check_range("flag", flag, JAVA_INT)
        self._flag = flag
        if type(sys_flag) is not int or sys_flag:
            if type(sys_flag) is not int:
                sys_flag = as_int("sys_flag", sys_flag)
            if sys_flag & ~sf.PRODUCER_BITS:
                raise InvalidMessageError(
                    f"sysFlag {sys_flag!r}: an int with only the compression, multi-tags and transaction bits"
                )
        if (
            born_timestamp is None
            and born_host is None
            and store_host is None
            and sys_flag == 0  # == rather than falsy: None is not 0 (refused below)
            and reconsume_times == 0
            and prepared_transaction_offset == 0
        ):
            self._extra = None
        else:
            if born_timestamp is not None:
                born_timestamp = check_range("born_timestamp", born_timestamp, JAVA_LONG)
            reconsume_times = check_range("reconsume_times", reconsume_times, JAVA_INT)
            prepared_transaction_offset = check_range(
                "prepared_transaction_offset", prepared_transaction_offset, JAVA_LONG
            )
            born_host, store_host = plain_str(born_host), plain_str(store_host)
            for name, host in (("born_host", born_host), ("store_host", store_host)):
                if host is not None and type(host) is not str:
                    raise InvalidMessageError(f"{name} is a str ip:port or [ipv6]:port, not {shown(host)}")
                if host:
                    parse_host(host)  # (cached) refused now, not at the put
            self._extra = (
                born_timestamp,
                born_host,
                store_host,
                sys_flag,
                reconsume_times,
                prepared_transaction_offset,
            )

    # topic, body and flag may be set after construction, checked as the constructor checks them
    @property
    def topic(self) -> str:
        """The topic (set it to move the message; checked as the constructor checks it)."""
        return self._topic

    @topic.setter
    def topic(self, topic: str) -> None:
        self._topic = validate_topic(plain_str(topic))

    @property
    def body(self) -> bytes:
        """The body (a str given is stored as its UTF-8 bytes)."""
        return self._body

    @body.setter
    def body(self, body: bytes | bytearray | memoryview | str) -> None:
        self._body = body if type(body) is bytes else _as_bytes(body)

    @property
    def flag(self) -> int:
        """The producer's int flag (a Java int)."""
        return self._flag

    @flag.setter
    def flag(self, flag: int) -> None:
        self._flag = check_range("flag", flag, JAVA_INT)

    @property
    def properties(self) -> dict[str, str]:
        """The property dict, ``TAGS`` and ``KEYS`` included; may be changed in place."""
        props = self._props
        if props is None:
            props = {}
            if self._tags is not None:
                props[TAGS] = self._tags
            if self._keys is not None:
                props[KEYS] = self._keys
            self._props = props
        return props

    @property
    def has_property_dict(self) -> bool:
        """False while the properties are just the tags and keys given to the constructor."""
        return self._props is not None

    @property
    def tags(self) -> str | None:
        """The ``TAGS`` property."""
        return self._tags if self._props is None else self._props.get(TAGS)

    @property
    def keys(self) -> str | None:
        """The ``KEYS`` property (keys separated by spaces)."""
        return self._keys if self._props is None else self._props.get(KEYS)

    born_timestamp: int | None = _extra_field(0, None, "The producer's time, epoch ms; None: the store stamps it.")
    born_host: str | None = _extra_field(1, None, "The producer's ``ip:port``; None: the store's own host.")
    store_host: str | None = _extra_field(2, None, "The storing broker's ``ip:port``; None: the store's own.")
    sys_flag: int = _extra_field(3, 0, "SYSFLAG bits the producer gives (compression, transaction type).")
    reconsume_times: int = _extra_field(4, 0, "How often the message was sent back for a retry.")
    prepared_transaction_offset: int = _extra_field(5, 0, "The half message a commit or rollback record ends.")

    def with_topic(self, topic: str, properties: dict[str, str]) -> Message:
        """A copy for ``topic`` with ``properties`` (already valid: the store's own rewrites)."""
        copy = Message.__new__(Message)
        copy._topic = validate_topic(topic)
        copy._body = self._body
        copy._flag = self._flag
        copy._tags = properties.get(TAGS)
        copy._keys = properties.get(KEYS)
        copy._props = properties
        copy._extra = self._extra
        return copy

    def __repr__(self) -> str:
        # in their order, each name and value cut short (tags of megabytes are not repeated whole)
        props = "{" + ", ".join(f"{shown(k)}: {shown(v)}" for k, v in self.properties.items()) + "}"
        return f"Message(topic={self.topic!r}, body=<{len(self.body)} bytes>, properties={props})"


_good_tags: set[str] = set()  # tags texts already checked (the fast path), up to _GOOD_TAGS_MAX
_GOOD_TAGS_MAX = 4096


def _checked_tags(tags: object) -> str:
    """``tags`` as a plain str, if it is a value a property can hold (``is_valid_property_value``);
    InvalidMessageError else."""
    if type(tags) is not str:
        tags = plain_str(tags)
    if type(tags) is not str or not is_valid_property_value(tags):
        raise InvalidMessageError(f"tags must be UTF-8 text without \\x02, not {shown(tags)}")
    if len(_good_tags) < _GOOD_TAGS_MAX:
        _good_tags.add(tags)
    return tags


def _checked_keys(keys: object) -> str:
    """``keys`` (a str, or an iterable of keys joined by spaces) as a plain str, if it is a value a
    property can hold (``is_valid_property_value``); InvalidMessageError else."""
    if type(keys) is not str:
        keys = plain_str(keys)
        keys = keys if type(keys) is str else join_keys(keys)
    if not is_valid_property_value(keys):
        raise InvalidMessageError(f"keys must be UTF-8 text without \\x02: {keys!r}")
    return keys


def _as_bytes(body: object) -> bytes:
    """A body that is not plain bytes as plain bytes: text as UTF-8; a bytes subclass
    (numpy.bytes_), bytearray or memoryview copied, as ``plain_str`` takes a str subclass."""
    if isinstance(body, str):
        try:
            return body.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidMessageError(f"a str body must be UTF-8 text: {exc}") from None
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise InvalidMessageError(f"a message body is bytes, not {type(body).__name__}")


def join_keys(keys: Iterable[str]) -> str:
    """Keys as KEYS stores them, joined by spaces; InvalidMessageError for one that is empty or
    holds a space (it would read back as two) or that is not text."""
    if not isinstance(keys, Iterable) or isinstance(keys, (Mapping, bytes, bytearray, memoryview)):  # not of keys
        raise InvalidMessageError(f"keys are a str or a list of str, not {shown(keys)}")
    keys = [plain_str(k) for k in keys]
    for k in keys:
        if type(k) is not str or not k or " " in k:
            raise InvalidMessageError(f"each key is a non-empty str without spaces, not {shown(k)}")
    return " ".join(keys)


def checked_properties(properties: dict[str, str]) -> dict[str, str]:
    """A copy of ``properties`` once every name and value is checked (InvalidMessageError):
    non-empty UTF-8 text, a name without either separator, a value without ``\x02`` (an empty
    value would not read back: RocketMQ's parser drops it)."""
    if type(properties) is not dict and not isinstance(properties, Mapping):
        raise InvalidMessageError(f"properties are a mapping of str to str, not {type(properties).__name__}")
    props = {plain_str(name): plain_str(value) for name, value in properties.items()}
    for name, value in props.items():
        if (
            type(name) is not str
            or type(value) is not str
            or not name
            or not value
            or not is_valid_property_name(name)
            or not is_valid_property_value(value)
        ):
            raise InvalidMessageError(
                f"property {name!r}={value!r}: names are non-empty UTF-8 text without \\x01 or \\x02, values "
                "non-empty UTF-8 text without \\x02"
            )
    return props


def _stored_property(name: str, doc: str) -> property:
    """A read-only property for one property of a stored message, found in the record's bytes
    without parsing them all (the last non-empty one wins, as in RocketMQ's property map)."""
    marker = f"\x02{name}\x01".encode()

    def get(self: StoredMessage) -> str | None:
        if self._props is not None:
            return self._props.get(name)
        # the properties end the record; with a separator put before them, every property starts
        # "\x02NAME\x01" (no value holds a \x02), so the last such match is the last NAME
        _, found, after = (b"\x02" + self._raw[self._l[3] :]).rpartition(marker)
        if not found:
            return None
        value = after.partition(b"\x02")[0]
        if value:
            return value.decode("utf-8", "replace")
        return self.properties.get(name)  # RocketMQ skips an empty value: an earlier one may hold

    return property(get, doc=doc)


class StoredMessage:
    """A record read back from the commit log. Field names are the export's, in snake_case.

    It keeps the record's bytes and its unpacked header; the body, topic and properties are cut
    out of the bytes when first asked for, so a pull costs little more than the copy it needs.
    """

    __slots__ = ("_h", "_l", "_props", "_raw", "_topic")

    def __init__(self, header: tuple, raw: bytes, layout: tuple[int, int, int, int, int]) -> None:
        self._h = header  # the unpacked header: total, magic, crc, queueId, flag, queueOffset, ...
        self._raw = raw  # the record's bytes
        self._l = layout  # body start, topic start, topic length, properties start, properties length
        self._topic: str | None = None
        self._props: dict[str, str] | None = None

    store_size: int = _header_field(0, "TOTALSIZE: the record's length in bytes.")
    body_crc: int = _header_field(2, "BODYCRC: the stored body's CRC32 & 0x7FFFFFFF (``body_crc_ok`` checks).")
    queue_id: int = _header_field(3, "QUEUEID: the queue of its topic.")
    flag: int = _header_field(4, "FLAG: the producer's int flag.")
    queue_offset: int = _header_field(5, "QUEUEOFFSET: its place in its queue (0: PREPARED, ROLLBACK).")
    commit_log_offset: int = _header_field(6, "PHYSICALOFFSET: where the record starts in the commit log.")
    sys_flag: int = _header_field(7, "SYSFLAG: its bits (``rocketstore.codec.sysflag``).")
    born_timestamp: int = _header_field(8, "BORNTIMESTAMP: the producer's time, epoch ms.")
    born_host: str = _host_field(9, "BORNHOST as ``ip:port`` (``[ip]:port`` for IPv6).")
    store_timestamp: int = _header_field(10, "STORETIMESTAMP: when the store appended it, epoch ms.")
    store_host: str = _host_field(11, "STOREHOST as ``ip:port`` (``[ip]:port`` for IPv6).")
    reconsume_times: int = _header_field(12, "RECONSUMETIMES: how often it was sent back for a retry.")
    prepared_transaction_offset: int = _header_field(13, "PREPAREDTRANSACTIONOFFSET: the half message it ends.")
    body_len: int = _header_field(14, "BODYLENGTH: the stored body's length.")

    @property
    def version(self) -> int:
        """1 for V1 records (1-byte topic length), 2 for V2."""
        return 2 if self._h[1] == -626843477 else 1

    @property
    def body(self) -> bytes:
        """The body as stored (compressed when ``sys_flag`` says so: ``decompressed_body``)."""
        start = self._l[0]
        return self._raw[start : start + self._h[14]]

    @property
    def topic(self) -> str:
        """The record's topic."""
        topic = self._topic
        if topic is None:
            _, at, length, _, _ = self._l
            topic = self._topic = _topic_text(self._raw[at : at + length])
        return topic

    @property
    def raw(self) -> bytes:
        """The whole record, exactly as stored."""
        return self._raw

    @property
    def properties_raw(self) -> bytes:
        """The stored properties bytes, exactly as on disk."""
        _, _, _, at, length = self._l
        return self._raw[at : at + length]

    @property
    def properties(self) -> dict[str, str]:
        """The stored properties as a dict (decoded when first asked for)."""
        props = self._props
        if props is None:
            props = self._props = decode_properties(self.properties_raw.decode("utf-8", "replace"))
        return props

    tags: str | None = _stored_property(TAGS, "The ``TAGS`` property.")  # type: ignore[assignment]
    keys: str | None = _stored_property(KEYS, "The ``KEYS`` property (space separated keys).")  # type: ignore[assignment]
    uniq_key: str | None = _stored_property(UNIQ_KEY, "The ``UNIQ_KEY`` property (the client's message id).")  # type: ignore[assignment]

    @property
    def msg_id(self) -> str:
        """The offset message id (store host + commit-log offset), upper-case hex."""
        return offset_msg_id(self._h[11], self._h[6])

    @property
    def born_host_raw(self) -> bytes:
        """BORNHOST as stored: the address (4 or 16 bytes), then the port (4)."""
        return self._h[9]

    @property
    def store_host_raw(self) -> bytes:
        """STOREHOST as stored: the address (4 or 16 bytes), then the port (4)."""
        return self._h[11]

    @property
    def transaction_type(self) -> int:
        """The transaction bits of ``sys_flag``: NOT 0, PREPARED 4, COMMIT 8, ROLLBACK 12."""
        return self._h[7] & sf.TRANSACTION_ROLLBACK_TYPE

    def decompressed_body(self) -> bytes:
        """The body, decompressed when the COMPRESSED flag says it is (zlib, lz4 or zstd)."""
        return sf.decompress(self.body, self._h[7])

    def to_message(self) -> Message:
        """A ``Message`` that stores this one again as it was (hosts, times and flags kept)."""
        return self.copy_to(
            self.topic,
            self.properties,
            store_host=self.store_host,
            prepared_transaction_offset=self.prepared_transaction_offset,
        )

    def copy_to(
        self,
        topic: str,
        properties: dict[str, str],
        *,
        store_host: str | None = None,
        reconsume_times: int | None = None,
        prepared_transaction_offset: int = 0,
    ) -> Message:
        """A ``Message`` for ``topic`` with ``properties`` and this one's body, flag, producer
        sysFlag bits and born information (``store_host`` None: the storing store's own host;
        ``reconsume_times`` None: this one's)."""
        return Message(
            topic,
            self.body,
            properties=properties,
            flag=self.flag,
            born_timestamp=self.born_timestamp,
            born_host=self.born_host,
            store_host=store_host,
            sys_flag=self.sys_flag & sf.PRODUCER_BITS,
            reconsume_times=self.reconsume_times if reconsume_times is None else reconsume_times,
            prepared_transaction_offset=prepared_transaction_offset,
        )

    def to_json_dict(self) -> dict[str, Any]:
        """The export's JSON object (field names and order of rocketmq-vectors' expected.jsonl:
        ``codec.message_json.JSON_FIELDS``; a literal, the fastest way to build it)."""
        props = self.properties
        return {
            "topic": self.topic,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
            "commitLogOffset": self.commit_log_offset,
            "storeSize": self.store_size,
            "sysFlag": self.sys_flag,
            "flag": self.flag,
            "tags": props.get(TAGS),
            "keys": props.get(KEYS),
            "properties": dict(sorted(props.items())),
            "bodyCRC": self.body_crc,
            "bodyLen": self.body_len,
            "body": base64.b64encode(self.body).decode("ascii"),
            "bornTimestamp": self.born_timestamp,
            "bornHost": self.born_host,
            "storeTimestamp": self.store_timestamp,
            "storeHost": self.store_host,
            "reconsumeTimes": self.reconsume_times,
            "preparedTransactionOffset": self.prepared_transaction_offset,
            "msgId": self.msg_id,
            "uniqKey": props.get(UNIQ_KEY),
        }

    def body_crc_ok(self) -> bool:
        """Whether the stored body gives the stored BODYCRC."""
        return _crc_of(self.body) == self.body_crc

    def __repr__(self) -> str:
        return (
            f"StoredMessage(topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
            f"commit_log_offset={self.commit_log_offset}, body=<{self.body_len} bytes>)"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoredMessage) and self._raw == other._raw

    def __hash__(self) -> int:  # a stored record cannot change: by its bytes, as equality
        return hash(self._raw)
