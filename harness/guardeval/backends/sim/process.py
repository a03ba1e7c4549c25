"""A sim-server in its own process, for tests, `guardeval demo` and benchmarks."""

from __future__ import annotations

import os
import select
import signal
import site
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _site_dirs() -> set[Path]:
    return {Path(p).resolve() for p in (*site.getsitepackages(), site.getusersitepackages())}


class SimServerProcess:
    """A sim-server in its own process (for tests, `guardeval demo` and benchmarks).

        with SimServerProcess(["--faults", "429=0.1"]) as sim:
            use(sim.base_url)        # http://127.0.0.1:PORT
    """

    def __init__(self, args: Sequence[str] = (), *, startup_timeout: float = 90.0,
                 stderr: Any = None, env: dict[str, str] | None = None) -> None:
        self.args = list(args)
        self.startup_timeout = startup_timeout
        self.stderr = stderr
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.base_url = ""

    def launch(self) -> SimServerProcess:
        """Start the process without waiting (start several, then `wait_ready` each)."""
        env = dict(os.environ if self.env is None else self.env)
        root = Path(__file__).resolve().parents[3]   # the folder that holds the `guardeval` package
        if root not in _site_dirs():
            # A source checkout: the child needs the checkout on its path. An installed package is
            # on it already (and site-packages on PYTHONPATH would come before the standard library).
            env["PYTHONPATH"] = str(root) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, "-m", "guardeval.backends.sim", *self.args],
                                     stdout=subprocess.PIPE, stderr=self.stderr, env=env)
        return self

    def wait_ready(self) -> SimServerProcess:
        """Read the first stdout line (`listening on URL`) and set `base_url`."""
        assert self.proc is not None and self.proc.stdout is not None, "launch() first"
        deadline = time.monotonic() + self.startup_timeout
        line = b""
        while b"\n" not in line:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            if not ready:
                self.stop()
                raise RuntimeError("sim-server did not announce its address in time")
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                code = self.proc.wait()
                raise RuntimeError(f"sim-server exited with code {code} before listening")
            line += chunk
        first = line.split(b"\n", 1)[0].decode()
        prefix = "listening on "
        if not first.startswith(prefix):
            self.stop()
            raise RuntimeError(f"unexpected first line from sim-server: {first!r}")
        self.base_url = first[len(prefix):]
        return self

    def start(self) -> SimServerProcess:
        return self.launch().wait_ready()

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        return self.proc.returncode

    def __enter__(self) -> SimServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
