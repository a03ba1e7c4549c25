"""The how-to pages and the Inspect page run as written (issue 37, item 5): their shell blocks,
in one bash from an empty folder, against the simulated provider, so a page cannot drift from the
tool. The how-to pages are written for the tutorial's folder, so the tutorial's blocks run first
(they are the README's tour, which tests/test_readme_tour.py runs too). A port a page names is
rewritten to a free one (every occurrence alike), so that runs in parallel do not collide.

Not run, and why (each checked below to still be so): the install page's two set-up commands
(they build an environment; tests/test_project.py checks they are `.ci/run`'s) and the OpenRouter
audit (it needs a real key and sends paid calls; the same commands against the simulator are the
tutorial's)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, cli_env
from inspect_env import offline_tiktoken, require_inspect

pytestmark = pytest.mark.slow

SH = re.compile(r"```sh\n(.*?)\n```", re.DOTALL)
HOW_TO = REPO / "docs" / "how-to"
# The pages whose blocks are not run here, with the reason (the module docstring).
NOT_RUN = {"install.md": "builds an environment (tests/test_project.py)",
           "openrouter-audit.md": "needs an OpenRouter key and sends paid calls"}
# Run after the tutorial's blocks, in this order (export reads runs/audit; python-guard's block
# needs the page's own my-guard.toml and my_guard.py, written first from the page).
RUN = ["export.md", "replicate-compare.md", "gate-a-guard-update.md", "retry-failed.md", "python-guard.md"]


def blocks(path: Path) -> list[str]:
    return SH.findall(path.read_text(encoding="utf-8"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SIM_PRESET_PORT = "8089"   # guards/sim.toml's base_url


def with_free_ports(script: str) -> str:
    """Every port the script names (`--port N`, `127.0.0.1:N`) replaced by a free one, consistently;
    a `--guard sim` that relies on the preset's own port is given the new one as --base-url."""
    ports = sorted(set(re.findall(r"--port (\d+)", script)))
    mapping = {p: str(_free_port()) for p in ports}
    if SIM_PRESET_PORT in mapping:
        script = "\n".join(line.replace("--guard sim ", f"--guard sim --base-url http://127.0.0.1:{SIM_PRESET_PORT} ")
                           if "--guard sim " in line and "--base-url" not in line else line
                           for line in script.splitlines())
    return re.sub(r"(--port |127\.0\.0\.1:)(\d+)\b", lambda m: m.group(1) + mapping.get(m.group(2), m.group(2)), script)


def run_script(script: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 1200) -> tuple[int, str, str]:
    env = cli_env(env)
    # `guardeval`, `python` and `inspect` on the PATH, as the set-up command leaves them.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # A script that fails before its own `kill` still ends its simulators (they hold its stderr open).
    prologue = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
    proc = subprocess.Popen(["bash", "-c", prologue + with_free_ports(script) + "\n"], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # any simulator the script left running
        except ProcessLookupError:
            pass
    return proc.returncode, out, err


def test_every_how_to_page_with_commands_is_run_or_says_why_not():
    with_blocks = {p.name for p in HOW_TO.glob("*.md") if blocks(p)}
    assert with_blocks == set(RUN) | set(NOT_RUN), with_blocks
    for name in RUN:
        assert not any("<" in b and ">" in b for b in blocks(HOW_TO / name)), f"{name} has a placeholder"


def test_the_port_rewrite_keeps_one_port_per_simulator():
    got = with_free_ports("x --port 8093 > a &\ny --base-url http://127.0.0.1:8093 z\nw --port 8094")
    a, b = re.findall(r"--port (\d+)", got)
    assert a != "8093" and a != b and f"127.0.0.1:{a} z" in got
    got = with_free_ports("s --port 8089 &\nguardeval launch --guard sim --reps 3")
    port = re.findall(r"--port (\d+)", got)[0]
    assert port != "8089" and f"--guard sim --base-url http://127.0.0.1:{port} --reps 3" in got


def test_the_how_to_pages_run_as_written_after_the_tutorial(tmp_path):
    tutorial = [b for b in blocks(REPO / "docs" / "tutorial.md") if not b.startswith("python3 -m venv")]
    # The study block (and its `kill` of three simulators) is the README tour's; not needed here.
    setup = [b for b in tutorial if "guardeval demo --study" not in b]
    pages = [b for name in RUN for b in blocks(HOW_TO / name)]
    guard_page = (HOW_TO / "python-guard.md").read_text(encoding="utf-8")
    (tmp_path / "my-guard.toml").write_text(re.search(r"```toml\n(.*?)\n```", guard_page, re.DOTALL).group(1) + "\n")
    module = re.search(r"```python\n(# my_guard\.py\n.*?)\n```", guard_page, re.DOTALL).group(1)
    (tmp_path / "my_guard.py").write_text(module + "\n")
    code, out, err = run_script("\n".join([*setup, *pages, 'kill $(jobs -p)']), tmp_path)
    assert code == 0, err[-4000:]
    assert "tool_alias" in out and "calls decided" in out
    assert (tmp_path / "runs" / "compare-audit-robust" / "compare.html").is_file()
    # One replicate folder, resumed: no stray pilot beside it.
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["alias", "audit", "compare", "compare-audit-robust",
                                                                     "flaky", "mine", "robust"]
    assert "answered by: my_guard:guard" in out
    assert "gate: exit 3" in out and (tmp_path / "gate" / "compare.html").is_file()   # alias-sensitive trips it
    assert json.loads((tmp_path / "compare.json").read_text())["gate"]["tripped"], "the JSON names the rows"
    assert "answered by: robust" in out
    assert "a2aaaa13558743822ffd1614ed20bbcf" in out     # export.md's call, shown


def test_the_inspect_page_runs_as_written(tmp_path):
    """docs/inspect.md's walk-through: the shipped agent's log, a cohort, the exported task run by
    Inspect against the simulator, the estimate of its log, and the run compared with it."""
    require_inspect()
    tiktoken = offline_tiktoken(tmp_path / "tiktoken")
    page = REPO / "docs" / "inspect.md"
    walk = next(b for b in blocks(page) if "examples.inspect_agent" in b)
    work = tmp_path / "work"
    work.mkdir()
    code, out, err = run_script(walk, work, {"TIKTOKEN_CACHE_DIR": str(tiktoken),
                                             "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
                                             "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"),
                                             "INSPECT_DISPLAY": "none"})
    assert code == 0, (out[-2000:], err[-4000:])
    assert (work / "tasks" / "my-agent" / "task.py").is_file()     # tasks/ made by the export
    assert (work / "reports" / "my-agent" / "report.json").is_file()
    assert (work / "reports" / "run-vs-inspect" / "compare.html").is_file()
    # The Inspect input is named by its log, the run by the guard that answered.
    assert "openai-api/sim/server-profile: Inspect log " in out and "None (None)" not in out, out[-3000:]
    assert "shortcut: answered by shortcut" in out
