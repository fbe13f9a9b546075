"""RunningFlags bits (spec 14.6): what the store refuses while they are set."""

NOT_READABLE = 1
NOT_WRITEABLE = 2
WRITE_LOGICS_QUEUE_ERROR = 4
WRITE_INDEX_FILE_ERROR = 8
DISK_FULL = 16

# isWriteable() is false while any of these is set; puts answer SERVICE_NOT_AVAILABLE
NOT_WRITEABLE_BITS = NOT_WRITEABLE | WRITE_LOGICS_QUEUE_ERROR | WRITE_INDEX_FILE_ERROR | DISK_FULL


def describe(flags: int) -> list[str]:
    """The names of the bits set in ``flags``."""
    names = {
        NOT_READABLE: "NOT_READABLE",
        NOT_WRITEABLE: "NOT_WRITEABLE",
        WRITE_LOGICS_QUEUE_ERROR: "WRITE_LOGICS_QUEUE_ERROR",
        WRITE_INDEX_FILE_ERROR: "WRITE_INDEX_FILE_ERROR",
        DISK_FULL: "DISK_FULL",
    }
    return [name for bit, name in names.items() if flags & bit]
