"""Shared fixtures: a real simulated provider on 127.0.0.1 and a CLI runner in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from guards.sim import SimServerProcess

REPO = Path(__file__).resolve().parent.parent
DEMO_COHORT = REPO / "cohorts" / "demo"
DATA = REPO / "tests" / "data"     # synthetic stand-ins for third-party files, written for these tests
# Third-party files beside the checkout on the development machines only; a fresh clone has no
# ../shared, and the tests that read it skip, saying which file is missing and how to get it.
SHARED = REPO.parent / "shared"
TOOLSAFE = "github.com/MurrayTom/ToolSafe at commit 92a9540e6f2d8eb0ba04e907697e738e4cd6aec6"
HOW_TO_GET = {
    "data/asb": f"copy agent_task.jsonl, all_attack_tools.jsonl and all_normal_tools.jsonl from {TOOLSAFE} "
                "(benchmark/asb/data/) into it, with a MANIFEST.txt of 'BYTES SHA256 NAME' lines (docs/cohorts.md)",
    "reference/ts-guard-prompt-v2.txt": f"save instruction_ashellguardian_template_v2 of {TOOLSAFE} "
                                        "(src/agent/agent_prompts.py) byte-exact there (README, Local guards)",
    "reference/toolsafe-lfs-pins.txt": f"the pin lines of the Git LFS pointers of {TOOLSAFE}",
}


def shared_or_skip(rel: str) -> Path:
    """`../shared/<rel>` where the development machines have it; otherwise skip, naming the
    missing file and how a user obtains it."""
    path = SHARED / rel
    if not path.exists():
        pytest.skip(f"third-party file {path} is not present (a fresh clone has no ../shared): "
                    f"{HOW_TO_GET[rel]}")
    return path


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("OPENROUTER_API_KEY", None)
    env.update(extra or {})
    return env


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
            cwd: Path | None = None) -> CliResult:
    proc = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                          env=cli_env(env), timeout=timeout, cwd=cwd or REPO)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def sim_factory() -> Iterator[Callable[..., SimServerProcess]]:
    started: list[SimServerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> SimServerProcess:
        s = SimServerProcess(list(args), env=cli_env(env)).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def sim(sim_factory: Callable[..., SimServerProcess]) -> SimServerProcess:
    return sim_factory("--seed", "7")


def write_guard(path: Path, base_url: str, **overrides: object) -> Path:
    """A sim guard config for tests: short timeouts and backoff so fault tests stay fast."""
    fields: dict[str, object] = {
        "name": "sim-test", "backend": "openrouter", "model": "sim/shortcut-guard",
        "prompt": "guardeval-json-v1", "base_url": base_url, "api_key_env": "GUARDEVAL_TEST_KEY",
        "timeout_s": 2, "max_attempts": 8, "retry_initial_s": 0.01, "retry_max_s": 0.05,
        "price_in_per_mtok": 1.0, "price_out_per_mtok": 5.0,
    }
    fields.update(overrides)
    provider = fields.pop("provider", {"only": ["sim"], "allow_fallbacks": False})
    lines = []
    for k, v in fields.items():
        if v is None:
            continue
        lines.append(f"{k} = {_toml(v)}")
    if provider:
        lines.append("[provider]")
        lines += [f"{k} = {_toml(v)}" for k, v in provider.items()]  # type: ignore[union-attr]
    path.write_text("\n".join(lines) + "\n")
    return path


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


@pytest.fixture(scope="session")
def small_cohort(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 16 demo bases (80 instances): the same content, a quicker run."""
    from harness.cohorts.model import Condition, load_cohort, write_cohort

    demo = load_cohort(DEMO_COHORT)
    keep = set(demo.base_ids[:16])
    out = tmp_path_factory.mktemp("cohorts") / "small"
    write_cohort(out, name="demo-small", version="test", description="first 16 demo bases",
                 conditions=[Condition(c.name, c.role, c.description, c.acts_on) for c in demo.conditions],
                 rows=[r for r in demo.instances if r["base_id"] in keep])
    return out
