"""RunningFlags bits (spec 14.6): what the store refuses while they are set."""

from rocketstore.errors import InvalidArgumentError

NOT_READABLE = 1
NOT_WRITEABLE = 2
WRITE_LOGICS_QUEUE_ERROR = 4
WRITE_INDEX_FILE_ERROR = 8
DISK_FULL = 16

# isWriteable() is false while any of these is set; puts answer SERVICE_NOT_AVAILABLE
NOT_WRITEABLE_BITS = NOT_WRITEABLE | WRITE_LOGICS_QUEUE_ERROR | WRITE_INDEX_FILE_ERROR | DISK_FULL


_NAMES = {
    NOT_READABLE: "NOT_READABLE",
    NOT_WRITEABLE: "NOT_WRITEABLE",
    WRITE_LOGICS_QUEUE_ERROR: "WRITE_LOGICS_QUEUE_ERROR",
    WRITE_INDEX_FILE_ERROR: "WRITE_INDEX_FILE_ERROR",
    DISK_FULL: "DISK_FULL",
}
ALL_BITS = sum(_NAMES)


def describe(flags: int) -> list[str]:
    """The names of the bits set in ``flags``."""
    return [name for bit, name in _NAMES.items() if flags & bit]


def check_bits(bits: int) -> None:
    """InvalidArgumentError unless ``bits`` (an int) holds RunningFlags bits only."""
    if bits & ~ALL_BITS:
        known = ", ".join(f"{name} {bit}" for bit, name in _NAMES.items())
        raise InvalidArgumentError(f"set_running_flags: {bits} holds bits that are no RunningFlags bit ({known})")
