"""The README's set-up commands and CI agree; nothing under runs/ is tracked."""

from __future__ import annotations

import re
import subprocess

from conftest import REPO


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Set up a fresh machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_two_setup_commands_and_ci_runs_the_second():
    commands = _readme_commands()
    assert len(commands) == 2
    assert commands[0].endswith("guardeval demo")
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == commands[1]
    assert "pytest" in ci


def test_runs_folder_is_ignored_except_readme():
    probe = REPO / "runs" / "probe-not-tracked.jsonl"
    assert subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=REPO).returncode == 0
    assert subprocess.run(["git", "check-ignore", "-q", str(REPO / "runs" / "README.md")], cwd=REPO).returncode == 1
