"""What the bench scripts share."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An argparse type: an int of at least 1 (``--runs 0`` has no median)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value
