"""argparse value types shared by the `sglc` subcommands (each error names what was expected)."""
from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An int >= 1 (counts, sizes)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def port(text: str) -> int:
    """A TCP port, 0..65535 (0 = any free port)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535 (0 = any free port), got {value}")
    return value
