"""Every benchmark starts the way BENCHMARKS.md runs it (`python benchmarks/NAME.py`, from the
repository root, no PYTHONPATH): its imports resolve and its options parse (`--help`). A script
that imported `tests.…` or `benchmarks.…` without the repository on its path failed here."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow

SCRIPTS = sorted(p.name for p in (REPO / "benchmarks").glob("*.py"))


def test_there_are_benchmarks() -> None:
    assert len(SCRIPTS) >= 18, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_benchmark_starts(script: str, tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--help"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "usage:" in r.stdout, (script, r.stderr[-2000:])
