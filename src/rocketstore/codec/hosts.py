"""Socket addresses as RocketMQ stores them: address bytes then a 4-byte big-endian port.

Text form (the export's): ``a.b.c.d:port`` and ``[v6]:port`` with the IPv6 address written as
Java does, eight lower-case groups without leading zeros and without ``::`` compression.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from rocketstore.errors import InvalidMessageError, shown


@lru_cache(maxsize=4096)
def parse_host(text: str) -> bytes:
    """``"10.0.0.1:5000"`` or ``"[2001:db8::1]:5000"`` -> 8 or 20 bytes (address + port); an
    IPv4-mapped IPv6 address (``[::ffff:10.0.0.1]``) is the IPv4 address, as Java reads it."""
    if type(text) is not str:
        raise InvalidMessageError(f"a host address is a str ip:port or [ipv6]:port, not {shown(text)}")
    try:
        if text.startswith("["):
            addr, _, port = text[1:].partition("]:")
        else:
            addr, _, port = text.rpartition(":")
            if ":" in addr:  # an IPv6 address given without brackets
                raise ValueError
        ip = ipaddress.ip_address(addr)
        if ip.version == 6 and ip.ipv4_mapped is not None:  # Java's InetAddress makes it an Inet4Address
            ip = ip.ipv4_mapped
        packed = ip.packed
        if not (port.isascii() and port.isdigit()):  # int() takes " 80", "8_0", "+80", other scripts' digits
            raise ValueError
        number = int(port)
        if number > 0xFFFF:  # a Java InetSocketAddress port
            raise ValueError
    except ValueError:
        raise InvalidMessageError(f"not a host address ip:port or [ipv6]:port (port 0..65535): {shown(text)}") from None
    return packed + number.to_bytes(4, "big")


_MAPPED = bytes(10) + b"\xff\xff"  # the prefix of an IPv4-mapped IPv6 address (::ffff:a.b.c.d)


@lru_cache(maxsize=4096)
def format_host(raw: bytes) -> str:
    """8 or 20 stored bytes -> ``ip:port`` text (IPv6 in brackets, Java's uncompressed form). An
    IPv4-mapped IPv6 address is the IPv4 one, as Java's decoder (InetAddress.getByAddress) reads it."""
    addr, port = raw[:-4], int.from_bytes(raw[-4:], "big", signed=True)
    if len(addr) == 16 and addr[:12] == _MAPPED:
        addr = addr[12:]
    if len(addr) == 4:
        return f"{addr[0]}.{addr[1]}.{addr[2]}.{addr[3]}:{port}"
    groups = ":".join(f"{int.from_bytes(addr[i : i + 2], 'big'):x}" for i in range(0, 16, 2))
    return f"[{groups}]:{port}"


def is_v6(raw: bytes) -> bool:
    return len(raw) == 20
