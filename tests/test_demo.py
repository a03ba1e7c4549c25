"""`guardeval demo` from a non-editable install: the wheel built from this tree, installed into
a fresh virtual environment, run from a folder outside the repository with no PYTHONPATH. The
demo cohort, the prompt, the presets and the schemas must come from the package, and the
simulated provider must start from it. One demo run (960 calls) serves every test here.

The new environment gets its dependencies by a path entry to this environment's site-packages
(a path entry only: this environment's .pth files, including an editable install's, are not run).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO


@dataclass
class Installed:
    venv: Path
    outside: Path     # a folder outside the repository: the commands' working directory

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPENROUTER_API_KEY")}
        return subprocess.run([str(self.venv / "bin" / "guardeval"), *args], cwd=self.outside, env=env,
                              capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
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


@pytest.fixture(scope="module")
def demo(installed: Installed) -> tuple[Path, dict]:
    run = installed.outside / "demo-run"
    r = installed.run("demo", "--run-dir", str(run), "--json", "--no-progress")
    assert r.returncode == 0, r.stderr
    return run, json.loads(r.stdout)  # stdout carries only the JSON


def test_the_installed_package_is_the_wheel(installed: Installed) -> None:
    code = "import guards, harness; print(harness.__file__); print(guards.__file__)"
    out = subprocess.run([str(installed.venv / "bin" / "python"), "-c", code], cwd=installed.outside,
                         capture_output=True, text=True, check=True).stdout.split()
    assert all(Path(p).is_relative_to(installed.venv) for p in out), out
    r = installed.run("--version")
    assert r.returncode == 0 and r.stdout.startswith("guardeval ")


def test_demo_json(demo: tuple[Path, dict], installed: Installed) -> None:
    run, est = demo
    assert est["n_calls"] == 960 and est["n_bases"] == 64
    assert est["baseline"] == "original" and est["placebo"] == "format_placebo"
    by = {c["condition"]: c for c in est["contrasts"]}
    assert set(by) == {"format_placebo", "marker_rewrite", "tool_alias", "combined"}
    for c in by.values():
        lo, hi = c["ci"]
        assert lo <= c["delta"] <= hi and -1 <= lo and hi <= 1
    # The simulated guard leans on threat-worded tool names; the placebo changes nothing that matters.
    assert by["tool_alias"]["ci"][1] < 0
    assert by["format_placebo"]["ci"][0] < 0 < by["format_placebo"]["ci"][1]
    assert by["format_placebo"]["delta_minus_placebo"] is None
    assert by["tool_alias"]["delta_minus_placebo"] is not None
    assert est["quarantine"]["count"] == 0
    for name in ("report.json", "report.md", "effects.png", "raw.jsonl", "decisions.jsonl"):
        assert (run / name).is_file()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["prompt"]["id"] == "guardeval-json-v1" and manifest["cohort"]["name"] == "demo"
    assert not (installed.outside / "prompts").exists() and not (installed.outside / "runs").exists()


def test_installed_verify_and_status(demo: tuple[Path, dict], installed: Installed) -> None:
    run, _ = demo
    r = installed.run("verify", str(run))
    assert r.returncode == 0 and r.stdout.startswith("verify: OK"), r.stderr
    r = installed.run("status", str(run), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["complete"]
