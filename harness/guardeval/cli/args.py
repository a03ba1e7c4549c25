"""argparse value types shared by the command groups (a bad value is a usage error, exit 2)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from guardeval.terminal import safe

if TYPE_CHECKING:
    from guardeval.cohorts.limits import RowLimits
    from guardeval.run.integrity.verify_state import Verified


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return v


def concurrency(text: str) -> int:
    """`--concurrency N`: calls in flight, 1 to `MAX_CONCURRENCY` (a usage error names the range)."""
    from guardeval.run.launch_options import MAX_CONCURRENCY

    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer from 1 to {MAX_CONCURRENCY:,}, got {text!r:.40}") from None
    if not 1 <= v <= MAX_CONCURRENCY:
        raise argparse.ArgumentTypeError(f"{v:,} is out of range: calls in flight, an integer from 1 to "
                                         f"{MAX_CONCURRENCY:,}")
    return v


# Seeds are recorded in JSON (a manifest, a study, a result) as unsigned 64-bit integers, and
# numpy's generator takes no negative seed: one range for every command.
MAX_SEED = 2**64 - 1
# Bootstrap replicates: (replicates x quantities) floats are held at once; a million is far past
# the precision any estimate reports.
MAX_BOOTSTRAP = 1_000_000


def seed_value(text: str) -> int:
    """`--seed`: an integer from 0 to 2**64 - 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= v <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_SEED} (2**64 - 1)")
    return v


def bootstrap_n(text: str) -> int:
    """`--bootstrap`: replicates, 1 to MAX_BOOTSTRAP."""
    v = positive_int(text)
    if v > MAX_BOOTSTRAP:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BOOTSTRAP}")
    return v


def bounded_reps(text: str) -> int:
    """`--reps`: 1 up to the calls a run may have (the cohort then bounds it further)."""
    from guardeval.run.planning import MAX_CALLS

    v = positive_int(text)
    if v > MAX_CALLS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_CALLS} (the most calls a run may have)")
    return v


def name_list(text: str) -> list[str]:
    """`C1,C2,...`: a comma-separated list of names (`--family`)."""
    items = [t.strip() for t in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of names, got {text!r}")
    return items


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


def base_url(text: str) -> str:
    """`--base-url`: checked as the config's `base_url` is (never echoed: it may carry a password)."""
    from guardeval.backends.config import base_url_problem

    problem = base_url_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def row_limit_options(p: argparse.ArgumentParser) -> None:
    """`--max-row-bytes`, `--max-row-depth`: for the commands that read a cohort or a JSONL table."""
    from guardeval.cohorts.limits import DEFAULT_ROW_LIMITS, MAX_DEPTH_CEILING

    def depth(text: str) -> int:
        v = positive_int(text)
        if v > MAX_DEPTH_CEILING:
            raise argparse.ArgumentTypeError(f"must be <= {MAX_DEPTH_CEILING} (canonical JSON cannot hash deeper rows)")
        return v

    p.add_argument("--max-row-bytes", type=positive_int, default=DEFAULT_ROW_LIMITS.max_bytes, metavar="N",
                   help="refuse an input row (a line of a cohort, a table or rows file) longer than N bytes")
    p.add_argument("--max-row-depth", type=depth, default=DEFAULT_ROW_LIMITS.max_depth, metavar="N",
                   help="refuse an input row nested deeper than N levels")


def row_limits(args: argparse.Namespace) -> RowLimits:
    from guardeval.cohorts.limits import RowLimits

    return RowLimits(max_bytes=args.max_row_bytes, max_depth=args.max_row_depth)


def say_verified(run: object, verification: Verified, doing: str = "estimating") -> None:
    """One line on stderr: the run was verified before `doing` it (and which checks were
    skipped, allowed), or was not (--no-verify)."""
    if verification["checked"]:
        skipped = verification["skipped"]
        note = f" (skipped, allowed: {', '.join(s['check'] for s in skipped)})" if skipped else ""
        print(safe(f"guardeval: {run} verified before {doing}{note}"), file=sys.stderr)
    else:
        print(safe(f"guardeval: warning: {run} {doing} without verification (--no-verify)"), file=sys.stderr)


def say_problems(report: dict[str, Any]) -> None:
    """A verify report's problems and skipped checks, one line each on stdout (the report is the
    result, whether it passes or fails: the exit code says which)."""
    for p in report["problems"]:
        where = p["file"] + (f":{p['line']}" if p.get("line") else "")
        print(safe(f"{where}: {p['message']}"))
    for s in report["skipped"]:
        print(safe(f"skipped: {s['check']}: {s['reason']}"))
