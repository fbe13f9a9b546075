"""The ``rocketstore`` command line: inspect, export, import, query, verify, recover, produce, consume,
clean and spark (rebuild, verify, export).

It uses the store's public API only (the store never imports it). The entry point is
``rocketstore.cli.main:main`` and the click group ``rocketstore.cli.main:cli`` (for tests with
``click.testing.CliRunner``); ``python -m rocketstore.cli.main`` runs it too. Only ``os``, ``signal``
and ``sys`` are imported here (none of the commands' modules, so that running ``main`` with ``-m``
loads it only once), for the Ctrl-C handler below: while the command line loads, an interrupt
prints one line and exits with status 130.

One module per command group: ``common`` (options, opening the store), ``output`` (tables, JSON,
progress), ``inspect_cmd``, ``transfer`` (export, import), ``query_cmd``, ``check`` (verify,
recover), ``messaging`` (produce, consume), ``clean_cmd`` (clean, topic deletion, disk report),
``spark_cmd`` (the Spark jobs).
"""

import os as _os
import signal as _signal
import sys as _sys


def _interrupted_at_start(_signum: int, _frame: object) -> None:
    """Ctrl-C while the command line is still loading: one line and exit status 130, no traceback."""
    _os.write(2, b"interrupted\n")
    _os._exit(130)


# Loading click, rich and the commands takes a moment: a Ctrl-C then ends the run quietly, until
# main() puts Python's own handler back (the commands turn KeyboardInterrupt into exit status 130).
# Only for the console script (and ``python -m rocketstore.cli.main``, whose argv[0] is "-m" while
# it is being found): importing this package from a program leaves the program's handler alone.
if _os.path.basename((getattr(_sys, "argv", None) or [""])[0]) in ("rocketstore", "-m"):
    try:
        if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
            _signal.signal(_signal.SIGINT, _interrupted_at_start)
    except ValueError:  # not the main thread
        pass
