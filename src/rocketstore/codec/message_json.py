"""Messages as export JSON rows (``rocketstore export``'s lines, the Spark sink's ``asIs`` rows):
the fields in order, their ranges, and a ``Message`` made from a row keeping what the store does
not assign (``rocketstore import``, the sink)."""

from __future__ import annotations

import base64
from typing import Any

from rocketstore.codec import sysflag as sf
from rocketstore.codec.message import JAVA_INT, JAVA_LONG, Message, check_range
from rocketstore.codec.properties import KEYS, PROPERTY_CRC32, TAGS, UNIQ_KEY
from rocketstore.errors import InvalidMessageError, shown_json

# the export's fields (StoredMessage.to_json_dict), in order; an export through the consume queues
# adds cqTagsCode and cqSize
JSON_FIELDS = (
    *("topic", "queueId", "queueOffset", "commitLogOffset", "storeSize", "sysFlag", "flag", "tags", "keys"),
    *("properties", "bodyCRC", "bodyLen", "body", "bornTimestamp", "bornHost", "storeTimestamp", "storeHost"),
    *("reconsumeTimes", "preparedTransactionOffset", "msgId", "uniqKey"),
)


# Export fields stored in fixed-width record fields: (name, (lowest, highest)); JSON allows any number.
INT_FIELDS = (
    ("queueId", (0, JAVA_INT[1])),
    ("flag", JAVA_INT),
    ("sysFlag", JAVA_INT),
    ("bornTimestamp", JAVA_LONG),
    ("reconsumeTimes", JAVA_INT),
    ("preparedTransactionOffset", JAVA_LONG),
)


def check_int_fields(obj: dict[str, Any]) -> None:
    """InvalidMessageError unless every integer field is an integer that fits its record field."""
    for name, bounds in INT_FIELDS:
        value = obj.get(name)
        if value is None:
            continue
        try:
            if isinstance(value, (bool, str)) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            number = int(value)
        except (ValueError, TypeError, OverflowError):
            raise InvalidMessageError(f"{name} must be an integer, not {shown_json(value)}") from None
        check_range(name, number, bounds, value)


def message_from_json(obj: dict[str, Any]) -> Message:
    """An export JSON object -> a Message keeping what the store does not assign."""
    text = obj.get("body")
    if not isinstance(text, str):  # [], {}, false and 0 are no empty body: "" is
        raise InvalidMessageError(f'body must be a base64 string (an empty body is ""), not {shown_json(text)}')
    try:
        body = base64.b64decode(text, validate=True)
    except (ValueError, TypeError) as exc:
        raise InvalidMessageError(f"body is not base64: {exc}") from None
    return message_from_fields(obj, body)


def message_from_fields(obj: dict[str, Any], body: bytes) -> Message:
    """An export JSON object whose body is given decoded (a Spark row written ``asIs``) -> a
    Message keeping what the store does not assign, as :func:`message_from_json` builds it (the
    ``__CRC32#`` property a store appends is one such assigned field)."""
    sys_flag = int(obj.get("sysFlag") or 0) & sf.PRODUCER_BITS
    properties = obj.get("properties")
    properties = {} if properties is None else properties
    if not isinstance(properties, dict):
        raise InvalidMessageError("properties must be a JSON object")
    for name, value in properties.items():
        if not isinstance(value, str):
            raise InvalidMessageError(f"property {name!r}: its value must be a JSON string, not {shown_json(value)}")
    properties = dict(properties)
    properties.pop(PROPERTY_CRC32, None)  # the source record's checksum (enabledAppendPropCRC): the store's own
    for name, field in ((TAGS, "tags"), (KEYS, "keys"), (UNIQ_KEY, "uniqKey")):  # the export's own columns, alone
        value = obj.get(field)
        if value is None or value == "" or value == properties.get(name):  # "" is no tags, as Message(tags="")
            continue
        if not isinstance(value, str):
            raise InvalidMessageError(f"{field} must be a JSON string, not {shown_json(value)}")
        if name in properties:
            raise InvalidMessageError(f"{field} {shown_json(value)} does not agree with the properties' {name}")
        properties[name] = value
    for field in ("bornHost", "storeHost"):
        if obj.get(field) is not None and (not isinstance(obj[field], str) or not obj[field]):
            raise InvalidMessageError(f"{field} must be an ip:port string, not {shown_json(obj[field])}")
    return Message(
        obj.get("topic"),  # type: ignore[arg-type]
        body,
        properties=properties,
        flag=int(obj.get("flag") or 0),
        born_timestamp=_opt_int(obj, "bornTimestamp"),
        born_host=obj.get("bornHost"),
        store_host=obj.get("storeHost"),
        sys_flag=sys_flag,
        reconsume_times=int(obj.get("reconsumeTimes") or 0),
        prepared_transaction_offset=int(obj.get("preparedTransactionOffset") or 0),
    )


def _opt_int(obj: dict[str, Any], name: str) -> int | None:
    value = obj.get(name)
    return None if value is None else int(value)
