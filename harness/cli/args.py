"""argparse value types shared by the command groups (a bad value is a usage error, exit 2)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return v


def _float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def nonneg_float(text: str) -> float:
    v = _float(text)
    if v < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return v


def positive_float(text: str) -> float:
    v = _float(text)
    if v <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return v
