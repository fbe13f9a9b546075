"""What the bench scripts share."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator


def positive_int(text: str) -> int:
    """An argparse type: an int of at least 1 (``--runs 0`` has no median)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def bench_parser(doc: str | None) -> argparse.ArgumentParser:
    """A bench script's parser: its docstring as the help, ``--dir`` and ``--runs``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="where the store is made (default: a temporary folder)")
    parser.add_argument("--runs", type=positive_int, default=3)
    return parser


@contextlib.contextmanager
def work_folder(given: str | None) -> Iterator[str]:
    """``given`` (made if missing, kept), or a temporary folder deleted afterwards."""
    folder = given or tempfile.mkdtemp(prefix="rocketstore-bench-")
    os.makedirs(folder, exist_ok=True)
    try:
        yield folder
    finally:
        if not given:
            shutil.rmtree(folder, ignore_errors=True)
