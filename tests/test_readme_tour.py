"""The README's quick tour runs exactly as written (issue 30 §1): its shell blocks, in order, in one
bash, from an empty folder, against the simulated provider — a wrong flag in the README fails
here. The tutorial shows the same blocks (checked equal), and the set-up commands are the ones
`.ci/run` runs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SIM_PRESET_PORTS, cli_env

pytestmark = pytest.mark.fast

SH = re.compile(r"```sh\n(.*?)\n```", re.DOTALL)


def _blocks(path: Path) -> list[str]:
    return SH.findall(path.read_text(encoding="utf-8"))


def _tour(path: Path) -> list[str]:
    return [b for b in _blocks(path) if not b.startswith("python3 -m venv")]


def test_the_readme_is_a_short_guide():
    # (Its two set-up commands and .ci/run: tests/test_project.py.)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert "**Contents:**" in readme and "## Quick tour" in readme and "## Where to go next" in readme


def test_the_tutorial_runs_the_same_commands():
    assert _tour(REPO / "docs" / "tutorial.md")[-4:] == _tour(REPO / "README.md")


@pytest.mark.xdist_group(SIM_PRESET_PORTS)
@pytest.mark.slow
def test_the_quick_tour_runs_as_written(tmp_path):
    script = "set -euo pipefail\n" + "\n".join(_tour(REPO / "README.md")) + "\n"
    env = cli_env()
    # `guardeval` on the PATH, as the first set-up command leaves it.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    proc = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=900)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)    # the simulators, should the tour stop before `kill`
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, err[-4000:]
    assert "100/960 calls decided" in out and "stopped by --max-calls (a pilot)" in out
    assert "verify: OK" in out and "In words:" in out
    assert (tmp_path / "runs" / "audit" / "report.html").is_file()
    assert (tmp_path / "runs" / "compare" / "compare.html").is_file() and "alias-sensitive is the more sensitive" in out
    assert "--retry-failed" in err and "retried" in err
    assert (tmp_path / "studies" / "demo" / "study.html").is_file()
