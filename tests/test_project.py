"""The README's set-up commands and CI agree; nothing under runs/ is tracked."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from conftest import REPO

pytestmark = pytest.mark.fast


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_two_setup_commands_and_ci_runs_the_second():
    commands = _readme_commands()
    assert len(commands) == 2
    assert commands[0].endswith("guardeval demo")
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == commands[1]
    assert "pytest" in ci


def test_the_development_tier_line_names_the_extra_it_needs():
    # Issue 47 §11: run after command 1 alone, `python -m pytest -m "not slow"` has no pytest,
    # nor the plugins pyproject's addopts and timeout ask for (xdist's -n, pytest-timeout).
    import tomllib

    readme = " ".join((REPO / "README.md").read_text().split())
    line = readme.split('`python -m pytest -m "not slow" -q` runs the development tier', 1)[1].split("\n\n", 1)[0]
    assert "`pip install -e '.[test]' && python -m pytest -m \"not slow\" -q`" in line, line[:600]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    extra = " ".join(project["project"]["optional-dependencies"]["test"])
    for plugin in ("pytest>=", "pytest-xdist", "pytest-timeout", "hypothesis", "pytest-asyncio"):
        assert plugin in extra, plugin


def test_runs_folder_is_ignored_except_readme():
    probe = REPO / "runs" / "probe-not-tracked.jsonl"
    assert subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=REPO).returncode == 0
    assert subprocess.run(["git", "check-ignore", "-q", str(REPO / "runs" / "README.md")], cwd=REPO).returncode == 1


def test_building_the_parser_imports_only_the_standard_library():
    """`guardeval --help`/`--version` start fast: each command module imports what its command
    needs when it runs (benchmarks/startup.py measures the time)."""
    import json
    import sys

    probe = ("import json, sys; from guardeval.cli.app import build_parser; build_parser(); "
             "ours = ('guardeval', '__main__', '_distutils_hack'); "
             "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names) - set(ours))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert [m for m in json.loads(out) if not m.startswith("__editable__")] == []   # an editable install's finder


def test_version_is_the_package_metadata(capsys):
    from importlib.metadata import version

    import guardeval
    from guardeval.cli import main

    assert guardeval.__version__ == version("guardeval")
    assert f'\nversion = "{guardeval.__version__}"\n' in (REPO / "pyproject.toml").read_text()
    assert "__version__ =" not in (REPO / "harness" / "guardeval" / "__init__.py").read_text()   # written once, in pyproject
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out == f"guardeval {guardeval.__version__}\n"


def test_a_hung_test_is_stopped_and_named(tmp_path):
    """The suite's per-test limit (pyproject's `timeout`) ends a hang with the test's name, not
    CI's clock. Run here with the project's own configuration and a short limit."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert 300 <= int(config["timeout"]) <= 1800                  # room for the slowest test, well inside CI's 90 min
    (tmp_path / "test_hangs.py").write_text("import time\n\n\ndef test_that_hangs():\n    time.sleep(600)\n")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path),
                           "-p", "no:cacheprovider", "-n", "0", "--timeout", "3", str(tmp_path / "test_hangs.py")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Timeout" in proc.stdout and "test_that_hangs" in proc.stdout, proc.stdout[-2000:]
    assert time.monotonic() - t0 < 120
