"""Reading and writing one config JSON file (spec section 10.3): ``ConfigManager.load`` and
``MixAll.string2File``.

* :func:`load_json_file` reads ``path`` and falls back to ``path + ".bak"`` like ``ConfigManager.load``.
* :func:`as_int`, :func:`as_bool` and :func:`as_dict`: a field of a file's beans as fastjson reads it.
* :func:`write_json_file` is RocketMQ 4.9.8's ``MixAll.string2File`` (``.tmp``, copy to ``.bak``,
  rename) made crash-safe with fsyncs; always UTF-8. A main file that cannot be read as a config
  file is kept aside as ``path + ".corrupt-<yyyyMMddHHmmssSSS>"`` before it is replaced.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from rocketstore.errors import CorruptStoreError, RocketStoreError, StoreFileError
from rocketstore.files.syscalls import fsync_dir
from rocketstore.meta import fastjson

__all__ = [
    "as_bool",
    "as_dict",
    "as_entry",
    "as_int",
    "as_table",
    "load_json_file",
    "read_json_file",
    "write_json_file",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Undecodable(Exception):
    """Internal: a config file exists but cannot be used."""


class _Unreadable(_Undecodable):
    """Internal: a config file exists but cannot be read (no permission, say): not its content."""

    def __init__(self, error: OSError) -> None:
        super().__init__(f"cannot read: {error}")
        self.error = error


def _read_config(path: str, convert: Callable[[Any], T] | None) -> tuple[bool, Any]:
    """``(False, None)`` for a missing/blank file, ``(True, value)`` when decoded; raises _Undecodable,
    or CorruptStoreError for a folder where the file belongs."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return False, None
    except IsADirectoryError:
        raise CorruptStoreError("should be a file", path) from None
    except OSError as exc:
        raise _Unreadable(exc) from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _Undecodable(f"not UTF-8: {exc}") from exc
    if not text.strip():
        return False, None
    try:
        value = fastjson.loads(text)
    except ValueError as exc:
        raise _Undecodable(f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise _Undecodable(f"holds a JSON {type(value).__name__}, not an object")
    if convert is None:
        return True, value
    try:
        return True, convert(value)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _Undecodable(f"unexpected content: {exc}") from exc


def _holds_config(path: str, convert: Callable[[Any], Any] | None) -> bool | None:
    """True when ``path`` decodes to a config, None when it is missing or blank, False otherwise."""
    try:
        found, _value = _read_config(path, convert)
    except _Undecodable:
        return False
    return True if found else None


def load_json_file(path: str | os.PathLike[str], convert: Callable[[Any], T] | None = None) -> Any:
    """Read a config file like ``ConfigManager.load``: ``path``, else ``path + ".bak"``.

    A missing, empty (or blank) or undecodable ``path`` falls back to the ``.bak``; a missing or empty
    ``.bak`` then means an empty config (``None``). An undecodable ``.bak`` (with ``path`` unusable)
    raises :class:`CorruptStoreError`. A config file must hold a JSON object; ``convert``, if given,
    turns it into the caller's form and its ``ValueError``/``TypeError``/``KeyError`` also count as
    "undecodable". A leftover ``path + ".tmp"`` is never read.
    """
    return read_json_file(path, convert)[0]


def read_json_file(
    path: str | os.PathLike[str], convert: Callable[[Any], T] | None = None, *, writable: bool = False
) -> tuple[Any, str | None]:
    """``load_json_file``'s value, and what is wrong with the file: None when it is usable, or it and
    its backup are both missing (a store without that config yet), else what loading fell back to
    (a blank file without a backup is a problem too: its content was lost).

    A file that is there but cannot be read (no permission, say) is not bad content: StoreFileError
    naming it for a backup, and for the main file when ``writable`` (its state would be lost: the
    store would load the older backup and fail on every write); a read-only load falls back."""
    path = os.fspath(path)
    main_error: str | None = None
    try:
        found, value = _read_config(path, convert)
        if found:
            return value, None
    except _Unreadable as exc:
        if writable:
            raise StoreFileError.of(exc.error, f"config file {path} cannot be read") from exc
        main_error = str(exc)
    except _Undecodable as exc:
        main_error = str(exc)
    bak = path + ".bak"
    try:
        found, value = _read_config(bak, convert)
    except _Unreadable as exc:
        raise StoreFileError.of(exc.error, f"the backup {bak} of config file {path} cannot be read") from exc
    except _Undecodable as exc:
        detail = f"{main_error}; " if main_error else "missing or empty; "
        raise CorruptStoreError(f"config file {detail}backup {bak}: {exc}", path) from None
    if found:
        wrong = (
            f"{main_error or 'missing or empty'}: the store loads the older state in its backup {os.path.basename(bak)}"
        )
    elif main_error is not None:
        wrong = f"{main_error}, and there is no backup: the store starts with this config empty"
    elif os.path.exists(path):  # blank: what a power cut leaves of a first, unsynced write
        wrong = "empty, and there is no backup: the store starts with this config empty"
    else:
        return None, None
    if main_error is not None:  # as ConfigManager.load logs it (the first write keeps the text aside)
        log.error("config file %s: %s", path, wrong)
    return (value if found else None), wrong


def _write_synced(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_json_file(
    path: str | os.PathLike[str], text: str, convert: Callable[[Any], Any] | None = None, known: str | None = None
) -> None:
    """Write ``text`` (UTF-8) to ``path`` the 4.9.8 way, crash-safe.

    ``path + ".tmp"`` is written and fsynced; the current content of ``path`` (if any, and if it
    reads as a config file: a blank or damaged one must not replace a good backup; ``convert``, the
    decoder the file is loaded with, also checks its shape, as :func:`load_json_file` does) is copied to
    ``path + ".bak"`` and fsynced (content that does not read as one is kept as
    ``path + ".corrupt-<time>"`` instead, so that no text is lost unseen); then ``.tmp`` replaces
    ``path`` atomically and the directory is fsynced. The parent directory is created when missing.
    ``known``: what this process last loaded or wrote there; a file holding exactly that is known
    to read and is not parsed again (a large consumerOffset.json took seconds).
    """
    path = os.fspath(path)
    tmp = path + ".tmp"
    try:
        _write_via_tmp(path, tmp, text, convert, known)
    except OSError as exc:
        if isinstance(exc, RocketStoreError):
            raise
        raise StoreFileError.of(exc, f"config file {path} cannot be written") from exc


def _write_via_tmp(path: str, tmp: str, text: str, convert: Callable[[Any], Any] | None, known: str | None) -> None:
    """``write_json_file``'s steps; a failure before the rename removes the ``.tmp`` it wrote."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, exist_ok=True)
        with contextlib.suppress(OSError):  # the new folder's own entry survives a power cut too
            fsync_dir(os.path.dirname(directory))
    _write_synced(tmp, text.encode("utf-8"))
    try:
        _back_up(path, convert, known)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    with contextlib.suppress(OSError):  # e.g. Windows cannot open a directory
        fsync_dir(directory)


def _back_up(path: str, convert: Callable[[Any], Any] | None, known: str | None) -> None:
    """Copy the current content of ``path`` to its ``.bak`` if it reads as a config file, else keep
    it aside (see :func:`write_json_file`)."""
    try:
        with open(path, "rb") as f:
            previous = f.read()
    except FileNotFoundError:
        return
    if not previous.strip():  # a blank file (a power cut after RocketMQ's unsynced write) replaces
        return  # no backup: the .bak may hold the only good state until the new file is in place
    holds = True if known is not None and previous == known.encode("utf-8") else _holds_config(path, convert)
    if holds:
        _write_synced(path + ".bak", previous)
    elif holds is False:
        _keep_aside(path, previous)


def _keep_aside(path: str, data: bytes) -> None:
    """Save the undecodable content of ``path`` as ``path + ".corrupt-<yyyyMMddHHmmssSSS>"``
    (local time, as RocketMQ names files) before it is replaced, and say so."""
    now = time.time_ns() // 1_000_000
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(now // 1000)) + f"{now % 1000:03d}"
    for n in itertools.count():
        aside = f"{path}.corrupt-{stamp}" + (f"-{n}" if n else "")
        try:
            with open(aside, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except FileExistsError:
            continue
        log.warning("config file %s could not be read; its content is kept as %s", path, aside)
        return


# -- bean fields as fastjson casts them (a ValueError makes the file undecodable) --------------


def as_int(value: Any, what: str, bits: int | None = None) -> int:
    """An integer (a string of digits too); with ``bits``, one that fits a Java int (32) or long
    (64), which fastjson needs to read it."""
    if isinstance(value, bool) or not isinstance(value, int):
        if not (isinstance(value, str) and value.lstrip("-").isdigit()):
            raise ValueError(f"{what} is not an integer: {value!r}")
        value = int(value)
    if bits is not None and not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise ValueError(f"{what} {value} is past a Java {'int' if bits == 32 else 'long'}")
    return value


def as_bool(value: Any, what: str, default: bool) -> bool:
    """A boolean bean field as fastjson reads it (TypeUtils.castToBoolean): JSON true/false, a
    number (1 is true), "true"/"false" in any case, "1"/"0", "Y"/"F" in any case, "T"/"N"; null,
    "" and "null" leave the field's default. ValueError for anything else."""
    if isinstance(value, bool):
        return value
    if value is None or value in ("", "null", "NULL"):
        return default
    if isinstance(value, int):
        return as_int(value, what, 32) == 1
    if isinstance(value, float):
        return math.isfinite(value) and int(value) == 1
    if isinstance(value, str):
        if value.lower() in ("true", "y") or value in ("1", "T"):
            return True
        if value.lower() in ("false", "f") or value in ("0", "N"):
            return False
    raise ValueError(f"{what} is not a boolean: {value!r}")


def as_dict(value: Any, what: str) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not a JSON object")
    return value


def as_table(obj: dict[Any, Any], key: str) -> dict[Any, Any]:
    """A config file's table ``key``, a JSON object; a file without it (or with null) is a
    ValueError: its load falls back to the backup. RocketMQ's decode throws on a null table
    (``putAll(null)``) and falls back too, but reads a file without the key as an empty table (the
    field keeps its initial map); RocketMQ never writes one, so rocketstore takes it for a damaged
    file rather than lose every topic, offset or group in it without a word."""
    if obj.get(key) is None:
        raise ValueError(f"no {key}")
    return as_dict(obj[key], key)


def as_entry(value: Any, what: str) -> dict[Any, Any]:
    """A table's entry, a JSON object: null is a ValueError (RocketMQ's tables are
    ConcurrentHashMaps, whose put of null throws: its load falls back to the backup)."""
    if value is None:
        raise ValueError(f"{what} is null")
    return as_dict(value, what)
