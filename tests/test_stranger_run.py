"""A run folder from a stranger runs no code and cannot make guardeval write outside it or hang
(issue 27, items 1-3): its manifest's `guard_callable.module` is looked up as plain files, never
imported; a launch builds its partial folder through one descriptor, so a link planted there
is never written through; a FIFO or a device renamed over a cohort or prompt copy is refused,
not waited on. Real processes, real files, real signals."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, cli_env, run_cli

ZEN = "Beautiful is better than ugly"


@pytest.fixture(scope="module")
def python_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished python-guard run (the shipped keyword example, 320 calls in-process)."""
    run = tmp_path_factory.mktemp("python-run") / "run"
    r = run_cli("launch", "--cohort", "demo", "--guard", "python-example", "--reps", "1", "--run-dir", str(run),
                "--no-progress")
    assert r.code == 0, r.err
    return run


def _renamed_module(run: Path, module: str) -> None:
    """A stranger's manifest: `guard_callable.module` names other code, the manifest re-hashed."""
    from harness.run.manifest import manifest_with_hash

    m = json.loads((run / "manifest.json").read_text())
    m["guard_callable"]["module"] = module
    (run / "manifest.json").write_text(json.dumps(manifest_with_hash(m), indent=2))


def _cli_in(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # `python -m` puts the current folder first on sys.path, as a user typing in that folder has it.
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                          env=cli_env(env), cwd=cwd, timeout=300)


@pytest.mark.parametrize("module", ["this.x", "evilpkg.x", "evilpkg"])
def test_read_commands_never_import_what_a_strangers_manifest_names(tmp_path, python_run, module):
    run = tmp_path / "run"
    shutil.copytree(python_run, run)
    _renamed_module(run, module)
    marker = tmp_path / "ran"
    # A package in the folder the commands are typed in, which announces itself when imported.
    pkg = tmp_path / "evilpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('imported'); print('EVIL RAN')\n")
    commands = [("verify", str(run)), ("verify", str(run), "--json"), ("status", str(run)),
                ("estimate", str(run), "--allow-skipped", "--n-boot", "200"),
                ("report", str(run), "--allow-skipped"), ("export", str(run), "--allow-skipped", "--out", "-"),
                ("plan", str(run)), ("show", str(run), "0")]
    said = []
    for args in commands:
        r = _cli_in(tmp_path, *args)
        said.append((args, r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        assert ZEN not in r.stdout and "EVIL RAN" not in r.stdout + r.stderr, (args, r.stdout[:500])
        assert "Traceback" not in r.stderr, (args, r.stderr)
    assert not marker.exists(), said
    v = _cli_in(tmp_path, "verify", str(run))
    if module == "evilpkg":   # found as a file where an import would find it: hashed, never run
        assert v.returncode == 1 and "the source of evilpkg no longer matches the launch" in v.stdout, v.stdout
        return
    assert v.returncode == 1 and "skipped: callable source: callable source not checked here" in v.stdout, v.stdout
    assert _cli_in(tmp_path, "verify", str(run), "--allow-skipped").returncode == 0


def test_a_planted_submodule_is_hashed_not_run(tmp_path, python_run):
    """Found as files where an import would find them: compared (a mismatch), never executed."""
    run = tmp_path / "run"
    shutil.copytree(python_run, run)
    _renamed_module(run, "evilpkg.x")
    marker = tmp_path / "ran"
    (tmp_path / "evilpkg").mkdir()
    for name in ("__init__.py", "x.py"):
        (tmp_path / "evilpkg" / name).write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    r = _cli_in(tmp_path, "verify", str(run))
    assert r.returncode == 1 and "guard_callable: the source of evilpkg.x no longer matches the launch" in r.stdout
    assert not marker.exists()


def test_verify_of_a_guard_merely_off_pythonpath_says_what_to_set(tmp_path):
    """Issue 30's trip-up: a guard of one's own, verified in a shell without its PYTHONPATH."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "my_guard.py").write_text(textwrap.dedent('''
        def guard(inp):
            return '{"malicious_user_request": false, "third_party_attack": false, "current_action_harmfulness": 0}'
    '''))
    cfg = tmp_path / "g.toml"
    cfg.write_text('name = "mine"\nbackend = "python"\ncallable = "my_guard:guard"\nmodel = "rules"\n'
                   'prompt = "guardeval-json-v1"\n')
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", "demo", "--guard", str(cfg), "--reps", "1", "--run-dir", str(run),
                "--max-calls", "5", "--no-progress", env={"PYTHONPATH": f"{REPO}:{lib}"})
    assert r.code == 0, r.err
    assert run_cli("verify", str(run), env={"PYTHONPATH": f"{REPO}:{lib}"}).code == 0
    v = run_cli("verify", str(run))
    assert v.code == 1, v.out
    assert "callable source not checked here: module my_guard is not found on this machine's Python path" in v.out
    assert "set PYTHONPATH to the folder that holds my_guard.py" in v.out, v.out
