"""The "Your own Python guard" how-to runs as written: its guard module and its notebook code,
extracted from docs/how-to/python-guard.md, in a fresh folder and a fresh interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, cli_env

pytestmark = pytest.mark.slow

BLOCK = re.compile(r"<!-- readme-example: (?P<name>[\w.]+) -->\n```python\n(?P<code>.*?)\n```", re.DOTALL)


def blocks() -> dict[str, str]:
    found = {m["name"]: m["code"] + "\n" for m in BLOCK.finditer((REPO / "docs" / "how-to" / "python-guard.md").read_text("utf-8"))}
    assert set(found) == {"my_guard.py", "notebook"}, sorted(found)
    return found


def test_the_notebook_block_is_about_fifteen_lines() -> None:
    code = [line for line in blocks()["notebook"].splitlines() if line.strip()]
    assert 12 <= len(code) <= 18, len(code)


def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    found = blocks()
    (tmp_path / "my_guard.py").write_text(found["my_guard.py"])
    proc = subprocess.run([sys.executable, "-c", found["notebook"]], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "{'ok': 960}", proc.stdout
    effects = {ln.split()[0]: ln for ln in lines[1:5]}
    assert set(effects) == {"format_placebo", "marker_rewrite", "tool_alias", "combined"}, proc.stdout
    assert "+0.000" in effects["format_placebo"] and effects["tool_alias"].endswith("*"), proc.stdout
    assert lines[-1].endswith("of 960 blocked") and int(lines[-1].split()[0]) > 0, proc.stdout
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir() if not p.name.startswith("compare-"))
    assert len(runs) == 2 and any("my-guard" in r for r in runs) and any("python-example" in r for r in runs)
    # compare's files go into a folder of their own beside the runs, never into a run (issue 37).
    compared = [p for p in (tmp_path / "runs").iterdir() if p.name.startswith("compare-")]
    assert len(compared) == 1 and (compared[0] / "compare.html").is_file(), compared
    mine = next(p for p in (tmp_path / "runs").iterdir() if "my-guard" in p.name and not p.name.startswith("compare-"))
    assert (mine / "report.html").is_file()
