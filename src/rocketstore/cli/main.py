"""The ``rocketstore`` command group and its entry point.

Exit codes: 0 success; 1 a check found problems (``verify``), a cut that drops intact records was
refused (``recover``), nothing was found (``query``) or messages could not be read (``export``),
also when stdout is closed early; 2 a usage error, a typed store error (``RocketStoreError``:
printed on stderr, no traceback) or a stdout that cannot be written (a full disk); 130
interrupted (Ctrl-C); 143 ``import`` or ``produce`` terminated (SIGTERM); 141 stdout closed early (``| head``)
under a command that is storing (``produce``, ``import``: what was stored is said on stderr); a
command that only reads or has stored all (and ``consume``, which commits only what it wrote out)
ends quietly with 0 then, or 1 for the problems it found before.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
from typing import Any

import click

from rocketstore import __version__
from rocketstore.cli import (
    _interrupted_at_start,
    check,
    clean_cmd,
    inspect_cmd,
    messaging,
    query_cmd,
    spark_cmd,
    transfer,
)
from rocketstore.cli.common import (
    echo_error,
    problems_found,
    with_notes,
)
from rocketstore.cli.output import print_json_error
from rocketstore.cli.stops import (
    Interrupted,
    OutputUnwritable,
    PipeClosed,
    forget_stored,
    silence_stdout,
    storing,
)
from rocketstore.errors import RocketStoreError

EXIT_ERROR = 2


_JSON = "rocketstore.json"  # ctx.meta: --json is on the command line


class _Group(click.Group):
    """A group that turns the store's typed errors into a message and exit status 2, and Ctrl-C
    into one line and exit status 130 (click's own answer is "Aborted!" and status 1, which
    ``verify`` and ``query`` use for their findings)."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            raise Interrupted() from None
        except BrokenPipeError:  # --help or --version into a closed pipe: done, quietly (click says 1)
            silence_stdout()
            raise SystemExit(0) from None

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_JSON] = "--json" in args
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        forget_stored()
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise with_notes(Interrupted(), exc) from None
        except click.ClickException as exc:  # also what click refuses while it reads a command's options
            if ctx.meta.get(_JSON):
                print_json_error(exc)
            raise
        except RocketStoreError as exc:
            echo_error(exc)
            ctx.exit(EXIT_ERROR)
        except BrokenPipeError:  # stdout closed early (``| head``)
            silence_stdout()
            if storing(ctx):  # cut short while storing: an interruption (the command said what it stored)
                raise PipeClosed() from None
            # a command that reads: done, quietly, as Unix tools are, with the status of what it found
            ctx.exit(check.EXIT_PROBLEMS if problems_found(ctx) else 0)
        except OSError as exc:  # a file the store needs cannot be read or written
            echo_error(exc)
            ctx.exit(EXIT_ERROR)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(version=__version__, prog_name="rocketstore")
def cli() -> None:
    """Inspect, export, import, query, verify, recover and clean Apache RocketMQ message stores,
    and produce and consume messages.

    Every command takes the store root folder (STORE), --config broker.conf, --set KEY=VALUE for
    any MessageStoreConfig key by its RocketMQ name (e.g. --set mappedFileSizeCommitLog=65536;
    --set wins over --config) and --json for machine-readable output.
    """


for _command in (
    inspect_cmd.inspect,
    transfer.export,
    transfer.import_,
    query_cmd.query,
    check.verify,
    check.recover,
    clean_cmd.clean,
    messaging.produce,
    messaging.consume,
    spark_cmd.spark,
):
    cli.add_command(_command)


class _Output(io.BufferedWriter):
    """stdout's buffer, whose write errors other than a closed pipe say they are stdout's
    (``OutputUnwritable``): a full disk under it was an ``error: [Errno 28] ...`` that could be a
    store file's, then Python's exit status 120 and "Exception ignored" lines when it flushed at
    exit. Its file is pointed at /dev/null then, so that nothing fails again."""

    def write(self, data: Any) -> int:
        return _stdout_call(super().write, data)

    def flush(self) -> None:
        _stdout_call(super().flush)


def _stdout_call(call: Any, *args: Any) -> Any:
    """``call(*args)`` on stdout's buffer; an OSError but a closed pipe (or a full non-blocking one,
    ``_flush_at_exit``'s) is ``_unwritable``."""
    try:
        return call(*args)
    except (BrokenPipeError, BlockingIOError):
        raise
    except OSError as exc:
        raise _unwritable(exc) from None


def _unwritable(exc: OSError) -> OutputUnwritable:
    """The error of a stdout that cannot be written; stdout pointed at /dev/null, so that nothing
    fails again when what it still holds is flushed."""
    silence_stdout()
    return OutputUnwritable(exc)


def _output(stream: Any) -> Any:
    """stdout on an ``_Output`` buffer, also when it wrote straight to the raw file (``python -u``,
    PYTHONUNBUFFERED): a pipe's reader closing mid-write cuts a raw write short, and TextIOWrapper
    ignores the count, so a line consume --commit then committed was lost unnoticed. A buffered
    writer writes all of it or raises BrokenPipeError. A terminal's lines (and an unbuffered
    stdout's) still go out as they are written. A stdout that is no file (a test runner's) is kept."""
    buffer = getattr(stream, "buffer", None)
    raw = buffer if isinstance(buffer, io.RawIOBase) else getattr(buffer, "raw", None)
    if not isinstance(raw, io.FileIO):
        return stream
    stream.flush()
    line_buffering = stream.line_buffering or buffer is raw
    return io.TextIOWrapper(_Output(raw), encoding=stream.encoding, errors=stream.errors, line_buffering=line_buffering)


def _flush_at_exit(status: Any) -> Any:
    """The exit status once what stdout still holds is written: a closed pipe keeps the command's
    status (it ends as it would have); a stdout that cannot be written is an error (status 2). A
    stdout closed meanwhile (a UTF-8 wrapper over its buffer let go after a closed pipe) holds nothing."""
    if getattr(sys.stdout, "closed", False):
        return status
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    except OutputUnwritable as exc:
        exc.show()
        return exc.exit_code
    except BlockingIOError as exc:  # a non-blocking stdout main could not make blocking
        error = _unwritable(exc)
        error.show()
        return error.exit_code
    return status


def main(argv: list[str] | None = None) -> None:
    """The console-script entry point. Text that stdout's encoding cannot hold (a table on an ASCII
    terminal) is written with replacement characters; JSON output is UTF-8 whatever the encoding."""
    if sys.stdout is None:  # started with stdout closed (`>&-`): its descriptor may become a store file's
        if sys.stderr is not None:
            click.echo("error: stdout is closed: give the command a stdout (e.g. >/dev/null)", err=True)
        sys.exit(EXIT_ERROR)
    if signal.getsignal(signal.SIGINT) is _interrupted_at_start:  # loaded: Ctrl-C is the commands' now
        signal.signal(signal.SIGINT, signal.default_int_handler)
    fd, blocking = -1, True
    with contextlib.suppress(OSError, ValueError, AttributeError):  # a parent's O_NONBLOCK pipe (Node, some CI):
        fd = sys.stdout.fileno()
        blocking = os.get_blocking(fd)
        os.set_blocking(fd, True)  # writes wait for the reader, as on any pipe (given back at the end)
    sys.stdout = _output(sys.stdout)
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="replace")
    try:
        cli.main(args=argv, prog_name="rocketstore")
    except SystemExit as done:
        status = _flush_at_exit(done.code)
        if not blocking:  # the flag is the open file's, which the parent may share
            with contextlib.suppress(OSError):
                os.set_blocking(fd, False)
        sys.exit(status)


if __name__ == "__main__":
    main(sys.argv[1:])
