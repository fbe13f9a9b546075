"""What stops a command from outside, and what it says then: Ctrl-C and SIGTERM (held off while a
message is stored and while the store shuts down), and a stdout closed early under a command
that stores. Exit statuses as a shell reports a signal: 128 + its number.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from typing import IO, Any

import click

from rocketstore.cli.common import CommandError, echo_error
from rocketstore.store import MessageStore

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended


class Interrupted(CommandError):
    """Ctrl-C (SIGINT): one line on stderr (what was done, when it matters) and exit status 130."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str = "interrupted", **details: Any) -> None:
        super().__init__(message)
        self.details = details  # for the --json error object (import: line, imported)

    def show(self, file: IO[Any] | None = None) -> None:
        echo_error(self, self.format_message())


EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE, as a shell reports a process a closed pipe ended
_STORING = "rocketstore.storing"  # ctx.meta: the command has opened a store to write to it


class PipeClosed(Interrupted):
    """stdout closed early (``| head``) under a command that stores: an interruption, not the quiet
    end a closed pipe is for a command that only reads. One line on stderr (the command says what
    it stored before it) and exit status 141, as Ctrl-C's 130."""

    exit_code = EXIT_PIPE_CLOSED

    def __init__(self) -> None:
        super().__init__("interrupted: stdout was closed (broken pipe)")


_done: list[str] = []  # what the running command said it stored (``done_storing``)


class OutputUnwritable(CommandError):
    """stdout cannot be written (a full disk under it, /dev/full, an I/O error): one line saying
    so, and what the command stored when it had stored all (only its report is lost), and exit
    status 2, rather than the error of a store file it could be taken for."""

    def __init__(self, exc: OSError) -> None:
        stored = f" ({_done[-1]}: only the report is lost)" if _done else ""
        super().__init__(f"stdout cannot be written: {exc.strerror or exc}{stored}")


def mark_storing() -> None:
    """Say that the running command stores (it has opened a store to write to it): from now on a
    closed stdout interrupts it (``PipeClosed``, exit status 141)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[_STORING] = True  # meta is shared by the whole context chain: the group sees it


def forget_stored() -> None:
    """A command begins: nothing said stored yet (``done_storing``)."""
    _done.clear()


def done_storing(what: str) -> None:
    """Say that the running command has stored all it was to store (its store is shut down), and
    ``what`` (said if its report cannot be written): a closed stdout from now on ends it quietly,
    as a command that only reads."""
    _done.append(what)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta.pop(_STORING, None)


def storing(ctx: click.Context) -> bool:
    """True when the command running in ``ctx`` has said it stores (``mark_storing``)."""
    return bool(ctx.meta.get(_STORING))


def silence_stdout() -> None:
    """Point stdout's descriptor at /dev/null, so that flushing what is still buffered at exit does
    not fail again (what the Python docs advise for SIGPIPE)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # not a real file (a test runner's) or closed
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class DeferInterrupts:
    """While SIGINT's handler is this object's (``installed``), Ctrl-C raises KeyboardInterrupt at
    once, except inside ``with guard:``, where it is raised when the block ends: a message being
    stored is stored and counted, or not stored at all. A SIGINT that is ignored (a shell starts a
    script's ``cmd &`` so: Ctrl-C at the terminal is not for it) stays ignored."""

    def __init__(self) -> None:
        self._inside = False
        self._pending = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[DeferInterrupts]:
        if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:  # nothing to defer: it stays ignored
            yield self
            return
        try:
            previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread: nothing to defer
            yield self
            return
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)

    def _handle(self, _signum: int, _frame: object) -> None:
        if self._inside:
            self._pending = True
        else:
            raise KeyboardInterrupt

    def __enter__(self) -> None:
        self._inside = True

    def __exit__(self, *exc: object) -> None:
        self._inside = False
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt


class DeferStops(DeferInterrupts):
    """``DeferInterrupts`` for SIGTERM too (`kill`, a service manager's stop): it lands between two
    messages as Ctrl-C does; ``signal`` says which came. An ignored SIGTERM stays ignored."""

    def __init__(self) -> None:
        super().__init__()
        self.signal = signal.SIGINT

    @contextlib.contextmanager
    def installed(self) -> Iterator[DeferInterrupts]:
        with super().installed():
            previous = None
            with contextlib.suppress(ValueError):  # not the main thread: nothing to defer
                if signal.getsignal(signal.SIGTERM) != signal.SIG_IGN:
                    previous = signal.signal(signal.SIGTERM, self._terminated)
            try:
                yield self
            finally:
                if previous is not None:
                    signal.signal(signal.SIGTERM, previous)

    def _terminated(self, signum: int, frame: object) -> None:
        self.signal = signal.SIGTERM
        self._handle(signum, frame)


def stopped_by(signum: int, message: str = "") -> Interrupted:
    """The error of a command stopped by ``signum`` (SIGINT or SIGTERM), ``message`` after what
    stopped it, with exit status 128 + ``signum`` as a shell reports it."""
    what = "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
    stopped = Interrupted(f"{what}: {message}" if message else what)
    stopped.exit_code = 128 + signum
    return stopped


@contextlib.contextmanager
def shut_down_whole(store: MessageStore, guard: DeferInterrupts) -> Iterator[MessageStore]:
    """``with store`` whose shutdown runs whole: a Ctrl-C (or a SIGTERM ``guard`` takes) during
    it is raised once it is done, so the store is closed cleanly (its abort file removed) rather
    than left to a recovery."""
    try:
        yield store
    except BaseException as exc:
        with guard:
            store.__exit__(type(exc), exc, exc.__traceback__)
        raise
    with guard:
        store.shutdown()
