"""Argument types shared by the commands' flags: a bad value is a usage error, naming it, while the flags parse."""

from __future__ import annotations

import argparse


def positive_int(text: str, expected: str = "a whole number") -> int:
    """`text` as an int >= 1; `expected` names what the flag takes, for the message on a non-number."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {expected}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value
