"""Value checks of :mod:`rocketstore.config` that follow what RocketMQ's Java does with a value.

* :func:`java_int` and :func:`java_double`: ``Integer.parseInt``/``Long.parseLong`` and
  ``Double.parseDouble``, not Python's more lenient ``int``/``float`` (``1_024``, ``nan``). The
  text is trimmed first; ``MixAll.properties2Object`` trims only strings (``Double.parseDouble``
  trims itself), so a broker.conf number or boolean with trailing blanks reads otherwise in
  RocketMQ: :func:`untrimmed` words the warning the loader gives.
* :func:`delete_hours`: ``deleteWhen`` as ``UtilAll.isItTimeToDo`` reads it.
* :func:`check_broker_ip` and :func:`resolve_broker_ip`: ``brokerIP1`` as
  ``new InetSocketAddress(brokerIP1, port)`` takes it: an IPv4 or IPv6 literal or a host name.
* :func:`delay_level_millis` and :func:`local_address`.
* :func:`refuse_unsupported`: the settings a writable store refuses.
"""

from __future__ import annotations

import ipaddress
import math
import re
import socket
from typing import TYPE_CHECKING

from rocketstore.errors import ConfigError, shown

if TYPE_CHECKING:  # config imports this module
    from rocketstore.config import StoreConfig

_JAVA_TRIM = "".join(map(chr, range(0x21)))  # String.trim: every char <= U+0020

_INT = re.compile(r"[+-]?\d+")  # Character.digit(c, 10): any Unicode decimal digit
_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:(?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
    r"|(?P<hex>0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+))[fFdD]?)"
)


def java_trim(text: str) -> str:
    return text.strip(_JAVA_TRIM)


# Character.isWhitespace is str.isspace but for the no-break spaces and NEL (a control character)
_NOT_JAVA_WHITESPACE = frozenset("\x85\xa0\u2007\u202f")


def java_is_blank(text: str | None) -> bool:
    """RocketMQ's ``UtilAll.isBlank``: None, empty, or only ``Character.isWhitespace`` characters."""
    return not text or all(c.isspace() and c not in _NOT_JAVA_WHITESPACE for c in text)


def join_surrogates(text: str) -> str:
    """``text`` with each UTF-16 surrogate pair (two escapes read one by one) as the one character
    Java's String holds; a lone surrogate stays."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def java_int_wrap(value: int) -> int:
    """``value`` wrapped around to a Java int, as Java's int arithmetic leaves a result."""
    return (value + 2**31) % 2**32 - 2**31


def java_int_sum(a: int, b: int) -> int:
    """``a + b`` of two Java ints, wrapped around to an int as Java's int arithmetic does."""
    return java_int_wrap(a + b)


def java_int(text: str) -> int | None:
    """``Integer.parseInt(text.trim())`` without the range check: None where Java throws."""
    text = java_trim(text)
    return int(text) if _INT.fullmatch(text) else None


def java_double(text: str) -> float | None:
    """``Double.parseDouble(text)`` (``0.5``, ``.5``, ``1e3``, ``0.5d``, ``0x1p3``, ``NaN``,
    ``Infinity``): None where Java throws (``nan``, ``1_0``, ``0x10``)."""
    text = java_trim(text)
    match = _DOUBLE.fullmatch(text)
    if match is None:
        return None
    body = re.sub(r"[fFdD]$", "", text)  # Java's float/double suffix (a hex body ends in its exponent)
    if match["hex"]:
        return float.fromhex(body)
    return float(body.replace("Infinity", "inf").replace("NaN", "nan"))


def untrimmed(name: str, text: str, default: object) -> str | None:
    """The warning for a broker.conf value RocketMQ reads otherwise because of the blanks around
    it (``Properties.load`` keeps trailing ones): ``Integer.parseInt``/``Long.parseLong`` refuse
    them (``properties2Object`` then keeps the default) and ``Boolean.parseBoolean`` reads
    false; rocketstore takes the trimmed value. None when RocketMQ reads it as rocketstore does."""
    ours = java_trim(text)
    if ours == text or type(default) not in (int, bool):
        return None
    if type(default) is bool and ours.lower() != "true":  # Java reads anything else as false too
        return None
    java = "false" if type(default) is bool else f"the default {default}"
    return f"{name}={text!r}: RocketMQ reads {java} here (it does not trim this value); rocketstore reads {ours!r}"


def finite_double(name: str, value: object) -> float:
    """A double key's value: Java's syntax, and a finite number (NaN or Infinity mean nothing as
    a ratio or threshold)."""
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a number, not {shown(value)}")
    if isinstance(value, str):
        number = java_double(value)
    elif isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an int past the doubles: no finite double holds it
            number = math.inf
    else:
        number = None
    if number is None:
        raise ConfigError(f"{name} must be a number (as Java's Double.parseDouble reads it), not {shown(value)}")
    if not math.isfinite(number):
        raise ConfigError(f"{name} must be a finite number, not {shown(value)}")
    return number


# -- deleteWhen ------------------------------------------------------------------------------


def java_split(text: str, separator: str) -> list[str]:
    """``text.split(separator)`` as Java's ``String.split`` gives it: trailing empty parts dropped
    (an empty ``text`` gives ``[]``, where Java gives ``[""]``)."""
    parts = text.split(separator)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def delete_hours(value: str) -> tuple[int, ...]:
    """``deleteWhen`` ("04", "04;05") -> its hours, as ``UtilAll.isItTimeToDo`` parses it:
    ``split(";")`` (trailing empty parts dropped) and ``Integer.parseInt`` of each part, which
    must be an hour 0..23. ConfigError otherwise: RocketMQ would throw at every check (or never
    match an hour) and files would never be deleted by time."""
    parts = java_split(value, ";")
    hours = []
    for part in parts:
        hour = int(part) if _INT.fullmatch(part) else None
        if hour is None or not 0 <= hour <= 23:
            raise ConfigError(
                f"deleteWhen {value!r}: {part!r} is not an hour; deleteWhen lists hours 0 to 23 "
                'separated by ";" (e.g. "04" or "04;16"), as RocketMQ reads it'
            )
        hours.append(hour)
    if not hours:
        raise ConfigError('deleteWhen is empty: it lists hours 0 to 23 separated by ";" (e.g. "04")')
    return tuple(hours)


# -- brokerIP1 -------------------------------------------------------------------------------

_HOST_NAME = re.compile(r"[\w-]+(?:\.[\w-]+)*\.?")


def _java_ipv4(text: str) -> str | None:
    """``IPAddressUtil.textToNumericFormatV4``: 1 to 4 decimal parts (leading zeros are decimal,
    not octal: ``010.0.0.1`` is 10.0.0.1); the last part fills the bytes left (``1.2.3`` is
    1.2.0.3). None when ``text`` is not such a literal."""
    if not text or len(text) > 15:
        return None
    parts = text.split(".")
    if len(parts) > 4 or not all(p.isdecimal() for p in parts):
        return None
    numbers = [int(p) for p in parts]
    if any(n > 0xFF for n in numbers[:-1]) or numbers[-1] >= 1 << (8 * (5 - len(parts))):
        return None
    packed = bytes(numbers[:-1]) + numbers[-1].to_bytes(5 - len(parts), "big")
    return str(ipaddress.IPv4Address(packed))


def _ip_literal(text: str) -> str | None:
    """The address an IP literal names (IPv6 with or without brackets), None for a host name;
    ConfigError for text that is neither."""
    ipv4 = _java_ipv4(text)
    if ipv4 is not None:
        return ipv4
    if text.startswith("[") or ":" in text:
        inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
        try:
            address = ipaddress.IPv6Address(inner)
        except ValueError:
            raise ConfigError(f"brokerIP1 {text!r} is not an IPv6 address") from None
        if address.ipv4_mapped is not None:  # Java's InetAddress makes it an Inet4Address
            return str(address.ipv4_mapped)
        return str(address)
    if not _HOST_NAME.fullmatch(text) or text.replace(".", "").isdecimal():
        raise ConfigError(f"brokerIP1 must be an IP address or a host name (the store host), not {shown(text)}")
    try:  # a name the C resolver reads as a number (0x7f.1, 0177.1) that Java would look up by name
        socket.inet_aton(text)
    except OSError:
        return None
    raise ConfigError(f"brokerIP1 {text!r}: not an IP address as RocketMQ (Java) reads one, nor a host name")


def check_broker_ip(text: str) -> None:
    """ConfigError unless ``text`` is an IP literal or could be a host name (not looked up)."""
    _ip_literal(text)


def resolve_broker_ip(text: str) -> str:
    """The address of ``brokerIP1``: the literal, else the name looked up as Java's
    ``InetAddress.getByName`` does (IPv4 preferred). ConfigError naming a name that does not resolve."""
    literal = _ip_literal(text)
    if literal is not None:
        return literal
    try:
        infos = socket.getaddrinfo(text, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"brokerIP1 {text!r} (the store host) does not resolve to an address: {exc}") from None
    addresses = [info[4][0] for info in infos if info[0] == socket.AF_INET]
    addresses += [info[4][0].partition("%")[0] for info in infos if info[0] == socket.AF_INET6]
    if not addresses:
        raise ConfigError(f"brokerIP1 {text!r} (the store host) does not resolve to an IPv4 or IPv6 address")
    return _ip_literal(addresses[0]) or addresses[0]


# -- messageDelayLevel and the local address ------------------------------------------------


_DELAY_UNITS = {"s": 1000, "m": 60000, "h": 3600000, "d": 86400000}
_DELAY_MAX = 1 << 62  # ms: a store time plus the delay (the unit's tags code) stays a long


def delay_level_millis(levels: str) -> tuple[int, ...]:
    """``messageDelayLevel`` ("1s 5s ... 2h") -> milliseconds per level (level 1 first).

    Read as RocketMQ's parseDelayLevel reads it: the levels are split at each single space (a
    second space, or a leading one, is an empty level, which fails its load), and each number is
    Java's ``Long.parseLong``, which takes no ``1_0`` and no blanks. A negative delay, or one past
    2**62 ms (whose delivery times would overflow a long), which Java would take, is refused too."""
    items = java_split(levels, " ")
    if not items:
        raise ConfigError('messageDelayLevel is empty: it needs at least one level (e.g. "1s 5s 10s")')
    millis = []
    for item in items:
        unit, text = item[-1:], item[:-1]  # Long.parseLong of all but the unit, which is one letter
        number = int(text) if unit in _DELAY_UNITS and _INT.fullmatch(text) else -1
        if not 0 <= number * _DELAY_UNITS.get(unit, 1) < _DELAY_MAX:
            raise ConfigError(
                f"messageDelayLevel {levels!r}: level {item!r} is not a number of 0 or more with a unit s, m, h "
                f"or d, of at most {_DELAY_MAX} ms; levels are separated by single spaces"
            )
        millis.append(number * _DELAY_UNITS[unit])
    return tuple(millis)


_local_address: str | None = None


def local_address() -> str:
    """The IPv4 address of the default route's interface, the default ``brokerIP1``; 127.0.0.1 if
    none. RocketMQ's RemotingUtil.getLocalAddress takes the first IPv4 address of any interface
    that is not 127.0.x or 192.168.x instead (the README tells such a host to set brokerIP1)."""
    global _local_address
    if _local_address is None:
        address = "127.0.0.1"
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
                address = s.getsockname()[0]
        except OSError:
            pass
        _local_address = address
    return _local_address


_UNSUPPORTED = {
    "enableLmq": "light message queues (INNER_MULTI_DISPATCH to %LMQ% queues)",
    "enableMultiDispatch": "multi-dispatch (INNER_MULTI_DISPATCH)",
    "enableDLegerCommitLog": "a DLedger commit log (its entries are framed differently)",
    "duplicationEnable": "duplication mode (DUP_INFO checks)",
    "enableConsumeQueueExt": "consume-queue ext files (consumequeue_ext: tags codes that are addresses in them)",
}


def refuse_unsupported(config: StoreConfig) -> None:
    """ConfigError for a RocketMQ feature this store does not have and a writable open would get
    wrong rather than refuse (reading such a store is fine), and for a ``brokerIP1`` host name that
    does not resolve (a writable store writes its address into every record)."""
    for key, what in _UNSUPPORTED.items():
        if config.get(key):
            raise ConfigError(f"{key}: {what} is not supported; a writable store would get it wrong")
    # 5.x's isEnableRocksDBStore: "defaultRocksDB" in any case keeps the consume queues in RocksDB
    if str(config.get("storeType")).lower() == "defaultrocksdb":
        raise ConfigError(
            f"storeType={config.get('storeType')}: consume queues in RocksDB are not supported; a writable store "
            "would write file consume queues beside them"
        )
    if config.broker_ip1:
        resolve_broker_ip(config.broker_ip1)
