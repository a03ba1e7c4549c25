"""CLI: `guardeval sim-server` (the simulated provider; the server itself loads only when run)."""

from __future__ import annotations

import argparse
from typing import Any

from guardeval.backends.sim.config import add_arguments, config_from_args


def register(sub: Any) -> None:
    p = sub.add_parser("sim-server", help="run the simulated OpenRouter-style guard provider",
                       description="Run the simulated OpenRouter-style guard provider on loopback "
                                   "(docs/sim-server.md). The first stdout line is `listening on URL`.")
    add_arguments(p)
    p.set_defaults(func=cmd_sim_server)


def cmd_sim_server(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    from guardeval.backends.sim.server import run_server

    return run_server(config)
