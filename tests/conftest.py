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

from hostile_server import MARKUP, serving

REPO = Path(__file__).resolve().parent.parent
DEMO_COHORT = REPO / "cohorts" / "demo"
SHARED = REPO.parent / "shared"


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


@dataclass
class DemoRun:
    result: CliResult
    run: Path


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """`guardeval demo --json` once per session (960 calls against the simulated provider): the
    demo test checks its output, the report tests read its run folder."""
    run = tmp_path_factory.mktemp("demo") / "run"
    return DemoRun(run_cli("demo", "--run-dir", str(run), "--json", "--no-progress"), run)


# -- a run full of hostile text (report, show and export tests) ----------------------------------

HOSTILE_HTML = MARKUP
HOSTILE_TERM = "\x1b[2J\x1b]0;owned\x07\u202e"
HOSTILE_BASE = 'b<img src=x onerror="window.pwned=3">\u2028'


@pytest.fixture(scope="session")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 demo bases x 5 conditions x 2 repetitions, one base renamed to markup, markup and
    terminal escapes in every user request, answered by the hostile provider's `markup` mode
    (markup in every answer, as the content of about half); estimated."""
    from harness.cohorts.model import Condition, instance_hash, load_cohort, write_cohort

    root = tmp_path_factory.mktemp("hostile")
    demo = load_cohort(DEMO_COHORT)
    keep = demo.base_ids[:4]
    rows = []
    for r in demo.instances:
        if r["base_id"] not in keep:
            continue
        r = {**r, "user_request": r["user_request"] + " " + HOSTILE_HTML + HOSTILE_TERM}
        if r["base_id"] == keep[0]:
            r["base_id"] = HOSTILE_BASE
        r["instance_sha256"] = instance_hash(r)
        rows.append(r)
    cohort = write_cohort(root / "cohort", name="hostile", version="test", description="markup in every field",
                          conditions=[Condition(c.name, c.role, c.description, c.acts_on) for c in demo.conditions],
                          rows=rows)
    run = root / "run"
    with serving() as (base_url, _):
        guard = write_guard(root / "guard.toml", f"{base_url}/markup/v1", backend="openai-compatible", provider=None,
                            api_key_env=None, name="hostile-guard", model="hostile/model")
        r = run_cli("launch", "--cohort", str(cohort), "--guard", str(guard), "--reps", "2", "--seed", "5",
                    "--run-dir", str(run), "--no-progress")
        assert r.code == 0, r.err
    r = run_cli("estimate", str(run), "--bootstrap", "200")
    assert r.code == 0, r.err
    return run
