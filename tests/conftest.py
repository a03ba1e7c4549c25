"""Shared fixtures: a real simulated provider on 127.0.0.1 and a CLI runner in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from guardeval.backends.sim import SimServerProcess

from hostile_server import MARKUP, serving

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
                                        "(src/agent/agent_prompts.py) byte-exact there (docs/local-guards.md)",
    "reference/toolsafe-lfs-pins.txt": f"the pin lines of the Git LFS pointers of {TOOLSAFE}",
    "reference/openrouter-openapi.yaml": "save openapi/openapi.yaml of github.com/OpenRouterTeam/docs (commit "
                                         "c26125a5fa92cb52ac67f0c75b717229567db716) byte-exact there, its sha256 "
                                         "in MANIFEST.txt beside it",
}


# Every test file declares its tier at module level (`pytestmark = pytest.mark.fast` or
# `pytest.mark.slow`; a slow test inside a fast file marks itself). `-m "not slow"` is the
# development tier; .ci/run runs both. A file without a tier stops collection, so none is forgotten.
TIERS = ("fast", "slow")
# Tests that use the fixed ports of the shipped `sim` preset (127.0.0.1:8089, and 8090 in the
# tour) carry `pytest.mark.xdist_group(SIM_PRESET_PORTS)`: `--dist loadgroup` runs them all in one
# worker, one at a time. Every other test binds port 0 and works in its own tmp_path.
SIM_PRESET_PORTS = "sim-preset-ports"
# Tests that use the session's installed wheel and the demo run and study made with it (fixtures
# `installed`, `demo_run`, `demo_study`) share one worker, so each is built once per session.
INSTALLED_WHEEL = "installed-wheel"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    untiered = sorted({item.path.name for item in items
                       if not any(item.get_closest_marker(t) is not None for t in TIERS)})
    if untiered:
        raise pytest.UsageError("test files without a tier (add `pytestmark = pytest.mark.fast` or "
                                "`pytest.mark.slow` after the imports): " + ", ".join(untiered))


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
    env["PYTHONPATH"] = str(REPO / "harness") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("OPENROUTER_API_KEY", None)
    env.update(extra or {})
    return env


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
            cwd: Path | None = None) -> CliResult:
    proc = subprocess.run([sys.executable, "-m", "guardeval", *args], capture_output=True, text=True,
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
        "name": "sim-test", "backend": "openrouter", "model": "sim/server-profile",
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
    from guardeval.cohorts.model import Condition, load_cohort, write_cohort

    demo = load_cohort(DEMO_COHORT)
    keep = set(demo.base_ids[:16])
    out = tmp_path_factory.mktemp("cohorts") / "small"
    write_cohort(out, name="demo-small", version="test", description="first 16 demo bases",
                 conditions=[Condition(c.name, c.role, c.description, c.acts_on) for c in demo.conditions],
                 rows=[r for r in demo.instances if r["base_id"] in keep])
    return out


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory: pytest.TempPathFactory, small_cohort: Path) -> Path:
    """A finished run of the small cohort (80 calls, one repetition) against the simulated
    provider, some attempts answered 429 or with a malformed body and retried; one call at a time,
    so raw.jsonl's order is the same in every session. Made once per session: a test that changes
    it works on a copy (`copy_run`)."""
    base = tmp_path_factory.mktemp("finished")
    with SimServerProcess(["--seed", "3", "--faults", "429=0.1,malformed=0.05"], env=cli_env()) as sim:
        guard = write_guard(base / "g.toml", sim.base_url)
        run = base / "run"
        r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                    "--run-dir", str(run), "--concurrency", "1", "--no-progress")
        assert r.code == 0, r.err
    return run


@pytest.fixture
def copy_run(tmp_path: Path, finished_run: Path) -> Callable[[str], Path]:
    """`copy_run(name)`: a copy of the finished run under this test's tmp_path, to change."""
    import shutil

    def copy(name: str = "run") -> Path:
        dst = tmp_path / name
        shutil.copytree(finished_run, dst)
        return dst
    return copy


@dataclass
class DemoRun:
    result: CliResult
    run: Path


@dataclass
class Installed:
    """guardeval installed from a wheel of this tree into a fresh virtual environment."""

    venv: Path
    outside: Path     # a folder outside the repository: the commands' working directory

    def run(self, *args: str, timeout: float = 300) -> CliResult:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPENROUTER_API_KEY")}
        proc = subprocess.run([str(self.venv / "bin" / "guardeval"), *args], cwd=self.outside, env=env,
                              capture_output=True, text=True, timeout=timeout)
        return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A non-editable install: the wheel built from this tree, in a fresh virtual environment that
    finds its dependencies through a path entry to this environment's site-packages (a path
    entry only: this environment's .pth files, an editable install's among them, are not run)."""
    import shutil
    import site
    import sysconfig

    base = tmp_path_factory.mktemp("install")
    wheels = base / "wheels"
    # Built from a copy (setuptools writes build/ and *.egg-info into the tree it builds), with the
    # project's own build backend from this environment: no download, no build isolation.
    source = base / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "runs", "__pycache__", ".*_cache", ".hypothesis", "benchmarks"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-q", "-w", str(wheels), str(source)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    [wheel] = wheels.glob("guardeval-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    target_site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", purelib],
                                      capture_output=True, text=True, check=True).stdout.strip())
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    (target_site / "_guardeval_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                              "--no-deps", "--no-index", "-q", str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    outside = base / "elsewhere"
    outside.mkdir()
    return Installed(venv, outside)


@pytest.fixture(scope="session")
def demo_run(installed: Installed) -> DemoRun:
    """`guardeval demo --json` once per session (960 calls against the simulated provider), run
    by the installed wheel's `guardeval` in a folder outside the repository with no PYTHONPATH:
    the demo cohort, prompt and presets come from the package, and the simulated provider starts
    from it. The demo tests check its output, the report tests read its run folder."""
    run = installed.outside / "demo-run"
    return DemoRun(installed.run("demo", "--run-dir", str(run), "--json", "--no-progress"), run)


@dataclass
class DemoStudy:
    result: CliResult
    study: Path


@pytest.fixture(scope="session")
def demo_study(installed: Installed) -> DemoStudy:
    """`guardeval demo --study --json` once per session (the simulator's three profiles, 3 x 960
    calls on one schedule), run by the installed wheel's `guardeval` outside the repository."""
    study = installed.outside / "demo-study"
    return DemoStudy(installed.run("demo", "--study", "--study-dir", str(study), "--json", "--no-progress"), study)


# -- a run full of hostile text (report, show and export tests) ----------------------------------

HOSTILE_HTML = MARKUP
HOSTILE_TERM = "\x1b[2J\x1b]0;owned\x07\u202e"
HOSTILE_BASE = 'b<img src=x onerror="window.pwned=3">\u2028'


@pytest.fixture(scope="session")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 demo bases x 5 conditions x 2 repetitions, one base renamed to markup, markup and
    terminal escapes in every user request, answered by the hostile provider's `markup` mode
    (markup in every answer, as the content of about half); estimated."""
    from guardeval.cohorts.model import Condition, instance_hash, load_cohort, write_cohort

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
        # --no-preflight: this server speaks markup, not an OpenAI-compatible model listing.
        r = run_cli("launch", "--cohort", str(cohort), "--guard", str(guard), "--reps", "2", "--seed", "5",
                    "--run-dir", str(run), "--no-progress", "--no-preflight")
        assert r.code == 0, r.err
    # The markup server fails about half its calls: past the 2% limit, reported all the same.
    r = run_cli("estimate", str(run), "--bootstrap", "200", "--allow-unpublishable")
    assert r.code == 0, r.err
    return run
