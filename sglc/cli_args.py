"""argparse value types shared by the `sglc` subcommands (each error names what was expected)."""
from __future__ import annotations

import argparse
import json
import math
from typing import Any


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


def non_negative_int(text: str) -> int:
    """An int >= 0 (counts where 0 means "none")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def compile_budget(text: str):  # -> sglc.fsm.CompileBudget
    """``max_dfa_states=20000,max_compile_seconds=10`` (unnamed limits keep their defaults)."""
    from sglc.fsm import CompileBudget

    try:
        return CompileBudget.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def binding(text: str) -> tuple[str, Any]:
    """``NAME=JSON`` (``n=3``, ``topic="tea"``, ``choices=["a","b"]``) -> (name, value)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=JSON (e.g. n=3 or topic='\"tea\"'), got {text!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(
            f"the value of {name} must be JSON (a string needs quotes: {name}='\"...\"'), "
            f"got {value!r}: {err.msg}") from None


def temperature(text: str) -> float:
    """A sampling temperature: a finite float >= 0 (0 = greedy)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0 (0 = greedy), got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0 (0 = greedy), got {text}")
    return value
