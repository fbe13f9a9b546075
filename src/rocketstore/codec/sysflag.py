"""SYSFLAG bits of a record (MessageSysFlag, spec 3.3) and body decompression."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, overload

from rocketstore.errors import RecordError

if TYPE_CHECKING:
    import numpy as np

COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_LZ4_TYPE = 0x100
COMPRESSION_ZSTD_TYPE = 0x200
COMPRESSION_ZLIB_TYPE = 0x300
COMPRESSION_TYPE_MASK = 0x700
# the bits a producer's message carries (the store sets the host and V2 bits itself)
PRODUCER_BITS = COMPRESSED_FLAG | MULTI_TAGS_FLAG | TRANSACTION_ROLLBACK_TYPE | COMPRESSION_TYPE_MASK


def transaction_value(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_ROLLBACK_TYPE


@overload
def goes_to_consume_queue(sys_flag: int) -> bool: ...
@overload
def goes_to_consume_queue(sys_flag: np.ndarray) -> np.ndarray: ...
def goes_to_consume_queue(sys_flag: int | np.ndarray) -> bool | np.ndarray:
    """NOT and COMMIT records are queued; PREPARED and ROLLBACK ones (the 0x4 bit) are not. For one
    flag, or per flag of an array of them."""
    return (sys_flag & TRANSACTION_PREPARED_TYPE) == 0


def compression_name(sys_flag: int) -> str | None:
    if not sys_flag & COMPRESSED_FLAG:
        return None
    kind = sys_flag & COMPRESSION_TYPE_MASK
    return {COMPRESSION_LZ4_TYPE: "lz4", COMPRESSION_ZSTD_TYPE: "zstd"}.get(kind, "zlib")


def decompress(body: bytes, sys_flag: int) -> bytes:
    """The body as the producer wrote it (type 0 counts as zlib, as for old messages)."""
    kind = compression_name(sys_flag)
    try:
        if kind is None:
            return body
        if kind == "zlib":
            return zlib.decompress(body)
        if kind == "lz4":
            import lz4.frame  # type: ignore[import-not-found]

            return lz4.frame.decompress(body)
        import zstandard  # type: ignore[import-not-found]

        return zstandard.ZstdDecompressor().decompress(body)
    except ImportError as exc:
        raise RecordError(f"the body is {kind}-compressed and the {exc.name} package is not installed") from None
    except Exception as exc:  # zlib.error, lz4 / zstd errors
        raise RecordError(f"the body does not {kind}-decompress: {exc}") from None
