"""`python -m guardeval.backends.sim [options]`: the simulated provider in a process of its own."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from guardeval.backends.sim.config import add_arguments, config_from_args
from guardeval.errors import InputError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m guardeval.backends.sim",
                                     description="Run the simulated OpenRouter-style guard provider.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except InputError as exc:
        print(f"sim-server: {exc}", file=sys.stderr)
        return 2
    from guardeval.backends.sim.server import run_server

    return run_server(config)


if __name__ == "__main__":
    raise SystemExit(main())
