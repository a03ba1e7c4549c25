"""A run held one way (issue 49 §3): the estimate path opens its run folder once and hands that
`Run` down; every command closes what it opened, never leaving it to the garbage collector.

Run in this process with the CLI's own `main`, so each RunFolder and Run made can be counted and
kept (a kept object cannot be closed by `__del__`: only an explicit close shows as closed)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from guardeval import api
from guardeval.cli.app import main
from guardeval.run.folder.folder import RunFolder
from guardeval.run.run import Run

from conftest import write_guard

pytestmark = pytest.mark.fast


@dataclass
class Made:
    folders: list[RunFolder] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)

    def left_open(self) -> list[str]:
        return [repr(f) for f in self.folders if not f.closed]


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[Made]:
    """Every RunFolder and Run constructed while the test runs, kept alive by the list."""
    seen = Made()
    folder_init, run_init = RunFolder.__init__, Run.__init__

    def counted_folder(self: RunFolder, *args: object, **kwargs: object) -> None:
        folder_init(self, *args, **kwargs)   # type: ignore[arg-type]
        seen.folders.append(self)

    def counted_run(self: Run, *args: object, **kwargs: object) -> None:
        run_init(self, *args, **kwargs)   # type: ignore[arg-type]
        seen.runs.append(self)

    monkeypatch.setattr(RunFolder, "__init__", counted_folder)
    monkeypatch.setattr(Run, "__init__", counted_run)
    yield seen
    for f in seen.folders:
        f.close()


def test_the_cli_estimate_opens_its_run_once(copy_run: Callable[[str], Path], made: Made,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    run = copy_run("run")
    assert main(["estimate", str(run), "--bootstrap", "200", "--allow-unpublishable"]) == 0, capsys.readouterr().err
    # One folder opened, one Run over it: the verification, the table, report.json and
    # report.html (with its re-check of the report) all read that one.
    assert (len(made.folders), len(made.runs)) == (1, 1), (made.folders, made.runs)
    assert made.left_open() == []
    assert (run / "report.html").is_file() and json.loads((run / "report.json").read_text())["source"]["verified"]


def test_the_api_estimate_opens_a_path_once_and_a_run_never(copy_run: Callable[[str], Path], made: Made) -> None:
    run = copy_run("run")
    api.estimate(run, n_boot=200, allow_unpublishable=True)
    assert (len(made.folders), len(made.runs)) == (1, 1) and made.left_open() == []
    with Run.using(run) as held:
        made.folders.clear()
        made.runs.clear()
        api.estimate(held, n_boot=200, allow_unpublishable=True, write=False)
        assert (made.folders, made.runs) == ([], [])   # the Run given is read, not opened again
        assert not held.folder.closed                     # and stays its owner's


def _call_id(run: Path) -> str:
    return json.loads((run / "schedule.jsonl").read_text().splitlines()[0])["call_id"]


# Each command that takes an existing run, with what it needs beside it (a second run for compare),
# and the exit it ends with: `plan` refuses this one-repetition pilot (exit 2) after reading it,
# which must close it as surely as success does.
COMMANDS: dict[str, tuple[Callable[[Path, Path, Path], list[str]], int]] = {
    "status": (lambda run, other, out: ["status", str(run)], 0),
    "verify": (lambda run, other, out: ["verify", str(run)], 0),
    "resume": (lambda run, other, out: ["resume", str(run), "--no-progress"], 0),
    "estimate": (lambda run, other, out: ["estimate", str(run), "--bootstrap", "200", "--allow-unpublishable"], 0),
    "compare": (lambda run, other, out: ["compare", str(run), str(other), "--bootstrap", "200", "--out", str(out),
                                         "--allow-unpublishable"], 0),
    "plan": (lambda run, other, out: ["plan", str(run)], 2),
    "report": (lambda run, other, out: ["report", str(run), "--out", str(out / "report.html")], 0),
    "show": (lambda run, other, out: ["show", str(run), _call_id(run)], 0),
    "export": (lambda run, other, out: ["export", str(run), "--out", str(out / "calls.csv")], 0),
    "replicate": (lambda run, other, out: ["replicate", str(run), "--guard", str(other.parent / "g.toml"),
                                           "--dry-run", "--no-preflight", "--run-dir", str(out / "replica")], 0),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_closes_the_runs_it_opened(command: str, copy_run: Callable[[str], Path], finished_run: Path,
                                                  tmp_path: Path, made: Made,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    run, other = copy_run("run"), copy_run("other")
    (tmp_path / "g.toml").write_bytes((finished_run.parent / "g.toml").read_bytes())
    if command == "report":
        assert main(["estimate", str(run), "--bootstrap", "200", "--allow-unpublishable"]) == 0
    out = tmp_path / "out"
    out.mkdir()
    made.folders.clear()
    made.runs.clear()
    argv, expected = COMMANDS[command]
    assert main(argv(run, other, out)) == expected, capsys.readouterr().err
    assert made.folders, f"{command} opened no run folder: the test would prove nothing"
    assert made.left_open() == [], f"{command} left run folders open for the garbage collector"


def test_a_replicates_plan_holds_its_parent_until_it_is_launched(copy_run: Callable[[str], Path], tmp_path: Path,
                                                                  sim, made: Made) -> None:
    # `api.plan_replicate` returns a plan that reads the parent's schedule again when it is
    # written: the plan holds the parent open, and `launch_plan` closes it (not the collector).
    run = copy_run("run")
    guard = write_guard(tmp_path / "other.toml", sim.base_url, name="other")
    planned = api.plan_replicate(run, guard, run_dir=tmp_path / "replica")
    assert made.left_open() == [repr(made.folders[0])]   # the parent, held by the plan
    result = api.launch_plan(planned)
    assert result.complete and made.left_open() == []
    assert (tmp_path / "replica" / "schedule.jsonl").read_bytes() == (run / "schedule.jsonl").read_bytes()
