"""Typed errors raised by rocketstore.

Every error the package raises on purpose derives from :class:`RocketStoreError`, so a caller can
catch one type. Errors that describe bad arguments also derive from :class:`ValueError`.
"""

from __future__ import annotations

import json
import reprlib

__all__ = [  # the error classes (``shown`` is the package's own helper)
    "ConfigError",
    "CorruptStoreError",
    "DataLossError",
    "FlushError",
    "ImportLineError",
    "InvalidArgumentError",
    "InvalidGroupError",
    "InvalidMessageError",
    "InvalidTopicError",
    "MessageNotFoundError",
    "NoRoomForBlankError",
    "PutMessageError",
    "ReadOnlyStoreError",
    "RecordError",
    "RocketStoreError",
    "SinkInUseError",
    "StoreClosedError",
    "StoreFileError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreNotReadableError",
]

_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = 80


def shown(value: object) -> str:
    """``repr(value)`` cut to about 80 characters, for an error message: a value of megabytes
    given by mistake is not repeated whole."""
    return _SHOWN.repr(value)


def shown_json(value: object) -> str:
    """A value read from JSON as its JSON text (``false``, ``null``, ``"3"``), cut to about 80
    characters; ``shown`` for a value JSON cannot hold (a Spark row's)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return shown(value)
    return text if len(text) <= 80 else text[:76] + " ..."


class RocketStoreError(Exception):
    """Base class of every rocketstore error."""


class ConfigError(RocketStoreError, ValueError):
    """An unknown configuration key or a value of the wrong type or range."""


class InvalidTopicError(RocketStoreError, ValueError):
    """A topic name RocketMQ would refuse (it becomes a directory name)."""


class InvalidGroupError(RocketStoreError, ValueError):
    """A consumer group name RocketMQ would refuse (Validators.checkGroup)."""


class InvalidArgumentError(RocketStoreError, ValueError):
    """A store call given an argument of the wrong type or form (a str offset, a bad msgId, ...)."""


class InvalidMessageError(RocketStoreError, ValueError):
    """A message that cannot be stored as given (wrong types, bad property names, ...)."""


class StoreNotFoundError(RocketStoreError, FileNotFoundError):
    """No store at the path given: the folder holds no commit log and none of a store's files."""


class StoreLockedError(RocketStoreError):
    """Another process (or another open store object) already holds the store's lock."""


class StoreClosedError(RocketStoreError):
    """The store was shut down."""


class StoreNotReadableError(RocketStoreError):
    """Pulls are refused while the NOT_READABLE running flag is set (RocketMQ's getMessage
    returns null then)."""


class ReadOnlyStoreError(RocketStoreError):
    """A write was attempted on a store opened read-only."""


class CorruptStoreError(RocketStoreError):
    """A file of the store is not what RocketMQ's format allows (names the file)."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


class NoRoomForBlankError(CorruptStoreError):
    """The commit log ends in a segment filled to within 8 bytes of its end, leaving no room for
    the BLANK marker every writer leaves: RocketMQ's recovery (the store's too) reads nothing past
    it at any open, so a message stored after it would be lost at the next one. An open for
    writing refuses the store (a read-only one, an export's, serves what it holds)."""


class StoreFileError(RocketStoreError, OSError):
    """A file or folder of the store could not be used (no permission, say); names it, and keeps
    the OSError's ``errno`` and ``filename``."""

    @classmethod
    def of(cls, exc: OSError, context: str) -> StoreFileError:
        """``exc`` in the store's words: ``context``, then the system's reason and the file."""
        if exc.errno is None:
            return cls(f"{context}: {exc}")
        return cls(exc.errno, f"{context}: {exc.strerror}", exc.filename)


class RecordError(RocketStoreError):
    """A commit-log record could not be decoded."""


class PutMessageError(RocketStoreError):
    """Raised by ``PutResult.raise_for_status`` for a put that was not stored."""

    def __init__(self, status: str, detail: str = "") -> None:
        super().__init__(f"{status}: {detail}" if detail else status)  # PutResult.refusal
        self.status = status
        self.detail = detail


class FlushError(RocketStoreError):
    """Data could not be made durable (an OSError from the file system)."""


class MessageNotFoundError(RocketStoreError, LookupError):
    """No message where one was named (a commit-log offset, a msgId)."""


class ImportLineError(InvalidMessageError):
    """A line ``import_jsonl`` cannot store; the ``imported`` messages of the lines before it are stored."""

    def __init__(self, line: int, reason: str, imported: int) -> None:
        done = f"{imported} message(s) before it stored" if imported else "nothing stored"
        super().__init__(f"line {line}: {reason} (import stopped; {done})")
        self.line = line
        self.reason = reason
        self.imported = imported

    def __reduce__(self) -> tuple:  # pickled (to a Spark driver, say) by its own arguments
        return type(self), (self.line, self.reason, self.imported)


class SinkInUseError(RocketStoreError, ValueError):
    """A streaming sink (``sinkId``) of the store already belongs to another streaming query."""


class DataLossError(RocketStoreError, RuntimeError):
    """Messages a Spark query was to read are gone (removed by retention, a deleted topic or queue,
    a record that cannot be read) and ``failOnDataLoss`` is true."""
