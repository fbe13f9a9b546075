"""Output of the commands: stdout's tables (rich) and JSON, progress bars and warnings on stderr.

Tables go to stdout through rich; progress bars go to stderr, and only when both stdout and
stderr are terminals. With ``--json`` an error is also one JSON object on stdout.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from rocketstore.codec.message import StoredMessage
from rocketstore.export import dumps_row, export_row

_WIDE = 200  # columns for tables written to a file or a pipe


def _is_tty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # closed
        return False


def interactive() -> bool:
    """True when both stdout and stderr are terminals (progress bars are shown only then)."""
    return _is_tty(sys.stdout) and _is_tty(sys.stderr)


class _PipeConsole(Console):
    """A console whose closed pipe (``| head``) ends the command as every other output does: rich's
    own answer is SystemExit(1), the status ``verify`` and ``query`` give their findings; this one
    raises BrokenPipeError, which the command group turns into a quiet exit status 0."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(errno.EPIPE, "stdout is closed (broken pipe)")


def out_console() -> Console:
    """A console on the current stdout; wide and plain when stdout is not a terminal."""
    tty = _is_tty(sys.stdout)
    return _PipeConsole(file=sys.stdout, width=None if tty else _WIDE, highlight=False, soft_wrap=not tty)


def err_console() -> Console:
    return Console(file=sys.stderr, highlight=False)


def say(text: str) -> None:
    """One plain line on stdout."""
    click.echo(text)


def warn(text: str) -> None:
    """One plain line on stderr."""
    click.echo(text, err=True)


@contextlib.contextmanager
def utf8_stdout() -> Iterator[IO[str]]:
    """stdout, written as UTF-8 whatever its encoding says (JSON output is UTF-8)."""
    stream = sys.stdout
    encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
    if encoding == "utf8" or not hasattr(stream, "buffer"):
        yield stream
        stream.flush()
        return
    stream.flush()
    wrapper = io.TextIOWrapper(stream.buffer, encoding="utf-8", newline="\n")
    try:
        yield wrapper
        wrapper.flush()
    finally:
        wrapper.detach()


@contextlib.contextmanager
def replacing_file(path: str) -> Iterator[IO[str]]:
    """A UTF-8 text file written beside ``path`` (in its folder, hidden) and renamed over it only
    when the block ends without an error: an interrupted or failed run leaves no truncated file
    and keeps an earlier one. The file gets ``path``'s mode when it exists, else the umask's.
    A symbolic link is written through (its target is the file); what is not a regular file (a
    FIFO, a device such as /dev/null) is written to as it is, as ``>`` would, never replaced."""
    if _names_a_descriptor(path):  # /dev/stdout, /dev/fd/N: what the shell opened (a pipe, `>>`'s file)
        with _NamedFile(path, path, "ab") as direct:
            yield direct
        return
    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # as `>` says
            raise
        special = False  # not there yet: made beside and renamed
    if special:
        with _NamedFile(path, path, "wb") as direct:
            yield direct
        return
    path = os.path.realpath(path) if os.path.islink(path) else path
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".part")
    except OSError as exc:  # the folder is the problem: name it, not the hidden file
        raise type(exc)(exc.errno, exc.strerror, folder) from None
    try:
        with _NamedFile(fd, path, "wb") as f:
            yield f
        try:
            mode = os.stat(path).st_mode & 0o7777
        except OSError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


class _NamedFile(io.TextIOWrapper):
    """A UTF-8 text file (``\\n`` line ends) whose failed writes name ``shown``: a full disk or a
    quota's error says no file, and the file may be a hidden one written beside ``shown``."""

    def __init__(self, file: str | int, shown: str, mode: str) -> None:
        super().__init__(open(file, mode), encoding="utf-8", newline="\n")  # noqa: SIM115 (closed by close)
        self._shown = shown

    def _named(self, exc: OSError) -> OSError:
        return exc if exc.filename is not None else type(exc)(exc.errno, exc.strerror, self._shown)

    def write(self, text: str) -> int:
        try:
            return super().write(text)
        except OSError as exc:
            raise self._named(exc) from None

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            raise self._named(exc) from None

    def close(self) -> None:
        try:
            super().close()
        except OSError as exc:
            raise self._named(exc) from None


def _names_a_descriptor(path: str) -> bool:
    """Whether ``path`` names an open file descriptor (/dev/stdout, /dev/fd/N, /proc/PID/fd/N):
    written where it points, appending as the shell opened it, never replaced."""
    absolute = os.path.abspath(path)
    return (
        absolute in ("/dev/stdout", "/dev/stderr")
        or re.fullmatch(r"/(dev|proc/(self|\d+))/fd/\d+", absolute) is not None
    )


def json_error(exc: BaseException) -> dict[str, Any] | None:
    """The ``{"error": {...}}`` object --json writes on stdout for an error (the human ``error:``
    line still goes to stderr): its type, message and, for an import, the line and how many
    messages were stored. None for what is not an error (an exit status, a closed pipe)."""
    from rocketstore.errors import ImportLineError, RocketStoreError

    if isinstance(exc, SystemExit | click.exceptions.Exit | BrokenPipeError):
        return None
    details: dict[str, Any] = {}
    if isinstance(exc, KeyboardInterrupt):
        kind, message = "Interrupted", "interrupted"
    elif isinstance(exc, click.ClickException):
        kind, message = type(exc).__name__, exc.format_message()
        details = dict(getattr(exc, "details", {}))
    elif isinstance(exc, RocketStoreError | OSError):
        kind, message = type(exc).__name__, str(exc)
        if isinstance(exc, ImportLineError):
            details = {"line": exc.line, "imported": exc.imported}
    else:  # a bug: the traceback tells
        return None
    return {"error": {"type": kind, "message": message, **details}}


def print_json_error(exc: BaseException) -> None:
    """``json_error`` as one line on stdout (nothing when stdout is gone)."""
    obj = json_error(exc)
    if obj is None or sys.stdout is None:
        return
    import json

    if getattr(exc, "json_printed", False):  # a command's error, seen again by the group
        return
    # a stdout that cannot be written (OutputUnwritable, a ClickException) does not replace the error
    with contextlib.suppress(OSError, ValueError, click.ClickException), utf8_stdout() as out:
        out.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str) + "\n")
    with contextlib.suppress(AttributeError):
        exc.json_printed = True  # type: ignore[attr-defined]


def print_json(obj: Any) -> None:
    """One JSON document on stdout, in UTF-8 (non-ASCII kept)."""
    import json

    with utf8_stdout() as out:
        out.write(json.dumps(obj, ensure_ascii=False, indent=2, default=str) + "\n")


@contextlib.contextmanager
def progress_bar(
    description: str, total: int | None, *, unit_bytes: bool = False, enabled: bool = True
) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr; yields ``advance(n)``. Without a terminal (or ``enabled``) it shows nothing."""
    if not enabled or not interactive():
        yield _ignore
        return
    columns: list[Any] = [TextColumn("{task.description}"), BarColumn()]
    columns.append(DownloadColumn() if unit_bytes else TextColumn("{task.completed:,.0f}/{task.total:,.0f}"))
    columns.append(TimeRemainingColumn())
    with Progress(*columns, console=err_console(), transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield functools.partial(progress.advance, task)


def _ignore(_n: int) -> None:
    return None


def printable(text: str) -> str:
    """``text`` with control and other unprintable characters escaped (``\\x1b``, ``\\n``): a
    producer's text (tags, keys, a body) cannot move the cursor or recolour a terminal."""
    return text if text.isprintable() else "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def cell(value: Any) -> Text:
    """A table cell holding ``value`` as plain text (no markup interpretation, nothing unprintable)."""
    return Text("" if value is None else printable(str(value)))


def kv_table(title: str, rows: Iterable[tuple[str, Any]]) -> Table:
    """A two-column table; the title is plain text too (it names stores, whose paths may hold ``[``)."""
    table = Table(title=cell(title), show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in rows:
        table.add_row(cell(key), cell(value))
    return table


# -- messages ------------------------------------------------------------------------------------
MESSAGE_COLUMNS = (
    "topic",
    "queueId",
    "queueOffset",
    "commitLogOffset",
    "storeTimestamp",
    "tags",
    "keys",
    "msgId",
    "body",
)


def body_preview(msg: StoredMessage, width: int = 40) -> str:
    """The start of the (decompressed) body as text, control characters escaped."""
    try:
        body = msg.decompressed_body()
    except Exception:  # an unreadable compressed body: show the stored bytes
        body = msg.body
    text = body[: width * 4].decode("utf-8", "replace")
    text = printable(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def message_table(messages: Iterable[StoredMessage], title: str | None = None) -> Table:
    table = Table(title=None if title is None else cell(title), title_justify="left")
    for name in MESSAGE_COLUMNS:
        justify = "right" if name in ("queueId", "queueOffset", "commitLogOffset", "storeTimestamp") else "left"
        table.add_column(name, justify=justify, overflow="fold")
    for msg in messages:
        table.add_row(
            cell(msg.topic),
            cell(msg.queue_id),
            cell(msg.queue_offset),
            cell(msg.commit_log_offset),
            cell(msg.store_timestamp),
            cell(msg.tags),
            cell(msg.keys),
            cell(msg.msg_id),
            cell(body_preview(msg)),
        )
    return table


def print_messages(
    messages: list[StoredMessage],
    as_json: bool,
    title: str | None = None,
    written: Callable[[StoredMessage], None] | None = None,
) -> None:
    """Messages as export JSON lines (``--json``; no unit: no cqTagsCode nor cqSize) or as a table
    (none: the title alone, a line).
    ``written`` is called with each message once it is out on stdout (flushed): after its JSON
    line, or after the whole table."""
    if as_json:
        with utf8_stdout() as out:
            for msg in messages:
                out.write(dumps_row(export_row(msg)) + "\n")
                if written is not None:
                    out.flush()
                    written(msg)
    elif not messages:
        if title:
            say(title)
    else:
        out_console().print(message_table(messages, title))
        if written is not None:
            for msg in messages:
                written(msg)
